"""Simulator speed: one virtual day of a mixed-cadence fleet through the real pipeline.

    python -m benchmarks.simulate [--workflows 1000] [--hours 24] [--seed 7] [--json]

The fleet and its incidents are the noise benchmark's (benchmarks/noise.py). Prints the
wall time, the virtual-to-wall ratio and the runs per wall second.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from benchmarks import common
from benchmarks.common import BENCH_URL, Figure, Target, finish, progress
from benchmarks.noise import START, build
from tickwarden.clock import isoformat_z
from tickwarden.db import describe_url
from tickwarden.simulate import parse_scenario, run_policy


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
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    outcome = run_policy(scenario, "tickwarden", url=BENCH_URL)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    virtual = args.hours * 3600
    print(f"\n== simulate: {args.workflows} workflows over {args.hours} virtual hours ({describe_url(BENCH_URL)})")
    print(f"  runs                 {len(outcome.runs):,}")
    print(f"  alerts / messages    {len(outcome.alerts):,} / {len(outcome.notifications):,}")
    print(f"  wall time            {wall:.1f} s  (client CPU {cpu:.1f} s)")
    print(f"  virtual-to-wall      {virtual / wall:,.0f}×")
    print(f"  runs per wall second {len(outcome.runs) / wall:,.0f}")
    # The target speaks of 1,000 workflows over one virtual day; no floor or peer can backtest.
    at_size = args.workflows == 1000 and args.hours == 24
    finish("simulate figures", [
        Figure(f"{args.workflows:,} workflows x {args.hours} virtual hours, wall", wall, "s",
               target=Target("<", 5) if at_size else None),
        Figure(f"{args.workflows:,} workflows x {args.hours} virtual hours, client CPU", cpu, "s"),
        Figure(f"{args.workflows:,} workflows x {args.hours} virtual hours, runs", len(outcome.runs), "runs"),
    ], args.json)


if __name__ == "__main__":
    main()
