"""The production host's throughput: turns/s with 1, 2 and 4 workers, and sends/s per sender.

    python bench/bench_host.py [--inputs 120] [--latency-ms 20,60] [--messages 400]

Needs falai[host], Postgres (FALAI_TEST_POSTGRES_DSN, default host=127.0.0.1 dbname=test) and
redis-server on PATH; it starts a redis-server of its own and uses tables of its own, dropped after.

Turns: the inputs are accepted while no worker runs, then K ``falai host worker`` processes start;
turns/s counts from the first input done to the last (worker start-up excluded). The model is the
demo agent's instant model with a latency per call drawn from ``--latency-ms`` (two calls a turn).
Sends: outbox rows for many sessions, one sender against a fake channel that takes 100 ms a send;
messages/s from the first send to the last, with 1 send in flight and with the default 16.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

import falai_host as H  # noqa: E402
from host_harness import FakeChannel, OwnRedis, Supervisor, role_env, wait_for  # noqa: E402

DSN = os.environ.get("FALAI_TEST_POSTGRES_DSN", "host=127.0.0.1 dbname=test")


def fresh_host(redis: OwnRedis, **settings) -> H.Host:
    tag = f"falai_bench{os.getpid()}_{os.urandom(2).hex()}_"
    host = H.Host(H.Config(dsn=DSN, redis_url=redis.url, prefix=tag, queue=tag, **settings))
    host.migrate()
    return host


def turns_per_second(redis: OwnRedis, workers: int, inputs: int, latency_ms: str) -> float:
    host = fresh_host(redis)
    logs = tempfile.mkdtemp(prefix="falai-bench-")
    supervisor = None
    try:
        for i in range(inputs):
            host.accept(f"s{i % 50}", "message", f"m{i}", {"message": f"oi {i}", "id": f"m{i}"})
        env = role_env({**H.config_env(host.config), "FALAI_AGENT": "demo_agent:make_agent",
                        "FALAI_DEMO_LATENCY_MS": latency_ms, "FALAI_DEMO_SILENCE": "24h"})
        supervisor = Supervisor(env, logs)
        for i in range(workers):
            supervisor.start(f"worker{i}", "worker")
        p = host.config.prefix
        if not wait_for(lambda: host.sql(f"SELECT count(*) FROM {p}inbox WHERE done_at IS NULL")[0][0] == 0,
                        600, 0.5):
            raise RuntimeError("the workers did not drain the inputs")
        first, last = host.sql(f"SELECT min(done_at), max(done_at) FROM {p}inbox")[0]
        return (inputs - 1) / max((last - first).total_seconds(), 1e-6)
    finally:
        if supervisor:
            supervisor.close()
        host.drop()
        host.queue.empty()
        host.close()


def sends_per_second(redis: OwnRedis, in_flight: int, messages: int) -> float:
    host = fresh_host(redis, in_flight=in_flight)
    channel = FakeChannel(delay_s=0.1)
    stop = threading.Event()
    try:
        p = host.config.prefix
        for i in range(messages):
            host.sql(f"INSERT INTO {p}outbox (session_id, message_key, cause, text, kind, after_ms, send_after) "
                     "VALUES (%s, %s, 'c', 'oi', 'ai', 0, now())", (f"s{i % 200}", f"m{i}"))
        sender = H.Sender(host, H.HttpChannel(channel.url), (0, 1))
        thread = threading.Thread(target=sender.run, args=(stop,), daemon=True)
        thread.start()
        if not wait_for(lambda: len(channel.deliveries) >= messages, 600, 0.1):
            raise RuntimeError("the sender did not drain the outbox")
        stop.set()
        thread.join(30)
        times = sorted(t for values in channel.deliveries.values() for t in values)
        return (len(times) - 1) / max(times[-1] - times[0], 1e-6)
    finally:
        stop.set()
        channel.close()
        host.drop()
        host.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=120)
    parser.add_argument("--latency-ms", default="20,60", help="low,high of the fake model's latency per call")
    parser.add_argument("--messages", type=int, default=400)
    args = parser.parse_args()
    redis = OwnRedis()
    try:
        print(f"fake model: {args.latency_ms} ms a call, 2 calls a turn; {args.inputs} inputs over 50 sessions")
        print("| workers | turns/s | per worker |")
        print("|---|---|---|")
        for workers in (1, 2, 4):
            rate = turns_per_second(redis, workers, args.inputs, args.latency_ms)
            print(f"| {workers} | {rate:.1f} | {rate / workers:.1f} |", flush=True)
        print(f"\nchannel: 100 ms a send; {args.messages} messages over 200 sessions; one sender")
        print("| sends in flight | messages/s |")
        print("|---|---|")
        for in_flight in (1, 16):
            print(f"| {in_flight} | {sends_per_second(redis, in_flight, args.messages):.1f} |", flush=True)
    finally:
        redis.close()


if __name__ == "__main__":
    main()
