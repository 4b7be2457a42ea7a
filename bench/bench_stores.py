"""Host-loop throughput of SQLiteStore: load, turn, save, for each journal mode.

    python bench/bench_stores.py            # prints a table

Each turn is what a host does per inbound message: ``store.load``, one
``agent.turn`` (the model is a ScriptedProvider, so no network), and
``store.save`` with compare-and-swap, on a database file in a temporary
directory. The rows compare SQLite's rollback journal with WAL, the journal
``SQLiteStore(path)`` opens by default; both keep ``synchronous=FULL``, so
every save is on disk before it returns. Figures are medians of a few rounds.
"""
from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from falai import ScriptedProvider, fake_clock, falai  # noqa: E402
from falai_stores import SQLiteStore  # noqa: E402

SESSIONS = 50
MESSAGES = 6          # turns per session in one round
ROUNDS = 5


def agent():
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome."}})
    flow = {"id": "oi", "name": "Oi", "on": [{"message": []}],
            "steps": [{"id": "nome", "collect": ["nome"]}, {"id": "fim", "say": "Obrigado, {{data.nome}}!"}]}
    turns = SESSIONS * MESSAGES * (ROUNDS + 1)
    script = {"understand": [{"fields": {"nome": "Ana"}}] * turns,
              "speak": [{"message": "Como você se chama?"}] * turns}
    return f.agent(name="Ana", provider=ScriptedProvider(script=script, strict=True),
                   flows=[flow], clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."})


def host_loop(bot, store, round_no: int) -> float:
    """Turns per second over SESSIONS x MESSAGES host-loop turns."""
    started = time.perf_counter()
    for m in range(MESSAGES):
        for s in range(SESSIONS):
            session_id = f"r{round_no}s{s}"
            loaded = store.load(session_id)
            result = bot.turn(session_id=session_id, session=loaded, message="oi", id=f"m{m}")
            if result.changed:
                store.save(result.session, loaded.version if loaded else 0)
    return SESSIONS * MESSAGES / (time.perf_counter() - started)


def opened(path: str, journal: str, synchronous: str):
    if journal == "wal" and synchronous == "FULL":
        return SQLiteStore(path)               # the default a path gets
    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute(f"PRAGMA journal_mode={journal}")
    connection.execute(f"PRAGMA synchronous={synchronous}")
    return SQLiteStore(connection)


def main() -> None:
    rows = [("rollback journal (DELETE), synchronous=FULL", "delete", "FULL"),
            ("WAL, synchronous=FULL (the SQLiteStore(path) default)", "wal", "FULL"),
            ("WAL, synchronous=NORMAL (may lose the last saves on power loss)", "wal", "NORMAL")]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for n, (label, journal, synchronous) in enumerate(rows):
            bot = agent()                                   # a full script per row
            store = opened(os.path.join(folder, f"{n}.db"), journal, synchronous)
            store.initialize()
            host_loop(bot, store, -1)                       # warm-up
            rates = [host_loop(bot, store, r) for r in range(ROUNDS)]
            store.close()
            results.append((label, statistics.median(rates)))
    base = results[0][1]
    width = max(len(label) for label, _ in results)
    print(f"| {'SQLiteStore on a file':<{width}} | turns/s | vs rollback |")
    print(f"|{'-' * (width + 2)}|---------|-------------|")
    for label, rate in results:
        print(f"| {label:<{width}} | {rate:7,.0f} | {rate / base:10.1f}x |")


if __name__ == "__main__":
    main()
