"""Changing a flow while flows run: each flow finishes on the version it started on while that
version is registered; new starts take the newest; a removed version ends DEFINITION_CHANGED,
its done steps undone by the newest version's compensations."""

from __future__ import annotations

from collections.abc import Iterable

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, Registry, StepContext
from relayflow.core.listing import FlowFilter
from relayflow.core.state import Status
from relayflow.core.versions import NOT_ENDED, VersionUse, dropped, dropped_newest, keeps
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=10.0, multiplier=1.0, max_interval_s=10.0, jitter=0.0)


def stock_after_two_polls(ctx: StepContext) -> dict[str, bool]:
    if ctx.poll < 2:
        raise NotReady(f"no stock yet ({ctx.poll})")
    return {"ok": True}


def v1() -> Flow:
    return Flow(
        name="orders",
        version=1,
        steps=(
            ActionStep("reserve", scripted({"id": "r"}), compensate=scripted({"released": 1})),
            PollStep("await_stock", stock_after_two_polls, policy=POLL),
            ActionStep("ship", scripted({"shipped": 1})),
        ),
    )


def v2() -> Flow:
    return Flow(
        name="orders",
        version=2,
        steps=(
            ActionStep("check_fraud", scripted({"score": 0})),
            ActionStep("reserve", scripted({"id": "r2"}), compensate=scripted({"released": 2})),
            PollStep("await_stock", scripted({"ok": True}), policy=POLL),
            ActionStep("ship", scripted({"shipped": 2})),
            ActionStep("notify", scripted({"sent": True})),
        ),
    )


def test_old_flows_finish_on_v1_while_new_starts_run_v2() -> None:
    h = Harness(v1())
    old = [h.start("orders", {}, flow_id=f"old-{i}") for i in range(3)]
    for flow_id in old:  # each has reserved and waits for stock: mid-poll
        h.deliver_next(flow_id)
        h.deliver_next(flow_id)
    assert {h.flow(f).position.step for f in old} == {"await_stock"}

    h.deploy([v1(), v2()])  # the new version beside the old one
    new = h.start("orders", {}, flow_id="new-1")
    h.run()

    for flow_id in old:
        record = h.flow(flow_id)
        assert (record.status, record.version) == (Status.SUCCEEDED, 1)
        assert list(record.outputs) == ["reserve", "await_stock", "ship"]
    fresh = h.flow(new)
    assert (fresh.status, fresh.version) == (Status.SUCCEEDED, 2)
    assert list(fresh.outputs) == ["check_fraud", "reserve", "await_stock", "ship", "notify"]
    assert h.results(new)[0]["version"] == 2


def test_removing_v1_while_a_flow_runs_on_it_ends_it_definition_changed_and_compensated() -> None:
    h = Harness(v1())
    flow_id = h.start("orders", {})
    h.deliver_next(flow_id)  # reserve: done
    h.deliver_next(flow_id)  # first poll: not ready
    assert h.flow(flow_id).position.step == "await_stock"

    h.deploy(v2())  # v1 is gone
    record = h.run(flow_id)

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DEFINITION_CHANGED"
    assert "no version 1 any more (registered: 2)" in record.result.message
    # `reserve` is undone by v2's compensation (found by step name, not by position)
    assert [c.step for c in h.calls if c.kind == "compensate"] == ["reserve"]
    assert h.calls_of("reserve", undo=True)[0].version == 1
    assert record.effects[0].state == "undone"
    assert h.results(flow_id)[0]["code"] == "DEFINITION_CHANGED"


# --- Removing a version safely: the flows not ended on each (relayflow.core.versions) -----------


def mid_poll(h: Harness, *flow_ids: str) -> None:
    for flow_id in flow_ids:  # reserve done, the first poll not ready: RUNNING on its version
        h.start("orders", {}, flow_id=flow_id)
        h.deliver_next(flow_id)
        h.deliver_next(flow_id)


def test_each_registered_version_shows_the_flows_not_ended_on_it() -> None:
    h = Harness(v1())
    mid_poll(h, "old-1", "old-2")
    h.deploy([v1(), v2()])
    h.start("orders", {}, flow_id="new-1")  # PENDING on v2, the newest

    shown = {(u.flow, u.version): u for u in h.versions()}

    assert set(shown) == {("orders", 1), ("orders", 2)}
    old, new = shown["orders", 1], shown["orders", 2]
    assert (old.total, old.running[Status.RUNNING], old.newest, old.registered) == (
        2,
        2,
        False,
        True,
    )
    assert (new.total, new.running[Status.PENDING], new.newest) == (1, 1, True)
    assert set(old.running) == {Status.PENDING, Status.RUNNING, Status.COMPENSATING}


def test_a_deploy_that_drops_a_version_flows_run_on_is_refused_until_they_end() -> None:
    h = Harness(v1())
    mid_poll(h, "old-1", "old-2")
    h.deploy([v1(), v2()])

    (refused,) = h.dropped_by(v2())  # what `relayflow versions check` fails on
    assert (refused.flow, refused.version, refused.total) == ("orders", 1, 2)
    assert h.dropped_by([v1(), v2()]) == []  # keeping v1 drops nothing

    h.run()  # they drain: each finishes on v1
    assert {h.flow(f).status for f in ("old-1", "old-2")} == {Status.SUCCEEDED}
    assert h.dropped_by(v2()) == []
    assert [u.total for u in h.versions()] == [0, 0]


def test_ended_flows_are_not_counted_nor_asked_for() -> None:
    h = Harness(v1())
    mid_poll(h, "old-1")
    h.cancel("old-1")
    h.run()
    asked: list[tuple[Status, ...]] = []
    counted = h.store.count_by_status

    def spy(filter: FlowFilter, *, statuses: Iterable[Status] | None = None) -> dict[Status, int]:
        asked.append(tuple(statuses or ()))
        return counted(filter, statuses=statuses)

    h.store.count_by_status = spy  # type: ignore[method-assign]
    (use,) = h.versions()
    assert use.total == 0
    assert asked == [NOT_ENDED]


def test_dropping_the_version_new_flows_start_on_is_only_a_warning_when_idle() -> None:
    idle = VersionUse("orders", 1, registered=True, newest=True, running={Status.RUNNING: 0})
    busy = VersionUse("orders", 1, registered=True, newest=True, running={Status.RUNNING: 1})
    keeps_v2 = keeps(Registry([v2()]))
    assert dropped_newest([idle], keeps_v2) == [idle] and dropped([idle], keeps_v2) == []
    assert dropped([busy], keeps_v2) == [busy] and dropped_newest([busy], keeps_v2) == []
    assert dropped_newest([idle], keeps(Registry([v1(), v2()]))) == []


def test_a_version_use_reads_back_from_the_apis_json() -> None:
    use = VersionUse(
        "orders", 3, registered=False, newest=False, running={s: n for n, s in enumerate(NOT_ENDED)}
    )
    doc = use.to_json()
    assert doc == {
        "flow": "orders",
        "version": 3,
        "registered": False,
        "newest": False,
        "running": {"PENDING": 0, "RUNNING": 1, "COMPENSATING": 2},
        "total": 3,
    }
    assert VersionUse.from_json(doc) == use
