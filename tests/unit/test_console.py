"""The console's pages rendered in process: what each shows, the confirmation and reason of
every action, roles, forms from other sites refused and forms through the proxy taken, and
another tenant's flow by ``?tenant=``. (tests/console drives the same pages in a real browser
against the local stack.)"""

from __future__ import annotations

import re

import pytest

from relayflow.core.dead_letters import DeadLetter
from relayflow.core.flows import Registry
from relayflow.core.state import Status
from relayflow.web import timeline
from relayflow.web.access import Access
from relayflow.web.console import duration

from .test_api import (
    FLOW,
    OPERATOR,
    VIEWER,
    Api,
    build,
    token,
    verifier,
)

# The console's own pages on the local stack's api (the default api URL's origin).
SAME_SITE = {"Origin": "http://127.0.0.1:8129"}


@pytest.fixture
def console() -> Api:
    return build(Access(verifier=None))


def text(response: object) -> str:
    return response.get_data(as_text=True)  # type: ignore[attr-defined,no-any-return]


def test_the_list_shows_counts_per_status_and_a_row_per_flow(console: Api) -> None:
    console.running_flow("f-run")
    console.harness.advance(0.5)  # before f-run's next poll is due
    console.harness.start("demo", {"bad": True}, flow_id="f-bad")
    console.harness.run("f-bad")
    page = text(console.client.get("/console/flows"))
    found = re.findall(r'<span class="n">(\d+)</span><span class="label">(\w+)<', page)
    counts = {label: int(n) for n, label in found}
    assert counts == {s.value: 0 for s in Status} | {"RUNNING": 1, "FAILED": 1}
    rows = re.findall(r'data-flow-id="([^"]+)" data-status="(\w+)"', page)
    assert rows == [("f-bad", "FAILED"), ("f-run", "RUNNING")]


def test_the_list_pages_by_cursor_keeping_its_filters(console: Api) -> None:
    for i in range(5):
        console.harness.start("demo", {}, flow_id=f"f-{i}")
        console.harness.advance(1)
    first = text(console.client.get("/console/flows?flow=demo&limit=2"))
    (next_url,) = re.findall(r'href="([^"]+)" id="next-page"', first)
    assert "flow=demo" in next_url and "limit=2" in next_url and "cursor=" in next_url
    second = text(console.client.get(next_url.replace("&amp;", "&")))
    assert re.findall(r'data-flow-id="([^"]+)"', second) == ["f-2", "f-1"]


def test_bad_filters_are_an_error_page_naming_the_parameter(console: Api) -> None:
    response = console.client.get("/console/flows?updated_from=soon")
    assert response.status_code == 400
    assert "updated_from must be an ISO 8601 time" in text(response)


def test_a_flows_page_shows_its_polls_with_the_waits_chosen_and_the_curve(console: Api) -> None:
    console.running_flow("f-1")
    console.harness.deliver_next("f-1")
    page = text(console.client.get("/console/flows/f-1"))
    polls = re.findall(r'data-kind="poll" data-step="await_ready" data-poll="(\d+)" '
                       r'data-delay="([\d.]+)"', page)  # fmt: skip
    # the document has none of them yet (a poll chain writes at its checkpoints): the page
    # shows the polls its newest task carries, marked not yet written
    record = console.harness.flow("f-1")
    assert not [e for e in record.history if e.kind == "poll"]
    in_flight = console.harness.engine.polls_in_flight(record)
    assert polls == [(str(e.poll), str(e.delay_s)) for e in in_flight]
    assert [p for p, _ in polls] == ["0", "1"]
    assert page.count('data-written="false"') == 2
    assert "not yet written" in page
    assert "curve 1.00s, jitter" in page and "curve 2.00s, jitter" in page
    assert 'data-active="true"' in page and 'id="cancel"' in page


def test_an_ended_flow_is_no_longer_live_and_offers_a_retry(console: Api) -> None:
    console.harness.start("demo", {"bad": True}, flow_id="f-bad")
    console.harness.run("f-bad")
    live = text(console.client.get("/console/flows/f-bad/live"))
    assert 'data-active="false"' in live
    assert 'id="retry"' in live and 'id="cancel"' not in live
    assert "Result: REFUSED" in live


def test_cancel_asks_for_a_reason_then_records_it(console: Api) -> None:
    console.running_flow("f-1")
    confirm = text(console.client.get("/console/flows/f-1/cancel"))
    assert "Cancel f-1?" in confirm and 'name="reason"' in confirm

    no_reason = console.client.post("/console/flows/f-1/cancel", data={}, headers=SAME_SITE)
    assert no_reason.status_code == 400
    assert "reason is required" in text(no_reason)
    assert console.harness.flow("f-1").status is Status.RUNNING

    done = console.client.post(
        "/console/flows/f-1/cancel", data={"reason": "wrong customer"}, headers=SAME_SITE
    )
    assert done.status_code == 303
    assert done.headers["Location"].endswith("/console/flows/f-1?notice=cancelled")
    record = console.harness.run("f-1")
    assert record is not None and record.status is Status.CANCELLED
    assert [(e.by, e.detail) for e in record.history if e.by] == [("local", "wrong customer")]


def test_retry_from_the_console_starts_a_new_generation(console: Api) -> None:
    console.harness.start("demo", {"bad": True}, flow_id="f-bad")
    console.harness.run("f-bad")
    done = console.client.post(
        "/console/flows/f-bad/retry", data={"reason": "fixed"}, headers=SAME_SITE
    )
    assert done.status_code == 303
    assert console.harness.flow("f-bad").position.generation == 1


def test_a_form_posted_from_another_site_is_refused(console: Api) -> None:
    console.running_flow("f-1")
    response = console.client.post(
        "/console/flows/f-1/cancel",
        data={"reason": "csrf"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403
    assert "takes forms and changes only from its own pages" in text(response)
    assert 'id="error"' in text(response)  # the console's error page
    assert console.harness.flow("f-1").status is Status.RUNNING


def operators_console() -> Api:
    """The api in the cloud, as an operator reaches it: ID tokens verified."""
    tokens = verifier(OPERATOR)
    return build(Access(verifier=tokens, operators=frozenset({OPERATOR})))


def test_the_forms_work_through_a_proxy_that_rewrites_host() -> None:
    # gcloud run services proxy: the browser is on http://localhost:8080; the proxy sends
    # Host: the run.app name, the operator's token, and the browser's Origin as it was
    cloud = operators_console()
    cloud.running_flow("f-1")
    through = {**token(OPERATOR), "Host": "api-xyz.a.run.app"}
    done = cloud.client.post(
        "/console/flows/f-1/cancel",
        data={"reason": "via the proxy"},
        headers={**through, "Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"},
    )
    assert done.status_code == 303, text(done)
    assert done.headers["Location"] == "/console/flows/f-1?notice=cancelled"  # stays on :8080
    assert cloud.harness.flow("f-1").status is not Status.RUNNING


@pytest.mark.parametrize(
    "page",
    [
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
        {"Origin": "https://api-xyz.a.run.app"},  # what a Host comparison would have let in
    ],
)
def test_a_cross_site_form_through_the_proxy_is_refused(page: dict[str, str]) -> None:
    cloud = operators_console()
    cloud.running_flow("f-1")
    through = {**token(OPERATOR), "Host": "api-xyz.a.run.app"}
    refused = cloud.client.post(
        "/console/flows/f-1/cancel", data={"reason": "csrf"}, headers={**through, **page}
    )
    assert refused.status_code == 403
    assert cloud.harness.flow("f-1").status is Status.RUNNING


def test_a_viewer_sees_no_actions_and_is_refused_them() -> None:
    tokens = verifier(VIEWER)
    viewer = build(Access(verifier=tokens, viewers=frozenset({VIEWER})))
    viewer.running_flow("f-1")
    page = text(viewer.client.get("/console/flows/f-1", headers=token(VIEWER)))
    assert 'id="cancel"' not in page and "vi@example.com · viewer" in page
    refused = viewer.client.get("/console/flows/f-1/cancel", headers=token(VIEWER))
    assert refused.status_code == 403
    assert "vi@example.com is a viewer and may not cancel, retry or replay" in text(refused)


def test_rejected_messages_show_their_reason_and_data(console: Api) -> None:
    console.harness.publish(b'{"flow": 7}', message_id="m-bad")
    page = text(console.client.get("/console/rejected"))
    assert 'data-id="m-bad"' in page
    assert "flow: Input should be a valid string" in page


def test_a_dead_letter_is_replayed_as_it_was_or_edited(console: Api) -> None:
    letter = DeadLetter("dl-1", b'{"flow": "demo", "input": {}}', {}, None)
    console.dead_letters.letters.append(letter)
    listed = text(console.client.get("/console/dead-letters"))
    assert 'data-id="dl-1"' in listed and "Replay…" in listed
    form = text(console.client.get("/console/dead-letters/dl-1/replay"))
    assert "{&#34;flow&#34;: &#34;demo&#34;, &#34;input&#34;: {}}" in form

    bad = console.client.post(
        "/console/dead-letters/dl-1/replay",
        data={"mode": "edited", "data": "{nope", "reason": "typo"},
        headers=SAME_SITE,
    )
    assert bad.status_code == 400 and "the edited message" in text(bad)

    edited = '{"flow": "demo", "input": {}, "flow_id": "f-fixed"}'
    done = console.client.post(
        "/console/dead-letters/dl-1/replay",
        data={"mode": "edited", "data": edited, "reason": "named it"},
        headers=SAME_SITE,
    )
    assert done.status_code == 303
    assert done.headers["Location"].endswith("replayed=new-1&flow_id=f-fixed")
    as_is = console.client.post(
        "/console/dead-letters/dl-1/replay",
        data={"mode": "as-is", "data": "ignored", "reason": "cause fixed"},
        headers=SAME_SITE,
    )
    assert as_is.status_code == 303
    assert [(r["data"], r["reason"]) for r in console.dead_letters.replays] == [
        (edited.encode(), "named it"),
        (None, "cause fixed"),
    ]


def test_the_timeline_puts_each_entry_in_its_lane_and_marks_generations(console: Api) -> None:
    h = console.harness
    h.start("demo", {"bad": True}, flow_id="f-bad")
    h.run("f-bad")
    h.advance(5)
    h.engine.retry("f-bad", reason="fixed", by="op")
    h.deliver_next("f-bad")
    h.deliver_next("f-bad")
    record = h.flow("f-bad")
    # its not-ready poll is in flight (its poll chain's task carries it), not yet written
    in_flight = h.engine.polls_in_flight(record)
    built = timeline.build(record, FLOW, now=h.now, in_flight=in_flight)
    assert [m.written for m in built.marks] == [True, True, True, False]
    assert built.lanes == ["reserve", "await_ready", "operator"]
    assert [(m.entry.outcome, built.lanes[m.lane], m.tone) for m in built.marks] == [
        ("failed", "reserve", "fail"),
        ("restarted", "operator", "op"),
        ("succeeded", "reserve", "ok"),
        ("not ready: pending", "await_ready", "wait"),
    ]
    (boundary,) = built.boundaries
    assert boundary.entry.detail == "generation 1: fixed"
    wait = built.marks[-1].wait
    assert wait is not None and wait.curve_s == 1.0
    assert wait.jitter_s == pytest.approx(wait.delay_s - 1.0)
    assert built.next_x is not None and 0 < built.marks[-1].x < built.next_x <= 1


def test_a_wait_longer_than_the_jitter_allows_says_why() -> None:
    from datetime import UTC, datetime

    from relayflow.core.records import HistoryEntry

    entry = HistoryEntry(
        at=datetime(2026, 1, 1, tzinfo=UTC), step="await_ready", kind="poll", poll=0,
        outcome="not ready", delay_s=30.0,
    )  # fmt: skip
    wait = timeline._wait(entry, lambda at: 0.5, Registry((FLOW,)).get("demo"))
    assert wait is not None and wait.note == "curve 1.00s; a Retry-After asked for more"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(1.144, "1.14 s"), (125, "2 min 5 s"), (3 * 3600 + 1200, "3 h 20 min"), (-90, "-1 min 30 s")],
)
def test_durations_read_in_two_units_at_most(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_an_overdue_task_says_so(console: Api) -> None:
    console.running_flow("f-1")
    console.harness.advance(300)
    # the harness's clock is virtual; the page compares with the wall clock, so only the
    # wording is checked here
    page = text(console.client.get("/console/flows/f-1"))
    assert re.search(r"on flow-polls, (in|overdue by) ", page)


def test_a_flow_of_another_tenant_is_linked_and_shown_by_its_tenant(console: Api) -> None:
    # flow ids are each tenant's own: "f-1" of acme is not the default tenant's "f-1"
    console.harness.start("demo", {}, flow_id="f-1")
    console.harness.start("demo", {"bad": True}, flow_id="f-1", tenant="acme")
    listed = text(console.client.get("/console/flows?tenant=acme"))
    (link,) = re.findall(r'href="(/console/flows/f-1[^"]*)"', listed)
    assert link == "/console/flows/f-1?tenant=acme"
    page = text(console.client.get(link))
    assert re.search(r'id="tenant">acme ', page)
    ambiguous = console.client.get("/console/flows/f-1")
    assert ambiguous.status_code == 400 and "say which" in text(ambiguous)


def test_the_definitions_page_shows_each_flow_with_its_steps_and_schemas(console: Api) -> None:
    page = console.client.get("/console/definitions")
    assert page.status_code == 200
    body = text(page)
    assert re.findall(r'<section class="definition" id="(def-[\w-]+)"', body) == [
        "def-demo-v1",
        "def-wait-v1",
    ]
    assert "<td>await_hook</td><td>callback</td>" in body
    assert "Input schema: none declared" in body
    flow_id = console.harness.start("demo", {"resource": "r-1"})
    listed = text(console.client.get("/console/flows"))
    assert flow_id in listed
    assert 'href="/console/definitions#def-demo-v1">demo v1</a>' in listed


def test_the_list_filters_by_labels_and_shows_them(console: Api) -> None:
    h = console.harness
    h.start("demo", {}, flow_id="l-1", labels={"order_id": "123", "region": "eu"})
    h.start("demo", {}, flow_id="l-2", labels={"order_id": "456"})
    page = text(console.client.get("/console/flows?label=order_id%3D123"))
    assert re.findall(r'data-flow-id="([^"]+)"', page) == ["l-1"]
    assert 'id="label-filter" value="order_id=123"' in page  # the filter, kept in its field
    assert '<a class="label" href="/console/flows?label=region%3Deu">region=eu</a>' in page
    assert 'id="counts"' in page  # counted by one label
    both = text(console.client.get("/console/flows?label=order_id%3D123+region%3Deu"))
    assert re.findall(r'data-flow-id="([^"]+)"', both) == ["l-1"]
    assert 'id="counts-none"' in both and 'id="counts"' not in both  # two labels: no counts
    (next_url,) = re.findall(r'href="([^"]+)" data-status="FAILED"', page)
    assert "label=order_id%3D123" in next_url  # a status link keeps the label


def test_a_flows_page_shows_its_labels_and_the_dependency_that_failed_it(console: Api) -> None:
    console.harness.start("demo", {}, flow_id="l-1", labels={"order_id": "123"})
    page = text(console.client.get("/console/flows/l-1"))
    assert '<dd id="labels"><a class="label" href="/console/flows?label=order_id%3D123">' in page
    assert 'id="dependency"' not in page  # nothing holds it up
    held = {"dependency": "payments"}  # as a put-off for payments' breaker writes it
    console.harness.store.change("l-1", lambda record: record.model_copy(update=held))
    page = text(console.client.get("/console/flows/l-1"))
    assert '<dd id="dependency"><a href="/console/flows?dependency=payments">payments</a>' in page


def test_bad_label_filters_are_an_error_page_naming_the_parameter(console: Api) -> None:
    response = console.client.get("/console/flows?label=order_id")
    assert response.status_code == 400
    assert "label: label &#39;order_id&#39; must be key=value" in text(response)


def test_a_flows_page_reads_offloaded_values_back_when_asked_and_says_when_it_cannot() -> None:
    # given a flow whose input went to the bucket
    local = build(Access(verifier=None), offload_threshold_bytes=1024)
    local.harness.start("demo", {"pad": "x" * 5000}, flow_id="big-1")
    local.harness.deliver_next("big-1")

    # then its page shows the claim check, and a link that reads it back
    page = text(local.client.get("/console/flows/big-1"))
    assert "$relayflow" in page and "x" * 5000 not in page
    (link,) = re.findall(r'id="read-back" href="([^"]+)"', page)
    assert "resolve=true" in link

    # and the page it leads to (its live part too) shows the value itself
    read = text(local.client.get(link.replace("&amp;", "&")))
    assert "x" * 5000 in read and 'id="claim-checks"' in read
    (live,) = re.findall(r'data-live-url="([^"]+)"', read)
    assert "resolve=true" in live

    # and when the object is gone, the page says so and shows the claim check
    ref = local.harness.store.get("big-1").input["$relayflow"]["ref"]  # type: ignore[union-attr]
    del local.harness.blobs.objects[ref["name"]]
    gone = local.client.get("/console/flows/big-1?resolve=true")
    assert gone.status_code == 200
    assert 'id="unread"' in text(gone) and "x" * 5000 not in text(gone)


def test_a_flow_with_nothing_offloaded_offers_nothing_to_read_back(console: Api) -> None:
    console.running_flow("f-small")
    page = text(console.client.get("/console/flows/f-small"))
    assert 'id="offloaded"' not in page and 'id="read-back"' not in page
