"""Store operations of signed acknowledge links: which were used (see `tickwarden.ack_links`)."""

from __future__ import annotations

from datetime import datetime

from tickwarden.store.base import StoreBase


class AckLinksRepository(StoreBase):
    def used_at(self, digest: str) -> datetime | None:
        """When the link with this digest acknowledged its alert; None if it never did."""
        row = self._row("ack_links_use", {"digest": digest})
        return row["used_at"] if row else None

    def record_ack_link_use(self, digest: str, alert_id: int, now: datetime, expires_at: datetime) -> bool:
        """Record the link's use; False when it was used already (the caller must roll back)."""
        params = {"digest": digest, "alert_id": alert_id, "now": now, "expires_at": expires_at}
        return self._row("ack_links_record_ack_link_use", params) is not None
