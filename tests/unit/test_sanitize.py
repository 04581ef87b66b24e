import random
import re

import pytest

from tickwarden import sanitize
from tickwarden.categories import categorize, is_retryable, owner_for
from tickwarden.sanitize import redact_value, sanitize_error, sanitize_log_tail

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


# Each canary form of a credential, as a failing step might print or raise it.
CREDENTIAL_FORMS = {
    "aws env": ("AWS_SECRET_ACCESS_KEY=CANARYaws0001xyz", "CANARYaws0001xyz"),
    "db env": ("DB_PASSWORD=CANARYdb0002xyz", "CANARYdb0002xyz"),
    "pg env": ("PGPASSWORD=CANARYpg0003xyz", "CANARYpg0003xyz"),
    "python dict": ("{'password': 'CANARYdict0004'}", "CANARYdict0004"),
    "json": ('{"api_key": "CANARYjson0005"}', "CANARYjson0005"),
    "basic auth": ("Authorization: Basic Q0FOQVJZYmFzaWMwMDA2", "Q0FOQVJZYmFzaWMwMDA2"),
    "token word": ("token CANARYtok0007xyz", "CANARYtok0007xyz"),
    "next line": ("password:\n    CANARYnext0008", "CANARYnext0008"),
    "quoted key next line": ('"secret":\n"CANARYnext0009"', "CANARYnext0009"),
}


@pytest.mark.parametrize("form", sorted(CREDENTIAL_FORMS))
def test_every_credential_form_is_redacted_in_errors_logs_and_outputs(form, forms=CREDENTIAL_FORMS):
    text, secret = forms[form]
    assert secret not in sanitize_error(f"step failed: {text}")
    assert secret not in sanitize_log_tail(f"starting\n{text}\ndone")
    assert secret not in str(redact_value({"log": text, "nested": [text]}))


def test_a_secret_keyed_output_value_is_redacted_whole():
    assert redact_value({"password": "plain words", "rows": 3}) == {"password": "[redacted]", "rows": 3}


@pytest.mark.parametrize(("text", "gone", "mark"), [
    ("call +1 415 555 0134 about it", "555 0134", "[phone]"),
    ("phone (030) 1234 5678 unreachable", "1234 5678", "[phone]"),
    ("ssn 123-45-6789 invalid", "123-45-6789", "[ssn]"),
    ("card 4111 1111 1111 1111 declined", "4111 1111", "[card]"),
    ("card 4111-1111-1111-1111 declined", "4111-1111", "[card]"),
])
def test_personal_data_is_replaced(text, gone, mark):
    assert gone not in sanitize_error(text) and mark in sanitize_error(text)


@pytest.mark.parametrize("text", [
    "loaded 1234567 rows in 2026-11-30 02:00:00",
    "order 4111111111111112 is not a card (fails Luhn)",
    "token expired for step load",
    "connecting to 192.168.100.200 port 5432",
])
def test_ordinary_numbers_and_prose_survive(text):
    assert sanitize_error(text) == text


@pytest.mark.parametrize("token", [
    "glpat-CANARYabcdefghij0123456789",             # GitLab, known to detect-secrets, not to our own list
    "sk_live_CANARYabcdefghij0123456789",           # Stripe
    "SG.CANARYabcdefghij012345.CANARYabcdefghijklmnopqrstuvwxyz0123456789abcde",  # SendGrid
])
def test_token_shapes_known_to_detect_secrets_are_redacted(token):
    assert "CANARY" not in sanitize_error(f"upstream rejected {token} at login")


# Keys and words that match only by the pattern's case folding (long s, Kelvin sign, dotted I),
# and rules run after an earlier one rewrote the text: each rule's prefilter must see them too.
FOLDED_FORMS = {
    "long s": ("paſsword=CANARYfold0001", "CANARYfold0001"),
    "kelvin sign": ("api_\u212aey: CANARYfold0002", "CANARYfold0002"),
    "dotted capital i": ("AUTHORİZATION: CANARYfold0003", "CANARYfold0003"),
    "token, folded": ("toKen CANARYfold0004x", "CANARYfold0004x"),
    "bearer, folded": ("BEARER CANARYfold0005", "CANARYfold0005"),
}


@pytest.mark.parametrize("form", sorted(FOLDED_FORMS))
def test_keys_matched_by_case_folding_alone_are_redacted(form):
    test_every_credential_form_is_redacted_in_errors_logs_and_outputs(form, FOLDED_FORMS)


# Token shapes of detect-secrets' detectors, two of them with no literal text (Discord, Telegram),
# which the prefilter then searches as patterns.
DETECTOR_SHAPES = [
    "AKIAIOSFODNN7EXAMPLE", "A3TXIOSFODNN7EXAMPLE", "ghp_" + "a1" * 18, "glpat-" + "b2" * 12,
    "M" + "c" * 23 + "." + "d" * 6 + "." + "e" * 27, "123456789:" + "A" * 35, "eyJhbGciOi.eyJzdWIi.c2ln",
    "xoxb-123-456-abcdef", "XOXP-123-abc", "sk_live_" + "f" * 24, "AC" + "0" * 32, "SG." + "g" * 22 + "." + "h" * 43,
    "https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/q8Ln2WcKx7RzPd4v", "HTTPS://u:" + "a" * 24 + "@x.cloudant.com",
]


@pytest.mark.parametrize("token", DETECTOR_SHAPES)
def test_detector_shapes_are_redacted(token):
    redacted = sanitize.redact(f"login with {token} failed")
    assert token not in redacted and "[redacted]" in redacted


def _unfiltered(text: str) -> str:
    """`redact` as it was before its prefilters: every rule's substitution over the whole text."""
    for pattern, replacement, _ in sanitize._PATTERNS:
        text = pattern.sub(replacement, text)
    for pattern in sanitize._known_token_patterns():
        text = pattern.sub(sanitize.REDACTED, text)
    for pattern, replacement, _ in sanitize._LATE:
        text = pattern.sub(replacement, text)
    text = sanitize._CARD.sub(sanitize._card, text)
    text = sanitize._PHONE.sub(sanitize._phone, text)
    return sanitize._QUOTED.sub(sanitize._literal, text)


_PIECES = [*"aAsSkKpPtTwWoOrRdDeEyYiIuUhHnN0123456789 :=_-./@'\"\n+()[]{},;", "ſ", "\u212a", "İ", "ı",
           "password", "secret", "token", "key", "auth", "Bearer ", "://", "xox", "ghp_", "sk-", "AKIA", "eyJ",
           "-----BEGIN ", " PRIVATE KEY-----", "Authorization", "DSN", "cookie", "session_id", "api-key"]


def test_prefilters_skip_only_rules_that_could_not_match():
    """Every rule's prefilter is implied by its pattern: redaction is the same as without them."""
    rnd = random.Random(18)
    texts = [text for text, _ in [*CANARIES, *CREDENTIAL_FORMS.values(), *FOLDED_FORMS.values()]]
    texts += [f"login with {token} failed" for token in DETECTOR_SHAPES]
    texts += ["".join(rnd.choice(_PIECES) for _ in range(rnd.randint(0, 40))) for _ in range(4000)]
    for text in texts:
        assert sanitize.redact(text) == _unfiltered(text), text


def test_an_authorization_header_is_redacted_once():
    """The header's rule redacts the value; the key=value rule must not redact its marker again ("]]")."""
    assert sanitize.redact("Authorization: bearer abc") == "Authorization: [redacted]"
    assert sanitize.redact("Proxy-Authorization: Basic dXNlcjpwYXNz, next") == "Proxy-Authorization: [redacted], next"
    assert sanitize.redact("auth=[redacted]") == "auth=[redacted]"
    assert sanitize.redact("password: [redacted]\ntoken = [redacted];") == "password: [redacted]\ntoken = [redacted];"


def test_what_the_database_cannot_store_is_replaced():
    """NUL and lone surrogates (from a JSON escape) fail a text or jsonb write: redaction replaces them."""
    assert sanitize.redact("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd"
    assert sanitize.sanitize_error("bad\x00byte") == "bad\ufffdbyte"
    assert sanitize.sanitize_log_tail("one\x00\ntwo \udc80") == "one\ufffd\ntwo \ufffd"
    assert sanitize.redact_value({"k\x00": ["v\ud800", 1]}) == {"k\ufffd": ["v\ufffd", 1]}
    for text in (sanitize.redact("x\x00\ud800"), sanitize.sanitize_error("\x00" * 400)):
        text.encode("utf-8")  # no lone surrogate left
        assert "\x00" not in text


@pytest.mark.parametrize("secret", ["abc]def123", "(secret)rest", "ab)cdefgh", "[abc]xyz", "p)ss@x", "ab,cd", "ab;cd",
                                    'ab"cd', "ab'cd", "x}y]z)w"])
def test_a_delimiter_inside_an_unquoted_secret_does_not_end_its_redaction(secret):
    # An attacker's or an unlucky password with a bracket in it: stopping at the bracket printed the rest.
    for text in (f"password={secret} next", f"DB_PASSWORD={secret}", f"api_key: {secret}, rows=3"):
        redacted = sanitize.redact(text)
        assert "[redacted]" in redacted
        assert not any(part in redacted for part in _pieces(secret)), redacted


def _pieces(secret: str) -> list[str]:
    """The runs of two or more value characters in `secret`: none of them may be printed."""
    return [piece for piece in re.split(r"[\s,;}\])\"'(\[]+", secret) if len(piece) >= 2]


def test_a_delimiter_that_closes_what_wraps_the_pair_stays_in_the_text():
    assert sanitize.redact("(password=abc) next") == "(password=[redacted]) next"
    assert sanitize.redact("[token=abc], rows=3") == "[token=[redacted]], rows=3"
    assert sanitize.redact("{'password': 'x', 'user': 'bob'}") == "{'password': [redacted], 'user': 'bob'}"
    assert sanitize.redact("PGPASSWORD=abc; exit 1") == "PGPASSWORD=[redacted]; exit 1"


def test_a_short_log_seen_again_gets_the_same_redacted_tail() -> None:
    # Short tails are remembered (a warm attempt's is the same text every time): a repeat must
    # still be redacted, and bounded by its own arguments, not by an earlier call's.
    log = "[noop] succeeded\n[noop] password=hunter2hunter2"
    first = sanitize_log_tail(log)
    assert "hunter2hunter2" not in first and sanitize_log_tail(log) == first
    assert sanitize_log_tail(log, lines=1) == first.splitlines()[-1]
    assert len(sanitize_log_tail(log, limit=10)) == 10
    # What is kept is the redacted tail under a digest: nothing of the unredacted log.
    assert not any("hunter2" in repr(key) for key in sanitize._remembered)
    assert all("hunter2" not in tail for tail in sanitize._remembered.values())
