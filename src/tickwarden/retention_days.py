"""How long each class of data is kept: the classes, their defaults and their bounds.

Kept apart from the retention loop (`retention.py`) so that what only needs the numbers
(the command line's option bounds, the metrics' labels) does not load the database layer.
"""

from __future__ import annotations

CLASSES = ("metadata", "logs", "payloads", "outbox", "alerts")
DEFAULT_DAYS = {"metadata": 400, "logs": 30, "payloads": 7, "outbox": 30, "alerts": 400}
# Metadata and alert history never go below a week: the deadline detector looks back
# a day, and must never find a tick whose run was already removed.
MIN_DAYS = {"metadata": 7, "logs": 1, "payloads": 1, "outbox": 1, "alerts": 7}
MAX_DAYS = 36500
