"""Simulator speed: one virtual day of a mixed-cadence fleet through the real pipeline.

    python -m benchmarks.simulate [--workflows 1000] [--hours 24] [--seed 7] [--json]

The fleet and its incidents are the noise benchmark's (benchmarks/noise.py). Prints the
wall time, the virtual-to-wall ratio and the runs per wall second; the client's CPU and, when
the server runs on this machine, the database server's; and beside the wall time its floor,
the same runs and outcomes written with nothing else (`common.bare_ledger`), in the same run.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from benchmarks import common
from benchmarks.common import BENCH_URL, Figure, Target, bare_ledger, finish, progress, settled_server_cpu
from benchmarks.noise import START, build
from tickwarden.clock import isoformat_z
from tickwarden.db import describe_url
from tickwarden.simulate import parse_scenario, run_policy
from tickwarden.simulate.engine import APPLICATION_NAME as SIMULATION


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.getLogger("tickwarden").setLevel(logging.ERROR)

    progress(f"building the scenario: {args.workflows:,} workflows over {args.hours} hours")
    raw, _, _ = build(args.workflows, max(1, (args.hours + 23) // 24), args.seed)
    end = START + timedelta(hours=args.hours)
    raw["end"] = isoformat_z(end)
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    scenario = parse_scenario(raw, source="simulate-benchmark")
    progress("simulating")
    server0 = settled_server_cpu(SIMULATION)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    outcome = run_policy(scenario, "tickwarden", url=BENCH_URL)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    server1 = settled_server_cpu(SIMULATION)
    server = None if server0 is None or server1 is None else server1 - server0
    progress("writing the same runs and outcomes bare, the floor")
    floor, statements = bare_ledger(outcome.runs)
    virtual = args.hours * 3600
    print(f"\n== simulate: {args.workflows} workflows over {args.hours} virtual hours ({describe_url(BENCH_URL)})")
    print(f"  runs                 {len(outcome.runs):,}")
    print(f"  alerts / messages    {len(outcome.alerts):,} / {len(outcome.notifications):,}")
    print(f"  wall time            {wall:.1f} s  (client CPU {cpu:.1f} s, "
          f"database server CPU {'not on this machine' if server is None else f'{server:.1f} s'})")
    print(f"  floor                {floor:.1f} s  (the runs and outcomes alone, {statements:,} statements)")
    print(f"  virtual-to-wall      {virtual / wall:,.0f}×")
    print(f"  runs per wall second {len(outcome.runs) / wall:,.0f}")
    # The target speaks of 1,000 workflows over one virtual day. No peer can backtest; the floor is
    # the same runs and outcomes written with nothing else, one virtual instant at a time (`bare_ledger`).
    at_size = args.workflows == 1000 and args.hours == 24
    size = f"{args.workflows:,} workflows x {args.hours} virtual hours"
    finish("simulate figures", [
        Figure(f"{size}, wall", wall, "s", floor, target=Target("<", 5) if at_size else None),
        Figure(f"{size}, client CPU", cpu, "s"),
        *([] if server is None else [Figure(f"{size}, database server CPU", server, "s")]),
        Figure(f"{size}, runs", len(outcome.runs), "runs"),
    ], args.json)


if __name__ == "__main__":
    main()
