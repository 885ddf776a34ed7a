"""Reset to a step as operators reach it (issue 23): the api's dry run (it answers the preview
and changes nothing), its reset, its refusals; the console's reset page — choose a step, see
the dry run, confirm with a reason. Flows run in memory behind the real api."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from relayflow.core.flows import Registry
from relayflow.core.state import Status
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from tests.unit.planner.test_reset import Api, diamond
from tests.unit.test_api import OPERATOR, VIEWER, operations, token, verifier

ORIGIN = {"Origin": "http://127.0.0.1:8129"}


class Stack:
    """The diamond flow (a, then b and c, then d) run to its end, behind the api."""

    def __init__(self) -> None:
        access = Access(
            verifier=verifier(VIEWER, OPERATOR),
            viewers=frozenset({VIEWER}),
            operators=frozenset({OPERATOR}),
        )
        self.api = Api()
        flow = diamond(self.api)
        self.h = Harness(flow)
        ops = operations(self.h, access, registry=Registry((flow,)))
        self.client: FlaskClient = build_api(ops).test_client()
        self.flow_id = self.h.start("diamond", {}, flow_id="d-1")
        self.h.run(self.flow_id)


@pytest.fixture
def stack() -> Stack:
    return Stack()


def test_the_api_dry_run_answers_the_preview_and_changes_nothing(stack: Stack) -> None:
    before = stack.h.flow("d-1")
    path = "/flows/d-1:reset"
    body = {"step": "b", "reason": "b was wrong", "dry_run": True}

    viewer = stack.client.post(path, headers=token(VIEWER), json=body)
    dry = stack.client.post(path, headers=token(OPERATOR), json=body)

    assert viewer.status_code == 403
    assert dry.status_code == 200, dry.get_data(as_text=True)
    assert dry.get_json() == {
        "dry_run": True,
        "key": "d-1",
        "action": "reset",
        "allowed": True,
        "reason": "",
        "rerun": ["b", "d"],
        "undone": ["d", "b"],
        "kept": ["a", "c"],
        "detail": {"step": "b", "undo": True, "status": "SUCCEEDED", "generation": 1},
    }
    assert stack.h.flow("d-1") == before and stack.h.calls[-1].step == "d"  # nothing done

    done = stack.client.post(path, headers=token(OPERATOR), json={**body, "dry_run": False})
    assert done.status_code == 200
    assert done.get_json()["reset"]["to_undo"] == ["d", "b"]
    assert done.get_json()["reset"]["by"] == OPERATOR
    record = stack.h.run("d-1")
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.position.generation == 1


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({}, 400, "step is required"),
        ({"step": "B!"}, 400, "step must be a step name"),
        ({"step": "b", "undo": "no"}, 400, 'undo must be true or false, got "no"'),
        ({"step": "zz"}, 409, "diamond v1 has no step 'zz' (its steps: a, b, c, d)"),
    ],
)
def test_the_api_refuses_a_bad_reset_saying_why(
    stack: Stack, body: dict[str, object], status: int, says: str
) -> None:
    response = stack.client.post("/flows/d-1:reset", headers=token(OPERATOR), json=body)
    assert response.status_code == status
    assert says in response.get_json()["error"]["message"]


def test_the_console_resets_after_its_dry_run_and_a_reason(stack: Stack) -> None:
    headers = {**token(OPERATOR), **ORIGIN}

    page = stack.client.get("/console/flows/d-1", headers=headers).get_data(as_text=True)
    viewer_page = stack.client.get("/console/flows/d-1", headers=token(VIEWER))
    chooser = stack.client.get("/console/flows/d-1/reset", headers=headers)
    dry = stack.client.get("/console/flows/d-1/reset?step=b&keep=on", headers=headers)
    posted = stack.client.post(
        "/console/flows/d-1/reset?step=b",
        headers=headers,
        data={"step": "b", "keep": "on", "reason": "replay b"},
    )

    assert 'id="reset"' in page and 'id="reset"' not in viewer_page.get_data(as_text=True)
    shown = chooser.get_data(as_text=True)
    assert '<option value="c">c</option>' in shown and 'id="preview"' not in shown
    dry_run = dry.get_data(as_text=True)
    assert 'id="rerun">b, d<' in dry_run and 'id="undone">nothing<' in dry_run
    assert 'id="replayed">b, d<' in dry_run and 'id="confirm"' in dry_run
    assert posted.status_code == 303, posted.get_data(as_text=True)
    record = stack.h.flow("d-1")
    assert record.reset is not None and (record.reset.step, record.reset.undo) == ("b", False)
    assert record.history[-1].outcome == "reset" and record.history[-1].by == OPERATOR
    refused = stack.client.get("/console/flows/d-1/reset?step=b", headers=headers)
    assert "It would be refused: the flow is PENDING" in refused.get_data(as_text=True)
