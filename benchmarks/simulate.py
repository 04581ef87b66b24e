"""Simulator speed: one virtual day of a mixed-cadence fleet through the real pipeline.

    python -m benchmarks.simulate [--workflows 1000] [--hours 24] [--seed 7]

The fleet and its incidents are the noise benchmark's (benchmarks/noise.py). Prints the
wall time, the virtual-to-wall ratio and the runs per wall second.
"""

from __future__ import annotations

import argparse
import logging
import time

from benchmarks.common import BENCH_URL
from benchmarks.noise import START, build
from tickwarden.clock import isoformat_z
from tickwarden.db import describe_url
from tickwarden.simulate import parse_scenario, run_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.getLogger("tickwarden").setLevel(logging.ERROR)

    raw, _, _ = build(args.workflows, max(1, (args.hours + 23) // 24), args.seed)
    from datetime import timedelta

    end = START + timedelta(hours=args.hours)
    raw["end"] = isoformat_z(end)
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    scenario = parse_scenario(raw, source="simulate-benchmark")
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


if __name__ == "__main__":
    main()
