"""Run the benchmarks, each in its own process, then print one table of every figure.

    python -m benchmarks [--quick] [--only ticker,worker] [--json]

Each benchmark runs as `python -m benchmarks.NAME --json`: a process of its own, so that its
process pools, memory peak and imports are its own. Its progress and tables go by as they
come; its last line is its figures' JSON list, gathered here into one summary: each figure,
the floor or peer measured in the same run, the ratio and the DESIGN.md target. `--quick`
runs them at small sizes (a few minutes in all; targets tied to a size then do not apply).
The noise month is not in the default set (it takes the better part of an hour): name it
with `--only noise`. Exits 1 when a benchmark failed: printed no figures, or exited non-zero
after printing them (the noise month does when tickwarden missed a genuine incident); the
figures a failed benchmark did print are in the summary all the same.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchmarks import catalogs
from benchmarks.common import BENCH_URL, Figure, Target, progress, table

BENCHMARKS = ["ticker", "ledger", "worker", "pipeline", "simulate", "memory", "api", "notifier", "retention", "cli"]
EVERY = [*BENCHMARKS, "noise", "partitions"]  # the last two take the better part of an hour each

# Sizes for `--quick`: the same code paths, small enough for minutes rather than half an hour.
QUICK = {
    "ticker": ["--schedules", "10000", "--batch", "5000"],
    "ledger": ["--large", "200000", "--repeat", "300", "--seconds", "1.5"],
    "worker": ["--attempts", "100", "--repeat", "20", "--cold", "3"],
    "pipeline": ["--workflows", "1000", "--history", "20", "--outcomes", "10", "--latency-seconds", "5"],
    "simulate": ["--workflows", "200", "--hours", "6"],
    "memory": ["--schedules", "20000", "--minutes", "2"],
    "api": ["--tenants", "20", "--repeat", "10"],
    "notifier": ["--alerts", "300", "--history", "20000"],
    "noise": ["--workflows", "100", "--days", "3", "--policies", "tickwarden"],
    "retention": ["--workflows", "50", "--days", "60"],
    "cli": ["--repeat", "3"],
    "partitions": ["--runs", "400000", "--small", "200000", "--workflows", "500", "--repeat", "100"],
}


def run(name: str, extra: list[str]) -> tuple[list[Figure] | None, int]:
    """Run one benchmark; return the figures of its last line (None when it printed none) and its exit status."""
    command = [sys.executable, "-m", f"benchmarks.{name}", "--json", *extra]
    print(f"\n######## {name}: {' '.join(command[1:])}", flush=True)
    t0 = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        last = ""
        for line in proc.stdout:
            if last:
                print(last, end="", flush=True)
            last = line
    print(f"######## {name}: {time.perf_counter() - t0:.0f} s, exit status {proc.returncode}", flush=True)
    try:
        rows = json.loads(last)
    except ValueError:
        print(last, end="")
        return None, proc.returncode
    figures = [Figure(f"{name}: {r['name']}", r["value"], r["unit"], r["floor"], _target(r["target"])) for r in rows]
    return figures, proc.returncode


def _target(text: str | None) -> Target | None:
    """Read back a target as `Target.describe` wrote it."""
    if text is None:
        return None
    op, bound = text.split(" ")[:2]
    return Target(op, float(bound.rstrip("x")), of_floor=bound.endswith("x"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: minutes instead of half an hour")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated, of: {', '.join(EVERY)}")
    parser.add_argument("--json", action="store_true", help="print every figure as a JSON list on the last line")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in EVERY]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(EVERY)}")
    figures: list[Figure] = []
    failed: list[str] = []
    t0 = time.perf_counter()
    compacted = catalogs.tidy(BENCH_URL, full=True)  # so that no figure pays for an earlier run's dropped schemas
    if compacted:
        progress(f"autovacuum is off: compacted {len(compacted)} system catalogs first")
    for name in names:
        printed, status = run(name, QUICK[name] if args.quick else [])
        figures += printed or []
        if printed is None or status != 0:
            failed.append(f"{name} ({'no figures' if printed is None else 'figures in the summary'}, exit status {status})")
    mode = "quick sizes" if args.quick else "full sizes"
    print(table(figures, f"summary: {len(names)} benchmark(s), {mode}, {time.perf_counter() - t0:.0f} s"))
    if failed:
        print(f"\nfailed, see their output above: {'; '.join(failed)}", file=sys.stderr)
    if args.json:
        print(json.dumps([f.as_json() for f in figures]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
