from datetime import UTC, datetime, timedelta

import pytest

from tickwarden import ack_links

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
NONCE = ack_links.nonce_for("alert-12.event-40.channel-3")


def test_a_link_verifies_until_it_expires_and_names_its_alert():
    token = ack_links.issue(12, NOW + timedelta(hours=1), NONCE, "k1")
    link = ack_links.verify(token, NOW, "k1")
    assert link.alert_id == 12 and link.expires_at == NOW + timedelta(hours=1) and len(link.digest) == 64
    assert ack_links.verify(token, NOW + timedelta(minutes=59), "k1").alert_id == 12
    with pytest.raises(ack_links.LinkRefused) as refused:
        ack_links.verify(token, NOW + timedelta(hours=1), "k1")
    assert refused.value.status == 410 and "expired on 2026-11-30 03:00 UTC" in refused.value.message


def test_the_nonce_is_stable_per_delivery_and_distinct_between_deliveries():
    assert ack_links.nonce_for("alert-12.event-40.channel-3") == NONCE
    assert ack_links.nonce_for("alert-12.event-40.channel-4") != NONCE
    with pytest.raises(ValueError):
        ack_links.issue(12, NOW, "not-hex", "k1")


@pytest.mark.parametrize("mutate", [
    lambda t: t.replace("12.", "13.", 1),                      # another alert
    lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),         # the signature
    lambda t: t + "=",                                          # padding
    lambda t: "",
    lambda t: "12." + "1" * 200,
    lambda t: t.replace(".", "%2E"),
])
def test_an_altered_link_is_refused_with_one_sentence(mutate):
    token = ack_links.issue(12, NOW + timedelta(days=1), NONCE, "k1")
    with pytest.raises(ack_links.LinkRefused) as refused:
        ack_links.verify(mutate(token), NOW, "k1")
    assert refused.value.status == 400 and refused.value.message.startswith("This acknowledge link is not valid")


def test_old_keys_verify_and_other_keys_do_not():
    token = ack_links.issue(12, NOW + timedelta(days=1), NONCE, "old")
    assert ack_links.verify(token, NOW, "new", ("old",)).alert_id == 12
    with pytest.raises(ack_links.LinkRefused):
        ack_links.verify(token, NOW, "new", ("other", ""))
