"""The store: the only code that knows query names; everything else sees dataclasses.

One mixin per area, each with its own `.sql` file of named blocks:
catalog (tenants, workflows, schedules), ledger (runs and attempts), outbox
(alert events fanned out to notification channels).
"""

from __future__ import annotations

from tickwarden.store.alert_content import AlertContentStore
from tickwarden.store.ack_links import AckLinkStore
from tickwarden.store.api import ApiStore
from tickwarden.store.catalog import CatalogStore
from tickwarden.store.checkins import CheckinStore
from tickwarden.store.dashboard import DashboardStore
from tickwarden.store.environment_pods import EnvironmentPodStore
from tickwarden.store.erasure import ErasureStore
from tickwarden.store.execution import ExecutionStore
from tickwarden.store.heartbeat import HeartbeatStore
from tickwarden.store.kubernetes import KubernetesStore
from tickwarden.store.ledger import LedgerStore, TickRequest
from tickwarden.store.maintenance import MaintenanceStore
from tickwarden.store.monitoring import MonitoringStore
from tickwarden.store.outbox import OutboxStore
from tickwarden.store.secrets import SecretStore
from tickwarden.store.retention import RetentionStore
from tickwarden.store.selftest import SelftestStore
from tickwarden.store.simulation import SimulationStore
from tickwarden.store.trigger import TriggerStore
from tickwarden.store.watchdog import WatchdogStore


class Store(ApiStore, CatalogStore, ExecutionStore, LedgerStore, OutboxStore, SimulationStore, MonitoringStore,
            TriggerStore, HeartbeatStore, SecretStore, RetentionStore, ErasureStore, KubernetesStore, CheckinStore,
            DashboardStore, SelftestStore, AlertContentStore, WatchdogStore, MaintenanceStore,
            AckLinkStore, EnvironmentPodStore):
    """All store operations, bound to one connection and its transaction."""


__all__ = ["Store", "TickRequest"]
