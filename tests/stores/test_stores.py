"""The Store conformance list, run against every store (persistence.md §3.1, §3.2, §3.7).

Each test runs on MemoryStore, SQLiteStore (":memory:", a file path, an open
sqlite3.Connection), PostgresStore and RedisStore (bytes and decoded clients).
Postgres and Redis run against the real local servers and skip with a reason
when the driver is missing or the server is unreachable; set
FALAI_TEST_POSTGRES_DSN / FALAI_TEST_REDIS_URL to point elsewhere. Every run
uses its own table name / key prefix and removes it afterwards.
"""
import json
import math
import os
import sqlite3
import threading
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from falai import InvalidSessionError, MemoryStore, Run, Session, SessionConflictError, Store
from falai_stores import PostgresStore, RedisStore, SQLiteStore
from conftest import postgres_connection, redis_client, unique_name

BARE_KEYS = {"claims", "data", "id", "inputs", "metadata", "runs", "v", "version"}


# Backends: one store (or several over the same rows) and a raw seam ----------------------------

class MemoryBackend:
    def __init__(self, tmp_path):
        self._store = MemoryStore()

    def stores(self, n):
        return [self._store] * n

    def put_raw(self, session_id, text, version=1):
        self._store._rows[session_id] = (version, text)

    def close(self):
        pass


class SQLiteBackend:
    def __init__(self, tmp_path, mode):
        self.table = unique_name()
        self.path = str(tmp_path / "sessions.db")
        if mode == "memory":
            self._stores = [SQLiteStore(":memory:", table=self.table)]
        elif mode == "connection":
            self._stores = [SQLiteStore(sqlite3.connect(self.path, check_same_thread=False), table=self.table)]
        else:
            self._stores = [SQLiteStore(self.path, table=self.table)]
        self.mode = mode
        self._stores[0].initialize()

    def stores(self, n):
        """Separate connections to the same file where there is a file; else the one store, shared."""
        if self.mode == "memory":
            return self._stores * n
        while len(self._stores) < n:
            self._stores.append(SQLiteStore(self.path, table=self.table))
        return self._stores[:n]

    def put_raw(self, session_id, text, version=1):
        connection = self._stores[0].connection
        connection.execute(f"INSERT INTO {self.table} VALUES (?, ?, ?, 'x', 'x')", (session_id, version, text))
        connection.commit()

    def close(self):
        for store in self._stores:
            store.close()


class PostgresBackend:
    def __init__(self, tmp_path):
        self.table = unique_name()
        self._stores = [PostgresStore(postgres_connection(), table=self.table)]
        self._stores[0].initialize()

    def stores(self, n):
        while len(self._stores) < n:
            self._stores.append(PostgresStore(postgres_connection(), table=self.table))
        return self._stores[:n]

    def put_raw(self, session_id, text, version=1):
        connection = self._stores[0].connection
        connection.execute(f"INSERT INTO {self.table} (id, version, blob) VALUES (%s, %s, %s::jsonb)",
                           (session_id, version, text))
        connection.commit()

    def close(self):
        connection = self._stores[0].connection
        connection.rollback()
        connection.execute(f"DROP TABLE IF EXISTS {self.table}")
        connection.commit()
        for store in self._stores:
            store.close()


class RedisBackend:
    def __init__(self, tmp_path, decode_responses):
        self.decode_responses = decode_responses
        self.prefix = unique_name("falai_test") + ":"
        self._stores = [RedisStore(redis_client(decode_responses), key_prefix=self.prefix)]

    def stores(self, n):
        while len(self._stores) < n:
            self._stores.append(RedisStore(redis_client(self.decode_responses), key_prefix=self.prefix))
        return self._stores[:n]

    def put_raw(self, session_id, text, version=1):
        self._stores[0].client.hset(self._stores[0].key(session_id),
                                    mapping={"version": str(version), "blob": text})

    def close(self):
        client = self._stores[0].client
        for key in client.scan_iter(match=self.prefix + "*"):
            client.delete(key)
        for store in self._stores:
            store.close()


BACKENDS = {
    "memory": MemoryBackend,
    "sqlite-memory": lambda tmp: SQLiteBackend(tmp, "memory"),
    "sqlite-file": lambda tmp: SQLiteBackend(tmp, "file"),
    "sqlite-connection": lambda tmp: SQLiteBackend(tmp, "connection"),
    "postgres": PostgresBackend,
    "redis": lambda tmp: RedisBackend(tmp, False),
    "redis-decoded": lambda tmp: RedisBackend(tmp, True),
}


@pytest.fixture(params=list(BACKENDS))
def backend(request, tmp_path):
    made = BACKENDS[request.param](tmp_path)
    made.name = request.param
    yield made
    made.close()


@pytest.fixture
def store(backend):
    return backend.stores(1)[0]


def full_session(session_id="s1") -> Session:
    """Every optional key set (§3.7 item 9): a waiting run with input and a payload holding [1, "a", null]."""
    run = Run(id="w#1", flow_id="w", anchor=session_id, dedupe_key=f"w:{session_id}:", step_id="w1",
              status="waiting", trigger={"kind": "event", "key": "e1", "payload": [1, "a", None]}, hop=1,
              started_at="2026-09-20T10:00:00.000Z", asked={"nome": 1}, visits={"w1": 1},
              outcomes=[{"runId": "w#1", "kind": "wait", "status": "waiting", "at": "2026-09-20T10:00:00.000Z"}],
              input={"pedido": 42}, waiting={"kind": "timer", "key": "w#1:w1:1", "until": "2026-09-21T10:00:00.000Z",
                                             "setAt": "2026-09-20T10:00:00.000Z"})
    return Session(id=session_id, data={"nome": "João", "itens": [1, 2.5, None]}, runs=[run],
                   claims={"sempre:full:wamid.HBgN.abc": {"at": "2026-09-20T10:00:00.000Z"}},
                   inputs=["m1", "m2"], metadata={"a": {"b": [1, {"c": "ção"}]}},
                   last_user_at="2026-09-20T10:00:00.000Z", last_assistant_at="2026-09-20T10:00:01.000Z",
                   history=[{"role": "user", "content": "oi"}])


def run_concurrently(calls):
    """Start every call at once (a barrier); return each call's result or exception, in order."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def worker(index, call):
        barrier.wait()
        try:
            results[index] = call()
        except Exception as error:        # noqa: BLE001 - the test inspects what each call raised
            results[index] = error

    threads = [threading.Thread(target=worker, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


# §3.7 conformance ------------------------------------------------------------------------------

def test_store_satisfies_the_store_protocol(store):
    """persistence.md §3.1: two methods, load and save."""
    assert isinstance(store, Store)


def test_load_of_an_unknown_id_is_none(store):
    """persistence.md §3.7 item 1, §3.1 rule 4."""
    assert store.load("nobody") is None


def test_insert_at_version_0_returns_a_new_session_at_version_1_and_leaves_the_argument_alone(store):
    """persistence.md §3.7 item 2, §3.1 rule 2: save returns a new Session at expected_version + 1; the argument
    keeps its version; load then equals the argument with version 1."""
    fresh = Session(id="s1", data={"nome": "Ana"})
    before = fresh.to_dict()
    saved = store.save(fresh, 0)
    assert saved is not fresh and saved.version == 1 and fresh.version == 0
    assert fresh.to_dict() == before
    assert saved == replace(fresh, version=1)
    assert store.load("s1").to_dict() == {**fresh.to_dict(), "version": 1}


def test_update_at_n_stores_n_plus_1_and_the_next_load_sees_it(store):
    """persistence.md §3.7 item 3, §3.1: save(session, n) updates only from n and stores n + 1."""
    saved = store.save(Session(id="s1", data={"step": 0}), 0)
    for n in (1, 2, 3):
        saved = store.save(replace(saved, data={"step": n}), n)
        assert saved.version == n + 1
        loaded = store.load("s1")
        assert (loaded.version, loaded.data) == (n + 1, {"step": n})


def test_stale_save_conflicts_with_the_stored_version_and_keeps_the_winners_data(store):
    """persistence.md §3.7 item 4, §3.1 rule 3, Part 5: the error carries session_id, expected and actual version."""
    store.save(Session(id="s1"), 0)
    store.save(Session(id="s1", data={"who": "winner"}), 1)
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1", data={"who": "loser"}), 1)
    error = caught.value
    assert (error.session_id, error.expected_version, error.actual_version) == ("s1", 1, 2)
    assert str(error) == ('[SessionConflictError] Session "s1" was modified concurrently: expected version 1, '
                          "found 2. Reload the session and retry the operation.")
    loaded = store.load("s1")
    assert (loaded.version, loaded.data) == (2, {"who": "winner"})


def test_a_save_from_a_version_ahead_of_the_row_conflicts_too(store):
    """persistence.md §3.1: n > 0 updates only when the stored version is exactly n."""
    store.save(Session(id="s1"), 0)
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 5)
    assert (caught.value.expected_version, caught.value.actual_version) == (5, 1)
    assert store.load("s1").version == 1


def test_insert_over_an_existing_row_is_a_conflict_not_an_overwrite(store):
    """persistence.md §3.7 item 5: expected_version 0 finds a row -> conflict with actual_version 1."""
    store.save(Session(id="s1", data={"first": True}), 0)
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1", data={"second": True}), 0)
    assert (caught.value.expected_version, caught.value.actual_version) == (0, 1)
    assert str(caught.value) == ('[SessionConflictError] Session "s1" was modified concurrently: expected version 0, '
                                 "found 1. Reload the session and retry the operation.")
    assert store.load("s1").data == {"first": True}


def test_save_at_n_for_a_missing_row_is_a_gone_conflict_and_creates_nothing(store):
    """persistence.md §3.7 item 6, Part 5: no row -> actual_version None and the "gone from the store" message."""
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 3)
    assert (caught.value.session_id, caught.value.expected_version, caught.value.actual_version) == ("s1", 3, None)
    assert str(caught.value) == ('[SessionConflictError] Session "s1" is gone from the store: it was at version 3 '
                                 "and has since been deleted or expired. Load it again; a load that finds nothing "
                                 "starts a new conversation.")
    assert store.load("s1") is None


def test_five_concurrent_saves_from_the_same_version_exactly_one_wins(backend):
    """persistence.md §3.7 item 7, §3.1 rule 1: check and write are one atomic step; every loser's
    actual_version is the winner's version, and the stored data is the winner's. Each thread has its own
    connection / client where the backend has them."""
    stores = backend.stores(5)
    stores[0].save(Session(id="s1"), 0)
    results = run_concurrently([lambda i=i: stores[i].save(Session(id="s1", data={"writer": i}), 1)
                                for i in range(5)])
    winners = [r for r in results if isinstance(r, Session)]
    losers = [r for r in results if isinstance(r, SessionConflictError)]
    assert len(winners) == 1 and len(losers) == 4, results
    assert all(loser.actual_version == 2 and loser.expected_version == 1 for loser in losers)
    assert stores[0].load("s1").data == winners[0].data and winners[0].version == 2


def test_five_threads_sharing_one_store_still_see_one_winner(store):
    """persistence.md §3.1 rule 1 (inferred for shared stores: calls on one store are serialized)."""
    store.save(Session(id="s1"), 0)
    results = run_concurrently([lambda i=i: store.save(Session(id="s1", data={"writer": i}), 1) for i in range(5)])
    assert sum(isinstance(r, Session) for r in results) == 1
    assert sorted(r.actual_version for r in results if isinstance(r, SessionConflictError)) == [2, 2, 2, 2]


def test_two_concurrent_inserts_exactly_one_wins(backend):
    """persistence.md §3.7 item 8: two inserts at version 0 -> one row, one conflict with actual_version 1."""
    stores = backend.stores(2)
    results = run_concurrently([lambda i=i: stores[i].save(Session(id="s1", data={"writer": i}), 0)
                                for i in range(2)])
    winners = [r for r in results if isinstance(r, Session)]
    losers = [r for r in results if isinstance(r, SessionConflictError)]
    assert len(winners) == 1 and len(losers) == 1, results
    assert losers[0].actual_version == 1
    assert stores[0].load("s1").data == winners[0].data


def test_a_bare_session_round_trips_with_exactly_the_eight_keys(store):
    """persistence.md §3.7 items 9 and 10: nothing added on save or on load."""
    saved = store.save(Session(id="s1"), 0)
    assert set(saved.to_dict()) == BARE_KEYS
    assert set(store.load("s1").to_dict()) == BARE_KEYS


def test_a_full_session_round_trips_equal_at_version_1(store):
    """persistence.md §3.7 item 9: lastUserAt, lastAssistantAt, history, a waiting run with input and a payload
    holding [1, "a", null], a claim key with dots, nested metadata all load equal."""
    session = full_session()
    store.save(session, 0)
    assert store.load("s1").to_dict() == {**session.to_dict(), "version": 1}


@pytest.mark.parametrize("raw, why_start", [
    ('{"nope": true}', "v is missing, expected 4"),
    (json.dumps({"id": "s1", "data": {"a": 1}, "currentFlow": {"id": "f"}, "version": 3}), "v is missing"),
    (json.dumps({**Session(id="other").to_dict(), "version": 1}), 'id is "other", expected "s1"'),
    ('"just text"', 'expected an object, got "just text"'),
    ("[1, 2]", "expected an object, got a list"),
], ids=["not-a-session", "3.x-blob", "another-sessions-blob", "json-text", "json-list"])
def test_a_row_that_is_not_a_v4_session_for_that_id_raises_on_load(backend, store, raw, why_start):
    """persistence.md §3.7 item 11, §3.1 rule 4: stores never migrate; the message names the session.

    A JSONB string comes back from the driver as a str, which §3.2 reads as text to parse, so on Postgres the
    JSON string "just text" is reported as not valid JSON."""
    if backend.name == "postgres" and raw == '"just text"':
        why_start = "blob is not valid JSON"
    backend.put_raw("s1", raw)
    with pytest.raises(InvalidSessionError) as caught:
        store.load("s1")
    assert str(caught.value).startswith(f'[InvalidSessionError] stored session "s1" is unreadable: {why_start}')
    assert caught.value.session_id == "s1"


@pytest.mark.parametrize("raw", ["{not json", "", "NaN", '{"id": "s1", "v": 4, "version": NaN}'])
def test_a_row_that_is_not_json_raises_invalid_session(backend, store, raw):
    """persistence.md §3.2, Read: text that does not parse -> InvalidSessionError "blob is not valid JSON"
    (NaN is not JSON, as JavaScript's JSON.parse says; inferred)."""
    if backend.name == "postgres":
        pytest.skip("a JSONB column cannot hold text that is not JSON; test_store_postgres covers a text column")
    backend.put_raw("s1", raw)
    with pytest.raises(InvalidSessionError) as caught:
        store.load("s1")
    assert str(caught.value) == ('[InvalidSessionError] stored session "s1" is unreadable: blob is not valid JSON. '
                                 "Repair or delete the row; it is never replaced by a fresh conversation.")


@pytest.mark.parametrize("expected_version", [-1, True, False, 1.0, "1", None, 0.0])
def test_a_bad_expected_version_raises_value_error_before_touching_the_backend(store, expected_version):
    """persistence.md §3.1 rule 6 (inferred): expected_version must be an int >= 0, not a bool."""
    with pytest.raises(ValueError, match="expected_version"):
        store.save(Session(id="s1"), expected_version)
    assert store.load("s1") is None


def test_datetimes_become_text_and_tuples_lists_on_the_way_through(store):
    """persistence.md §3.2, Write; §3.3: a datetime inside is written as §2.4 text; tuples come back as lists."""
    at = datetime(2026, 9, 20, 10, 0, 0, 123456, tzinfo=timezone.utc)
    saved = store.save(Session(id="s1", data={"quando": at, "par": (1, 2)}, metadata={"l": [at]}), 0)
    assert saved.data["quando"] is at              # save returns what it was given, at version + 1
    loaded = store.load("s1")
    assert loaded.data == {"quando": "2026-09-20T10:00:00.123Z", "par": [1, 2]}
    assert loaded.metadata == {"l": ["2026-09-20T10:00:00.123Z"]}


@pytest.mark.parametrize("value, error", [(math.nan, ValueError), (math.inf, ValueError), ({1, 2}, TypeError),
                                          (object(), TypeError), (b"bytes", TypeError)],
                         ids=["nan", "inf", "set", "object", "bytes"])
def test_a_value_json_cannot_hold_fails_at_save_and_writes_nothing(store, value, error):
    """persistence.md §3.2, Write (inferred): a non-finite float raises ValueError, any other value JSON cannot
    hold raises TypeError; nothing is written."""
    with pytest.raises(error):
        store.save(Session(id="s1", data={"x": value}), 0)
    assert store.load("s1") is None


def test_save_takes_a_session(store):
    """python-api.md, One turn: a wrong call argument is a TypeError (inferred for save)."""
    with pytest.raises(TypeError, match="Session"):
        store.save(Session(id="s1").to_dict(), 0)


def test_conflict_writes_nothing(store):
    """python-api.md, Stores: a stale version raises SessionConflictError, and nothing is written."""
    store.save(Session(id="s1", data={"a": 1}), 0)
    store.save(Session(id="s1", data={"a": 2}), 1)
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1", data={"a": 3}), 1)
    with pytest.raises(SessionConflictError):
        store.save(Session(id="s1", data={"a": 4}), 0)
    loaded = store.load("s1")
    assert (loaded.version, loaded.data) == (2, {"a": 2})


def test_sessions_are_kept_apart_by_id(store):
    """persistence.md §3.1: one row per session id; ids may hold any characters."""
    ids = ["s1", "s2", "lead:456", "ção ✓", "a'b\"c"]
    for i, session_id in enumerate(ids):
        store.save(Session(id=session_id, data={"i": i}), 0)
    assert [store.load(session_id).data["i"] for session_id in ids] == list(range(len(ids)))


def test_the_host_loop_replays_after_a_conflict(store):
    """persistence.md §3.1: load -> turn -> save with the loaded version; on a conflict, load again and replay."""
    first = store.save(Session(id="s1", inputs=[]), 0)
    a = store.load("s1")
    b = store.load("s1")
    store.save(replace(a, inputs=a.inputs + ["m1"]), a.version)
    with pytest.raises(SessionConflictError):
        store.save(replace(b, inputs=b.inputs + ["m2"]), b.version)
    again = store.load("s1")
    store.save(replace(again, inputs=again.inputs + ["m2"]), again.version)
    assert store.load("s1").inputs == ["m1", "m2"] and store.load("s1").version == first.version + 2


def test_falai_stores_imports_no_database_driver():
    """persistence.md, module placement: falai_stores imports sqlite3 only, never a Postgres or Redis driver."""
    import subprocess
    import sys
    code = ("import sys; before = set(sys.modules); import falai_stores; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(','.join(sorted(m for m in new if m not in sys.stdlib_module_names and m not in ('falai', 'falai_base', 'falai_stores'))))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == ""


# One contract for ids and data, every store (docs/guide/stores.md, "What every store keeps") ----

BAD_IDS = [
    ("", ValueError, "is empty"),
    ("a" * 256, ValueError, "256 characters long, over the 255"),
    ("x\x00y", ValueError, "NUL character"),
    ("\x00", ValueError, "NUL character"),
    ("a\ud800b", ValueError, "lone surrogate"),
    (7, TypeError, "a session id is a string, not int"),
    (None, TypeError, "not NoneType"),
]


@pytest.mark.parametrize("session_id, error, words", BAD_IDS)
def test_every_store_refuses_the_same_ids_with_the_same_error(backend, session_id, error, words):
    """A NUL, an id over 255 characters, an empty id or a lone surrogate: one clear error, from
    load and from save, on every store, never a driver's; nothing is written."""
    store = backend.stores(1)[0]
    with pytest.raises(error, match=words) as caught:
        store.save(Session(id=session_id), 0)
    if error is ValueError:
        assert "nothing was read or written" in str(caught.value) and "Use an id of 1 to 255" in str(caught.value)
    with pytest.raises(error, match=words):
        store.load(session_id)
    store.save(Session(id="still-works"), 0)                    # the store (and its connection) carries on
    assert store.load("still-works").version == 1


@pytest.mark.parametrize("session_id", ["a" * 255, "ção ✓ " * 30, "lead:456 / 'x' \"y\" \\ %", "\U0001F600" * 255])
def test_every_store_keeps_every_id_within_the_contract(store, session_id):
    session_id = session_id[:255]
    store.save(Session(id=session_id, data={"ok": True}), 0)
    assert store.load(session_id).data == {"ok": True}


@pytest.mark.parametrize("data, where", [
    ({"nome": "Ana\x00"}, "data.nome"),
    ({"lista": ["ok", "a\x00"]}, "data.lista[1]"),
    ({"chave\x00": 1}, "(a key)"),
    ({"nome": "\ud83d"}, "data.nome"),
])
def test_every_store_refuses_text_no_database_keeps(backend, data, where):
    """NUL in session data (Postgres's JSONB refuses it) or a lone surrogate (not UTF-8): one
    ValueError naming where, on every store; the stored session stays as it was."""
    store = backend.stores(1)[0]
    saved = store.save(Session(id="s1", data={"nome": "Ana"}), 0)
    with pytest.raises(ValueError) as caught:
        store.save(replace(saved, data=data), saved.version)
    message = str(caught.value)
    assert message.startswith('session "s1" holds a ') and where in message
    assert "nothing was written" in message and "docs/guide/stores.md" in message
    assert store.load("s1").data == {"nome": "Ana"} and store.load("s1").version == 1


@pytest.mark.parametrize("text", ["a\\u0000b", "\\\\u0000", "\\" * 20_000 + "u0000", "\u2028\ufeff\x01\x7f"])
def test_every_store_keeps_text_that_only_looks_like_a_nul(store, text):
    """A backslash before "u0000", control characters and the rest of Unicode are kept as written."""
    store.save(Session(id="s1", data={"t": text}), 0)
    assert store.load("s1").data == {"t": text}
