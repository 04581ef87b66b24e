"""The Kubernetes trigger's reconciler: CronJobs converge to the schedules table, whatever moved."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kmock
import pytest
from kubernetes_validate import validate

from tests.kubernetes.conftest import NAMESPACE, closed_port, make_reconciler
from tickwarden import catalog
from tickwarden.service import LoopState, Service
from tickwarden.triggers.kubernetes import (
    LABEL_SCHEDULE,
    LABEL_TENANT,
    LABEL_VERSION,
    LABEL_WORKFLOW,
    CronJobApi,
    KubernetesUnavailable,
    cronjob_manifest,
)
from tickwarden.triggers.kubernetes_reconciler import KubernetesReconciler

T0 = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)

FILE = """
tenants: [{name: %(tenant)s}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: %(workflow)s
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "%(cron)s", timezone: %(tz)s, starting_deadline_seconds: 120}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
  - name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""


def apply(db, tmp_path: Path, now: datetime = T0, *, cron: str = "*/5 * * * *", tz: str = "Europe/Paris",
          tenant: str = "acme", workflow: str = "every-five") -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE % {"cron": cron, "tz": tz, "tenant": tenant, "workflow": workflow})
    catalog.apply_file(db, path, now)


def schedule_id(db, tenant: str = "acme", workflow: str = "every-five") -> int:
    with db.transaction() as store:
        found = store.catalog.get_workflow_by_name(tenant, workflow)
        return store.catalog.get_schedule_for_workflow(found.id).id


def cronjob(cluster, db, workflow: str = "every-five", tenant: str = "acme") -> dict:
    return cluster.cronjobs()[f"tickwarden-s{schedule_id(db, tenant, workflow)}"]


def test_it_creates_one_labelled_cronjob_per_published_schedule(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    jobs = cluster.cronjobs()
    assert len(jobs) == 2
    job = cronjob(cluster, db)
    labels = job["metadata"]["labels"]
    assert labels[LABEL_SCHEDULE] == str(schedule_id(db))
    assert labels[LABEL_VERSION] == "1"
    assert (labels[LABEL_TENANT], labels[LABEL_WORKFLOW]) == ("acme", "every-five")
    spec = job["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["startingDeadlineSeconds"]) == ("*/5 * * * *", "Europe/Paris", 120)
    assert spec["concurrencyPolicy"] == "Allow" and spec["suspend"] is False
    container = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == settings.image
    assert container["args"] == ["tick", "--schedule", str(schedule_id(db)), "--job-name", "$(TICKWARDEN_JOB_NAME)"]
    # a second pass finds nothing to do
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.changed == 0


def test_it_patches_the_cronjob_when_the_schedule_is_edited(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    apply(db, tmp_path, T0 + timedelta(minutes=1), cron="15 * * * *", tz="America/New_York")
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.patched == [schedule_id(db)]
    spec = cronjob(cluster, db)["spec"]
    assert (spec["schedule"], spec["timeZone"]) == ("15 * * * *", "America/New_York")
    assert cronjob(cluster, db)["metadata"]["labels"][LABEL_VERSION] == "2"


def test_a_paused_schedule_suspends_its_cronjob_and_a_resume_unsuspends_it(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    catalog.pause(db, "acme", "every-five", T0 + timedelta(minutes=1))
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert cronjob(cluster, db)["spec"]["suspend"] is True
    catalog.resume(db, "acme", "every-five", T0 + timedelta(minutes=2))
    reconciler.run_once(T0 + timedelta(minutes=2))
    assert cronjob(cluster, db)["spec"]["suspend"] is False
    assert cronjob(cluster, db)["metadata"]["labels"][LABEL_VERSION] == "3"


def test_a_schedule_paused_before_its_first_pass_gets_no_cronjob(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    catalog.pause(db, "acme", "every-five", T0)
    make_reconciler(db, cluster, settings).run_once(T0)
    assert list(cluster.cronjobs()) == [f"tickwarden-s{schedule_id(db, 'acme', 'nightly')}"]


def test_it_recreates_a_cronjob_deleted_behind_its_back(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    cluster.batch().delete_namespaced_cron_job(f"tickwarden-s{schedule_id(db)}", NAMESPACE)
    assert len(cluster.cronjobs()) == 1
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.created == [schedule_id(db)]
    assert cronjob(cluster, db)["spec"]["schedule"] == "*/5 * * * *"


def test_it_reverts_a_cronjob_edited_behind_its_back(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    cluster.batch().patch_namespaced_cron_job(
        f"tickwarden-s{schedule_id(db)}", NAMESPACE, {"spec": {"schedule": "* * * * *", "suspend": True}},
        _content_type="application/merge-patch+json")
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.patched == [schedule_id(db)]
    spec = cronjob(cluster, db)["spec"]
    assert (spec["schedule"], spec["suspend"]) == ("*/5 * * * *", False)


def test_it_deletes_the_cronjob_of_an_archived_workflow_and_keeps_its_runs(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    run = catalog.run_now(db, "acme", "every-five", T0)
    catalog.archive(db, "acme", "every-five", T0 + timedelta(minutes=1))
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.deleted == [schedule_id(db)]
    assert f"tickwarden-s{schedule_id(db)}" not in cluster.cronjobs()
    assert [r.id for r in catalog.list_runs(db, "acme", "every-five")] == [run.id]
    # applying the file again restores the workflow and its CronJob
    apply(db, tmp_path, T0 + timedelta(minutes=2))
    reconciler.run_once(T0 + timedelta(minutes=2))
    assert reconciler.last.created == [schedule_id(db)]


def test_it_deletes_a_cronjob_whose_schedule_is_gone(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    gone = schedule_id(db)
    with db.transaction() as store:  # a workflow deleted outright (its schedule goes by cascade)
        store.conn.execute("DELETE FROM workflows WHERE id = (SELECT workflow_id FROM schedules WHERE id = %s)",
                           [gone])
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.deleted == [gone]
    assert f"tickwarden-s{gone}" not in cluster.cronjobs()


def test_it_never_touches_cronjobs_that_are_not_its_own(db, cluster, settings, tmp_path):
    foreign = {"apiVersion": "batch/v1", "kind": "CronJob",
               "metadata": {"name": "backup", "namespace": NAMESPACE, "labels": {LABEL_SCHEDULE: "999"}},
               "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "b", "image": "busybox"}]}}}}}}
    cluster.batch().create_namespaced_cron_job(NAMESPACE, foreign)
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    assert "backup" in cluster.cronjobs()
    assert cluster.cronjobs()["backup"]["spec"]["schedule"] == "0 3 * * *"


def test_two_reconciler_replicas_at_once_create_each_cronjob_once(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    replicas = [make_reconciler(db, cluster, settings) for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(reconciler: KubernetesReconciler) -> None:
        barrier.wait()
        try:
            reconciler.run_once(T0)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(cluster.cronjobs()) == 2
    created = sorted(replicas[0].last.created + replicas[1].last.created)
    raced = sorted(replicas[0].last.raced + replicas[1].last.raced)
    assert created == sorted([schedule_id(db), schedule_id(db, "acme", "nightly")])
    assert len(raced) + len(created) <= 4  # each schedule written once, the other replica told so
    assert all(not r.last.rejected for r in replicas)


def test_it_leaves_a_cronjob_written_from_a_newer_snapshot_alone(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)
    name = f"tickwarden-s{schedule_id(db)}"
    cluster.batch().patch_namespaced_cron_job(
        name, NAMESPACE, {"metadata": {"labels": {LABEL_VERSION: "7"}}, "spec": {"schedule": "1 * * * *"}},
        _content_type="application/merge-patch+json")
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert reconciler.last.patched == []
    assert cluster.cronjobs()[name]["spec"]["schedule"] == "1 * * * *"


def test_hostile_names_still_make_valid_cronjobs(db, cluster, settings, tmp_path):
    apply(db, tmp_path, tenant="evil_", workflow="x.-")
    make_reconciler(db, cluster, settings).run_once(T0)
    job = cronjob(cluster, db, "x.-", "evil_")
    labels = job["metadata"]["labels"]
    assert labels[LABEL_TENANT] != "evil_" and labels[LABEL_TENANT].startswith("evil-")
    assert job["metadata"]["annotations"]["tickwarden.io/workflow-name"] == "x.-"
    with db.transaction() as store:
        desired = store.kubernetes.desired_cronjobs()
    for d in desired:
        validate(cronjob_manifest(d, settings), "1.31", strict=True)


def test_an_unreachable_api_fails_the_pass_clearly_and_the_next_pass_loses_nothing(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    down = CronJobApi(cluster.api_client(), NAMESPACE)
    down.api_client.configuration.host = f"http://127.0.0.1:{closed_port()}"
    down.api_client.configuration.retries = 0
    unreachable = KubernetesReconciler(db, down, settings)
    with pytest.raises(KubernetesUnavailable, match="cannot be reached.*will be retried"):
        unreachable.run_once(T0)
    # under the service: the error is recorded once, sanitized, and the pass comes back soon
    service = Service(db, [unreachable], replica_id="r1", listen=False)
    due = service.run_pass(LoopState(unreachable))
    with db.transaction() as store:
        beat = store.heartbeat.list_heartbeats()[0]
    assert "KubernetesUnavailable" in beat.last_error and "cannot be reached" in beat.last_error
    assert due - beat.last_pass_at <= timedelta(seconds=10)
    # the API server is back: the next pass creates everything the failed ones would have
    make_reconciler(db, cluster, settings).run_once(T0 + timedelta(seconds=5))
    assert len(cluster.cronjobs()) == 2


def test_an_api_server_error_is_unavailable_not_a_crash(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    cluster.emulator[kmock.action.LIST, kmock.resource("batch", "v1", "cronjobs")] << 503
    with pytest.raises(KubernetesUnavailable, match="503"):
        make_reconciler(db, cluster, settings).run_once(T0)


CRONJOBS = kmock.resource("batch", "v1", "cronjobs")


def test_it_reads_every_page_of_a_long_cronjob_list(db, cluster, settings, tmp_path):
    for n in range(3):  # six schedules
        apply(db, tmp_path, tenant=f"t{n}")
    pages: list[str | None] = []

    def paginate(request):  # what a real API server does with ?limit= and ?continue=
        items = sorted((obj.raw for (resource, ns, _), obj in cluster.emulator.objects.items()
                        if resource == CRONJOBS and ns == NAMESPACE and not obj.deleted),
                       key=lambda raw: raw["metadata"]["name"])
        start, limit = int(request.params.get("continue") or 0), int(request.params["limit"])
        pages.append(request.params.get("continue"))
        more = start + limit < len(items)
        return {"apiVersion": "batch/v1", "kind": "CronJobList",
                "metadata": {"continue": str(start + limit) if more else None}, "items": items[start:start + limit]}

    reconciler = KubernetesReconciler(db, CronJobApi(cluster.api_client(), NAMESPACE, page_size=4), settings)
    reconciler.run_once(T0)
    assert len(reconciler.last.created) == 6
    cluster.emulator[kmock.action.LIST, CRONJOBS] << paginate
    reconciler.run_once(T0 + timedelta(minutes=1))
    assert pages == [None, "4"]
    assert reconciler.last.changed == 0 and reconciler.last.created == []  # every page was seen


def test_a_cronjob_the_api_server_rejects_is_skipped_and_reported(db, cluster, settings, tmp_path):
    apply(db, tmp_path)
    cluster.emulator[kmock.action.CREATE, CRONJOBS] << 422
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(T0)  # does not raise: one bad CronJob must not stop the others
    assert set(reconciler.last.rejected) == {schedule_id(db), schedule_id(db, "acme", "nightly")}
    assert all("rejected the CronJob (422)" in message for message in reconciler.last.rejected.values())
