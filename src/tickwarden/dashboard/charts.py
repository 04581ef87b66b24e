"""The overview's history: failures and alerts per bucket over a day and a week, and resolved incidents.

Both charts read only their window, through one index probe per visible workflow
(failures) or tenant (alerts); "recently resolved" considers alerts opened within
RESOLVED_OPENED_WITHIN so that it stays on the (tenant_id, opened_at) index too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tickwarden.api.deps import Scope

RESOLVED_SINCE = timedelta(days=7)
RESOLVED_OPENED_WITHIN = timedelta(days=30)
RESOLVED_SHOWN = 10
# A day in hourly buckets, a week in six-hour buckets.
OVERVIEW_CHARTS = (("24h", timedelta(days=1), timedelta(hours=1)), ("7d", timedelta(days=7), timedelta(hours=6)))


def epoch(value: datetime) -> float:
    """Seconds since the epoch: the x values uPlot expects (a bucket is drawn at its middle, its bars either side)."""
    return value.timestamp()


def overview_history(scope: Scope) -> dict[str, Any]:
    """Failures and alerts per bucket over the last day and week, and the incidents resolved this week."""
    now = scope.clock.now()
    charts = []
    with scope.store() as store:
        for name, span, bucket in OVERVIEW_CHARTS:
            since = now - span
            failures = store.dashboard.failure_buckets(since, now + timedelta(seconds=1), bucket)
            opened = store.dashboard.alert_buckets(since, now + timedelta(seconds=1), bucket)
            count = int(span / bucket)
            starts = [since + bucket * i for i in range(count)]
            charts.append({
                "name": name, "total_failures": sum(failures.values()), "total_alerts": sum(opened.values()),
                "spec": {"kind": "bars", "x": [epoch(s + bucket / 2) for s in starts], "series": [
                    {"label": "failed or missed ticks", "values": _fold(failures, since, bucket, count),
                     "color": "#f04438"},
                    {"label": "alerts opened", "values": _fold(opened, since, bucket, count), "color": "#b54708"}]},
            })
        resolved = store.dashboard.recently_resolved(now - RESOLVED_SINCE, now - RESOLVED_OPENED_WITHIN, RESOLVED_SHOWN)
    return {"history": charts, "resolved": resolved}




def _fold(counts: dict[datetime, int], since: datetime, bucket: timedelta, count: int) -> list[int]:
    """Counts per bucket start as a list of `count` values; the instant `now` itself joins the last bucket."""
    values = [0] * count
    for start, n in counts.items():
        values[min(count - 1, max(0, int((start - since) / bucket)))] += n
    return values
