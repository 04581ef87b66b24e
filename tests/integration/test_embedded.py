"""The embedded PostgreSQL that `tickwarden demo` uses when no server is configured."""

import psycopg

from tickwarden.db import READY_MARKER, embedded_url


def test_it_starts_reuses_and_cleans_up_a_half_initialised_directory(tmp_path):
    root = tmp_path / "tw"
    # a leftover of an interrupted initialisation: a data directory without the ready marker
    (root / "pgdata").mkdir(parents=True)
    (root / "pgdata" / "PG_VERSION").write_text("16\n")
    url = embedded_url(root)
    assert (root / READY_MARKER).exists()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_database()").fetchone()[0] == "tickwarden"
        conn.execute("CREATE TABLE kept (x int)")
        conn.commit()
    # a second command reuses the same server and data
    again = embedded_url(root)
    with psycopg.connect(again) as conn:
        assert conn.execute("SELECT to_regclass('kept') IS NOT NULL").fetchone()[0]
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert pid
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE false")
    _stop(root)


def _stop(root):
    """Stop the server this test started, so nothing outlives the test."""
    import os
    import signal

    pidfile = root / "pgdata" / "postmaster.pid"
    if pidfile.exists():
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
