"""The workflow page, the overview's charts and the runs list in a real headless Chromium."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.apiutil import live_server, make_token, seed_tenant
from tickwarden import alerts


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    platform = make_token(db, clock.now(), name="oncall")
    now = clock.now()
    with db.connection() as conn, conn.transaction():
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at, passes)"
                     " VALUES ('a', 'poller', %s, %s, 5)", (now - timedelta(seconds=5), now + timedelta(seconds=5)))
    return acme, globex, platform


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


def canvas_sizes(page, selector: str) -> list[tuple[int, int]]:
    page.wait_for_selector(f"{selector} canvas")
    return page.eval_on_selector_all(f"{selector} canvas", "els => els.map(e => [e.width, e.height])")


def test_the_workflow_page_draws_its_timeline_and_duration_chart_and_run_now_queues_a_run(page, server, fleet, shot):
    acme, _, _ = fleet
    page.goto(f"{server}/dashboard/tenants/acme/workflows/nightly?token={acme.token}")
    page.wait_for_selector("#timeline")
    assert "At 02:00" in page.locator("#schedule").inner_text()
    cells = page.locator("#timeline a")
    assert cells.count() == 3
    [(width, height)] = canvas_sizes(page, "#duration-chart")
    assert width > 0 and height > 0
    # Times become relative to the server's clock, with the local time and UTC in the title.
    next_fire = page.locator("#next-fire time")
    assert next_fire.inner_text() == "in 5 minutes"
    assert "2026-11-30 02:00:00 UTC" in next_fire.get_attribute("title")
    shot(page, "workflow")
    before = page.locator("#in-progress tbody tr[data-run]").count()
    page.click("#run-now-form button")
    page.wait_for_selector("#in-progress tbody tr[data-run]")
    assert page.locator("#in-progress tbody tr[data-run]").count() == before + 1
    row = page.locator("#in-progress tbody tr[data-run]").first.inner_text()
    assert "queued" in row and "manual by acme:alice" in row
    page.click("#pause-form button")
    page.wait_for_selector("#resume-form")
    assert "paused" in page.locator("#schedule").inner_text()
    assert page.locator("#next-fire").inner_text() == "none while paused"
    shot(page, "workflow-after-run-now-and-pause")
    cells.first.click()
    page.wait_for_selector("#attempts")
    assert "/dashboard/runs/" in page.url
    shot(page, "run-from-timeline")


def test_the_overview_draws_failures_and_alerts_and_condenses_the_loops(page, server, fleet, db, clock, shot):
    _, globex, platform = fleet
    with db.connection() as conn, conn.transaction():
        conn.execute("UPDATE alerts SET status = 'resolved', resolved_at = %s, downtime_seconds = 3600 WHERE id = %s",
                     (clock.now() - timedelta(hours=2), globex.alert_id))
    page.goto(f"{server}/dashboard?token={platform}")
    page.wait_for_selector("#history")
    for chart in ("#history-24h", "#history-7d"):
        [(width, height)] = canvas_sizes(page, chart)
        assert width > 0 and height > 0
    assert page.locator(f'#resolved tr[data-alert="{globex.alert_id}"]').inner_text().count("2 hours ago") == 1
    summary = page.locator("#loops-summary").inner_text()
    assert summary.startswith("The one loop is running; newest pass 5 seconds ago")
    assert not page.locator("#loops").is_visible()
    assert page.locator("#tenants tbody tr").count() == 2
    shot(page, "overview-history")
    # A live refresh re-draws the charts in place.
    page.evaluate("window.__marker = 'same page'")
    # Wait for the refresh's swap to settle: the old canvas is still there until it does.
    page.evaluate("""() => new Promise(settled => {
        document.body.addEventListener('htmx:afterSettle', () => settled(true), {once: true});
        htmx.trigger('#live', 'refresh');
    })""")
    page.wait_for_function("(() => { const c = document.querySelector('#history-7d canvas');"
                           " return c !== null && c.width > 0; })()")
    assert page.evaluate("window.__marker") == "same page"
    assert canvas_sizes(page, "#history-7d")[0][0] > 0


def test_the_runs_list_filters_by_status_and_tenant_with_relative_times(page, server, fleet, shot):
    acme, globex, platform = fleet
    page.goto(f"{server}/dashboard/runs?token={platform}")
    page.wait_for_selector("#runs")
    assert page.locator("#runs tbody tr[data-run]").count() == 2  # the default window: the last 24 hours
    page.select_option("#filter-window", "7d")
    page.select_option("#filter-status", "failed")
    page.select_option("#filter-tenant", "globex")
    page.click("#runs-filter button")
    page.wait_for_url("**/dashboard/runs?status=failed&tenant=globex&window=7d")
    rows = page.locator("#runs tbody tr[data-run]")
    assert rows.count() == 2
    assert {rows.nth(i).get_attribute("data-tenant") for i in range(2)} == {"globex"}
    assert {rows.nth(i).get_attribute("data-status") for i in range(2)} == {"failed"}
    tick = rows.first.locator("time")
    assert tick.inner_text() == "yesterday" and "UTC" in tick.get_attribute("title")
    shot(page, "runs-filtered")
    rows.first.locator("td:nth-child(3) a").click()
    page.wait_for_selector("#timeline")
    assert page.url.endswith("/dashboard/tenants/globex/workflows/nightly")


def test_the_alert_timeline_refreshes_itself_without_touching_a_note_being_typed(page, server, fleet, db, clock, shot):
    acme, _, _ = fleet
    page.goto(f"{server}/dashboard/alerts/{acme.alert_id}?token={acme.token}")
    page.wait_for_selector("#note-form")
    page.fill("#note-form textarea", "half-typed note")
    alerts.add_note(db, acme.alert_id, "Warehouse restarted; watching the next tick.", "acme:bob", clock.now())
    page.evaluate("htmx.trigger('#timeline', 'refresh')")
    page.wait_for_selector('#timeline li[data-kind="noted"]')
    assert "Warehouse restarted" in page.locator('#timeline li[data-kind="noted"]').inner_text()
    assert page.input_value("#note-form textarea") == "half-typed note"
    page.evaluate("htmx.trigger('#timeline', 'refresh')")  # the swapped-in timeline keeps polling
    page.wait_for_timeout(500)
    assert page.locator('#timeline li[data-kind="noted"]').count() == 1
    shot(page, "alert-live-timeline")
