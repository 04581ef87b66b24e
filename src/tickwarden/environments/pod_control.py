"""The calls to the Kubernetes API for environment pods, the wake a worker makes, and the stop loop.

`PodApi` is the only code here that talks to the API server; its failures become
tickwarden's errors exactly as the trigger's do (`KubernetesUnavailable`: retried by
the next pass or the attempt's retry, nothing recorded as done that was not).

`PodEnvironments.wake` is a worker's side: lock the environment's row, create its
objects and scale it to 1 if it was asleep (once, however many workers ask), then,
after the lock, wait for Ready and an authenticated ping, bounded.

`EnvironmentPodLoop.run_once(now)` is the control plane's side, safe with any
number of replicas: converge each environment's objects (create what is missing,
patch what drifted from its spec hash, delete those of environments that are gone
or no longer pods), then stop every environment idle past its timeout with no
running attempt (rows locked SKIP LOCKED: two replicas never stop the same one, and
a stop waits for no wake). A stop is recorded only after the API server took it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tickwarden import auth, secrets
from tickwarden.db import Database
from tickwarden.errors import InvalidInput
from tickwarden.environments.client import EnvironmentFailed, ExecutionClient, WatchdogTimeout
from tickwarden.environments.pods import (
    ANNOTATION_HASH,
    INTERVAL,
    LABEL_ENVIRONMENT,
    PORT,
    STOP_BATCH,
    PodSettings,
    credential,
    manifests,
    object_name,
    statefulset_manifest,
)
from tickwarden.models import Environment
from tickwarden.triggers.kubernetes import REQUEST_TIMEOUT, CronJobRejected, KubernetesUnavailable, _BatchApi

log = logging.getLogger(__name__)

KINDS = ("Secret", "Service", "NetworkPolicy", "StatefulSet")
READY_POLL = 0.25


class PodApi(_BatchApi):
    """tickwarden's environment objects in one namespace."""

    kind = "environment objects"

    def __init__(self, api_client: Any, namespace: str, **kwargs: Any):
        from kubernetes import client

        super().__init__(api_client, namespace, **kwargs)
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)

    def _calls(self, kind: str) -> tuple[Any, Any, Any, Any]:
        """(list, create, patch, delete) of one kind."""
        if kind == "StatefulSet":
            a = self.apps
            return (a.list_namespaced_stateful_set, a.create_namespaced_stateful_set,
                    a.patch_namespaced_stateful_set, a.delete_namespaced_stateful_set)
        if kind == "Service":
            c = self.core
            return c.list_namespaced_service, c.create_namespaced_service, c.patch_namespaced_service, c.delete_namespaced_service
        if kind == "Secret":
            c = self.core
            return c.list_namespaced_secret, c.create_namespaced_secret, c.patch_namespaced_secret, c.delete_namespaced_secret
        n = self.net
        return (n.list_namespaced_network_policy, n.create_namespaced_network_policy,
                n.patch_namespaced_network_policy, n.delete_namespaced_network_policy)

    def owned(self, kind: str) -> Iterator[dict[str, Any]]:
        """Every object of `kind` labelled with an environment id, page by page."""
        for body in self._pages(self._calls(kind)[0], LABEL_ENVIRONMENT):
            meta = body.get("metadata") or {}
            env_id = str((meta.get("labels") or {}).get(LABEL_ENVIRONMENT, ""))
            if env_id.isdigit() and meta.get("name") == object_name(int(env_id)):  # never touch what is not ours
                yield body

    def create(self, kind: str, body: dict[str, Any]) -> bool:
        """Create an object; False when it exists already (another replica or worker got there first)."""
        call = self._calls(kind)[1]
        return self._call("create", lambda: call(self.namespace, body, _request_timeout=REQUEST_TIMEOUT),
                          tolerate=(409,)) is not None

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> bool:
        """Merge-patch an object; False when it is gone."""
        call = self._calls(kind)[2]
        return self._call("update", lambda: call(name, self.namespace, patch, _request_timeout=REQUEST_TIMEOUT,
                                                  _content_type="application/merge-patch+json"),
                          tolerate=(404,)) is not None

    def delete(self, kind: str, name: str) -> bool:
        call = self._calls(kind)[3]
        return self._call("delete", lambda: call(name, self.namespace, _request_timeout=REQUEST_TIMEOUT),
                          tolerate=(404,)) is not None

    def statefulset(self, name: str) -> dict[str, Any] | None:
        found = self._call("read", lambda: self.apps.read_namespaced_stateful_set(
            name, self.namespace, _request_timeout=REQUEST_TIMEOUT), tolerate=(404,))
        return None if found is None else self.api_client.sanitize_for_serialization(found)

    def scale(self, name: str, replicas: int) -> bool:
        return self.patch("StatefulSet", name, {"spec": {"replicas": replicas}})


def _translated(what: str, call: Callable[[], Any]) -> Any:
    """Run an API call for a worker's wake: every failure is the environment's, with one clear sentence."""
    try:
        return call()
    except KubernetesUnavailable as exc:
        raise EnvironmentFailed(f"{what}: {exc}") from None
    except CronJobRejected as exc:
        raise EnvironmentFailed(f"{what}: the Kubernetes API rejected an object ({exc.status})") from None
    except Exception as exc:  # KubernetesRefused and the like: still a failure of the environment
        raise EnvironmentFailed(f"{what}: {exc}") from None


class RemoteEnvironment:
    """An environment's pod as a worker sees it: the same calls as a local process."""

    pid = None

    def __init__(self, tenant_id: int, client: ExecutionClient, cold_start_ms: float, woke: bool):
        self.tenant_id = tenant_id
        self.client = client
        self.cold_start_ms = cold_start_ms
        self.woke = woke  # this call scaled it up (others found it awake)

    def call(self, request: dict[str, Any], timeout: float, should_abort: Callable[[], bool] | None = None) -> dict[str, Any]:
        # Hanging up is how a timeout or an abort stops the pod's process group (its own watchdog).
        return self.client.call(request, timeout, should_abort)

    def alive(self) -> bool:
        return True  # the pod's state is the cluster's; a broken connection surfaces as EnvironmentFailed

    def kill(self) -> None:
        """Nothing to kill from here: the server stopped its process group when the call hung up.

        The connection kept for a next request is closed (an idle one: that stops nothing)."""
        self.client.close()

    def stop(self, grace: float = 0.0) -> None:
        """Nothing to stop from here: the control-plane loop scales idle environments to 0 (the kept connection is closed)."""
        self.client.close()


@dataclass
class PodEnvironments:
    """Wakes environment pods for a worker, sharing their warm state through the database."""

    db: Database
    api: PodApi
    settings: PodSettings
    signing_key: str
    keyring: secrets.Keyring | None = None
    # Where a pod answers: the headless Service's DNS name; tests point it at a local server.
    address: Callable[[Environment], str] | None = None
    sleep: Callable[[float], None] = time.sleep

    def address_of(self, environment: Environment) -> str:
        if self.address is not None:
            return self.address(environment)
        name = object_name(environment.id)
        return f"tcp:{name}-0.{name}.{self.settings.namespace}.svc.{self.settings.cluster_domain}:{PORT}"

    def wake(self, environment: Environment, now: datetime) -> RemoteEnvironment:
        """Return the environment's pod, ready; wake it first if it was asleep (one wake for every caller)."""
        started = time.monotonic()
        name = object_name(environment.id)
        failed: EnvironmentFailed | None = None
        with self.db.transaction() as store:
            row = store.environment_pods.lock(environment.id, environment.tenant_id)
            tenant = store.catalog.get_tenant(environment.tenant_id)
            if not row.awake:
                tenant_secrets = self._tenant_secrets(store, environment.tenant_id)
                try:
                    for body in manifests(environment, tenant.name if tenant else "", self.settings,
                                          credential(self.signing_key, environment), tenant_secrets, replicas=1):
                        self._create(environment, body)
                    _translated(f"environment {environment.name} could not be woken", lambda: self.api.scale(name, 1))
                except EnvironmentFailed as exc:
                    failed = exc  # recorded awake all the same: the scale-up may have landed, and the idle stop undoes it
                log.info("waking environment %s (%s)", environment.name, name)
            store.environment_pods.mark_awake(environment.id, now)
        if failed is not None:
            raise failed
        client = ExecutionClient(self.address_of(environment), credential(self.signing_key, environment))
        self._await_ready(environment, name, client, started + self.settings.wake_timeout)
        return RemoteEnvironment(environment.tenant_id, client, (time.monotonic() - started) * 1000, not row.awake)

    def _create(self, environment: Environment, body: dict[str, Any]) -> None:
        _translated(f"environment {environment.name} could not be created", lambda: self.api.create(body["kind"], body))

    def _await_ready(self, environment: Environment, name: str, client: ExecutionClient, deadline: float) -> None:
        last = "its pod is not Ready"
        while time.monotonic() < deadline:
            body = _translated(f"environment {environment.name} could not be read", lambda: self.api.statefulset(name))
            status = (body or {}).get("status") or {}
            if body is None:
                last = "its StatefulSet is gone"
            elif (body.get("spec") or {}).get("replicas") == 0:
                # Scaled down behind tickwarden's back (or a stop raced a wake's old snapshot): ask again.
                _translated(f"environment {environment.name} could not be woken", lambda: self.api.scale(name, 1))
            elif int(status.get("readyReplicas") or 0) >= 1:
                try:
                    answer = client.call({"op": "ping"}, max(min(5.0, deadline - time.monotonic()), 0.5))
                except (EnvironmentFailed, WatchdogTimeout) as exc:
                    last = f"its pod does not answer ({exc or type(exc).__name__})"
                else:
                    if answer.get("tenant_id") != environment.tenant_id:
                        raise EnvironmentFailed(f"environment {environment.name} answered for another tenant")
                    return
            self.sleep(READY_POLL)
        raise EnvironmentFailed(f"environment {environment.name} did not become ready within "
                                f"{self.settings.wake_timeout:.0f} s ({last})")

    def touch(self, environment: Environment, now: datetime, store: Any = None) -> None:
        """Record a use of the environment (the idle clock restarts), in the caller's transaction if given."""
        if store is not None:
            store.environment_pods.touch(environment.id, now)
            return
        with self.db.autocommit() as own:
            own.environment_pods.touch(environment.id, now)

    def _tenant_secrets(self, store: Any, tenant_id: int) -> dict[str, str]:
        if self.keyring is None:
            return {}
        names = [info.name for info in store.secrets.list_secrets(tenant_id)]
        return {sealed.name: self.keyring.open(sealed) for sealed in store.secrets.sealed_secrets(tenant_id, names)}


@dataclass
class PodPass:
    """What one pass of the environment loop did."""

    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


class EnvironmentPodLoop:
    """Converge environment objects and stop idle environments; safe with any number of replicas."""

    name = "environment-pods"

    def __init__(self, pods: PodEnvironments, *, interval: timedelta = INTERVAL):
        self.pods = pods
        self.interval = interval
        self.last: PodPass | None = None

    def run_once(self, now: datetime) -> datetime:
        """Run one pass; KubernetesUnavailable fails it whole, and the next pass starts again from the database."""
        result = PodPass()
        self._converge(result)
        self._stop_idle(now, result)
        self.last = result
        return now + self.interval

    def _converge(self, result: PodPass) -> None:
        api, pods = self.pods.api, self.pods
        live = {kind: {b["metadata"]["name"]: b for b in api.owned(kind)} for kind in KINDS}
        # Read after the lists: an object created from an environment another replica just saw is
        # then matched here by that environment, never taken for an orphan.
        with pods.db.transaction() as store:
            desired = store.environment_pods.desired()
            wanted = {}
            for entry in desired:
                env = entry.environment
                bodies = manifests(env, entry.tenant, pods.settings, credential(pods.signing_key, env),
                                   pods._tenant_secrets(store, env.tenant_id), replicas=1 if entry.awake else 0)
                wanted[object_name(env.id)] = bodies
        for name, bodies in wanted.items():
            for body in bodies:
                kind = body["kind"]
                have = live[kind].get(name)
                if have is None:
                    if api.create(kind, body):
                        result.created.append(f"{kind}/{name}")
                    continue
                want_hash = body["metadata"]["annotations"][ANNOTATION_HASH]
                have_hash = ((have.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_HASH)
                if want_hash != have_hash:
                    patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
                    if kind == "StatefulSet":  # replicas belong to wakes and stops; claim templates are immutable
                        patch = {"metadata": body["metadata"],
                                 "spec": {"template": body["spec"]["template"]}}
                    if api.patch(kind, name, patch):
                        result.patched.append(f"{kind}/{name}")
        for kind in reversed(KINDS):
            for name in live[kind]:
                if name not in wanted and api.delete(kind, name):
                    result.deleted.append(f"{kind}/{name}")

    def _stop_idle(self, now: datetime, result: PodPass) -> None:
        with self.pods.db.transaction() as store:
            for environment_id, _tenant_id in store.environment_pods.idle(now, STOP_BATCH):
                # Scaled to 0 while the row is locked: a wake waiting on it sees the stop, then wakes anew.
                self.pods.api.scale(object_name(environment_id), 0)
                store.environment_pods.mark_stopped(environment_id, now)
                result.stopped.append(environment_id)
                log.info("stopped idle environment %s", object_name(environment_id))


def pods_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the control plane runs the environment loop: with the Kubernetes trigger, or when asked to.

    `TICKWARDEN_KUBERNETES_ENVIRONMENTS=on|off` (default: on with `TICKWARDEN_TRIGGER=kubernetes`).
    """
    from tickwarden.triggers.kubernetes import trigger_mode

    env = os.environ if environ is None else environ
    given = (env.get("TICKWARDEN_KUBERNETES_ENVIRONMENTS") or "").strip().lower()
    if given not in ("", "on", "off"):
        raise InvalidInput(f"TICKWARDEN_KUBERNETES_ENVIRONMENTS must be on or off, not {given[:40]!r}.")
    return given == "on" or (given == "" and trigger_mode(env) == "kubernetes")


def from_environ(db: Database, signing_key: str | None = None) -> PodEnvironments:
    """PodEnvironments configured the standard way (in-cluster, else KUBECONFIG) and from TICKWARDEN_KUBERNETES_*."""
    from tickwarden.triggers.kubernetes import load_api_client

    settings = PodSettings.from_environ()
    key = signing_key or auth.secret_key()
    return PodEnvironments(db, PodApi(load_api_client(), settings.namespace), settings, key,
                           secrets.Keyring.from_environment())


__all__ = ["EnvironmentPodLoop", "PodApi", "PodEnvironments", "PodPass", "RemoteEnvironment", "from_environ",
           "pods_enabled", "statefulset_manifest"]
