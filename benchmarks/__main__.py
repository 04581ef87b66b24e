"""Run every benchmark in turn: `python -m benchmarks` (or `make bench`)."""

import runpy
import sys

BENCHMARKS = ["benchmarks.ledger", "benchmarks.worker", "benchmarks.ticker", "benchmarks.pipeline", "benchmarks.api", "benchmarks.notifier"]

if __name__ == "__main__":
    for name in BENCHMARKS:
        print(f"\n######## {name}", flush=True)
        sys.argv = [name]
        runpy.run_module(name, run_name="__main__")
