"""Error categories, and who owns an alert caused by each.

A worker records a category with every failed attempt. The owner of an alert is
chosen from the category of the failure that opened it (and follows the latest one
while nobody has reassigned it by hand):

| category      | meaning                                             | owner       | retryable |
|---------------|-----------------------------------------------------|-------------|-----------|
| step_error    | a recipe step raised: customer code or data         | customer    | yes       |
| config        | the workflow or its inputs are misconfigured        | customer    | no        |
| auth          | the publisher is deactivated or lacks access        | customer    | no        |
| timeout       | the watchdog stopped the run at its timeout         | customer    | yes       |
| empty_result  | a workflow that expects rows succeeded with none    | customer    | yes       |
| connection    | a network or upstream connection failed             | engineering | yes       |
| environment   | the environment could not be woken or died          | engineering | yes       |
| lost          | the worker stopped renewing its lease               | engineering | yes       |
| missed        | no outcome by the deadline (the tick never ran)     | engineering | —         |
| internal      | tickwarden itself failed                            | engineering | yes       |

The platform team owns whatever the platform is responsible for running; the
customer owns what their own code, data and settings decide.
"""

from __future__ import annotations

import re

CUSTOMER_CATEGORIES = frozenset({"step_error", "config", "auth", "timeout", "empty_result"})
ENGINEERING_CATEGORIES = frozenset({"connection", "environment", "lost", "missed", "internal"})
NOT_RETRYABLE = frozenset({"config", "auth"})

_CONNECTION = re.compile(
    r"(?i)(connection (reset|refused|closed|aborted)|could not connect|network|unreachable|"
    r"temporar(y|ily) unavailable|timed out connecting|dns|name resolution|broken pipe|ssl|tls|eof occurred)"
)
_TIMEOUT = re.compile(r"(?i)\b(timeout|timed out|deadline exceeded)\b")
_AUTH = re.compile(r"(?i)(permission denied|unauthori[sz]ed|forbidden|not authenticated|deactivated|access denied)")
_CONFIG = re.compile(r"(?i)(no such (secret|environment|module)|invalid config|misconfigured|unknown (step|secret))")
_ENVIRONMENT = re.compile(r"(?i)(out of memory|oom|killed|environment (failed|died|unavailable)|no space left)")


def owner_for(category: str | None) -> str:
    """Return `customer` or `engineering` for a failure category."""
    return "customer" if category in CUSTOMER_CATEGORIES else "engineering"


def categorize(message: str) -> str:
    """Guess the category of an error reported only as text (imports, simulations)."""
    if _CONNECTION.search(message):
        return "connection"
    if _AUTH.search(message):
        return "auth"
    if _CONFIG.search(message):
        return "config"
    if _ENVIRONMENT.search(message):
        return "environment"
    if _TIMEOUT.search(message):
        return "timeout"
    return "step_error"


def is_retryable(category: str) -> bool:
    return category not in NOT_RETRYABLE
