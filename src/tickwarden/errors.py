"""The exception family. Every user-facing error is one clear sentence."""

from __future__ import annotations


class TickwardenError(Exception):
    """Something went wrong in tickwarden."""

    exit_code = 1  # what the command line exits with

    def __init__(self, message: str | None = None):
        super().__init__(message or self.__doc__)

    @property
    def message(self) -> str:
        return str(self.args[0])


class InvalidInput(TickwardenError):
    """The input is not valid."""


class InvalidField(InvalidInput):
    """One value is not valid; `field` is its dotted key path (`schedule.cron`), `reason` the problem."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}.")
        self.field = field
        self.reason = reason


class UsageError(InvalidInput):
    """The command was called with arguments that do not fit together."""

    exit_code = 2


class InvalidSchedule(InvalidInput):
    """The cron expression or timezone is not valid."""


class InvalidPolicy(InvalidInput):
    """The policy override is not valid."""


class NotFound(TickwardenError):
    """No such object."""


class Conflict(TickwardenError):
    """The change conflicts with the current state."""


class DatabaseUnavailable(TickwardenError):
    """The database cannot be reached."""


class MigrationError(TickwardenError):
    """The database schema could not be brought up to date."""
