"""The raw protobuf classes of Cloud Tasks v2, taken from the installed google-cloud-tasks.

proto-plus builds these classes at import time and ships no static types for them, so the
emulator handles messages as `Proto` (Any) and keeps field access in a few modules.
"""

from __future__ import annotations

from typing import Any

from google.cloud import tasks_v2
from google.protobuf import empty_pb2, field_mask_pb2

Proto = Any

QueuePb: Any = tasks_v2.Queue.pb()
TaskPb: Any = tasks_v2.Task.pb()
HttpRequestPb: Any = tasks_v2.HttpRequest.pb()
RetryConfigPb: Any = tasks_v2.RetryConfig.pb()
RateLimitsPb: Any = tasks_v2.RateLimits.pb()
AttemptPb: Any = tasks_v2.Attempt.pb()

CreateQueueRequest: Any = tasks_v2.CreateQueueRequest.pb()
GetQueueRequest: Any = tasks_v2.GetQueueRequest.pb()
ListQueuesRequest: Any = tasks_v2.ListQueuesRequest.pb()
ListQueuesResponse: Any = tasks_v2.ListQueuesResponse.pb()
UpdateQueueRequest: Any = tasks_v2.UpdateQueueRequest.pb()
DeleteQueueRequest: Any = tasks_v2.DeleteQueueRequest.pb()
PauseQueueRequest: Any = tasks_v2.PauseQueueRequest.pb()
ResumeQueueRequest: Any = tasks_v2.ResumeQueueRequest.pb()
PurgeQueueRequest: Any = tasks_v2.PurgeQueueRequest.pb()
CreateTaskRequest: Any = tasks_v2.CreateTaskRequest.pb()
GetTaskRequest: Any = tasks_v2.GetTaskRequest.pb()
ListTasksRequest: Any = tasks_v2.ListTasksRequest.pb()
ListTasksResponse: Any = tasks_v2.ListTasksResponse.pb()
DeleteTaskRequest: Any = tasks_v2.DeleteTaskRequest.pb()
RunTaskRequest: Any = tasks_v2.RunTaskRequest.pb()

Empty: Any = empty_pb2.Empty
FieldMask: Any = field_mask_pb2.FieldMask

# Enum values, as plain ints.
QUEUE_RUNNING = 1
QUEUE_PAUSED = 2
VIEW_BASIC = 1
VIEW_FULL = 2
HTTP_POST = 1
HTTP_METHOD_NAMES = {
    1: "POST",
    2: "GET",
    3: "HEAD",
    4: "PUT",
    5: "DELETE",
    6: "PATCH",
    7: "OPTIONS",
}
METHODS_WITH_BODY = frozenset({1, 4, 6})
