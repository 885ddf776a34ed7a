"""bench/prices: the cost of a million flows at list prices."""

from __future__ import annotations

import pytest

from bench.prices import FlowUsage, Instance, cost_per_million

ISSUE_12_FLOW = FlowUsage(
    cloud_run_cpu_s=0.1,
    cloud_run_requests=6,
    firestore_reads=5,
    firestore_writes=9,
    firestore_deletes=1,
    tasks_operations=10,
    pubsub_requests=4,
)


def test_each_line_is_usage_times_its_list_price_per_million_flows() -> None:
    # given the flow issue 12 measured and saturated 1 vCPU / 512 MiB instances
    cost = cost_per_million(ISSUE_12_FLOW, Instance())
    # then 100,000 vCPU-s and 50,000 GiB-s, 6M requests, 5M reads, 9M writes, 10M operations
    assert cost["cloud_run_cpu"] == pytest.approx(2.40)
    assert cost["cloud_run_memory"] == pytest.approx(0.125)
    assert cost["cloud_run_requests"] == pytest.approx(2.40)
    assert cost["firestore_reads"] == pytest.approx(1.50)
    assert cost["firestore_writes"] == pytest.approx(8.10)
    assert cost["firestore_deletes"] == pytest.approx(0.10)
    assert cost["cloud_tasks"] == pytest.approx(4.00)
    # 4M requests of 1000 bytes at $40 per TiB
    assert cost["pubsub"] == pytest.approx(4e6 * 1000 / 2**40 * 40, abs=0.001)
    lines = sum(v for k, v in cost.items() if k != "total")
    assert cost["total"] == pytest.approx(lines, abs=0.005)


def test_instance_time_scales_only_cloud_run_cpu_and_memory() -> None:
    low = cost_per_million(ISSUE_12_FLOW, Instance(instance_s_per_cpu_s=1.0))
    high = cost_per_million(ISSUE_12_FLOW, Instance(instance_s_per_cpu_s=5.0))
    assert high["cloud_run_cpu"] == pytest.approx(5 * low["cloud_run_cpu"])
    assert high["cloud_run_memory"] == pytest.approx(5 * low["cloud_run_memory"])
    assert high["firestore_writes"] == low["firestore_writes"]
