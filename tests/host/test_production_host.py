"""The production host (falai_host, ``falai host ...``) against the real Postgres and a Redis of its own.

One test per guarantee or failure the guide names (docs/guide/production.md); the fault run with the
roles as processes is tests/host/test_host_faults.py. Skipped with the reason when the host's extra
(``pip install 'falai[host]'``), Postgres or ``redis-server`` is missing; CI installs and starts them.
"""
import base64
import configparser
import hashlib
import hmac
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("rq", reason="the production host needs its extra: pip install 'falai[host]' (rq)")
pytest.importorskip("psycopg", reason="the production host needs its extra: pip install 'falai[host]'")
pytest.importorskip("redis", reason="the production host needs its extra: pip install 'falai[host]'")

import psycopg  # noqa: E402

import falai  # noqa: E402
import falai_cli  # noqa: E402
import falai_host as H  # noqa: E402
from host_harness import PRODUCTION, ROOT, FakeChannel, OwnRedis, role_env  # noqa: E402

sys.path.insert(0, PRODUCTION)
import demo_agent  # noqa: E402

from falai import ProviderError, ScriptedProvider  # noqa: E402

DSN = os.environ.get("FALAI_TEST_POSTGRES_DSN", "host=127.0.0.1 dbname=test")


def _postgres_reason():
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
        return None
    except Exception as error:          # any failure to connect is a reason to skip
        return f"Postgres at {DSN!r} is unreachable: {error}"


NEEDS_SERVICES = [
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH"),
    pytest.mark.skipif(_postgres_reason() is not None, reason=str(_postgres_reason())),
]

NO_FLOW = {"flows": []}                                   # the lean understand reply: no flow scored
REMINDER = {"flows": [{"id": "lembrete", "score": 95}]}


def scripted(understand=None, speak=None):
    return ScriptedProvider(script={"understand": understand if understand is not None else [NO_FLOW] * 20,
                                    "speak": speak if speak is not None else [{"message": "Oi!"}] * 20})


@pytest.fixture(scope="module")
def own_redis():
    server = OwnRedis()
    yield server
    server.close()


@pytest.fixture
def make_host(own_redis, monkeypatch):
    """Hosts on fresh, uniquely named tables (dropped afterwards); each call may bring its own
    provider and settings."""
    monkeypatch.setenv("FALAI_DEMO_REMINDER", "1h")
    monkeypatch.setenv("FALAI_DEMO_SILENCE", "24h")
    tag = f"falai_pt{os.getpid()}_{os.urandom(3).hex()}_"
    base = H.Config(dsn=DSN, redis_url=own_redis.url, prefix=tag, queue=tag, lease_s=3, job_timeout_s=2,
                    secret="s3cret", send_timeout_s=1.0)
    hosts = []

    def make(provider=None, **settings):
        config = H.Config(**{**base.__dict__, **settings})
        host = H.Host(config, agent=demo_agent.make_agent(provider or scripted()))
        if not hosts:
            host.migrate()
        hosts.append(host)
        return host

    yield make
    hosts[0].drop()
    for host in hosts:
        host.close()
    import redis
    from rq import Queue
    with redis.Redis.from_url(own_redis.url) as client:
        Queue(tag, connection=client).empty()
        client.delete(f"falai:{tag}{tag}:epoch")


def rows(host, table, columns="*"):
    return host.sql(f"SELECT {columns} FROM {host.config.prefix}{table} ORDER BY 1, 2")


def accept_message(host, session_id, message_id, text="oi"):
    return host.accept(session_id, "message", message_id, {"message": text, "id": message_id})


def add_outbox(host, *entries):
    """Outbox rows (session, key[, send_after offset seconds]) as a turn would write them."""
    for session_id, key, *later in entries:
        host.sql(f"INSERT INTO {host.config.prefix}outbox (session_id, message_key, cause, text, kind, "
                 "after_ms, send_after) VALUES (%s, %s, 'c', %s, 'ai', 0, now() + make_interval(secs => %s))",
                 (session_id, key, f"text {key}", later[0] if later else 0))


# The turn job ------------------------------------------------------------------------------------


def test_turn_job_commits_session_outbox_wakes_and_done_mark_together(make_host):
    host = make_host(scripted(understand=[REMINDER]))
    assert accept_message(host, "s1", "m1", "me lembre depois") is True
    assert host.run("inbox", "s1", "m1") == "applied"
    with host.pool.connection() as db:
        session = host.store(db).load("s1")
    assert session.version == 1 and session.inputs == ["m1"]
    assert [r[0] for r in rows(host, "outbox", "message_key, cause")] == ["lembrete#m1:ok:1"]
    wakes = [r[0] for r in rows(host, "wakes", "wake_key, due_at")]
    assert any(key.startswith("lembrete#m1:espera:") for key in wakes)
    assert any(key.startswith("silence:retomar:s1:") for key in wakes)
    assert rows(host, "inbox", "input_key, result, turns, conflicts") == [("m1", "applied", 1, 0)]
    assert session.history == [{"role": "user", "content": "me lembre depois"},
                               {"role": "assistant", "content": "Combinado, eu te lembro."}]


def test_a_crash_before_commit_leaves_nothing_and_the_input_open(make_host, monkeypatch):
    host = make_host()
    accept_message(host, "s1", "m1")

    def crash(*args):
        raise RuntimeError("worker died here")

    monkeypatch.setattr(host, "_write_wakes", crash)
    with pytest.raises(RuntimeError, match="worker died here"):
        host.run("inbox", "s1", "m1")
    assert rows(host, "sessions") == [] and rows(host, "outbox") == [] and rows(host, "wakes") == []
    assert rows(host, "inbox", "input_key, done_at, attempts") == [("m1", None, 1)]
    monkeypatch.undo()
    assert host.run("inbox", "s1", "m1") == "applied"          # handed again, it applies once
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["idle:m1"]


def test_a_turn_that_keeps_failing_becomes_a_dead_letter(make_host, monkeypatch):
    """A failure that is not the model's (here a broken action) is counted; at turn_attempts the
    row is moved aside with its reason, and the session's other inputs still go through."""
    host = make_host(turn_attempts=3)
    accept_message(host, "s1", "m1")
    accept_message(host, "s1", "m2")

    def broken(*args):
        raise KeyError("a bug in the host code")

    monkeypatch.setattr(host, "_write_wakes", broken)
    for _ in range(2):
        with pytest.raises(KeyError):
            host.run("inbox", "s1", "m1")
    assert host.run("inbox", "s1", "m1") == "dead"
    monkeypatch.undo()
    assert host.run("inbox", "s1", "m2") == "applied"
    [letter] = host.dead_letters()
    assert (letter["kind"], letter["session_id"], letter["key"]) == ("inbox", "s1", "m1")
    assert letter["reason"] == "failed 3 times; last: KeyError: 'a bug in the host code'"
    assert host.retry_dead("inbox", "s1", "m1") == 1 and host.dead_letters() == []
    assert host.run("inbox", "s1", "m1") == "applied"


def test_a_conflicting_save_replays_the_same_input(make_host):
    """persistence.md §3.1: another worker saved first; the job reloads and replays, and both count."""
    other = make_host()
    state = {"raced": False}

    def speak_while_another_worker_saves(request):
        if not state["raced"]:
            state["raced"] = True
            assert other.run("inbox", "s1", "m2") == "applied"   # the other worker's turn commits first
        return {"message": "Oi!"}

    host = make_host(scripted(speak=[speak_while_another_worker_saves] * 3))
    accept_message(host, "s1", "m1")
    accept_message(host, "s1", "m2")
    assert host.run("inbox", "s1", "m1") == "applied"
    assert dict((r[0], r[1:]) for r in rows(host, "inbox", "input_key, turns, conflicts")) == {
        "m1": (2, 1), "m2": (1, 0)}
    assert sorted(r[0] for r in rows(host, "outbox", "message_key, id")) == ["idle:m1", "idle:m2"]


def test_a_second_copy_of_a_job_that_finished_meanwhile_saves_nothing(make_host):
    """Two copies of one job (a lease ran out, recover): the one that commits second finds the row
    done under its lock and writes nothing, however many turns happened in between."""
    other = make_host()
    state = {"raced": False}

    def speak_while_the_other_copy_applies(request):
        if not state["raced"]:
            state["raced"] = True
            assert other.run("inbox", "s1", "m1") == "applied"
        return {"message": "Oi!"}

    host = make_host(scripted(speak=[speak_while_the_other_copy_applies] * 3))
    accept_message(host, "s1", "m1")
    assert host.run("inbox", "s1", "m1") == "done-already"
    assert rows(host, "sessions", "id, version") == [("s1", 1)]
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["idle:m1"]


def test_an_understand_failure_raises_for_rq_to_retry_and_writes_nothing(make_host):
    host = make_host(scripted(understand=[ProviderError("down", provider="p", kind="overload"), NO_FLOW]))
    accept_message(host, "s1", "m1")
    with pytest.raises(ProviderError):
        host.run("inbox", "s1", "m1")
    assert rows(host, "sessions") == [] and rows(host, "outbox") == []
    assert rows(host, "inbox", "provider_errors, done_at") == [(1, None)]
    assert host.run("inbox", "s1", "m1") == "applied"


def test_a_job_timeout_during_a_database_wait_does_not_wedge_the_worker(make_host):
    """The review's P8: RQ's job timeout (a signal) strikes while the commit's transaction waits on a
    row lock; the connection is left busy. The pool drops it, so the next jobs run (they used to fail
    for good with "another command is already in progress")."""
    from rq.timeouts import JobTimeoutException, UnixSignalDeathPenalty
    locker = psycopg.connect(DSN)

    def speak_while_another_transaction_locks_the_row(request):
        locker.execute(f"SELECT 1 FROM {host.config.prefix}inbox WHERE input_key = 'm1' FOR UPDATE")
        return {"message": "Oi!"}

    host = make_host(scripted(speak=[speak_while_another_transaction_locks_the_row, {"message": "Oi!"},
                                     {"message": "Oi!"}]), job_timeout_s=5, lease_s=10)   # lock timeout 2 s
    accept_message(host, "s1", "m1")
    accept_message(host, "s1", "m2")
    try:
        with pytest.raises(JobTimeoutException), UnixSignalDeathPenalty(1, JobTimeoutException):
            host.run("inbox", "s1", "m1")
    finally:
        locker.rollback()
        locker.close()
    assert host.run("inbox", "s1", "m2") == "applied"
    assert host.run("inbox", "s1", "m1") == "applied"
    assert all(H.Pool.healthy(connection) for connection, _ in host.pool.idle)


def test_the_pool_replaces_connections_a_server_restart_closed(make_host):
    """Connections killed on the server side (as a Postgres restart does) are found dead when lent
    and replaced; no caller sees the error."""
    host = make_host()
    host.sql("SELECT 1")
    [(connection, _)] = host.pool.idle
    pid = connection.info.backend_pid
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    host.pool.idle = [(connection, time.monotonic() - 60)]     # idle long enough to be checked
    assert host.sql("SELECT 2") == [(2,)]
    assert connection.closed


def test_a_statement_on_a_connection_the_server_just_closed_runs_again_on_a_fresh_one(make_host):
    host = make_host()
    host.sql("SELECT 1")
    [(connection, _)] = host.pool.idle                       # lent again at once: not checked first
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (connection.info.backend_pid,))
    assert host.sql("SELECT 2") == [(2,)]
    assert connection.closed or connection.broken


def test_a_redelivered_webhook_costs_nothing(make_host):
    provider = scripted()
    host = make_host(provider)
    assert accept_message(host, "s1", "m1") is True
    assert accept_message(host, "s1", "m1") is False
    assert host.queue.count == 1                                   # one job, not two
    assert host.run("inbox", "s1", "m1") == "applied"
    assert host.run("inbox", "s1", "m1") == "done-already"
    calls = len(provider.calls)
    host.sql(f"UPDATE {host.config.prefix}inbox SET done_at = NULL")   # as if the done mark were lost
    assert host.run("inbox", "s1", "m1") == "duplicate-input"
    assert len(provider.calls) == calls


def test_the_same_host_runs_with_gemini_when_a_key_is_set(make_host, fake, monkeypatch):
    from fake_model_server import gemini_frame
    from falai_providers import GeminiProvider

    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    monkeypatch.setenv("FALAI_GEMINI_BASE_URL", fake.url)
    monkeypatch.delenv("FALAI_MODEL", raising=False)
    fake.sse(gemini_frame(text='{"flows": []}', finish="STOP"))
    fake.sse(gemini_frame(text='{"message": "Olá! Como posso ajudar?"}', finish="STOP"))
    provider = demo_agent.make_provider()
    assert isinstance(provider, GeminiProvider)
    host = make_host(provider)
    accept_message(host, "s1", "m1", "oi")
    assert host.run("inbox", "s1", "m1") == "applied"
    assert rows(host, "outbox", "message_key, text") == [("idle:m1", "Olá! Como posso ajudar?")]
    assert [r.headers["x-goog-api-key"] for r in fake.requests] == ["test-key", "test-key"]
    assert "gemini-3.8-flash" in fake.requests[0].path


# The dispatcher ----------------------------------------------------------------------------------


def test_the_dispatcher_hands_a_due_wake_once_and_again_after_its_lease(make_host):
    host = make_host()
    host.dispatch_once()                                           # its first pass sets Redis's marker
    host.sql(f"INSERT INTO {host.config.prefix}wakes (session_id, wake_key, due_at) VALUES "
             "('s1', 'r#k:w:1', now() - interval '1 second'), ('s1', 'r#k:w:2', now() + interval '1 hour')")
    assert host.dispatch_once() == 1
    assert host.dispatch_once() == 0                               # handed: not again within the lease
    assert host.queue.job_ids == [H.job_id("wakes", "s1", "r#k:w:1")]
    host.queue.empty()                                             # the queue lost it
    host.sql(f"UPDATE {host.config.prefix}wakes SET handed_at = now() - interval '1 minute'")
    assert host.dispatch_once() == 1                               # the lease ran out: handed again
    assert host.run("wakes", "s1", "r#k:w:1") == "no-session"      # the engine ignores a wake it cannot use


def test_after_redis_restarts_empty_the_dispatcher_hands_open_work_at_once(make_host):
    host = make_host()
    accept_message(host, "s1", "m1")
    host.dispatch_once()
    assert host.dispatch_once() == 0                               # within its lease: left alone
    host.redis.flushdb()                                           # Redis came back empty
    assert host.dispatch_once() == 1                               # not after the lease: now
    assert host.queue.job_ids == [H.job_id("inbox", "s1", "m1")]


def test_the_dispatcher_survives_rqs_valueerror_from_job_delete(make_host, monkeypatch):
    """The review's D2: RQ 3's delete() of a job whose worker was killed raises ValueError."""
    from rq.job import Job, JobStatus
    host = make_host()
    host.dispatch_once()
    accept_message(host, "s1", "m1")
    job = Job.fetch(H.job_id("inbox", "s1", "m1"), connection=host.redis)
    job.set_status(JobStatus.STARTED)

    def refuse(self, *args, **kwargs):
        raise ValueError("Execution abc not found in Redis")

    monkeypatch.setattr(Job, "delete", refuse)
    host.sql(f"UPDATE {host.config.prefix}inbox SET handed_at = now() - interval '1 minute'")
    assert host.dispatch_once() == 1                               # replaced, not crashed
    assert Job.fetch(H.job_id("inbox", "s1", "m1"), connection=host.redis).get_status() == JobStatus.QUEUED


def test_a_row_handed_too_often_becomes_a_dead_letter(make_host):
    host = make_host(max_hands=2)
    host.dispatch_once()
    accept_message(host, "s1", "m1")
    host.sql(f"UPDATE {host.config.prefix}inbox SET hand_count = 2, handed_at = now() - interval '1 minute', "
             "last_error = 'JobTimeoutException: too slow'")
    assert host.dispatch_once() == 0
    [letter] = host.dead_letters()
    assert letter["reason"] == "handed 2 times, never done; last: JobTimeoutException: too slow"


# The sender --------------------------------------------------------------------------------------


@pytest.fixture
def channel():
    made = []

    def make(**options):
        made.append(FakeChannel(**options))
        return made[-1]

    yield make
    for item in made:
        item.close()


def sender(host, channel, shard=(0, 1)):
    return H.Sender(host, H.HttpChannel(channel.url, timeout=host.config.send_timeout_s), shard)


def drain(send, rounds=20):
    total = 0
    for _ in range(rounds):
        total += send.send_once()
    return total


def test_the_sender_resends_only_what_the_channel_never_got(make_host, channel):
    host = make_host()
    fake = channel()
    add_outbox(host, ("s-k1", "k1"), ("s-k2", "k2"), ("s-k3", "k3"))
    # k1 and k2 were tried by a sender that died; the channel has k1 only
    host.sql(f"UPDATE {host.config.prefix}outbox SET attempts = 1, claimed_at = now() WHERE message_key <> 'k3'")
    fake.deliveries["s-k1/k1"] = [0.0]
    assert sender(host, fake).send_once() == 3
    assert dict(rows(host, "outbox", "message_key, outcome")) == {"k1": "found-delivered", "k2": "resent",
                                                                  "k3": "sent"}
    assert {key: len(times) for key, times in fake.deliveries.items()} == {"s-k1/k1": 1, "s-k2/k2": 1,
                                                                           "s-k3/k3": 1}
    assert sender(host, fake).send_once() == 0


def test_the_sender_keeps_a_sessions_order_and_waits_for_after_ms(make_host, channel):
    host = make_host()
    fake = channel()
    add_outbox(host, ("s1", "a"), ("s1", "b", 3600), ("s1", "c"))
    send = sender(host, fake)
    assert send.send_once() == 1 and send.send_once() == 0         # c waits behind b, b waits its time
    assert fake.order == [("s1", "a")]


def test_one_message_the_channel_refuses_does_not_stop_the_others(make_host, channel):
    """The review's D3: a 400 for one session moves its message aside (a dead letter with the
    reason); every other session's messages, and that session's later ones, are delivered."""
    host = make_host()
    fake = channel(status_for=lambda body: 400 if body["key"] == "bad" else 200)
    add_outbox(host, ("blocked", "bad"), ("blocked", "after"),
               *[(f"s{i}", "m") for i in range(30)])
    assert drain(sender(host, fake)) == 32
    assert len(fake.deliveries) == 31 and "blocked/after" in fake.deliveries
    assert [(l["kind"], l["key"]) for l in host.dead_letters()] == [("outbox", "bad")]
    assert host.dead_letters()[0]["reason"].startswith("refused for good: channel answered 400")


def test_a_message_failing_past_its_retry_budget_is_a_dead_letter(make_host, channel):
    host = make_host(send_attempts=3)
    fake = channel(status_for=lambda body: 503)
    add_outbox(host, ("s1", "a"))
    send = sender(host, fake)
    for attempt in range(3):
        host.sql(f"UPDATE {host.config.prefix}outbox SET not_before = NULL")   # its backoff passed
        assert send.send_once() == 1
    assert host.dead_letters()[0]["reason"].startswith("failed 3 times: channel answered 503")
    assert fake.refused == ["s1/a"] * 3
    host.retry_dead()
    assert rows(host, "outbox", "attempts, dead_at") == [(0, None)]
    host.drop_dead()


def test_a_failed_try_waits_its_backoff_and_a_maybe_sent_one_at_least_a_send_timeout(make_host, channel):
    host = make_host(send_timeout_s=5)
    fake = channel(status_for=lambda body: 503)
    add_outbox(host, ("s1", "a"))
    send = sender(host, fake)
    assert send.send_once() == 1 and send.send_once() == 0
    [(wait_s,)] = host.sql(f"SELECT extract(epoch FROM not_before - now()) FROM {host.config.prefix}outbox")
    assert 4 < float(wait_s) <= 5


def test_senders_with_different_shard_settings_never_send_a_row_twice(make_host, channel):
    """The review's D4: senders 0/1 and 0/2 and 1/2 at once (a re-shard while old senders run)."""
    host = make_host()
    fake = channel(delay_s=0.02)
    add_outbox(host, *[(f"s{i % 40}", f"m{i:03d}") for i in range(200)])
    senders = [sender(host, fake, shard) for shard in ((0, 1), (0, 2), (1, 2))]
    threads = [threading.Thread(target=drain, args=(s, 40)) for s in senders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(fake.deliveries) == 200 and fake.duplicates() == {}
    by_session = {}
    for session_id, key in fake.order:
        by_session.setdefault(session_id, []).append(key)
    assert all(keys == sorted(keys) for keys in by_session.values())


def test_a_channel_slower_than_the_send_timeout_is_not_asked_too_soon(make_host, channel):
    """The review's D5: the channel records a send after the sender gave up on it. The next try
    waits at least a send timeout, asks, finds it, and marks it found-delivered: one copy."""
    host = make_host(send_timeout_s=0.5)
    fake = channel(delay_s=1.0, record_after_s=0.8)
    add_outbox(host, ("s1", "a"))
    send = sender(host, fake)
    assert send.send_once() == 1                                    # timed out: in doubt
    assert send.send_once() == 0                                    # not asked again at once
    time.sleep(2.1)                                                 # its backoff: 2 s
    assert send.send_once() == 1
    assert rows(host, "outbox", "outcome, attempts") == [("found-delivered", 2)]
    assert {key: len(times) for key, times in fake.deliveries.items()} == {"s1/a": 1}


def test_the_sender_keeps_several_sends_in_flight_and_each_session_in_order(make_host, channel):
    host = make_host(in_flight=8)
    fake = channel(delay_s=0.1)
    add_outbox(host, *[(f"s{i % 8}", f"m{i:02d}") for i in range(32)])
    stop = threading.Event()
    thread = threading.Thread(target=sender(host, fake).run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(fake.deliveries) < 32 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
    assert len(fake.deliveries) == 32 and fake.peak > 1
    for i in range(8):
        assert [k for s, k in fake.order if s == f"s{i}"] == [f"m{j:02d}" for j in range(i, 32, 8)]


def test_an_unreachable_channel_is_said_once_however_often_it_is_tried(make_host, caplog):
    host = make_host()
    add_outbox(host, *[(f"s{i}", "m") for i in range(5)])
    send = H.Sender(host, H.HttpChannel(f"http://127.0.0.1:{_closed_port()}", timeout=1), (0, 1))
    with caplog.at_level("INFO", logger="falai.host"):
        for _ in range(4):
            host.sql(f"UPDATE {host.config.prefix}outbox SET not_before = NULL")
            assert send.send_once() == 5
    assert [r.getMessage()[:26] for r in caplog.records] == ["the channel unreachable (C"]
    assert rows(host, "outbox", "count(*), max(attempts)") == [(5, 4)]


def test_run_sender_without_a_channel_says_so():
    with pytest.raises(ValueError, match="no channel. Give --channel-url or FALAI_CHANNEL_URL"):
        H.run_sender(H.Host(H.Config()))


# The intake --------------------------------------------------------------------------------------


def signed(secret, body, at=None):
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"HTTP_X_FALAI_TIMESTAMP": timestamp, "HTTP_X_FALAI_SIGNATURE": f"sha256={digest}"}


def post(app, path, body, secret="s3cret", headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "CONTENT_LENGTH": str(len(data)),
               "wsgi.input": io.BytesIO(data), **(signed(secret, data) if secret else {}), **(headers or {})}
    status = []
    out = app(environ, lambda s, h: status.append(s))
    return status[0], json.loads(b"".join(out))


def test_a_signed_webhook_is_accepted_once(make_host):
    host = make_host()
    app = H.intake_app(host)
    assert post(app, "/messages", {"session_id": "s1", "id": "m1", "text": "oi"}) == (
        "202 Accepted", {"accepted": True, "duplicate": False})
    assert post(app, "/messages", {"session_id": "s1", "id": "m1", "text": "oi"})[1]["duplicate"] is True
    assert host.queue.count == 1


def test_the_intake_refuses_unsigned_forged_and_replayed_webhooks(make_host):
    host = make_host()
    app = H.intake_app(host)
    body = {"session_id": "s1", "event": "pago", "key": "e1"}
    status, answer = post(app, "/events", body, secret=None)
    assert status == "401 Unauthorized" and answer["error"].startswith("unsigned: send X-Falai-Timestamp")
    assert post(app, "/events", body, secret="guess")[1]["error"] == (
        "X-Falai-Signature does not match the body: sign the raw body with the shared secret.")
    data = json.dumps(body).encode()
    old = signed("s3cret", data, at=time.time() - 600)
    assert post(app, "/events", body, secret=None, headers=old)[0] == "401 Unauthorized"
    assert rows(host, "inbox") == []


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    """What the guide tells a channel's developer to compute."""
    body = b'{"session_id": "s1"}'
    assert H.signature("k", "1700000000", body) == "sha256=" + hmac.new(
        b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert H.check_signature("k", "1700000000", H.signature("k", "1700000000", body), body, 300,
                             now=1700000100) is None


@pytest.mark.parametrize("path, body, status, error", [
    ("/messages", {"session_id": "s" * 256, "id": "m1", "text": "oi"}, "422 Unprocessable Entity",
     "POST /messages: session_id is 256 characters, over the limit of 255. Send a shorter session_id."),
    ("/messages", {"session_id": "a b", "id": "m1", "text": "oi"}, "422 Unprocessable Entity",
     "POST /messages: session_id 'a b' has characters outside printable ASCII without spaces. Encode it."),
    ("/messages", {"session_id": "s1", "text": "oi"}, "400 Bad Request",
     "POST /messages: id is missing or not a non-empty string. Send it as JSON text."),
    ("/messages", {"session_id": "s1", "id": "m1", "text": "x" * 5000}, "413 Payload Too Large",
     "POST /messages: text is 5000 characters, over the limit of 4096 (FALAI_MAX_MESSAGE)."),
    ("/messages", {"session_id": "s1", "id": "m1", "text": "a\u0000b"}, "422 Unprocessable Entity",
     "POST /messages: a text holds a NUL character (\\u0000), which Postgres cannot store. Remove it."),
    ("/events", {"session_id": "s1", "event": "pago", "key": "e1", "payload": json.loads("[" * 65 + "]" * 65)},
     "422 Unprocessable Entity",
     "POST /events: payload nests deeper than 64 levels, the engine's limit (docs/guide/limits.md). "
     "Flatten it."),
    ("/starts", {"session_id": "s1", "key": "k2"}, "400 Bad Request",
     "POST /starts: flow is missing or not a non-empty string. Send it as JSON text."),
    ("/other", {"session_id": "s1"}, "404 Not Found",
     "/other: no such endpoint. Use /messages, /events or /starts."),
])
def test_the_intake_checks_every_field_at_the_door(make_host, path, body, status, error):
    host = make_host()
    assert post(H.intake_app(host), path, body) == (status, {"error": error})
    assert rows(host, "inbox") == []


def test_the_payload_limit_is_the_engines():
    assert H.MAX_PAYLOAD_NESTING == falai.MAX_NESTING


def test_a_host_start_and_an_event_go_through_the_same_inbox(make_host):
    host = make_host()
    app = H.intake_app(host)
    assert post(app, "/starts", {"session_id": "s1", "flow": "lembrete", "key": "k1"})[1]["duplicate"] is False
    assert post(app, "/events", {"session_id": "s1", "event": "pago", "key": "e1", "payload": {"v": 1}})[0] \
        == "202 Accepted"
    assert host.run("inbox", "s1", "start:k1") == "applied"
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["lembrete#k1:ok:1"]
    assert host.run("inbox", "s1", "event:e1") == "unknown-event"    # not registered: ignored, nothing to save


def test_the_intake_caps_the_body_and_times_out_a_silent_client(make_host):
    host = make_host(max_body=100)
    server = H.serve(H.intake_app(host), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        def raw(request):
            with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
                s.sendall(request)
                return s.recv(4096).decode()

        assert raw(b"POST /messages HTTP/1.0\r\nContent-Length: 5000\r\n\r\n").startswith("HTTP/1.0 413")
        assert raw(b"POST /messages HTTP/1.0\r\nContent-Length: -1\r\n\r\n").startswith("HTTP/1.0 411")
        assert H.serve.__doc__ and "socket timeouts" in H.serve.__doc__
    finally:
        server.shutdown()
        server.server_close()
    assert server.RequestHandlerClass.timeout == 10


# Operations --------------------------------------------------------------------------------------


def get(app, path):
    status = []
    out = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": path}, lambda s, h: status.append(s)))
    return status[0], out.decode()


def test_health_readiness_and_metrics(make_host):
    host = make_host()
    app = H.intake_app(host)
    post(app, "/messages", {"session_id": "s1", "id": "m1", "text": "oi"})
    assert get(app, "/healthz")[0] == "200 OK"
    status, body = get(app, "/readyz")
    assert status == "200 OK" and json.loads(body) == {"ready": True, "postgres": "ok", "redis": "ok"}
    host.run("inbox", "s1", "m1")
    fake = FakeChannel()
    try:
        sender(host, fake).send_once()
    finally:
        fake.close()
    status, text = get(app, "/metrics")
    metrics = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert metrics['falai_inputs_total{duplicate="false"}'] == "1"
    assert metrics["falai_turns_total"] == "1" and metrics["falai_model_calls_total"] == "2"
    assert metrics['falai_sends_total{outcome="sent"}'] == "1"
    assert metrics["falai_webhook_to_send_seconds_count"] == "1"
    assert metrics["falai_inbox_open"] == "0" and metrics["falai_outbox_pending"] == "0"
    assert metrics["falai_queue_depth"] == "1" and metrics["falai_dead_letters"] == "0"


def test_readiness_names_what_is_unreachable(make_host):
    host = make_host(redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    status, body = get(H.intake_app(host), "/readyz")
    state = json.loads(body)
    assert status == "503 Service Unavailable" and state["postgres"] == "ok"
    assert state["redis"].startswith("ConnectionError")


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_job_failing_the_same_way_logs_once_a_minute():
    import logging
    keep = H._RepeatFilter()
    record = lambda text: logging.LogRecord("rq.worker", logging.ERROR, __file__, 1, text, None, None)
    assert [keep.filter(record(f"job {n % 2}: exception raised")) for n in range(6)] == [
        True, True, False, False, False, False]


def test_a_worker_whose_jobs_all_fail_on_the_database_is_not_healthy():
    """The review's D1 left workers alive and useless; a liveness probe on /healthz restarts one."""
    host = H.Host(H.Config(dsn=f"host=127.0.0.1 port={_closed_port()} dbname=x"))
    for attempt in range(H.DATABASE_FAILURES):
        assert H.operations(host, "/healthz")[0] == "200 OK"
        with pytest.raises(psycopg.OperationalError):
            host.run("inbox", "s1", f"m{attempt}")
    status, body, _ = H.operations(host, "/healthz")
    assert status == "503 Service Unavailable"
    assert body["error"] == "the last 20 turn jobs failed on the database"


def test_an_outage_is_said_once_and_its_end_once(caplog):
    outage = H.Outage()
    with caplog.at_level("WARNING", logger="falai.host"):
        waits = [outage.failed("Redis", ConnectionError("refused")) for _ in range(8)]
        outage.ok("Redis")
        outage.ok("Redis")
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "Redis unreachable", "Redis reachable again after 8 failed tries"]
    assert waits == [0.5, 1, 2, 4, 8, 10, 10, 10]


# Schema, retention, recovery, admin ---------------------------------------------------------------


def test_schema_upgrades_the_example_hosts_tables(make_host):
    host = make_host()
    p = host.config.prefix
    host.drop()
    for statement in H.migrations(p)[0]:              # the tables the example host created
        host.sql(statement)
    assert host.schema_version() == 0
    with pytest.raises(RuntimeError, match=r"schema version 0, this falai_host needs 2. Run `falai host schema`"):
        host.check_schema()
    assert host.migrate() == (0, 2) and host.migrate() == (2, 2)
    host.check_schema()
    assert {"attempts", "dead_at", "not_before"} <= {r[0] for r in host.sql(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (f"{p}outbox",))}


def test_prune_deletes_what_is_done_and_old_and_keeps_dead_letters(make_host):
    host = make_host()
    p = host.config.prefix
    add_outbox(host, ("s1", "a"), ("s1", "b"), ("s2", "c"))
    host.sql(f"UPDATE {p}outbox SET sent_at = now() - interval '10 days' WHERE message_key = 'a'")
    host.sql(f"UPDATE {p}outbox SET dead_at = now() - interval '10 days', outcome = 'dead' "
             "WHERE message_key = 'c'")
    accept_message(host, "old", "m1")
    host.run("inbox", "old", "m1")
    host.sql(f"UPDATE {p}inbox SET done_at = now() - interval '10 days'")
    host.sql(f"UPDATE {p}wakes SET done_at = now(), result = 'replaced'")
    host.sql(f"UPDATE {p}outbox SET sent_at = now() WHERE session_id = 'old'")
    host.sql(f"UPDATE {p}sessions SET updated_at = now() - interval '40 days'")
    assert host.prune(7 * 86400, 30 * 86400) == {"outbox": 1, "inbox": 1, "wakes": 0, "sessions": 1}
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["b", "c", "idle:m1"]


def test_recover_rebuilds_the_wakes_from_pending_wakes(make_host):
    host = make_host(scripted(understand=[REMINDER]))
    accept_message(host, "s1", "m1", "me lembre depois")
    host.run("inbox", "s1", "m1")
    before = sorted(r[0] for r in rows(host, "wakes", "wake_key, due_at"))
    host.sql(f"DELETE FROM {host.config.prefix}wakes")
    counts = host.recover()
    assert sorted(r[0] for r in rows(host, "wakes", "wake_key, due_at")) == before
    assert counts == {"sessions": 1, "wakes_rebuilt": len(before), "wakes_open": len(before), "inputs_open": 0}


def test_the_admin_commands_list_retry_and_drop_dead_letters(make_host):
    host = make_host()
    add_outbox(host, ("s1", "a"), ("s2", "b"))
    host.sql(f"UPDATE {host.config.prefix}outbox SET dead_at = now(), outcome = 'dead', last_error = 'x'")
    env = H.config_env(host.config)

    def cli(*args):
        out, err = io.StringIO(), io.StringIO()
        code = falai_cli.main(["host", *args], out=out, err=err, environ=env)
        return code, out.getvalue(), err.getvalue()

    code, out, _ = cli("dead", "list")
    assert code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == ["a", "b"]
    assert cli("dead", "retry", "--session", "s1")[1] == "1 dead letters given their tries back\n"
    assert cli("dead", "drop")[1] == "1 dead letters dropped\n"
    assert cli("dead", "list")[1] == ""
    assert cli("schema")[1] == f"schema of {host.config.prefix}*: version 2 -> 2\n"
    assert json.loads(cli("prune", "--older-than", "0")[1]) == {"outbox": 0, "inbox": 0, "wakes": 0,
                                                                "sessions": 0}
    code, _, err = cli("sender", "--lease", "1", "--job-timeout", "5")
    assert code == 2 and "job timeout 5s is not below the lease 1.0s" in err


def test_the_intake_refuses_to_start_unsigned_unless_told(make_host):
    host = make_host()
    env = {**H.config_env(host.config), "FALAI_INTAKE_SECRET": ""}
    err = io.StringIO()
    assert falai_cli.main(["host", "intake"], out=io.StringIO(), err=err, environ=env) == 2
    assert err.getvalue() == ("falai host intake: no signing secret. Set FALAI_INTAKE_SECRET (or --secret), "
                              "or pass --unsigned for local development.\n")


def test_sigterm_stops_the_sender_after_its_sends(make_host, channel):
    host = make_host()
    fake = channel()
    env = role_env({**H.config_env(host.config), "FALAI_CHANNEL_URL": fake.url, "FALAI_POLL": "0.2"})
    process = subprocess.Popen([sys.executable, "-m", "falai_cli", "host", "sender"], env=env, cwd=ROOT,
                               stderr=subprocess.PIPE)
    try:
        add_outbox(host, ("s1", "a"))
        deadline = time.monotonic() + 60
        while not fake.deliveries and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert list(fake.deliveries) == ["s1/a"]
    assert rows(host, "outbox", "outcome, sent_at IS NOT NULL") == [("sent", True)]


def test_job_ids_are_reversible_and_use_only_what_rq_accepts():
    """runtime.md §8: keys are encoded for the queue; RQ allows letters, digits, _ and - only."""
    jid = H.job_id("wakes", "s:1", "silence:retomar:s:1:1789898400000")
    table, _, encoded = jid.partition("-")
    assert table == "wakes" and re.fullmatch(r"[A-Za-z0-9_-]+", encoded)
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    assert raw == "s:1\nsilence:retomar:s:1:1789898400000"


def test_settings_come_from_variables_and_flags_and_round_trip():
    config = H.config_from({"FALAI_PG_DSN": "dbname=x", "FALAI_RETRY_INTERVALS": "1,2", "FALAI_LEASE": "9",
                            "FALAI_JOB_TIMEOUT": "3"}, {"lease_s": "10", "queue": None})
    assert (config.dsn, config.retry_intervals, config.lease_s, config.job_timeout_s) == ("dbname=x", (1, 2),
                                                                                         10.0, 3)
    assert H.config_from(H.config_env(config), {}) == config
    with pytest.raises(ValueError, match="lease_s: 'soon' is not a number"):
        H.config_from({"FALAI_LEASE": "soon"})


def test_the_demo_agent_asks_for_a_reminder_in_the_current_reply_shape():
    """The review's D6: InstantModel scored the reminder flow in the v4 shape only, so no timer
    wake ever fired; it answers the lean shape the engine asks for now."""
    agent = demo_agent.make_agent(demo_agent.InstantModel())
    result = agent.turn(session_id="s1", message="me lembre depois do almoço", id="m1")
    assert [m.key for m in result.messages] == ["lembrete#m1:ok:1"]
    assert any(entry.key.startswith("lembrete#m1:espera:") for entry in result.schedule)


# The deployment files ----------------------------------------------------------------------------

DEPLOY = os.path.join(PRODUCTION)


def compose_services(text):
    """The services of a compose file written in the YAML subset the file keeps to: two-space
    indents, ``key: value`` and ``- item`` lines (yaml may not be installed)."""
    services, current, key = {}, None, None
    in_services = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        content = line.strip()
        if indent == 0:
            in_services = content == "services:"
            continue
        if not in_services:
            continue
        if indent == 2:
            current = content.rstrip(":")
            services[current] = {}
        elif indent == 4:
            key, _, value = content.partition(":")
            value = value.strip()
            services[current][key] = json.loads(value) if value.startswith("[") else (value or [])
        elif indent == 6 and content.startswith("- "):
            services[current][key].append(content[2:].strip().strip('"'))
        elif indent == 6:
            name, _, value = content.partition(":")
            if not isinstance(services[current][key], dict):
                services[current][key] = {}
            services[current][key][name] = value.strip().strip('"')
    return services


def command_help(args):
    env = role_env({})
    return subprocess.run([sys.executable, "-m", "falai_cli", *args, "--help"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


def test_the_compose_file_runs_each_role_with_a_command_that_exists():
    text = open(os.path.join(DEPLOY, "compose.yaml"), encoding="utf-8").read()
    assert "\t" not in text
    services = compose_services(text)
    assert {"postgres", "redis", "schema", "intake", "worker", "dispatcher", "sender"} <= set(services)
    for name, service in services.items():
        command = service.get("command")
        if not command or not isinstance(command, list) or command[:2] != ["falai", "host"]:
            continue
        result = command_help(command[1:3])
        assert result.returncode == 0, (name, result.stderr)
        flags = [word for word in command[3:] if word.startswith("--")]
        assert all(flag.split("=")[0] in result.stdout for flag in flags), (name, flags)
    roles = {services[name]["command"][2] for name in services if isinstance(services[name].get("command"), list)
             and services[name]["command"][:2] == ["falai", "host"]}
    assert roles >= {"schema", "intake", "worker", "dispatcher", "sender"}
    for service in services.values():
        for variable in (service.get("environment") or {}):
            assert not variable.startswith("FALAI_") or variable in {v for _, v, _ in H.SETTINGS} | {
                "FALAI_DEMO_REMINDER", "FALAI_DEMO_SILENCE"}, variable


def test_the_systemd_units_parse_and_start_commands_that_exist():
    units = sorted(name for name in os.listdir(os.path.join(DEPLOY, "systemd")) if name.endswith((".service",
                                                                                                 ".timer")))
    assert {"falai-intake.service", "falai-worker@.service", "falai-dispatcher.service", "falai-sender.service",
            "falai-prune.service", "falai-prune.timer"} <= set(units)
    for name in units:
        parser = configparser.ConfigParser(strict=True, interpolation=None)
        parser.optionxform = str
        parser.read(os.path.join(DEPLOY, "systemd", name), encoding="utf-8")
        assert "Unit" in parser, name
        if name.endswith(".timer"):
            assert parser["Timer"]["OnCalendar"] and parser["Install"]["WantedBy"] == "timers.target"
            continue
        start = parser["Service"]["ExecStart"].split()
        assert start[0].endswith("/falai") and start[1] == "host", name
        result = command_help(start[1:3])
        assert result.returncode == 0, (name, result.stderr)
        if parser["Service"].get("Type") != "oneshot":
            assert parser["Service"]["Restart"] == "always", name
        assert parser["Service"]["EnvironmentFile"].startswith("/etc/falai/"), name


pytestmark = NEEDS_SERVICES
