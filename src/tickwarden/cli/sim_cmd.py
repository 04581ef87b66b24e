"""`tickwarden simulate`, `demo` and `backtest`: the pipeline on a virtual clock."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.errors import InvalidInput
from tickwarden.simulate.policies import POLICIES

DEMO_SCENARIOS = ("seed-transient-fault.yaml", "seed-genuine-defect.yaml")


def quiet_loops() -> None:
    """Keep the loops' operational warnings (a lost lease, a retried delivery) out of a simulation's output."""
    import logging

    logging.getLogger("tickwarden").setLevel(logging.ERROR)


@app.command("simulate")
def simulate_command(
    scenario: Annotated[str, typer.Argument(
        metavar="SCENARIO", help="A scenario file (see docs/simulation.md) or a shipped one's name, "
        f"e.g. {', '.join(n.removesuffix('.yaml') for n in DEMO_SCENARIOS)}.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs, alerts and notifications as JSON.")] = False,
    policy: Annotated[
        str, typer.Option("--policy", help=f"Alerting policy: {', '.join(POLICIES)}.")
    ] = "tickwarden",
) -> None:
    """Run the real pipeline on a virtual clock over a scenario and print its timeline."""
    from tickwarden.simulate import load_scenario, run_policy
    from tickwarden.simulate.report import render_text, to_json

    quiet_loops()
    spec = load_scenario(resolve_scenario(scenario))
    outcome = run_policy(spec, policy)
    if as_json:
        print_json(to_json(outcome))
    else:
        print(render_text(outcome))


def shipped_scenario(name: str) -> Path:
    return Path(str(resources.files("tickwarden").joinpath("scenarios", name)))


def shipped_names() -> list[str]:
    folder = resources.files("tickwarden").joinpath("scenarios")
    return sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def resolve_scenario(text: str) -> Path:
    """Return the scenario file `text` names: a path, else a shipped scenario's name."""
    path = Path(text)
    if path.exists() or "/" in text or text.endswith((".yaml", ".yml")):
        return path  # a path: load_scenario reports a missing file in one sentence
    if text in shipped_names():
        return shipped_scenario(f"{text}.yaml")
    raise InvalidInput(f"No scenario file or shipped scenario named {text!r}; shipped: {', '.join(shipped_names())}.")


# Below this width the two nights are printed one after the other instead of side by side.
SIDE_BY_SIDE_WIDTH = 160


def _embedded_postmaster() -> int | None:
    """Return the pid of the embedded PostgreSQL when it runs and no server URL is configured."""
    import os

    from tickwarden.db import URL_ENV, data_dir

    if os.environ.get(URL_ENV, "").strip():
        return None
    try:
        pid = int((data_dir() / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


@app.command("demo")
def demo_command() -> None:
    """Replay seed 000's two nights (transient fault, genuine defect) and compare with one message per failure."""
    import os
    import signal

    quiet_loops()
    # A demo leaves the machine as it found it: an embedded server it had to start is stopped
    # again (one that was already running, say for `serve`, is left alone).
    running_before = _embedded_postmaster()
    try:
        _demo()
    finally:
        started = _embedded_postmaster()
        if running_before is None and started is not None:
            os.kill(started, signal.SIGTERM)


def _demo() -> None:
    from rich import box
    from rich.table import Table
    from tickwarden.simulate import load_scenario, run_policy
    from tickwarden.simulate.report import render_text

    timelines = []
    verdicts = []
    names = []
    for name in DEMO_SCENARIOS:
        scenario = load_scenario(shipped_scenario(name))
        console.print(Text.assemble("simulating ", (scenario.name, "bold"), " …"))
        ours = run_policy(scenario, "tickwarden")
        old = run_policy(scenario, "naive")
        threads = {(n["channel"], n["thread"]) for n in ours.notifications}
        names.append(scenario.name)
        timelines.append(Text(render_text(ours, limit=None)))
        verdicts.append(
            f"{scenario.name}: tickwarden sent {len(ours.notifications)} notification(s) in {len(threads)} thread(s) "
            f"about {len(ours.alerts)} alert(s); one message per failure would have sent {len(old.notifications)} "
            f"({len(old.notifications) // 2} per channel)."
        )
    if console.width >= SIDE_BY_SIDE_WIDTH:
        table = Table(show_lines=False, expand=True, box=box.SIMPLE_HEAVY)
        for name in names:
            table.add_column(name, ratio=1, overflow="fold")
        table.add_row(*timelines)
        console.print(table)
    else:
        for name, timeline in zip(names, timelines, strict=True):
            console.rule(name)
            console.print(timeline, overflow="fold", soft_wrap=False)
    for line in verdicts:
        console.print(line, soft_wrap=False)  # the demo is for people: fitted to the width


@app.command("backtest")
def backtest_command(
    history: Annotated[
        Path | None, typer.Argument(help="A CSV or JSONL export of attempts; omit to replay the ledger.")
    ] = None,
    policy: Annotated[str, typer.Option("--policy", help=f"Policy to compare: {', '.join(POLICIES)}.")] = "tickwarden",
    set_: Annotated[
        list[str], typer.Option("--set", help="A proposed override for every workflow, e.g. --set alert_after=5.")
    ] = [],  # noqa: B006 - typer needs a literal default
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay recorded history under a policy or proposed overrides and compare with the current policy."""
    quiet_loops()
    from tickwarden.cli.profile_cmd import parse_settings
    from tickwarden.db import Database
    from tickwarden.profile import parse_overrides
    from tickwarden.simulate.backtest import compare, history_from_ledger, read_history, replay

    overrides = parse_overrides(parse_settings(set_)).model_dump(exclude_none=True)
    if policy == "tickwarden" and not overrides:
        raise InvalidInput("Nothing to compare: name a --policy or give at least one --set override.")
    if history is not None:
        records = read_history(history)
    else:
        with Database(max_size=2) as db:
            records = history_from_ledger(db)
    current = replay(records, "tickwarden", name="current policy")
    proposed = replay(records, policy, overrides=overrides, name=f"proposed ({policy}{' + ' + str(overrides) if overrides else ''})")
    result = compare(current, proposed)
    if as_json:
        print_json(result)
        return
    console.print(f"replayed {len(records)} recorded attempt(s)")
    for label in ("current", "proposed"):
        totals = result[label]
        console.print(
            f"{label:>8}: {totals['alerts']} alert(s), {totals['messages']} message(s) in {totals['threads']} thread(s); "
            f"{totals['failed_ticks']} failed or missed tick(s)"
        )
    for key, diff in result["changed_workflows"].items():
        console.print(
            f"  {key}: alerts {diff['current_alerts']} → {diff['proposed_alerts']}, "
            f"messages {diff['current_messages']} → {diff['proposed_messages']}"
        )
