"""Command-line start-up: the CPU a `tickwarden` command spends before and around its own work.

    python -m benchmarks.cli [--repeat 7] [--json]

Every CLI call is a fresh interpreter, so what it imports is paid on every call (by people,
scripts, CronJob pods and the test suite alike). Each figure is the median CPU time (user +
system) of the child process over `--repeat` runs; its floor, measured in the same run, is an
interpreter importing only the libraries such a command cannot do without: Typer for `--help`,
Typer and psycopg for a command that reads the database.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys

from benchmarks.common import BENCH_URL, Figure, bench_schema, finish, parser, progress

CLI = [sys.executable, "-c", "from tickwarden.cli import main; main()"]


def cpu_seconds(command: list[str], env: dict[str, str], repeat: int) -> float:
    """The median CPU time of `command`'s process (and its children) over `repeat` runs."""
    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command[2:])} failed: {done.stderr.strip()[-500:]}")
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--repeat", type=int, default=7)
    options = args.parse_args()
    with bench_schema("bench_cli") as schema:
        joiner = "&" if "?" in BENCH_URL else "?"
        env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{BENCH_URL}{joiner}options=-c%20search_path%3D{schema}"}
        env.pop("TICKWARDEN_SCHEMA", None)
        progress(f"timing each command {options.repeat} times")
        help_floor = cpu_seconds([sys.executable, "-c", "import typer"], env, options.repeat)
        db_floor = cpu_seconds([sys.executable, "-c", "import typer, psycopg"], env, options.repeat)
        figures = [
            Figure("tickwarden --help, CPU", cpu_seconds([*CLI, "--help"], env, options.repeat), "s", help_floor),
            Figure("tickwarden tokens list (empty), CPU", cpu_seconds([*CLI, "tokens", "list"], env, options.repeat),
                   "s", db_floor),
            Figure("tickwarden workflows (empty), CPU", cpu_seconds([*CLI, "workflows"], env, options.repeat),
                   "s", db_floor),
        ]
    finish("command-line start-up (median CPU per call; floor: its libraries alone)", figures, options.json)


if __name__ == "__main__":
    main()
