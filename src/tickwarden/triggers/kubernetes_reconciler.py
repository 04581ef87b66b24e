"""The Kubernetes reconciler: converge tickwarden's CronJobs with the schedules table.

One pass at `now`:

1. List the CronJobs labelled `tickwarden.io/schedule-id` in the namespace, page by
   page (a CronJob whose name is not `tickwarden-s<id>` of its label is not ours and
   is never touched).
2. Read every schedule from the database, after the list: a CronJob another replica
   created from a schedule is then always matched by that schedule here, never
   mistaken for an orphan.
3. Converge, one CronJob at a time:
   - active schedule, no CronJob: create it;
   - CronJob that differs from its schedule in anything tickwarden owns (cron, zone,
     starting deadline, concurrency policy, suspension, labels, pod command and
     image), whichever side moved: patch it back;
   - paused schedule: its CronJob is suspended, not deleted (a resume is one patch,
     and the controller's record of the last tick survives); a paused schedule
     that never had a CronJob gets none;
   - archived or deleted workflow (or deleted schedule): delete the CronJob;
   - external workflow (its ticks come from check-ins): no CronJob, and one left
     from before a change of kind is deleted.

Replica safety: names are deterministic, so a second replica's create fails with
409 and changes nothing; a patch or delete carries the resource version that was
compared, so a replica holding an older snapshot cannot undo a newer write (the API
server refuses it and the next pass looks again); a CronJob whose version label is
newer than the snapshot is left alone. Whatever a race leaves behind is corrected
by the next pass, and the tick pod checks every tick against the database anyway.

A CronJob the API server rejects (a cron expression Kubernetes does not parse, a
zone missing from the cluster's tz database) is logged and skipped; the others go
on, and the deadline detector records the schedule's ticks as missed. An API
server that cannot be reached fails the pass with `KubernetesUnavailable`; the
service retries it, and since every pass converges from the database, nothing a
failed pass would have written is lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden.db import Database
from tickwarden.store.kubernetes import DesiredCronJob
from tickwarden.triggers.kubernetes import (
    CronJobApi,
    CronJobRejected,
    KubernetesSettings,
    LiveCronJob,
    cronjob_manifest,
    drifted,
    load_api_client,
)

log = logging.getLogger(__name__)

# Catalog changes wake the reconciler at once (NOTIFY); this bounds how long a CronJob
# deleted or edited behind tickwarden's back stays wrong.
INTERVAL = timedelta(seconds=60)


@dataclass
class ReconcileResult:
    """What one pass did to the CronJobs."""

    created: list[int] = field(default_factory=list)
    patched: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    raced: list[int] = field(default_factory=list)  # another replica or editor got there first
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return len(self.created) + len(self.patched) + len(self.deleted)


class KubernetesReconciler:
    name = "reconciler"

    def __init__(self, db: Database, api: CronJobApi, settings: KubernetesSettings, *,
                 interval: timedelta = INTERVAL):
        self.db = db
        self.api = api
        self.settings = settings
        self.interval = interval
        self.last = ReconcileResult()

    @classmethod
    def from_environment(cls, db: Database) -> KubernetesReconciler:
        settings = KubernetesSettings.from_environ()
        return cls(db, CronJobApi(load_api_client(), settings.namespace), settings)

    def run_once(self, now: datetime) -> datetime:
        """Converge every CronJob with its schedule at `now`; return when to look again."""
        self.last = self.reconcile()
        if self.last.changed or self.last.rejected:
            log.info("reconciler: %d CronJob(s) created, %d patched, %d deleted, %d rejected",
                     len(self.last.created), len(self.last.patched), len(self.last.deleted),
                     len(self.last.rejected))
        return now + self.interval

    def reconcile(self) -> ReconcileResult:
        live = {job.schedule_id: job for job in self.api.list()}
        with self.db.transaction() as store:
            desired = {d.schedule_id: d for d in store.kubernetes.desired_cronjobs()}
        result = ReconcileResult()
        for schedule_id in sorted(desired.keys() | live.keys()):
            try:
                self._converge(desired.get(schedule_id), live.get(schedule_id), result)
            except CronJobRejected as exc:
                result.rejected[schedule_id] = exc.message
                log.warning("reconciler: schedule %d: %s", schedule_id, exc.message)
        return result

    def _converge(self, want: DesiredCronJob | None, have: LiveCronJob | None, result: ReconcileResult) -> None:
        if want is None or want.archived:
            if have is not None:
                self._record(self.api.delete(have.name, have.resource_version), have.schedule_id, result.deleted,
                             result)
            return
        body = cronjob_manifest(want, self.settings)
        if have is None:
            if want.status == "active":
                self._record(self.api.create(body), want.schedule_id, result.created, result)
            return
        if have.version is not None and have.version > want.version:
            return  # written from a newer snapshot than ours
        if drifted(have.body, body):
            self._record(self.api.patch(have.name, body, have.resource_version), want.schedule_id,
                         result.patched, result)

    @staticmethod
    def _record(done: bool, schedule_id: int, bucket: list[int], result: ReconcileResult) -> None:
        (bucket if done else result.raced).append(schedule_id)
