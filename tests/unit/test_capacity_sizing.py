"""Each environment's sizes from a profile and a target: instances at 70 % CPU, threads from
the vCPUs, queue shards at 70 % of each queue's rate, and the bounds the module enforces."""

from __future__ import annotations

import pytest

from relayflow.capacity.deployment import Deployment, Indexes, QueueKind, Service
from relayflow.capacity.sizing import (
    MIN_MAX_INSTANCES,
    EnvSizing,
    Profile,
    SizingError,
    render,
    size,
    written_shards,
)

PROFILE = Profile(
    cpu_s={"start-flow": 0.008, "worker": 0.014, "poller": 0.030},
    requests={"start-flow": 1.0, "worker": 1.0, "poller": 2.4},
    tasks={"steps": 1.0, "polls": 2.4},
)


def deployment(poller_cpu: float = 1.0, rate: float = 500.0) -> Deployment:
    return Deployment(
        indexes=Indexes(),
        queues=(
            QueueKind("steps", "flow-steps", 1, rate),
            QueueKind("polls", "flow-polls", 1, rate),
        ),
        collections={},
        services=(
            Service("start-flow", 1),
            Service("worker", 1),
            Service("poller", 1, cpu=poller_cpu),
            Service("api", 1),
        ),
    )


def test_instances_keep_each_service_at_70_percent_cpu() -> None:
    sized = size("prod", 10_000, PROFILE, deployment())

    # 0.030 s x 10,000/s = 300 vCPU; at 70 % of 1 vCPU each: 429 instances.
    assert sized.max_instances["poller"] == 429
    assert sized.max_instances["worker"] == 200
    assert sized.max_instances["start-flow"] == 115
    assert sized.max_instances["api"] == 3


def test_a_small_target_keeps_room_for_a_deploy() -> None:
    sized = size("dev", 1, PROFILE, deployment())

    assert set(sized.max_instances.values()) == {MIN_MAX_INSTANCES}
    assert sized.queue_shards == 1


def test_threads_follow_the_vcpus() -> None:
    sized = size("prod", 100, PROFILE, deployment(poller_cpu=2.0))

    assert sized.concurrency["poller"] == 16
    assert sized.concurrency["worker"] == 8


def test_queue_shards_keep_every_kind_at_70_percent_of_its_rate() -> None:
    # polls: 2.4 x 10,000 = 24,000/s over 350/s per queue.
    assert size("prod", 10_000, PROFILE, deployment()).queue_shards == 69
    assert size("prod", 10_000, PROFILE, deployment(rate=1_000)).queue_shards == 69
    assert size("prod", 1_000, PROFILE, deployment(rate=200)).queue_shards == 18


def test_a_target_beyond_the_queues_a_region_holds_is_refused() -> None:
    with pytest.raises(SizingError, match="queue shards per kind"):
        size("prod", 50_000, PROFILE, deployment())


def test_a_target_must_be_positive() -> None:
    with pytest.raises(SizingError, match="must be > 0"):
        size("prod", 0, PROFILE, deployment())


def test_a_profile_with_a_negative_figure_is_refused() -> None:
    with pytest.raises(SizingError, match=r"cpu_s_per_flow\.worker"):
        Profile.from_json(
            {"cpu_s_per_flow": {"worker": -1}, "requests_per_flow": {}, "tasks_per_flow": {}}
        )


def test_the_rendered_file_gives_the_shards_it_was_written_with() -> None:
    sized = EnvSizing("prod", 10, {"start-flow": 3}, {"start-flow": 8}, 7)

    text = render(sized, PROFILE)

    assert written_shards(text) == 7
    assert 'variable "max_instances"' in text and "start-flow = 3" in text
    assert written_shards("") == 1


def test_the_api_grows_with_the_callbacks_a_mix_completes() -> None:
    callbacks = Profile({**PROFILE.cpu_s, "api": 0.0325}, PROFILE.requests, PROFILE.tasks)

    assert size("prod", 10_000, PROFILE, deployment()).max_instances["api"] == 3
    # 0.0325 s x 1,000/s = 32.5 vCPU at 70 %: 47 instances.
    assert size("prod", 1_000, callbacks, deployment()).max_instances["api"] == 47
