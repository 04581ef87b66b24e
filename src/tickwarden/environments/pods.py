"""Environments as pods: one StatefulSet per environment, woken by workers, stopped by a control-plane loop.

An environment with `runtime: kubernetes` owns four objects in tickwarden's namespace,
all named `tickwarden-env-<id>` and labelled `tickwarden.io/environment-id`:

- a StatefulSet (replicas 0 or 1) whose pod runs the execution server (`runner.py`,
  copied in by an init container from tickwarden's image) with the environment's
  image, interpreter and resources, and a volumeClaimTemplate for its disk;
- a headless Service: the pod answers at `tickwarden-env-<id>-0.tickwarden-env-<id>`;
- a Secret holding the environment's credential and the tenant's secrets, the only
  way either reaches the pod;
- a NetworkPolicy: ingress from tickwarden's workers only; egress to DNS and to
  every address except the platform database's (`TICKWARDEN_KUBERNETES_DATABASE_CIDRS`,
  default every private range).

Warm state lives in `environment_pods`, shared by every worker and replica:

    asleep (replicas 0) ──wake──► awake (replicas 1) ──idle past timeout, no running attempt──► asleep

A wake and a stop each lock the environment's row across their call to the API
server, so they take turns: two workers waking at once make one wake (the second
finds it awake), and a stop can never land after a wake that followed it. A stop
skips an environment while an attempt that runs on it holds a valid lease, so a
run in progress keeps it awake. Waiting for Ready happens after the lock, bounded
by the wake timeout; a pod that does not become Ready is an `environment` failure.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tickwarden.errors import InvalidInput
from tickwarden.models import Environment
from tickwarden.triggers.kubernetes import (
    KubernetesSettings,
    label_value,
)

log = logging.getLogger(__name__)

PORT = 7070
LABEL_ENVIRONMENT = "tickwarden.io/environment-id"
LABEL_TENANT = "tickwarden.io/tenant"
LABEL_NAME = "tickwarden.io/environment"
ANNOTATION_HASH = "tickwarden.io/spec-hash"
CREDENTIAL_KEY = "tickwarden-credential"
SECRETS_DIR = "/var/run/tickwarden/secrets"
RUNNER_DIR = "/opt/tickwarden"
DATA_DIR = "/data"
ENVIRONMENT_UID = 10001
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
                  "fc00::/7", "fe80::/10")
INTERVAL = timedelta(seconds=15)
STOP_BATCH = 50


def object_name(environment_id: int) -> str:
    return f"tickwarden-env-{environment_id}"


def secret_key(name: str) -> str:
    """The key of a tenant secret `secret:NAME` in the environment's Secret."""
    return f"secret.{name}"


def credential(signing_key: str, environment: Environment) -> bytes:
    """The environment's credential: derived from the platform key, so only it and the control plane know it."""
    message = f"tickwarden environment credential\n{environment.tenant_id}/{environment.id}".encode()
    return hmac.new(signing_key.encode(), message, hashlib.sha256).digest()


@dataclass(frozen=True)
class PodSettings:
    """Where environment pods live, how long a wake may take, and what their egress must not reach."""

    namespace: str = "tickwarden"
    image: str = KubernetesSettings.image  # tickwarden's own image: the init container copies the runner
    wake_timeout: float = 300.0
    database_cidrs: tuple[str, ...] = PRIVATE_RANGES
    cluster_domain: str = "cluster.local"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> PodSettings:
        env = os.environ if environ is None else environ
        base = KubernetesSettings.from_environ(env)
        raw = env.get("TICKWARDEN_KUBERNETES_WAKE_TIMEOUT_SECONDS") or "300"
        try:
            wake = float(raw)
        except ValueError:
            wake = -1.0
        if not 5 <= wake <= 3600:
            raise InvalidInput("TICKWARDEN_KUBERNETES_WAKE_TIMEOUT_SECONDS must be a number of seconds from 5 to 3600.")
        cidrs = tuple(c.strip() for c in (env.get("TICKWARDEN_KUBERNETES_DATABASE_CIDRS") or "").split(",") if c.strip())
        import ipaddress

        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise InvalidInput(f"TICKWARDEN_KUBERNETES_DATABASE_CIDRS holds {cidr[:60]!r}, which is not a CIDR.") from None
        return cls(namespace=base.namespace, image=base.image, wake_timeout=wake,
                   database_cidrs=cidrs or PRIVATE_RANGES,
                   cluster_domain=(env.get("TICKWARDEN_KUBERNETES_CLUSTER_DOMAIN") or "cluster.local").strip())


def labels(environment: Environment, tenant: str) -> dict[str, str]:
    return {
        LABEL_ENVIRONMENT: str(environment.id),
        LABEL_TENANT: label_value(tenant),
        LABEL_NAME: label_value(environment.name),
        "app.kubernetes.io/name": "tickwarden",
        "app.kubernetes.io/component": "environment",
    }


def _hashed(body: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body["metadata"].setdefault("annotations", {})[ANNOTATION_HASH] = digest
    return body


def _metadata(environment: Environment, tenant: str, settings: PodSettings) -> dict[str, Any]:
    return {"name": object_name(environment.id), "namespace": settings.namespace,
            "labels": labels(environment, tenant),
            "annotations": {"tickwarden.io/tenant-name": tenant, "tickwarden.io/environment-name": environment.name}}


def statefulset_manifest(environment: Environment, tenant: str, settings: PodSettings, replicas: int) -> dict[str, Any]:
    """The environment's StatefulSet; `replicas` is only used when it is created (wakes and stops own it)."""
    pod = environment.pod or {}
    name = object_name(environment.id)
    tags = labels(environment, tenant)
    resources = dict(pod.get("resources") or {})
    gpu = resources.pop("nvidia.com/gpu", None)
    limits = {**resources, **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    volume = pod.get("volume") or {"size": "1Gi"}
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": volume["size"]}}}
    if volume.get("storage_class"):
        claim["storageClassName"] = volume["storage_class"]
    hardened = {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]}}
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(environment, tenant, settings),
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {LABEL_ENVIRONMENT: str(environment.id)}},
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Retain", "whenDeleted": "Delete"},
            "template": {
                "metadata": {"labels": tags},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": ENVIRONMENT_UID,
                                        "runAsGroup": ENVIRONMENT_UID, "fsGroup": ENVIRONMENT_UID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [{
                        "name": "runner",
                        "image": settings.image,
                        "command": ["python", "-c", "import shutil, tickwarden.environments.runner as r; "
                                    f"shutil.copy(r.__file__, '{RUNNER_DIR}/runner.py')"],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"cpu": "100m", "memory": "64Mi"}},
                        "securityContext": hardened,
                        "volumeMounts": [{"name": "runner", "mountPath": RUNNER_DIR}],
                    }],
                    "containers": [{
                        "name": "environment",
                        "image": pod.get("image"),
                        "command": [pod.get("python") or "python3", "-u", f"{RUNNER_DIR}/runner.py",
                                    "--tenant", str(environment.tenant_id), "--listen", f"tcp:0.0.0.0:{PORT}",
                                    "--credential-file", f"{SECRETS_DIR}/{CREDENTIAL_KEY}",
                                    "--secrets-dir", SECRETS_DIR],
                        "workingDir": DATA_DIR,
                        "env": [{"name": "HOME", "value": DATA_DIR}, {"name": "TMPDIR", "value": "/tmp"},
                                {"name": "TICKWARDEN_TENANT_ID", "value": str(environment.tenant_id)}],
                        "ports": [{"name": "execution", "containerPort": PORT, "protocol": "TCP"}],
                        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2, "failureThreshold": 3},
                        "resources": {"requests": dict(resources), "limits": limits},
                        "securityContext": hardened,
                        "volumeMounts": [
                            {"name": "data", "mountPath": DATA_DIR},
                            {"name": "runner", "mountPath": RUNNER_DIR, "readOnly": True},
                            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "runner", "emptyDir": {"sizeLimit": "16Mi"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "secrets", "secret": {"secretName": name, "defaultMode": 0o400}},
                    ],
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": tags}, "spec": claim}],
        },
    }
    # The hash covers what a patch may change: not the replicas (wakes own them) nor the claim
    # templates (immutable once created).
    hashed: dict[str, Any] = json.loads(json.dumps(body))
    hashed["spec"].pop("replicas")
    body["metadata"]["annotations"][ANNOTATION_HASH] = _hashed(hashed)["metadata"]["annotations"][ANNOTATION_HASH]
    return body


def service_manifest(environment: Environment, tenant: str, settings: PodSettings) -> dict[str, Any]:
    """The headless Service that gives the environment's pod its stable name."""
    return _hashed({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(environment, tenant, settings),
        "spec": {"clusterIP": "None", "selector": {LABEL_ENVIRONMENT: str(environment.id)},
                 "ports": [{"name": "execution", "port": PORT, "targetPort": PORT, "protocol": "TCP"}]},
    })


def secret_manifest(environment: Environment, tenant: str, settings: PodSettings, credential_bytes: bytes,
                    tenant_secrets: Mapping[str, str]) -> dict[str, Any]:
    """The environment's Secret: its credential and its tenant's secrets, nothing of the platform's."""
    data = {CREDENTIAL_KEY: credential_bytes.hex()}
    data.update({secret_key(name): value for name, value in tenant_secrets.items()})
    return _hashed({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(environment, tenant, settings),
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    })


def network_policy_manifest(environment: Environment, tenant: str, settings: PodSettings) -> dict[str, Any]:
    """Ingress from tickwarden's workers only; egress to DNS and anywhere but the platform's database."""
    return _hashed({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(environment, tenant, settings),
        "spec": {
            "podSelector": {"matchLabels": {LABEL_ENVIRONMENT: str(environment.id)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "tickwarden",
                                                          "app.kubernetes.io/component": component}}}
                         for component in ("worker", "tick")],
                "ports": [{"port": PORT, "protocol": "TCP"}],
            }],
            "egress": [
                {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                                     "except": [c for c in settings.database_cidrs if ":" not in c]}},
                        {"ipBlock": {"cidr": "::/0",
                                     "except": [c for c in settings.database_cidrs if ":" in c]}}]},
            ],
        },
    })


def manifests(environment: Environment, tenant: str, settings: PodSettings, credential_bytes: bytes,
              tenant_secrets: Mapping[str, str], replicas: int = 0) -> list[dict[str, Any]]:
    """Every object of one environment, in the order they are created (the Secret before its pod)."""
    return [secret_manifest(environment, tenant, settings, credential_bytes, tenant_secrets),
            service_manifest(environment, tenant, settings),
            network_policy_manifest(environment, tenant, settings),
            statefulset_manifest(environment, tenant, settings, replicas)]
