"""PostgresStore specifics (persistence.md §3.5); the shared conformance list is in test_stores.py.

The statement and transaction tests use a recording DB-API fake (no server
needed); the rest run against the local server and skip with a reason when it
or psycopg is missing.
"""
import json

import pytest

from falai import Session, SessionConflictError
from falai_stores import PostgresStore
from conftest import postgres_connection, unique_name


class FakeCursor:
    def __init__(self, connection):
        self.connection = connection
        self.closed = False

    def execute(self, sql, params=None):
        self.connection.log.append(("execute", sql, params))
        if self.connection.fail_on and self.connection.fail_on in sql:
            raise RuntimeError("driver says no")

    def fetchone(self):
        return self.connection.rows.pop(0) if self.connection.rows else None

    def close(self):
        self.closed = True


class FakeConnection:
    """A DB-API connection that records statements, commits and rollbacks, and returns scripted rows."""

    def __init__(self, rows=(), fail_on=None):
        self.rows = list(rows)
        self.fail_on = fail_on
        self.log = []
        self.cursors = []

    def cursor(self):
        cursor = FakeCursor(self)
        self.cursors.append(cursor)
        return cursor

    def commit(self):
        self.log.append(("commit",))

    def rollback(self):
        self.log.append(("rollback",))

    def close(self):
        self.log.append(("close",))

    def statements(self):
        return [entry[1] for entry in self.log if entry[0] == "execute"]


@pytest.fixture
def pg():
    """A real connection and a fresh table name; the table is dropped afterwards."""
    connection = postgres_connection()
    table = unique_name()
    yield connection, table
    connection.rollback()
    connection.execute(f"DROP TABLE IF EXISTS {table}")
    connection.commit()
    connection.close()


# Statements and transactions (a recording fake) -----------------------------------------------

def test_insert_is_the_spec_statement_with_a_jsonb_cast():
    """persistence.md §3.5, §3.7 item 12: INSERT ... ON CONFLICT (id) DO NOTHING RETURNING version, (id, 1, blob)."""
    connection = FakeConnection(rows=[(1,)])
    saved = PostgresStore(connection, table="app.sessions").save(Session(id="s1"), 0)
    (_, sql, params), commit = connection.log
    assert sql == ("INSERT INTO app.sessions (id, version, blob) VALUES (%s, %s, %s::jsonb) "
                   "ON CONFLICT (id) DO NOTHING RETURNING version")
    assert params[:2] == ("s1", 1) and json.loads(params[2]) == {**Session(id="s1").to_dict(), "version": 1}
    assert commit == ("commit",) and saved.version == 1
    assert all(cursor.closed for cursor in connection.cursors)


def test_update_is_the_spec_statement():
    """persistence.md §3.5: UPDATE ... WHERE id = %s AND version = %s RETURNING version, (n + 1, blob, id, n)."""
    connection = FakeConnection(rows=[(4,)])
    PostgresStore(connection).save(Session(id="s1"), 3)
    (_, sql, params), _ = connection.log
    assert sql == ("UPDATE falai_sessions SET version = %s, blob = %s::jsonb, updated_at = NOW() "
                   "WHERE id = %s AND version = %s RETURNING version")
    assert (params[0], params[2], params[3]) == (4, "s1", 3) and json.loads(params[1])["version"] == 4


def test_no_row_back_is_a_conflict_read_by_one_select():
    """persistence.md §3.5: no row back is the conflict; SELECT version FROM <table> WHERE id = %s fills
    actual_version (here None: the row is gone)."""
    connection = FakeConnection(rows=[])
    with pytest.raises(SessionConflictError) as caught:
        PostgresStore(connection).save(Session(id="s1"), 2)
    assert connection.statements()[1] == "SELECT version FROM falai_sessions WHERE id = %s"
    assert connection.log[1][2] == ("s1",)
    assert caught.value.actual_version is None and connection.log[-1] == ("commit",)


def test_load_is_one_select_and_commits():
    """persistence.md §3.5: SELECT blob FROM <table> WHERE id = %s; with commit=True no transaction stays open."""
    connection = FakeConnection(rows=[])
    assert PostgresStore(connection).load("s1") is None
    assert connection.log == [("execute", "SELECT blob FROM falai_sessions WHERE id = %s", ("s1",)), ("commit",)]


def test_a_driver_error_rolls_back_and_propagates_unchanged():
    """persistence.md §3.5 (inferred), §3.1 rule 7: with commit=True a call that raises is rolled back; the driver's
    exception is not turned into a falai error."""
    connection = FakeConnection(fail_on="INSERT")
    with pytest.raises(RuntimeError, match="driver says no"):
        PostgresStore(connection).save(Session(id="s1"), 0)
    assert connection.log[-1] == ("rollback",) and ("commit",) not in connection.log
    assert all(cursor.closed for cursor in connection.cursors)


def test_with_commit_false_the_store_never_commits_or_rolls_back():
    """persistence.md §3.5: commit=False leaves the transaction to the host."""
    connection = FakeConnection(rows=[(1,)])
    store = PostgresStore(connection, commit=False)
    store.save(Session(id="s1"), 0)
    store.load("s1")
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1"), 0)
    failing = FakeConnection(fail_on="UPDATE")
    with pytest.raises(RuntimeError):
        PostgresStore(failing, commit=False).save(Session(id="s1"), 1)
    assert not [e for e in connection.log + failing.log if e[0] in ("commit", "rollback")]


def test_a_bad_expected_version_never_reaches_the_connection():
    """persistence.md §3.1 rule 6: ValueError before touching the backend."""
    connection = FakeConnection()
    with pytest.raises(ValueError):
        PostgresStore(connection).save(Session(id="s1"), -1)
    assert connection.log == []


@pytest.mark.parametrize("table", ["1t", "a.b.c", "t; DROP TABLE x", "a-b", ""])
def test_a_bad_table_name_raises_value_error(table):
    """persistence.md §3.2 (inferred): checked at construction."""
    with pytest.raises(ValueError, match="not an SQL identifier"):
        PostgresStore(FakeConnection(), table=table)


def test_a_text_blob_from_the_driver_is_parsed_and_a_dict_is_used_as_is():
    """persistence.md §3.2, Read: JSONB arrives parsed; a driver that returns text is parsed."""
    blob = {**Session(id="s1", data={"a": 1}).to_dict(), "version": 1}
    assert PostgresStore(FakeConnection(rows=[(blob,)])).load("s1").data == {"a": 1}
    assert PostgresStore(FakeConnection(rows=[(json.dumps(blob),)])).load("s1").data == {"a": 1}
    assert PostgresStore(FakeConnection(rows=[{"blob": blob}])).load("s1").version == 1     # a dict row factory


def test_close_closes_the_connection():
    """persistence.md §3.5: close() is connection.close()."""
    connection = FakeConnection()
    PostgresStore(connection).close()
    assert connection.log == [("close",)]


# Against the real server ----------------------------------------------------------------------

def test_initialize_creates_the_spec_table(pg):
    """persistence.md §3.5: id VARCHAR(255) PRIMARY KEY, version INTEGER, blob JSONB, created_at / updated_at
    TIMESTAMPTZ with DEFAULT NOW()."""
    connection, table = pg
    PostgresStore(connection, table=table).initialize()
    columns = connection.execute(
        "SELECT column_name, data_type, character_maximum_length, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position", (table,)).fetchall()
    assert [(c[0], c[1], c[2], c[3]) for c in columns] == [
        ("id", "character varying", 255, "NO"), ("version", "integer", None, "NO"), ("blob", "jsonb", None, "NO"),
        ("created_at", "timestamp with time zone", None, "NO"), ("updated_at", "timestamp with time zone", None, "NO")]
    assert all(c[4] and "now()" in c[4] for c in columns[3:])


def test_the_blob_column_holds_the_session_as_jsonb(pg):
    """persistence.md §3.5: the blob column is JSONB and agrees with the version column; updated_at moves."""
    connection, table = pg
    store = PostgresStore(connection, table=table)
    store.initialize()
    store.save(Session(id="s1", data={"nome": "João"}), 0)
    store.save(Session(id="s1", data={"nome": "João", "n": 2}), 1)
    version, blob, kind, created, updated = connection.execute(
        f"SELECT version, blob, jsonb_typeof(blob), created_at, updated_at FROM {table}").fetchone()
    connection.commit()
    assert (version, blob["version"], kind, blob["data"]) == (2, 2, "object", {"nome": "João", "n": 2})
    assert updated >= created


def test_a_text_blob_column_is_parsed_and_bad_text_is_invalid(pg):
    """persistence.md §3.2, Read: a driver that returns text is parsed; text that does not parse raises
    InvalidSessionError "blob is not valid JSON"."""
    from falai import InvalidSessionError
    connection, table = pg
    connection.execute(f"CREATE TABLE {table} (id VARCHAR(255) PRIMARY KEY, version INTEGER NOT NULL, "
                       "blob TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), "
                       "updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW())")
    connection.execute(f"INSERT INTO {table} (id, version, blob) VALUES ('bad', 1, '{{not json')")
    connection.commit()
    store = PostgresStore(connection, table=table)
    store.save(Session(id="s1", data={"a": 1}), 0)
    assert store.load("s1").data == {"a": 1}
    with pytest.raises(InvalidSessionError, match="blob is not valid JSON"):
        store.load("bad")


def test_commit_false_lets_the_host_own_the_transaction(pg):
    """persistence.md §3.5: with commit=False the host commits or rolls back the save with its own writes."""
    connection, table = pg
    PostgresStore(connection, table=table).initialize()
    store = PostgresStore(connection, table=table, commit=False)
    store.save(Session(id="s1"), 0)
    connection.rollback()
    assert store.load("s1") is None
    store.save(Session(id="s1"), 0)
    connection.commit()
    other = postgres_connection()
    try:
        assert PostgresStore(other, table=table).load("s1").version == 1
    finally:
        other.close()


def test_commit_true_leaves_no_transaction_open(pg):
    """persistence.md §3.5 (inferred): the store commits after each call, so the connection is idle after it."""
    import psycopg
    connection, table = pg
    store = PostgresStore(connection, table=table)
    store.initialize()
    idle = psycopg.pq.TransactionStatus.IDLE
    store.save(Session(id="s1"), 0)
    assert connection.info.transaction_status == idle
    store.load("s1")
    assert connection.info.transaction_status == idle
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1"), 0)
    assert connection.info.transaction_status == idle


def test_a_dict_row_factory_works(pg):
    """A host connection with psycopg's dict_row still loads and reports conflicts (inferred)."""
    from psycopg.rows import dict_row
    connection, table = pg
    connection.row_factory = dict_row
    store = PostgresStore(connection, table=table)
    store.initialize()
    store.save(Session(id="s1"), 0)
    assert store.load("s1").version == 1
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 0)
    assert caught.value.actual_version == 1


def test_a_schema_qualified_table_works(pg):
    """persistence.md §3.2: one `schema.` prefix is allowed."""
    connection, table = pg
    store = PostgresStore(connection, table=f"public.{table}")
    store.initialize()
    store.save(Session(id="s1"), 0)
    assert store.load("s1").version == 1
