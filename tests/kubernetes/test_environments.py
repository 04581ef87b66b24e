"""Environments as pods: one StatefulSet per environment, woken once, stopped when idle, spoken to over TCP.

The test plays the StatefulSet controller and the kubelet: when tickwarden scales an
environment's StatefulSet to 1, it writes the environment's Secret to a directory (as
the kubelet mounts it), starts the real execution server with the container's own
command (listening on 127.0.0.1 instead of the pod's port), and marks the
StatefulSet ready; at 0 it stops the server. So every step below really runs
through the authenticated TCP protocol.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes_validate import validate

from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run, set_secret
from tests.helpers import republish
from tests.kubernetes.conftest import NAMESPACE, Cluster, closed_port
from tests.kubernetes.test_deploy import DEPLOY, KUBERNETES_VERSION, policy_violations, render
from tickwarden import secrets
from tickwarden.environments import EnvironmentPool
from tickwarden.environments.pod_control import EnvironmentPodLoop, PodApi, PodEnvironments
from tickwarden.environments.pods import RUNNER_DIR, PodSettings, manifests, object_name
from tickwarden.environments.runner import __file__ as RUNNER
from tickwarden.cadence import CronSchedule
from tickwarden.models import Environment
from tickwarden.triggers.kubernetes import KubernetesUnavailable
from tickwarden.triggers.kubernetes_tick import run_tick
from tickwarden.worker import Worker

POD = {"image": "registry.example/acme/etl:1.4.2", "python": sys.executable,
       "resources": {"cpu": "500m", "memory": "512Mi"}, "volume": {"size": "1Gi"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StatefulSetController:
    """The cluster's side: replicas 1 → a real execution server and readyReplicas 1; replicas 0 → none."""

    def __init__(self, cluster: Cluster, tmp: Path, *, ready: bool = True):
        self.api = cluster.api_client()
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self.tmp = tmp
        self.ready = ready
        self.ports: dict[str, int] = {}
        self.servers: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def port(self, environment: Environment) -> int:
        return self.ports.setdefault(object_name(environment.id), free_port())

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for item in self.apps.list_namespaced_stateful_set(NAMESPACE).items:
                body = self.api.sanitize_for_serialization(item)
                self._converge(body["metadata"]["name"], body)

    def _converge(self, name: str, body: dict[str, Any]) -> None:
        replicas = body["spec"].get("replicas") or 0
        server = self.servers.get(name)
        if replicas and server is None and self.ready:
            self.servers[name] = self._start(name, body)
            self.started += 1
            self._status(name, 1)
        elif not replicas and server is not None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            del self.servers[name]
            self._status(name, 0)
        elif server is not None and server.poll() is not None:  # the watchdog stopped it: the kubelet restarts it
            self.servers[name] = self._start(name, body)

    def _start(self, name: str, body: dict[str, Any]) -> subprocess.Popen[bytes]:
        mounted = self.tmp / name / "secrets"
        mounted.mkdir(parents=True, exist_ok=True)
        for key, value in (self.core.read_namespaced_secret(name, NAMESPACE).data or {}).items():
            (mounted / key).write_bytes(base64.b64decode(value))
        command = list(body["spec"]["template"]["spec"]["containers"][0]["command"])
        command = [RUNNER if part == f"{RUNNER_DIR}/runner.py" else part for part in command]
        command[command.index("--listen") + 1] = f"tcp:127.0.0.1:{self.ports.setdefault(name, free_port())}"
        command = [part.replace("/var/run/tickwarden/secrets", str(mounted)) for part in command]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=os.getcwd(),
                                  start_new_session=True)
        assert server.stdout is not None and server.stdout.readline() == b"listening\n"
        return server

    def _status(self, name: str, ready: int) -> None:
        self.apps.patch_namespaced_stateful_set(name, NAMESPACE, {"status": {"replicas": ready, "readyReplicas": ready}})

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for server in self.servers.values():
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture
def pod_cluster(cluster: Cluster) -> Cluster:
    for resource in ("apps/v1/statefulsets", "v1/services", "v1/secrets", "networking.k8s.io/v1/networkpolicies"):
        cluster.emulator.resources[resource] = {}
    return cluster


@pytest.fixture
def controller(pod_cluster: Cluster, tmp_path: Path) -> Iterator[StatefulSetController]:
    running = StatefulSetController(pod_cluster, tmp_path)
    yield running
    running.close()


def pods_for(db, cluster: Cluster, controller: StatefulSetController | None, *, wake_timeout: float = 20.0,
             api: PodApi | None = None) -> PodEnvironments:
    settings = PodSettings(namespace=NAMESPACE, image="registry.example/tickwarden:0.1.0", wake_timeout=wake_timeout)
    return PodEnvironments(
        db, api or PodApi(cluster.api_client(), NAMESPACE), settings, SECRET, secrets.Keyring(SECRET),
        address=(lambda env: f"tcp:127.0.0.1:{controller.port(env)}") if controller else (lambda env: "tcp:127.0.0.1:9"))


def pod_workflow(db, now, steps, *, name="nightly", idle_timeout=300):
    workflow = make_runnable(db, now, steps, name=name, idle_timeout=idle_timeout)
    with db.transaction() as store:
        env = store.catalog.get_environment(workflow.environment_id)
        store.catalog.apply_environment(env.tenant_id, env.name, None, idle_timeout, now, "kubernetes", POD)
        return workflow, store.catalog.get_environment(env.id)


def make_worker(db, clock, pods: PodEnvironments, worker_id: str, **kwargs) -> Worker:
    return Worker(db, worker_id, clock=clock, secret_key=SECRET,
                  environments=EnvironmentPool(db, worker_id, pods=pods), **kwargs)


def outcome(db, run_id):
    with db.transaction() as store:
        run = store.ledger.get_run(run_id)
        attempts = store.ledger.list_attempts(run_id)
        steps = {s.step: s for s in store.api.list_run_steps(run_id) if s.attempt_id == attempts[-1].id}
    return run, attempts[-1], steps


def pod_row(db, environment_id):
    with db.transaction() as store:
        return store.environment_pods.get(environment_id)


def replicas(cluster: Cluster, environment_id: int) -> int:
    return client.AppsV1Api(cluster.api_client()).read_namespaced_stateful_set(
        object_name(environment_id), NAMESPACE).spec.replicas


def test_an_environment_is_woken_once_for_two_workers_at_once(db, clock, pod_cluster, controller):
    workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")])
    runs = [queue_run(db, workflow, clock.now() - timedelta(minutes=m), clock.now()) for m in (1, 2)]
    pods = [pods_for(db, pod_cluster, controller) for _ in range(2)]
    workers = [make_worker(db, clock, p, f"w{i}") for i, p in enumerate(pods)]
    threads = [threading.Thread(target=w.run_once, args=(clock.now(),)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    results = [outcome(db, run.id) for run in runs]
    assert [r[0].status for r in results] == ["succeeded", "succeeded"], [r[1].error for r in results]
    # both steps ran in the one server, reached over TCP, started once
    served_by = {r[2]["who"].output["pid"] for r in results}
    assert served_by == {controller.servers[object_name(env.id)].pid} and controller.started == 1
    row = pod_row(db, env.id)
    assert row.awake and row.wakes == 1 and replicas(pod_cluster, env.id) == 1
    # its objects: the Secret holds the credential, the NetworkPolicy isolates it
    core = client.CoreV1Api(pod_cluster.api_client())
    secret = core.read_namespaced_secret(object_name(env.id), NAMESPACE)
    assert set(secret.data) == {"tickwarden-credential"}
    policy = client.NetworkingV1Api(pod_cluster.api_client()).read_namespaced_network_policy(
        object_name(env.id), NAMESPACE)
    assert policy.spec.policy_types == ["Ingress", "Egress"]


def test_a_step_gets_its_tenant_secret_from_the_environments_secret_not_the_request(db, clock, pod_cluster,
                                                                                   controller):
    workflow, env = pod_workflow(db, clock.now(), [{**python_step("read", "secret_digest", params={"name": "API_TOKEN"}),
                                                    "secrets": ["secret:API_TOKEN"]}])
    set_secret(db, workflow.tenant_id, "API_TOKEN", "tok-123456", clock.now())
    run = queue_run(db, workflow, clock.now(), clock.now())
    make_worker(db, clock, pods_for(db, pod_cluster, controller), "w1").run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert run.status == "succeeded", attempt.error
    assert steps["read"].output == {"digest": hashlib.sha256(b"tok-123456").hexdigest()[:12]}
    secret = client.CoreV1Api(pod_cluster.api_client()).read_namespaced_secret(object_name(env.id), NAMESPACE)
    assert base64.b64decode(secret.data["secret.API_TOKEN"]) == b"tok-123456"


def test_a_secret_set_after_the_wake_is_an_environment_failure_until_the_secret_reaches_the_pod(
        db, clock, pod_cluster, controller):
    workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")])
    worker = make_worker(db, clock, pods_for(db, pod_cluster, controller), "w1")
    queue_run(db, workflow, clock.now() - timedelta(minutes=1), clock.now())
    worker.run_once(clock.now())  # awake, its Secret written without NEW_TOKEN
    with db.transaction() as store:
        republish(store, workflow, clock.now(), environment_id=env.id, timeout_seconds=60, recipe={"steps": [
            {**python_step("read", "secret_digest", params={"name": "NEW_TOKEN"}),
             "secrets": ["secret:NEW_TOKEN"]}]})
    set_secret(db, workflow.tenant_id, "NEW_TOKEN", "fresh-654321", clock.now())
    run = queue_run(db, workflow, clock.now(), clock.now())
    worker.run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "environment" and "not in this environment's Secret" in attempt.error
    assert run.status == "pending_retry" and "fresh-654321" not in attempt.error


def test_an_idle_environment_is_stopped_once_and_a_running_one_is_not(db, clock, pod_cluster, controller):
    workflow, env = pod_workflow(db, clock.now(), [python_step("nap", "hang", params={"seconds": 2})],
                                 idle_timeout=60)
    run = queue_run(db, workflow, clock.now(), clock.now())
    pods = pods_for(db, pod_cluster, controller)
    loops = [EnvironmentPodLoop(pods_for(db, pod_cluster, controller)) for _ in range(2)]
    worker = make_worker(db, clock, pods, "w1")
    thread = threading.Thread(target=worker.run_once, args=(clock.now(),))
    thread.start()
    deadline = time.monotonic() + 30
    while not controller.servers and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    # long past the idle timeout, but an attempt runs on it with a valid lease: it stays awake
    loops[0].run_once(clock.now() + timedelta(seconds=20))
    assert loops[0].last.stopped == [] and replicas(pod_cluster, env.id) == 1
    thread.join(60)
    assert outcome(db, run.id)[0].status == "succeeded"
    used = pod_row(db, env.id).last_used_at
    loops[0].run_once(used + timedelta(seconds=59))
    assert loops[0].last.stopped == []
    # two replicas at once: one stop between them, and the controller stops the server
    later = used + timedelta(seconds=61)
    threads = [threading.Thread(target=loop.run_once, args=(later,)) for loop in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(len(loop.last.stopped) for loop in loops) == [0, 1]
    assert replicas(pod_cluster, env.id) == 0 and not pod_row(db, env.id).awake
    deadline = time.monotonic() + 10
    while controller.servers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not controller.servers


def test_a_wake_that_never_becomes_ready_fails_as_environment_within_its_bound(db, clock, pod_cluster, tmp_path):
    stuck = StatefulSetController(pod_cluster, tmp_path, ready=False)
    try:
        workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")])
        run = queue_run(db, workflow, clock.now(), clock.now())
        started = time.monotonic()
        make_worker(db, clock, pods_for(db, pod_cluster, stuck, wake_timeout=1.5), "w1").run_once(clock.now())
        elapsed = time.monotonic() - started
    finally:
        stuck.close()
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "environment" and "did not become ready within 2 s" in attempt.error
    assert run.status == "pending_retry" and elapsed < 6
    # recorded awake all the same: the idle loop scales it back down
    assert pod_row(db, env.id).awake and replicas(pod_cluster, env.id) == 1


def test_an_unreachable_kubernetes_api_is_a_clear_error_retried_with_nothing_lost(db, clock, pod_cluster,
                                                                                  controller):
    workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")], idle_timeout=60)
    down = PodApi(pod_cluster.api_client(), NAMESPACE)
    down.api_client = pod_cluster.api_client()
    down.api_client.configuration.host = f"http://127.0.0.1:{closed_port()}"
    down.api_client.configuration.retries = 0
    down = PodApi(down.api_client, NAMESPACE)
    # a worker's wake: the attempt fails as `environment`, retryable, with one clear sentence
    run = queue_run(db, workflow, clock.now(), clock.now())
    make_worker(db, clock, pods_for(db, pod_cluster, controller, api=down), "w1").run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "environment" and "cannot be reached" in attempt.error
    assert run.status == "pending_retry"
    # the loop: the pass fails whole and records nothing
    with pytest.raises(KubernetesUnavailable, match="cannot be reached.*will be retried"):
        EnvironmentPodLoop(pods_for(db, pod_cluster, controller, api=down)).run_once(clock.now())
    # back: the loop creates the objects, a worker wakes it and runs, and the idle stop goes through
    up = EnvironmentPodLoop(pods_for(db, pod_cluster, controller))
    up.run_once(clock.now())
    assert {c.split("/")[0] for c in up.last.created} == {"Secret", "Service", "NetworkPolicy", "StatefulSet"}
    retry = queue_run(db, workflow, clock.now() - timedelta(minutes=5), clock.now())
    make_worker(db, clock, pods_for(db, pod_cluster, controller), "w2").run_once(clock.now())
    assert outcome(db, retry.id)[0].status == "succeeded"
    used = pod_row(db, env.id).last_used_at
    with pytest.raises(KubernetesUnavailable):
        EnvironmentPodLoop(pods_for(db, pod_cluster, controller, api=down)).run_once(used + timedelta(minutes=5))
    assert pod_row(db, env.id).awake  # the stop was not recorded, since it did not happen
    up.run_once(used + timedelta(minutes=5))
    assert up.last.stopped == [env.id] and replicas(pod_cluster, env.id) == 0


def test_the_loop_repairs_drift_and_removes_the_objects_of_a_process_environment(db, clock, pod_cluster):
    workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")])
    loop = EnvironmentPodLoop(pods_for(db, pod_cluster, None))
    loop.run_once(clock.now())
    name = object_name(env.id)
    client.CoreV1Api(pod_cluster.api_client()).delete_namespaced_service(name, NAMESPACE)
    loop.run_once(clock.now())
    assert loop.last.created == [f"Service/{name}"] and not loop.last.patched
    with db.transaction() as store:
        store.catalog.apply_environment(env.tenant_id, env.name, None, 300, clock.now(), "process", None)
    loop.run_once(clock.now())
    assert sorted(loop.last.deleted) == sorted(f"{k}/{name}" for k in
                                               ("Secret", "Service", "NetworkPolicy", "StatefulSet"))


def test_every_environment_manifest_is_valid_kubernetes():
    env = Environment(id=7, tenant_id=3, name="gpu-etl", python=None, idle_timeout_seconds=600, settings={},
                      created_at=None, updated_at=None, runtime="kubernetes",  # type: ignore[arg-type]
                      pod={"image": "registry.example/acme/etl@sha256:" + "a" * 64, "python": "python3",
                           "resources": {"cpu": "2000m", "memory": "8Gi", "nvidia.com/gpu": 1},
                           "volume": {"size": "50Gi", "storage_class": "fast-ssd"}})
    settings = PodSettings(namespace=NAMESPACE, database_cidrs=("10.20.0.5/32", "fd00::/8"))
    docs = manifests(env, "acme", settings, b"k" * 32, {"API_TOKEN": "x"}, replicas=1)
    for doc in docs:
        validate(doc, KUBERNETES_VERSION, strict=True)
    sts = docs[-1]
    assert policy_violations(sts) == []  # non-root, unprivileged, read-only root, limits set, pinned images
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast-ssd"
    egress = docs[2]["spec"]["egress"][1]["to"]
    assert egress[0]["ipBlock"]["except"] == ["10.20.0.5/32"] and egress[1]["ipBlock"]["except"] == ["fd00::/8"]


def test_a_workflow_file_declares_the_pod_and_an_edit_patches_its_statefulset(db, clock, pod_cluster, tmp_path):
    from tickwarden import catalog

    text = ("tenants: [{name: acme}]\nenvironments:\n  - name: etl\n    runtime: kubernetes\n"
            "    image: registry.example/acme/etl:%s\n    resources: {cpu: 250m, memory: 256Mi}\n")
    path = tmp_path / "acme.yaml"
    path.write_text(text % "1.0.0")
    assert catalog.apply_file(db, path, clock.now()).created >= 1
    assert catalog.apply_file(db, path, clock.now()).updated == 0  # the same pod again: unchanged
    loop = EnvironmentPodLoop(pods_for(db, pod_cluster, None))
    loop.run_once(clock.now())
    with db.transaction() as store:
        env = store.api.get_environment_by_name("acme", "etl")
    name = object_name(env.id)
    assert f"StatefulSet/{name}" in loop.last.created
    path.write_text(text % "1.1.0")
    catalog.apply_file(db, path, clock.now())
    loop.run_once(clock.now())
    assert loop.last.patched == [f"StatefulSet/{name}"]
    sts = client.AppsV1Api(pod_cluster.api_client()).read_namespaced_stateful_set(name, NAMESPACE)
    assert sts.spec.template.spec.containers[0].image == "registry.example/acme/etl:1.1.0" and sts.spec.replicas == 0


def test_the_environments_overlay_grants_the_environment_objects_and_nothing_cluster_wide():
    docs = render(DEPLOY / "kubernetes" / "overlays" / "example-environments")
    for doc in docs:
        validate(doc, KUBERNETES_VERSION, strict=True)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    granted = {(r["apiGroups"][0], res) for r in roles["tickwarden-environments"]["rules"] for res in r["resources"]}
    assert granted == {("apps", "statefulsets"), ("", "services"), ("", "secrets"),
                       ("networking.k8s.io", "networkpolicies")}
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == "RoleBinding"}
    assert {s["name"] for s in bindings["tickwarden-environments"]["subjects"]} == {
        "tickwarden-control-plane", "tickwarden-worker"}
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config["data"]["TICKWARDEN_KUBERNETES_ENVIRONMENTS"] == "on"


class Undone(Exception):
    """Raised to roll a test's probing transaction back."""


def test_a_cronjobs_pod_records_the_tick_and_leaves_a_pod_environments_attempt_to_the_pool(
        db, clock, pod_cluster, controller):
    workflow, env = pod_workflow(db, clock.now(), [python_step("who", "pid")])
    with db.transaction() as store:
        schedule = store.catalog.get_schedule_for_workflow(workflow.id)
    tick = CronSchedule(schedule.cron, schedule.timezone).next_after(clock.now())
    clock.set(tick + timedelta(seconds=1))
    # the CronJob's pod has no token to wake the environment: it records the tick and runs nothing
    fired = run_tick(db, schedule.id, tick, clock, "tick@pod")
    assert fired.status == "recorded" and fired.attempt is None and fired.finished is None
    assert "worker pool" in fired.reason and controller.started == 0
    with db.transaction() as store:
        (attempt,) = store.ledger.list_attempts(fired.run_id)
    assert attempt.status == "queued" and attempt.worker_id is None
    with pytest.raises(Undone), db.transaction() as store:
        # a retry of a pod environment gets no Job either: it stays with the pool
        store.conn.execute("UPDATE attempts SET number = 2 WHERE id = %s", (attempt.id,))
        assert store.kubernetes.queued_retries(clock.now(), 10) == []
        store.conn.execute("UPDATE environments SET runtime = 'process', pod = NULL WHERE id = %s", (env.id,))
        assert [r.attempt_id for r in store.kubernetes.queued_retries(clock.now(), 10)] == [attempt.id]
        raise Undone  # the transaction rolls back: the attempt and the environment are as they were
    # the pool wakes the environment and runs the attempt
    make_worker(db, clock, pods_for(db, pod_cluster, controller), "w1").run_once(clock.now())
    run, _, steps = outcome(db, fired.run_id)
    assert run.status == "succeeded" and controller.started == 1
    assert steps["who"].output["pid"] == controller.servers[object_name(env.id)].pid
