"""The dashboard in a real headless Chromium: log in, read the overview, act on an alert."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.apiutil import live_server, make_token, seed_tenant


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    platform = make_token(db, clock.now(), name="oncall")
    return acme, globex, platform


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


def log_in(page, base, token):
    page.goto(base + "/dashboard")
    assert page.url.startswith(base + "/login")
    page.fill("#token", token)
    page.click("button[type=submit]")


def test_the_overview_shows_every_tenant_with_open_alerts_and_owners(page, server, fleet, shot):
    acme, globex, platform = fleet
    log_in(page, server, platform)
    page.wait_for_selector("#open-alerts")
    rows = page.locator("#open-alerts tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).inner_text()
    assert "critical" in first and "engineering" in first and "2" in first
    assert page.locator("#tenants tbody tr").count() == 2
    assert page.locator('#tenants tr[data-tenant="globex"]').inner_text().count("critical") == 1
    assert page.evaluate("typeof window.htmx") == "object", "htmx must load for the live overview"
    assert page.evaluate("document.cookie") == "", "the token cookie must be HttpOnly"
    shot(page, "overview")


def test_reassigning_an_alert_from_its_page_shows_in_the_overview(page, server, fleet, shot):
    acme, _, platform = fleet
    log_in(page, server, platform)
    page.click(f'#open-alerts tr[data-alert="{acme.alert_id}"] td:nth-child(2) a')
    page.wait_for_selector("#timeline")
    assert page.locator("#owner").inner_text() == "engineering"
    assert "acme-secret-log" in page.locator("#failing-log").inner_text()
    page.select_option("#new-owner", "customer")
    page.fill("#reassign-form textarea", "The schema change is ours; we fix it.")
    page.click("#reassign-form button")
    page.wait_for_selector('#timeline li[data-kind="reassigned"]')
    assert page.locator("#owner").inner_text() == "customer"
    assert "The schema change is ours" in page.locator('#timeline li[data-kind="reassigned"]').inner_text()
    shot(page, "alert-after-reassign")
    page.goto(server + "/dashboard")
    owner = page.locator(f'#open-alerts tr[data-alert="{acme.alert_id}"] td.owner').inner_text()
    assert owner == "customer"
    shot(page, "overview-after-reassign")


def test_a_note_added_on_the_alert_page_joins_the_timeline(page, server, fleet, shot):
    acme, _, _ = fleet
    page.goto(f"{server}/dashboard/alerts/{acme.alert_id}?token={acme.token}")
    page.wait_for_selector("#note-form")
    assert "token=" not in page.url
    page.fill("#note-form textarea", "Rerunning after the warehouse restart.")
    page.click("#note-form button")
    page.wait_for_selector('#timeline li[data-kind="noted"]')
    assert "acme:alice" in page.locator('#timeline li[data-kind="noted"]').inner_text()
    shot(page, "alert-note")


def test_a_member_sees_its_workflows_with_cadence_profile_and_tick_strip(page, server, fleet, shot):
    acme, _, _ = fleet
    log_in(page, server, acme.token)
    page.wait_for_selector("#workflows")
    assert page.url.endswith("/dashboard/tenants/acme")
    row = page.locator('#workflows tr[data-workflow="nightly"]')
    text = row.inner_text()
    assert "0 2 * * *" in text and "1d 0h" in text and "daily" in text and "critical" in text
    strip = row.locator(".strip a")
    assert strip.count() == 3
    assert [strip.nth(i).get_attribute("class") for i in range(3)] == ["succeeded", "failed", "failed"]
    assert page.locator(f'#recent-alerts tr[data-alert="{acme.alert_id}"]').inner_text().count("open for") == 1
    shot(page, "tenant")
    strip.nth(2).click()
    page.wait_for_selector("#attempts")
    assert "connection reset by peer" in page.locator("#attempts").inner_text()
    shot(page, "run")
    response = page.goto(server + "/dashboard/tenants/globex")
    assert response.status == 404 and "No tenant 'globex'." in page.locator("main").inner_text()


def test_a_loop_that_stopped_everywhere_is_flagged_on_the_overview(page, server, fleet, db, clock, shot):
    _, _, platform = fleet
    now = clock.now()
    with db.connection() as conn, conn.transaction():
        for replica, age in (("a", 600), ("b", 400)):
            conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at, passes)"
                         " VALUES (%s, 'poller', %s, %s, 5)",
                         (replica, now - timedelta(seconds=age), now - timedelta(seconds=age - 30)))
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at, passes)"
                     " VALUES ('a', 'notifier', %s, %s, 9)", (now - timedelta(seconds=5), now + timedelta(seconds=5)))
    log_in(page, server, platform)
    page.wait_for_selector("#stalled-loops")
    assert "poller" in page.locator("#stalled-loops").inner_text()
    assert "notifier" not in page.locator("#stalled-loops").inner_text()
    assert "running" in page.locator('#loops tr[data-loop="notifier"]').inner_text()
    shot(page, "stalled-loop")


def test_the_overview_refreshes_its_live_part_without_a_reload(page, server, fleet, db, shot):
    acme, _, platform = fleet
    log_in(page, server, platform)
    page.wait_for_selector("#open-alerts")
    page.evaluate("window.__marker = 'same page'")
    with db.connection() as conn, conn.transaction():
        conn.execute("UPDATE alerts SET owner = 'customer' WHERE id = %s", (acme.alert_id,))
    page.evaluate("htmx.trigger('#live', 'refresh')")
    cell = page.locator(f'#open-alerts tr[data-alert="{acme.alert_id}"] td.owner')
    page.wait_for_function(
        f"""document.querySelector('#open-alerts tr[data-alert="{acme.alert_id}"] td.owner').innerText == 'customer'""")
    assert cell.inner_text() == "customer" and page.evaluate("window.__marker") == "same page"
    shot(page, "live-refresh")
