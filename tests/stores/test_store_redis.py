"""RedisStore specifics (persistence.md §3.6); the shared conformance list is in test_stores.py.

The script-argument tests use a recording fake client (no server needed); the
rest run against the local server and skip with a reason when it or redis-py
is missing.
"""
import json
import re
import time

import pytest

from falai import InvalidSessionError, Session, SessionConflictError
from falai_stores import SAVE_SCRIPT, RedisStore
from conftest import redis_client, unique_name

ISO_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


class FakeScriptClient:
    """Records register_script and every script call; returns scripted results."""

    def __init__(self, results=()):
        self.results = list(results)
        self.registered = []
        self.calls = []
        self.closed = False

    def register_script(self, script):
        self.registered.append(script)

        def call(keys, args):
            self.calls.append((keys, args))
            return self.results.pop(0) if self.results else None
        return call

    def hgetall(self, key):
        return {}

    def close(self):
        self.closed = True


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def redis_store(request):
    """A store on the real server under a fresh key prefix; its keys are deleted afterwards."""
    client = redis_client(decode_responses=request.param)
    prefix = unique_name() + ":"
    yield RedisStore(client, key_prefix=prefix), client
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


def text(value):
    return value.decode() if isinstance(value, bytes) else value


# The script call (a recording fake) ---------------------------------------------------------

def test_save_calls_the_script_once_with_key_versions_blob_now_and_ttl():
    """persistence.md §3.6, §3.7 item 12: KEYS = the hash key; ARGV = "0", "1", the blob, now, the TTL text."""
    client = FakeScriptClient()
    store = RedisStore(client)
    saved = store.save(Session(id="s1", data={"a": 1}), 0)
    assert client.registered == [SAVE_SCRIPT]
    [(keys, args)] = client.calls
    assert keys == ["falai:session:s1"]
    assert args[:2] == ["0", "1"] and args[4] == "604800"
    assert json.loads(args[2]) == {**Session(id="s1", data={"a": 1}).to_dict(), "version": 1}
    assert ISO_TEXT.fullmatch(args[3]) and saved.version == 1


def test_an_update_passes_n_and_n_plus_1_and_the_ttl_given():
    """persistence.md §3.6: expected and next version as decimal text; session_ttl as text."""
    client = FakeScriptClient()
    RedisStore(client, key_prefix="agent:", session_ttl=0).save(Session(id="s1"), 41)
    [(keys, args)] = client.calls
    assert keys == ["agent:session:s1"] and (args[0], args[1], args[4]) == ("41", "42", "0")


@pytest.mark.parametrize("result, actual", [(b"3", 3), ("3", 3), (b"missing", None), ("missing", None),
                                            (b"garbage", None)])
def test_a_script_result_is_a_conflict_with_that_version_or_none(result, actual):
    """persistence.md §3.6: nil -> success; a version -> actual_version = int(result); "missing" -> None."""
    store = RedisStore(FakeScriptClient(results=[result]))
    with pytest.raises(SessionConflictError) as caught:
        store.save(Session(id="s1"), 2)
    assert (caught.value.expected_version, caught.value.actual_version) == (2, actual)


@pytest.mark.parametrize("ttl", [-1, 1.5, "60", None, True])
def test_a_bad_session_ttl_raises_value_error(ttl):
    """persistence.md §3.6 (inferred): session_ttl is whole seconds, 0 meaning never."""
    with pytest.raises(ValueError, match="session_ttl"):
        RedisStore(FakeScriptClient(), session_ttl=ttl)


def test_a_bad_expected_version_never_calls_the_script():
    """persistence.md §3.1 rule 6: ValueError before touching the backend."""
    client = FakeScriptClient()
    with pytest.raises(ValueError):
        RedisStore(client).save(Session(id="s1"), -1)
    assert client.calls == []


def test_close_closes_the_client():
    """persistence.md §3.6: close() is client.close()."""
    client = FakeScriptClient()
    RedisStore(client).close()
    assert client.closed


# Against the real server -----------------------------------------------------------------------

def test_one_hash_per_session_with_version_blob_and_timestamps(redis_store):
    """persistence.md §3.6, §3.7 item 12: the hash at <prefix>session:<id> holds version "1", the blob text,
    createdAt and updatedAt (§2.4 text) after a first save; createdAt survives later saves."""
    store, client = redis_store
    store.save(Session(id="s1", data={"nome": "João"}), 0)
    fields = {text(k): text(v) for k, v in client.hgetall(store.key("s1")).items()}
    assert set(fields) == {"version", "blob", "createdAt", "updatedAt"}
    assert fields["version"] == "1" and json.loads(fields["blob"])["data"] == {"nome": "João"}
    assert ISO_TEXT.fullmatch(fields["createdAt"]) and ISO_TEXT.fullmatch(fields["updatedAt"])
    time.sleep(0.002)
    store.save(Session(id="s1"), 1)
    after = {text(k): text(v) for k, v in client.hgetall(store.key("s1")).items()}
    assert after["version"] == "2" and after["createdAt"] == fields["createdAt"]
    assert after["updatedAt"] >= fields["updatedAt"]


def test_the_key_is_prefix_session_id(redis_store):
    """persistence.md §3.6: the hash lives at f"{key_prefix}session:{session_id}"."""
    store, client = redis_store
    store.save(Session(id="lead:456"), 0)
    assert store.key("lead:456") == f"{store.key_prefix}session:lead:456"
    assert client.exists(f"{store.key_prefix}session:lead:456") == 1


def test_the_default_prefix_is_falai():
    """persistence.md §3.7: the port defaults to "falai:" (the original: "agent:")."""
    assert RedisStore(FakeScriptClient()).key("s1") == "falai:session:s1"


def test_every_save_sets_the_ttl_and_resets_it(redis_store):
    """persistence.md §3.6: session_ttl seconds from the last save, reset by every save; default 7 days."""
    store, client = redis_store
    store.save(Session(id="s1"), 0)
    assert 604790 <= client.ttl(store.key("s1")) <= 604800
    client.expire(store.key("s1"), 100)
    store.save(Session(id="s1"), 1)
    assert client.ttl(store.key("s1")) > 100


def test_a_custom_ttl_is_honoured(redis_store):
    """persistence.md §3.6: session_ttl is in seconds."""
    _, client = redis_store
    store = RedisStore(client, key_prefix=redis_store[0].key_prefix, session_ttl=120)
    store.save(Session(id="s1"), 0)
    assert 110 <= client.ttl(store.key("s1")) <= 120


def test_ttl_0_never_expires_and_keeps_an_earlier_ttl(redis_store):
    """persistence.md §3.6: 0 issues no EXPIRE (inferred: a TTL set earlier is not removed)."""
    _, client = redis_store
    store = RedisStore(client, key_prefix=redis_store[0].key_prefix, session_ttl=0)
    store.save(Session(id="s1"), 0)
    assert client.ttl(store.key("s1")) == -1
    client.expire(store.key("s1"), 500)
    store.save(Session(id="s1"), 1)
    assert 490 <= client.ttl(store.key("s1")) <= 500


def test_an_expired_session_loads_as_none_and_a_save_finds_it_gone(redis_store):
    """persistence.md §3.6, Part 5: an expired hash is no row; a save at its old version is the "gone" conflict."""
    store, client = redis_store
    store.save(Session(id="s1"), 0)
    client.pexpire(store.key("s1"), 1)
    time.sleep(0.05)
    assert store.load("s1") is None
    with pytest.raises(SessionConflictError, match="is gone from the store: it was at version 1") as caught:
        store.save(Session(id="s1"), 1)
    assert caught.value.actual_version is None


def test_a_hash_without_a_blob_field_is_invalid(redis_store):
    """persistence.md §3.6: a hash without `blob` fails as `expected an object, got missing`."""
    store, client = redis_store
    client.hset(store.key("s1"), mapping={"version": "1"})
    with pytest.raises(InvalidSessionError, match="unreadable: expected an object, got missing"):
        store.load("s1")


def test_the_script_checks_and_writes_in_one_step(redis_store):
    """persistence.md §3.6: the script returns the stored version, "missing", or nil, as the spec's steps say."""
    store, client = redis_store
    key = store.key("raw")
    script = client.register_script(SAVE_SCRIPT)
    assert script(keys=[key], args=["3", "4", "{}", "t", "0"]) in (b"missing", "missing")
    assert script(keys=[key], args=["0", "1", "{}", "t", "0"]) is None
    assert text(script(keys=[key], args=["0", "1", "{}", "t", "0"])) == "1"
    assert text(script(keys=[key], args=["2", "3", "{}", "t", "0"])) == "1"
    assert script(keys=[key], args=["1", "2", "{}", "t2", "0"]) is None
    assert text(client.hget(key, "createdAt")) == "t" and text(client.hget(key, "updatedAt")) == "t2"
