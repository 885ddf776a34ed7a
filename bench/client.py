"""How fast relayflow.Client starts flows: ``start_many`` (batched publishes, futures gathered)
beside ``start`` in a loop (one publish per call, each awaited), as a ratio.

    python bench/client.py [--flows 2000] [--base-port 8520] [--wait]

Starts a local stack of its own on ``--base-port`` (the reference app), then publishes
``--flows`` start messages each way and prints flows started per second. "Started" is what
the client's call returns for: Pub/Sub has taken the message (the flow itself starts when the
start function takes it). ``--wait`` also awaits every flow's result on the client's one
results subscription and prints how long that took and the client's CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relayflow.client import Client, FlowHandle, Start  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

FLOW = "registration"


def starts(n: int, tag: str) -> list[Start]:
    return [Start(FLOW, {"resource": f"bench-{tag}-{i}"}) for i in range(n)]


def one_by_one(client: Client, batch: list[Start]) -> tuple[float, list[FlowHandle]]:
    began = time.perf_counter()
    handles = [
        client.start(s.flow, s.input, flow_id=s.flow_id, tenant=s.tenant, priority=s.priority)
        for s in batch
    ]
    return time.perf_counter() - began, handles


def batched(client: Client, batch: list[Start]) -> tuple[float, list[FlowHandle]]:
    began = time.perf_counter()
    handles = client.start_many(batch)
    return time.perf_counter() - began, handles


def await_all(handles: list[FlowHandle]) -> tuple[float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    for handle in handles:
        handle.wait(timeout=600)
    return time.perf_counter() - began, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, default=2000)
    parser.add_argument("--base-port", type=int, default=8520)
    parser.add_argument("--wait", action="store_true", help="also await every result")
    args = parser.parse_args()
    ports = Ports(args.base_port)
    with tempfile.TemporaryDirectory(prefix="bench-client-") as state:
        stack = Stack(ports=ports, state_dir=Path(state), sweep_interval_s=0)
        stack.up()
        env = relayflow_env(ports)
        os.environ.update(env)  # the Google clients read the emulator hosts from here
        try:
            with Client(environ=env) as client:
                client.listen()
                client.start_many(starts(50, "warm"))  # connections and threads made
                loop_s, looped = one_by_one(client, starts(args.flows, "loop"))
                many_s, many = batched(client, starts(args.flows, "many"))
                print(
                    f"{args.flows} flows each way, against the local stack ({os.cpu_count()} CPUs)"
                )
                print(f"  start() in a loop, each awaited   {args.flows / loop_s:9.0f} flows/s")
                print(f"  start_many (batched publishes)    {args.flows / many_s:9.0f} flows/s")
                print(f"  ratio                             {loop_s / many_s:9.1f} x")
                if args.wait:
                    waited_s, cpu_s = await_all(looped + many)
                    print(
                        f"  all {2 * args.flows} results awaited in {waited_s:.1f} s more; "
                        f"client CPU {cpu_s:.2f} s"
                    )
        finally:
            stack.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
