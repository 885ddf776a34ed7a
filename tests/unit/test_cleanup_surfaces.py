"""The clean-up as operators see it (issue 18): its state in the api's document and list, in
the console, and the operator's undo again through the api and the console."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from relayflow.core.breaker_policy import Dependencies
from relayflow.core.engine import Limits
from relayflow.core.flows import Registry
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from tests.unit.planner.test_cleanup import WINDOW_S, Api, saga
from tests.unit.test_api import OPERATOR, VIEWER, operations, token, verifier

ORIGIN = {"Origin": "http://127.0.0.1:8129"}


class Stack:
    """A harness whose client API's undo fails while it is down, behind the api."""

    def __init__(self, access: Access) -> None:
        self.api = Api()
        flow = saga(self.api)
        limits = Limits(continue_inline=True, undo_window_s=WINDOW_S)
        self.h = Harness(flow, limits=limits, dependencies=Dependencies.off())
        ops = operations(self.h, access, registry=Registry((flow,)))
        self.client: FlaskClient = build_api(ops).test_client()

    def abandoned(self) -> str:
        """A flow whose clean-up was given up (the API stayed down past the window)."""
        self.api.down = True
        flow_id = self.h.start("saga")
        self.h.run_cleanup(flow_id)
        self.api.down = False
        return flow_id


@pytest.fixture
def stack() -> Stack:
    viewers, operators = frozenset({VIEWER}), frozenset({OPERATOR})
    return Stack(Access(verifier=verifier(VIEWER, OPERATOR), viewers=viewers, operators=operators))


def test_the_api_shows_the_clean_up_in_the_document_and_the_list(stack: Stack) -> None:
    stack.api.down = True
    flow_id = stack.h.start("saga")
    stack.h.run(flow_id)

    document = stack.client.get(f"/flows/{flow_id}", headers=token(VIEWER)).get_json()
    listed = stack.client.get("/flows", headers=token(VIEWER)).get_json()["flows"]

    assert document["status"] == "FAILED" and document["cleanup"]["state"] == "pending"
    assert [(f["flow_id"], f["cleanup"]) for f in listed] == [(flow_id, "pending")]


def test_an_operator_undoes_again_through_the_api_and_a_viewer_may_not(stack: Stack) -> None:
    flow_id = stack.abandoned()
    path = f"/flows/{flow_id}:undo"
    body = {"reason": "the client API is back"}

    refused = stack.client.post(path, headers=token(VIEWER), json=body)
    done = stack.client.post(path, headers=token(OPERATOR), json=body)
    again = stack.client.post(path, headers=token(OPERATOR), json=body)

    assert refused.status_code == 403
    assert done.status_code == 200, done.get_data(as_text=True)
    assert done.get_json()["cleanup"]["state"] == "pending"
    assert done.get_json()["cleanup"]["by"] == OPERATOR
    assert again.status_code == 409  # its clean-up runs: nothing to ask for twice
    assert "clean-up is still undoing" in again.get_json()["error"]["message"]
    cleaned = stack.h.run_cleanup(flow_id)
    assert cleaned.cleanup is not None and cleaned.cleanup.state == "done"
    assert stack.api.live == set()


def test_the_console_shows_the_clean_up_and_undoes_again_after_a_confirmation(
    stack: Stack,
) -> None:
    flow_id = stack.abandoned()
    headers = {**token(OPERATOR), **ORIGIN}

    page = stack.client.get(f"/console/flows/{flow_id}", headers=headers).get_data(as_text=True)
    viewer_page = stack.client.get(f"/console/flows/{flow_id}", headers=token(VIEWER))
    confirm = stack.client.get(f"/console/flows/{flow_id}/undo", headers=headers)
    posted = stack.client.post(
        f"/console/flows/{flow_id}/undo", headers=headers, data={"reason": "API back"}
    )

    assert 'id="cleanup-state">abandoned<' in page and 'id="undo"' in page
    assert "charge, reserve" in page  # what may still be live
    assert confirm.status_code == 200 and "charge (undo_failed)" in confirm.get_data(as_text=True)
    assert posted.status_code == 303, posted.get_data(as_text=True)
    record = stack.h.flow(flow_id)
    assert record.cleanup is not None and record.cleanup.state == "pending"
    assert record.history[-1].outcome == "undo requested" and record.history[-1].by == OPERATOR
    assert 'id="undo"' not in viewer_page.get_data(as_text=True)  # operators only
