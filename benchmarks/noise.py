"""Noise benchmark: messages, threads, recall, false alarms and detection delay, per policy.

    python -m benchmarks.noise [--workflows 1000] [--days 30] [--seed 7] [--policies all] [--jobs 2] [--details]
                               [--json]

A seeded synthetic fleet across cadences (every 10 minutes to weekly) lives through a
period with incidents of five kinds (transient ones up to one a workflow every two days,
each placed inside a run so that it is observable, never two in the same run; a genuine
one for a fifth of the workflows):

| kind            | what happens                                              | genuine? |
|-----------------|-----------------------------------------------------------|----------|
| blip            | a connection fault of 2–20 seconds inside a run           | no       |
| crash           | the worker dies part-way through one attempt              | no       |
| outage          | a connection fault of 2–6 hours                           | yes      |
| defect          | a step error for 2–12 hours, then a fix and a manual run  | yes      |
| trigger outage  | the trigger fires nothing for 2–6 hours                   | yes      |
| intermittent    | for 4–12 hours (hourly jobs 8–16) each tick fails at 90 % | yes      |
|                 | odds, never enough in a row for the streak (every 10 min  |          |
|                 | to hourly): about half of them where one in a row is all  |          |
|                 | that is allowed, about two thirds where two are           |          |

Genuine incidents last at least two hours, so that they fail at least two consecutive
ticks of any workflow running hourly or more often (one failed tick of such a workflow
is what its next tick retries). An incident counts only when it touches at least one
tick. It is *detected* when the policy opens an alert (or sends a message) for its
workflow between its start and its end plus two cadences plus an hour; the detection
delay is measured from the first tick it touched, when the failure became observable. An alert or message about a workflow with no
genuine incident under way is a *false alarm*: it is about failures that would have
recovered by themselves. Each policy is simulated through the real pipeline on its own
fresh schema (see docs/simulation.md); all policies see the very same scenario.

Recall is also reported per incident kind, and messages and detection delay per error
category of the genuine incident they are about (`categories.categorize` of its error:
an outage's refused connection is `connection`, which earns a backoff; a defect's
exception in customer code is `step_error`, which pages fast; a trigger outage is
`missed`); messages about no genuine incident are counted as `false alarm`. The
`streak-only` policy is tickwarden with the failure-rate rule off: the month before
that rule.

Each simulation's wall time is printed beside its floor, the first policy's runs and
outcomes written with nothing else one virtual instant at a time (`common.bare_ledger`),
with the client's CPU and, for a policy simulated alone on a server on this machine, the
database server's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from benchmarks.common import BENCH_URL, Figure, Target, bare_ledger, finish, settled_server_cpu
from tickwarden.cadence import cadence_of, parse_schedule
from tickwarden.categories import categorize
from tickwarden.clock import isoformat_z, parse_utc
from tickwarden.db import describe_url
from tickwarden.simulate import POLICIES, parse_scenario, run_policy
from tickwarden.simulate.engine import APPLICATION_NAME as SIMULATION
from tickwarden.simulate.engine import SimulationOutcome

START = parse_utc("2026-11-01T00:00:00Z")
DETAILS = 12  # items of each list that --details prints per policy

# (class, weight, cron template, duration seconds)
CADENCES = [
    ("10 min", 3, "{m10}-59/10 * * * *", 40),
    ("30 min", 7, "{m30}-59/30 * * * *", 60),
    ("hourly", 25, "{m} * * * *", 120),
    ("6-hourly", 15, "{m} */6 * * *", 300),
    ("daily", 35, "{m} {h} * * *", 600),
    ("weekly", 15, "{m} {h} * * {d}", 900),
]
# Cadences intermittent incidents hit (the failure-rate rule's own bands), and the most
# failed ticks in a row each allows: one fewer than the streak that would alert.
INTERMITTENT_RUN = {"10 min": 2, "30 min": 1, "hourly": 1}
# How long they last, in hours: at least the hourly band's rate window of 8 ticks for an
# hourly job (a 4-hour one fails 2 or 3 ticks of the 8 and is, by design, not caught).
INTERMITTENT_HOURS = {"10 min": (4, 12), "30 min": (4, 12), "hourly": (8, 16)}
INTERMITTENT_SHARE = 0.9  # chance that a tick fails when the cap on a row allows it
INTERMITTENT_ERROR = "upstream API answered 503: service temporarily unavailable"
ERRORS = {"outage": "could not connect to warehouse: connection refused",
          "defect": "KeyError: 'customer_id' in recipe join_orders",
          "intermittent": INTERMITTENT_ERROR}


@dataclass(frozen=True)
class Incident:
    workflow: str
    kind: str
    start: datetime
    end: datetime
    genuine: bool


def build(workflows: int, days: int, seed: int) -> tuple[dict[str, Any], list[Incident], dict[str, str]]:
    """Return a scenario mapping, its incidents and each workflow's cadence class."""
    rng = random.Random(seed)
    end = START + timedelta(days=days)
    tenants = [f"t{i:02d}" for i in range(max(1, workflows // 20))]
    specs, classes, incidents = [], {}, []
    faults, manual_runs, outages = [], [], []
    weights = [c[1] for c in CADENCES]
    for index in range(workflows):
        label, _, template, duration = rng.choices(CADENCES, weights)[0]
        cron = template.format(m=rng.randrange(60), m10=rng.randrange(10), m30=rng.randrange(30),
                               h=rng.randrange(24), d=rng.randrange(7))
        tenant = tenants[index % len(tenants)]
        name = f"wf{index:04d}"
        key = f"{tenant}/{name}"
        specs.append({"tenant": tenant, "name": name, "cron": cron, "duration": duration})
        classes[key] = label
        # transient incidents land inside a run, where they are observable: a blip or a crash
        # part-way through a random tick's execution
        schedule = parse_schedule(cron)
        ticks = list(schedule.fires_between(START, end - timedelta(hours=1)))
        count = min(len(ticks), rng.randrange(0, max(2, days // 2) + 1)) if ticks else 0
        for tick in sorted(rng.sample(ticks, count)):  # independent faults: never two in one run
            at = tick + timedelta(seconds=rng.uniform(0, duration * 0.8))
            if rng.random() < 0.7:
                length = timedelta(seconds=rng.randrange(2, 21))
                faults.append({"workflow": key, "start": isoformat_z(at), "end": isoformat_z(at + length),
                               "error": "could not connect to warehouse: connection reset by peer"})
                incidents.append(Incident(key, "blip", at, at + length, False))
            else:
                length = timedelta(seconds=5)
                faults.append({"workflow": key, "start": isoformat_z(at), "end": isoformat_z(at + length),
                               "error": "worker process killed", "mode": "crash"})
                incidents.append(Incident(key, "crash", at, at + length, False))
        roll = rng.random()
        at = START + timedelta(seconds=rng.randrange(int((end - START).total_seconds()) - 14 * 3600))
        if roll < 0.08:
            length = timedelta(hours=rng.uniform(2, 6))
            faults.append({"workflow": key, "start": isoformat_z(at), "end": isoformat_z(at + length),
                           "error": ERRORS["outage"]})
            incidents.append(Incident(key, "outage", at, at + length, True))
        elif roll < 0.16:
            length = timedelta(hours=rng.uniform(2, 12))
            fixed = at + length
            faults.append({"workflow": key, "start": isoformat_z(at), "end": isoformat_z(fixed),
                           "error": ERRORS["defect"]})
            manual_runs.append({"workflow": key, "at": isoformat_z(fixed + timedelta(minutes=1))})
            incidents.append(Incident(key, "defect", at, fixed, True))
        elif roll < 0.20:
            length = timedelta(hours=rng.uniform(2, 6))
            outages.append({"workflow": key, "start": isoformat_z(at), "end": isoformat_z(at + length)})
            incidents.append(Incident(key, "trigger outage", at, at + length, True))
        elif roll < 0.30 and label in INTERMITTENT_RUN:
            # Its own generator: the rest of the fleet stays what it was before this kind existed.
            flaky = intermittent(key, schedule, at, INTERMITTENT_RUN[label], random.Random(f"{seed}/{key}"),
                                 INTERMITTENT_HOURS[label])
            if flaky is not None:
                windows, incident = flaky
                faults += [{"workflow": key, "start": isoformat_z(a), "end": isoformat_z(b),
                            "error": INTERMITTENT_ERROR} for a, b in windows]
                incidents.append(incident)
    scenario = {
        "name": f"noise: {workflows} workflows over {days} days (seed {seed})",
        "start": isoformat_z(START),
        "end": isoformat_z(end),
        "tenants": tenants,
        "workflows": specs,
        "faults": faults,
        "manual_runs": manual_runs,
        "trigger_outages": outages,
    }
    return scenario, incidents, classes


def intermittent(key: str, schedule: Any, at: datetime, max_run: int, rng: random.Random,
                 hours: tuple[float, float] = (4, 12)) -> tuple[list[tuple[datetime, datetime]], Incident] | None:
    """Fail ticks for `hours` (a range) from `at`, each at `INTERMITTENT_SHARE` odds, never more than `max_run` in a row.

    Each failed tick's fault covers its run and its retries (half the cadence, at most
    ten minutes), so the tick fails for good; the next tick is untouched unless chosen.
    With `max_run` 1 at most every other tick fails, about half of them at these odds, so
    an hourly period can fail fewer of some 8 ticks than the failure-rate rule's 4 and
    still count as a genuine incident, one the rule by design does not catch.
    """
    length = timedelta(hours=rng.uniform(*hours))
    ticks = list(schedule.fires_between(at, at + length))
    if len(ticks) < 2:
        return None
    cover = min((ticks[1] - ticks[0]) / 2, timedelta(minutes=10))
    windows: list[tuple[datetime, datetime]] = []
    in_a_row = 0
    for tick in ticks:
        if in_a_row < max_run and rng.random() < INTERMITTENT_SHARE:
            windows.append((tick, tick + cover))
            in_a_row += 1
        else:
            in_a_row = 0
    if len(windows) < 2:
        return None
    return windows, Incident(key, "intermittent", windows[0][0], windows[-1][1], True)


def category_of(incident: Incident) -> str:
    """The error category a genuine incident's failures carry."""
    if incident.kind == "trigger outage":
        return "missed"
    return categorize(ERRORS[incident.kind])


def first_touched_tick(incident: Incident, cron: str, duration: float) -> datetime | None:
    """Return the first tick whose run the incident affects, or None."""
    schedule = parse_schedule(cron)
    lead = timedelta(seconds=0 if incident.kind == "trigger outage" else duration)
    for tick in schedule.fires_between(incident.start - lead - timedelta(seconds=1), incident.end):
        if tick < incident.end and tick + lead >= incident.start:
            return tick
    return None


def score(outcome: SimulationOutcome, incidents: list[Incident], classes: dict[str, str],
          cadences: dict[str, int], observable: dict[Incident, datetime]) -> dict[str, Any]:
    openings: dict[str, list[datetime]] = defaultdict(list)
    for alert in outcome.alerts:
        openings[f"{alert['tenant']}/{alert['workflow']}"].append(alert["opened_at"])
    genuine = [i for i in incidents if i.genuine]
    windows: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for incident in genuine:
        slack = timedelta(seconds=2 * cadences[incident.workflow]) + timedelta(hours=1)
        windows[incident.workflow].append((incident.start, incident.end + slack))
    detected, delays, missed = 0, defaultdict(list), []
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # kind -> [detected, genuine]
    category_delays: dict[str, list[float]] = defaultdict(list)
    for incident in genuine:
        by_kind[incident.kind][1] += 1
        start, stop = next(w for w in windows[incident.workflow] if w[0] == incident.start)
        hits = [t for t in openings[incident.workflow] if start <= t <= stop]
        # an alert already open when the incident began also covers it
        if not hits:
            hits = [a["opened_at"] for a in outcome.alerts
                    if f"{a['tenant']}/{a['workflow']}" == incident.workflow and a["opened_at"] <= start
                    and (a["resolved_at"] is None or a["resolved_at"] >= start)]
            if hits:
                hits = [start]
        if not hits:
            missed.append(f"{incident.kind} of {incident.workflow} at {isoformat_z(incident.start)}")
        if hits:
            detected += 1
            by_kind[incident.kind][0] += 1
            seen = observable[incident]
            delay = max(0.0, (min(hits) - seen).total_seconds() / 60)
            delays[classes[incident.workflow]].append(delay)
            category_delays[category_of(incident)].append(delay)
    false_alarms: list[str] = []
    for workflow, times in openings.items():
        for t in times:
            if not any(a <= t <= b for a, b in windows.get(workflow, ())):
                false_alarms.append(f"{workflow} at {isoformat_z(t)}")
    # Each message is about the genuine incident whose window holds its alert's opening.
    opened_at = {a["id"]: (f"{a['tenant']}/{a['workflow']}", a["opened_at"]) for a in outcome.alerts}
    category_messages: dict[str, int] = defaultdict(int)
    for notification in outcome.notifications:
        workflow, at = opened_at.get(notification["alert"], (f"{notification['tenant']}/{notification['workflow']}",
                                                             notification["at"]))
        about = [i for i in genuine if i.workflow == workflow
                 and i.start - timedelta(seconds=2 * cadences[workflow]) <= at
                 <= i.end + timedelta(seconds=2 * cadences[workflow]) + timedelta(hours=1)]
        category_messages[category_of(about[0]) if about else "false alarm"] += 1
    threads = {(n["channel"], n["thread"]) for n in outcome.notifications}
    by_event: dict[str, int] = defaultdict(int)
    for notification in outcome.notifications:
        by_event[notification["event"]] += 1
    return {
        "messages": len(outcome.notifications),
        "by_event": dict(sorted(by_event.items())),
        "threads": len(threads),
        "alerts": len(outcome.alerts),
        "genuine": len(genuine),
        "detected": detected,
        "missed": missed,
        "false_alarms": len(false_alarms),
        "false_alarm_list": sorted(false_alarms),
        "delays": {label: sorted(values) for label, values in delays.items()},
        "by_kind": {kind: tuple(v) for kind, v in sorted(by_kind.items())},
        "category_messages": dict(sorted(category_messages.items())),
        "category_delays": {c: sorted(v) for c, v in sorted(category_delays.items())},
    }


_CONTEXT: tuple[Any, ...] = ()


def _init(context: tuple[Any, ...]) -> None:
    import logging

    global _CONTEXT
    _CONTEXT = context
    logging.getLogger("tickwarden").setLevel(logging.ERROR)  # lost leases are part of the scenario


def _simulate(job: tuple[str, bool, bool]) -> dict[str, Any]:
    """Simulate one policy (in a worker process) and score it there: outcomes stay where they are.

    With `alone` (one policy at a time), the database server's CPU over the simulation is
    measured as well; with `floor`, its runs and outcomes are then written bare
    (`bare_ledger`), the floor of its wall time.
    """
    name, alone, floor = job
    scenario, incidents, classes, cadences, observable = _CONTEXT
    server0 = settled_server_cpu(SIMULATION) if alone else None
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    outcome = run_policy(scenario, name, url=BENCH_URL)
    result = score(outcome, incidents, classes, cadences, observable)
    result["wall"] = time.perf_counter() - t0
    result["client_cpu"] = time.process_time() - cpu0
    server1 = settled_server_cpu(SIMULATION) if alone else None
    result["server_cpu"] = None if server0 is None or server1 is None else server1 - server0
    result["runs"] = len(outcome.runs)
    result["floor"] = bare_ledger(outcome.runs) if floor else None
    return result


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=1, help="policies simulated at once, each in its own process")
    parser.add_argument("--details", action="store_true", help="list every false alarm and missed incident")
    parser.add_argument("--json", action="store_true", help="print the figures as a JSON list on the last line")
    args = parser.parse_args()
    import logging

    logging.getLogger("tickwarden").setLevel(logging.ERROR)  # lost leases are part of the scenario

    raw, incidents, classes = build(args.workflows, args.days, args.seed)
    scenario = parse_scenario(raw, source="noise")
    cadences = {spec.key: cadence_of(parse_schedule(spec.cron), START).interval_seconds for spec in scenario.workflows}
    durations = {spec.key: spec.duration for spec in scenario.workflows}
    crons = {spec.key: spec.cron for spec in scenario.workflows}
    observable = {i: first_touched_tick(i, crons[i.workflow], durations[i.workflow]) for i in incidents}
    incidents = [i for i in incidents if observable[i] is not None]
    kinds = defaultdict(int)
    for incident in incidents:
        kinds[incident.kind] += 1
    print(f"{scenario.name} on {describe_url(BENCH_URL)}: {dict(kinds)}; "
          f"genuine incidents touching a tick: {sum(i.genuine for i in incidents)}", flush=True)

    names = args.policies.split(",")
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        parser.error(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}")
    context = (scenario, incidents, classes, cadences, observable)
    results: dict[str, dict[str, Any]] = {}
    # The floor is measured once, on the first policy's runs: every policy lives through the same ticks.
    # With --jobs above 1 it is measured beside the other policies' simulations, as their wall times are.
    jobs = [(name, args.jobs <= 1, i == 0) for i, name in enumerate(names)]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), initializer=_init, initargs=(context,)) as pool:
        for name, result in zip(names, pool.map(_simulate, jobs), strict=True):
            results[name] = result
            server = result["server_cpu"]
            print(f"  simulated {name}: {result['runs']:,} runs in {result['wall']:.0f} s "
                  f"(client CPU {result['client_cpu']:.0f} s"
                  f"{'' if server is None else f', database server CPU {server:.0f} s'}) — "
                  f"{result['messages']:,} messages, recall {result['detected']}/{result['genuine']}, "
                  f"{result['false_alarms']} false alarm(s)", flush=True)
            if result["floor"] is not None:
                print(f"  floor: the same runs and outcomes written bare in {result['floor'][0]:.1f} s "
                      f"({result['floor'][1]:,} statements)", flush=True)
            if args.details:
                for label, items in (("false alarm", result["false_alarm_list"]), ("missed", result["missed"])):
                    for item in items[:DETAILS]:
                        print(f"    {label}: {item}")
                    if len(items) > DETAILS:
                        print(f"    … and {len(items) - DETAILS:,} more of these")

    print()
    header = (f"{'policy':<14}{'messages':>10}{'threads':>9}{'alerts':>8}{'recall':>12}{'false alarms':>14}"
              f"{'msgs/detected':>15}  messages by event")
    print(header)
    for name, r in results.items():
        recall = f"{r['detected']}/{r['genuine']}"
        per = f"{r['messages'] / r['detected']:.1f}" if r["detected"] else "—"
        events = ", ".join(f"{kind} {count:,}" for kind, count in r["by_event"].items())
        print(f"{name:<14}{r['messages']:>10,}{r['threads']:>9,}{r['alerts']:>8,}{recall:>12}{r['false_alarms']:>14,}"
              f"{per:>15}  {events}")
    print("\ndetection delay in minutes, median / p95, per cadence class")
    labels = [c[0] for c in CADENCES]
    print(f"{'policy':<14}" + "".join(f"{label:>16}" for label in labels))
    for name, r in results.items():
        cells = []
        for label in labels:
            values = r["delays"].get(label, [])
            cells.append(f"{statistics.median(values):.0f} / {_pct(values, 0.95):.0f}" if values else "—")
        print(f"{name:<14}" + "".join(f"{cell:>16}" for cell in cells))
    kinds_seen = sorted({kind for r in results.values() for kind in r["by_kind"]})
    print("\nrecall per incident kind")
    print(f"{'policy':<14}" + "".join(f"{kind:>16}" for kind in kinds_seen))
    for name, r in results.items():
        cells = ["{}/{}".format(*r["by_kind"].get(kind, (0, 0))) for kind in kinds_seen]
        print(f"{name:<14}" + "".join(f"{cell:>16}" for cell in cells))
    categories = sorted({c for r in results.values() for c in [*r["category_messages"], *r["category_delays"]]})
    print("\nmessages, and detection delay in minutes (median / p95), per error category")
    print(f"{'policy':<14}" + "".join(f"{c:>24}" for c in categories))
    for name, r in results.items():
        cells = []
        for c in categories:
            values = r["category_delays"].get(c, [])
            delay = f"{statistics.median(values):.0f} / {_pct(values, 0.95):.0f}" if values else "—"
            cells.append(f"{r['category_messages'].get(c, 0):,} msgs, {delay}")
        print(f"{name:<14}" + "".join(f"{cell:>24}" for cell in cells))
    if "tickwarden" in results:
        ours = results["tickwarden"]["messages"]
        print("\nmessages relative to tickwarden:")
        for name, r in results.items():
            if name != "tickwarden":
                ratio = r["messages"] / ours if ours else float("inf")
                print(f"  {name}: {r['messages']:,} vs {ours:,} → {ratio:.1f}× more")
    month = args.workflows == 1000 and args.days == 30   # the size the DESIGN.md target speaks of
    figures = []
    floor = results[names[0]]["floor"][0]
    for name, r in results.items():
        figures += [Figure(f"{name}: wall time of the simulation", r["wall"], "s", floor,
                           target=Target("<", 120) if month else None),
                    Figure(f"{name}: messages", r["messages"], "messages", results.get("tickwarden", r)["messages"]),
                    Figure(f"{name}: genuine incidents detected", r["detected"], "incidents", r["genuine"])]
        if "intermittent" in r["by_kind"]:
            found, total = r["by_kind"]["intermittent"]
            figures.append(Figure(f"{name}: intermittent incidents detected", found, "incidents", total))
    finish(f"noise figures ({args.workflows:,} workflows x {args.days} days; floor: {names[0]}'s runs and "
           "outcomes written bare, tickwarden's messages, all genuine incidents)", figures, args.json)
    missed = results["tickwarden"]["missed"] if "tickwarden" in results else []
    if missed:
        print(f"tickwarden missed {len(missed)} genuine incident(s): {missed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
