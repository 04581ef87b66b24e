"""deploy/: the image lints clean and every manifest is valid Kubernetes that meets the pod-security bar."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate

from tickwarden.store.kubernetes import DesiredCronJob, QueuedRetry
from tickwarden.triggers.kubernetes import (
    KubernetesSettings,
    cronjob_manifest,
    retry_job_manifest,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.31"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")


def render(folder: Path) -> list[dict[str, Any]]:
    """Build a kustomization the way `kubectl apply -k` does."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/kubernetes"
    done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def overlay() -> list[dict[str, Any]]:
    return render(DEPLOY / "kubernetes" / "overlays" / "example")


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def policy_violations(doc: dict[str, Any]) -> list[str]:
    """What a static policy checker would flag on a workload: the restricted pod-security profile and limits."""
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    pod = pod_spec(doc)
    found = [f"{name}: {key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    pod_security = pod.get("securityContext") or {}
    if pod_security.get("runAsNonRoot") is not True or pod_security.get("runAsUser", 0) == 0:
        found.append(f"{name}: the pod may run as root")
    if (pod_security.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        found.append(f"{name}: no RuntimeDefault seccomp profile")
    for container in pod.get("initContainers", []) + pod["containers"]:
        where = f"{name}/{container['name']}"
        security = container.get("securityContext") or {}
        if security.get("privileged") is not False:
            found.append(f"{where}: not explicitly unprivileged")
        if security.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: privilege escalation allowed")
        if security.get("readOnlyRootFilesystem") is not True:
            found.append(f"{where}: writable root filesystem")
        if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
            found.append(f"{where}: capabilities not dropped")
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(kind) or {}):
                    found.append(f"{where}: no {resource} {kind[:-1]}")
        image = container["image"]
        if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
            found.append(f"{where}: image {image} is not pinned")
    return found


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    done = subprocess.run([str(hadolint), "--failure-threshold", "info", str(DEPLOY / "Dockerfile")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_is_slim_pinned_and_runs_as_a_non_root_user():
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and all("slim" in b and b.split(":")[1][0].isdigit() for b in bases)
    (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user.split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["tickwarden"]' in lines


@pytest.fixture(scope="module")
def retry_jobs_overlay() -> list[dict[str, Any]]:
    return render(DEPLOY / "kubernetes" / "overlays" / "example-retry-jobs")


def test_every_manifest_is_valid_kubernetes(overlay, retry_jobs_overlay):
    base = render(DEPLOY / "kubernetes" / "base")
    for doc in base + overlay + retry_jobs_overlay:
        validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_workload_that_breaks_the_policy_is_flagged():
    # the checker itself must see a root, privileged, unlimited container
    bad = {"kind": "Deployment", "metadata": {"name": "bad"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "x:latest", "securityContext": {"privileged": True}}]}}}}
    found = " ".join(policy_violations(bad))
    for flaw in ("root", "not explicitly unprivileged", "no cpu limit", "no memory request", "not pinned"):
        assert flaw in found


def test_every_workload_and_the_cronjobs_and_retry_jobs_meet_the_policy(overlay):
    workloads = [doc for doc in overlay if doc["kind"] in WORKLOADS]
    assert {doc["metadata"]["name"] for doc in workloads} == {"tickwarden-control-plane", "tickwarden-worker"}
    settings = KubernetesSettings(image="registry.example.com/tickwarden:0.1.0")
    cronjob = cronjob_manifest(DesiredCronJob(7, 3, "0 2 * * *", "Europe/Paris", "active", 300, "acme", "nightly",
                                              False), settings)
    retry = retry_job_manifest(QueuedRetry(41, 9, 2, "acme", "nightly-"), settings)
    for doc in (cronjob, retry):
        validate(doc, KUBERNETES_VERSION, strict=True)
    assert [v for doc in [*workloads, cronjob, retry] for v in policy_violations(doc)] == []


def test_the_control_plane_is_replicated_probed_and_protected_from_drains(overlay):
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in overlay}
    control = by_kind[("Deployment", "tickwarden-control-plane")]
    assert control["spec"]["replicas"] >= 2
    (serve,) = pod_spec(control)["containers"]
    assert serve["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert serve["livenessProbe"]["httpGet"]["path"] == "/healthz"
    budget = by_kind[("PodDisruptionBudget", "tickwarden-control-plane")]
    assert budget["spec"]["minAvailable"] == 1
    labels = control["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    config = by_kind[("ConfigMap", "tickwarden")]["data"]
    assert config["TICKWARDEN_TRIGGER"] == "kubernetes"
    assert config["TICKWARDEN_KUBERNETES_IMAGE"] == serve["image"]  # the tick pods run the same image


def test_rbac_grants_the_reconciler_cronjobs_in_its_namespace_and_nothing_else(overlay):
    assert not [d for d in overlay if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    (role,) = [d for d in overlay if d["kind"] == "Role"]
    assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["cronjobs"],
                              "verbs": ["get", "list", "create", "patch", "delete"]}]
    (binding,) = [d for d in overlay if d["kind"] == "RoleBinding"]
    assert [s["name"] for s in binding["subjects"]] == ["tickwarden-control-plane"]
    assert not [d for d in overlay if d["kind"] == "ConfigMap" and "TICKWARDEN_KUBERNETES_RETRIES" in d["data"]]
    accounts = {d["metadata"]["name"]: d for d in overlay if d["kind"] == "ServiceAccount"}
    assert accounts["tickwarden-worker"]["automountServiceAccountToken"] is False
    assert accounts["tickwarden-tick"]["automountServiceAccountToken"] is False


def test_retries_as_jobs_add_a_role_for_jobs_and_the_setting(retry_jobs_overlay):
    roles = {d["metadata"]["name"]: d for d in retry_jobs_overlay if d["kind"] == "Role"}
    assert roles["tickwarden-retry-jobs"]["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"],
                                                         "verbs": ["list", "create"]}]
    assert {d["metadata"]["namespace"] for d in retry_jobs_overlay if d["kind"] != "Namespace"} == {"tickwarden"}
    (config,) = [d for d in retry_jobs_overlay if d["kind"] == "ConfigMap"]
    assert config["data"]["TICKWARDEN_KUBERNETES_RETRIES"] == "jobs"
    assert config["data"]["TICKWARDEN_TRIGGER"] == "kubernetes"


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(e["operator"] == "In" and labels.get(e["key"]) in e["values"]
               for e in selector.get("matchExpressions") or [])


def test_every_pod_is_covered_by_a_network_policy_and_only_the_control_plane_takes_connections(overlay):
    policies = [d for d in overlay if d["kind"] == "NetworkPolicy"]
    settings = KubernetesSettings(image="registry.example.com/tickwarden:0.1.0")
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in overlay if d["kind"] in WORKLOADS}
    pods["tick"] = cronjob_manifest(DesiredCronJob(7, 3, "0 2 * * *", "UTC", "active", 300, "acme", "nightly",
                                                   False), settings)["spec"]["jobTemplate"]["spec"]["template"][
        "metadata"]["labels"]
    pods["retry"] = retry_job_manifest(QueuedRetry(41, 9, 2, "acme", "nightly"), settings)["spec"]["template"][
        "metadata"]["labels"]
    for name, labels in pods.items():
        covering = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        assert covering, f"no NetworkPolicy selects the {name} pods"
        opened = [rule for p in covering for rule in p["spec"].get("ingress", [])]
        if name == "tickwarden-control-plane":
            assert [port["port"] for rule in opened for port in rule["ports"]] == [8080]
        else:
            assert opened == [], f"the {name} pods accept connections"
