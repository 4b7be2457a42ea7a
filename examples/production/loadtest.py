"""Load and fault test of the production host against the real Postgres and a Redis of its own.

    python examples/production/loadtest.py            # the full run (a few minutes)
    python examples/production/loadtest.py --ci       # the CI-sized run (under a minute)

It starts its own ``redis-server`` on a free port in a temporary directory (so
restarting it harms nobody), uses its own uniquely named Postgres tables
(dropped at the end), a fake messaging channel on 127.0.0.1, the intake in a
thread, and the dispatcher, the sender and K workers as processes that a
supervisor restarts when they die. The model is ``InstantModel``.

1. Throughput: the same load with 1, 2 and 4 workers (no faults).
2. Latency: inputs at a steady rate, from arrival to the reply leaving the sender.
3. Faults: one paced stream of webhooks for N sessions (redeliveries, reminders:
   timer wakes, silences: silence wakes), a burst on one session, scripted
   understand failures (retried with backoff); a worker SIGKILLed mid-turn at a
   fifth of the stream, the sender SIGKILLed mid-delivery at half, Redis
   restarted empty at seven tenths (then ``recover``).

Then it checks the books and prints them; the last line gives the counts.
Every loop is bounded in count and time: the run stops by itself.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse
from wsgiref.simple_server import make_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import requests  # noqa: E402
from rq import Worker  # noqa: E402
from rq.suspension import resume, suspend  # noqa: E402

import host as H  # noqa: E402


@dataclass
class LoadConfig:
    """How big the run is; ``ci()`` is the size the test suite runs."""
    throughput_sessions: int = 100
    throughput_messages: int = 6            # per session
    fault_sessions: int = 150
    fault_messages: int = 5                 # per session, besides the burst
    burst: int = 40                         # concurrent messages on one session (at most 50: session.inputs)
    duplicate_rate: float = 0.15            # share of messages whose webhook is delivered twice
    reminder_rate: float = 0.15             # share of messages that ask for a reminder (a timer wake)
    fail_rate: float = 0.05                 # understand calls that raise a retryable ProviderError
    latency_inputs: int = 300
    latency_rate: float = 20.0              # inputs per second in the latency phase
    fault_workers: int = 4
    fault_rate: float = 60.0                # webhooks per second in the fault phase (the burst comes at once)
    worker_counts: tuple = (1, 2, 4)
    post_threads: int = 8
    deadline_s: float = 240.0               # per phase: the run fails rather than wait longer
    postgres_dsn: str = os.environ.get("FALAI_TEST_POSTGRES_DSN", "host=127.0.0.1 dbname=test")

    @classmethod
    def ci(cls) -> "LoadConfig":
        return cls(throughput_sessions=20, throughput_messages=3, fault_sessions=10, fault_messages=3, burst=12,
                   fault_workers=3, latency_inputs=40, fault_rate=40.0, deadline_s=45.0)


# The fake channel #############################################################

class FakeChannel:
    """A messaging API on 127.0.0.1 that records every delivery (never dedupes: a repeat is a duplicate send).

    ``delay_s`` holds each response after the delivery is recorded, so a test
    can kill the sender while a delivery is in flight (recorded, not acknowledged).
    """

    def __init__(self):
        self.deliveries: dict[str, list[float]] = {}
        self.in_flight = 0      # deliveries recorded and held by delay_s, not yet acknowledged
        self.delay_s = 0.0
        self.lock = threading.Lock()
        channel = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with channel.lock:
                    channel.deliveries.setdefault(body["idempotency_key"], []).append(time.time())
                    delay = channel.delay_s
                    # only a held delivery counts: one that came before delay_s was set is answered at once,
                    # and a sender killed while it is "in flight" may already have marked it sent
                    channel.in_flight += bool(delay)
                try:
                    time.sleep(delay)
                    self._reply({"ok": True})
                except (BrokenPipeError, ConnectionResetError):
                    pass                                # the sender died mid-delivery: the point of the test
                finally:
                    with channel.lock:
                        channel.in_flight -= bool(delay)

            def do_GET(self):
                key = parse_qs(urlparse(self.path).query)["key"][0]
                with channel.lock:
                    self._reply({"delivered": key in channel.deliveries})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# Processes ######################################################################

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRedis:
    """A redis-server of this run only: no persistence, so a restart loses every queued job."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("loadtest: redis-server is not on PATH. Install Redis (apt-get install redis-server).")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="falai-loadtest-redis-")
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"loadtest: redis-server did not start on port {self.port}")

    def restart(self, down_s: float = 1.0):
        self.stop()
        time.sleep(down_s)
        self.start()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Supervisor:
    """Runs the host's roles as processes and restarts one that dies (as systemd's Restart=always would)."""

    def __init__(self, env: dict):
        self.env = env
        self.processes: dict[str, subprocess.Popen] = {}
        self.restarts = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def start(self, name: str, role: str):
        with self.lock:
            self.processes[name] = subprocess.Popen([sys.executable, os.path.join(HERE, "host.py"), role],
                                                    env=self.env, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL)

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def kill(self, pid: int):
        os.kill(pid, signal.SIGKILL)

    def _watch(self):
        while not self.stopping.wait(0.2):
            with self.lock:
                dead = [(name, p) for name, p in self.processes.items() if p.poll() is not None]
            for name, process in dead:
                role = process.args[-1]
                self.restarts += 1
                self.start(name, role)

    def stop(self, names: list[str] | None = None):
        with self.lock:
            chosen = [n for n in self.processes if names is None or n in names]
            victims = [self.processes.pop(n) for n in chosen]
        for process in victims:
            if process.poll() is None:
                process.terminate()
        for process in victims:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def close(self):
        self.stopping.set()
        self.thread.join(5)
        self.stop()


# The run ##########################################################################

@dataclass
class Post:
    session_id: str
    message_id: str
    text: str


@dataclass
class Books:
    """What the run counted (the report)."""
    inputs_posted: int = 0
    webhooks_redelivered: int = 0
    intake_duplicates: int = 0
    inputs_accepted: int = 0
    engine_duplicates: int = 0
    turns: int = 0
    conflicts_replayed: int = 0
    provider_errors_retried: int = 0
    messages_sent: int = 0
    duplicate_sends: int = 0
    lost_updates: int = 0
    never_delivered: int = 0
    inputs_given_up: int = 0
    wakes_fired: int = 0
    wakes_stale: int = 0
    wakes_replaced: int = 0
    resent_after_crash: int = 0
    found_delivered_after_crash: int = 0
    p50_ms: float = 0.0                      # the latency phase
    p95_ms: float = 0.0
    fault_p50_ms: float = 0.0                # the fault phase (kills, a Redis restart, retries)
    fault_p95_ms: float = 0.0
    throughput: dict = field(default_factory=dict)        # workers -> turns per second
    sender_rate: dict = field(default_factory=dict)       # workers -> messages per second of the one sender
    worker_killed_mid_turn: bool = False
    sender_killed_mid_delivery: bool = False
    redis_restarted: bool = False
    process_restarts: int = 0
    recovered: dict = field(default_factory=dict)           # what recover() counted after the Redis restart
    seconds: float = 0.0


class LoadRun:
    def __init__(self, load: LoadConfig, log=print):
        self.load = load
        self.log = log
        self.random = random.Random(13)
        self.tag = f"lt{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.marks = tempfile.mkdtemp(prefix="falai-loadtest-marks-")
        self.redis = OwnRedis()
        self.channel = FakeChannel()
        self.config = H.Config(postgres_dsn=load.postgres_dsn, redis_url=self.redis.url, prefix=f"falai_{self.tag}_",
                               queue=f"falai_{self.tag}", agent="demo_agent:make_agent", channel_url=self.channel.url,
                               lease_s=3.0, job_timeout_s=2, retry_intervals=[1, 1, 2, 2, 3], poll_s=0.05)
        self.host = H.Host(self.config)
        self.host.initialize()
        self.books = Books()
        self.http = threading.local()
        self.posted = 0                          # webhooks the intake answered (the fault phase's progress)
        self.counter = threading.Lock()

    # plumbing ------------------------------------------------------------------

    def env(self, **agent_env) -> dict:
        env = dict(os.environ)
        env.update(self.config.to_env())
        env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.join(HERE, "..", ".."), env.get("PYTHONPATH", "")])
        env.update({"FALAI_DEMO_MARKS": self.marks, "FALAI_DEMO_SLOW_S": "1.5"})
        env.pop("GEMINI_API_KEY", None)                   # the load test measures the host, not a vendor
        env.update(agent_env)
        return env

    def start_intake(self):
        server = make_server("127.0.0.1", 0, H.intake_app(self.config), server_class=H._ThreadingServer,
                             handler_class=H._QuietHandler)
        self.intake_server = server
        self.intake_url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def post(self, item: Post) -> bool:
        """POST one message webhook; True when the intake called it a redelivery."""
        session = getattr(self.http, "session", None) or requests.Session()
        self.http.session = session
        for _ in range(50):
            try:
                response = session.post(f"{self.intake_url}/messages", timeout=10,
                                        json={"session_id": item.session_id, "id": item.message_id, "text": item.text})
                response.raise_for_status()
                with self.counter:
                    self.posted += 1
                return response.json()["duplicate"]
            except requests.RequestException:
                time.sleep(0.1)                       # a channel redelivers a webhook that failed
        raise RuntimeError(f"loadtest: the intake refused {item} 50 times")

    def _wait_posted(self, count: int):
        deadline = time.time() + self.load.deadline_s
        while self.posted < count and time.time() < deadline:
            time.sleep(0.01)

    def post_all(self, items: list[Post], rate: float | None = None) -> int:
        """POST them all from ``post_threads`` threads, at most ``rate`` a second (None: as fast as possible);
        returns how many the intake called redeliveries."""
        with ThreadPoolExecutor(self.load.post_threads) as pool:
            futures = []
            for item in items:
                futures.append(pool.submit(self.post, item))
                if rate:
                    time.sleep(1 / rate)
            return sum(int(f.result()) for f in futures)

    def scalar(self, sql: str, params=()) -> int:
        return self.host.db.execute(sql.format(p=self.config.prefix), params).fetchone()[0] or 0

    def open_work(self, like: str = "%") -> int:
        """Inputs and wakes not done, and messages not sent, for sessions whose id matches ``like``."""
        return (self.scalar("SELECT count(*) FROM {p}inbox WHERE done_at IS NULL AND session_id LIKE %s", (like,))
                # a wake due later than the run waits for (the throughput phase's 1h silences) does not count
                + self.scalar("SELECT count(*) FROM {p}wakes WHERE done_at IS NULL AND session_id LIKE %s "
                              "AND due_at < clock_timestamp() + interval '30 seconds'", (like,))
                + self.scalar("SELECT count(*) FROM {p}outbox WHERE sent_at IS NULL AND session_id LIKE %s", (like,)))

    def wait_workers(self, count: int):
        deadline = time.time() + 60
        while Worker.count(queue=self.host.queue) < count:
            if time.time() > deadline:
                raise TimeoutError(f"loadtest: {count} workers did not register with RQ within 60s")
            time.sleep(0.1)

    def wait_quiet(self, like: str, what: str) -> float:
        start = time.time()
        while time.time() - start < self.load.deadline_s:
            if self.open_work(like) == 0:
                return time.time()
            time.sleep(0.05)
        raise TimeoutError(f"loadtest: {what} still had {self.open_work(like)} open rows after "
                           f"{self.load.deadline_s:.0f}s")

    def latencies(self, like: str) -> tuple[float, float]:
        """p50 and p95 (ms) from an input's arrival to the first message it caused leaving the sender."""
        rows = self.host.db.execute(
            f"SELECT extract(epoch FROM min(o.sent_at) - i.received_at) * 1000 FROM {self.config.prefix}inbox i "
            f"JOIN {self.config.prefix}outbox o ON o.session_id = i.session_id AND o.cause = i.input_key "
            "WHERE i.session_id LIKE %s GROUP BY i.session_id, i.input_key, i.received_at", (like,)).fetchall()
        values = sorted(float(r[0]) for r in rows)
        if not values:
            return 0.0, 0.0
        return values[len(values) // 2], values[min(len(values) - 1, int(len(values) * 0.95))]

    # phases ------------------------------------------------------------------

    def throughput_phase(self, workers: int):
        """The inputs are queued while the workers are suspended (rq suspend), then released at once:
        turns/s is what the K workers get done, from the first input done to the last."""
        like = f"t{workers}-%"
        supervisor = Supervisor(self.env(FALAI_DEMO_SILENCE="1h", FALAI_DEMO_REMINDER="1h", FALAI_DEMO_FAIL_RATE="0"))
        try:
            suspend(self.host.redis)
            supervisor.start("dispatcher", "dispatcher")
            supervisor.start("sender", "sender")
            for i in range(workers):
                supervisor.start(f"worker{i}", "worker")
            self.wait_workers(workers)
            items = [Post(f"t{workers}-s{s}", f"t{workers}-s{s}-m{m}", f"mensagem {m}")
                     for m in range(self.load.throughput_messages) for s in range(self.load.throughput_sessions)]
            self.post_all(items)
            resume(self.host.redis)
            self.wait_quiet(like, f"the {workers}-worker phase")
            p = self.config.prefix
            first, last, sent_first, sent_last = self.host.db.execute(
                f"SELECT min(i.done_at), max(i.done_at), min(o.sent_at), max(o.sent_at) FROM {p}inbox i "
                f"JOIN {p}outbox o ON o.session_id = i.session_id AND o.cause = i.input_key "
                "WHERE i.session_id LIKE %s", (like,)).fetchone()
            turns = (len(items) - 1) / max((last - first).total_seconds(), 1e-3)
            sent = (len(items) - 1) / max((sent_last - sent_first).total_seconds(), 1e-3)
            self.books.throughput[workers] = round(turns, 1)
            self.books.sender_rate[workers] = round(sent, 1)
            self.log(f"  {workers} worker(s): {len(items)} inputs, {turns:.1f} turns/s (saved with their outbox "
                     f"and wakes); the one sender delivered {sent:.1f} messages/s")
        finally:
            resume(self.host.redis)
            supervisor.close()
            self.host.queue.empty()

    def latency_phase(self, workers: int = 2):
        """Inputs at a steady rate, one at a time: p50/p95 from arrival to the reply leaving the sender."""
        like = "l-%"
        supervisor = Supervisor(self.env(FALAI_DEMO_SILENCE="1h", FALAI_DEMO_REMINDER="1h", FALAI_DEMO_FAIL_RATE="0"))
        try:
            supervisor.start("dispatcher", "dispatcher")
            supervisor.start("sender", "sender")
            for i in range(workers):
                supervisor.start(f"worker{i}", "worker")
            self.wait_workers(workers)
            for n in range(self.load.latency_inputs):
                self.post(Post(f"l-s{n % 10}", f"l-m{n}", f"mensagem {n}"))
                time.sleep(1 / self.load.latency_rate)
            self.wait_quiet(like, "the latency phase")
            self.books.p50_ms, self.books.p95_ms = (round(v, 1) for v in self.latencies(like))
            self.log(f"  {self.load.latency_inputs} inputs at {self.load.latency_rate}/s, {workers} workers: "
                     f"input-to-send p50 {self.books.p50_ms} ms, p95 {self.books.p95_ms} ms")
        finally:
            supervisor.close()

    def fault_phase(self):
        load, like = self.load, "f-%"
        supervisor = Supervisor(self.env(FALAI_DEMO_SILENCE="3s", FALAI_DEMO_REMINDER="1s",
                                         FALAI_DEMO_FAIL_RATE=str(load.fail_rate)))
        try:
            supervisor.start("dispatcher", "dispatcher")
            supervisor.start("sender", "sender")
            for i in range(load.fault_workers):
                supervisor.start(f"worker{i}", "worker")
            self.wait_workers(load.fault_workers)
            items: list[Post] = []
            for s in range(load.fault_sessions):
                for m in range(load.fault_messages):
                    text = "me lembre depois do almoço" if self.random.random() < load.reminder_rate else f"oi {m}"
                    items.append(Post(f"f-s{s}", f"f-s{s}-m{m}", text))
            self.random.shuffle(items)
            burst = [Post("f-burst", f"f-burst-m{m}", f"rajada {m}") for m in range(load.burst)]
            redelivered = [item for item in items + burst if self.random.random() < load.duplicate_rate]
            slow = Post("f-slow", "f-slow-m0", "[lento] uma pergunta demorada")
            self.books.inputs_posted = len(items) + len(burst) + len(redelivered) + 1
            self.books.webhooks_redelivered = len(redelivered)
            stream = items + redelivered
            self.random.shuffle(stream)                 # a redelivery may even come before its original
            posters = ThreadPoolExecutor(4)
            self.posted = 0
            duplicates = [posters.submit(self.post_all, burst),           # the burst: all at once, one session
                          posters.submit(self.post_all, stream, load.fault_rate)]
            # 1. at a fifth of the stream, a worker SIGKILLed in the middle of a turn (its model call sleeps)
            self._wait_posted(len(stream) // 5)
            duplicates.append(posters.submit(self.post, slow))
            self.books.worker_killed_mid_turn = self._kill_slow_worker(supervisor)
            # 2. at half, the sender SIGKILLed while a delivery is in flight
            self._wait_posted(len(stream) // 2)
            self.books.sender_killed_mid_delivery = self._kill_sender_mid_delivery(supervisor)
            # 3. at seven tenths, Redis killed and restarted empty (no persistence) while inputs keep arriving
            self._wait_posted(len(stream) * 7 // 10)
            self.redis.restart(down_s=1.0)
            self.books.redis_restarted = True
            # the operator's move after a queue loss: without it the leases (3s here) bring everything back too
            self.books.recovered = self.host.recover()
            self.log(f"  Redis restarted empty; recover: {self.books.recovered}")
            self.books.intake_duplicates = sum(int(f.result()) for f in duplicates)
            posters.shutdown()
            self.wait_quiet(like, "the fault phase")
            self.books.process_restarts = supervisor.restarts
        finally:
            supervisor.close()

    def _kill_slow_worker(self, supervisor: Supervisor) -> bool:
        deadline = time.time() + 15
        while time.time() < deadline:
            marks = [name for name in os.listdir(self.marks) if name.startswith("slow-")]
            if marks:
                with open(os.path.join(self.marks, marks[0])) as mark:
                    text = mark.read()
                if text:
                    pid = int(text)
                    still_open = self.scalar("SELECT count(*) FROM {p}inbox WHERE input_key = 'f-slow-m0' "
                                             "AND done_at IS NULL")
                    supervisor.kill(pid)
                    self.log(f"  SIGKILL worker pid {pid} in the middle of a turn (its input open: {bool(still_open)})")
                    return bool(still_open)
            time.sleep(0.02)
        return False

    def _kill_sender_mid_delivery(self, supervisor: Supervisor) -> bool:
        self.channel.delay_s = 0.5
        try:
            deadline = time.time() + 15
            while time.time() < deadline:
                if self.channel.in_flight:
                    supervisor.kill(supervisor.pid("sender"))
                    self.log("  SIGKILL the sender while a delivery was in flight")
                    return True
                time.sleep(0.005)
            return False
        finally:
            self.channel.delay_s = 0.0

    # the books ------------------------------------------------------------------

    def audit(self, like: str = "f-%"):
        b, p, db = self.books, self.config.prefix, self.host.db
        b.inputs_accepted = self.scalar("SELECT count(*) FROM {p}inbox WHERE session_id LIKE %s", (like,))
        b.engine_duplicates = self.scalar("SELECT count(*) FROM {p}inbox WHERE result = 'duplicate-input' "
                                          "AND session_id LIKE %s", (like,))
        b.turns = (self.scalar("SELECT sum(turns) FROM {p}inbox WHERE session_id LIKE %s", (like,))
                   + self.scalar("SELECT sum(turns) FROM {p}wakes WHERE session_id LIKE %s", (like,)))
        b.conflicts_replayed = (self.scalar("SELECT sum(conflicts) FROM {p}inbox WHERE session_id LIKE %s", (like,))
                                + self.scalar("SELECT sum(conflicts) FROM {p}wakes WHERE session_id LIKE %s", (like,)))
        b.provider_errors_retried = self.scalar("SELECT sum(provider_errors) FROM {p}inbox WHERE session_id LIKE %s",
                                                (like,))
        b.inputs_given_up = (self.scalar("SELECT count(*) FROM {p}inbox WHERE result = 'gave-up' AND session_id "
                                         "LIKE %s", (like,))
                             + self.scalar("SELECT count(*) FROM {p}wakes WHERE result = 'gave-up' AND session_id "
                                           "LIKE %s", (like,)))
        b.wakes_fired = self.scalar("SELECT count(*) FROM {p}wakes WHERE result = 'applied' AND session_id LIKE %s",
                                    (like,))
        b.wakes_stale = self.scalar("SELECT count(*) FROM {p}wakes WHERE result IN ('stale-wake', 'silence-broken') "
                                    "AND session_id LIKE %s", (like,))
        b.wakes_replaced = self.scalar("SELECT count(*) FROM {p}wakes WHERE result = 'replaced' AND session_id "
                                       "LIKE %s", (like,))
        b.resent_after_crash = self.scalar("SELECT count(*) FROM {p}outbox WHERE outcome = 'resent' AND session_id "
                                           "LIKE %s", (like,))
        b.found_delivered_after_crash = self.scalar("SELECT count(*) FROM {p}outbox WHERE outcome = 'found-delivered' "
                                                    "AND session_id LIKE %s", (like,))
        outbox = db.execute(f"SELECT session_id, message_key, sent_at FROM {p}outbox WHERE session_id LIKE %s",
                            (like,)).fetchall()
        b.messages_sent = sum(1 for row in outbox if row[2] is not None)
        with self.channel.lock:
            deliveries = {key: len(times) for key, times in self.channel.deliveries.items()
                          if key.startswith(like[:-1])}
        b.duplicate_sends = sum(count - 1 for count in deliveries.values() if count > 1)
        # never delivered: an outbox row the channel never got, or an applied message input that produced nothing
        b.never_delivered = sum(1 for s, k, _ in outbox if f"{s}/{k}" not in deliveries)
        b.never_delivered += self.scalar(
            "SELECT count(*) FROM {p}inbox i WHERE i.session_id LIKE %s AND i.kind = 'message' AND NOT EXISTS "
            "(SELECT 1 FROM {p}outbox o WHERE o.session_id = i.session_id AND o.cause = i.input_key)", (like,))
        # lost updates: an accepted input whose id the final session does not hold (each session has <= 50 inputs)
        b.lost_updates = 0
        for session_id, keys in db.execute(f"SELECT session_id, array_agg(input_key) FROM {p}inbox WHERE session_id "
                                           "LIKE %s AND kind = 'message' GROUP BY session_id", (like,)).fetchall():
            session = self.host.store.load(session_id)
            held = set(session.inputs) if session else set()
            b.lost_updates += sum(1 for key in keys if key not in held)
        b.fault_p50_ms, b.fault_p95_ms = (round(v, 1) for v in self.latencies(like))

    def run(self) -> Books:
        start = time.time()
        try:
            self.start_intake()
            self.log("throughput (no faults):")
            for workers in self.load.worker_counts:
                self.throughput_phase(workers)
            self.log("latency (no faults):")
            self.latency_phase()
            self.log(f"faults ({self.load.fault_workers} workers):")
            self.fault_phase()
            self.audit()
        finally:
            self.close()
        self.books.seconds = round(time.time() - start, 1)
        return self.books

    def close(self):
        server = getattr(self, "intake_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
        self.channel.close()
        try:
            self.host.drop()
            self.host.close()
        finally:
            self.redis.close()
            shutil.rmtree(self.marks, ignore_errors=True)


def report(books: Books) -> str:
    b = books
    lines = [
        f"inputs posted {b.inputs_posted} (webhooks redelivered {b.webhooks_redelivered}); accepted "
        f"{b.inputs_accepted}; redeliveries stopped at the intake {b.intake_duplicates}, by the engine "
        f"(duplicate-input) {b.engine_duplicates}",
        f"turns {b.turns}; conflicts replayed {b.conflicts_replayed}; understand failures retried "
        f"{b.provider_errors_retried}; given up {b.inputs_given_up}",
        f"messages sent {b.messages_sent}; after a sender crash: found delivered {b.found_delivered_after_crash}, "
        f"resent {b.resent_after_crash}",
        f"wakes fired {b.wakes_fired}; ignored as stale {b.wakes_stale}; replaced before due {b.wakes_replaced}",
        f"faults: worker killed mid-turn {b.worker_killed_mid_turn}, sender killed mid-delivery "
        f"{b.sender_killed_mid_delivery}, redis restarted {b.redis_restarted}; process restarts {b.process_restarts}; "
        f"recover after the restart: {b.recovered}",
        f"latency input-to-send: steady p50 {b.p50_ms} ms, p95 {b.p95_ms} ms; during the faults p50 "
        f"{b.fault_p50_ms} ms, p95 {b.fault_p95_ms} ms",
        "throughput: " + ", ".join(f"{k} worker(s) {v} turns/s" for k, v in b.throughput.items())
        + "; the one sender: " + ", ".join(f"{v} messages/s" for v in b.sender_rate.values()),
        f"RESULT inputs={b.inputs_accepted} turns={b.turns} conflicts_replayed={b.conflicts_replayed} "
        f"messages_sent={b.messages_sent} duplicate_sends={b.duplicate_sends} lost_updates={b.lost_updates} "
        f"never_delivered={b.never_delivered} wakes_fired={b.wakes_fired} wakes_stale={b.wakes_stale} "
        f"p50_ms={b.p50_ms} p95_ms={b.p95_ms} "
        + " ".join(f"throughput_{k}w={v}/s" for k, v in b.throughput.items()),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Load and fault test of the production host.")
    parser.add_argument("--ci", action="store_true", help="the CI-sized run")
    args = parser.parse_args(argv)
    books = LoadRun(LoadConfig.ci() if args.ci else LoadConfig()).run()
    print(report(books))
    return 0 if books.duplicate_sends == books.lost_updates == books.never_delivered == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
