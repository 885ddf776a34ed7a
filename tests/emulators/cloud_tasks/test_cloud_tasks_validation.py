"""relayflow/emulators/cloud_tasks/validation.py and paging.py: names, limits, page tokens."""

from __future__ import annotations

import pytest
from google.cloud import tasks_v2

from relayflow.emulators.cloud_tasks import validation as v
from relayflow.emulators.cloud_tasks.errors import InvalidArgument
from relayflow.emulators.cloud_tasks.paging import page

LOC = "projects/p/locations/us-central1"


@pytest.mark.parametrize("queue_id", ["a", "Queue-1", "x" * 100])
def test_valid_queue_ids(queue_id: str) -> None:
    assert v.split_queue_name(f"{LOC}/queues/{queue_id}") == (LOC, queue_id)


@pytest.mark.parametrize("queue_id", ["", "under_score", "dot.ted", "x" * 101])
def test_invalid_queue_ids_say_why(queue_id: str) -> None:
    with pytest.raises(InvalidArgument, match="queue"):
        v.split_queue_name(f"{LOC}/queues/{queue_id}")


@pytest.mark.parametrize("task_id", ["t", "under_score-1", "x" * 500])
def test_valid_task_ids(task_id: str) -> None:
    assert v.split_task_name(f"{LOC}/queues/q/tasks/{task_id}")[1] == task_id


@pytest.mark.parametrize("task_id", ["dot.ted", "sp ace", "x" * 501])
def test_invalid_task_ids_say_why(task_id: str) -> None:
    with pytest.raises(InvalidArgument, match="task id"):
        v.split_task_name(f"{LOC}/queues/q/tasks/{task_id}")


@pytest.mark.parametrize("url", ["ftp://h/x", "/relative", "http://", ""])
def test_urls_must_be_absolute_http(url: str) -> None:
    http = tasks_v2.HttpRequest.pb()(url=url)
    with pytest.raises(InvalidArgument, match="url"):
        v.check_http_request(http)


def test_a_body_needs_a_method_that_carries_one() -> None:
    http = tasks_v2.HttpRequest.pb()(url="http://h/x", http_method=2, body=b"x")  # GET
    with pytest.raises(InvalidArgument, match="POST, PUT and PATCH"):
        v.check_http_request(http)


@pytest.mark.parametrize("deadline_s", [14, 1801])
def test_dispatch_deadline_range(deadline_s: int) -> None:
    task = tasks_v2.Task.pb()()
    task.dispatch_deadline.FromSeconds(deadline_s)
    with pytest.raises(InvalidArgument, match="15 seconds and 30 minutes"):
        v.dispatch_deadline_us(task)


def test_dispatch_deadline_defaults_to_ten_minutes() -> None:
    assert v.dispatch_deadline_us(tasks_v2.Task.pb()()) == 600_000_000


def test_schedule_time_at_most_thirty_days_ahead() -> None:
    day_us = 86_400_000_000
    v.check_schedule_time(30 * day_us, 0)
    with pytest.raises(InvalidArgument, match="30 days"):
        v.check_schedule_time(30 * day_us + 1, 0)


def test_pages_follow_tokens_to_the_end() -> None:
    names = [f"n{i}" for i in range(5)]

    first, token = page(names, size=2, token="")
    second, token2 = page(names, size=2, token=token)
    third, token3 = page(names, size=2, token=token2)

    assert (first, second, third, token3) == (["n0", "n1"], ["n2", "n3"], ["n4"], "")


def test_a_bad_page_token_is_invalid() -> None:
    with pytest.raises(InvalidArgument, match="page_token"):
        page(["a"], size=1, token="%%%")


def test_header_values_may_not_hold_control_characters_but_may_hold_tabs() -> None:
    def check(headers: dict[str, str]) -> None:
        v.check_http_request(tasks_v2.HttpRequest.pb()(url="http://h/x", headers=headers))

    check({"X-Tab": "a\tb", "X-Utf8": "café"})  # HTAB and non-ASCII text are fine
    for value in ("a\rb", "a\nb", "a\x00b", "a\x7fb"):
        with pytest.raises(InvalidArgument, match="control character"):
            check({"X-A": value})
    for name in ("", "Sp ace", "Co:lon", "Ta\tb"):
        with pytest.raises(InvalidArgument, match="header name"):
            check({name: "v"})
