"""What the production host's tests and its benchmark run against: a fake channel on 127.0.0.1, a
redis-server of their own, and the host's roles as supervised processes (``falai host ROLE``)."""
from __future__ import annotations

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
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCTION = os.path.join(ROOT, "examples", "production")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server(ThreadingHTTPServer):
    request_queue_size = 128              # many sends connect at once
    daemon_threads = True


class FakeChannel:
    """A messaging API on 127.0.0.1: ``POST /send`` records every delivery under its idempotency key
    (it never dedupes: a repeat is a duplicate), ``GET /delivered?key=`` answers from the record.

    ``status_for(body)`` may answer a status other than 200 (a refusal, an outage); ``delay_s``
    holds each answer (a slow channel; a callable gets a fresh value each time); ``record_after_s``
    records a delivery only that long after it arrived (a channel slower than its lookup).
    """

    def __init__(self, delay_s: float | Callable[[], float] = 0.0, record_after_s: float = 0.0,
                 status_for: Callable[[dict], int] | None = None):
        self.deliveries: dict[str, list[float]] = {}
        self.order: list[tuple[str, str]] = []          # (session_id, message key) as recorded
        self.texts: dict[str, str] = {}
        self.refused: list[str] = []
        self.delay_s = delay_s
        self.record_after_s = record_after_s
        self.status_for = status_for
        self.active = self.peak = 0
        self.lock = threading.Lock()
        channel = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with channel.lock:
                    channel.active += 1
                    channel.peak = max(channel.peak, channel.active)
                try:
                    delay = channel.delay_s() if callable(channel.delay_s) else channel.delay_s
                    status = channel.status_for(body) if channel.status_for else 200
                    if status != 200:
                        with channel.lock:
                            channel.refused.append(body["idempotency_key"])
                        self._reply(status, {"error": "refused"})
                        return
                    if channel.record_after_s:
                        threading.Timer(channel.record_after_s, channel.record, (body,)).start()
                    else:
                        channel.record(body)
                    time.sleep(delay)
                    self._reply(200, {"ok": True})
                except (BrokenPipeError, ConnectionResetError):
                    pass                          # the sender died or gave up mid-delivery
                finally:
                    with channel.lock:
                        channel.active -= 1

            def do_GET(self):
                key = parse_qs(urlparse(self.path).query)["key"][0]
                with channel.lock:
                    delivered = key in channel.deliveries
                self._reply(200, {"delivered": delivered})

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, body: dict) -> None:
        with self.lock:
            self.deliveries.setdefault(body["idempotency_key"], []).append(time.time())
            self.order.append((body["session_id"], body["key"]))
            self.texts[body["idempotency_key"]] = body["text"]

    def duplicates(self) -> dict[str, int]:
        with self.lock:
            return {key: len(times) for key, times in self.deliveries.items() if len(times) > 1}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class OwnRedis:
    """A redis-server of its own on a free port, no persistence: a restart loses every job."""

    def __init__(self, port: int | None = None):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not on PATH. Install Redis (apt-get install redis-server).")
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="falai-host-redis-")
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no", "--dir", self.dir],
                                        stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def restart(self, down_s: float = 1.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def role_env(settings: dict[str, str]) -> dict[str, str]:
    """The environment of a role process: this checkout and the demo agent importable, the settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FALAI_") and k != "GEMINI_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, PRODUCTION, env.get("PYTHONPATH", "")])
    env.update(settings)
    return env


class Supervisor:
    """Runs roles as ``python -m falai_cli host ROLE`` processes and restarts one that dies, as
    systemd's ``Restart=always`` would; each role's stderr goes to a log file of its own."""

    def __init__(self, env: dict[str, str], log_dir: str, restart_after_s: float = 0.3):
        self.env = env
        self.log_dir = log_dir
        self.restart_after_s = restart_after_s
        self.processes: dict[str, tuple[subprocess.Popen, list[str]]] = {}
        self.restarts = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def start(self, name: str, *args: str) -> None:
        with self.lock:
            log = open(os.path.join(self.log_dir, f"{name}.log"), "ab")
            process = subprocess.Popen([sys.executable, "-m", "falai_cli", "host", *args], env=self.env,
                                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
            log.close()
            self.processes[name] = (process, list(args))

    def pid(self, name: str) -> int:
        return self.processes[name][0].pid

    def signal(self, name: str, number: int = signal.SIGKILL) -> None:
        with self.lock:
            process = self.processes[name][0]
        if process.poll() is None:
            process.send_signal(number)

    def _watch(self) -> None:
        while not self.stopping.wait(0.1):
            with self.lock:
                dead = [(name, args) for name, (p, args) in self.processes.items() if p.poll() is not None]
            for name, args in dead:
                time.sleep(self.restart_after_s)
                if self.stopping.is_set():
                    return
                self.restarts += 1
                self.start(name, *args)

    def log_size(self) -> int:
        return sum(os.path.getsize(os.path.join(self.log_dir, n)) for n in os.listdir(self.log_dir))

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        with self.lock:
            victims = [p for p, _ in self.processes.values()]
            self.processes.clear()
        for process in victims:
            if process.poll() is None:
                process.terminate()
        for process in victims:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def wait_for(check: Callable[[], bool], timeout_s: float, every_s: float = 0.2) -> bool:
    """Poll ``check`` until it holds or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every_s)
    return check()


def jitter(low: float, high: float, seed: int = 7) -> Callable[[], float]:
    rng = random.Random(seed)
    lock = threading.Lock()

    def value() -> float:
        with lock:
            return rng.uniform(low, high)

    return value
