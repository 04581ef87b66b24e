"""The Grafana dashboard and the Prometheus rules shipped in deploy/ read only metrics tickwarden exposes."""

import json
import re
from pathlib import Path

import yaml

from tickwarden import metrics

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\b((?:tickwarden|process)_[a-z_]+)\b")


def exposed(db, clock) -> set[str]:
    text = metrics.render(metrics.registry_for(db, clock)).decode()
    return set(NAME.findall(text))


def test_every_dashboard_query_reads_a_metric_tickwarden_exposes(db, clock):
    names = exposed(db, clock)
    dashboard = json.loads((ROOT / "deploy/grafana/tickwarden.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 15
    used = {name for query in queries for name in NAME.findall(query)}
    assert used and used <= names, sorted(used - names)


def test_every_alerting_rule_reads_a_metric_tickwarden_exposes(db, clock):
    names = exposed(db, clock)
    rules = yaml.safe_load((ROOT / "deploy/prometheus/tickwarden-rules.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in exprs for name in NAME.findall(expr)}
    assert used and used <= names, sorted(used - names)
