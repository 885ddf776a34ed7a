"""DeadLetterHold against the Pub/Sub emulator: browsing leaves messages held; a replay
publishes (as it was, or edited, with who and why) and only then acks.

Each test has topics and subscriptions of its own: the stack's flow-requests is pushed to a
start function that the emulator block does not run, so its messages would dead-letter into
the shared hold subscription while other tests read it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from relayflow.core.dead_letters import DeadLetter
from relayflow.core.errors import DeadLetterNotFound
from relayflow.gcp import events
from relayflow.gcp.dead_letters import DeadLetterHold
from relayflow.settings import Settings

from .support import pull

pytestmark = pytest.mark.emulators


@dataclass
class Hold:
    hold: DeadLetterHold
    publisher: PublisherClient
    subscriber: SubscriberClient
    dead_topic: str
    requests_subscription: str
    signals_subscription: str
    signals_source: str  # the push subscription of the signals topic, as Pub/Sub names it
    requests_topic: str
    signals_topic: str

    def dead_letter(self, body: dict[str, object], **extra: str) -> str:
        data = json.dumps(body).encode()
        attributes = {"CloudPubSubDeadLetterSourceDeliveryCount": "5", "origin": "test", **extra}
        return str(self.publisher.publish(self.dead_topic, data, **attributes).result(timeout=10))


@pytest.fixture
def hold(settings: Settings) -> Iterator[Hold]:
    project, run = settings.project_id, uuid.uuid4().hex[:10]
    publisher, subscriber = events.build_publisher(), events.subscriber()
    dead, requests, signals = (
        publisher.topic_path(project, f"it-{t}-{run}") for t in ("dead", "req", "sig")
    )
    held, replayed, signalled = (
        subscriber.subscription_path(project, f"it-{s}-{run}") for s in ("hold", "req", "sig")
    )
    for topic in (dead, requests, signals):
        publisher.create_topic(name=topic)
    subscriber.create_subscription(name=held, topic=dead, ack_deadline_seconds=60)
    subscriber.create_subscription(name=replayed, topic=requests, ack_deadline_seconds=60)
    subscriber.create_subscription(name=signalled, topic=signals, ack_deadline_seconds=60)
    source = f"it-signals-push-{run}"
    dead_letters = DeadLetterHold(
        subscriber,
        project=project,
        subscription=f"it-hold-{run}",
        events=events.Events(publisher, project=project),
        requests_topic=f"it-req-{run}",
        origins={source: f"it-sig-{run}"}.get,
        signals_topic=f"it-sig-{run}",
    )
    path = subscriber.subscription_path(project, source)
    yield Hold(
        dead_letters,
        publisher,
        subscriber,
        dead,
        replayed,
        signalled,
        path,
        f"it-req-{run}",
        f"it-sig-{run}",
    )
    for subscription in (held, replayed, signalled):
        subscriber.delete_subscription(subscription=subscription)
    for topic in (dead, requests, signals):
        publisher.delete_topic(topic=topic)


def test_browsing_shows_every_held_message_and_keeps_it_held(hold: Hold) -> None:
    ids = {hold.dead_letter({"flow": "registration", "n": i}) for i in range(3)}
    first = hold.hold.held()
    assert {m.message_id for m in first} == ids
    assert {m.delivery_count for m in first} == {5}
    assert {m.message_id for m in hold.hold.held()} == ids  # released, so still there


def test_a_replay_publishes_the_message_with_who_and_why_then_acks_it(hold: Hold) -> None:
    kept = hold.dead_letter({"flow": "registration", "input": {"resource": "a"}})
    replayed = hold.dead_letter({"flow": "registration", "input": {"resource": "b"}})

    new_id = hold.hold.replay(replayed, by="op@example.com", reason="start function fixed")

    (message,) = pull(hold.subscriber, hold.requests_subscription, count=1)
    assert message.message.message_id == new_id
    assert json.loads(message.message.data) == {
        "flow": "registration",
        "input": {"resource": "b"},
    }
    assert dict(message.message.attributes) == {
        "origin": "test",
        "relayflow_replayed_by": "op@example.com",
        "relayflow_replay_reason": "start function fixed",
        "relayflow_replay_of": replayed,
    }
    assert [m.message_id for m in hold.hold.held()] == [kept]


def test_an_edited_replay_publishes_the_fixed_data(hold: Hold) -> None:
    broken = hold.dead_letter({"flow": "registration", "input": {}})
    fixed = b'{"flow": "registration", "input": {"resource": "c"}}'
    hold.hold.replay(broken, by="op", reason="added the resource", data=fixed)
    (message,) = pull(hold.subscriber, hold.requests_subscription, count=1)
    assert message.message.data == fixed
    assert hold.hold.held() == []


def test_replaying_what_is_not_held_says_so_and_releases_the_rest(hold: Hold) -> None:
    other = hold.dead_letter({"flow": "registration"})
    with pytest.raises(DeadLetterNotFound, match="no dead letter 'nope' is held"):
        hold.hold.replay("nope", by="op", reason="try")
    assert [m.message_id for m in hold.hold.held()] == [other]


def test_a_dead_signal_is_replayed_on_the_signals_topic_not_as_a_start_message(
    hold: Hold,
) -> None:
    signal = {"token": "t.abc", "output": {"ok": True}}
    dead = hold.dead_letter(signal, CloudPubSubDeadLetterSourceSubscription=hold.signals_source)

    hold.hold.replay(dead, by="op", reason="api fixed")

    (message,) = pull(hold.subscriber, hold.signals_subscription, count=1)
    assert json.loads(message.message.data) == signal
    assert pull(hold.subscriber, hold.requests_subscription, count=1, timeout_s=1.0) == []


def test_a_replay_finds_its_message_behind_more_than_a_thousand_held(hold: Hold) -> None:
    """The scan has no fixed cap: the message asked for is the last of 1,201 held (the
    emulator hands held messages out oldest first), past the 1,000 a replay used to look at."""
    data = json.dumps({"flow": "registration"}).encode()
    futures = [hold.publisher.publish(hold.dead_topic, data, origin="filler") for _ in range(1200)]
    for future in futures:
        future.result(timeout=30)
    wanted = hold.dead_letter({"flow": "registration", "input": {"n": "wanted"}})

    hold.hold.replay(wanted, by="op", reason="the last one held")

    (message,) = pull(hold.subscriber, hold.requests_subscription, count=1)
    assert json.loads(message.message.data)["input"] == {"n": "wanted"}
    assert message.message.attributes["relayflow_replay_of"] == wanted
    assert len(hold.hold.held(limit=2000)) == 1200


def test_held_letters_say_where_a_replay_sends_them(hold: Hold) -> None:
    start = hold.dead_letter({"flow": "registration"})
    signal = hold.dead_letter(
        {"token": "t.abc"}, CloudPubSubDeadLetterSourceSubscription=hold.signals_source
    )
    shown = {m.message_id: (m.goes_to, m.signal) for m in hold.hold.held()}
    assert shown == {start: (hold.requests_topic, False), signal: (hold.signals_topic, True)}


def test_a_refused_edit_publishes_nothing_and_leaves_the_letter_held(hold: Hold) -> None:
    dead = hold.dead_letter({"flow": "registration"})

    def refuse(letter: DeadLetter, data: bytes) -> None:
        raise ValueError(f"{letter.message_id} refused")

    with pytest.raises(ValueError, match=f"{dead} refused"):
        hold.hold.replay(dead, by="op", reason="try", data=b"{}", vet=refuse)

    assert pull(hold.subscriber, hold.requests_subscription, count=1, timeout_s=1.0) == []
    assert [m.message_id for m in hold.hold.held()] == [dead]
