"""falai_stores: homes for falai sessions (persistence.md Part 3).

Four stores with one contract, the ``Store`` protocol: ``load(session_id)`` and
``save(session, expected_version)`` with compare-and-swap (persistence.md §3.1):

   MemoryStore ...... in process, for tests, prototypes and offline demos (§3.3)
   SQLiteStore ...... the embedded default, over the standard library's sqlite3
   PostgresStore .... over the host's DB-API connection (psycopg 3, psycopg2); JSONB blob
   RedisStore ....... over the host's redis-py client; one hash per session, one Lua script per save

``import falai`` is all a user needs: ``falai.Store`` and ``falai.MemoryStore``
load this module on first use. The two SQL stores share one ``load`` and
``save`` (``_SqlStore``); each brings its own statements and transaction rules.

This module imports ``sqlite3`` and ``falai`` only. It never imports a Postgres
or Redis driver: the host passes the client it already has. Every store writes
and reads the blob through the shared row rules (persistence.md §3.2,
``encode_session_row`` and ``decode_session_row`` here), so a row written by one
implementation loads in the other.

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from falai_base import (
    ABSENT, BLOB_NESTING, InvalidSessionError, MAX_NESTING, Session, SessionConflictError, iso,
    nests_deeper, system_clock,
)

__all__ = ["Store", "MemoryStore", "SQLiteStore", "PostgresStore", "RedisStore"]

DEFAULT_TABLE = "falai_sessions"


def _first_column(row: Any) -> Any:
    """The first column of a fetched row, whether the driver gives tuples or mappings (a dict
    row factory)."""
    if hasattr(row, "values") and not isinstance(row, (tuple, list)):
        return next(iter(row.values()))
    return row[0]


def _stored_version(value: Any) -> int | None:
    """A version column (or Redis field) as an int; None when absent or not an integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, str)):
        try:
            return int(value)
        except ValueError:
            return None
    return None


# The Store protocol, the row rules every store shares, MemoryStore ############
#
# The shared row rules (persistence.md §3.2) live here so that every store,
# MemoryStore and the database stores alike, writes and reads the same blob the
# same way (persistence.md §3.1-§3.3).

@runtime_checkable
class Store(Protocol):
    """A durable home for sessions: load, and save with compare-and-swap (persistence.md §3.1)."""

    def load(self, session_id: str) -> Session | None: ...

    def save(self, session: Session, expected_version: int) -> Session: ...


# Text: re compiles it on first use, not at import.
SQL_TABLE_NAME = r"(?:[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*"


def check_expected_version(expected_version: Any) -> int:
    """An int >= 0 (not a bool), else ValueError before the backend is touched (persistence.md
    §3.1 rule 6)."""
    if (isinstance(expected_version, bool) or not isinstance(expected_version, int)
            or expected_version < 0):
        raise ValueError("expected_version must be a whole number (an int >= 0), not "
                         f"{expected_version!r}. Pass the version you loaded, or 0 for a session "
                         "that has no row yet.")
    return expected_version


def check_table_name(table: Any) -> str:
    """A table name is an SQL identifier with at most one `schema.` prefix, else ValueError
    (§3.2)."""
    if not isinstance(table, str) or re.fullmatch(SQL_TABLE_NAME, table) is None:
        raise ValueError(f"table {table!r} is not an SQL identifier: use letters, digits and _, "
                         'not starting with a digit, with at most one "schema." prefix.')
    return table


def _row_json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    raise TypeError(f"a session cannot hold {type(value).__name__} values: only JSON values and "
                    "datetimes can be stored")


MAX_SESSION_ID = 255           # characters: PostgresStore's VARCHAR(255), the bound of every store


def check_session_id(session_id: Any) -> str:
    """The session id every store accepts, or the error naming why not (docs/guide/stores.md).

    One contract for every store: a non-empty string of at most ``MAX_SESSION_ID``
    characters, with no NUL character and no lone surrogate (neither is text a
    database keeps). A non-string raises TypeError, anything else ValueError.
    """
    if not isinstance(session_id, str):
        raise TypeError(f"a session id is a string, not {type(session_id).__name__}")
    problem = None
    if not session_id:
        problem = "is empty"
    elif len(session_id) > MAX_SESSION_ID:
        problem = f"is {len(session_id)} characters long, over the {MAX_SESSION_ID} a store keeps"
    elif "\x00" in session_id:
        problem = "contains a NUL character (U+0000), which no database keeps in text"
    elif _SURROGATE.search(session_id):
        problem = "contains a lone surrogate, which is not UTF-8 text"
    if problem:
        shown = f"{session_id[:40]!r}{'...' if len(session_id) > 40 else ''}"
        raise ValueError(f"the session id {shown} {problem}: nothing was read or written. Use "
                         f"an id of 1 to {MAX_SESSION_ID} printable characters, e.g. the channel's "
                         "user id or a hash of it.")
    return session_id


_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_session_row(session: Session, expected_version: int) -> str:
    """The blob a save writes: compact JSON text, `version` = expected_version + 1 (§3.2, Write).

    A datetime anywhere inside becomes §2.4 text; a non-finite float, a blob
    nested deeper than BLOB_NESTING, a bad id (``check_session_id``) or text no
    database keeps (a NUL character, a lone surrogate) raises ValueError, and any
    other value JSON cannot hold raises TypeError.
    """
    if not isinstance(session, Session):
        raise TypeError(f"save() takes a Session, not {type(session).__name__}")
    check_session_id(session.id)
    blob = {**session.to_dict(), "version": expected_version + 1}
    if nests_deeper(blob, BLOB_NESTING):   # saved, it would never load (docs/guide/limits.md)
        raise ValueError(f'session "{session.id}" nests deeper than {BLOB_NESTING} levels (a value '
                         f"may nest {MAX_NESTING}): nothing was written. Flatten the deep value.")
    text = json.dumps(blob, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=_row_json_default)
    _check_row_text(session.id, blob, text)
    return text


def _check_row_text(session_id: str, blob: dict, text: str) -> None:
    """Refuse text no database keeps, naming where it is: Postgres's JSONB refuses a NUL
    character, and no driver encodes a lone surrogate as UTF-8 (docs/guide/stores.md)."""
    nul = _has_nul_escape(text)
    surrogate = not nul and _SURROGATE.search(text) is not None
    if not (nul or surrogate):
        return
    what, found = (("a NUL character (U+0000)", lambda t: "\x00" in t) if nul else
                   ("a lone surrogate (not UTF-8 text)",
                    lambda t: _SURROGATE.search(t) is not None))
    raise ValueError(f'session "{session_id}" holds {what} at {_text_path(blob, found)}, which '
                     "no store keeps: nothing was written. Clean the value before it enters the "
                     'session, e.g. value.replace("\\x00", "") (docs/guide/stores.md).')


def _has_nul_escape(text: str) -> bool:
    """Whether JSON text holds the escape \\u0000: "u0000" after an odd run of backslashes.
    Each run is counted once, from its end, so the check is linear in the text."""
    at = text.find("u0000")
    while at >= 0:
        start = at
        while start > 0 and text[start - 1] == "\\":
            start -= 1
        if (at - start) % 2 == 1:
            return True
        at = text.find("u0000", at + 5)
    return False


def _text_path(blob: dict, found: Callable[[str], bool]) -> str:
    """The path of the first key or string in ``blob`` for which ``found`` holds (iterative)."""
    stack: list[tuple[str, Any]] = [("", blob)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and found(value):
            return path or "the blob"
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if isinstance(key, str) and found(key):
                    return f"{path}.{key!r}".lstrip(".") + " (a key)"
                stack.append((f"{path}.{key}".lstrip("."), item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return "the blob"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_session_row(raw: Any, session_id: str) -> Session:
    """A stored blob as a Session (§3.2, Read): text or UTF-8 bytes are parsed, a parsed value used.

    NaN and Infinity are refused like any other text that is not JSON, as
    JavaScript's JSON.parse refuses them (inferred).
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSessionError(session_id, "blob is not valid JSON") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw, parse_constant=_reject_constant)
        except ValueError:
            raise InvalidSessionError(session_id, "blob is not valid JSON") from None
        except RecursionError:
            raise InvalidSessionError(session_id,
                                      f"it nests deeper than {BLOB_NESTING} levels") from None
    return Session.from_dict(raw, session_id=session_id)


def saved_session(session: Session, expected_version: int) -> Session:
    """What `save` returns: a new Session equal to the argument at version + 1 (§3.1 rule 2)."""
    return replace(session, version=expected_version + 1)


def store_now_text() -> str:
    """"Now" for created / updated columns: the store's own wall clock, as §2.4 text (§3.2)."""
    return iso(system_clock())


class MemoryStore:
    """An in-process Store for tests, prototypes and offline demos (persistence.md §3.3).

    Rows are kept as ``id -> (version, JSON text)`` and read back through the
    shared row rules, so a session round-trips exactly as through a database.
    One lock covers ``load`` and ``save``, so concurrent threads see the atomic
    compare-and-swap of §3.1.

    >>> store = MemoryStore()
    >>> saved = store.save(Session(id="s1", data={"nome": "Ana"}), 0)
    >>> (saved.version, store.load("s1").data)
    (1, {'nome': 'Ana'})
    """

    def __init__(self):
        self._rows: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str) -> Session | None:
        """The stored session, or None when there is no row; a bad row raises
        InvalidSessionError."""
        check_session_id(session_id)
        with self._lock:
            row = self._rows.get(session_id)
        return None if row is None else decode_session_row(row[1], session_id)

    def save(self, session: Session, expected_version: int) -> Session:
        """Insert (expected_version 0) or update (n > 0) in one locked step; a stale one raises
        SessionConflictError and writes nothing."""
        check_expected_version(expected_version)
        text = encode_session_row(session, expected_version)
        with self._lock:
            row = self._rows.get(session.id)
            actual = None if row is None else row[0]
            if actual != (None if expected_version == 0 else expected_version):
                raise SessionConflictError(session.id, expected_version, actual)
            self._rows[session.id] = (expected_version + 1, text)
        return saved_session(session, expected_version)

    def clear(self) -> None:
        """Drop every session."""
        with self._lock:
            self._rows.clear()


# SQL stores ##################################################################

class _SqlStore:
    """What SQLiteStore and PostgresStore share: one row per session, saved by compare-and-swap.

    persistence.md §3.1.

    A subclass names its driver's parameter marker and provides ``_run(work)``,
    which runs ``work(cursor)`` under its lock and transaction rules, and
    ``_write(cursor, session_id, expected_version, text) -> won``, its dialect of
    the insert-at-0 and update-from-n statements.
    """

    table: str
    connection: Any               # the driver's connection: sqlite3's or psycopg's
    _lock: threading.Lock
    _PARAM = "?"
    _CREATE = ""            # the CREATE TABLE IF NOT EXISTS statement; "" means "never create"
    _table_ready = True

    def _run(self, work: Callable[[Any], Any]) -> Any:
        raise NotImplementedError       # each subclass runs work(cursor) under its own rules

    def _write(self, cursor: Any, session_id: str, expected_version: int, text: str) -> bool:
        raise NotImplementedError       # each subclass writes in its own SQL dialect

    def _ensure_table(self, cursor: Any) -> None:
        """Create the table on the store's first call (SQLite); a no-op once a call has
        succeeded."""
        if self._CREATE and not self._table_ready:
            cursor.execute(self._CREATE.format(table=self.table))

    def load(self, session_id: str) -> Session | None:
        """The stored session, or None; a row that is not a v4 session for this id raises
        InvalidSessionError."""
        check_session_id(session_id)

        def read(cursor) -> Any:
            self._ensure_table(cursor)
            cursor.execute(f"SELECT blob FROM {self.table} WHERE id = {self._PARAM}", (session_id,))
            return cursor.fetchone()

        try:
            row = self._run(read)
        except RecursionError:      # a driver that parses JSONB itself (psycopg), a row too deep
            raise InvalidSessionError(session_id,
                                      f"it nests deeper than {BLOB_NESTING} levels") from None
        self._table_ready = True     # only once a call got through: a rolled-back CREATE is redone
        return None if row is None else decode_session_row(_first_column(row), session_id)

    def save(self, session: Session, expected_version: int) -> Session:
        """Insert at 0, or update only from ``expected_version``; a stale save raises
        SessionConflictError."""
        check_expected_version(expected_version)
        text = encode_session_row(session, expected_version)

        def write(cursor) -> tuple[bool, int | None]:
            """(won, the stored version read after a conflict)."""
            self._ensure_table(cursor)
            if self._write(cursor, session.id, expected_version, text):
                return True, None
            cursor.execute(f"SELECT version FROM {self.table} WHERE id = {self._PARAM}",
                           (session.id,))
            row = cursor.fetchone()
            return False, None if row is None else _stored_version(_first_column(row))

        won, actual = self._run(write)
        self._table_ready = True
        if not won:
            raise SessionConflictError(session.id, expected_version, actual)
        return saved_session(session, expected_version)

    def close(self) -> None:
        """Close the connection (also one the host passed in)."""
        with self._lock:
            self.connection.close()


class SQLiteStore(_SqlStore):
    """A Store over SQLite (persistence.md §3.4): one row per session, one statement per save.

    ``db`` is an open ``sqlite3.Connection`` or a path the store opens itself.
    The table is created on first use (``CREATE TABLE IF NOT EXISTS``, once per
    store); ``initialize()`` creates it up front. ``close()`` closes the
    connection either way. Each save commits before it returns and a load
    leaves no transaction open; calls from several threads on one store are
    serialized by a lock.

    A path is opened with ``check_same_thread=False``, a busy timeout of
    ``timeout`` seconds (another process holding the write lock is waited for,
    not failed on) and ``journal_mode=WAL``: readers never block the writer,
    and a save costs one append to the ``-wal`` file beside the database rather
    than a rewrite of the rollback journal. Durability is unchanged from
    SQLite's default: ``synchronous=FULL``, so a save that returned survives a
    crash or power loss. WAL needs every process on one machine (not a network
    file system). A connection the host passes in is used as it is, journal
    mode included.

    >>> store = SQLiteStore(":memory:")
    >>> store.save(Session(id="s1"), 0).version
    1
    >>> store.load("s1").version
    1
    """

    _CREATE = ("CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
               "blob TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)")

    def __init__(self, db: sqlite3.Connection | str | os.PathLike, *, table: str = DEFAULT_TABLE,
                 timeout: float = 5.0):
        self.table = check_table_name(table)
        if isinstance(db, sqlite3.Connection):
            self.connection = db
        elif isinstance(db, (str, os.PathLike)):
            self.connection = sqlite3.connect(db, timeout=timeout, check_same_thread=False)
            self.connection.execute("PRAGMA journal_mode=WAL")
            self.connection.execute("PRAGMA synchronous=FULL")
        else:
            raise TypeError("SQLiteStore takes a sqlite3.Connection or a path, "
                            f"not {type(db).__name__}")
        self._lock = threading.Lock()
        self._table_ready = False

    def initialize(self) -> None:
        """Create the table when it is missing (the first load or save does it too)."""
        self._run(lambda cursor: cursor.execute(self._CREATE.format(table=self.table)))
        self._table_ready = True

    def _write(self, cursor: sqlite3.Cursor, session_id: str, expected_version: int,
               text: str) -> bool:
        now = store_now_text()
        if expected_version == 0:
            cursor.execute(f"INSERT OR IGNORE INTO {self.table} "
                           "(id, version, blob, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                           (session_id, 1, text, now, now))
        else:
            cursor.execute(f"UPDATE {self.table} SET version = ?, blob = ?, updated_at = ? "
                           "WHERE id = ? AND version = ?",
                           (expected_version + 1, text, now, session_id, expected_version))
        if cursor.rowcount > 0:
            return True
        self.connection.commit()   # end the implicit transaction before the conflict read
        return False

    def _run(self, work):
        """Run ``work(cursor)`` under the lock; commit after it, roll back when it raises."""
        with self._lock:
            cursor = self.connection.cursor()
            try:
                result = work(cursor)
            except BaseException:
                with contextlib.suppress(Exception):     # the original error is the one to report
                    self.connection.rollback()
                raise
            finally:
                cursor.close()
            if self.connection.in_transaction:
                self.connection.commit()
            return result


class PostgresStore(_SqlStore):
    """A Store over PostgreSQL with a JSONB blob (persistence.md §3.5).

    ``connection`` is any DB-API 2.0 connection with the ``%s`` parameter style
    (psycopg 3, psycopg2); the store never imports a driver. With ``commit=True``
    (default) it commits after each call and rolls back when a call raises; with
    ``commit=False`` the host owns the transaction. Calls on one store are
    serialized by a lock, so threads sharing a store never commit or roll back
    each other's statements (inferred). JSONB arrives parsed; text is parsed
    (persistence.md §3.2).

    The table is not created on first use: a server's tables usually come from
    the host's migrations, the application's role may not be allowed to create
    one, and with ``commit=False`` the DDL would ride on the host's transaction.
    Call ``initialize()`` once (or run its statement in a migration); a call on a
    missing table raises a ``RuntimeError`` that says so, the driver's error
    chained as its cause.

    >>> store = PostgresStore(psycopg.connect("dbname=app"))   # doctest: +SKIP
    >>> store.initialize(); store.save(Session(id="s1"), 0).version   # doctest: +SKIP
    1
    """

    _PARAM = "%s"

    def __init__(self, connection: Any, *, table: str = DEFAULT_TABLE, commit: bool = True):
        self.table = check_table_name(table)
        self.connection = connection
        self.commit = commit
        self._lock = threading.Lock()

    def initialize(self) -> None:
        """Create the table when it is missing."""
        self._run(lambda c: c.execute(
            f"CREATE TABLE IF NOT EXISTS {self.table} (id VARCHAR(255) PRIMARY KEY, "
            "version INTEGER NOT NULL, "
            "blob JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), "
            "updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW())"))

    def _write(self, cursor: Any, session_id: str, expected_version: int, text: str) -> bool:
        if expected_version == 0:
            cursor.execute(f"INSERT INTO {self.table} (id, version, blob) "
                           "VALUES (%s, %s, %s::jsonb) "
                           "ON CONFLICT (id) DO NOTHING RETURNING version", (session_id, 1, text))
        else:
            cursor.execute(f"UPDATE {self.table} SET version = %s, blob = %s::jsonb, "
                           "updated_at = NOW() "
                           "WHERE id = %s AND version = %s RETURNING version",
                           (expected_version + 1, text, session_id, expected_version))
        return cursor.fetchone() is not None

    def _run(self, work):
        """Run ``work(cursor)`` under the lock; with ``commit=True``, commit after it or roll
        back."""
        with self._lock:
            cursor = self.connection.cursor()
            try:
                result = work(cursor)
            except BaseException as error:
                if self.commit:
                    with contextlib.suppress(Exception):   # the original error is the one to report
                        self.connection.rollback()
                if _is_undefined_table(error):
                    raise RuntimeError(f'PostgresStore: table "{self.table}" does not exist. '
                                       "Call store.initialize() once, or create the table in a "
                                       "migration.") from error
                raise
            finally:
                cursor.close()
            if self.commit:
                self.connection.commit()
            return result


def _is_undefined_table(error: BaseException) -> bool:
    """SQLSTATE 42P01, as psycopg 3 (``sqlstate``) and psycopg2 (``pgcode``) report it."""
    return "42P01" in (getattr(error, "sqlstate", None), getattr(error, "pgcode", None))


# Redis #######################################################################

# persistence.md §3.6: check and write in one server-side step.
# KEYS[1] the hash; ARGV: expected version, next version, blob, now, TTL seconds.
SAVE_SCRIPT = """
local stored = redis.call('HGET', KEYS[1], 'version')
if ARGV[1] == '0' then
  if stored then return stored end
elseif stored ~= ARGV[1] then
  if stored then return stored end
  return 'missing'
end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'blob', ARGV[3], 'updatedAt', ARGV[4])
redis.call('HSETNX', KEYS[1], 'createdAt', ARGV[4])
if tonumber(ARGV[5]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
return nil
"""

WEEK_SECONDS = 7 * 24 * 60 * 60


class RedisStore:
    """A Store over Redis (persistence.md §3.6): one hash per session, saved by one Lua script.

    ``client`` is a redis-py client, with or without ``decode_responses=True``.
    The hash lives at ``f"{key_prefix}session:{session_id}"`` with the fields
    ``version``, ``blob``, ``createdAt`` and ``updatedAt``. ``session_ttl``
    seconds, reset by every save, expire an idle session (default 7 days; ``0``
    never expires): set it above the longest wait a flow parks on.

    >>> store = RedisStore(redis.Redis(), session_ttl=30 * 24 * 3600)   # doctest: +SKIP
    >>> store.save(Session(id="s1"), 0).version   # doctest: +SKIP
    1
    """

    def __init__(self, client: Any, *, key_prefix: str = "falai:", session_ttl: int = WEEK_SECONDS):
        if not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a string, not {type(key_prefix).__name__}")
        if isinstance(session_ttl, bool) or not isinstance(session_ttl, int) or session_ttl < 0:
            raise ValueError(f"session_ttl must be a whole number of seconds (0 = never expires), "
                             f"not {session_ttl!r}")
        self.client = client
        self.key_prefix = key_prefix
        self.session_ttl = session_ttl
        self._save_script = client.register_script(SAVE_SCRIPT)

    def key(self, session_id: str) -> str:
        """The hash key of a session."""
        return f"{self.key_prefix}session:{session_id}"

    def load(self, session_id: str) -> Session | None:
        """The stored session, or None for an empty (or expired) hash."""
        fields = self.client.hgetall(self.key(check_session_id(session_id)))
        if not fields:
            return None
        blob = fields.get("blob", fields.get(b"blob", ABSENT))
        # no blob field: "expected an object, got missing"
        return decode_session_row(blob, session_id)

    def save(self, session: Session, expected_version: int) -> Session:
        """Insert at 0, or update only from ``expected_version``, in one script; a stale save raises
        SessionConflictError and writes nothing."""
        check_expected_version(expected_version)
        text = encode_session_row(session, expected_version)
        result = self._save_script(keys=[self.key(session.id)],
                                   args=[str(expected_version), str(expected_version + 1), text,
                                         store_now_text(), str(self.session_ttl)])
        if result is None:
            return saved_session(session, expected_version)
        if result in ("missing", b"missing"):
            raise SessionConflictError(session.id, expected_version, None)
        raise SessionConflictError(session.id, expected_version, _stored_version(result))

    def close(self) -> None:
        """Close the client."""
        self.client.close()

