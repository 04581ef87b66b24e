"""Test databases: a real PostgreSQL and one fresh schema per test."""

from __future__ import annotations

import itertools
import os

import psycopg
from psycopg import sql

TEST_URL = os.environ.get("TICKWARDEN_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
_counter = itertools.count()


def make_schema(prefix: str = "t") -> str:
    """Create an empty, uniquely named schema and return its name."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    name = f"{prefix}_{worker}_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


def drop_schema(name: str) -> None:
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def make_database(prefix: str = "tenantdb") -> str:
    """Create a separate, empty database (a tenant's own) and return its URL."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    name = f"{prefix}_{worker}_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return TEST_URL.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
