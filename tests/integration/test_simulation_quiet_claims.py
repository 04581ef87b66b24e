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
    # skipping, a success waits for a later pass, which claims several at once (at the latest the
    # pass woken by the first success that finds QUIET_LIMIT waiting)
    assert len(claims) <= len(finishes) // 2, claims
    assert all(n > 1 for _, n in claims), claims
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


@pytest.fixture
def evaluated(monkeypatch) -> list[tuple[datetime, list[int]]]:
    """(now, workflows) of every poller pass that evaluated workflows, in every simulation of the test."""
    seen: list[tuple[datetime, list[int]]] = []
    poll = OutcomePoller.poll

    def counted(self, now):
        result = poll(self, now)
        if result.evaluation.evaluated:
            seen.append((now, result.evaluation.evaluated))
        return result

    monkeypatch.setattr(OutcomePoller, "poll", counted)
    return seen


def test_a_deadline_pass_that_opens_an_alert_leaves_a_waiting_success_to_the_next_claim(claims, evaluated):
    # sync-20's ticks of 00:30, 00:35 and 00:40 never run: the third missed one opens an alert, in a
    # deadline pass, while its success of 00:25 waits; sync-200's success of 00:43:20 wakes the poller.
    outage = {"workflow": "acme/sync-20", "start": "2026-11-30T00:28:00Z", "end": "2026-11-30T00:43:00Z"}
    raw = {**scenario(), "end": "2026-11-30T01:00:00Z", "trigger_outages": [outage]}
    raw["workflows"] = [{"tenant": "acme", "name": f"sync-{d}", "cron": "*/5 * * * *", "duration": d}
                        for d in (20, 40, 200)]
    stepped = ledger(Recorded(parse_scenario(raw, source="test"), url=TEST_URL, skip_idle=False).run())
    claims.clear()
    evaluated.clear()
    skipped = ledger(Recorded(parse_scenario(raw, source="test"), url=TEST_URL).run())
    for part in stepped:
        assert skipped[part] == stepped[part], part
    [alert] = [a for a in skipped["alerts"] if a["workflow"].endswith("sync-20")]
    waiting = max(a["finished_at"] for a in skipped["attempts"]
                  if a["workflow"] == alert["workflow"] and a["finished_at"] is not None
                  and a["finished_at"] < alert["opened_at"])
    # No pass claims between that success and the alert: the deadline pass does not claim first.
    assert not [now for now, _ in claims if waiting < now <= alert["opened_at"]], claims
    # The next claim reads the alert open and evaluates the workflow, which decides nothing
    # (the ledgers above are equal to the stepped one's, where the success was claimed at its finish).
    after = [now for now, _ in claims if now > alert["opened_at"]]
    assert after and after[0] in [now for now, _ in evaluated]
