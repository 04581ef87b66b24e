"""tickwarden: cron-scheduled workflows for many tenants, watched like an on-call engineer."""

__version__ = "0.1.0"
