"""Schemathesis against the served OpenAPI: generated and malformed requests never cause a 5xx.

One server and one seeded schema serve the whole module (the examples are bounded so
the module stays well under a minute).
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.apiutil import live_server, make_token, seed_tenant
from tests.dbutil import TEST_URL, drop_schema, make_schema
from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.migrate import upgrade
from tickwarden.transports.recording import RecordingTransport

EXAMPLES = 12


@pytest.fixture(scope="module")
def fuzz_server():
    name = make_schema("fuzz")
    with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))
    db = Database(TEST_URL, schema=name, min_size=1, max_size=6)
    clock = VirtualClock(datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "globex")
    token = make_token(db, clock.now(), name="fuzzer")
    recording = RecordingTransport()
    try:
        with live_server(db, clock, transports=lambda: {"recording": recording}) as base:
            yield base, token
    finally:
        db.close()
        drop_schema(name)


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    base, _ = fuzz_server
    return schemathesis.openapi.from_url(base + "/openapi.json")


def operations(api_schema):
    found = [result.ok() for result in api_schema.get_all_operations()]
    assert len(found) >= 20
    return found


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_causes_a_server_error(api_schema, fuzz_server, mode):
    """Every operation, valid and invalid data (bodies, paths, queries): never a 5xx."""
    base, token = fuzz_server
    failures = []
    for operation in operations(api_schema):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def check(case):
            case.call_and_validate(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                   checks=[not_a_server_error])

        try:
            check()
        except Unsatisfiable:
            continue  # nothing invalid can be sent to an operation without inputs
        except Exception as exc:  # collect every failing operation, then report them together
            failures.append(f"{operation.label}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    assert failures == [], "\n".join(failures)
