"""A production host for falai: Postgres keeps the truth, RQ on Redis carries the work.

falai never sends, never sleeps and never saves; this host does all three so
that a crash anywhere loses nothing and repeats nothing (docs/guide/production.md
has the diagram and says which guarantee rests on what):

   intake ....... a WSGI webhook; writes an inbox row, then hands a turn job to RQ
   worker ....... RQ workers (any number of processes); a job runs one input through
                  ``agent.turn`` and saves, in ONE Postgres transaction, the session
                  (compare-and-swap), its outbox rows and its wake rows
   dispatcher ... hands due wakes to RQ, and hands again whatever Postgres says is
                  not done once its lease ran out (a lost job, a killed worker, a
                  restarted Redis)
   sender ....... drains the outbox in order, at most once per message key,
                  surviving its own crash
   recover ...... rebuilds every session's wakes from ``agent.pending_wakes`` and
                  re-hands every open input, after a queue (or wake table) loss

Run one role per process: ``python host.py init|intake|worker|dispatcher|sender|recover``.
Settings come from the environment (``Config.from_env``). Nothing here is a
dependency of falai: this directory has its own requirements.txt.
"""
from __future__ import annotations

import argparse
import base64
import importlib
import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from socketserver import ThreadingMixIn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)                                  # RQ imports the job function as host.run_job
sys.path.insert(1, os.path.join(HERE, "..", ".."))        # falai from a checkout, when it is not installed

import psycopg  # noqa: E402
import redis  # noqa: E402
import requests  # noqa: E402
from rq import Queue, Retry, SimpleWorker  # noqa: E402
from rq.exceptions import DuplicateJobError, NoSuchJobError  # noqa: E402
from rq.job import Job, JobStatus  # noqa: E402

from falai import ProviderError, Session, SessionConflictError, TurnResult  # noqa: E402
from falai_stores import PostgresStore  # noqa: E402

log = logging.getLogger("falai.host")

JOB_FUNCTION = "host.run_job"          # by name: a worker imports it, whatever module started the enqueue
MAX_REPLAYS = 50                       # conflicting saves in a row before a job gives up (its input stays open)
MAX_HANDS = 10                         # times an open input or wake is handed again before it is given up
WAITING_STATUSES = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED)


# Settings ####################################################################

def _seconds_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


@dataclass
class Config:
    """Where the host's data lives and how patient it is; ``from_env`` reads ``FALAI_*`` variables."""
    postgres_dsn: str = "host=127.0.0.1 dbname=test"
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "falai_"                       # of the four tables: sessions, inbox, wakes, outbox
    queue: str = "falai"
    agent: str = "demo_agent:make_agent"         # module:function that returns the Agent
    channel_url: str = "http://127.0.0.1:8081"   # HttpChannel's base URL
    lease_s: float = 120.0                       # an open input or due wake not done after this is handed again
    job_timeout_s: int = 100                     # RQ kills a turn job after this (keep it below the lease)
    retry_intervals: list[int] = field(default_factory=lambda: [5, 30, 120, 600, 1800])   # ProviderError backoff
    poll_s: float = 0.5                          # dispatcher and sender sleep this long when idle
    history_items: int = 40                      # the host keeps this many history items in the session
    intake_port: int = 8080

    def __post_init__(self):
        if re.fullmatch(r"[a-z_][a-z0-9_]*", self.prefix) is None:
            raise ValueError(f"FALAI_PREFIX {self.prefix!r}: not a table-name prefix. Use lowercase letters, "
                             "digits and _, not starting with a digit.")
        if self.job_timeout_s >= self.lease_s:
            raise ValueError(f"FALAI_JOB_TIMEOUT {self.job_timeout_s}s is not below FALAI_LEASE {self.lease_s}s: "
                             "a job still running would be handed again. Raise the lease or lower the timeout.")

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "Config":
        """A Config from ``FALAI_PG_DSN``, ``FALAI_REDIS_URL``, ``FALAI_PREFIX``, ``FALAI_QUEUE``,
        ``FALAI_AGENT``, ``FALAI_CHANNEL_URL``, ``FALAI_LEASE``, ``FALAI_JOB_TIMEOUT``,
        ``FALAI_RETRY_INTERVALS`` (seconds, comma-separated), ``FALAI_POLL``, ``FALAI_INTAKE_PORT``."""
        env = os.environ if environ is None else environ
        base = cls()
        return cls(postgres_dsn=env.get("FALAI_PG_DSN", base.postgres_dsn),
                   redis_url=env.get("FALAI_REDIS_URL", base.redis_url),
                   prefix=env.get("FALAI_PREFIX", base.prefix),
                   queue=env.get("FALAI_QUEUE", base.queue),
                   agent=env.get("FALAI_AGENT", base.agent),
                   channel_url=env.get("FALAI_CHANNEL_URL", base.channel_url),
                   lease_s=float(env.get("FALAI_LEASE", base.lease_s)),
                   job_timeout_s=int(env.get("FALAI_JOB_TIMEOUT", base.job_timeout_s)),
                   retry_intervals=_seconds_list(env.get("FALAI_RETRY_INTERVALS", ""))
                   or base.retry_intervals,
                   poll_s=float(env.get("FALAI_POLL", base.poll_s)),
                   intake_port=int(env.get("FALAI_INTAKE_PORT", base.intake_port)))

    def to_env(self) -> dict[str, str]:
        """The environment that makes ``from_env`` give this Config back (for child processes)."""
        return {"FALAI_PG_DSN": self.postgres_dsn, "FALAI_REDIS_URL": self.redis_url, "FALAI_PREFIX": self.prefix,
                "FALAI_QUEUE": self.queue, "FALAI_AGENT": self.agent, "FALAI_CHANNEL_URL": self.channel_url,
                "FALAI_LEASE": str(self.lease_s), "FALAI_JOB_TIMEOUT": str(self.job_timeout_s),
                "FALAI_RETRY_INTERVALS": ",".join(map(str, self.retry_intervals)), "FALAI_POLL": str(self.poll_s),
                "FALAI_INTAKE_PORT": str(self.intake_port)}


def load_agent(spec: str):
    """The Agent that ``module:function`` builds (``FALAI_AGENT``)."""
    module_name, _, function_name = spec.partition(":")
    if not function_name:
        raise ValueError(f"FALAI_AGENT {spec!r}: expected module:function. Name the function that builds "
                         "the agent, e.g. demo_agent:make_agent.")
    return getattr(importlib.import_module(module_name), function_name)()


def job_id(table: str, session_id: str, key: str) -> str:
    """The RQ job id of an input or a wake: reversible, and only the letters RQ allows ([A-Za-z0-9_-]).

    runtime.md §8 says to encode keys for queues that refuse ``:``; RQ 2+ also
    refuses ``%``, so ``urllib.parse.quote`` is not enough: URL-safe base64 is.
    """
    raw = f"{session_id}\n{key}".encode()
    return f"{table}-" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Schema ######################################################################

def schema_statements(prefix: str) -> list[str]:
    """The inbox, wakes and outbox tables (the sessions table is PostgresStore's own)."""
    return [
        # One row per input the intake accepted; done when a turn job applied (or ignored) it.
        f"""CREATE TABLE IF NOT EXISTS {prefix}inbox (
              session_id TEXT NOT NULL, input_key TEXT NOT NULL, kind TEXT NOT NULL, body JSONB NOT NULL,
              received_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), handed_at TIMESTAMPTZ,
              hand_count INTEGER NOT NULL DEFAULT 0, done_at TIMESTAMPTZ, result TEXT,
              turns INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0,
              provider_errors INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, input_key))""",
        f"CREATE INDEX IF NOT EXISTS {prefix}inbox_open ON {prefix}inbox (handed_at) WHERE done_at IS NULL",
        # One row per wake a saved turn asked for (TurnResult.schedule), or that recover() rebuilt.
        f"""CREATE TABLE IF NOT EXISTS {prefix}wakes (
              session_id TEXT NOT NULL, wake_key TEXT NOT NULL, due_at TIMESTAMPTZ NOT NULL,
              created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), handed_at TIMESTAMPTZ,
              hand_count INTEGER NOT NULL DEFAULT 0, done_at TIMESTAMPTZ, result TEXT,
              turns INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (session_id, wake_key))""",
        f"CREATE INDEX IF NOT EXISTS {prefix}wakes_due ON {prefix}wakes (due_at) WHERE done_at IS NULL",
        # One row per outbound message, unique per (session, message key): the key is the dedupe unit.
        f"""CREATE TABLE IF NOT EXISTS {prefix}outbox (
              id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, message_key TEXT NOT NULL, cause TEXT NOT NULL,
              text TEXT NOT NULL, kind TEXT NOT NULL, media JSONB, after_ms INTEGER NOT NULL,
              created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), send_after TIMESTAMPTZ NOT NULL,
              claimed_at TIMESTAMPTZ, sent_at TIMESTAMPTZ, outcome TEXT,
              UNIQUE (session_id, message_key))""",
        f"CREATE INDEX IF NOT EXISTS {prefix}outbox_open ON {prefix}outbox (session_id, id) WHERE sent_at IS NULL",
    ]


def drop_statements(prefix: str) -> list[str]:
    """Drop the host's four tables (tests and the load test)."""
    return [f"DROP TABLE IF EXISTS {prefix}{name}" for name in ("inbox", "wakes", "outbox", "sessions")]


# The host ####################################################################

class Host:
    """One process's connections: Postgres (autocommit; transactions are explicit), Redis, the RQ queue.

    Not shared between threads: the intake gives each request thread its own.
    """

    def __init__(self, config: Config, agent=None):
        self.config = config
        self.db = psycopg.connect(config.postgres_dsn, autocommit=True)
        # commit=False: the save joins the transaction this host opens around it (persistence.md §3.5).
        self.store = PostgresStore(self.db, table=f"{config.prefix}sessions", commit=False)
        self.redis = redis.Redis.from_url(config.redis_url)
        self.queue = Queue(config.queue, connection=self.redis)
        self._agent = agent

    @property
    def agent(self):
        if self._agent is None:
            self._agent = load_agent(self.config.agent)
        return self._agent

    def close(self) -> None:
        self.db.close()
        self.redis.close()

    def initialize(self) -> None:
        """Create the four tables when missing."""
        self.store.initialize()
        for statement in schema_statements(self.config.prefix):
            self.db.execute(statement)

    def drop(self) -> None:
        for statement in drop_statements(self.config.prefix):
            self.db.execute(statement)

    # Intake ------------------------------------------------------------------

    def accept(self, session_id: str, kind: str, input_key: str, body: dict) -> bool:
        """Record an input and hand its turn job to RQ; False when this input was already accepted.

        The inbox row is written first: once it is in, the input survives a
        Redis outage (the dispatcher hands a row whose hand failed).
        """
        p = self.config.prefix
        row = self.db.execute(
            f"INSERT INTO {p}inbox (session_id, input_key, kind, body, handed_at, hand_count) "
            "VALUES (%s, %s, %s, %s::jsonb, clock_timestamp(), 1) ON CONFLICT DO NOTHING RETURNING 1",
            (session_id, input_key, kind, json.dumps(body))).fetchone()
        if row is None:
            return False                       # a redelivered webhook: costs one INSERT, no job, no model call
        try:
            self.hand("inbox", session_id, input_key)
        except redis.exceptions.RedisError as error:
            log.warning("intake: Redis refused the job of %s/%s (%s); the dispatcher hands it", session_id,
                        input_key, error)
            self.db.execute(f"UPDATE {p}inbox SET handed_at = NULL WHERE session_id = %s AND input_key = %s",
                            (session_id, input_key))
        return True

    def hand(self, table: str, session_id: str, key: str, replace_started: bool = False) -> bool:
        """Put the turn job of an inbox row or a wake row on the queue, once: True when queued now.

        A job with the same id still waiting is left alone, and so is a running
        one unless ``replace_started`` (its row's lease ran out: its worker
        died). One that finished or failed is replaced (the engine ignores a
        replay: duplicate-input, stale-wake).
        """
        jid = job_id(table, session_id, key)
        options = dict(kwargs={"table": table, "session_id": session_id, "key": key}, job_id=jid,
                       timeout=self.config.job_timeout_s, result_ttl=600, failure_ttl=24 * 3600,
                       retry=Retry(max=len(self.config.retry_intervals), interval=self.config.retry_intervals),
                       unique=True)
        try:
            self.queue.enqueue_call(JOB_FUNCTION, **options)
            return True
        except DuplicateJobError:
            pass
        try:
            job = Job.fetch(jid, connection=self.redis)
            status = job.get_status()
            if status in WAITING_STATUSES or (status == JobStatus.STARTED and not replace_started):
                return False
            job.delete()
        except NoSuchJobError:
            pass
        try:
            self.queue.enqueue_call(JOB_FUNCTION, **options)
            return True
        except DuplicateJobError:             # another dispatcher was quicker
            return False

    # The turn job --------------------------------------------------------------

    def run(self, table: str, session_id: str, key: str) -> str:
        """Apply one inbox input or one wake; returns what happened (``applied`` or the ignore code).

        The turn runs outside any transaction (a model call may take seconds);
        the save, its outbox rows, its wake rows and the row's done mark commit
        together. A conflicting save replays the same input on the newer
        session (persistence.md §3.1). A ProviderError from the understand call
        propagates, and RQ retries the job with the configured backoff.
        """
        p = self.config.prefix
        if table == "inbox":
            row = self.db.execute(f"SELECT body, done_at FROM {p}inbox WHERE session_id = %s AND input_key = %s",
                                  (session_id, key)).fetchone()
            if row is None or row[1] is not None:
                return "done-already" if row else "missing"
            turn_input, cause = dict(row[0]), key
        elif table == "wakes":
            row = self.db.execute(f"SELECT done_at FROM {p}wakes WHERE session_id = %s AND wake_key = %s",
                                  (session_id, key)).fetchone()
            if row is None or row[0] is not None:
                return "done-already" if row else "missing"
            turn_input, cause = {"wake": key}, f"wake:{key}"
        else:
            raise ValueError(f"run: table {table!r} is neither inbox nor wakes. Hand jobs with Host.hand().")
        turns = conflicts = 0
        for _ in range(MAX_REPLAYS):
            loaded = self.store.load(session_id)
            try:
                result = self.agent.turn(session_id=session_id, session=loaded, **turn_input)
            except ProviderError:
                # runtime.md §10.1: the understand call failed and nothing was written; RQ retries the job.
                if table == "inbox":
                    self.db.execute(f"UPDATE {p}inbox SET provider_errors = provider_errors + 1 "
                                    "WHERE session_id = %s AND input_key = %s", (session_id, key))
                raise
            turns += 1
            code = "applied" if result.changed else (result.outcomes[0].code if result.outcomes else "unchanged")
            try:
                with self.db.transaction():
                    if result.changed:
                        session = self._with_history(result, turn_input)
                        self.store.save(session, loaded.version if loaded else 0)
                        self._write_outbox(session_id, cause, result)
                        self._write_wakes(session_id, result)
                        if result.messages:
                            self.db.execute(f"NOTIFY {p}outbox")     # delivered at commit: wakes the sender
                    self._mark_done(table, session_id, key, code, turns, conflicts)
                return code
            except SessionConflictError:
                conflicts += 1                 # someone saved first; nothing of this turn was written
        raise RuntimeError(f"run: session {session_id!r} lost {MAX_REPLAYS} saves in a row to other turns; "
                           "the input stays open and the dispatcher hands it again.")

    def _with_history(self, result: TurnResult, turn_input: dict) -> Session:
        """The session with this turn's words appended to ``history``, the host-owned key the engine reads."""
        session = result.session
        items = list(session.history or [])
        if "message" in turn_input:
            items.append({"role": "user", "content": turn_input["message"]})
        items.extend({"role": "assistant", "content": m.text} for m in result.messages)
        session.history = items[-self.config.history_items:] if items else session.history
        return session

    def _write_outbox(self, session_id: str, cause: str, result: TurnResult) -> None:
        p = self.config.prefix
        delay_ms = 0
        for message in result.messages:
            delay_ms += message.after_ms            # runtime.md §7.2: a short wait rides on the next message
            inserted = self.db.execute(
                f"INSERT INTO {p}outbox (session_id, message_key, cause, text, kind, media, after_ms, send_after) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, clock_timestamp() + make_interval(secs => %s)) "
                "ON CONFLICT (session_id, message_key) DO NOTHING RETURNING id",
                (session_id, message.key, cause, message.text, message.kind,
                 None if message.media is None else json.dumps(message.media), message.after_ms,
                 delay_ms / 1000)).fetchone()
            if inserted is None:
                # Only an engine that reuses a key reaches this (docs: message keys).
                log.warning("outbox: session %s already has message key %s; not sent twice", session_id, message.key)

    def _write_wakes(self, session_id: str, result: TurnResult) -> None:
        p = self.config.prefix
        for entry in result.schedule:
            if entry.replaces:
                # runtime.md §7.5: a best-effort drop; a superseded wake that fires anyway is silence-broken.
                self.db.execute(f"UPDATE {p}wakes SET done_at = clock_timestamp(), result = 'replaced' "
                                "WHERE session_id = %s AND wake_key = %s AND done_at IS NULL AND handed_at IS NULL",
                                (session_id, entry.replaces))
            self.db.execute(f"INSERT INTO {p}wakes (session_id, wake_key, due_at) VALUES (%s, %s, %s) "
                            "ON CONFLICT DO NOTHING", (session_id, entry.key, entry.at))

    def _mark_done(self, table: str, session_id: str, key: str, code: str, turns: int, conflicts: int) -> None:
        column = "input_key" if table == "inbox" else "wake_key"
        self.db.execute(f"UPDATE {self.config.prefix}{table} SET done_at = clock_timestamp(), result = %s, "
                        "turns = turns + %s, conflicts = conflicts + %s "
                        f"WHERE session_id = %s AND {column} = %s AND done_at IS NULL",
                        (code, turns, conflicts, session_id, key))

    # Dispatcher --------------------------------------------------------------

    def dispatch_once(self, limit: int = 500) -> int:
        """Hand the due wakes, and hand again the inputs and wakes whose lease ran out; returns how many.

        Rows are locked with SKIP LOCKED, so several dispatchers can run. A
        row handed ``MAX_HANDS`` times without being done is given up
        (``result = 'gave-up'``, logged as an error): the load test counts them.
        """
        p, lease = self.config.prefix, self.config.lease_s
        handed = 0
        passes = (("wakes", "wake_key", "due_at <= clock_timestamp()"), ("inbox", "input_key", "TRUE"))
        for table, column, due in passes:
            with self.db.transaction():
                rows = self.db.execute(
                    f"SELECT session_id, {column}, hand_count, handed_at FROM {p}{table} "
                    f"WHERE done_at IS NULL AND {due} "
                    "AND (handed_at IS NULL OR handed_at < clock_timestamp() - make_interval(secs => %s)) "
                    f"ORDER BY {'due_at' if table == 'wakes' else 'received_at'} LIMIT %s FOR UPDATE SKIP LOCKED",
                    (lease, limit)).fetchall()
                for session_id, key, hand_count, handed_at in rows:
                    if hand_count >= MAX_HANDS:
                        log.error("dispatcher: %s %s/%s handed %d times, never done: given up", table, session_id,
                                  key, hand_count)
                        self.db.execute(f"UPDATE {p}{table} SET done_at = clock_timestamp(), result = 'gave-up' "
                                        f"WHERE session_id = %s AND {column} = %s", (session_id, key))
                        continue
                    # handed_at set: the lease ran out, a running job's worker is taken for dead
                    queued = self.hand(table, session_id, key, replace_started=handed_at is not None)
                    self.db.execute(f"UPDATE {p}{table} SET handed_at = clock_timestamp(), "
                                    f"hand_count = hand_count + %s WHERE session_id = %s AND {column} = %s",
                                    (int(queued), session_id, key))
                    handed += queued
        return handed

    # Sender ------------------------------------------------------------------

    def send_once(self, channel: "Channel", shard: tuple[int, int] = (0, 1), limit: int = 200) -> int:
        """Deliver the due messages, oldest first and in order within a session; returns how many.

        Each message is marked ``claimed_at`` (committed) before the channel is
        called and ``sent_at`` after. A message found claimed but not sent was
        in flight when a sender died: it is resent only if the channel says it
        never got that idempotency key. Run one sender per shard (``run_sender``
        holds a Postgres advisory lock for it).
        """
        p = self.config.prefix
        index, count = shard
        rows = self.db.execute(
            f"SELECT id, session_id, message_key, text, kind, media, claimed_at FROM {p}outbox o "
            "WHERE sent_at IS NULL AND send_after <= clock_timestamp() AND abs(hashtext(session_id)) %% %s = %s "
            f"AND NOT EXISTS (SELECT 1 FROM {p}outbox e WHERE e.session_id = o.session_id AND e.id < o.id "
            "AND e.sent_at IS NULL) ORDER BY id LIMIT %s", (count, index, limit)).fetchall()
        for row_id, session_id, message_key, text, kind, media, claimed_at in rows:
            idempotency_key = f"{session_id}/{message_key}"
            if claimed_at is not None and channel.was_delivered(idempotency_key):
                outcome = "found-delivered"
            else:
                self.db.execute(f"UPDATE {p}outbox SET claimed_at = clock_timestamp() WHERE id = %s", (row_id,))
                channel.send(idempotency_key, session_id, {"key": message_key, "text": text, "kind": kind,
                                                           "media": media})
                outcome = "sent" if claimed_at is None else "resent"
            self.db.execute(f"UPDATE {p}outbox SET sent_at = clock_timestamp(), outcome = %s WHERE id = %s",
                            (outcome, row_id))
        return len(rows)

    # Recovery ------------------------------------------------------------------

    def recover(self, context_of: Callable[[str], Any] = lambda session_id: None) -> dict[str, int]:
        """After a queue loss: every session's wakes from ``agent.pending_wakes`` (runtime.md §14), and every
        open input and wake handed again at the dispatcher's next pass. Returns the counts."""
        p = self.config.prefix
        rebuilt = sessions = 0
        last_id = ""
        while True:
            page = self.db.execute(f"SELECT id, blob FROM {p}sessions WHERE id > %s ORDER BY id LIMIT 500",
                                   (last_id,)).fetchall()
            if not page:
                break
            for session_id, blob in page:
                sessions += 1
                blob = json.loads(blob) if isinstance(blob, str) else blob
                for entry in self.agent.pending_wakes(session=blob, context=context_of(session_id)):
                    row = self.db.execute(
                        f"INSERT INTO {p}wakes (session_id, wake_key, due_at) VALUES (%s, %s, %s) "
                        "ON CONFLICT DO NOTHING RETURNING 1", (session_id, entry.key, entry.at)).fetchone()
                    rebuilt += row is not None
            last_id = page[-1][0]
        wakes = self.db.execute(f"UPDATE {p}wakes SET handed_at = NULL WHERE done_at IS NULL").rowcount
        inputs = self.db.execute(f"UPDATE {p}inbox SET handed_at = NULL WHERE done_at IS NULL").rowcount
        return {"sessions": sessions, "wakes_rebuilt": rebuilt, "wakes_open": wakes, "inputs_open": inputs}


# The job RQ runs ##############################################################

_process_host: Host | None = None     # one Host per worker process, built on its first job


def run_job(table: str, session_id: str, key: str) -> str:
    """The RQ job: apply one input or wake with this process's Host (settings from the environment)."""
    global _process_host
    if _process_host is None or _process_host.db.broken or _process_host.db.closed:
        agent = _process_host._agent if _process_host is not None else None   # a lost connection, not the agent
        _process_host = Host(Config.from_env(), agent=agent)
    return _process_host.run(table, session_id, key)


# Channels ######################################################################

class Channel:
    """Where messages go. ``send`` delivers one message under an idempotency key;
    ``was_delivered`` says whether the channel already has that key (asked only
    for a message a dead sender left in flight)."""

    def send(self, idempotency_key: str, session_id: str, message: dict) -> None:
        raise NotImplementedError

    def was_delivered(self, idempotency_key: str) -> bool:
        raise NotImplementedError


class HttpChannel(Channel):
    """A channel behind an HTTP API: ``POST {url}/send`` and ``GET {url}/delivered?key=...``.

    Adapt these two calls to your provider: most messaging APIs take a client
    reference or idempotency key on send and let you look a message up by it.
    """

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.http = requests.Session()

    def send(self, idempotency_key: str, session_id: str, message: dict) -> None:
        response = self.http.post(f"{self.url}/send", timeout=self.timeout,
                                  json={"idempotency_key": idempotency_key, "session_id": session_id, **message})
        response.raise_for_status()

    def was_delivered(self, idempotency_key: str) -> bool:
        response = self.http.get(f"{self.url}/delivered", params={"key": idempotency_key}, timeout=self.timeout)
        response.raise_for_status()
        return bool(response.json()["delivered"])


# Intake (WSGI) #################################################################

def _field(body: dict, name: str, where: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {name} is missing or not a non-empty string. Send it as JSON text.")
    return value


def parse_input(path: str, body: Any) -> tuple[str, str, str, dict]:
    """(session_id, kind, input_key, turn keywords) of a webhook body, or ValueError ("where: what. fix")."""
    if not isinstance(body, dict):
        raise ValueError(f"POST {path}: the body is not a JSON object. Send {{\"session_id\": ..., ...}}.")
    session_id = _field(body, "session_id", f"POST {path}")
    if path == "/messages":
        message_id = _field(body, "id", "POST /messages")     # the channel's message id: replay detection
        text = body.get("text")
        if not isinstance(text, str):
            raise ValueError("POST /messages: text is missing or not a string. Send the message text.")
        return session_id, "message", message_id, {"message": text, "id": message_id}
    if path == "/events":
        event, key = _field(body, "event", "POST /events"), _field(body, "key", "POST /events")
        return session_id, "event", f"event:{key}", {"event": event, "key": key, "payload": body.get("payload")}
    if path == "/starts":
        flow, key = _field(body, "flow", "POST /starts"), _field(body, "key", "POST /starts")
        start = {"flow": flow, "key": key, **({"input": body["input"]} if "input" in body else {})}
        return session_id, "start", f"start:{key}", {"start": start}
    raise LookupError(path)


def intake_app(config: Config) -> Callable:
    """The webhook: POST /messages, /events, /starts with a JSON body; answers 202 once the input is in the inbox."""
    local = threading.local()

    def app(environ, start_response):
        def answer(status: str, payload: dict):
            data = json.dumps(payload).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]

        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") == "GET" and path == "/health":
            return answer("200 OK", {"ok": True})
        if environ.get("REQUEST_METHOD") != "POST":
            return answer("405 Method Not Allowed", {"error": f"{path}: only POST. Send the input as a POST."})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            session_id, kind, key, body = parse_input(path, json.loads(environ["wsgi.input"].read(length) or b"null"))
        except LookupError:
            return answer("404 Not Found", {"error": f"{path}: no such endpoint. Use /messages, /events or /starts."})
        except ValueError as error:          # json.JSONDecodeError is a ValueError too
            return answer("400 Bad Request", {"error": str(error)})
        if getattr(local, "host", None) is None:
            local.host = Host(config)
        accepted = local.host.accept(session_id, kind, key, body)
        return answer("202 Accepted", {"accepted": True, "duplicate": not accepted})

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):           # one line per request is noise under load
        pass


def serve_intake(config: Config, bind: str = "0.0.0.0") -> None:
    """Serve the webhook on ``bind:intake_port``, one thread per request (put TLS in front of it)."""
    make_server(bind, config.intake_port, intake_app(config), server_class=_ThreadingServer,
                handler_class=_QuietHandler).serve_forever()


# Long-running roles ##############################################################

def run_worker(config: Config) -> None:
    """An RQ worker that runs turn jobs in-process (SimpleWorker: no fork, so its Postgres connection lives on)
    and the RQ scheduler that brings back retried jobs; it waits out a Redis outage."""
    global _process_host
    os.environ.update(config.to_env())        # run_job builds its Host from the environment
    _process_host = Host(config)
    _process_host.agent                       # build the agent now, not on the first job
    connection = redis.Redis.from_url(config.redis_url)
    while True:
        try:
            worker = SimpleWorker([Queue(config.queue, connection=connection)], connection=connection)
            worker.work(with_scheduler=True, logging_level="WARNING")
            return
        except redis.exceptions.ConnectionError as error:
            log.warning("worker: Redis unreachable (%s); retrying", error)
            time.sleep(1)


def _loop(step: Callable[[], int], config: Config, stop: threading.Event | None,
          idle: Callable[[], Any] | None = None) -> None:
    """Call ``step`` until stopped; when it found nothing, ``idle()`` (default: sleep ``poll_s``).

    A Redis or channel outage is waited out; a lost Postgres connection ends
    the process (its supervisor starts a fresh one, with a fresh connection).
    """
    while stop is None or not stop.is_set():
        try:
            busy = step()
        except (redis.exceptions.ConnectionError, requests.RequestException) as error:
            log.warning("%s (retrying)", error)
            busy = 0
            time.sleep(config.poll_s)
        if not busy:
            (idle or (lambda: time.sleep(config.poll_s)))()


def run_dispatcher(config: Config, stop: threading.Event | None = None) -> None:
    host = Host(config)
    _loop(host.dispatch_once, config, stop)


def run_sender(config: Config, channel: Channel | None = None, shard: tuple[int, int] = (0, 1),
               stop: threading.Event | None = None) -> None:
    """Drain the outbox of one shard; the advisory lock keeps a second sender of that shard waiting."""
    channel = channel or HttpChannel(config.channel_url)
    host = Host(config)
    host.db.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"{config.prefix}sender:{shard[0]}/{shard[1]}",))
    host.db.execute(f"LISTEN {config.prefix}outbox")

    def idle():
        """Until a turn commits messages (its NOTIFY) or ``poll_s`` passes (a message's after_ms)."""
        for _ in host.db.notifies(timeout=config.poll_s, stop_after=1):
            pass

    _loop(lambda: host.send_once(channel, shard), config, stop, idle)


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["init", "intake", "worker", "dispatcher", "sender", "recover"])
    parser.add_argument("--shard", default="0/1", help="sender only: i/n, this sender's share of the sessions")
    args = parser.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = Config.from_env()
    if args.role == "init":
        Host(config).initialize()
    elif args.role == "intake":
        serve_intake(config)
    elif args.role == "worker":
        run_worker(config)
    elif args.role == "dispatcher":
        run_dispatcher(config)
    elif args.role == "sender":
        index, _, count = args.shard.partition("/")
        run_sender(config, shard=(int(index), int(count or 1)))
    elif args.role == "recover":
        print(json.dumps(Host(config).recover()))


if __name__ == "__main__":
    main()
