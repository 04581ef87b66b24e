"""The catalogs' compaction (benchmarks.catalogs) stays out of other sessions' way.

A compaction rebuilds a catalog's indexes and waits for any transaction that is
creating tables, while holding the lock that transaction needs: with another client
in the database the two deadlock. So it compacts only when it is alone there.
"""

from __future__ import annotations

import psycopg

from benchmarks.catalogs import alone
from tests.dbutil import drop_database, make_database


def test_it_is_alone_only_while_no_other_client_is_connected_to_its_database():
    url = make_database("catalogs")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            assert alone(conn)
            with psycopg.connect(url, autocommit=True):
                assert not alone(conn)
    finally:
        drop_database(url)
