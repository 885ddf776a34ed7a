"""What a process remembers of the tasks it put off for a dependency, and which of them a
closing breaker brings forward (pure logic, on explicit times)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core import putoffs
from relayflow.core.position import Position, TaskKind
from relayflow.core.putoffs import PutOffs
from relayflow.core.records import NextTask

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEP = "client-api"


def task(name: str, due_s: float) -> NextTask:
    position = Position(step_index=0, step="poll", kind=TaskKind.POLL, deferral=1)
    return NextTask(
        queue="flow-polls", task_id=name, run_at=T0 + timedelta(seconds=due_s), position=position
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_those_put_off_since_the_breaker_last_opened_come_forward_newest_first() -> None:
    memory = PutOffs()
    memory.add(DEP, task("before", 15), at(1))  # put off while the dependency still failed
    memory.add(DEP, task("since-1", 14), at(4))
    memory.add(DEP, task("since-2", 16), at(5))
    chosen = memory.take(DEP, since=at(3), now=at(6))
    assert [t.task_id for t in chosen] == ["since-2", "since-1"]


def test_those_due_much_later_come_forward_whenever_they_were_put_off() -> None:
    memory = PutOffs()
    memory.add(DEP, task("slow-poller", 100), at(1))
    memory.add(DEP, task("due-in-9s", 15), at(1))
    chosen = memory.take(DEP, since=at(3), now=at(6))
    assert [t.task_id for t in chosen] == ["slow-poller"]  # due more than 10 s from now
    assert putoffs.BRING_FORWARD_AFTER_S == 10.0


def test_none_due_within_a_second_and_each_task_once() -> None:
    memory = PutOffs()
    memory.add(DEP, task("due-now", 6.5), at(4))
    memory.add(DEP, task("twice", 20), at(4))
    memory.add(DEP, task("twice", 20), at(5))
    chosen = memory.take(DEP, since=at(3), now=at(6))
    assert [t.task_id for t in chosen] == ["twice"]


def test_taking_forgets_the_dependency_and_leaves_the_others() -> None:
    memory = PutOffs()
    memory.add(DEP, task("a", 20), at(4))
    memory.add("mailer", task("b", 20), at(4))
    assert len(memory.take(DEP, since=at(3), now=at(6))) == 1
    assert memory.take(DEP, since=at(3), now=at(6)) == []
    assert len(memory) == 1
    # never opened as far as this process knows: only those due much later come forward
    assert [t.task_id for t in memory.take("mailer", since=None, now=at(6))] == ["b"]
    assert len(memory) == 0


def test_memory_and_what_a_closing_brings_forward_are_bounded() -> None:
    memory = PutOffs(limit=5)
    for i in range(8):
        memory.add(DEP, task(f"t{i}", 20), at(4))
    assert len(memory) == 5  # the newest five
    chosen = memory.take(DEP, since=at(3), now=at(6))
    assert [t.task_id for t in chosen] == ["t7", "t6", "t5", "t4", "t3"]
    big = PutOffs(limit=putoffs.BRING_FORWARD_LIMIT * 2)
    for i in range(putoffs.BRING_FORWARD_LIMIT + 10):
        big.add(DEP, task(f"t{i}", 20), at(4))
    assert len(big.take(DEP, since=at(3), now=at(6))) == putoffs.BRING_FORWARD_LIMIT
