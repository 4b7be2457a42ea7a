"""falai_host: a production host for falai. Postgres keeps the truth; RQ on Redis carries the work.

falai never sends, never sleeps and never saves: this host does all three, so that a crash anywhere
loses nothing (docs/guide/production.md has the diagram, the guarantee and what it rests on):

   intake ....... signed webhooks, checked at the door; an inbox row, then a turn job on RQ
   worker ....... RQ workers: one job runs one input or wake through ``agent.turn`` and commits
                  the session (compare-and-swap), its outbox rows, its wake rows and the done
                  mark in ONE Postgres transaction
   dispatcher ... hands due wakes to RQ, hands again what is not done when its lease ran out,
                  and moves aside (dead letters) what keeps failing
   sender ....... drains the outbox, several sends in flight, each session's messages in order
   recover ...... rebuilds the wakes from ``agent.pending_wakes`` after a loss of the queue

Start a role with ``falai host ROLE`` (``pip install 'falai[host]'`` brings rq, redis and psycopg);
``falai host schema`` creates or upgrades the tables. The drivers are imported when a role uses
them, never by ``import falai``.

Sections:
   1. Settings ........ Config, from flags and FALAI_* variables
   2. Connections ..... a small Postgres pool that drops a busy or broken connection; outages
   3. Schema .......... versioned tables
   4. The host ........ accept, hand, the turn job, dispatch, recover, dead letters, retention
   5. Sending ......... channels, how a failed send is classed, the sender
   6. Intake .......... signatures and the checks at the door
   7. Operations ...... health, readiness, Prometheus metrics
   8. Roles and CLI ... ``falai host intake|worker|dispatcher|sender|recover|schema|dead|prune``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import importlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, fields
from typing import Any, TextIO

from falai_stores import PostgresStore
from falai_base import (
    ProviderError, Session, SessionConflictError,
)
from falai import (
    TurnResult,
)

log = logging.getLogger("falai.host")

JOB_FUNCTION = (
    "falai_host.run_job"  # by name: a worker imports it, whatever process enqueued the job
)
MAX_REPLAYS = 50  # conflicting saves in a row before a job gives up (input stays open)
MAX_ID = 255  # PostgresStore's id column is VARCHAR(255)
MAX_PAYLOAD_NESTING = 64  # the engine's limit for a value a session holds (limits.md)
ID_CHARACTERS = re.compile(
    r"[!-~]+"
)  # printable ASCII, no space: ids travel in logs, URLs and keys
NAME_CHARACTERS = re.compile(r"[A-Za-z0-9_.:-]+")


# 1. Settings ##################################################################################


@dataclass(frozen=True)
class Config:
    """Where the host's data lives, how patient it is and what it lets in.

    Every setting has a flag and a ``FALAI_*`` variable (``SETTINGS``); a flag wins.
    """

    dsn: str = "postgresql://falai@127.0.0.1:5432/falai"
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "falai_"  # of the host's tables: sessions, inbox, wakes, outbox
    queue: str = "falai"
    agent: str = ""  # module:function that returns the Agent (worker, recover)
    channel_url: str = ""  # the sender's HttpChannel base URL
    lease_s: float = 120.0  # an open input or due wake not done by then is handed again
    job_timeout_s: int = 100  # RQ stops a turn job after this (below the lease)
    retry_intervals: tuple[int, ...] = (5, 30, 120, 600, 1800)  # RQ's backoff after a ProviderError
    poll_s: float = 0.5  # the dispatcher and sender sleep this long when idle
    history_items: int = 40  # the host keeps this many history items in the session
    max_hands: int = 10  # an input or wake handed this often, never done: dead
    turn_attempts: int = 5  # a turn failing (not the model) this often: dead
    bind: str = "127.0.0.1"  # the intake's and the health endpoints' address
    port: int = 8080  # the intake's port
    health_port: int = 0  # worker, dispatcher, sender: /healthz /readyz /metrics
    secret: str = ""  # the intake's HMAC-SHA256 key
    tolerance_s: float = 300.0  # a signed request older or newer than this is refused
    max_body: int = 64 * 1024  # bytes of one webhook
    max_message: int = 4096  # characters of one message text
    send_timeout_s: float = 10.0  # one channel call
    send_attempts: int = 10  # a message failing this often is dead
    in_flight: int = 16  # sends at once per sender (one per session)
    pool_size: int = 4  # Postgres connections per process

    def __post_init__(self) -> None:
        if re.fullmatch(r"[a-z_][a-z0-9_]*", self.prefix) is None:
            raise ValueError(
                f"prefix {self.prefix!r}: not a table-name prefix. Use lowercase letters, "
                "digits and _, not starting with a digit."
            )
        if self.job_timeout_s >= self.lease_s:
            raise ValueError(
                f"job timeout {self.job_timeout_s}s is not below the lease {self.lease_s}s: "
                "a job still running would be handed again. Raise FALAI_LEASE or lower "
                "FALAI_JOB_TIMEOUT."
            )
        if min(self.in_flight, self.pool_size, self.send_attempts, self.max_hands) < 1:
            raise ValueError(
                "in_flight, pool_size, send_attempts and max_hands must be at least 1."
            )

    @property
    def statement_timeout_ms(self) -> int:
        """Below the job timeout, so that a database call ends before RQ's timeout stops the job."""
        return max(1000, int(self.job_timeout_s * 1000 * 0.4))


# (field, variable, help): the flag is --field with dashes
SETTINGS = [
    ("dsn", "FALAI_PG_DSN", "Postgres connection string (name the user and the database)"),
    ("redis_url", "FALAI_REDIS_URL", "Redis URL (no eviction: RQ's jobs must not be evicted)"),
    ("prefix", "FALAI_PREFIX", "prefix of the host's table names"),
    ("queue", "FALAI_QUEUE", "the RQ queue name"),
    ("agent", "FALAI_AGENT", "module:function that returns the Agent"),
    ("channel_url", "FALAI_CHANNEL_URL", "the channel's base URL (POST /send, GET /delivered)"),
    ("lease_s", "FALAI_LEASE", "seconds before an open input or wake is handed again"),
    ("job_timeout_s", "FALAI_JOB_TIMEOUT", "seconds a turn job may run (below the lease)"),
    (
        "retry_intervals",
        "FALAI_RETRY_INTERVALS",
        "seconds between tries after a model failure, a,b,c",
    ),
    ("poll_s", "FALAI_POLL", "seconds the dispatcher and the sender wait when idle"),
    ("history_items", "FALAI_HISTORY_ITEMS", "history items kept in the session"),
    ("max_hands", "FALAI_MAX_HANDS", "hands of an input or wake before it is a dead letter"),
    ("turn_attempts", "FALAI_TURN_ATTEMPTS", "failed turns of an input or wake before it is dead"),
    ("bind", "FALAI_BIND", "address the intake and the health endpoints listen on"),
    ("port", "FALAI_PORT", "the intake's port"),
    ("health_port", "FALAI_HEALTH_PORT", "port of /healthz, /readyz, /metrics (0: none)"),
    ("secret", "FALAI_INTAKE_SECRET", "the shared secret of the webhook signatures"),
    ("tolerance_s", "FALAI_SIGNATURE_TOLERANCE", "seconds a signature's timestamp may be off"),
    ("max_body", "FALAI_MAX_BODY", "bytes of a webhook body"),
    ("max_message", "FALAI_MAX_MESSAGE", "characters of a message text"),
    ("send_timeout_s", "FALAI_SEND_TIMEOUT", "seconds of one channel call"),
    ("send_attempts", "FALAI_SEND_ATTEMPTS", "tries of a message before it is a dead letter"),
    ("in_flight", "FALAI_IN_FLIGHT", "sends at once per sender"),
    ("pool_size", "FALAI_POOL_SIZE", "Postgres connections per process"),
]


def _convert(name: str, text: str) -> Any:
    kind = {f.name: f.type for f in fields(Config)}[name]
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if name == "retry_intervals":
            return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(
            f"{name}: {text!r} is not a number. Give a number of seconds "
            f"(retry intervals: comma-separated whole seconds)."
        ) from None
    return text


def config_from(environ: dict | None = None, flags: dict | None = None) -> Config:
    """A Config from ``FALAI_*`` variables, then flags (``None`` values are not given)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, variable, _ in SETTINGS:
        if env.get(variable):
            values[name] = _convert(name, env[variable])
        given = (flags or {}).get(name)
        if given is not None:
            values[name] = _convert(name, str(given))
    return Config(**values)


def config_env(config: Config) -> dict[str, str]:
    """The variables that make ``config_from`` give this Config back (for child processes)."""
    env = {}
    for name, variable, _ in SETTINGS:
        value = getattr(config, name)
        env[variable] = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return env


def load_agent(spec: str) -> Any:
    """The Agent that ``module:function`` builds."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ValueError(
            f"agent {spec!r}: expected module:function. Name the function that builds the "
            "agent with --agent or FALAI_AGENT, e.g. demo_agent:make_agent."
        )
    return getattr(importlib.import_module(module_name), function_name)()


def job_id(table: str, session_id: str, key: str) -> str:
    """The RQ job id of an input or a wake: reversible, in the letters RQ allows ([A-Za-z0-9_-]).

    runtime.md §8 says to encode keys for queues that refuse ``:``; RQ also refuses ``%``, so
    URL-safe base64 rather than percent-encoding.
    """
    raw = f"{session_id}\n{key}".encode()
    return f"{table}-" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


# 2. Connections ###############################################################################


class Outage:
    """Says once that a dependency is unreachable and once that it is back; between the two, quiet.

    ``failed`` returns how long to back off: doubling from half a second to ten.
    """

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.lock = threading.Lock()

    def failed(self, what: str, error: BaseException) -> float:
        with self.lock:
            count = self.failures.get(what, 0) + 1
            self.failures[what] = count
        if count == 1:
            log.warning(
                "%s unreachable (%s: %s); backing off and retrying, quiet until it is back",
                what,
                type(error).__name__,
                str(error).strip().splitlines()[0] if str(error) else "",
            )
        return min(0.5 * 2 ** (count - 1), 10.0)

    def ok(self, what: str) -> None:
        if what not in self.failures:
            return
        with self.lock:
            count = self.failures.pop(what, 0)
        if count:
            log.warning("%s reachable again after %d failed tries", what, count)


class Pool:
    """A few autocommit Postgres connections shared by a process's threads.

    A connection that was in use when an error (or RQ's job timeout) struck is dropped unless it
    is idle and healthy, so a busy, broken or timed-out connection is never used again; one idle
    for a while is checked before it is lent, so a restarted server costs no failed job.
    """

    CHECK_AFTER_S = 5.0

    def __init__(self, dsn: str, size: int, statement_timeout_ms: int = 30_000):
        self.dsn = dsn
        self.statement_timeout_ms = statement_timeout_ms
        self.idle: list[tuple[Any, float]] = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(size)

    def _connect(self) -> Any:
        import psycopg

        timeout = self.statement_timeout_ms
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=5,
            options=f"-c statement_timeout={timeout} -c lock_timeout={timeout}"
            " -c idle_in_transaction_session_timeout=60000",
        )

    def _take(self) -> Any:
        while True:
            with self.lock:
                connection, since = self.idle.pop() if self.idle else (None, 0.0)
            if connection is None:
                return self._connect()
            if time.monotonic() - since < self.CHECK_AFTER_S:
                return connection
            try:
                connection.execute("SELECT 1")
                return connection
            except Exception:  # closed by a restart: take another
                self._close(connection)

    @staticmethod
    def _close(connection: Any) -> None:
        with contextlib.suppress(Exception):
            connection.close()

    @staticmethod
    def healthy(connection: Any) -> bool:
        from psycopg.pq import TransactionStatus

        return (
            not connection.closed
            and not connection.broken
            and connection.info.transaction_status == TransactionStatus.IDLE
        )

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """Lend a connection; it comes back to the pool only if it is idle and healthy."""
        self.slots.acquire()
        connection = None
        try:
            connection = self._take()
            yield connection
        finally:
            if connection is not None:
                if self.healthy(connection):
                    with self.lock:
                        self.idle.append((connection, time.monotonic()))
                else:
                    self._close(connection)
            self.slots.release()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for connection, _ in idle:
            self._close(connection)


def database_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean "Postgres or Redis is unreachable", not "this input is bad"."""
    import psycopg
    import redis

    return (
        psycopg.OperationalError,
        psycopg.InterfaceError,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
    )


# 3. Schema ####################################################################################

SCHEMA_VERSION = 2


def migrations(prefix: str) -> list[list[str]]:
    """The statements that bring the schema from version i to i + 1, for each i.

    Version 1 is the tables of the example host this module replaces, so its databases upgrade.
    """
    p = prefix
    return [
        [
            f"""CREATE TABLE IF NOT EXISTS {p}inbox (
                  session_id TEXT NOT NULL, input_key TEXT NOT NULL, kind TEXT NOT NULL,
                  body JSONB NOT NULL, received_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                  handed_at TIMESTAMPTZ, hand_count INTEGER NOT NULL DEFAULT 0,
                  done_at TIMESTAMPTZ, result TEXT, turns INTEGER NOT NULL DEFAULT 0,
                  conflicts INTEGER NOT NULL DEFAULT 0, provider_errors INTEGER NOT NULL DEFAULT 0,
                  PRIMARY KEY (session_id, input_key))""",
            f"CREATE INDEX IF NOT EXISTS {p}inbox_open ON {p}inbox (handed_at) WHERE done_at IS "
            "NULL",
            f"""CREATE TABLE IF NOT EXISTS {p}wakes (
                  session_id TEXT NOT NULL, wake_key TEXT NOT NULL, due_at TIMESTAMPTZ NOT NULL,
                  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), handed_at TIMESTAMPTZ,
                  hand_count INTEGER NOT NULL DEFAULT 0, done_at TIMESTAMPTZ, result TEXT,
                  turns INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0,
                  PRIMARY KEY (session_id, wake_key))""",
            f"CREATE INDEX IF NOT EXISTS {p}wakes_due ON {p}wakes (due_at) WHERE done_at IS NULL",
            f"""CREATE TABLE IF NOT EXISTS {p}outbox (
                  id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, message_key TEXT NOT NULL,
                  cause TEXT NOT NULL, text TEXT NOT NULL, kind TEXT NOT NULL, media JSONB,
                  after_ms INTEGER NOT NULL,
                  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                  send_after TIMESTAMPTZ NOT NULL, claimed_at TIMESTAMPTZ, sent_at TIMESTAMPTZ,
                  outcome TEXT, UNIQUE (session_id, message_key))""",
        ],
        [
            # attempts and the last error of every row; the dead letters; the sender's claim
            f"ALTER TABLE {p}inbox ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0, "
            "ADD COLUMN IF NOT EXISTS last_error TEXT",
            f"ALTER TABLE {p}wakes ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0, "
            "ADD COLUMN IF NOT EXISTS last_error TEXT",
            f"ALTER TABLE {p}outbox ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0, "
            "ADD COLUMN IF NOT EXISTS last_error TEXT, ADD COLUMN IF NOT EXISTS not_before "
            "TIMESTAMPTZ, "
            "ADD COLUMN IF NOT EXISTS dead_at TIMESTAMPTZ",
            f"DROP INDEX IF EXISTS {p}outbox_open",
            f"CREATE INDEX IF NOT EXISTS {p}outbox_pending ON {p}outbox (session_id, id) "
            "WHERE sent_at IS NULL AND dead_at IS NULL",
            f"CREATE INDEX IF NOT EXISTS {p}outbox_sent ON {p}outbox (sent_at) WHERE sent_at IS "
            "NOT NULL",
        ],
    ]


# 4. The host ##################################################################################


class Host:
    """One process's view of the host: a Postgres pool, a Redis client, the RQ queue, the agent.

    Safe to share between threads (the intake's and the sender's); build one per process.
    """

    def __init__(self, config: Config, agent: Any = None):
        self.config = config
        self.pool = Pool(config.dsn, config.pool_size, config.statement_timeout_ms)
        self.outage = Outage()
        self.metrics = Metrics()
        self._agent = agent
        self._redis: Any = None
        self._queue: Any = None

    @property
    def agent(self) -> Any:
        if self._agent is None:
            self._agent = load_agent(self.config.agent)
        return self._agent

    @property
    def redis(self) -> Any:
        if self._redis is None:
            import redis

            self._redis = redis.Redis.from_url(
                self.config.redis_url,
                socket_timeout=10,
                socket_connect_timeout=5,
                health_check_interval=15,
            )
        return self._redis

    @property
    def queue(self) -> Any:
        if self._queue is None:
            from rq import Queue

            self._queue = Queue(self.config.queue, connection=self.redis)
        return self._queue

    def close(self) -> None:
        self.pool.close()
        if self._redis is not None:
            self._redis.close()

    def sql(self, statement: str, params: tuple | list = ()) -> list[tuple]:
        """Run one statement on a pooled connection; its rows, or [] when it returns none.

        A statement whose connection turns out dead (the server restarted since it was lent) runs
        once more on a fresh one: every statement the host runs alone may run twice.
        """
        for last_try in (False, True):
            with self.pool.connection() as db:
                try:
                    cursor = db.execute(statement, params)
                    return cursor.fetchall() if cursor.description else []
                except database_errors():
                    if last_try or not (db.closed or db.broken):
                        raise
        raise AssertionError("unreachable: the last try returns or raises")

    def store(self, db: Any) -> Any:
        """The sessions table on this connection; commit=False, so a save joins the host's
        transaction (persistence.md §3.5)."""
        return PostgresStore(db, table=f"{self.config.prefix}sessions", commit=False)

    # Schema -------------------------------------------------------------------------------

    def schema_version(self) -> int:
        p = self.config.prefix
        rows = self.sql("SELECT to_regclass(%s) IS NOT NULL", (f"{p}schema",))
        if not rows[0][0]:
            return 0
        return int(self.sql(f"SELECT coalesce(max(version), 0) FROM {p}schema")[0][0])

    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the tables to SCHEMA_VERSION; (version before, version after).

        One transaction under an advisory lock, so two roles starting at once do not race.
        """
        p = self.config.prefix
        with self.pool.connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{p}schema",))
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {p}schema (version INTEGER NOT NULL, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
            )
            before = db.execute(f"SELECT coalesce(max(version), 0) FROM {p}schema").fetchone()[0]
            self.store(db).initialize()
            for version, statements in enumerate(migrations(p), 1):
                if version > before:
                    for statement in statements:
                        db.execute(statement)
                    db.execute(f"INSERT INTO {p}schema (version) VALUES (%s)", (version,))
        return int(before), SCHEMA_VERSION

    def check_schema(self) -> None:
        version = self.schema_version()
        if version < SCHEMA_VERSION:
            raise RuntimeError(
                f"the host's tables (prefix {self.config.prefix!r}) are at schema version "
                f"{version}, this falai_host needs {SCHEMA_VERSION}. Run `falai host schema`."
            )

    def drop(self) -> None:
        """Drop the host's tables (tests)."""
        for name in ("inbox", "wakes", "outbox", "sessions", "schema"):
            self.sql(f"DROP TABLE IF EXISTS {self.config.prefix}{name}")

    # Intake -------------------------------------------------------------------------------

    def accept(self, session_id: str, kind: str, input_key: str, body: dict) -> bool:
        """Record an input and hand its turn job; False when this input was already accepted.

        The inbox row commits first: once it is in, the input survives a Redis outage (the
        dispatcher hands a row whose hand failed).
        """
        p = self.config.prefix
        rows = self.sql(
            f"INSERT INTO {p}inbox (session_id, input_key, kind, body, handed_at, hand_count) "
            "VALUES (%s, %s, %s, %s::jsonb, clock_timestamp(), 1) ON CONFLICT DO NOTHING "
            "RETURNING 1",
            (session_id, input_key, kind, json.dumps(body)),
        )
        if not rows:
            return False  # a redelivered webhook: one INSERT, no job, no model call
        try:
            self.hand("inbox", session_id, input_key)
            self.outage.ok("Redis")
        except database_errors() as error:
            self.outage.failed("Redis", error)
            self.sql(
                f"UPDATE {p}inbox SET handed_at = NULL WHERE session_id = %s AND input_key = %s",
                (session_id, input_key),
            )
        return True

    def hand(self, table: str, session_id: str, key: str, replace_started: bool = False) -> bool:
        """Put the turn job of an inbox or wake row on the queue, once: True when queued now.

        A job with the same id still waiting is left alone, and so is a running one unless
        ``replace_started`` (its lease ran out: its worker died). One that ended is replaced
        (the engine ignores a replay: duplicate-input, stale-wake).
        """
        from rq import Retry
        from rq.exceptions import DuplicateJobError, NoSuchJobError
        from rq.job import Job, JobStatus

        jid = job_id(table, session_id, key)
        intervals = list(self.config.retry_intervals)
        options = dict(
            kwargs={"table": table, "session_id": session_id, "key": key},
            job_id=jid,
            timeout=self.config.job_timeout_s,
            result_ttl=600,
            failure_ttl=24 * 3600,
            retry=Retry(max=len(intervals), interval=intervals) if intervals else None,
            unique=True,
        )
        try:
            self.queue.enqueue_call(JOB_FUNCTION, **options)
            return True
        except DuplicateJobError:
            pass
        try:
            job = Job.fetch(jid, connection=self.redis)
            status = job.get_status()
            waiting = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED)
            if status in waiting or (status == JobStatus.STARTED and not replace_started):
                return False
            self._delete_job(job)
        except NoSuchJobError:
            pass
        try:
            self.queue.enqueue_call(JOB_FUNCTION, **options)
            return True
        except DuplicateJobError:  # another dispatcher was quicker
            return False

    def _delete_job(self, job: Any) -> None:
        """Delete a job, even one whose worker was killed: RQ 3 then raises ValueError ("Execution
        ... not found") or InvalidJobOperation from ``delete``; the job's key and its queue and
        registry entries are removed by hand instead."""
        try:
            job.delete()
        except Exception as error:
            log.info("job %s: delete() refused (%s); removing it by hand", job.id, error)
            from rq.registry import StartedJobRegistry

            with contextlib.suppress(Exception):
                StartedJobRegistry(self.config.queue, connection=self.redis).remove(job.id)
            with contextlib.suppress(Exception):
                self.queue.remove(job.id)
            self.redis.delete(job.key, job.dependents_key)

    # The turn job -------------------------------------------------------------------------

    def run(self, table: str, session_id: str, key: str) -> str:
        """Apply one inbox input or one wake; what happened (``applied``, an ignore code, ``dead``).

        The turn runs holding no connection (a model call may take seconds); the save, its outbox
        rows, its wake rows and the done mark commit together. A ProviderError propagates (RQ
        retries the job with backoff); any other failure is counted, and a row failing
        ``turn_attempts`` times becomes a dead letter.
        """
        try:
            code = self._run(table, session_id, key)
        except database_errors():
            self.metrics.database_failures += 1       # /healthz fails past DATABASE_FAILURES
            raise
        except BaseException:
            self.metrics.database_failures = 0
            raise
        self.metrics.database_failures = 0
        return code

    def _run(self, table: str, session_id: str, key: str) -> str:
        if table not in ("inbox", "wakes"):
            raise ValueError(
                f"run: table {table!r} is neither inbox nor wakes. Hand jobs with Host.hand()."
            )
        column = "input_key" if table == "inbox" else "wake_key"
        p = self.config.prefix
        # The lease counts from the start of the job, not from when it was queued.
        returned = "body" if table == "inbox" else "1"
        rows = self.sql(
            f"UPDATE {p}{table} SET handed_at = clock_timestamp() WHERE session_id = %s "
            f"AND {column} = %s AND done_at IS NULL RETURNING {returned}",
            (session_id, key),
        )
        if not rows:
            found = self.sql(
                f"SELECT 1 FROM {p}{table} WHERE session_id = %s AND {column} = %s",
                (session_id, key),
            )
            return "done-already" if found else "missing"
        turn_input = dict(rows[0][0]) if table == "inbox" else {"wake": key}
        cause = key if table == "inbox" else f"wake:{key}"
        try:
            return self._apply(table, column, session_id, key, turn_input, cause)
        except ProviderError as error:
            # runtime.md §10.1: the understand call failed and nothing was written; RQ retries.
            self.metrics.count("falai_turn_retries_total")
            if table == "inbox":
                self.sql(
                    f"UPDATE {p}inbox SET provider_errors = provider_errors + 1, last_error = %s "
                    "WHERE session_id = %s AND input_key = %s",
                    (_reason(error), session_id, key),
                )
            raise
        except database_errors():
            self.metrics.count("falai_turn_retries_total")
            raise  # not the input's fault: RQ retries, the lease hands again
        except Exception as error:
            return self._failed_turn(table, column, session_id, key, error)

    def _failed_turn(
        self, table: str, column: str, session_id: str, key: str, error: Exception
    ) -> str:
        p = self.config.prefix
        try:
            rows = self.sql(
                f"UPDATE {p}{table} SET attempts = attempts + 1, last_error = %s WHERE "
                f"session_id = %s AND {column} = %s AND done_at IS NULL RETURNING attempts",
                (_reason(error), session_id, key),
            )
        except database_errors():
            raise error from None     # the count is best effort; the hands still bound the tries
        if rows and rows[0][0] >= self.config.turn_attempts:
            reason = f"failed {rows[0][0]} times; last: {_reason(error)}"
            mark_dead(self.sql, self.metrics, self.config.prefix, table, column, session_id, key,
                      reason)
            return "dead"
        self.metrics.count("falai_turn_retries_total")
        raise error

    def _apply(
        self, table: str, column: str, session_id: str, key: str, turn_input: dict, cause: str
    ) -> str:
        p = self.config.prefix
        conflicts = 0
        for turns in range(1, MAX_REPLAYS + 1):
            with self.pool.connection() as db:
                loaded = self.store(db).load(session_id)
            result = self.agent.turn(session_id=session_id, session=loaded, **turn_input)
            self.metrics.count("falai_turns_total")
            self.metrics.count("falai_model_calls_total", result.llm_calls)
            code = (
                "applied"
                if result.changed
                else (result.outcomes[0].code if result.outcomes else "unchanged")
            )
            try:
                with self.pool.connection() as db, db.transaction():
                    # Locked and read again: a second copy of this job that applied it meanwhile
                    # wins, and this one saves nothing.
                    row = db.execute(
                        f"SELECT done_at FROM {p}{table} WHERE session_id = %s AND "
                        f"{column} = %s FOR UPDATE",
                        (session_id, key),
                    ).fetchone()
                    if row is None or row[0] is not None:
                        return "done-already"
                    if result.changed:
                        session = self._with_history(result, turn_input)
                        self.store(db).save(session, loaded.version if loaded else 0)
                        self._write_outbox(db, session_id, cause, result)
                        self._write_wakes(db, session_id, result)
                        if result.messages:
                            db.execute(f"NOTIFY {p}outbox")  # delivered at commit
                    db.execute(
                        f"UPDATE {p}{table} SET done_at = clock_timestamp(), result = %s, "
                        "turns = turns + %s, conflicts = conflicts + %s, last_error = NULL "
                        f"WHERE session_id = %s AND {column} = %s",
                        (code, turns, conflicts, session_id, key),
                    )
                return code
            except SessionConflictError:
                conflicts += 1  # someone saved first; nothing of this turn was written
        raise RuntimeError(
            f"run: session {session_id!r} lost {MAX_REPLAYS} saves in a row to other "
            "turns; the input stays open and the dispatcher hands it again."
        )

    def _with_history(self, result: TurnResult, turn_input: dict) -> Session:
        """The session with this turn's words appended to ``history``, the host-owned key."""
        session = result.session
        items = list(session.history or [])
        if "message" in turn_input:
            items.append({"role": "user", "content": turn_input["message"]})
        items.extend({"role": "assistant", "content": m.text} for m in result.messages)
        session.history = items[-self.config.history_items :] if items else session.history
        return session

    def _write_outbox(self, db: Any, session_id: str, cause: str, result: TurnResult) -> None:
        p = self.config.prefix
        delay_ms = 0
        for message in result.messages:
            delay_ms += message.after_ms  # runtime.md §7.2: a short wait rides on the next message
            inserted = db.execute(
                f"INSERT INTO {p}outbox (session_id, message_key, cause, text, kind, media, "
                "after_ms, "
                "send_after) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, "
                "clock_timestamp() + make_interval(secs => %s)) "
                "ON CONFLICT (session_id, message_key) DO NOTHING RETURNING id",
                (
                    session_id,
                    message.key,
                    cause,
                    message.text,
                    message.kind,
                    None if message.media is None else json.dumps(message.media),
                    message.after_ms,
                    delay_ms / 1000,
                ),
            ).fetchone()
            if inserted is None:
                log.warning(
                    "outbox: session %s already has message key %s; not sent twice",
                    session_id,
                    message.key,
                )

    def _write_wakes(self, db: Any, session_id: str, result: TurnResult) -> None:
        p = self.config.prefix
        for entry in result.schedule:
            if entry.replaces:
                # runtime.md §7.5: a best-effort drop; a superseded wake that fires is
                # silence-broken.
                db.execute(
                    f"UPDATE {p}wakes SET done_at = clock_timestamp(), result = 'replaced' "
                    "WHERE session_id = %s AND wake_key = %s AND done_at IS NULL "
                    "AND handed_at IS NULL",
                    (session_id, entry.replaces),
                )
            db.execute(
                f"INSERT INTO {p}wakes (session_id, wake_key, due_at) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (session_id, entry.key, entry.at),
            )

    # Dispatcher ---------------------------------------------------------------------------

    def dispatch_once(self, limit: int = 500) -> int:
        """Hand the due wakes, and hand again inputs and wakes whose lease ran out; how many.

        Rows are taken with SKIP LOCKED and their lease renewed in a short transaction; Redis is
        called after the commit, never while a row lock is held. A row handed ``max_hands`` times
        without being done becomes a dead letter.
        """
        p, config = self.config.prefix, self.config
        handed = 0
        if self.redis.set(f"falai:{p}{config.queue}:epoch", str(time.time()), nx=True):
            # The marker is gone: Redis restarted empty (or this is the first pass), so every job
            # it held is lost. Hand every open row now rather than after its lease.
            for table in ("inbox", "wakes"):
                self.sql(f"UPDATE {p}{table} SET handed_at = NULL WHERE done_at IS NULL")
        passes = (
            ("wakes", "wake_key", "due_at <= clock_timestamp()", "due_at"),
            ("inbox", "input_key", "TRUE", "received_at"),
        )
        for table, column, due, order in passes:
            with self.pool.connection() as db, db.transaction():
                rows = db.execute(
                    f"SELECT session_id, {column}, hand_count, handed_at, last_error FROM "
                    f"{p}{table} "
                    f"WHERE done_at IS NULL AND {due} AND (handed_at IS NULL OR handed_at < "
                    "clock_timestamp() - make_interval(secs => %s)) "
                    f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED",
                    (config.lease_s, limit),
                ).fetchall()
                to_hand = [row for row in rows if row[2] < config.max_hands]
                for session_id, key, hand_count, _, last_error in rows:
                    if hand_count >= config.max_hands:
                        reason = f"handed {hand_count} times, never done" + (
                            f"; last: {last_error}" if last_error else ""
                        )
                        mark_dead(db.execute, self.metrics, p, table, column, session_id, key,
                                  reason)
                for session_id, key, *_ in to_hand:
                    db.execute(
                        f"UPDATE {p}{table} SET handed_at = clock_timestamp() "
                        f"WHERE session_id = %s AND {column} = %s",
                        (session_id, key),
                    )
            for session_id, key, _, handed_at, _ in to_hand:
                # handed_at set: the lease ran out, a running job's worker is taken for dead
                if self.hand(table, session_id, key, replace_started=handed_at is not None):
                    handed += 1
                    self.sql(
                        f"UPDATE {p}{table} SET hand_count = hand_count + 1 "
                        f"WHERE session_id = %s AND {column} = %s",
                        (session_id, key),
                    )
        return handed

    # Recovery -----------------------------------------------------------------------------

    def recover(self, context_of: Callable[[str], Any] = lambda session_id: None) -> dict[str, int]:
        """After a queue loss: every session's wakes from ``agent.pending_wakes`` (runtime.md §14),
        and every open input and wake handed again at the dispatcher's next pass."""
        p = self.config.prefix
        rebuilt = sessions = 0
        last_id = ""
        while True:
            page = self.sql(
                f"SELECT id, blob FROM {p}sessions WHERE id > %s ORDER BY id LIMIT 500", (last_id,)
            )
            if not page:
                break
            for session_id, blob in page:
                sessions += 1
                blob = json.loads(blob) if isinstance(blob, str) else blob
                for entry in self.agent.pending_wakes(session=blob, context=context_of(session_id)):
                    rebuilt += bool(
                        self.sql(
                            f"INSERT INTO {p}wakes (session_id, wake_key, due_at) VALUES (%s, %s, "
                            "%s) "
                            "ON CONFLICT DO NOTHING RETURNING 1",
                            (session_id, entry.key, entry.at),
                        )
                    )
            last_id = page[-1][0]
        wakes = self.sql(f"UPDATE {p}wakes SET handed_at = NULL WHERE done_at IS NULL RETURNING 1")
        inputs = self.sql(f"UPDATE {p}inbox SET handed_at = NULL WHERE done_at IS NULL RETURNING 1")
        return {
            "sessions": sessions,
            "wakes_rebuilt": rebuilt,
            "wakes_open": len(wakes),
            "inputs_open": len(inputs),
        }

    # Dead letters -------------------------------------------------------------------------

    def dead_letters(self) -> list[dict]:
        """Every dead letter, oldest first: kind (inbox, wakes, outbox), session, key, reason,
        when."""
        p = self.config.prefix
        rows = self.sql(
            f"SELECT 'inbox', session_id, input_key, last_error, done_at FROM {p}inbox WHERE "
            "result = 'dead' "
            f"UNION ALL SELECT 'wakes', session_id, wake_key, last_error, done_at FROM {p}wakes "
            "WHERE result = 'dead' UNION ALL SELECT 'outbox', session_id, message_key, "
            "last_error, dead_at "
            f"FROM {p}outbox WHERE outcome = 'dead' ORDER BY 5"
        )
        return [
            {
                "kind": kind,
                "session_id": session_id,
                "key": key,
                "reason": reason,
                "at": at.isoformat() if at else None,
            }
            for kind, session_id, key, reason, at in rows
        ]

    # Where each kind of dead letter lives: its table, its key column, its status column.
    DEAD_LETTER_TABLES = (
        ("inbox", "input_key", "result"),
        ("wakes", "wake_key", "result"),
        ("outbox", "message_key", "outcome"),
    )
    RETRIED = {
        "inbox": "done_at = NULL, result = NULL, attempts = 0, hand_count = 0, handed_at = NULL",
        "wakes": "done_at = NULL, result = NULL, attempts = 0, hand_count = 0, handed_at = NULL",
        "outbox": "dead_at = NULL, outcome = NULL, attempts = 0, not_before = NULL",
    }

    def retry_dead(
        self, kind: str | None = None, session_id: str | None = None, key: str | None = None
    ) -> int:
        """Give dead letters their tries back (all, or one named by kind, session and key)."""
        return self._update_dead(lambda table, mark: self.RETRIED[table], kind, session_id, key)

    def drop_dead(
        self, kind: str | None = None, session_id: str | None = None, key: str | None = None
    ) -> int:
        """Give up dead letters for good: kept as ``dropped``, so a redelivered webhook stays
        deduped."""
        return self._update_dead(lambda table, mark: f"{mark} = 'dropped'", kind, session_id, key)

    def _update_dead(
        self, setting: Callable[[str, str], str], kind: str | None, session_id: str | None,
        key: str | None,
    ) -> int:
        """Apply ``setting(table, status column)`` to the dead letters named; how many rows."""
        count = 0
        for table, column, mark in self.DEAD_LETTER_TABLES:
            if kind in (None, table):
                count += len(
                    self.sql(
                        f"UPDATE {self.config.prefix}{table} SET {setting(table, mark)} "
                        f"WHERE {mark} = 'dead' "
                        f"AND (%s::text IS NULL OR session_id = %s) "
                        f"AND (%s::text IS NULL OR {column} = %s) RETURNING 1",
                        (session_id, session_id, key, key),
                    )
                )
        return count

    # Retention ----------------------------------------------------------------------------

    def prune(self, done_older_s: float, sessions_idle_s: float | None = None) -> dict[str, int]:
        """Delete sent outbox rows and done inputs and wakes older than ``done_older_s`` (dead
        letters stay until dropped); with ``sessions_idle_s``, sessions saved longer ago than
        that with nothing open (no input, wake or message pending) go too."""
        p = self.config.prefix
        counts = {
            "outbox": len(
                self.sql(
                    f"DELETE FROM {p}outbox WHERE sent_at < clock_timestamp() - "
                    "make_interval(secs => %s) RETURNING 1",
                    (done_older_s,),
                )
            ),
            "inbox": len(
                self.sql(
                    f"DELETE FROM {p}inbox WHERE done_at < clock_timestamp() - "
                    "make_interval(secs => %s) AND result <> 'dead' RETURNING 1",
                    (done_older_s,),
                )
            ),
            "wakes": len(
                self.sql(
                    f"DELETE FROM {p}wakes WHERE done_at < clock_timestamp() - "
                    "make_interval(secs => %s) AND result <> 'dead' RETURNING 1",
                    (done_older_s,),
                )
            ),
            "sessions": 0,
        }
        if sessions_idle_s is not None:
            counts["sessions"] = len(
                self.sql(
                    f"DELETE FROM {p}sessions s WHERE updated_at < clock_timestamp() - "
                    "make_interval(secs => %s) "
                    f"AND NOT EXISTS (SELECT 1 FROM {p}inbox i WHERE i.session_id = s.id AND "
                    "i.done_at IS NULL) "
                    f"AND NOT EXISTS (SELECT 1 FROM {p}wakes w WHERE w.session_id = s.id AND "
                    "w.done_at IS NULL) "
                    f"AND NOT EXISTS (SELECT 1 FROM {p}outbox o WHERE o.session_id = s.id "
                    "AND o.sent_at IS NULL AND o.dead_at IS NULL) RETURNING 1",
                    (sessions_idle_s,),
                )
            )
        return counts


def mark_dead(execute: Callable[..., Any], metrics: Any, prefix: str, table: str, column: str,
              session_id: str, key: str, reason: str) -> None:
    """Move one input or wake aside as a dead letter with its reason: logged once and counted."""
    log.error("dead letter: %s %s/%s: %s", table, session_id, key, reason)
    metrics.count("falai_dead_letters_total", kind=table)
    execute(
        f"UPDATE {prefix}{table} SET done_at = clock_timestamp(), result = 'dead', "
        f"last_error = %s WHERE session_id = %s AND {column} = %s AND done_at IS NULL",
        (reason, session_id, key),
    )


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:500]


# The job RQ runs: RQ imports a function by name and hands it only the job's arguments, so the
# worker's Host (its pool and its agent) is kept here, set by run_worker, for the process's life.
_worker_host: Host | None = None


def run_job(table: str, session_id: str, key: str) -> str:
    """The RQ job: apply one input or wake with this worker's Host (settings from the environment
    when the worker was not started by ``falai host worker``)."""
    global _worker_host
    if _worker_host is None:
        _worker_host = Host(config_from())
    return _worker_host.run(table, session_id, key)


# 5. Sending ###################################################################################


class ChannelError(Exception):
    """A send that failed. ``permanent``: the channel refused it for good (a 4xx other than 408 and
    429), trying again cannot help; ``maybe_sent``: the request may have reached the channel (a
    timeout, a 5xx), so the next try waits at least one send timeout."""

    def __init__(self, reason: str, permanent: bool = False, maybe_sent: bool = True):
        super().__init__(reason)
        self.permanent = permanent
        self.maybe_sent = maybe_sent


class Channel:
    """Where messages go. ``send`` delivers one message under an idempotency key (the channel must
    dedupe on it for exactly-once); ``was_delivered`` says whether the channel already has that key
    (True, False, or None when it cannot tell), asked only for a message tried before."""

    def send(self, idempotency_key: str, session_id: str, message: dict) -> None:
        raise NotImplementedError

    def was_delivered(self, idempotency_key: str) -> bool | None:
        return None


class HttpChannel(Channel):
    """A channel behind an HTTP API: ``POST {url}/send`` with a JSON body that carries the
    ``idempotency_key`` (also sent as the ``Idempotency-Key`` header), and optionally
    ``GET {url}/delivered?key=...`` answering ``{"delivered": true|false}``."""

    def __init__(self, url: str, timeout: float = 10.0):
        import requests

        self.url = url.rstrip("/")
        self.timeout = timeout
        self.local = threading.local()  # a requests.Session per sending thread
        self.requests = requests

    def _http(self) -> Any:
        if getattr(self.local, "session", None) is None:
            self.local.session = self.requests.Session()
        return self.local.session

    def send(self, idempotency_key: str, session_id: str, message: dict) -> None:
        body = {"idempotency_key": idempotency_key, "session_id": session_id, **message}
        try:
            response = self._http().post(
                f"{self.url}/send",
                json=body,
                timeout=self.timeout,
                headers={"Idempotency-Key": idempotency_key},
            )
        except self.requests.ConnectionError as error:
            refused = "refused" in str(error) or "Failed to establish" in str(error)
            if isinstance(error, self.requests.exceptions.ConnectTimeout) or refused:
                raise ChannelError(f"channel unreachable: {error}", maybe_sent=False) from error
            raise ChannelError(f"channel connection failed: {error}") from error
        except self.requests.RequestException as error:  # a read timeout: maybe sent
            raise ChannelError(f"channel call failed: {error}") from error
        if response.status_code >= 400:
            permanent = response.status_code < 500 and response.status_code not in (408, 429)
            raise ChannelError(
                f"channel answered {response.status_code}: {response.text[:200]}",
                permanent=permanent,
                maybe_sent=response.status_code >= 500,
            )

    def was_delivered(self, idempotency_key: str) -> bool | None:
        try:
            response = self._http().get(
                f"{self.url}/delivered", params={"key": idempotency_key}, timeout=self.timeout
            )
            if response.status_code != 200:
                return None
            return bool(response.json()["delivered"])
        except (self.requests.RequestException, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Claimed:
    """An outbox row a sender claimed: its CAS on ``not_before`` makes it this sender's only."""

    id: int
    session_id: str
    message_key: str
    text: str
    kind: str
    media: Any
    attempts: int  # including this one
    waited_s: float | None  # since the webhook that caused it was received


class Sender:
    """Drains the outbox: several sends in flight, one per session, each session's in order.

    A row is claimed by a compare-and-swap on ``not_before`` (the claim's lease), so any number of
    senders, with any shard settings, never send one row at once; a session's next row is taken
    only when every earlier one is sent or dead. ``shard=(i, n)`` only splits the work.
    """

    def __init__(self, host: Host, channel: Channel, shard: tuple[int, int] = (0, 1)):
        self.host = host
        self.channel = channel
        self.shard = shard
        self.claim_lease_s = 2 * host.config.send_timeout_s + 5

    def claim(self, limit: int, busy: list[str] | tuple = ()) -> list[Claimed]:
        """Claim up to ``limit`` due rows, each the oldest pending row of its session, skipping the
        sessions in ``busy`` (sends of this sender still in flight)."""
        p = self.host.config.prefix
        index, count = self.shard
        rows = self.host.sql(
            f"WITH heads AS (SELECT DISTINCT ON (session_id) id FROM {p}outbox "
            "WHERE sent_at IS NULL AND dead_at IS NULL AND NOT (session_id = ANY(%s::text[])) "
            "AND mod(hashtext(session_id)::bigint + 2147483648, %s) = %s ORDER BY session_id, id), "
            f"due AS (SELECT o.id FROM {p}outbox o JOIN heads h ON h.id = o.id "
            "WHERE o.send_after <= clock_timestamp() "
            "AND (o.not_before IS NULL OR o.not_before <= clock_timestamp()) ORDER BY o.id LIMIT "
            "%s) "
            f"UPDATE {p}outbox o SET not_before = clock_timestamp() + make_interval(secs => %s), "
            "attempts = o.attempts + 1, claimed_at = coalesce(o.claimed_at, clock_timestamp()) "
            "FROM due WHERE o.id = due.id AND o.sent_at IS NULL AND o.dead_at IS NULL "
            "AND (o.not_before IS NULL OR o.not_before <= clock_timestamp()) "
            "RETURNING o.id, o.session_id, o.message_key, o.text, o.kind, o.media, o.attempts, "
            f"(SELECT extract(epoch FROM clock_timestamp() - i.received_at) FROM {p}inbox i "
            "WHERE i.session_id = o.session_id AND i.input_key = o.cause)",
            (list(busy), count, index, limit, self.claim_lease_s),
        )
        claimed = [
            Claimed(
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                row[5],
                row[6],
                None if row[7] is None else float(row[7]),
            )
            for row in rows
        ]
        return sorted(claimed, key=lambda c: c.id)

    def deliver(self, row: Claimed) -> str:
        """Send one claimed row and record what happened: sent, resent, found-delivered,
        retry (it waits its backoff) or dead."""
        key = f"{row.session_id}/{row.message_key}"
        metrics = self.host.metrics
        try:
            if row.attempts > 1 and self.channel.was_delivered(key):
                outcome = "found-delivered"
            else:
                self.channel.send(
                    key,
                    row.session_id,
                    {
                        "key": row.message_key,
                        "text": row.text,
                        "kind": row.kind,
                        "media": row.media,
                    },
                )
                outcome = "sent" if row.attempts == 1 else "resent"
        except ChannelError as error:
            return self._failed(row, error)
        self.host.outage.ok("the channel")
        self.host.sql(
            f"UPDATE {self.host.config.prefix}outbox SET sent_at = clock_timestamp(), "
            "outcome = %s, last_error = NULL WHERE id = %s AND sent_at IS NULL",
            (outcome, row.id),
        )
        metrics.count("falai_sends_total", outcome=outcome)
        if row.waited_s is not None:
            metrics.observe("falai_webhook_to_send_seconds", row.waited_s)
        return outcome

    def _failed(self, row: Claimed, error: ChannelError) -> str:
        p = self.host.config.prefix
        reason = str(error)[:500]
        if error.permanent or row.attempts >= self.host.config.send_attempts:
            why = "refused for good" if error.permanent else f"failed {row.attempts} times"
            log.error(
                "dead letter: outbox %s/%s %s: %s", row.session_id, row.message_key, why, reason
            )
            self.host.sql(
                f"UPDATE {p}outbox SET dead_at = clock_timestamp(), outcome = 'dead', "
                "last_error = %s WHERE id = %s AND sent_at IS NULL",
                (f"{why}: {reason}", row.id),
            )
            self.host.metrics.count("falai_dead_letters_total", kind="outbox")
            return "dead"
        if error.maybe_sent:
            log.info(
                "outbox %s/%s: try %d failed (%s)",
                row.session_id,
                row.message_key,
                row.attempts,
                reason,
            )
        else:
            self.host.outage.failed("the channel", error)
        backoff = min(2.0**row.attempts, 300.0)
        if error.maybe_sent:  # let a copy still in flight land before asking "delivered?"
            backoff = max(backoff, self.host.config.send_timeout_s)
        self.host.sql(
            f"UPDATE {p}outbox SET not_before = clock_timestamp() + make_interval(secs => %s), "
            "last_error = %s WHERE id = %s AND sent_at IS NULL",
            (backoff, reason, row.id),
        )
        self.host.metrics.count("falai_send_retries_total")
        return "retry"

    def send_once(self, limit: int | None = None) -> int:
        """Claim what is due and deliver it, sends running concurrently; how many were claimed."""
        rows = self.claim(limit or self.host.config.in_flight)
        if rows:
            with ThreadPoolExecutor(max_workers=min(len(rows), self.host.config.in_flight)) as pool:
                list(pool.map(self.deliver, rows))
        return len(rows)

    def run(self, stop: threading.Event, wake: Callable[[float], None] | None = None) -> None:
        """Keep up to ``in_flight`` sends going until ``stop``; ``wake(timeout)`` waits for new rows
        (default: sleep ``poll_s``)."""
        config = self.host.config
        in_flight: dict[Future, str] = {}
        with ThreadPoolExecutor(max_workers=config.in_flight, thread_name_prefix="send") as pool:
            while not stop.is_set():
                free = config.in_flight - len(in_flight)
                claimed: list[Claimed] = []
                if free > 0:
                    try:
                        claimed = self.claim(free, busy=sorted(set(in_flight.values())))
                        self.host.outage.ok("Postgres")
                    except database_errors() as error:
                        stop.wait(self.host.outage.failed("Postgres", error))
                for row in claimed:
                    in_flight[pool.submit(self._deliver_logged, row)] = row.session_id
                self.host.metrics.beat()
                if in_flight:
                    done, _ = wait(
                        list(in_flight), timeout=config.poll_s, return_when=FIRST_COMPLETED
                    )
                    for future in done:
                        del in_flight[future]
                elif not claimed:
                    (wake or stop.wait)(config.poll_s)
            wait(list(in_flight))

    def _deliver_logged(self, row: Claimed) -> str:
        try:
            return self.deliver(row)
        except Exception as error:  # Postgres lost mid-send: the claim's lease brings it back
            self.host.outage.failed("Postgres", error)
            return "retry"


# 6. Intake ####################################################################################


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The value of ``X-Falai-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed with the
    shared secret, of the timestamp (``X-Falai-Timestamp``, Unix seconds), a dot and the raw
    body."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def check_signature(
    secret: str,
    timestamp: str | None,
    given: str | None,
    body: bytes,
    tolerance_s: float,
    now: float | None = None,
) -> str | None:
    """None when the request is signed with ``secret`` within the tolerance, else the problem."""
    if not timestamp or not given:
        return (
            "unsigned: send X-Falai-Timestamp (Unix seconds) and X-Falai-Signature "
            "(sha256=HMAC-SHA256 of timestamp + '.' + body, docs/guide/production.md)."
        )
    try:
        at = float(timestamp)
    except ValueError:
        return "X-Falai-Timestamp is not a number of Unix seconds."
    if abs((time.time() if now is None else now) - at) > tolerance_s:
        return (
            f"X-Falai-Timestamp is more than {tolerance_s:g}s away from now: a replay, or a clock "
            "off. Sign each request when it is sent."
        )
    if not hmac.compare_digest(signature(secret, timestamp, body), given.strip()):
        return (
            "X-Falai-Signature does not match the body: sign the raw body with the shared secret."
        )
    return None


class Rejected(ValueError):
    """A webhook the intake refuses: ``status`` and the problem, named with its fix."""

    def __init__(self, status: str, problem: str):
        super().__init__(problem)
        self.status = status


def _id(
    body: dict, name: str, where: str, pattern: re.Pattern = ID_CHARACTERS, limit: int = MAX_ID
) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise Rejected(
            "400 Bad Request",
            f"{where}: {name} is missing or not a non-empty string. Send it as JSON text.",
        )
    if len(value) > limit:
        raise Rejected(
            "422 Unprocessable Entity",
            f"{where}: {name} is {len(value)} characters, over "
            f"the limit of {limit}. Send a shorter {name}.",
        )
    if pattern.fullmatch(value) is None:
        allowed = (
            "printable ASCII without spaces" if pattern is ID_CHARACTERS else "A-Z a-z 0-9 _ . : -"
        )
        raise Rejected(
            "422 Unprocessable Entity",
            f"{where}: {name} {value[:40]!r} has characters outside {allowed}. Encode it.",
        )
    return value


def _depth(value: Any) -> int:
    """Levels of lists and dicts in a JSON value (iterative: the intake never recurses on input)."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest


def _no_nul(value: Any, where: str) -> None:
    if "\\u0000" in json.dumps(value):
        raise Rejected(
            "422 Unprocessable Entity",
            f"{where}: a text holds a NUL character (\\u0000), "
            "which Postgres cannot store. Remove it.",
        )


def parse_input(path: str, body: Any, config: Config) -> tuple[str, str, str, dict]:
    """(session_id, kind, input_key, turn keywords) of a webhook body; Rejected names the
    problem."""
    where = f"POST {path}"
    if path not in ("/messages", "/events", "/starts"):
        raise LookupError(path)
    if not isinstance(body, dict):
        raise Rejected(
            "400 Bad Request",
            f"{where}: the body is not a JSON object. Send {{\"session_id\": ..., ...}}.",
        )
    _no_nul(body, where)
    session_id = _id(body, "session_id", where)
    if path == "/messages":
        message_id = _id(body, "id", where)  # the channel's message id: replay detection
        text = body.get("text")
        if not isinstance(text, str):
            raise Rejected(
                "400 Bad Request",
                f"{where}: text is missing or not a string. Send the message text.",
            )
        if len(text) > config.max_message:
            raise Rejected(
                "413 Payload Too Large",
                f"{where}: text is {len(text)} characters, over the "
                f"limit of {config.max_message} (FALAI_MAX_MESSAGE).",
            )
        return session_id, "message", message_id, {"message": text, "id": message_id}
    if path == "/events":
        event = _id(body, "event", where, NAME_CHARACTERS, 100)
        key = _id(body, "key", where)
        payload = body.get("payload")
        if _depth(payload) > MAX_PAYLOAD_NESTING:
            raise Rejected(
                "422 Unprocessable Entity",
                f"{where}: payload nests deeper than "
                f"{MAX_PAYLOAD_NESTING} levels, the engine's limit "
                "(docs/guide/limits.md). Flatten it.",
            )
        return session_id, "event", f"event:{key}", {"event": event, "key": key, "payload": payload}
    flow = _id(body, "flow", where, NAME_CHARACTERS, 100)
    key = _id(body, "key", where)
    start: dict = {"flow": flow, "key": key}
    if "input" in body:
        if _depth(body["input"]) > MAX_PAYLOAD_NESTING:
            raise Rejected(
                "422 Unprocessable Entity",
                f"{where}: input nests deeper than "
                f"{MAX_PAYLOAD_NESTING} levels, the engine's limit "
                "(docs/guide/limits.md). Flatten it.",
            )
        start["input"] = body["input"]
    return session_id, "start", f"start:{key}", {"start": start}


def intake_app(host: Host, signed: bool = True) -> Callable:
    """The webhook (WSGI): POST /messages, /events, /starts with a signed JSON body, answered 202
    once the input is in the inbox; GET /healthz, /readyz, /metrics."""
    config = host.config

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        def answer(
            status: str, payload: Any, content_type: str = "application/json"
        ) -> list[bytes]:
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            start_response(
                status, [("Content-Type", content_type), ("Content-Length", str(len(data)))]
            )
            return [data]

        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO", "")
        if method == "GET" and path in OPERATIONS:
            return answer(*operations(host, path))
        if method != "POST":
            return answer(
                "405 Method Not Allowed", {"error": f"{path}: only POST. Send the input as a POST."}
            )
        try:
            length = int(environ.get("CONTENT_LENGTH") or -1)
        except ValueError:
            length = -1
        if length < 0:
            return answer(
                "411 Length Required", {"error": "Content-Length is missing or not a number."}
            )
        if length > config.max_body:
            return answer(
                "413 Payload Too Large",
                {
                    "error": f"the body is {length} bytes, over the limit of "
                    f"{config.max_body} (FALAI_MAX_BODY)."
                },
            )
        raw = environ["wsgi.input"].read(length)
        if signed:
            problem = check_signature(
                config.secret,
                environ.get("HTTP_X_FALAI_TIMESTAMP"),
                environ.get("HTTP_X_FALAI_SIGNATURE"),
                raw,
                config.tolerance_s,
            )
            if problem:
                return answer("401 Unauthorized", {"error": problem})
        try:
            session_id, kind, key, body = parse_input(path, json.loads(raw or b"null"), config)
        except LookupError:
            return answer(
                "404 Not Found",
                {"error": f"{path}: no such endpoint. Use /messages, /events or /starts."},
            )
        except Rejected as error:
            return answer(error.status, {"error": str(error)})
        except ValueError as error:  # json.JSONDecodeError
            return answer(
                "400 Bad Request", {"error": f"POST {path}: the body is not JSON ({error})."}
            )
        try:
            accepted = host.accept(session_id, kind, key, body)
            host.outage.ok("Postgres")
        except database_errors() as error:
            host.outage.failed("Postgres", error)
            return answer(
                "503 Service Unavailable", {"error": "the inbox is unreachable; retry later."}
            )
        host.metrics.count("falai_inputs_total", duplicate=str(not accepted).lower())
        return answer("202 Accepted", {"accepted": True, "duplicate": not accepted})

    return app


def serve(app: Callable, bind: str, port: int) -> Any:
    """A threading WSGI server with socket timeouts; returns it (``serve_forever`` is the
    caller's)."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        request_queue_size = 128

    class Handler(WSGIRequestHandler):
        timeout = 10  # a client that sends nothing is dropped, not waited for

        def log_message(self, *args: Any) -> None:  # one line per request is noise under load
            pass

    return make_server(bind, port, app, server_class=Server, handler_class=Handler)


# 7. Operations ################################################################################


class Metrics:
    """This process's counters and one latency histogram, in Prometheus text format."""

    BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counters: dict[tuple[str, tuple], float] = {}
        self.histograms: dict[str, list[float]] = {}
        self.last_beat: float | None = None  # set by a role that loops (dispatcher, sender)
        self.database_failures = 0               # turn jobs in a row that failed on the database

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        with self.lock:
            key = (name, tuple(sorted(labels.items())))
            self.counters[key] = self.counters.get(key, 0) + amount

    def observe(self, name: str, value: float) -> None:
        with self.lock:
            values = self.histograms.setdefault(name, [0.0] * (len(self.BUCKETS) + 2))
            for i, bound in enumerate(self.BUCKETS):
                values[i] += value <= bound
            values[-2] += 1  # +Inf
            values[-1] += value  # sum

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def render(self, gauges: dict[str, float]) -> str:
        lines = []
        with self.lock:
            typed = set()
            for (name, labels), value in sorted(self.counters.items()):
                if name not in typed:
                    typed.add(name)
                    lines.append(f"# TYPE {name} counter")
                text = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(f"{name}{{{text}}} {value:g}" if text else f"{name} {value:g}")
            for name, values in sorted(self.histograms.items()):
                lines.append(f"# TYPE {name} histogram")
                lines.extend(
                    f'{name}_bucket{{le="{bound}"}} {values[i]:g}'
                    for i, bound in enumerate(self.BUCKETS)
                )
                lines.append(f'{name}_bucket{{le="+Inf"}} {values[-2]:g}')
                lines.append(f"{name}_count {values[-2]:g}")
                lines.append(f"{name}_sum {values[-1]:g}")
        lines.extend(f"{name} {value:g}" for name, value in sorted(gauges.items()))
        return "\n".join(lines) + "\n"


OPERATIONS = ("/healthz", "/readyz", "/metrics")
DATABASE_FAILURES = 20        # turn jobs failing on the database in a row: a worker to restart


def readiness(host: Host) -> dict[str, str]:
    """What each dependency says: ``ok`` or the error (Postgres: SELECT 1; Redis: PING)."""
    state = {}
    try:
        host.sql("SELECT 1")
        state["postgres"] = "ok"
    except Exception as error:
        state["postgres"] = _reason(error)
    try:
        host.redis.ping()
        state["redis"] = "ok"
    except Exception as error:
        state["redis"] = _reason(error)
    return state


def gauges(host: Host) -> dict[str, float]:
    """The backlog as Postgres and Redis see it; a dependency that does not answer is left out."""
    p = host.config.prefix
    values: dict[str, float] = {}
    with contextlib.suppress(Exception):
        row = host.sql(
            f"SELECT (SELECT count(*) FROM {p}inbox WHERE done_at IS NULL), "
            "(SELECT coalesce(extract(epoch FROM clock_timestamp() - min(received_at)), 0) FROM "
            f"{p}inbox "
            "WHERE done_at IS NULL), "
            f"(SELECT count(*) FROM {p}wakes WHERE done_at IS NULL AND due_at <= "
            "clock_timestamp()), "
            f"(SELECT count(*) FROM {p}outbox WHERE sent_at IS NULL AND dead_at IS NULL), "
            f"(SELECT count(*) FROM {p}inbox WHERE result = 'dead') + "
            f"(SELECT count(*) FROM {p}wakes WHERE result = 'dead') + "
            f"(SELECT count(*) FROM {p}outbox WHERE outcome = 'dead')"
        )[0]
        values.update(
            {
                "falai_inbox_open": float(row[0]),
                "falai_inbox_oldest_open_seconds": float(row[1]),
                "falai_wakes_due": float(row[2]),
                "falai_outbox_pending": float(row[3]),
                "falai_dead_letters": float(row[4]),
            }
        )
    with contextlib.suppress(Exception):
        values["falai_queue_depth"] = float(host.queue.count)
    return values


def operations(host: Host, path: str, stale_after_s: float = 60.0) -> tuple[str, Any, str]:
    """(status, body, content type) of /healthz, /readyz or /metrics."""
    if path == "/healthz":
        if host.metrics.database_failures >= DATABASE_FAILURES:
            problem = f"the last {host.metrics.database_failures} turn jobs failed on the database"
            return "503 Service Unavailable", {"ok": False, "error": problem}, "application/json"
        beat = host.metrics.last_beat
        age = 0.0 if beat is None else time.monotonic() - beat
        if age > stale_after_s:
            return (
                "503 Service Unavailable",
                {"ok": False, "error": f"no progress for {age:.0f}s"},
                "application/json",
            )
        return "200 OK", {"ok": True}, "application/json"
    if path == "/readyz":
        state = readiness(host)
        ok = all(value == "ok" for value in state.values())
        return (
            ("200 OK" if ok else "503 Service Unavailable"),
            {"ready": ok, **state},
            "application/json",
        )
    return "200 OK", host.metrics.render(gauges(host)), "text/plain; version=0.0.4"


def serve_operations(host: Host, port: int) -> Any:
    """/healthz, /readyz and /metrics of a role on ``bind:port``, in a daemon thread; the server."""

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or path not in OPERATIONS:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"GET /healthz, /readyz or /metrics\n"]
        status, body, content_type = operations(host, path)
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data)))])
        return [data]

    server = serve(app, host.config.bind, port)
    threading.Thread(target=server.serve_forever, daemon=True, name="operations").start()
    return server


# 8. Roles and CLI #############################################################################


def wait_for_schema(host: Host, stop: threading.Event | None = None) -> None:
    """Until Postgres answers with the right schema version (a role may start before its
    database)."""
    while stop is None or not stop.is_set():
        try:
            host.check_schema()
            host.outage.ok("Postgres")
            return
        except database_errors() as error:
            time.sleep(host.outage.failed("Postgres", error))


class _RepeatFilter(logging.Filter):
    """Lets one record per message start through each minute: a job failing the same way on every
    try logs once, not a traceback per try."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        head = str(record.msg)[:80]
        now = time.monotonic()
        if now - self.seen.get(head, -1e9) < 60:
            return False
        self.seen[head] = now
        return True


def run_worker(host: Host) -> None:
    """An RQ worker running turn jobs in-process (SimpleWorker: no fork, the pool lives on), with
    the
    scheduler that brings back retried jobs; it waits out a Redis outage."""
    global _worker_host
    from rq import Queue, SimpleWorker

    os.environ.update(config_env(host.config))
    _worker_host = host
    _ = host.agent  # build the agent now, not on the first job
    logging.getLogger("rq.worker").addFilter(_RepeatFilter())
    while True:
        try:
            worker = SimpleWorker(
                [Queue(host.config.queue, connection=host.redis)], connection=host.redis
            )
            host.outage.ok("Redis")
            worker.work(with_scheduler=True, logging_level="WARNING")
            return
        except database_errors() as error:
            time.sleep(host.outage.failed("Redis", error))


def _loop(host: Host, step: Callable[[], int], stop: threading.Event, what: str) -> None:
    """Call ``step`` until stopped, sleeping ``poll_s`` when it found nothing; an outage of Postgres
    or Redis is said once and waited out with backoff."""
    while not stop.is_set():
        try:
            busy = step()
            host.outage.ok(what)
        except database_errors() as error:
            busy = 0
            stop.wait(host.outage.failed(what, error))
        host.metrics.beat()
        if not busy:
            stop.wait(host.config.poll_s)


def run_dispatcher(host: Host, stop: threading.Event | None = None) -> None:
    _loop(host, host.dispatch_once, stop or threading.Event(), "Postgres or Redis")


def run_sender(
    host: Host,
    channel: Channel | None = None,
    shard: tuple[int, int] = (0, 1),
    stop: threading.Event | None = None,
) -> None:
    """Drain the outbox (one shard of it); wakes on the NOTIFY a turn's commit sends."""
    if channel is None:
        if not host.config.channel_url:
            raise ValueError(
                "sender: no channel. Give --channel-url or FALAI_CHANNEL_URL (the channel's "
                "POST /send), or run the sender with a Channel of your own."
            )
        channel = HttpChannel(host.config.channel_url, timeout=host.config.send_timeout_s)
    stop = stop or threading.Event()
    listener: dict[str, Any] = {}

    def wake(timeout: float) -> None:
        """Until a turn commits messages (its NOTIFY) or ``timeout`` passes (an after_ms)."""
        try:
            if listener.get("db") is None or listener["db"].closed or listener["db"].broken:
                listener["db"] = host.pool._connect()
                listener["db"].execute(f"LISTEN {host.config.prefix}outbox")
            for _ in listener["db"].notifies(timeout=timeout, stop_after=1):
                pass
        except database_errors() as error:
            with contextlib.suppress(Exception):
                listener["db"].close()
            listener["db"] = None
            stop.wait(host.outage.failed("Postgres", error))

    try:
        Sender(host, channel, shard).run(stop, wake)
    finally:
        if listener.get("db") is not None:
            listener["db"].close()


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        shard = (int(index), int(count or 1))
    except ValueError:
        shard = (-1, 0)
    if not 0 <= shard[0] < shard[1]:
        raise ValueError(
            f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/2 and 1/2 for two senders."
        )
    return shard


def parser() -> argparse.ArgumentParser:
    settings = argparse.ArgumentParser(add_help=False)
    group = settings.add_argument_group("settings (a flag wins over its variable)")
    for name, variable, text in SETTINGS:
        group.add_argument(
            "--" + name.removesuffix("_s").replace("_", "-"), dest=name, metavar=variable,
            help=f"{text} [${variable}]"
        )
    top = argparse.ArgumentParser(
        prog="falai host",
        description="The production host's roles and its admin "
        "commands (docs/guide/production.md).",
    )
    roles = top.add_subparsers(dest="role", required=True, metavar="ROLE")
    roles.add_parser("schema", parents=[settings], help="create or upgrade the host's tables")
    p = roles.add_parser(
        "intake", parents=[settings], help="the webhook: POST /messages, /events, /starts"
    )
    p.add_argument(
        "--unsigned",
        action="store_true",
        help="accept unsigned webhooks (development only; never on a reachable address)",
    )
    roles.add_parser("worker", parents=[settings], help="an RQ worker that runs turns")
    roles.add_parser(
        "dispatcher", parents=[settings], help="hands due wakes and expired leases to RQ"
    )
    p = roles.add_parser("sender", parents=[settings], help="sends the outbox to the channel")
    p.add_argument(
        "--shard", default="0/1", help="i/n: this sender's share of the sessions (default 0/1)"
    )
    roles.add_parser(
        "recover",
        parents=[settings],
        help="rebuild wakes and re-hand open work after a loss of Redis",
    )
    p = roles.add_parser("dead", parents=[settings], help="list, retry or drop dead letters")
    p.add_argument("action", choices=("list", "retry", "drop"))
    p.add_argument("--kind", choices=("inbox", "wakes", "outbox"), help="only this kind")
    p.add_argument("--session", help="only this session")
    p.add_argument("--key", help="only this input, wake or message key")
    p = roles.add_parser(
        "prune", parents=[settings], help="delete old sent messages and done inputs and wakes"
    )
    p.add_argument(
        "--older-than",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="age of a done row to delete (default 7 days)",
    )
    p.add_argument(
        "--sessions-idle",
        type=float,
        metavar="DAYS",
        help="also delete sessions saved longer ago than this with nothing open",
    )
    return top


def main(
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: dict | None = None,
) -> int:
    """``falai host ROLE``: 0 when a command succeeded, 1 when it failed, 2 for unusable
    settings."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        args = parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else 2
    try:
        config = config_from(environ, vars(args))
    except ValueError as error:
        err.write(f"falai host {args.role}: {error}\n")
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=err, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
    host = Host(config)
    try:
        return _run_role(args, host, out)
    except ValueError as error:
        err.write(f"falai host {args.role}: {error}\n")
        return 2
    except RuntimeError as error:
        err.write(f"falai host {args.role}: {error}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        host.close()


def _run_role(args: argparse.Namespace, host: Host, out: TextIO) -> int:
    config = host.config
    if args.role == "schema":
        before, after = host.migrate()
        out.write(f"schema of {config.prefix}*: version {before} -> {after}\n")
        return 0
    if args.role == "dead":
        selection = {"kind": args.kind, "session_id": args.session, "key": args.key}
        if args.action == "list":
            for letter in host.dead_letters():
                out.write(json.dumps(letter) + "\n")
        elif args.action == "retry":
            out.write(f"{host.retry_dead(**selection)} dead letters given their tries back\n")
        else:
            out.write(f"{host.drop_dead(**selection)} dead letters dropped\n")
        return 0
    if args.role == "prune":
        counts = host.prune(
            args.older_than * 86400,
            None if args.sessions_idle is None else args.sessions_idle * 86400,
        )
        out.write(json.dumps(counts) + "\n")
        return 0
    if args.role == "recover":
        out.write(json.dumps(host.recover()) + "\n")
        return 0
    if args.role == "intake":
        if not config.secret and not args.unsigned:
            raise ValueError(
                "no signing secret. Set FALAI_INTAKE_SECRET (or --secret), or pass --unsigned "
                "for local development."
            )
        if args.unsigned:
            log.warning("intake: accepting UNSIGNED webhooks on %s:%d", config.bind, config.port)
        wait_for_schema(host)
        server = serve(intake_app(host, signed=not args.unsigned), config.bind, config.port)
        log.info("intake listening on %s:%d", config.bind, server.server_address[1])
        server.serve_forever()
        return 0
    shard = _shard(args.shard) if args.role == "sender" else (0, 1)
    if args.role == "sender" and not config.channel_url:
        raise ValueError(
            "no channel. Give --channel-url or FALAI_CHANNEL_URL (the channel's POST /send)."
        )
    if config.health_port:
        serve_operations(host, config.health_port)
    wait_for_schema(host)
    if args.role == "worker":
        run_worker(host)                      # RQ handles SIGTERM: it finishes the job it runs
        return 0
    # SIGTERM (systemd's and Docker's stop) ends the loop after the sends in flight.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda number, frame: stop.set())
    if args.role == "dispatcher":
        run_dispatcher(host, stop)
    else:
        run_sender(host, shard=shard, stop=stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
