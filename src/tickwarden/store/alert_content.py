"""The facts a message about an alert carries beyond the alert row: its tick and last attempt.

One query serves every reader (the notifier for each transport, the dashboard's alert
page), so a message and the page can never disagree about which tick failed, when it
was due, or what the last attempt was. The rows are raw: `messages.tick_facts` turns
them into `TickFacts` and sanitizes the log when a message is rendered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tickwarden.store.base import StoreBase
from tickwarden.store.queries import queries

BY_IDS = "a.id = ANY(%(ids)s::bigint[])"
# The alerts of the deliveries one claim took: the claim's lease (replica and end) names them,
# so the facts can be asked for with the claim, before its rows are read.
BY_CLAIM = ("a.id IN (SELECT o.alert_id FROM notification_outbox o WHERE o.status = 'sending'"
            " AND o.locked_by = %(replica_id)s AND o.locked_until = %(locked_until)s)")


@functools.cache
def facts_query(alerts: str) -> str:
    """`alert_content_tick_facts` for the alerts that `alerts` (BY_IDS or BY_CLAIM) selects."""
    return queries()["alert_content_tick_facts"].replace("{alerts}", alerts)


class AlertContentRepository(StoreBase):
    def tick_facts(self, alert_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Return the tick facts of each visible alert in `alert_ids`, by alert id."""
        if not alert_ids:
            return {}
        rows = self._fetch(facts_query(BY_IDS), {"ids": list(alert_ids)})
        return {int(row["alert_id"]): row for row in rows}

    def claimed_tick_facts(self, replica_id: str, locked_until: datetime) -> Callable[[], dict[int, dict[str, Any]]]:
        """Send the read of the tick facts of the alerts whose deliveries `replica_id` holds until
        `locked_until`; the returned reader gives them by alert id.

        Sent after the claim that took them, in its transaction, it sees that claim; on a
        pipelined connection both go out together. The lease's end is the pass's own (`now` plus
        the lease), so it names this pass's claims (a row of it left unrecorded by a fault only
        adds its alert's facts, which nobody asks for).
        """
        read = self._submit_text(facts_query(BY_CLAIM), {"replica_id": replica_id, "locked_until": locked_until})
        return lambda: {int(row["alert_id"]): row for row in read()}
