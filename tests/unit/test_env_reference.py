"""One parser of `env:NAME` references: where tenants' references are checked and where channels resolve them."""

from __future__ import annotations

import pytest

from tickwarden import secrets
from tickwarden.transports.base import TransportError, resolve_secret


@pytest.mark.parametrize("ref,name", [("env:SLACK_TOKEN", "SLACK_TOKEN"), ("env:_x1", "_x1"), ("env:", None),
                                      ("env:has space", None), ("env:1ABC", None), ("secret:X", None),
                                      ("envX", None), ("ENV:X", None)])
def test_an_env_reference_is_parsed_one_way(ref, name):
    assert secrets.platform_variable(ref) == name


def test_a_channel_resolves_env_references_with_the_same_parser():
    assert resolve_secret("env:TOKEN", {"TOKEN": "value"}) == "value"
    with pytest.raises(TransportError, match="not of the form env:NAME"):
        resolve_secret("env:bad name", {"bad name": "value"})
    with pytest.raises(TransportError, match="env:MISSING is not set"):
        resolve_secret("env:MISSING", {})
