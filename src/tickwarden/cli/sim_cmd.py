"""`tickwarden simulate`, `demo` and `backtest`: the pipeline on a virtual clock."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.simulate import POLICIES, load_scenario, run_policy
from tickwarden.simulate.report import render_text, to_json

DEMO_SCENARIOS = ("seed-transient-fault.yaml", "seed-genuine-defect.yaml")


def quiet_loops() -> None:
    """Keep the loops' operational warnings (a lost lease, a retried delivery) out of a simulation's output."""
    import logging

    logging.getLogger("tickwarden").setLevel(logging.ERROR)


@app.command("simulate")
def simulate_command(
    scenario: Annotated[Path, typer.Argument(help="A scenario file (see docs/simulation.md).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs, alerts and notifications as JSON.")] = False,
    policy: Annotated[
        str, typer.Option("--policy", help=f"Alerting policy: {', '.join(POLICIES)}.")
    ] = "tickwarden",
) -> None:
    """Run the real pipeline on a virtual clock over a scenario and print its timeline."""
    quiet_loops()
    spec = load_scenario(scenario)
    outcome = run_policy(spec, policy)
    if as_json:
        print_json(to_json(outcome))
    else:
        print(render_text(outcome))


def shipped_scenario(name: str) -> Path:
    return Path(str(resources.files("tickwarden").joinpath("scenarios", name)))


@app.command("demo")
def demo_command() -> None:
    """Replay seed 000's two nights (transient fault, genuine defect) and compare with one message per failure."""
    quiet_loops()
    table = Table(show_lines=False, expand=True, box=box.SIMPLE_HEAVY)
    timelines = []
    verdicts = []
    for name in DEMO_SCENARIOS:
        scenario = load_scenario(shipped_scenario(name))
        console.print(Text.assemble("simulating ", (scenario.name, "bold"), " …"))
        ours = run_policy(scenario, "tickwarden")
        old = run_policy(scenario, "naive")
        threads = {(n["channel"], n["thread"]) for n in ours.notifications}
        table.add_column(scenario.name, ratio=1, overflow="fold")
        timelines.append(Text(render_text(ours, limit=None)))
        verdicts.append(
            f"{scenario.name}: tickwarden sent {len(ours.notifications)} notification(s) in {len(threads)} thread(s) "
            f"about {len(ours.alerts)} alert(s); one message per failure would have sent {len(old.notifications)} "
            f"({len(old.notifications) // 2} per channel)."
        )
    table.add_row(*timelines)
    wide = Console(highlight=False, width=max(console.width, 160))
    wide.print(table)
    for line in verdicts:
        wide.print(line)


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
    from tickwarden.errors import InvalidInput
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
