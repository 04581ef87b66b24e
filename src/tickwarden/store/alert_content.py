"""The facts a message about an alert carries beyond the alert row: its tick and last attempt.

One query serves every reader (the notifier for each transport, the dashboard's alert
page), so a message and the page can never disagree about which tick failed, when it
was due, or what the last attempt was. The rows are raw: `messages.tick_facts` turns
them into `TickFacts` and sanitizes the log when a message is rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickwarden.store.base import StoreBase


class AlertContentRepository(StoreBase):
    def tick_facts(self, alert_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Return the tick facts of each visible alert in `alert_ids`, by alert id."""
        if not alert_ids:
            return {}
        rows = self._rows("alert_content_tick_facts", {"ids": list(alert_ids)})
        return {int(row["alert_id"]): row for row in rows}
