"""What every connection of a `Database` is opened with."""


def test_connections_compile_no_statement_just_in_time(db):
    with db.connection() as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)

