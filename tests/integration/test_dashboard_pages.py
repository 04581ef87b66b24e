"""The dashboard's workflow page, runs list and overview history over HTTP: content, filters, buttons, isolation."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape

import httpx
import pytest

from tests.apiutil import live_server, make_token, seed_tenant
from tests.helpers import create_run, publish
from tickwarden import catalog, checkins
from tickwarden.dashboard.pages import default_window, describe_cron
from tickwarden.store.queries import queries

COOKIE = "tickwarden_token"


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    globex.token = make_token(db, clock.now(), tenant="globex", name="gina")
    platform = make_token(db, clock.now(), name="oncall")
    return acme, globex, platform


@pytest.fixture
def base(db, clock):
    with live_server(db, clock) as url:
        yield url


def client(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, cookies={COOKIE: token}, timeout=10)


def chart_specs(html: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r'data-chart><script type="application/json">(.*?)</script>', html, re.DOTALL)]


def schedule_status(db, workflow_id: int) -> str:
    with db.connection() as conn:
        return conn.execute("SELECT status FROM schedules WHERE workflow_id = %s", (workflow_id,)).fetchone()[0]


def run_count(db, tenant_id: int) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM runs WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]


# -- the workflow page ------------------------------------------------------------------


def test_the_workflow_page_shows_schedule_in_words_next_tick_last_success_profile_and_a_timeline(base, fleet, clock):
    acme, _, _ = fleet
    with client(base, acme.token) as c:
        page = c.get("/dashboard/tenants/acme/workflows/nightly")
    assert page.status_code == 200
    html = page.text
    schedule = re.search(r'<dd id="schedule">(.*?)</dd>', html, re.DOTALL).group(1)
    assert "At 02:00" in schedule and "0 2 * * *" in schedule and "active" in schedule
    next_fire = re.search(r'<dd id="next-fire">(.*?)</dd>', html, re.DOTALL).group(1)
    assert '<time datetime="2026-11-30T02:00:00Z"' in next_fire and 'title="2026-11-30 02:00:00 UTC"' in next_fire
    last_success = re.search(r'<dd id="last-success">(.*?)</dd>', html, re.DOTALL).group(1)
    assert f'href="/dashboard/runs/{acme.run_ids[0]}"' in last_success
    profile = re.search(r'<dd id="profile">(.*?)</dd>', html, re.DOTALL).group(1)
    assert "daily" in profile and "3 retries" in profile and "first critical" in profile
    assert f'href="/dashboard/alerts/{acme.alert_id}"' in re.search(r'<dd id="alert">(.*?)</dd>', html, re.DOTALL).group(1)
    # The timeline: each run a cell linking to it, placed by its tick on the window's axis (90 days for a daily job).
    timeline = re.search(r'<div class="timeline-axis" id="timeline">(.*?)</div>', html, re.DOTALL).group(1)
    cells = re.findall(r'<a class="(\w+)" style="left:([\d.]+)%" href="/dashboard/runs/(\d+)"', timeline)
    assert {int(run) for _, _, run in cells} == set(acme.run_ids)
    by_run = {int(run): (css, float(left)) for css, left, run in cells}
    oldest, newest = by_run[acme.run_ids[0]], by_run[acme.run_ids[-1]]
    assert oldest[0] == "succeeded" and newest[0] == "failed"
    assert 95 < oldest[1] < newest[1] < 100  # three days out of ninety: at the right end, in order
    assert html.count('class="timeline-ticks"') == 1 and html.count('data-style="short"') == 7
    # The duration chart: one point per finished run, oldest first, each linking to its run.
    [spec] = chart_specs(html)
    assert spec["links"] == [f"/dashboard/runs/{r}" for r in acme.run_ids]
    assert spec["x"] == sorted(spec["x"]) and len(spec["series"][0]["values"]) == 3
    assert 'hx-get="/dashboard/partials/tenants/acme/workflows/nightly?window=90d"' in html
    assert 'id="pause-form"' in html and 'id="run-now-form"' in html and 'id="resume-form"' not in html


def test_the_workflow_page_window_filter_bounds_the_runs_and_rejects_unknown_windows(base, fleet):
    acme, _, platform = fleet
    with client(base, platform) as c:
        day = c.get("/dashboard/tenants/acme/workflows/nightly?window=24h").text
        cells = re.findall(r'href="/dashboard/runs/(\d+)" data-run', day)
        assert [int(r) for r in cells] == [acme.run_ids[-1]]  # the tick exactly a day ago, not the older two
        short = c.get("/dashboard/tenants/acme/workflows/nightly?window=6h").text
        assert 'id="timeline-empty"' in short and "press Run now" in short and 'id="duration-empty"' in short
        bad = c.get("/dashboard/tenants/acme/workflows/nightly?window=1y")
        assert bad.status_code == 400
        assert "Choose a time window among 1h, 6h, 24h, 7d, 30d, 90d; '1y' is not one." in unescape(bad.text)
        assert "Traceback" not in bad.text
        assert c.get("/dashboard/partials/tenants/acme/workflows/nightly?window=1y").status_code == 400
        live = c.get("/dashboard/partials/tenants/acme/workflows/nightly?window=7d")
        assert live.status_code == 200 and "<html" not in live.text and 'id="timeline"' in live.text
        assert c.get("/dashboard/tenants/acme/workflows/nope").status_code == 404


def test_pause_resume_and_run_now_buttons_go_through_the_catalog_with_the_signed_in_actor(base, fleet, db):
    acme, _, _ = fleet
    with client(base, acme.token) as c:
        paused = c.post("/dashboard/tenants/acme/workflows/nightly/pause")
        assert paused.status_code == 303
        assert paused.headers["location"] == "/dashboard/tenants/acme/workflows/nightly"
        assert schedule_status(db, acme.workflow_id) == "paused"
        page = c.get("/dashboard/tenants/acme/workflows/nightly").text
        assert 'id="resume-form"' in page and 'id="pause-form"' not in page
        assert "none while paused" in page and 'class="badge warning">paused' in page
        assert c.post("/dashboard/tenants/acme/workflows/nightly/resume").status_code == 303
        assert schedule_status(db, acme.workflow_id) == "active"
        before = run_count(db, acme.tenant_id)
        assert c.post("/dashboard/tenants/acme/workflows/nightly/run-now").status_code == 303
        assert run_count(db, acme.tenant_id) == before + 1
        with db.connection() as conn:
            run_id, manual, by, status = conn.execute(
                "SELECT id, manual, requested_by, status FROM runs WHERE tenant_id = %s ORDER BY id DESC LIMIT 1",
                (acme.tenant_id,)).fetchone()
        assert manual and by == "acme:alice" and status == "queued"
        page = c.get("/dashboard/tenants/acme/workflows/nightly").text
        in_progress = re.search(r'<table id="in-progress">(.*?)</table>', page, re.DOTALL).group(1)
        assert f'data-run="{run_id}"' in in_progress and f'action="/dashboard/runs/{run_id}/cancel"' in in_progress
        # The cancel button is the run page's own form: the same catalog.cancel.
        assert c.post(f"/dashboard/runs/{run_id}/cancel").status_code == 303
        after = c.get("/dashboard/tenants/acme/workflows/nightly").text
        assert f'data-run="{run_id}"' not in re.search(r'<table id="in-progress">(.*?)</table>', after, re.DOTALL).group(1)


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    {"Sec-Fetch-Site": "same-site", "Origin": "https://other.tickwarden.example"},  # a sibling subdomain
    {"Origin": "https://evil.example"},  # a browser without Fetch Metadata
    {"Origin": "null"},  # a sandboxed frame
], ids=["cross-site", "same-site", "origin-only", "opaque-origin"])
def test_a_form_posted_from_another_origin_with_the_session_cookie_changes_nothing(base, fleet, db, headers):
    acme, _, _ = fleet
    with client(base, acme.token) as c:
        forged = c.post("/dashboard/tenants/acme/workflows/nightly/pause", headers=headers)
        assert forged.status_code == 403
        assert forged.json()["detail"].startswith("This request was sent from another site")
        assert schedule_status(db, acme.workflow_id) == "active"
        # The same button from the dashboard's own page, as a browser sends it, works.
        host = base.split("://", 1)[1]
        own = c.post("/dashboard/tenants/acme/workflows/nightly/pause",
                     headers={"Sec-Fetch-Site": "same-origin", "Origin": f"http://{host}"})
        assert own.status_code == 303 and schedule_status(db, acme.workflow_id) == "paused"
        assert c.post("/dashboard/tenants/acme/workflows/nightly/resume", headers={"Origin": f"http://{host}"}
                      ).status_code == 303
    # Login CSRF: another site cannot sign a visitor in with the attacker's token.
    login = httpx.post(base + "/login", data={"token": acme.token, "next": "/dashboard"},
                       headers={"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, follow_redirects=False)
    assert login.status_code == 403 and "set-cookie" not in login.headers
    # A token in the Authorization header is not ambient authority: the API answers it from anywhere.
    api = httpx.post(base + "/api/tenants/acme/workflows/nightly/pause",
                     headers={"Authorization": f"Bearer {acme.token}", "Origin": "https://ci.example"})
    assert api.status_code == 200 and schedule_status(db, acme.workflow_id) == "paused"


def test_an_archived_workflow_shows_no_buttons_and_refuses_them_with_the_catalogs_sentence(base, fleet, db, clock):
    acme, _, _ = fleet
    catalog.archive(db, "acme", "nightly", clock.now(), actor="test")
    with client(base, acme.token) as c:
        page = c.get("/dashboard/tenants/acme/workflows/nightly").text
        assert 'id="actions"' not in page and ">archived<" in page
        refused = c.post("/dashboard/tenants/acme/workflows/nightly/run-now")
        assert refused.status_code == 409
        assert "Workflow acme/nightly is archived; apply its file again to restore it." in refused.text
        assert 'role="alert"' in refused.text and "Traceback" not in refused.text
        assert c.post("/dashboard/tenants/acme/workflows/nightly/explode").status_code in (404, 405, 422)


def test_another_tenant_neither_sees_nor_operates_a_workflow(base, fleet, db):
    acme, globex, _ = fleet
    before = (schedule_status(db, acme.workflow_id), run_count(db, acme.tenant_id))
    with client(base, globex.token) as c:
        for path in ("/dashboard/tenants/acme/workflows/nightly", "/dashboard/partials/tenants/acme/workflows/nightly"):
            response = c.get(path)
            assert response.status_code == 404 and "Acme Inc" not in response.text and "acme-secret" not in response.text
        for action in ("pause", "resume", "run-now"):
            response = c.post(f"/dashboard/tenants/acme/workflows/nightly/{action}")
            assert response.status_code == 404 and "No workflow acme/nightly." in response.text
        own = c.get("/dashboard/tenants/globex/workflows/nightly")
        assert own.status_code == 200 and 'id="run-now-form"' in own.text
        assert not any(f"/dashboard/runs/{r}" in own.text for r in acme.run_ids)
    assert (schedule_status(db, acme.workflow_id), run_count(db, acme.tenant_id)) == before
    anonymous = httpx.post(base + "/dashboard/tenants/acme/workflows/nightly/pause", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
    assert schedule_status(db, acme.workflow_id) == "active"


# -- kinds and check-in URLs ------------------------------------------------------------


def add_external(db, clock, tenant_id: int, name: str = "export"):
    with db.transaction() as store:
        wf = publish(store, tenant_id, name, clock.now(), cron="30 3 * * *", kind="external", timeout_seconds=600)
    return wf


def key_hash(db, workflow_id: int) -> str | None:
    with db.connection() as conn:
        row = conn.execute("SELECT key_hash FROM checkin_keys WHERE workflow_id = %s", (workflow_id,)).fetchone()
    return row[0] if row else None


def test_the_list_and_the_workflow_page_show_the_kind_and_never_a_check_in_key(base, fleet, db, clock):
    acme, _, _ = fleet
    wf = add_external(db, clock, acme.tenant_id)
    with client(base, acme.token) as c:
        tenant = c.get("/dashboard/tenants/acme").text
        rows = dict(re.findall(r'<tr data-workflow="([\w.-]+)">(.*?)</tr>', tenant, re.DOTALL))
        assert 'data-kind="managed">managed<' in rows["nightly"] and "check-in" not in rows["nightly"]
        assert 'data-kind="external">external<' in rows["export"] and "no check-in URL yet" in rows["export"]
        page = c.get("/dashboard/tenants/acme/workflows/export").text
        kind = re.search(r'<dd id="kind">(.*?)</dd>', page, re.DOTALL).group(1)
        assert ">external<" in kind and "check-in" in kind
        hint = re.search(r'<dd id="checkin-url">(.*?)</dd>', page, re.DOTALL).group(1)
        assert "none issued yet" in hint and 'id="checkin-url-form"' in hint and "Issue the check-in URL" in hint
        assert "tickwarden checkin-url acme/export --base-url URL" in hint
        managed = c.get("/dashboard/tenants/acme/workflows/nightly").text
        assert ">managed<" in re.search(r'<dd id="kind">(.*?)</dd>', managed, re.DOTALL).group(1)
        assert 'id="checkin-url"' not in managed

    issued = checkins.issue_key(db, "acme", "export", clock.now())
    with client(base, acme.token) as c:
        for path in ("/dashboard/tenants/acme", "/dashboard/partials/tenants/acme",
                     "/dashboard/tenants/acme/workflows/export", "/dashboard/partials/tenants/acme/workflows/export"):
            html = c.get(path).text
            assert issued.key not in html and key_hash(db, wf.id) not in html, path
        rows = dict(re.findall(r'<tr data-workflow="([\w.-]+)">(.*?)</tr>', c.get("/dashboard/tenants/acme").text,
                               re.DOTALL))
        assert "check-ins by URL, issued" in rows["export"]
        hint = re.search(r'<dd id="checkin-url">(.*?)</dd>',
                         c.get("/dashboard/tenants/acme/workflows/export").text, re.DOTALL).group(1)
        assert "issued" in hint and "shown once" in hint and "Rotate the check-in URL" in hint and "--rotate" in hint


def test_an_operator_issues_and_rotates_the_check_in_url_and_sees_it_only_in_that_answer(base, fleet, db, clock):
    acme, globex, _ = fleet
    wf = add_external(db, clock, acme.tenant_id)
    with client(base, acme.token) as c:
        first = c.post("/dashboard/tenants/acme/workflows/export/checkin-url")
        assert first.status_code == 200 and first.headers["cache-control"] == "no-store"
        url = re.search(r'<pre id="checkin-url">(.*?)</pre>', first.text).group(1)
        assert url.startswith(base + "/ping/")
        key = url.rsplit("/", 1)[1]
        assert checkins.hash_key(key) == key_hash(db, wf.id)
        assert key not in c.get("/dashboard/tenants/acme/workflows/export").text
        # a second issue without rotating is refused with the sentence the CLI prints
        again = c.post("/dashboard/tenants/acme/workflows/export/checkin-url")
        assert again.status_code == 409 and "already has a check-in URL" in again.text and key not in again.text
        rotated = c.post("/dashboard/tenants/acme/workflows/export/checkin-url", data={"rotate": "true"})
        assert rotated.status_code == 200 and "no longer works" in rotated.text
        new_key = re.search(r'<pre id="checkin-url">(.*?)</pre>', rotated.text).group(1).rsplit("/", 1)[1]
        assert new_key != key and checkins.hash_key(new_key) == key_hash(db, wf.id)
        # a managed workflow has no check-in URL to issue
        managed = c.post("/dashboard/tenants/acme/workflows/nightly/checkin-url")
        assert managed.status_code == 409 and "only a workflow of kind external" in managed.text
    with client(base, globex.token) as c:  # another tenant neither sees nor rotates it
        response = c.post("/dashboard/tenants/acme/workflows/export/checkin-url", data={"rotate": "true"})
        assert response.status_code == 404 and "No workflow acme/export." in response.text
    assert checkins.hash_key(new_key) == key_hash(db, wf.id)
    anonymous = httpx.post(base + "/dashboard/tenants/acme/workflows/export/checkin-url", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")


# -- the runs list --------------------------------------------------------------------


def listed(html: str) -> list[tuple[int, str, str]]:
    return [(int(run), status, tenant) for run, status, tenant in
            re.findall(r'<tr data-run="(\d+)" data-status="(\w+)" data-tenant="([a-z0-9_.-]+)">', html)]


def test_the_runs_list_crosses_workflows_and_filters_by_status_tenant_and_window(base, fleet):
    acme, globex, platform = fleet
    with client(base, platform) as c:
        week = listed(c.get("/dashboard/runs?window=7d").text)
        assert {r for r, _, _ in week} == set(acme.run_ids) | set(globex.run_ids)
        assert {week[0][0], week[1][0]} == {acme.run_ids[-1], globex.run_ids[-1]}  # newest ticks first
        failed = listed(c.get("/dashboard/runs?window=7d&status=failed").text)
        assert {s for _, s, _ in failed} == {"failed"} and len(failed) == 4
        only_acme = listed(c.get("/dashboard/runs?window=7d&tenant=acme").text)
        assert {t for _, _, t in only_acme} == {"acme"} and len(only_acme) == 3
        day = listed(c.get("/dashboard/runs").text)  # the default window is 24 h: the newest tick of each
        assert {r for r, _, _ in day} == {acme.run_ids[-1], globex.run_ids[-1]}
        empty = c.get("/dashboard/runs?window=1h&status=succeeded").text
        assert 'id="runs-empty"' in empty and "clear a filter" in empty
        live = c.get("/dashboard/partials/runs?window=7d&tenant=globex")
        assert live.status_code == 200 and {t for _, _, t in listed(live.text)} == {"globex"}
        page = c.get("/dashboard/runs?window=7d&status=failed&tenant=acme").text
        assert 'hx-get="/dashboard/partials/runs?status=failed&amp;tenant=acme&amp;window=7d"' in page
        for query, sentence in (("status=exploded", "Choose a status among"),
                                ("window=forever", "Choose a time window among"),
                                ("tenant=Robert%27);DROP", "is not a tenant name.")):
            bad = c.get(f"/dashboard/runs?{query}")
            assert bad.status_code == 400 and sentence in unescape(bad.text) and "Traceback" not in bad.text
        assert c.get("/dashboard/runs?tenant=nobody").status_code == 404


def test_a_member_lists_only_its_own_tenants_runs(base, fleet):
    acme, globex, _ = fleet
    with client(base, globex.token) as c:
        mine = listed(c.get("/dashboard/runs?window=30d").text)
        assert {t for _, _, t in mine} == {"globex"} and len(mine) == 3
        page = c.get("/dashboard/runs?window=30d").text
        assert 'id="filter-tenant"' not in page and "acme" not in page
        for path in ("/dashboard/runs?tenant=acme", "/dashboard/partials/runs?tenant=acme"):
            hidden = c.get(path)
            assert hidden.status_code == 404 and not listed(hidden.text) and "Acme Inc" not in hidden.text


# -- the overview ---------------------------------------------------------------------


def test_the_overview_charts_failures_and_alerts_over_a_day_and_a_week(base, fleet, db, clock):
    acme, globex, platform = fleet
    now = clock.now()
    with db.connection() as conn, conn.transaction():
        conn.execute("UPDATE alerts SET status = 'resolved', resolved_at = %s, downtime_seconds = 7200 WHERE id = %s",
                     (now - timedelta(hours=3), globex.alert_id))
    with client(base, platform) as c:
        html = c.get("/dashboard").text
    day, week = chart_specs(html)
    assert len(day["x"]) == 24 and len(week["x"]) == 28 and day["x"] == sorted(day["x"])
    failures_day, alerts_day = (sum(s["values"]) for s in day["series"])
    failures_week, alerts_week = (sum(s["values"]) for s in week["series"])
    # Each tenant failed a day ago and two days ago; each alert opened two days ago.
    assert (failures_day, alerts_day, failures_week, alerts_week) == (2, 0, 4, 2)
    assert "2 failed or missed ticks, 0 alerts opened" in html and "4 failed or missed ticks, 2 alerts opened" in html
    resolved = re.search(r'<table id="resolved">(.*?)</table>', html, re.DOTALL).group(1)
    assert f'data-alert="{globex.alert_id}"' in resolved and f'data-alert="{acme.alert_id}"' not in resolved
    assert "2h 0m" in resolved and '<time datetime="' in resolved
    assert "All tenants" in html and "Workspace" not in html and 'id="tenants"' in html


def test_the_overview_condenses_healthy_loops_to_one_line_and_opens_them_when_one_stops(base, fleet, db, clock):
    _, _, platform = fleet
    now = clock.now()
    with db.connection() as conn, conn.transaction():
        for loop in ("poller", "notifier"):
            conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at, passes)"
                         " VALUES ('a', %s, %s, %s, 5)", (loop, now - timedelta(seconds=5), now + timedelta(seconds=5)))
    with client(base, platform) as c:
        healthy = c.get("/dashboard/partials/overview").text
        assert '<details id="loops-details">' in healthy
        assert "All 2 loops running; newest pass <time" in healthy
        with db.connection() as conn, conn.transaction():
            conn.execute("UPDATE loop_heartbeats SET last_pass_at = %s, next_pass_at = %s WHERE loop = 'poller'",
                         (now - timedelta(seconds=900), now - timedelta(seconds=870)))
        stalled = c.get("/dashboard/partials/overview").text
        assert '<details id="loops-details" open>' in stalled and "1 of 2 loops need attention." in stalled
        assert 'id="stalled-loops"' in stalled


def test_an_empty_installation_says_what_to_do_next(base, db, clock):
    platform = make_token(db, clock.now(), name="oncall")
    with client(base, platform) as c:
        html = c.get("/dashboard").text
        assert "No tenants yet" in html and "tickwarden apply FILE.yaml" in html
        assert "No open alerts" in html and "No incident was resolved in the last 7 days." in html
        assert "No loop has recorded a pass yet: start <code>tickwarden serve</code>." in html
        runs = c.get("/dashboard/runs").text
        assert 'id="runs-empty"' in runs and "tickwarden run-now TENANT/WORKFLOW" in runs


def test_every_page_polls_its_live_part_and_the_tenant_and_run_partials_are_isolated(base, fleet, db, clock):
    acme, globex, _ = fleet
    with db.transaction() as store:
        wf = store.catalog.get_workflow(acme.workflow_id)
    running = create_run(db, wf, clock.now() + timedelta(hours=1), clock.now())
    with client(base, acme.token) as c:
        for path, partial in (("/dashboard/tenants/acme", "/dashboard/partials/tenants/acme"),
                              ("/dashboard/tenants/acme/workflows/nightly",
                               "/dashboard/partials/tenants/acme/workflows/nightly"),
                              ("/dashboard/runs", "/dashboard/partials/runs"),
                              (f"/dashboard/runs/{running.id}", f"/dashboard/partials/runs/{running.id}")):
            page = c.get(path).text
            assert f'hx-get="{partial}' in page and 'hx-trigger="every' in page, path
            live = c.get(partial)
            assert live.status_code == 200 and "<html" not in live.text and "data-now=" in live.text, partial
        alert = c.get(f"/dashboard/alerts/{acme.alert_id}").text  # the timeline polls itself, not the forms
        assert f'id="timeline" hx-get="/dashboard/alerts/{acme.alert_id}" hx-select="#timeline"' in alert
        run_page = c.get(f"/dashboard/runs/{acme.run_ids[0]}").text  # local times, UTC in the title
        assert '<time datetime="2026-11-27T01:55:00Z" data-style="local" title="2026-11-27 01:55:00 UTC">' in run_page
        tenant = c.get("/dashboard/partials/tenants/acme").text
        assert 'href="/dashboard/tenants/acme/workflows/nightly"' in tenant
    with client(base, globex.token) as c:
        assert c.get("/dashboard/partials/tenants/acme").status_code == 404
        assert c.get(f"/dashboard/partials/runs/{running.id}").status_code == 404
    assert httpx.get(f"{base}/dashboard/partials/runs").status_code == 401


# -- bounded reads and helpers ----------------------------------------------------------


@pytest.mark.parametrize("name", ["dashboard_workflow_runs", "dashboard_last_success", "dashboard_runs", "dashboard_failure_buckets",
                                  "dashboard_alert_buckets", "dashboard_recently_resolved"])
def test_every_dashboard_query_can_read_through_an_index_without_scanning_the_ledger(db, clock, name):
    now = clock.now()
    params = {"workflow_id": 1, "since": now - timedelta(days=1), "until": now, "limit": 10, "tenant": None,
              "status": None, "bucket": timedelta(hours=1), "opened_since": now - timedelta(days=30)}
    with db.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + queries()[name], params).fetchall())
    assert "Seq Scan on runs" not in plan and "Seq Scan on alerts" not in plan, plan


def test_schedules_are_put_in_words_and_windows_hold_about_a_hundred_ticks():
    assert describe_cron("0 9 * * 1-5") == "At 09:00, Monday through Friday"
    assert describe_cron("*/5 * * * *") == "Every 5 minutes"
    assert describe_cron(None) == "no schedule"
    assert (default_window(60), default_window(3600), default_window(86400), default_window(None)) == \
        ("6h", "7d", "90d", "7d")
