"""bench/prices: the cost of a million flows at list prices, per location and at a rate."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench.prices import (
    CLOUD_RUN,
    DEFAULT_LOCATION,
    FIRESTORE,
    MEASURED,
    CloudRunService,
    FlowOps,
    FlowUsage,
    Instance,
    beyond_task_price_list,
    billed_instance_s_per_s,
    cost_at_rate,
    cost_per_million,
    cost_terms,
    instances_needed,
    main,
)
from tests.infra import tfconfig

ISSUE_12_FLOW = FlowUsage(
    cloud_run_cpu_s=0.1,
    cloud_run_requests=6,
    firestore_reads=5,
    firestore_writes=9,
    firestore_deletes=1,
    tasks_operations=10,
    pubsub_requests=4,
)

# Round figures, so that every line can be worked out by hand.
FLOW = FlowOps(
    firestore_reads=5,
    firestore_writes=7,
    firestore_deletes=1,
    task_operations=8,
    pubsub_messages=2,
    pubsub_message_bytes=200,
    cloud_run_requests=5,
    cpu_s_per_request=0.01,
    wall_s_per_request=0.05,
)
FIRESTORE_LINES = ("firestore_reads", "firestore_writes", "firestore_deletes")


def test_each_line_is_usage_times_its_list_price_per_million_flows() -> None:
    # given the flow issue 12 measured and saturated 1 vCPU / 512 MiB instances
    cost = cost_per_million(ISSUE_12_FLOW, Instance(), "us-central1")
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


def test_the_default_location_is_the_one_every_environment_creates() -> None:
    # Pricing any other location would price a database no environment has.
    defaults = {
        env.name: tfconfig.load(env).variables["firestore_location"].body["default"]
        for env in tfconfig.env_dirs()
    }
    assert defaults
    assert set(defaults.values()) == {DEFAULT_LOCATION}, defaults
    assert DEFAULT_LOCATION in FIRESTORE


def test_the_nam5_multi_region_prices_firestore_at_twice_us_central1() -> None:
    nam5 = cost_per_million(ISSUE_12_FLOW, Instance(), "nam5")
    region = cost_per_million(ISSUE_12_FLOW, Instance(), "us-central1")
    # 9M writes at $0.18 per 100,000
    assert nam5["firestore_writes"] == pytest.approx(16.20)
    for line in FIRESTORE_LINES:
        assert nam5[line] == pytest.approx(2 * region[line])
    for line in ("cloud_run_cpu", "cloud_run_requests", "cloud_tasks", "pubsub"):
        assert nam5[line] == region[line]
    assert cost_per_million(ISSUE_12_FLOW, Instance()) == nam5  # the default


def test_a_location_without_prices_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"'eur3'.*known: nam5, us-central1"):
        cost_per_million(ISSUE_12_FLOW, Instance(), "eur3")
    with pytest.raises(ValueError, match="eur3"):
        cost_at_rate(FLOW, 100, "eur3")


def test_instances_follow_the_cpu_the_requests_use_at_the_cpu_target() -> None:
    # 1,000 flows/s * 5 requests * 10 ms = 50 vCPUs busy; at 60 % of 1 vCPU each: 83.3
    assert instances_needed(FLOW, 1000, CloudRunService()) == 84
    # 2 vCPUs an instance halve it (with room for the requests in flight)
    assert instances_needed(FLOW, 1000, CloudRunService(vcpu=2, concurrency=80)) == 42
    # at the Terraform's 8 a 2-vCPU instance, the requests in flight bind: 250 / 4.8
    assert instances_needed(FLOW, 1000, CloudRunService(vcpu=2)) == 53


def test_instances_follow_the_requests_in_flight_when_requests_wait() -> None:
    # 5,000 requests/s held 2 s each: 10,000 in flight, at 60 % of 80 a instance: 208.3
    waiting = replace(FLOW, wall_s_per_request=2.0)
    assert instances_needed(waiting, 1000, CloudRunService(concurrency=80)) == 209
    assert instances_needed(waiting, 1000, CloudRunService(concurrency=1000)) == 84


def test_min_instances_are_a_floor() -> None:
    assert instances_needed(FLOW, 1, CloudRunService()) == 1
    assert instances_needed(FLOW, 1, CloudRunService(min_instances=5)) == 5
    assert instances_needed(FLOW, 1000, CloudRunService(min_instances=5)) == 84


def test_instance_based_billing_bills_every_instance_second_and_no_request() -> None:
    cost = cost_at_rate(FLOW, 1000, "us-central1")
    lines = cost.lines["instance_based"]
    # 84 instance-seconds each second for 1,000 flows: 0.084 instance-s a flow
    assert cost.instances == 84
    assert lines["cloud_run_cpu"] == pytest.approx(0.084 * 0.000018 * 1e6)
    assert lines["cloud_run_memory"] == pytest.approx(0.084 * 0.5 * 0.000002 * 1e6)
    assert lines["cloud_run_requests"] == 0.0


def test_request_based_billing_at_a_high_rate_bills_all_the_time_and_the_requests() -> None:
    # 5,000 requests/s over 84 instances: ~3 in flight each, gaps far under 100 ms
    cost = cost_at_rate(FLOW, 1000, "us-central1")
    lines = cost.lines["request_based"]
    assert billed_instance_s_per_s(FLOW, 1000, 84, "request_based") == pytest.approx(84)
    assert lines["cloud_run_cpu"] == pytest.approx(0.084 * 0.000024 * 1e6)
    assert lines["cloud_run_requests"] == pytest.approx(5 * 0.40)
    assert cost.total("instance_based") < cost.total("request_based")


def test_request_based_billing_at_a_low_rate_bills_each_request_rounded_up() -> None:
    # 1 request every 200 s on one instance: each is billed alone, 50 ms rounded up to 100 ms
    lone = replace(FLOW, cloud_run_requests=1)
    billed = billed_instance_s_per_s(lone, 0.005, 1, "request_based")
    assert billed / 0.005 == pytest.approx(0.05 + 0.1, rel=0.01)  # wall + the rounding, in full
    assert billed_instance_s_per_s(lone, 0.005, 1, "instance_based") == 1.0


def test_an_unknown_billing_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'monthly'"):
        billed_instance_s_per_s(FLOW, 1000, 84, "monthly")


def test_the_lines_beyond_cloud_run_are_operations_times_their_prices() -> None:
    for billing in CLOUD_RUN:
        lines = cost_at_rate(FLOW, 1000, "nam5").lines[billing]
        assert lines["firestore_reads"] == pytest.approx(5 * 0.06 / 1e5 * 1e6)
        assert lines["firestore_writes"] == pytest.approx(7 * 0.18 / 1e5 * 1e6)
        assert lines["firestore_deletes"] == pytest.approx(1 * 0.02 / 1e5 * 1e6)
        assert lines["cloud_tasks"] == pytest.approx(8 * 0.40)
        # 2 messages published and delivered, each billed at the 1000-byte minimum
        assert lines["pubsub"] == pytest.approx(4 * 1000 / 2**40 * 40 * 1e6)
        assert lines["total"] == pytest.approx(sum(v for k, v in lines.items() if k != "total"))


def test_pubsub_bills_a_large_message_by_its_size() -> None:
    large = replace(FLOW, pubsub_message_bytes=5000)
    lines = cost_at_rate(large, 1000).lines["instance_based"]
    assert lines["pubsub"] == pytest.approx(4 * 5000 / 2**40 * 40 * 1e6)


def test_committed_use_discounts_take_only_cloud_runs_lines() -> None:
    cost = cost_at_rate(FLOW, 1000)
    lines = cost.lines["instance_based"]
    cloud_run = lines["cloud_run_cpu"] + lines["cloud_run_memory"]
    assert cost.total("instance_based", "1 year") == pytest.approx(
        lines["total"] - 0.28 * cloud_run
    )
    assert cost.total("instance_based", "3 years") == pytest.approx(
        lines["total"] - 0.46 * cloud_run
    )
    request = cost.lines["request_based"]
    request_cloud_run = sum(request[k] for k in ("cloud_run_cpu", "cloud_run_memory"))
    request_cloud_run += request["cloud_run_requests"]
    assert cost.total("request_based", "1 year") == pytest.approx(
        request["total"] - 0.17 * request_cloud_run
    )


def test_a_month_of_the_rate_is_730_hours_of_flows() -> None:
    cost = cost_at_rate(FLOW, 1000)
    flows = 1000 * 730 * 3600
    assert cost.per_month("instance_based") == pytest.approx(
        cost.total("instance_based") * flows / 1e6
    )


def test_the_target_rate_passes_the_task_operations_cloud_tasks_lists_a_price_for() -> None:
    # 5 billion a month is about 1,900 operations a second
    assert beyond_task_price_list(MEASURED, 10_000)
    assert not beyond_task_price_list(MEASURED, 100)


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="rate_per_s must be positive"):
        cost_at_rate(FLOW, 0)
    with pytest.raises(ValueError, match="firestore_writes"):
        replace(FLOW, firestore_writes=-1)
    with pytest.raises(ValueError, match="cpu_target"):
        CloudRunService(cpu_target=0)
    with pytest.raises(ValueError, match="concurrency"):
        CloudRunService(concurrency=0)


def test_the_measured_flow_at_the_target_rate_costs_more_in_nam5() -> None:
    nam5 = cost_at_rate(MEASURED, 10_000, "nam5")
    region = cost_at_rate(MEASURED, 10_000, "us-central1")
    # 48,600 requests/s of 9.24 ms: 449.1 vCPUs, at 60 %: 749 instances
    assert nam5.instances == region.instances == math.ceil(48_600 * 0.00924 / 0.6)
    for billing in CLOUD_RUN:
        firestore = sum(region.lines[billing][line] for line in FIRESTORE_LINES)
        assert nam5.total(billing) == pytest.approx(region.total(billing) + firestore)


def test_the_table_names_the_location_and_shows_the_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--rate", "10000"]) == 0
    out = capsys.readouterr().out
    assert "Firestore in nam5 (the Terraform default)" in out
    assert "total, Firestore in us-central1" in out
    assert "request-based" in out and "instance-based" in out
    assert "749 x (1 vCPU, 0.5 GiB)" in out
    assert "contact sales" in out


def test_flags_replace_the_measured_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rate", "100", "--location", "us-central1", "--writes", "4.3"]) == 0
    out = capsys.readouterr().out
    assert "Firestore in us-central1;" in out
    assert "writes / reads / deletes 4.3 / 4.84 / 1" in out
    assert "total, Firestore in nam5" in out


def test_a_bad_flag_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--writes", "-1"]) == 2
    assert "firestore_writes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--rate", "0"])


def test_a_flow_priced_by_its_tries_costs_what_its_lines_add_up_to() -> None:
    # docs/analytics.md prices each ended flow as per_flow + per_try x (polls + attempts): for
    # the measured flow (3.86 tries) that is every line at request-based prices with billed
    # time = CPU time.
    usage = FlowUsage(
        cloud_run_cpu_s=MEASURED.cloud_run_requests * MEASURED.cpu_s_per_request,
        cloud_run_requests=MEASURED.cloud_run_requests,
        firestore_reads=MEASURED.firestore_reads,
        firestore_writes=MEASURED.firestore_writes,
        firestore_deletes=MEASURED.firestore_deletes,
        tasks_operations=MEASURED.task_operations,
        pubsub_requests=2 * MEASURED.pubsub_messages,
    )
    whole = cost_per_million(usage, Instance(instance_s_per_cpu_s=1.0))["total"]
    terms = cost_terms()
    assert terms.usd(MEASURED.task_operations / 2) * 1e6 == pytest.approx(whole, abs=0.01)


def test_each_try_adds_a_task_a_request_and_the_firestore_share() -> None:
    terms = cost_terms(FLOW, "us-central1")
    tries = FLOW.task_operations / 2
    firestore = FIRESTORE["us-central1"]
    request = 0.40e-6 + FLOW.cpu_s_per_request * (0.000024 + 0.5 * 0.0000025)
    assert terms.per_try_usd == pytest.approx(
        request
        + 2 * 0.40e-6
        + (FLOW.firestore_reads * firestore.read + FLOW.firestore_writes * firestore.write) / tries
    )
    start_requests = FLOW.cloud_run_requests - tries
    assert terms.per_flow_usd == pytest.approx(
        FLOW.firestore_deletes * firestore.delete
        + 2 * FLOW.pubsub_messages * 1000 / 2**40 * 40
        + start_requests * request
    )
    with pytest.raises(ValueError, match="no try"):
        cost_terms(replace(FLOW, task_operations=0))
