"""The store: the only code that knows query names; everything else sees dataclasses.

One repository per area, `store/<area>.py` with its `<area>.sql` of blocks `<area>_<verb>`, all on the
caller's connection and transaction; a repository that needs another receives it here, not by inheritance.
"""

from __future__ import annotations

import psycopg

from tickwarden.store import (
    ack_links, alert_content, api, catalog, checkins, dashboard, environment_pods, erasure, execution,
    heartbeat, kubernetes, ledger, maintenance, monitoring, outbox, retention, secrets, selftest, trigger,
    watchdog,
)
from tickwarden.store.ledger import TickRequest


class Store:
    """Every area's repository, bound to one connection and its transaction."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.api = api.ApiRepository(conn)
        self.catalog = catalog.CatalogRepository(conn)
        self.execution = execution.ExecutionRepository(conn)
        self.ledger = ledger.LedgerRepository(conn)
        self.outbox = outbox.OutboxRepository(conn)
        self.monitoring = monitoring.MonitoringRepository(conn)
        self.trigger = trigger.TriggerRepository(conn)
        self.heartbeat = heartbeat.HeartbeatRepository(conn)
        self.secrets = secrets.SecretsRepository(conn)
        self.retention = retention.RetentionRepository(conn)
        self.erasure = erasure.ErasureRepository(conn)
        self.kubernetes = kubernetes.KubernetesRepository(conn)
        self.checkins = checkins.CheckinsRepository(conn)
        self.dashboard = dashboard.DashboardRepository(conn)
        self.selftest = selftest.SelftestRepository(conn)
        self.alert_content = alert_content.AlertContentRepository(conn)
        self.watchdog = watchdog.WatchdogRepository(conn)
        self.maintenance = maintenance.MaintenanceRepository(conn)
        self.ack_links = ack_links.AckLinksRepository(conn)
        self.environment_pods = environment_pods.EnvironmentPodsRepository(conn)


__all__ = ["Store", "TickRequest"]
