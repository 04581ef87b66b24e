"""The Kubernetes trigger: one CronJob per schedule, converged by the reconciler, fired by the cluster.

`TICKWARDEN_TRIGGER=kubernetes` replaces the built-in ticker with CronJobs in one
namespace (`TICKWARDEN_KUBERNETES_NAMESPACE`, else the in-cluster service account's,
else `tickwarden`). The client is configured the standard way: in-cluster, else
`KUBECONFIG`. This module holds what the reconciler and the tick command share:

- the settings read from the environment;
- the CronJob a schedule should have (`cronjob_manifest`), named `tickwarden-s<id>`
  and labelled with `tickwarden.io/schedule-id`, `schedule-version`, `tenant` and
  `workflow`; its pod runs `tickwarden tick --schedule <id> --job-name <job>`;
- the Job of a retry attempt (`retry_job_manifest`, `tickwarden-a<attempt id>`), when
  retries run as Jobs (`TICKWARDEN_KUBERNETES_RETRIES=jobs`);
- `CronJobApi` and `JobApi`, the only code that calls the API server, translating its
  failures into tickwarden's errors: unreachable or failing (5xx, 429) is
  `KubernetesUnavailable` (the pass is retried, nothing is lost since the next pass
  converges from the database again), a refusal (401/403) is `KubernetesRefused`, a
  rejected object (4xx) is `CronJobRejected` for that object alone;
- `tick_from_job_name`: the CronJob controller names each Job
  `<cronjob>-<scheduled time in minutes since the epoch>`, so a pod started late
  still knows the tick it was started for.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tickwarden import __version__
from tickwarden.errors import InvalidInput, TickwardenError
from tickwarden.sanitize import sanitize_error
from tickwarden.store.kubernetes import DesiredCronJob, QueuedRetry

TRIGGERS = ("builtin", "kubernetes")
LABEL_SCHEDULE = "tickwarden.io/schedule-id"
LABEL_VERSION = "tickwarden.io/schedule-version"
LABEL_TENANT = "tickwarden.io/tenant"
LABEL_WORKFLOW = "tickwarden.io/workflow"
LABEL_RUN = "tickwarden.io/run-id"
LABEL_ATTEMPT = "tickwarden.io/attempt-id"
# Label values cannot hold every name tickwarden accepts; the exact names ride in annotations.
ANNOTATION_TENANT = "tickwarden.io/tenant-name"
ANNOTATION_WORKFLOW = "tickwarden.io/workflow-name"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "tickwarden"
PAGE_SIZE = 500
REQUEST_TIMEOUT = (5, 30)  # seconds to connect, to read: a hung API server must not hang a loop
NAME_PREFIX = "tickwarden-s"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class KubernetesUnavailable(TickwardenError):
    """The Kubernetes API cannot be reached."""


class KubernetesRefused(TickwardenError):
    """The Kubernetes API refused tickwarden's request."""


def trigger_mode(environ: Mapping[str, str] | None = None) -> str:
    """Return `builtin` or `kubernetes` from `TICKWARDEN_TRIGGER` (default builtin)."""
    env = os.environ if environ is None else environ
    mode = (env.get("TICKWARDEN_TRIGGER") or "builtin").strip().lower()
    if mode not in TRIGGERS:
        raise InvalidInput(f"TICKWARDEN_TRIGGER must be builtin or kubernetes, not {mode[:40]!r}.")
    return mode


@dataclass(frozen=True)
class KubernetesSettings:
    """Where the CronJobs live and what their pods run."""

    namespace: str = DEFAULT_NAMESPACE
    image: str = f"tickwarden:{__version__}"
    # A Secret whose keys become the tick pod's environment (TICKWARDEN_DATABASE_URL, …).
    env_secret: str = "tickwarden"
    service_account: str = "tickwarden-tick"
    # Where retry attempts run: `pool` (the worker Deployment) or `jobs` (one Job per attempt).
    retries: str = "pool"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> KubernetesSettings:
        env = os.environ if environ is None else environ
        namespace = env.get("TICKWARDEN_KUBERNETES_NAMESPACE") or _service_account_namespace() or DEFAULT_NAMESPACE
        settings = cls(
            namespace=namespace.strip(),
            image=env.get("TICKWARDEN_KUBERNETES_IMAGE") or cls.image,
            env_secret=env.get("TICKWARDEN_KUBERNETES_ENV_SECRET") or cls.env_secret,
            service_account=env.get("TICKWARDEN_KUBERNETES_TICK_SERVICE_ACCOUNT") or cls.service_account,
            retries=(env.get("TICKWARDEN_KUBERNETES_RETRIES") or cls.retries).strip().lower(),
        )
        if settings.retries not in ("pool", "jobs"):
            raise InvalidInput(f"TICKWARDEN_KUBERNETES_RETRIES must be pool or jobs, not {settings.retries[:40]!r}.")
        for name, value in (("namespace", settings.namespace), ("env secret", settings.env_secret),
                            ("tick service account", settings.service_account)):
            if not _DNS_LABEL.match(value):
                raise InvalidInput(f"The Kubernetes {name} {value[:70]!r} is not a valid Kubernetes name.")
        return settings


def _service_account_namespace() -> str | None:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


def cronjob_name(schedule_id: int) -> str:
    return f"{NAME_PREFIX}{schedule_id}"


def tick_from_job_name(schedule_id: int, job_name: str) -> datetime:
    """Return the tick a CronJob's Job was created for, from the name the controller gave it."""
    prefix, sep, minutes = job_name.strip().rpartition("-")
    if not sep or prefix != cronjob_name(schedule_id) or not minutes.isdigit() or len(minutes) > 12:
        raise InvalidInput(f"{job_name[:80]!r} is not the name of a Job of schedule {schedule_id}'s CronJob.")
    return datetime.fromtimestamp(int(minutes) * 60, UTC)


def label_value(name: str) -> str:
    """Return `name` as a valid label value: itself when it is one, else a stable look-alike."""
    if len(name) <= 63 and _LABEL_VALUE.match(name):
        return name
    # A name may end in `-`, `_` or `.` (tickwarden allows it, labels do not): trim it and
    # add a short digest so two such names never share a label value.
    stem = re.sub(r"[^A-Za-z0-9]+$", "", re.sub(r"[^-A-Za-z0-9_.]", "-", name))[:52]
    return f"{stem}-{hashlib.sha256(name.encode()).hexdigest()[:8]}".lstrip("-_.")


def labels(desired: DesiredCronJob) -> dict[str, str]:
    return {
        LABEL_SCHEDULE: str(desired.schedule_id),
        LABEL_VERSION: str(desired.version),
        LABEL_TENANT: label_value(desired.tenant),
        LABEL_WORKFLOW: label_value(desired.workflow),
        "app.kubernetes.io/name": "tickwarden",
        "app.kubernetes.io/component": "tick",
    }


def cronjob_manifest(desired: DesiredCronJob, settings: KubernetesSettings) -> dict[str, Any]:
    """Return the CronJob a schedule should have (suspended while the schedule is paused).

    `concurrencyPolicy: Allow`: every tick is its own run, and a slow run must not
    swallow the next tick. `backoffLimit: 0`: a tick pod that dies is not restarted by
    the Job controller; its attempt's lease expires and tickwarden's own retry budget
    decides, as for any worker.
    """
    tags = labels(desired)
    pod_labels = {k: v for k, v in tags.items() if k != LABEL_VERSION}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": cronjob_name(desired.schedule_id),
            "namespace": settings.namespace,
            "labels": tags,
            "annotations": {ANNOTATION_TENANT: desired.tenant, ANNOTATION_WORKFLOW: desired.workflow},
        },
        "spec": {
            "schedule": desired.cron,
            "timeZone": desired.timezone,
            "startingDeadlineSeconds": desired.starting_deadline_seconds,
            "concurrencyPolicy": "Allow",
            "suspend": desired.status != "active",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,
                    "ttlSecondsAfterFinished": 3600,
                    "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec(
                        ["tick", "--schedule", str(desired.schedule_id), "--job-name", "$(TICKWARDEN_JOB_NAME)"],
                        settings, job_name_env=True)},
                },
            },
        },
    }


def pod_spec(args: list[str], settings: KubernetesSettings, *, job_name_env: bool = False) -> dict[str, Any]:
    """Return the pod of a tick or retry: tickwarden's image, the database Secret, nothing more."""
    env = [{"name": "TICKWARDEN_JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}}]
    return {
        "restartPolicy": "Never",
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "tick",
            "image": settings.image,
            "args": args,
            **({"env": env} if job_name_env else {}),
            "envFrom": [{"secretRef": {"name": settings.env_secret}}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def retry_job_name(attempt_id: int) -> str:
    return f"tickwarden-a{attempt_id}"


def retry_job_manifest(retry: QueuedRetry, settings: KubernetesSettings) -> dict[str, Any]:
    """Return the Job that runs one retry attempt: the tick pod's command for that attempt."""
    tags = {
        LABEL_TENANT: label_value(retry.tenant),
        LABEL_WORKFLOW: label_value(retry.workflow),
        LABEL_RUN: str(retry.run_id),
        LABEL_ATTEMPT: str(retry.attempt_id),
        "app.kubernetes.io/name": "tickwarden",
        "app.kubernetes.io/component": "retry",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": retry_job_name(retry.attempt_id), "namespace": settings.namespace, "labels": tags,
                     "annotations": {ANNOTATION_TENANT: retry.tenant, ANNOTATION_WORKFLOW: retry.workflow}},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": tags},
                         "spec": pod_spec(["tick", "--attempt", str(retry.attempt_id)], settings)},
        },
    }


@dataclass(frozen=True)
class LiveCronJob:
    """A CronJob of tickwarden's as the API server holds it."""

    name: str
    schedule_id: int
    version: int | None
    resource_version: str | None
    body: dict[str, Any]


# The parts of a CronJob tickwarden owns: any difference here, in either direction, is drift.
_OWNED = (
    ("metadata", "labels"),
    ("spec", "schedule"),
    ("spec", "timeZone"),
    ("spec", "startingDeadlineSeconds"),
    ("spec", "concurrencyPolicy"),
    ("spec", "suspend"),
    ("spec", "jobTemplate", "spec", "backoffLimit"),
    ("spec", "jobTemplate", "spec", "template", "spec", "serviceAccountName"),
)
_OWNED_CONTAINER = ("image", "command", "args", "envFrom")


def drifted(live: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether a live CronJob differs from the desired one in anything tickwarden owns.

    Only owned fields are compared: the API server fills in defaults elsewhere
    (`imagePullPolicy`, `dnsPolicy`, …), which must not count as drift.
    """
    for path in _OWNED:
        want, have = _dig(desired, path), _dig(live, path)
        if path[0] == "metadata":  # other controllers may add labels; ours must be there
            if any((have or {}).get(k) != v for k, v in (want or {}).items()):
                return True
        elif path[-1] == "suspend":
            if bool(want) != bool(have):
                return True
        elif want != have:
            return True
    containers_path = ("spec", "jobTemplate", "spec", "template", "spec", "containers")
    want_c, have_c = _dig(desired, containers_path) or [], _dig(live, containers_path) or []
    if len(want_c) != len(have_c):
        return True
    return any(w.get(k) != h.get(k) for w, h in zip(want_c, have_c, strict=True) for k in _OWNED_CONTAINER)


def _dig(body: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(body, Mapping):
            return None
        body = body.get(key)
    return body


def load_api_client() -> Any:
    """Return a `kubernetes` API client configured the standard way: in-cluster, else KUBECONFIG."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            # Read KUBECONFIG now: the client's default is captured once, when it is imported.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                    client_configuration=configuration, persist_config=False)
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubernetesUnavailable(
                "No Kubernetes configuration was found: run inside a cluster or set KUBECONFIG "
                f"({sanitize_error(type(exc).__name__)}).") from None
    configuration.retries = 1  # the loop retries the whole pass; one quick retry covers a blip
    return client.ApiClient(configuration)


class _BatchApi:
    """One kind of tickwarden's batch objects in one namespace; every call's failure becomes one clear error."""

    kind = "objects"

    def __init__(self, api_client: Any, namespace: str, *, page_size: int = PAGE_SIZE):
        from kubernetes import client

        self.api_client = api_client
        self.batch = client.BatchV1Api(api_client)
        self.namespace = namespace
        self.page_size = page_size

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _pages(self, list_call: Any, label: str) -> Iterator[dict[str, Any]]:
        """Yield every object carrying `label`, as plain dicts, page by page."""
        token: str | None = None
        while True:
            page = self._call("list", lambda token=token: list_call(
                self.namespace, label_selector=label, limit=self.page_size, _continue=token,
                _request_timeout=REQUEST_TIMEOUT))
            for item in page.items or []:
                yield self.api_client.sanitize_for_serialization(item)
            token = page.metadata.var_continue if page.metadata else None
            if not token:
                return

    def _call(self, what: str, call: Any, tolerate: tuple[int, ...] = ()) -> Any:
        """Run one API call; None for a tolerated status, tickwarden's errors for the others."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            return call()
        except ApiException as exc:
            status = exc.status or 0
            if status in tolerate:
                return None
            if status in (401, 403):
                raise KubernetesRefused(
                    f"The Kubernetes API refused to {what} {self.kind} in namespace {self.namespace} "
                    f"({status} {sanitize_error(exc.reason or '')}); check tickwarden's RBAC.") from None
            if status >= 500 or status == 429 or status == 0:
                raise KubernetesUnavailable(
                    f"The Kubernetes API at {self.host} failed to {what} {self.kind} "
                    f"({status} {sanitize_error(exc.reason or '')}); the pass will be retried.") from None
            raise CronJobRejected(status, sanitize_error(_status_message(exc) or exc.reason or ""), self.kind) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubernetesUnavailable(
                f"The Kubernetes API at {self.host} cannot be reached ({sanitize_error(type(exc).__name__)}); "
                "the pass will be retried.") from None


class CronJobApi(_BatchApi):
    """tickwarden's CronJobs in one namespace."""

    kind = "CronJobs"

    def jobs(self) -> JobApi:
        """The retry Jobs' API on the same client and namespace."""
        return JobApi(self.api_client, self.namespace, page_size=self.page_size)

    def list(self) -> Iterator[LiveCronJob]:
        """Yield every CronJob labelled with a schedule id, page by page."""
        for body in self._pages(self.batch.list_namespaced_cron_job, LABEL_SCHEDULE):
            found = _live(body)
            if found is not None:  # never touch what is not ours, whatever the server returns
                yield found

    def create(self, body: dict[str, Any]) -> bool:
        """Create a CronJob; False when it already exists (another replica got there first)."""
        return self._call("create", lambda: self.batch.create_namespaced_cron_job(
            self.namespace, body, _request_timeout=REQUEST_TIMEOUT), tolerate=(409,)) is not None

    def patch(self, name: str, body: dict[str, Any], resource_version: str | None) -> bool:
        """Bring a CronJob to `body`; False when it changed or vanished since it was read.

        The resource version read with the list rides in the patch: the API server
        applies it only to the object that was compared, so a slower replica holding an
        older snapshot cannot undo a newer one's write.
        """
        patch = {"metadata": dict(body["metadata"]), "spec": body["spec"]}
        if resource_version:
            patch["metadata"]["resourceVersion"] = resource_version
        return self._call("update", lambda: self.batch.patch_namespaced_cron_job(
            name, self.namespace, patch, _content_type="application/merge-patch+json",
            _request_timeout=REQUEST_TIMEOUT), tolerate=(404, 409)) is not None

    def delete(self, name: str, resource_version: str | None) -> bool:
        """Delete a CronJob (and, in the background, its Jobs); False when it changed or is gone."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=client.V1Preconditions(resource_version=resource_version) if resource_version else None)
        return self._call("delete", lambda: self.batch.delete_namespaced_cron_job(
            name, self.namespace, body=options, _request_timeout=REQUEST_TIMEOUT), tolerate=(404, 409)) is not None


class CronJobRejected(TickwardenError):
    """The Kubernetes API rejected one CronJob (or retry Job)."""

    def __init__(self, status: int, reason: str, kind: str = "CronJobs"):
        super().__init__(f"the Kubernetes API rejected the {'Job' if kind == 'Jobs' else 'CronJob'} ({status}): {reason}")
        self.status = status


def _status_message(exc: Any) -> str | None:
    import json

    try:
        return str(json.loads(exc.body).get("message") or "") or None
    except (TypeError, ValueError, AttributeError):
        return None


def _live(body: dict[str, Any]) -> LiveCronJob | None:
    meta = body.get("metadata") or {}
    tags = meta.get("labels") or {}
    schedule_id, version = str(tags.get(LABEL_SCHEDULE, "")), str(tags.get(LABEL_VERSION, ""))
    name = str(meta.get("name") or "")
    if not schedule_id.isdigit() or name != cronjob_name(int(schedule_id)):
        return None
    return LiveCronJob(name=name, schedule_id=int(schedule_id), version=int(version) if version.isdigit() else None,
                       resource_version=meta.get("resourceVersion"), body=body)


class JobApi(_BatchApi):
    """The Jobs tickwarden starts for retry attempts, in one namespace."""

    kind = "Jobs"

    def launched(self) -> set[int]:
        """Return the attempt ids that already have a Job (running, finished or failed)."""
        ids = set()
        for body in self._pages(self.batch.list_namespaced_job, LABEL_ATTEMPT):
            meta = body.get("metadata") or {}
            attempt = str((meta.get("labels") or {}).get(LABEL_ATTEMPT, ""))
            if attempt.isdigit() and meta.get("name") == retry_job_name(int(attempt)):
                ids.add(int(attempt))
        return ids

    def create(self, body: dict[str, Any]) -> bool:
        """Create a Job; False when it already exists (another replica got there first)."""
        return self._call("create", lambda: self.batch.create_namespaced_job(
            self.namespace, body, _request_timeout=REQUEST_TIMEOUT), tolerate=(409,)) is not None
