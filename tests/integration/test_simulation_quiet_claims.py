"""A success of a workflow with no open alert does not wake the simulated poller; the ledger is the same."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.dbutil import TEST_URL
from tests.integration.test_simulation_skipping import Recorded, both, ledger
from tickwarden.poller import OutcomePoller
from tickwarden.simulate import parse_scenario



def scenario(faults: list[dict] | None = None) -> dict:
    return {
        "name": "quiet",
        "start": "2026-11-30T00:00:00Z",
        "end": "2026-11-30T02:00:00Z",
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": f"sync-{duration}", "cron": "*/5 * * * *", "duration": duration}
                      for duration in (20, 40, 70)],
        "faults": faults or [],
    }


@pytest.fixture
def claims(monkeypatch) -> list[tuple[datetime, int]]:
    """(now, claimed) of every poller pass that claimed something, in every simulation of the test."""
    seen: list[tuple[datetime, int]] = []
    poll = OutcomePoller.poll

    def counted(self, now):
        result = poll(self, now)
        if result.claimed:
            seen.append((now, result.claimed))
        return result

    monkeypatch.setattr(OutcomePoller, "poll", counted)
    return seen


def test_successes_without_an_open_alert_ride_with_a_later_pass_and_change_nothing(claims):
    stepping = Recorded(parse_scenario(scenario(), source="test"), url=TEST_URL, skip_idle=False)
    stepped = ledger(stepping.run())
    finishes = sorted(a["finished_at"] for a in stepped["attempts"] if a["status"] == "succeeded")
    assert len(finishes) > 60 and stepped["alerts"] == []
    # stepping every loop at its interval, each finish wakes a pass that claims that success alone
    assert claims == [(finished, 1) for finished in finishes]
    claims.clear()
    skipped = ledger(Recorded(parse_scenario(scenario(), source="test"), url=TEST_URL).run())
    for part in stepped:
        assert skipped[part] == stepped[part], part
    # skipping, a success waits for a later pass, which claims several at once
    assert len(claims) <= len(finishes) // 2, claims
    assert all(now not in finishes for now, _ in claims)
    assert sum(n for _, n in claims) <= len(finishes)


def test_a_success_that_resolves_an_alert_still_wakes_the_poller_at_its_finish(claims):
    fault = {"workflow": "acme/sync-40", "start": "2026-11-30T00:30:00Z", "end": "2026-11-30T00:50:00Z",
             "error": "table analytics.orders is stale", "retryable": False}
    skipping, skipped, stepped = both(parse_scenario(scenario([fault]), source="test"))
    for part in stepped:
        assert skipped[part] == stepped[part], part
    [alert] = skipped["alerts"]
    assert alert["status"] == "resolved"
    resolving = min(a["finished_at"] for a in skipped["attempts"]
                    if a["status"] == "succeeded" and a["finished_at"] > alert["opened_at"]
                    and a["workflow"] == alert["workflow"])
    assert alert["resolved_at"] == resolving
    assert resolving in [now for now, _ in claims]
