"""TICKWARDEN_TRIGGER picks the trigger; the Kubernetes client is configured the standard way."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.kubernetes.test_cronjob_reconciler import apply
from tickwarden.errors import InvalidInput
from tickwarden.service import build_loops
from tickwarden.triggers import kubernetes
from tickwarden.triggers.kubernetes import (
    KubernetesSettings,
    KubernetesUnavailable,
    load_api_client,
)
from tickwarden.triggers.kubernetes_reconciler import KubernetesReconciler

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tickwarden"


def test_the_builtin_trigger_is_the_default(db, monkeypatch):
    monkeypatch.delenv("TICKWARDEN_TRIGGER", raising=False)
    loops = build_loops(db, "r1")
    assert loops and not any(isinstance(loop, KubernetesReconciler) for loop in loops)


def test_the_kubernetes_trigger_replaces_the_ticker_and_uses_kubeconfig(db, cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("TICKWARDEN_TRIGGER", "kubernetes")
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.delenv("TICKWARDEN_KUBERNETES_NAMESPACE", raising=False)
    monkeypatch.setattr(kubernetes, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "no-service-account")
    names = {loop.name: loop for loop in build_loops(db, "r1")}
    assert "ticker" not in names
    reconciler = names["reconciler"]
    assert isinstance(reconciler, KubernetesReconciler)
    apply(db, tmp_path)
    reconciler.run_once(datetime(2026, 11, 30, 12, tzinfo=UTC))
    assert len(cluster.cronjobs("tickwarden")) == 2  # the default namespace


def test_the_namespace_comes_from_the_setting_else_the_service_account(monkeypatch, tmp_path):
    account = tmp_path / "namespace"
    account.write_text("platform\n")
    monkeypatch.setattr(kubernetes, "SERVICE_ACCOUNT_NAMESPACE", account)
    assert KubernetesSettings.from_environ({}).namespace == "platform"
    assert KubernetesSettings.from_environ({"TICKWARDEN_KUBERNETES_NAMESPACE": "jobs"}).namespace == "jobs"


@pytest.mark.parametrize(("environ", "message"), [
    ({"TICKWARDEN_TRIGGER": "cron"}, "TICKWARDEN_TRIGGER must be builtin or kubernetes"),
    ({"TICKWARDEN_KUBERNETES_NAMESPACE": "Not_A_Namespace"}, "is not a valid Kubernetes name"),
])
def test_it_refuses_a_bad_setting_with_one_sentence(environ, message):
    with pytest.raises(InvalidInput, match=message):
        kubernetes.trigger_mode(environ)
        KubernetesSettings.from_environ(environ)


def test_it_says_so_when_no_kubernetes_configuration_exists(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubernetesUnavailable, match="set KUBECONFIG"):
        load_api_client()


@pytest.mark.parametrize(("environ", "message"), [
    ({"TICKWARDEN_TRIGGER": "cron"}, "TICKWARDEN_TRIGGER must be builtin or kubernetes"),
    ({"TICKWARDEN_TRIGGER": "kubernetes", "KUBECONFIG": "/nonexistent/kubeconfig"}, "set KUBECONFIG"),
])
def test_serve_stops_with_one_sentence_when_the_trigger_cannot_start(schema, tmp_path, environ, message):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "TICKWARDEN_SCHEMA")}
    env.update(environ, TICKWARDEN_DATABASE_URL=f"{TEST_URL}?options=-c%20search_path%3D{schema}",
               TICKWARDEN_DATA_DIR=str(tmp_path))
    done = subprocess.run([str(BIN), "serve", "--no-api"], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("tickwarden: ")
