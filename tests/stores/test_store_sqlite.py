"""SQLiteStore specifics (persistence.md §3.4); the shared conformance list is in test_stores.py."""
import json
import pathlib
import re
import sqlite3
import threading

import pytest

from falai import Session, SessionConflictError
from falai_stores import SQLiteStore

ISO_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def connection():
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    yield connection
    connection.close()


def traced(connection):
    """Record every statement the connection runs."""
    statements = []
    connection.set_trace_callback(statements.append)
    return statements


def test_initialize_creates_the_table_with_the_spec_columns(connection):
    """persistence.md §3.4: id TEXT PRIMARY KEY, version INTEGER, blob TEXT, created_at TEXT, updated_at TEXT."""
    SQLiteStore(connection).initialize()
    columns = [(name, kind, notnull, pk) for _, name, kind, notnull, _, pk
               in connection.execute("PRAGMA table_info(falai_sessions)")]
    assert columns == [("id", "TEXT", 0, 1), ("version", "INTEGER", 1, 0), ("blob", "TEXT", 1, 0),
                       ("created_at", "TEXT", 1, 0), ("updated_at", "TEXT", 1, 0)]


def test_initialize_twice_is_harmless(connection):
    """persistence.md §3.4: CREATE TABLE IF NOT EXISTS."""
    store = SQLiteStore(connection)
    store.initialize()
    store.save(Session(id="s1"), 0)
    store.initialize()
    assert store.load("s1").version == 1


def test_the_default_table_is_falai_sessions_not_the_3x_agent_sessions(connection):
    """persistence.md §3.7, Differs from the original: the port defaults to `falai_sessions`."""
    store = SQLiteStore(connection)
    store.initialize()
    store.save(Session(id="s1"), 0)
    assert connection.execute("SELECT id, version FROM falai_sessions").fetchall() == [("s1", 1)]


def test_insert_and_update_are_the_spec_statements_with_the_table_name(connection):
    """persistence.md §3.4, §3.7 item 12: one INSERT OR IGNORE for version 0, one UPDATE ... WHERE version = ?;
    the table name is honoured."""
    store = SQLiteStore(connection, table="my_sessions")
    store.initialize()
    statements = traced(connection)
    store.save(Session(id="s1"), 0)
    store.save(Session(id="s1"), 1)
    writes = [s for s in statements if s.startswith(("INSERT", "UPDATE"))]
    assert len(writes) == 2
    assert writes[0].startswith("INSERT OR IGNORE INTO my_sessions (id, version, blob, created_at, updated_at) "
                                "VALUES ('s1', 1, '")
    assert writes[1].startswith("UPDATE my_sessions SET version = 2, blob = '")
    assert writes[1].endswith("WHERE id = 's1' AND version = 1")


def test_a_conflict_reads_the_stored_version_with_one_select(connection):
    """persistence.md §3.4: on a conflict, SELECT version FROM <table> WHERE id = ? fills actual_version."""
    store = SQLiteStore(connection, table="t")
    store.initialize()
    store.save(Session(id="s1"), 0)
    statements = traced(connection)
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1"), 0)
    assert "SELECT version FROM t WHERE id = 's1'" in statements


def test_load_is_one_select_of_the_blob(connection):
    """persistence.md §3.4: Load: SELECT blob FROM <table> WHERE id = ?."""
    store = SQLiteStore(connection)
    store.initialize()
    statements = traced(connection)
    assert store.load("s1") is None
    assert statements == ["SELECT blob FROM falai_sessions WHERE id = 's1'"]


def test_the_row_holds_version_compact_json_and_store_timestamps(connection):
    """persistence.md §3.2: the blob column's version agrees with the version column; compact JSON with non-ASCII
    kept; created_at / updated_at are the store's clock as §2.4 text; created_at survives an update."""
    store = SQLiteStore(connection)
    store.initialize()
    store.save(Session(id="s1", data={"nome": "João"}), 0)
    _, _, _, created = connection.execute("SELECT * FROM falai_sessions").fetchone()[:4]
    store.save(Session(id="s1", data={"nome": "João", "x": 1}), 1)
    version, blob, created_after, updated = connection.execute(
        "SELECT version, blob, created_at, updated_at FROM falai_sessions").fetchone()
    assert version == 2 and json.loads(blob)["version"] == 2
    assert '"nome":"João"' in blob and ": " not in blob and ", " not in blob
    assert ISO_TEXT.fullmatch(created) and ISO_TEXT.fullmatch(updated) and created_after == created
    assert updated >= created


def test_no_transaction_is_left_open_after_any_call(connection):
    """persistence.md §3.4 (inferred): each save commits before returning; load leaves no transaction open;
    a conflict leaves none either."""
    store = SQLiteStore(connection)
    store.initialize()
    assert not connection.in_transaction
    store.save(Session(id="s1"), 0)
    assert not connection.in_transaction
    store.load("s1")
    assert not connection.in_transaction
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1"), 0)
    assert not connection.in_transaction
    store.save(Session(id="s1"), 1)
    assert not connection.in_transaction


def test_a_save_is_visible_to_another_connection_at_once(tmp_path):
    """persistence.md §3.4: each save commits before it returns."""
    path = tmp_path / "s.db"
    writer = SQLiteStore(path)
    writer.initialize()
    reader = SQLiteStore(str(path))
    writer.save(Session(id="s1", data={"a": 1}), 0)
    assert reader.load("s1").data == {"a": 1}
    writer.close()
    reader.close()


def test_a_driver_error_propagates_and_rolls_back(connection):
    """persistence.md §3.1 rule 7: backend errors propagate unchanged (here: the table was dropped after the
    store's first call created it)."""
    store = SQLiteStore(connection)
    store.load("s0")
    connection.execute("DROP TABLE falai_sessions")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        store.save(Session(id="s1"), 0)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        store.load("s1")
    assert not connection.in_transaction


def test_a_path_is_opened_by_the_store_and_usable_from_other_threads(tmp_path):
    """persistence.md §3.4 (inferred): a path (str or PathLike) is opened with check_same_thread=False."""
    store = SQLiteStore(pathlib.Path(tmp_path) / "s.db")
    store.initialize()
    result = []
    thread = threading.Thread(target=lambda: result.append(store.save(Session(id="s1"), 0).version))
    thread.start()
    thread.join()
    assert result == [1] and store.load("s1").version == 1
    store.close()


def test_close_closes_the_connection_even_one_passed_in(connection):
    """persistence.md §3.4: close() closes the connection either way."""
    store = SQLiteStore(connection)
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("SELECT 1")


def test_a_connection_with_a_row_factory_still_loads(connection):
    """A host connection that returns sqlite3.Row objects works the same (inferred)."""
    connection.row_factory = sqlite3.Row
    store = SQLiteStore(connection)
    store.initialize()
    store.save(Session(id="s1"), 0)
    assert store.load("s1").version == 1
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 0)
    assert caught.value.actual_version == 1


def test_a_version_column_that_is_not_an_integer_gives_actual_version_none(connection):
    """persistence.md §3.4: actual_version is None when the column is not an integer."""
    store = SQLiteStore(connection)
    store.initialize()
    connection.execute("INSERT INTO falai_sessions VALUES ('s1', 'abc', '{}', 'x', 'x')")
    connection.commit()
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 0)
    assert caught.value.actual_version is None


def test_a_blob_stored_as_bytes_is_decoded_as_utf8(connection):
    """persistence.md §3.2, Read: bytes are decoded as UTF-8, then parsed."""
    store = SQLiteStore(connection)
    store.initialize()
    blob = json.dumps({**Session(id="s1", data={"nome": "João"}).to_dict(), "version": 1}, ensure_ascii=False)
    connection.execute("INSERT INTO falai_sessions VALUES ('s1', 1, ?, 'x', 'x')", (blob.encode("utf-8"),))
    connection.commit()
    assert store.load("s1").data == {"nome": "João"}


def test_a_schema_qualified_table_name_works(connection):
    """persistence.md §3.2: an optional `schema.` prefix is allowed."""
    store = SQLiteStore(connection, table="main.falai_v4")
    store.initialize()
    store.save(Session(id="s1"), 0)
    assert store.load("s1").version == 1


@pytest.mark.parametrize("table", ["1sessions", "a-b", "a.b.c", "x; DROP TABLE y", "", " t", "t ", ".t", "t.",
                                   "a b", 'quoted"name', None, 5])
def test_a_table_name_that_is_not_an_sql_identifier_raises_value_error(table):
    """persistence.md §3.2 (inferred): table names are interpolated, so a bad one fails at construction."""
    with pytest.raises(ValueError, match="not an SQL identifier"):
        SQLiteStore(":memory:", table=table)


def test_the_store_takes_a_connection_or_a_path():
    """python-api.md, Stores: db is a sqlite3 connection or a path; anything else is a TypeError."""
    with pytest.raises(TypeError, match="sqlite3.Connection or a path"):
        SQLiteStore(42)
