"""Retries as Jobs: with `TICKWARDEN_KUBERNETES_RETRIES=jobs`, each retry attempt runs in a Job of its own.

One pass at `now`:

1. list the Jobs labelled `tickwarden.io/attempt-id` (page by page): the attempts
   that already have one, running, finished or failed;
2. read the retry attempts due to run (queued, number > 1, `queued_at <= now`) from the
   queue of queued attempts (`attempt_queue`), through its index of retries alone;
3. create a Job `tickwarden-a<attempt id>`, labelled with its tenant, workflow, run and
   attempt, for each that has none. Its pod runs `tickwarden tick --attempt <id>`,
   which leases exactly that attempt and executes it on the worker's path.

Replicas: the name is deterministic, so a second replica's create gets 409 and changes
nothing. The attempt is an ordinary queued attempt throughout: a worker of the pool
may take it first (the Job's pod then finds nothing to lease and exits), and an
attempt whose Job failed before its pod leased it waits for the Job's TTL (one hour)
before it gets another, or for the deadline detector to close its run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden.db import Database
from tickwarden.triggers.kubernetes import (
    CronJobRejected,
    JobApi,
    KubernetesSettings,
    retry_job_manifest,
)

log = logging.getLogger(__name__)

INTERVAL = timedelta(seconds=5)


@dataclass
class LaunchResult:
    launched: list[int] = field(default_factory=list)
    raced: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)


class RetryJobLauncher:
    name = "retry-jobs"

    def __init__(self, db: Database, api: JobApi, settings: KubernetesSettings, *, batch: int = 200,
                 interval: timedelta = INTERVAL):
        self.db = db
        self.api = api
        self.settings = settings
        self.batch = batch
        self.interval = interval
        self.last = LaunchResult()

    def run_once(self, now: datetime) -> datetime:
        """Start a Job for every due retry attempt that has none; return when to look again."""
        launched = self.api.launched()
        with self.db.transaction() as store:
            due = store.kubernetes.queued_retries(now, self.batch)
        result = LaunchResult()
        for retry in due:
            if retry.attempt_id in launched:
                continue
            try:
                created = self.api.create(retry_job_manifest(retry, self.settings))
            except CronJobRejected as exc:
                result.rejected[retry.attempt_id] = exc.message
                log.warning("retry jobs: attempt %d: %s", retry.attempt_id, exc.message)
                continue
            (result.launched if created else result.raced).append(retry.attempt_id)
        self.last = result
        if result.launched:
            log.info("retry jobs: %d Job(s) started", len(result.launched))
        return now if len(due) >= self.batch else now + self.interval
