"""The store: the only code that knows query names; everything else sees dataclasses.

One repository per area, `store/<area>.py` with its `<area>.sql` of blocks `<area>_<verb>`, all on the
caller's connection and transaction; a repository that needs another receives it here, not by inheritance.
"""

from __future__ import annotations

from functools import cached_property

import psycopg

from tickwarden.store import (
    ack_links, alert_content, api, catalog, checkins, dashboard, environment_pods, erasure, execution,
    heartbeat, kubernetes, ledger, maintenance, monitoring, outbox, retention, secrets, selftest, trigger,
    watchdog,
)
from tickwarden.store.ledger import TickRequest


class Store:
    """Every area's repository, bound to one connection and its transaction.

    Each is made at its first use on this store and kept for the rest of it: a borrow
    (`Database.transaction`, `autocommit`, …) makes a store, and most use one or two of
    twenty areas (the worker's exchange only `execution`), so building them all was a cost
    of every borrow. A repository holds nothing but the connection, so when it is made
    changes nothing it does.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    @cached_property
    def api(self) -> api.ApiRepository:
        return api.ApiRepository(self.conn)

    @cached_property
    def catalog(self) -> catalog.CatalogRepository:
        return catalog.CatalogRepository(self.conn)

    @cached_property
    def execution(self) -> execution.ExecutionRepository:
        return execution.ExecutionRepository(self.conn)

    @cached_property
    def ledger(self) -> ledger.LedgerRepository:
        return ledger.LedgerRepository(self.conn)

    @cached_property
    def outbox(self) -> outbox.OutboxRepository:
        return outbox.OutboxRepository(self.conn)

    @cached_property
    def monitoring(self) -> monitoring.MonitoringRepository:
        return monitoring.MonitoringRepository(self.conn)

    @cached_property
    def trigger(self) -> trigger.TriggerRepository:
        return trigger.TriggerRepository(self.conn)

    @cached_property
    def heartbeat(self) -> heartbeat.HeartbeatRepository:
        return heartbeat.HeartbeatRepository(self.conn)

    @cached_property
    def secrets(self) -> secrets.SecretsRepository:
        return secrets.SecretsRepository(self.conn)

    @cached_property
    def retention(self) -> retention.RetentionRepository:
        return retention.RetentionRepository(self.conn)

    @cached_property
    def erasure(self) -> erasure.ErasureRepository:
        return erasure.ErasureRepository(self.conn)

    @cached_property
    def kubernetes(self) -> kubernetes.KubernetesRepository:
        return kubernetes.KubernetesRepository(self.conn)

    @cached_property
    def checkins(self) -> checkins.CheckinsRepository:
        return checkins.CheckinsRepository(self.conn)

    @cached_property
    def dashboard(self) -> dashboard.DashboardRepository:
        return dashboard.DashboardRepository(self.conn)

    @cached_property
    def selftest(self) -> selftest.SelftestRepository:
        return selftest.SelftestRepository(self.conn)

    @cached_property
    def alert_content(self) -> alert_content.AlertContentRepository:
        return alert_content.AlertContentRepository(self.conn)

    @cached_property
    def watchdog(self) -> watchdog.WatchdogRepository:
        return watchdog.WatchdogRepository(self.conn)

    @cached_property
    def maintenance(self) -> maintenance.MaintenanceRepository:
        return maintenance.MaintenanceRepository(self.conn)

    @cached_property
    def ack_links(self) -> ack_links.AckLinksRepository:
        return ack_links.AckLinksRepository(self.conn)

    @cached_property
    def environment_pods(self) -> environment_pods.EnvironmentPodsRepository:
        return environment_pods.EnvironmentPodsRepository(self.conn)


__all__ = ["Store", "TickRequest"]
