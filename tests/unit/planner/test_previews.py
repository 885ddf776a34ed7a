"""relayflow.core.planner.previews: the dry run's row (``Preview``), as the api, the CLI and
the console show it; what a retry or a cancel would do to one flow (steps run again, effects
undone and kept), from the planner functions the operation runs, and why it would be refused.
The flow is ``tests.unit.planner.sample``'s; a bulk action's mark (``planner.checked``) lets
an operation act once, on what the dry run saw."""

from __future__ import annotations

import pytest

from relayflow.core import planner
from relayflow.core.errors import AlreadyActed, ChangedSince, PermanentError
from relayflow.core.planner import BulkMark, Completed, Failed, Plan
from relayflow.core.planner.previews import Preview
from relayflow.core.records import EffectState
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW_ID, QUEUES, at_finish, at_poll, make_flow, plan


def test_a_retry_after_an_undone_failure_reruns_every_step_and_keeps_nothing() -> None:
    failing = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), failing, Completed({}))  # reserve undone
    assert failed.status is Status.FAILED

    preview = planner.preview_retry(plan(), failed)

    assert preview.allowed and preview.action == "retry" and preview.key == FLOW_ID
    assert preview.rerun == ("reserve", "await_ready", "finish")
    assert (preview.undone, preview.kept) == ((), ())
    assert preview.detail == {"generation": 1}


def test_a_retry_keeps_what_is_still_in_effect_and_reruns_only_the_rest() -> None:
    flow = make_flow(compensate=False)  # reserve cannot be undone: it stays done
    failed = planner.after(plan(flow=flow), at_finish(flow=flow), Failed(PermanentError("no")))

    preview = planner.preview_retry(plan(flow=flow), failed)
    restarted = planner.restart(plan(flow=flow), failed)

    assert preview.rerun == ("finish",)  # as the restart itself keeps reserve and the poll
    assert set(restarted.outputs) == {"reserve", "await_ready"}
    assert preview.kept == ("reserve",)  # finish's first try was refused: it never happened
    assert preview.undone == ()


def test_a_cancel_undoes_newest_first_what_has_a_compensation() -> None:
    preview = planner.preview_cancel(plan(), at_finish())

    assert preview.allowed and preview.rerun == ()
    assert preview.undone == ("reserve",)
    cancelling = planner.cancel(plan(), at_finish(), "x")  # the saga starts where it says
    assert cancelling.position.step == "reserve"


def test_a_cancel_keeps_an_effect_without_a_compensation() -> None:
    flow = make_flow(compensate=False)
    preview = planner.preview_cancel(plan(flow=flow), at_finish(flow=flow))
    assert (preview.undone, preview.kept) == ((), ("reserve",))


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("retry", "it is RUNNING: only an ended flow is retried"),
        ("cancel-done", "it has ended (SUCCEEDED): only an active flow is cancelled"),
        ("retry-done", "it SUCCEEDED: a retry runs only a failed, timed-out or cancelled flow"),
        ("cancel-compensating", "the flow is compensating and will end by itself"),
    ],
)
def test_what_an_operation_would_refuse_is_said_plainly(which: str, message: str) -> None:
    succeeded = planner.after(plan(), at_finish(), Completed({}))
    record = {
        "retry": at_poll(),
        "cancel-done": succeeded,
        "retry-done": succeeded,
        "cancel-compensating": planner.cancel(plan(), at_poll(), "x"),
    }[which]
    preview = (planner.preview_retry if which.startswith("retry") else planner.preview_cancel)(
        plan(), record
    )
    assert not preview.allowed
    assert preview.reason == message
    assert preview.as_json()["allowed"] is False


def test_a_flow_whose_type_is_not_deployed_is_not_retried_and_cancelled_undoing_nothing() -> None:
    failing = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), failing, Completed({}))
    gone = Plan(definition=None, queues=QUEUES, now=plan().now, kinds=plan().kinds)

    retry = planner.preview_retry(gone, failed)
    cancel = planner.preview_cancel(gone, at_poll())

    assert (retry.allowed, retry.reason) == (False, "no deployed version runs 'demo' flows")
    assert cancel.allowed and cancel.undone == () and cancel.kept == ("reserve",)
    assert "nothing can be undone" in cancel.detail["undeployed"]


def test_a_bulk_mark_lets_an_operation_act_once_on_what_the_dry_run_saw() -> None:
    failing = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), failing, Completed({}))
    mark = BulkMark("bulk-0123456789ab", generation=0, status=Status.FAILED)

    retried = planner.restart(plan(), planner.checked(failed, mark), by="ana", bulk=mark.bulk)
    assert retried.history[-1].bulk == mark.bulk
    assert "bulk" not in failed.history[-1].model_dump()  # other entries store no bulk field

    with pytest.raises(AlreadyActed):
        planner.checked(retried, mark)
    other = BulkMark("bulk-ba9876543210", generation=0, status=Status.FAILED)
    with pytest.raises(ChangedSince, match=r"FAILED \(generation 0\) then, PENDING \(genera"):
        planner.checked(retried, other)
    assert planner.checked(failed, None) is failed


def test_an_undo_failed_effect_is_kept_by_a_retry() -> None:
    failing = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    stuck = failing.model_copy(
        update={
            "status": Status.FAILED,
            "effects": [
                e.model_copy(update={"state": EffectState.UNDO_FAILED}) for e in failing.effects
            ],
        }
    )
    assert planner.preview_retry(plan(), stuck).kept == ("reserve",)


def test_a_preview_shows_its_steps_and_effects_in_order() -> None:
    preview = Preview(
        key="acme~f-1",
        action="reset",
        allowed=True,
        rerun=("register", "await", "create"),
        undone=("create", "register"),
        kept=("reserve",),
    )
    assert preview.as_json() == {
        "key": "acme~f-1",
        "action": "reset",
        "allowed": True,
        "reason": "",
        "rerun": ["register", "await", "create"],
        "undone": ["create", "register"],
        "kept": ["reserve"],
    }


def test_a_refused_preview_says_why_and_carries_the_action_s_own_facts() -> None:
    preview = Preview(
        key="f-2", action="retry", allowed=False, reason="it is RUNNING", detail={"at": "x"}
    )
    shown = preview.as_json()
    assert (shown["allowed"], shown["reason"], shown["detail"]) == (
        False,
        "it is RUNNING",
        {"at": "x"},
    )
