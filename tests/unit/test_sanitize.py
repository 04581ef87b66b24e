import pytest

from tickwarden.categories import categorize, is_retryable, owner_for
from tickwarden.sanitize import sanitize_error, sanitize_log_tail

CANARIES = [
    ("postgresql://app:CANARY-PW-1@db.internal:5432/sales failed", "CANARY-PW-1"),
    ("request failed: Authorization: Bearer CANARYTOKEN.abc.def", "CANARYTOKEN"),
    ("slack said no for xoxb-1234-CANARY-slack", "CANARY-slack"),
    ("api_key=CANARY_KEY_42 rejected", "CANARY_KEY_42"),
    ("password: 'CANARY pass phrase'", "CANARY pass phrase"),
    ("bad row for customer jane.doe@example.com", "jane.doe@example.com"),
    ("invalid value 'CANARY 4111 1111 1111 1111' for column card", "4111"),
]


@pytest.mark.parametrize(("message", "secret"), CANARIES)
def test_secrets_and_payload_values_never_survive(message, secret):
    assert secret not in sanitize_error(message)
    assert secret not in sanitize_log_tail("line one\n" + message)


def test_identifiers_survive_so_the_error_still_says_what_broke():
    assert sanitize_error("KeyError: 'customer_id' in recipe join_orders") == "KeyError: 'customer_id' in recipe join_orders"


def test_errors_become_one_bounded_line():
    text = sanitize_error("first\nsecond\n" + "x " * 500)
    assert "\n" not in text and len(text) <= 300 and text.startswith("first second")


def test_log_tails_keep_the_last_lines_only():
    log = "\n".join(f"line {i}" for i in range(100))
    tail = sanitize_log_tail(log, lines=5)
    assert tail.splitlines() == [f"line {i}" for i in range(95, 100)]


@pytest.mark.parametrize(
    ("message", "category", "owner"),
    [
        ("could not connect to warehouse: connection reset by peer", "connection", "engineering"),
        ("KeyError: 'customer_id' in recipe join_orders", "step_error", "customer"),
        ("table analytics.orders is stale", "step_error", "customer"),
        ("permission denied for table orders", "auth", "customer"),
        ("step exceeded its timeout of 60 s", "timeout", "customer"),
    ],
)
def test_categories_and_owners(message, category, owner):
    assert categorize(message) == category
    assert owner_for(category) == owner


def test_config_and_auth_are_not_retried():
    assert not is_retryable("auth") and not is_retryable("config") and is_retryable("connection")
