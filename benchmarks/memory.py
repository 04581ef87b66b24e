"""Control-plane memory: one replica's loops over a fleet of 1,000,000 schedules.

    python -m benchmarks.memory [--schedules 1000000] [--minutes 3] [--json]

Fills a fresh schema with a mixed fleet (the ticker benchmark's), then drives every
loop of `tickwarden serve` (`service.build_loops`) pass by pass on a virtual clock,
minute after minute, as the service would on the wall clock. Prints the process's
peak resident memory before the loops (its floor: the interpreter with tickwarden
imported) and after them; the DESIGN.md target is < 250 MB with 1,000,000 schedules.
"""

from __future__ import annotations

import logging
import resource
import time
from datetime import timedelta

from benchmarks import common
from benchmarks.common import BENCH_URL, Figure, Target, bench_schema, finish, progress
from benchmarks.ticker import START, fill
from tickwarden.db import Database
from tickwarden.service import build_loops


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("tickwarden").setLevel(logging.ERROR)
    with bench_schema("benchmem") as schema:
        progress(f"filling {args.schedules:,} schedules of mixed cadence")
        fill(schema, args.schedules, mixed=True)
        with Database(BENCH_URL, schema=schema, max_size=1) as db, db.connection() as conn:
            # published just now: the deadline detector owes no look-back of ticks before it
            conn.execute("UPDATE schedules SET created_at = %(t)s, updated_at = %(t)s, published_at = %(t)s",
                         {"t": START})
        before = peak_mb()
        with Database(BENCH_URL, schema=schema, max_size=4) as db:
            loops = build_loops(db, "memory-bench")
            due = {loop.name: START for loop in loops}
            end = START + timedelta(minutes=args.minutes)
            t0 = time.perf_counter()
            passes = 0
            progress(f"driving every loop over {args.minutes} virtual minutes")
            while True:
                name, at = min(due.items(), key=lambda item: item[1])
                if at > end:
                    break
                following = next(loop for loop in loops if loop.name == name).run_once(at)
                due[name] = max(following, at + timedelta(milliseconds=1))
                passes += 1
            wall = time.perf_counter() - t0
        after = peak_mb()
    print(f"\n== control-plane memory, {args.schedules:,} schedules, {args.minutes} virtual minutes")
    print(f"  passes of every loop    {passes:,} in {wall:.0f} s")
    print(f"  peak RSS before loops   {before:.0f} MB")
    print(f"  peak RSS after loops    {after:.0f} MB")
    finish("memory figures (floor: the process before any loop ran)", [
        Figure(f"control-plane peak RSS, {args.schedules:,} schedules, {args.minutes} virtual minutes", after, "MB",
               before, Target("<", 250) if args.schedules >= 1_000_000 else None),
    ], args.json)


if __name__ == "__main__":
    main()
