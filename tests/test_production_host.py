"""The production host of examples/production (issue 13) against the real Postgres and a Redis of its own.

The host's guarantees, one test each (docs/guide/production.md says which rests
on what), then the CI-sized load and fault run. Skipped with the reason when
the host's requirements (examples/production/requirements.txt), Postgres or
``redis-server`` are missing; CI installs and starts them.
"""
import base64
import io
import json
import os
import shutil
import sys

import pytest

pytest.importorskip("rq", reason="the production host needs examples/production/requirements.txt (rq)")
pytest.importorskip("psycopg", reason="the production host needs examples/production/requirements.txt (psycopg)")
pytest.importorskip("redis", reason="the production host needs examples/production/requirements.txt (redis)")

import psycopg  # noqa: E402

PRODUCTION = os.path.join(os.path.dirname(__file__), "..", "examples", "production")
sys.path.insert(0, PRODUCTION)

import demo_agent  # noqa: E402
import host as H  # noqa: E402
import loadtest  # noqa: E402

from falai import ProviderError, ScriptedProvider  # noqa: E402

DSN = os.environ.get("FALAI_TEST_POSTGRES_DSN", "host=127.0.0.1 dbname=test")


def _postgres_reason():
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
        return None
    except Exception as error:          # any failure to connect is a reason to skip
        return f"Postgres at {DSN!r} is unreachable: {error}"


pytestmark = [
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH"),
    pytest.mark.skipif(_postgres_reason() is not None, reason=str(_postgres_reason())),
]

UNDERSTAND = {"flows": {"lembrete": 0}}


def scripted(understand=None, speak=None):
    return ScriptedProvider(script={"understand": understand if understand is not None else [UNDERSTAND] * 20,
                                    "speak": speak if speak is not None else [{"message": "Oi!"}] * 20})


@pytest.fixture(scope="module")
def own_redis():
    server = loadtest.OwnRedis()
    yield server
    server.close()


@pytest.fixture
def make_host(own_redis, monkeypatch):
    """Hosts on fresh, uniquely named tables (dropped afterwards); each call may bring its own provider."""
    monkeypatch.setenv("FALAI_DEMO_REMINDER", "1h")
    monkeypatch.setenv("FALAI_DEMO_SILENCE", "24h")
    tag = f"falai_pt{os.getpid()}_{os.urandom(3).hex()}_"
    config = H.Config(postgres_dsn=DSN, redis_url=own_redis.url, prefix=tag, queue=tag, lease_s=3, job_timeout_s=2)
    hosts = []

    def make(provider=None):
        host = H.Host(config, agent=demo_agent.make_agent(provider or scripted()))
        if not hosts:
            host.initialize()
        hosts.append(host)
        return host

    yield make
    hosts[0].drop()
    hosts[0].queue.empty()
    for host in hosts:
        host.close()


def rows(host, table, columns="*"):
    return host.db.execute(f"SELECT {columns} FROM {host.config.prefix}{table} ORDER BY 1, 2").fetchall()


def accept_message(host, session_id, message_id, text="oi"):
    return host.accept(session_id, "message", message_id, {"message": text, "id": message_id})


def test_turn_job_commits_session_outbox_wakes_and_done_mark_together(make_host):
    """Issue 13: the session, the outbox rows and the wake rows are saved in one transaction."""
    host = make_host(scripted(understand=[{"flows": {"lembrete": 95}}]))
    assert accept_message(host, "s1", "m1", "me lembre depois") is True
    assert host.run("inbox", "s1", "m1") == "applied"
    session = host.store.load("s1")
    assert session.version == 1 and session.inputs == ["m1"]
    assert [r[0] for r in rows(host, "outbox", "message_key, cause")] == ["lembrete#m1:ok:1"]
    wakes = [r[0] for r in rows(host, "wakes", "wake_key, due_at")]
    assert any(key.startswith("lembrete#m1:espera:") for key in wakes)
    assert any(key.startswith("silence:retomar:s1:") for key in wakes)
    assert rows(host, "inbox", "input_key, result, turns, conflicts") == [("m1", "applied", 1, 0)]
    assert session.history == [{"role": "user", "content": "me lembre depois"},
                               {"role": "assistant", "content": "Combinado, eu te lembro."}]


def test_a_crash_before_commit_leaves_nothing_and_the_input_open(make_host, monkeypatch):
    """A failure after the session save but before the wakes are written rolls all of it back."""
    host = make_host()
    accept_message(host, "s1", "m1")

    def crash(*args):
        raise RuntimeError("worker died here")

    monkeypatch.setattr(host, "_write_wakes", crash)
    with pytest.raises(RuntimeError, match="worker died here"):
        host.run("inbox", "s1", "m1")
    assert host.store.load("s1") is None
    assert rows(host, "outbox") == [] and rows(host, "wakes") == []
    assert rows(host, "inbox", "input_key, done_at") == [("m1", None)]
    monkeypatch.undo()
    assert host.run("inbox", "s1", "m1") == "applied"          # handed again, it applies once
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["idle:m1"]


def test_a_conflicting_save_replays_the_same_input(make_host):
    """persistence.md §3.1: another worker saved first; the job reloads and replays, and both inputs count."""
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
    assert sorted(host.store.load("s1").inputs) == ["m1", "m2"]
    assert host.store.load("s1").version == 2
    assert dict((r[0], r[1:]) for r in rows(host, "inbox", "input_key, turns, conflicts")) == {
        "m1": (2, 1), "m2": (1, 0)}
    assert sorted(r[0] for r in rows(host, "outbox", "message_key, id")) == ["idle:m1", "idle:m2"]


def test_an_understand_failure_raises_for_rq_to_retry_and_writes_nothing(make_host):
    """runtime.md §10.1: a ProviderError from the understand call leaves nothing written; the retry applies it."""
    host = make_host(scripted(understand=[ProviderError("down", provider="p", kind="overload"), UNDERSTAND]))
    accept_message(host, "s1", "m1")
    with pytest.raises(ProviderError):
        host.run("inbox", "s1", "m1")
    assert host.store.load("s1") is None and rows(host, "outbox") == []
    assert rows(host, "inbox", "provider_errors, done_at") == [(1, None)]
    assert host.run("inbox", "s1", "m1") == "applied"


def test_a_redelivered_webhook_costs_nothing(make_host):
    """Issue 13: the same message id again is stopped at the inbox; a replayed job is duplicate-input."""
    provider = scripted()
    host = make_host(provider)
    app = H.intake_app(host.config)

    def post(body):
        status = []
        data = json.dumps(body).encode()
        out = app({"REQUEST_METHOD": "POST", "PATH_INFO": "/messages", "CONTENT_LENGTH": str(len(data)),
                   "wsgi.input": io.BytesIO(data)}, lambda s, headers: status.append(s))
        return status[0], json.loads(b"".join(out))

    assert post({"session_id": "s1", "id": "m1", "text": "oi"}) == ("202 Accepted", {"accepted": True,
                                                                                      "duplicate": False})
    assert post({"session_id": "s1", "id": "m1", "text": "oi"})[1]["duplicate"] is True
    assert host.queue.count == 1                                   # one job, not two
    assert host.run("inbox", "s1", "m1") == "applied"
    assert host.run("inbox", "s1", "m1") == "done-already"
    calls = len(provider.calls)
    host.db.execute(f"UPDATE {host.config.prefix}inbox SET done_at = NULL")   # as if the done mark were lost
    assert host.run("inbox", "s1", "m1") == "duplicate-input"
    assert len(provider.calls) == calls and host.store.load("s1").version == 1


def wsgi_post(app, path, body):
    data = json.dumps(body).encode()
    status = []
    out = app({"REQUEST_METHOD": "POST", "PATH_INFO": path, "CONTENT_LENGTH": str(len(data)),
               "wsgi.input": io.BytesIO(data)}, lambda s, headers: status.append(s))
    return status[0], json.loads(b"".join(out))


def test_a_host_start_and_an_event_go_through_the_same_inbox(make_host):
    """POST /starts and /events become turn(start=...) and turn(event=...); their keys dedupe like message ids."""
    host = make_host()
    app = H.intake_app(host.config)
    assert wsgi_post(app, "/starts", {"session_id": "s1", "flow": "lembrete", "key": "k1"})[1]["duplicate"] is False
    assert wsgi_post(app, "/starts", {"session_id": "s1", "flow": "lembrete", "key": "k1"})[1]["duplicate"] is True
    assert wsgi_post(app, "/events", {"session_id": "s1", "event": "pago", "key": "e1", "payload": {"v": 1}})[0] \
        == "202 Accepted"
    assert host.run("inbox", "s1", "start:k1") == "applied"
    assert [r[0] for r in rows(host, "outbox", "message_key, id")] == ["lembrete#k1:ok:1"]
    assert rows(host, "inbox", "input_key, body") == [
        ("event:e1", {"event": "pago", "key": "e1", "payload": {"v": 1}}),
        ("start:k1", {"start": {"flow": "lembrete", "key": "k1"}})]
    assert host.run("inbox", "s1", "event:e1") == "unknown-event"    # not registered: ignored, nothing to save
    assert wsgi_post(app, "/starts", {"session_id": "s1", "key": "k2"}) == (
        "400 Bad Request", {"error": "POST /starts: flow is missing or not a non-empty string. Send it as JSON text."})


def test_the_same_host_runs_with_gemini_when_a_key_is_set(make_host, fake, monkeypatch):
    """Issue 13: with GEMINI_API_KEY the demo agent's model is GeminiProvider (here over HTTP to a local fake)."""
    from fake_model_server import gemini_frame
    from falai_providers import GeminiProvider

    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    monkeypatch.setenv("FALAI_GEMINI_BASE_URL", fake.url)
    fake.sse(gemini_frame(text='{"flows": {"lembrete": 3}}', finish="STOP"))
    fake.sse(gemini_frame(text='{"message": "Olá! Como posso ajudar?"}', finish="STOP"))
    provider = demo_agent.make_provider()
    assert isinstance(provider, GeminiProvider)
    host = make_host(provider)
    accept_message(host, "s1", "m1", "oi")
    assert host.run("inbox", "s1", "m1") == "applied"
    assert rows(host, "outbox", "message_key, text") == [("idle:m1", "Olá! Como posso ajudar?")]
    assert [r.headers["x-goog-api-key"] for r in fake.requests] == ["test-key", "test-key"]


def test_intake_names_a_bad_input_and_the_fix(make_host):
    app = H.intake_app(make_host().config)
    data = json.dumps({"session_id": "s1", "text": "oi"}).encode()
    status = []
    body = json.loads(b"".join(app({"REQUEST_METHOD": "POST", "PATH_INFO": "/messages",
                                    "CONTENT_LENGTH": str(len(data)), "wsgi.input": io.BytesIO(data)},
                                   lambda s, h: status.append(s))))
    assert status == ["400 Bad Request"]
    assert body["error"] == "POST /messages: id is missing or not a non-empty string. Send it as JSON text."


def test_the_dispatcher_hands_a_due_wake_once_and_again_after_its_lease(make_host):
    host = make_host()
    host.db.execute(f"INSERT INTO {host.config.prefix}wakes (session_id, wake_key, due_at) VALUES "
                    "('s1', 'r#k:w:1', now() - interval '1 second'), ('s1', 'r#k:w:2', now() + interval '1 hour')")
    assert host.dispatch_once() == 1
    assert host.dispatch_once() == 0                               # handed: not again within the lease
    assert host.queue.job_ids == [H.job_id("wakes", "s1", "r#k:w:1")]
    host.queue.empty()                                             # the queue lost it (a Redis restart)
    host.db.execute(f"UPDATE {host.config.prefix}wakes SET handed_at = now() - interval '1 minute'")
    assert host.dispatch_once() == 1                               # the lease ran out: handed again
    assert host.run("wakes", "s1", "r#k:w:1") == "no-session"       # the engine ignores a wake it cannot use


def test_the_sender_resends_only_what_the_channel_never_got(make_host):
    """A message left claimed by a dead sender is resent only when the channel does not have its key."""
    host = make_host()
    channel = loadtest.FakeChannel()
    try:
        for key in ("k1", "k2", "k3"):
            host.db.execute(f"INSERT INTO {host.config.prefix}outbox (session_id, message_key, cause, text, kind, "
                            "after_ms, send_after, claimed_at) VALUES (%s, %s, 'c', 't', 'ai', 0, now(), %s)",
                            (f"s-{key}", key, None if key == "k3" else "2026-01-01T00:00:00Z"))
        channel.deliveries["s-k1/k1"] = [0.0]                       # delivered before the sender died
        sender = H.HttpChannel(channel.url)
        assert host.send_once(sender) == 3
        assert dict(rows(host, "outbox", "message_key, outcome")) == {"k1": "found-delivered", "k2": "resent",
                                                                      "k3": "sent"}
        assert {key: len(times) for key, times in channel.deliveries.items()} == {"s-k1/k1": 1, "s-k2/k2": 1,
                                                                                  "s-k3/k3": 1}
        assert host.send_once(sender) == 0
    finally:
        channel.close()


def test_the_sender_keeps_a_sessions_order_and_waits_for_after_ms(make_host):
    host = make_host()
    channel = loadtest.FakeChannel()
    try:
        p = host.config.prefix
        host.db.execute(f"INSERT INTO {p}outbox (session_id, message_key, cause, text, kind, after_ms, send_after) "
                        "VALUES ('s1', 'a', 'c', 't', 'ai', 0, now()), ('s1', 'b', 'c', 't', 'ai', 3000, "
                        "now() + interval '1 hour'), ('s1', 'c', 'c', 't', 'ai', 0, now())")
        sender = H.HttpChannel(channel.url)
        assert host.send_once(sender) == 1 and host.send_once(sender) == 0   # c waits behind b, b waits its time
        assert list(channel.deliveries) == ["s1/a"]
    finally:
        channel.close()


def test_recover_rebuilds_the_wakes_from_pending_wakes(make_host):
    """runtime.md §14: after a loss of the wakes, recover() lists every wake the sessions wait on."""
    host = make_host(scripted(understand=[{"flows": {"lembrete": 95}}]))
    accept_message(host, "s1", "m1", "me lembre depois")
    host.run("inbox", "s1", "m1")
    before = sorted(r[0] for r in rows(host, "wakes", "wake_key, due_at"))
    host.db.execute(f"DELETE FROM {host.config.prefix}wakes")
    counts = host.recover()
    assert sorted(r[0] for r in rows(host, "wakes", "wake_key, due_at")) == before
    assert counts == {"sessions": 1, "wakes_rebuilt": len(before), "wakes_open": len(before), "inputs_open": 0}


def test_job_ids_are_reversible_and_use_only_what_rq_accepts():
    """runtime.md §8: keys are encoded for the queue; RQ allows letters, digits, _ and - only."""
    jid = H.job_id("wakes", "s:1", "silence:retomar:s:1:1789898400000")
    table, _, encoded = jid.partition("-")
    assert table == "wakes" and set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    assert raw == "s:1\nsilence:retomar:s:1:1789898400000"


def test_load_and_faults_ci_sized(capsys):
    """Issue 13: N sessions, redeliveries, a burst, timer and silence wakes, understand failures, K workers;
    a worker SIGKILLed mid-turn, the sender SIGKILLed mid-delivery, Redis restarted empty. No duplicate
    send, no lost update, nothing left undelivered."""
    books = loadtest.LoadRun(loadtest.LoadConfig.ci()).run()
    report = loadtest.report(books)
    with capsys.disabled():
        print("\n" + report)
    assert books.worker_killed_mid_turn and books.sender_killed_mid_delivery and books.redis_restarted
    assert books.duplicate_sends == 0
    assert books.lost_updates == 0
    assert books.never_delivered == 0
    assert books.inputs_given_up == 0
    assert books.inputs_accepted == books.inputs_posted - books.webhooks_redelivered
    assert books.intake_duplicates >= books.webhooks_redelivered      # more only if a POST was retried
    assert books.wakes_fired > 0 and books.messages_sent >= books.inputs_accepted
    assert books.found_delivered_after_crash + books.resent_after_crash >= 1
    assert set(books.throughput) == {1, 2, 4} and all(v > 0 for v in books.throughput.values())
    assert report.splitlines()[-1].startswith("RESULT ")
