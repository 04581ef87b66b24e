"""Run every benchmark in turn: `python -m benchmarks` (or `make bench`).

The noise benchmark is its own command, since a month of a thousand workflows under five
policies takes long: `python -m benchmarks.noise`.
"""

import runpy
import sys

BENCHMARKS = ["benchmarks.ledger", "benchmarks.worker", "benchmarks.ticker", "benchmarks.pipeline", "benchmarks.api", "benchmarks.notifier", "benchmarks.simulate", "benchmarks.memory", "benchmarks.retention"]

if __name__ == "__main__":
    for name in BENCHMARKS:
        print(f"\n######## {name}", flush=True)
        sys.argv = [name]
        runpy.run_module(name, run_name="__main__")
