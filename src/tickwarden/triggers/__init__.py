"""Trigger backends: what turns active schedules into fired ticks.

The built-in trigger is no backend at all: each schedule row carries its next fire
time, written with the schedule, and the `Ticker` fires due schedules straight
from the table (`ticker.py`). Nothing converges, so nothing can lag.

The Kubernetes trigger (`TICKWARDEN_TRIGGER=kubernetes`, `triggers.kubernetes`) replaces
the ticker: its reconciler (`triggers.kubernetes_reconciler`) converges one CronJob per
schedule straight from the schedules table, outside any database transaction (its API
calls must not hold one), and the CronJobs' pods record the ticks (docs/kubernetes.md).
"""
