"""Start messages from the CLI go on the topic their tenant starts flows by (issue 18): a named
tenant's own ``flow-requests.{tenant}``, else ``flow-requests`` (the start function takes the
tenant from the topic and refuses a message that names another)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from relayflow.cli import batch, commands
from relayflow.cli.batch import Planned, run_batch, start_topic
from relayflow.gcp import events
from relayflow.topology import load_topology, tenant_of_topic


@dataclass
class FakeEvents:
    """Records what was published where; message ids m-0, m-1, …"""

    published: list[tuple[str, bytes]] = field(default_factory=list)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.published = []

    def publish(self, topic: str, body: dict[str, Any], **attributes: str) -> str:
        self.published.append((topic, json.dumps(body).encode()))
        return f"m-{len(self.published) - 1}"

    def submit(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        self.published.append((topic, data))
        done: Future[str] = Future()
        done.set_result(f"m-{len(self.published) - 1}")
        return done


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    fake = FakeEvents()
    monkeypatch.setattr(commands, "_settings", lambda args=None: SimpleNamespace(project_id="p"))
    monkeypatch.setattr(events, "build_publisher", lambda: None)
    monkeypatch.setattr(events, "Events", lambda *a, **k: fake)
    return fake.published


@pytest.mark.parametrize(
    ("tenant_args", "topic"),
    [
        (["--tenant", "acme"], "flow-requests.acme"),
        (["--tenant", "default"], "flow-requests"),
        ([], "flow-requests"),
    ],
    ids=["named-tenant", "default-tenant", "no-tenant"],
)
def test_publish_goes_on_the_topic_of_the_tenant_it_names(
    published: list[tuple[str, bytes]],
    tenant_args: list[str],
    topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # when a start message is published with (or without) a tenant
    code = commands.main(["publish", "registration", "--flow-id", "f-1", *tenant_args])
    # then it went on that tenant's own topic, which the start function reads the tenant from
    assert code == 0
    ((sent_on, data),) = published
    assert sent_on == topic
    assert tenant_of_topic(load_topology(), sent_on) == (tenant_args[1:] or ["default"])[0]
    assert json.loads(data).get("tenant") == (tenant_args[1:] or [None])[0]
    assert f"on {topic}; flow id f-1" in capsys.readouterr().out


def test_publish_sends_its_labels_in_the_start_message(
    published: list[tuple[str, bytes]],
) -> None:
    argv = ["publish", "registration", "--label", "order_id=ORD-1", "--label", "region=eu"]
    assert commands.main(argv) == 0
    ((_, data),) = published
    assert json.loads(data)["labels"] == {"order_id": "ORD-1", "region": "eu"}


def test_the_start_topic_of_a_tenant_is_the_topologys() -> None:
    topology = load_topology()
    assert start_topic("acme") == topology.tenant_requests.topic_of("acme")
    assert start_topic("default") == start_topic(None) == topology.topics.requests
    assert start_topic(None, shared="bench-requests") == "bench-requests"


def test_a_batch_publishes_each_message_on_its_tenants_topic() -> None:
    # given a batch of flows of two tenants, the default one and a malformed message
    planned = [
        Planned("a-1", {"flow": "registration", "flow_id": "a-1", "tenant": "acme"}),
        Planned("d-1", {"flow": "registration", "flow_id": "d-1", "tenant": "default"}),
        Planned("n-1", {"flow": "registration", "flow_id": "n-1"}),
        Planned(None, b"not json at all"),
    ]
    sent = FakeEvents()
    watcher = SimpleNamespace(expect=lambda ids: None, wait=lambda timeout_s: True,
                              done_count=lambda: 3)  # fmt: skip
    store = SimpleNamespace(get=lambda flow_id: None)
    # when it runs
    run_batch(
        planned,
        events=sent,  # type: ignore[arg-type]
        store=store,  # type: ignore[arg-type]
        watcher=watcher,  # type: ignore[arg-type]
        topic="flow-requests",
        timeout_s=1.0,
    )
    # then acme's start went on acme's topic, everything else on the shared one
    assert [topic for topic, _ in sent.published] == [
        "flow-requests.acme",
        "flow-requests",
        "flow-requests",
        "flow-requests",
    ]
    assert batch.start_topic is start_topic
