"""Named SQL blocks as they are sent: without comments or indentation, literals untouched."""

from __future__ import annotations

from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from tickwarden.store.queries import compact, queries


def test_compact_drops_comments_and_indentation_but_keeps_literals_and_quoted_identifiers():
    text = """-- what it does --
    -- a description
    SELECT a,   b -- why b
      FROM t AS "Odd  -- name"
     WHERE c = 'it''s  -- not a comment'
       AND d = 'two
    lines'"""
    assert compact(text) == ("SELECT a, b\nFROM t AS \"Odd  -- name\"\nWHERE c = 'it''s  -- not a comment'\n"
                             "AND d = 'two\n    lines'")


def test_a_dollar_quoted_body_is_left_as_written():
    text = "DO $$\nBEGIN\n    PERFORM 1;  -- kept\nEND\n$$;"
    assert compact(text) == text


def test_every_named_query_fits_psycopgs_parse_cache():
    # psycopg parses the placeholders of a longer text again at every execution (the worker's
    # outcome statement, with its comments, paid that at every attempt).
    too_long = {name: len(text.encode()) for name, text in queries().items()
                if len(text.encode()) > MAX_CACHED_STATEMENT_LENGTH}
    assert too_long == {}


def test_named_queries_keep_no_comment_lines():
    assert [name for name, text in queries().items()
            if "$$" not in text and any(line.startswith("--") for line in text.splitlines())] == []
