"""The gRPC front door: google.cloud.tasks.v2.CloudTasks over an insecure channel."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import StatusCode, aio

from relayflow.emulators.cloud_tasks import protos as p
from relayflow.emulators.cloud_tasks.engine import Engine
from relayflow.emulators.cloud_tasks.errors import ApiError

log = logging.getLogger(__name__)

SERVICE = "google.cloud.tasks.v2.CloudTasks"

Handler = Callable[[p.Proto, aio.ServicerContext[Any, Any]], Awaitable[p.Proto]]


def _unary(fn: Callable[[p.Proto], p.Proto | None], request_cls: Any, response_cls: Any) -> Any:
    """Wrap a synchronous engine call as an RPC; ApiError becomes the matching status."""

    async def handle(request: p.Proto, context: aio.ServicerContext[Any, Any]) -> p.Proto:
        try:
            result = fn(request)
        except ApiError as exc:
            await context.abort(exc.code, exc.message)
        except Exception:
            # A bug answers INTERNAL (what the service answers for its own faults), not UNKNOWN.
            log.exception("gRPC call failed")
            await context.abort(StatusCode.INTERNAL, "internal error in the Cloud Tasks emulator")
        return p.Empty() if result is None else result

    return grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=request_cls.FromString,
        response_serializer=response_cls.SerializeToString,
    )


def handler(engine: Engine) -> grpc.GenericRpcHandler:
    """The CloudTasks service; methods not listed (IAM, CMEK, batch) answer UNIMPLEMENTED."""
    methods = {
        "CreateQueue": _unary(engine.create_queue, p.CreateQueueRequest, p.QueuePb),
        "GetQueue": _unary(engine.get_queue, p.GetQueueRequest, p.QueuePb),
        "ListQueues": _unary(engine.list_queues, p.ListQueuesRequest, p.ListQueuesResponse),
        "UpdateQueue": _unary(engine.update_queue, p.UpdateQueueRequest, p.QueuePb),
        "DeleteQueue": _unary(engine.delete_queue, p.DeleteQueueRequest, p.Empty),
        "PauseQueue": _unary(engine.pause_queue, p.PauseQueueRequest, p.QueuePb),
        "ResumeQueue": _unary(engine.resume_queue, p.ResumeQueueRequest, p.QueuePb),
        "PurgeQueue": _unary(engine.purge_queue, p.PurgeQueueRequest, p.QueuePb),
        "CreateTask": _unary(engine.create_task, p.CreateTaskRequest, p.TaskPb),
        "GetTask": _unary(engine.get_task, p.GetTaskRequest, p.TaskPb),
        "ListTasks": _unary(engine.list_tasks, p.ListTasksRequest, p.ListTasksResponse),
        "DeleteTask": _unary(engine.delete_task, p.DeleteTaskRequest, p.Empty),
        "RunTask": _unary(engine.run_task, p.RunTaskRequest, p.TaskPb),
    }
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def start_server(engine: Engine, *, host: str, port: int) -> aio.Server:
    server = aio.server()
    server.add_generic_rpc_handlers((handler(engine),))
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC to {host}:{port}")
    await server.start()
    return server
