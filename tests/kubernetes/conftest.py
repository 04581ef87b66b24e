"""A Kubernetes API for the tests: kmock's stateful emulator on 127.0.0.1, driven by the real client."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from kubernetes import client

from tickwarden.triggers.kubernetes import CronJobApi, KubernetesSettings
from tickwarden.triggers.kubernetes_reconciler import KubernetesReconciler

NAMESPACE = "tickwarden-test"


class Cluster:
    """The emulator served over HTTP from its own event loop thread, as a cluster's API server would be."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kmock", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self.emulator = kmock.KubernetesEmulator()
        await self.emulator.__aenter__()
        self.emulator.resources["batch/v1/cronjobs"] = {}
        self.emulator.resources["batch/v1/jobs"] = {}
        self.server = kmock.Server(self.emulator)
        await self.server.__aenter__()
        self.url = str(self.server.url).rstrip("/")

    async def _stop(self) -> None:
        await self.server.__aexit__(None, None, None)
        await self.emulator.__aexit__(None, None, None)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def batch(self) -> client.BatchV1Api:
        """The cluster's side of the test (a person with kubectl, the CronJob controller)."""
        return client.BatchV1Api(self.api_client())

    def cronjobs(self, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
        api = self.api_client()
        items = client.BatchV1Api(api).list_namespaced_cron_job(namespace).items
        return {item.metadata.name: api.sanitize_for_serialization(item) for item in items}

    def jobs(self, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
        api = self.api_client()
        items = client.BatchV1Api(api).list_namespaced_job(namespace).items
        return {item.metadata.name: api.sanitize_for_serialization(item) for item in items}

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": NAMESPACE}}],
        }))
        return path


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    running = Cluster()
    yield running
    running.stop()


@pytest.fixture
def settings() -> KubernetesSettings:
    return KubernetesSettings(namespace=NAMESPACE, image="registry.example/tickwarden:0.1.0")


def make_reconciler(db, cluster: Cluster, settings: KubernetesSettings) -> KubernetesReconciler:
    return KubernetesReconciler(db, CronJobApi(cluster.api_client(), settings.namespace), settings)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
