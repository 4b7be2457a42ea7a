"""The production host under faults: the real roles as processes, the books kept at the channel.

`falai host intake|worker|dispatcher|sender` run as processes under a supervisor that restarts what
dies (as systemd's Restart=always), against the local Postgres (tables of this run only) and a
redis-server of this test's own, with the demo agent's instant model at 20-60 ms a call and a fake
channel on 127.0.0.1 that never dedupes. Signed webhooks for N conversations (redeliveries among
them, reminders: timer wakes, and the silence at the end: silence wakes) and one poison
conversation whose replies the channel refuses for good. During the traffic: workers stopped
(SIGKILL with the short job timeout; SIGTERM, a supervisor's stop, with the default settings,
whose lease is two minutes), the sender and the dispatcher SIGKILLed, Redis restarted empty, and
every Postgres connection of the run terminated (``FALAI_FAULT_PG_RESTART=1`` restarts the
Postgres server itself instead: it disturbs every other user of it, so never by default).

After the drain, at the channel: every reply, reminder and silence message exactly once, nothing
lost; the poison conversation's messages are dead letters; the backlog is empty; no log flood.
Marked ``faults`` (deselect with ``-m "not faults"``); ``FALAI_FAULT_SCALE=large`` runs 100
conversations of 5 messages.
"""
import hashlib
import hmac
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

pytest.importorskip("rq", reason="the production host needs its extra: pip install 'falai[host]' (rq)")
psycopg = pytest.importorskip("psycopg", reason="the production host needs its extra: pip install 'falai[host]'")
pytest.importorskip("redis", reason="the production host needs its extra: pip install 'falai[host]'")

import requests  # noqa: E402

import falai_host as H  # noqa: E402
from host_harness import ROOT, FakeChannel, OwnRedis, Supervisor, free_port, jitter, role_env, wait_for  # noqa: E402

DSN = os.environ.get("FALAI_TEST_POSTGRES_DSN", "host=127.0.0.1 dbname=test")
SECRET = "fault-test-secret"


def _postgres_reason():
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
        return None
    except Exception as error:
        return f"Postgres at {DSN!r} is unreachable: {error}"


pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH"),
    pytest.mark.skipif(_postgres_reason() is not None, reason=str(_postgres_reason())),
]

LARGE = os.environ.get("FALAI_FAULT_SCALE") == "large"


class Conversation:
    def __init__(self, session_id, messages, reminder_at):
        self.session_id = session_id
        self.ids = [f"m{i}" for i in range(messages)]
        self.reminder_at = reminder_at            # index of the message that asks for a reminder, or None

    def text(self, index):
        return "me lembre depois" if index == self.reminder_at else f"mensagem {index} de {self.session_id}"


class FaultRun:
    """One run: services, roles, traffic, faults, drain, audit."""

    def __init__(self, settings, kill_workers_with, sessions, messages):
        self.tag = f"falai_ft{os.getpid()}_{os.urandom(3).hex()}_"
        self.redis = OwnRedis()
        self.channel = FakeChannel(delay_s=jitter(0.0, 0.02),
                                   status_for=lambda body: 400 if body["session_id"] == "poison" else 200)
        self.port = free_port()
        self.logs = tempfile.mkdtemp(prefix="falai-faults-")
        self.config = H.Config(dsn=DSN, redis_url=self.redis.url, prefix=self.tag, queue=self.tag,
                               channel_url=self.channel.url, secret=SECRET, port=self.port, poll_s=0.2,
                               send_timeout_s=2.0, **settings)
        self.env = role_env({**H.config_env(self.config), "FALAI_AGENT": "demo_agent:make_agent",
                             "FALAI_DEMO_REMINDER": "2s", "FALAI_DEMO_SILENCE": "4s",
                             "FALAI_DEMO_LATENCY_MS": "20,60", "PGAPPNAME": self.tag})
        self.kill_workers_with = kill_workers_with
        rng = random.Random(20)
        self.conversations = [Conversation(f"c{i:03d}", messages, rng.randrange(messages) if i % 4 == 0 else None)
                              for i in range(sessions)]
        self.poison = Conversation("poison", 1, None)
        self.redeliveries = 0
        self.faults: list[str] = []
        self.host = H.Host(self.config)
        self.supervisor: Supervisor | None = None

    # processes -------------------------------------------------------------------------------

    def start(self, workers=3):
        schema = subprocess.run([sys.executable, "-m", "falai_cli", "host", "schema"], env=self.env, cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert schema.returncode == 0, schema.stderr
        self.supervisor = Supervisor(self.env, self.logs)
        self.supervisor.start("intake", "intake")
        for i in range(workers):
            self.supervisor.start(f"worker{i}", "worker")
        self.health = {"dispatcher": free_port(), "sender": free_port()}
        self.supervisor.start("dispatcher", "dispatcher", "--health-port", str(self.health["dispatcher"]))
        self.supervisor.start("sender", "sender", "--health-port", str(self.health["sender"]))
        assert wait_for(self._intake_ready, 60), "the intake did not come up"

    def _intake_ready(self):
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def close(self):
        if self.supervisor:
            self.supervisor.close()
        with self.host.pool.connection() as db:
            for name in ("inbox", "wakes", "outbox", "sessions", "schema"):
                db.execute(f"DROP TABLE IF EXISTS {self.tag}{name}")
        self.host.close()
        self.channel.close()
        self.redis.close()
        if not os.environ.get("FALAI_FAULT_KEEP_LOGS"):
            shutil.rmtree(self.logs, ignore_errors=True)

    # traffic ---------------------------------------------------------------------------------

    def post(self, body):
        """A signed webhook, retried until the intake accepts it, as a channel retries a webhook."""
        data = json.dumps(body).encode()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            timestamp = str(int(time.time()))
            digest = hmac.new(SECRET.encode(), timestamp.encode() + b"." + data, hashlib.sha256).hexdigest()
            try:
                response = requests.post(f"http://127.0.0.1:{self.port}/messages", data=data, timeout=10,
                                         headers={"X-Falai-Timestamp": timestamp,
                                                  "X-Falai-Signature": f"sha256={digest}",
                                                  "Content-Type": "application/json"})
                if response.status_code == 202:
                    return response.json()
                assert response.status_code >= 500, response.text       # a 4xx would be a bug here
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise AssertionError(f"webhook never accepted: {body}")

    def converse(self, conversation, seed):
        rng = random.Random(seed)
        for index, message_id in enumerate(conversation.ids):
            body = {"session_id": conversation.session_id, "id": message_id, "text": conversation.text(index)}
            self.post(body)
            if rng.random() < 0.15:
                assert self.post(body)["duplicate"] is True
                self.redeliveries += 1
            time.sleep(rng.uniform(0.3, 1.0))

    def traffic_with_faults(self):
        threads = [threading.Thread(target=self.converse, args=(c, i))
                   for i, c in enumerate(self.conversations + [self.poison])]
        for thread in threads:
            thread.start()
            time.sleep(0.02)
        schedule = [(1.0, self.stop_worker, "worker0"), (2.0, self.kill, "sender"),
                    (3.0, self.restart_redis, None), (4.0, self.kill, "dispatcher"),
                    (5.0, self.break_postgres, None), (6.0, self.stop_worker, "worker1")]
        started = time.monotonic()
        for at, fault, argument in schedule:
            time.sleep(max(0.0, started + at - time.monotonic()))
            fault(argument)
        for thread in threads:
            thread.join(120)

    # faults ----------------------------------------------------------------------------------

    def kill(self, name):
        self.supervisor.signal(name, signal.SIGKILL)
        self.faults.append(f"SIGKILL {name}")

    def stop_worker(self, name):
        self.supervisor.signal(name, self.kill_workers_with)
        self.faults.append(f"{signal.Signals(self.kill_workers_with).name} {name}")

    def restart_redis(self, _):
        self.redis.restart(down_s=1.0)
        self.faults.append("Redis restarted empty")

    def break_postgres(self, _):
        if os.environ.get("FALAI_FAULT_PG_RESTART") == "1":
            version = os.listdir("/etc/postgresql")[0]
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                           check=True, timeout=60)
            self.faults.append("Postgres restarted")
            return
        with psycopg.connect(DSN, autocommit=True) as admin:
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE application_name = %s", (self.tag,)).fetchone()[0]
        self.faults.append(f"{killed} Postgres connections terminated")

    # books -----------------------------------------------------------------------------------

    def expected_replies(self):
        keys = set()
        for c in self.conversations:
            for index, message_id in enumerate(c.ids):
                flow = "lembrete#{}:ok:1" if index == c.reminder_at else "idle:{}"
                keys.add(f"{c.session_id}/{flow.format(message_id)}")
        return keys

    def delivered(self):
        with self.channel.lock:
            return {key: len(times) for key, times in self.channel.deliveries.items()}

    def drained(self):
        delivered = self.delivered()
        if not self.expected_replies() <= set(delivered):
            return False
        for c in self.conversations:
            if not any(k.startswith(f"{c.session_id}/retomar#") for k in delivered):
                return False
            if c.reminder_at is not None and not any(
                    k.startswith(f"{c.session_id}/lembrete#{c.ids[c.reminder_at]}:aviso:") for k in delivered):
                return False
        p = self.tag
        open_rows = self.host.sql(
            f"SELECT (SELECT count(*) FROM {p}inbox WHERE done_at IS NULL) + "
            f"(SELECT count(*) FROM {p}wakes WHERE done_at IS NULL AND due_at <= now()) + "
            f"(SELECT count(*) FROM {p}outbox WHERE sent_at IS NULL AND dead_at IS NULL)")[0][0]
        return open_rows == 0

    def audit(self):
        delivered = self.delivered()
        assert {k: n for k, n in delivered.items() if n > 1} == {}, "a message reached the channel twice"
        assert self.expected_replies() <= set(delivered), "a reply was lost"
        for c in self.conversations:
            silences = [k for k in delivered if k.startswith(f"{c.session_id}/retomar#")]
            assert silences, f"{c.session_id}: no silence message"
            reminders = [k for k in delivered if k.startswith(f"{c.session_id}/lembrete#") and ":aviso:" in k]
            assert len(reminders) == (c.reminder_at is not None), f"{c.session_id}: reminders {reminders}"
        assert not any(k.startswith("poison/") for k in delivered)
        letters = self.host.dead_letters()
        assert letters and {(l["kind"], l["session_id"]) for l in letters} == {("outbox", "poison")}
        assert all(l["reason"].startswith("refused for good: channel answered 400") for l in letters)
        sessions = self.host.sql(f"SELECT id, blob FROM {self.tag}sessions")
        inputs = {session_id: blob["inputs"] for session_id, blob in sessions}
        for c in self.conversations:                     # every input applied once: no lost update
            assert sorted(inputs[c.session_id]) == sorted(c.ids), c.session_id
        assert self.supervisor.log_size() < 2_000_000, "the roles flooded their logs"
        for role, port in self.health.items():           # each long-running role answers for itself
            base = f"http://127.0.0.1:{port}"
            assert requests.get(f"{base}/healthz", timeout=5).status_code == 200, role
            assert requests.get(f"{base}/readyz", timeout=5).json() == {"ready": True, "postgres": "ok",
                                                                        "redis": "ok"}, role
            metrics = requests.get(f"{base}/metrics", timeout=5).text
            assert "\nfalai_outbox_pending 0\n" in metrics and "\nfalai_queue_depth 0\n" in metrics, role
        return {"conversations": len(self.conversations), "messages": sum(len(c.ids) for c in self.conversations),
                "redeliveries": self.redeliveries, "deliveries": len(delivered),
                "reminders": sum(c.reminder_at is not None for c in self.conversations),
                "dead letters": len(letters), "restarts": self.supervisor.restarts, "faults": self.faults}


def run_faults(settings, kill_workers_with):
    sessions, messages = (100, 5) if LARGE else (12, 3)
    run = FaultRun(settings, kill_workers_with, sessions, messages)
    try:
        run.start()
        run.traffic_with_faults()
        drained = wait_for(run.drained, 300 if LARGE else 75, every_s=0.5)
        books = run.audit()
        assert drained, "the backlog did not drain"
        assert books["restarts"] >= 4 and len(books["faults"]) == 6
        print(f"\n{json.dumps(books)}")
    finally:
        run.close()


def test_the_host_with_its_default_settings_loses_nothing_and_repeats_nothing():
    """The defaults: lease 120 s, job timeout 100 s, retries 5, 30, ... s; workers stopped by SIGTERM."""
    run_faults({}, signal.SIGTERM)


def test_the_host_with_a_short_job_timeout_loses_nothing_and_repeats_nothing():
    """The setting that wedged every worker of the example host after a Postgres restart (job timeout
    5 s there; 2 s here), with workers SIGKILLed mid-traffic."""
    run_faults({"lease_s": 4.0, "job_timeout_s": 2, "retry_intervals": (1, 1, 2)}, signal.SIGKILL)
