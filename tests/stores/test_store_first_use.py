"""Issue 9: a SQL store never fails with a bare "no such table". SQLiteStore creates its table on first use
and opens a path in WAL mode with a busy timeout; PostgresStore names initialize() when the table is missing."""
import sqlite3

import pytest

from falai import Session
from falai_stores import PostgresStore, SQLiteStore
from conftest import postgres_connection, unique_name


def test_sqlite_creates_its_table_on_the_first_save_without_initialize(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    assert store.save(Session(id="s1"), 0).version == 1
    assert store.load("s1").version == 1
    store.close()


def test_sqlite_creates_its_table_on_the_first_load_too():
    connection = sqlite3.connect(":memory:")
    assert SQLiteStore(connection, table="first_load").load("s1") is None
    assert connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [("first_load",)]


def test_sqlite_runs_create_table_once_per_store():
    connection = sqlite3.connect(":memory:")
    statements = []
    connection.set_trace_callback(statements.append)
    store = SQLiteStore(connection)
    store.save(Session(id="s1"), 0)
    store.save(Session(id="s1"), 1)
    store.load("s1")
    assert sum(s.startswith("CREATE TABLE") for s in statements) == 1


def test_a_path_is_opened_in_wal_mode_with_full_sync_and_a_busy_timeout(tmp_path):
    store = SQLiteStore(tmp_path / "s.db", timeout=7.5)
    connection = store.connection
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert connection.execute("PRAGMA synchronous").fetchone() == (2,)          # FULL
    assert connection.execute("PRAGMA busy_timeout").fetchone() == (7500,)
    store.close()


def test_a_connection_passed_in_keeps_its_own_journal_mode(tmp_path):
    connection = sqlite3.connect(tmp_path / "s.db")
    SQLiteStore(connection).save(Session(id="s1"), 0)
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    connection.close()


def test_two_stores_on_one_wal_file_see_each_others_saves(tmp_path):
    writer, reader = SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")
    writer.save(Session(id="s1", data={"a": 1}), 0)
    assert reader.load("s1").data == {"a": 1}
    reader.save(reader.load("s1"), 1)
    assert writer.load("s1").version == 2
    writer.close()
    reader.close()


def test_postgres_without_initialize_raises_an_error_naming_initialize():
    connection = postgres_connection()
    table = unique_name()
    try:
        store = PostgresStore(connection, table=table)
        with pytest.raises(RuntimeError, match=rf'table "{table}" does not exist. Call store.initialize\(\) once'):
            store.load("s1")
        with pytest.raises(RuntimeError, match="initialize") as caught:
            store.save(Session(id="s1"), 0)
        assert getattr(caught.value.__cause__, "sqlstate", None) == "42P01"
        store.initialize()                      # the connection is usable again: the failed call rolled back
        assert store.save(Session(id="s1"), 0).version == 1
    finally:
        connection.rollback()
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.commit()
        connection.close()
