"""falai: a conversational state engine. The model understands; the code decides.

A host calls ``agent.turn(...)`` for every input (a customer message, a wake
that fired, a host event, a manual start) and gets back the messages to send,
the wakes to schedule and the session to save. falai never sends, never sleeps
and never saves: the host does.

Sections, in the order data flows through a turn:
   1. Public types ............ the dataclasses of the API
   2. Errors .................. FalaiError and its four subclasses, classify_error
   3. Time .................... durations, ISO text, clocks, fake_clock
   4. Templates and predicates  {{data.x}} rendering, JSON and callable predicates
   5. Fields .................. known and pending, coercion of model values
   6. The toolkit ............. falai(), Agent construction, validate_flow
   7. The session ............. Session, Run, the v4 blob
   8. The turn ................ load, ingest, understand, decide, run, speak, settle, return
   9. Runs and steps .......... starting runs, the floor, advance(), each step kind
  10. Model calls ............. prompts, envelopes, the understand call, speak and tool rounds
  11. Streaming ............... the envelope stream decoder
  12. JSON and migration ...... FlowSpec JSON, migrate_session, history events
  13. Testing helpers ......... ScriptedProvider, MemoryStore, MemoryScheduler

The spec lives in ``shared/spec``; comments cite it as "runtime.md §3.2".
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields as dataclass_fields, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

__version__ = "0.1.0"

__all__ = [
    # toolkit and agent
    "falai", "Agent", "Tool", "ToolCtx", "ToolResult", "ToolValidationResult", "ToolPermissionResult",
    "Action", "ActionCtx", "ActionResult", "EventDef", "Condition", "PredCtx",
    # results
    "TurnResult", "TurnStreamChunk", "OutboundMessage", "ScheduleEntry", "TokenUsage",
    "StartedRun", "EndedRun", "SkippedTrigger", "StepOutcome", "OUTCOME_MESSAGES",
    # session and stores
    "Session", "Run", "Store", "MemoryStore", "MemoryScheduler",
    # providers
    "AiProvider", "ProviderCapabilities", "GenerateRequest", "Generation", "GenerationChunk",
    "ToolCallRequest", "ScriptedProvider", "ERROR_KINDS", "classify_error",
    # JSON, validation, migration, time
    "validate_flow", "FlowValidation", "from_spec", "to_spec", "flow_spec_schema",
    "migrate_session", "history_to_events", "events_to_history", "fake_clock",
    # errors
    "FalaiError", "FlowConfigurationError", "ProviderError", "SessionConflictError",
    "InvalidSessionError",
]

log = logging.getLogger("falai")


# 1. Public types #############################################################
#
# Objects that carry code or results are dataclasses (python-api.md, Two rules).
# Declarative data (flows, steps, fields, the blob) stays plain JSON dicts.

@dataclass
class TokenUsage:
    """Token counts reported by a provider, summed over a turn's calls."""
    prompt_tokens: int
    completion_tokens: int
    cached_input_tokens: int


def add_usage(a: TokenUsage | None, b: TokenUsage | None) -> TokenUsage | None:
    """Sum two usages field by field; None means "nobody counted" (model-calls.md §7)."""
    if a is None or b is None:
        return a if b is None else b
    return TokenUsage(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens,
                      a.cached_input_tokens + b.cached_input_tokens)


@dataclass
class ProviderCapabilities:
    """What a provider implementation can do (providers.md §1.5); informational."""
    supports_tools: bool = True
    supports_native_json_schema: bool = True
    supports_streaming: bool = True
    supports_streaming_tool_calls: bool = True
    supports_prompt_caching: bool = False


@dataclass
class GenerateRequest:
    """One model call (providers.md §1.3).

    ``system`` is the stable, cacheable text; ``prompt`` is sent after the
    history as the last user message.
    """
    system: str | None
    prompt: str
    history: list[dict]
    context: Any = None
    schema: dict | None = None
    schema_name: str | None = None
    tools: list[dict] | None = None
    max_output_tokens: int | None = None
    effort: str | None = None
    cancel: threading.Event | None = None


@dataclass
class ToolCallRequest:
    """A tool call the model asked for."""
    id: str
    name: str
    arguments: dict
    thought_signature: str | None = None


@dataclass
class Generation:
    """What one model call returned (providers.md §1.4)."""
    message: str
    structured: dict | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: TokenUsage | None = None
    reasoning: str | None = None
    reasoning_details: Any = None
    metadata: dict = field(default_factory=dict)


@dataclass
class GenerationChunk:
    """One piece of a streamed model call; the last one has ``done=True``."""
    delta: str
    accumulated: str
    done: bool
    structured: dict | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: TokenUsage | None = None
    reasoning: str | None = None
    reasoning_details: Any = None
    metadata: dict = field(default_factory=dict)


@runtime_checkable
class AiProvider(Protocol):
    """The provider seam: anything with these four members can serve an agent."""
    name: str
    capabilities: ProviderCapabilities

    def generate(self, request: GenerateRequest) -> Generation: ...

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]: ...


@dataclass
class ToolValidationResult:
    valid: bool
    error: str | None = None
    corrected_input: dict | None = None


@dataclass
class ToolPermissionResult:
    allowed: bool
    reason: str | None = None


@dataclass
class ToolResult:
    """``value`` is what the model reads; ``data`` is merged into the session's fields."""
    value: Any = None
    data: dict | None = None


@dataclass
class ToolCtx:
    """What a tool handler sees (the Tool seed page, ToolCtx fields)."""
    context: Any
    data: dict
    history: list
    run: "Run | None"
    now: datetime


@dataclass
class Tool:
    """A function the model may call while phrasing a reply (the Tool seed page)."""
    id: str
    handler: Callable[[dict, ToolCtx], "ToolResult | dict | None"]
    description: str | None = None
    parameters: dict | None = None
    is_concurrency_safe: Callable[[dict], bool] | None = None
    is_read_only: Callable[[dict], bool] | None = None
    is_destructive: Callable[[dict], bool] | None = None
    max_result_size_chars: int | None = None
    validate_input: Callable[[dict, ToolCtx], "ToolValidationResult | dict"] | None = None
    check_permissions: Callable[[dict, ToolCtx], "ToolPermissionResult | dict"] | None = None


@dataclass
class PredCtx:
    """What a predicate sees (flows.md §7.5)."""
    context: Any
    data: dict
    input: Any
    run: "Run | None"
    silenced: str | None
    now: datetime


@dataclass
class ActionResult:
    """The result of an action's ``run`` (flows.md §9.5); a dict with these keys works too."""
    ok: bool | None = None
    detail: str | None = None
    spoke: bool = False
    skipped: str | None = None
    failed: str | None = None
    defer: str | None = None


@dataclass
class ActionCtx:
    """What an action's ``run`` sees (flows.md §9.4)."""
    context: Any
    data: dict
    input: Any
    run: "Run"
    key: str
    dedupe_key: str
    silenced: str | None
    now: datetime

    def set(self, patch: dict) -> None:
        """Write fields into session.data at once, as given; a None value deletes the field."""
        merge_patch(self.data, patch)


@dataclass
class Action:
    """A host action a ``do`` step names (flows.md §9)."""
    parameters: dict
    run: Callable[[dict, ActionCtx], "ActionResult | dict | None"]
    description: str | None = None


@dataclass
class EventDef:
    """A host event (flows.md §10); ``direction`` is "inbound", "outbound" or None."""
    direction: str | None = None


@dataclass
class Condition:
    """A named code predicate JSON flows may use (flows.md §7.3)."""
    check: Callable[[PredCtx, Any], bool]


@dataclass
class OutboundMessage:
    """A message for the host to send (runtime.md §12)."""
    text: str
    kind: str
    key: str
    media: dict | None = None
    after_ms: int = 0
    run_id: str | None = None
    step_id: str | None = None


@dataclass
class ScheduleEntry:
    """A wake for the host to enqueue; ``turn(wake=entry.key)`` when ``at`` comes."""
    key: str
    at: datetime
    replaces: str | None = None


@dataclass
class StartedRun:
    run_id: str
    flow_id: str
    anchor: str
    dedupe_key: str


@dataclass
class SkippedTrigger:
    """A start that was refused (runtime.md §5)."""
    flow_id: str
    anchor: str
    trigger_key: str
    code: str
    message: str


@dataclass
class StepOutcome:
    """One outcome line (runtime.md §11.1); times are ISO text as in the blob."""
    kind: str
    status: str
    at: str
    run_id: str | None = None
    flow_id: str | None = None
    step_id: str | None = None
    key: str | None = None
    code: str | None = None
    message: str | None = None
    detail: str | None = None
    next: str | None = None
    until: str | None = None
    llm_calls: int | None = None

    def to_dict(self) -> dict:
        """The line as the blob stores it: camelCase keys, absent values omitted."""
        return {camel: getattr(self, attr) for attr, camel in OUTCOME_KEYS.items()
                if getattr(self, attr) is not None}

    @classmethod
    def from_dict(cls, line: dict) -> "StepOutcome":
        return cls(**{attr: line.get(camel) for attr, camel in OUTCOME_KEYS.items()})


OUTCOME_KEYS = {"run_id": "runId", "flow_id": "flowId", "step_id": "stepId", "key": "key",
                "kind": "kind", "status": "status", "code": "code", "message": "message",
                "detail": "detail", "next": "next", "until": "until", "at": "at",
                "llm_calls": "llmCalls"}


@dataclass
class TurnStreamChunk:
    """A piece of ``turn_stream()``: text deltas, then one ``done=True`` chunk with the result."""
    delta: str = ""
    done: bool = False
    result: "TurnResult | None" = None


@dataclass
class FlowValidation:
    """What ``validate_flow`` returns when a flow can run: its warnings."""
    warnings: list[str] = field(default_factory=list)


OUTCOME_MESSAGES: dict[str, str] = {
    # runtime.md §11.4: code -> the exact English text of every outcome line.
    "no-session": "a wake arrived for a session that does not exist",
    "duplicate-input": "this input was already applied",
    "stale-wake": "no run is waiting on this wake",
    "silence-broken": "someone wrote after this silence wake was set",
    "already-claimed": "this flow already ran here",
    "cooldown": "the flow's cooldown has not passed",
    "hop-limit": "the chain reached the hop limit",
    "already-running": "a run of this flow is already live here",
    "flow-gone": "the flow is no longer registered on the agent",
    "step-loop": "the run moved through 50 steps in one turn",
    "step-gone": "the step is no longer in the flow",
    "customer-replied": "the customer wrote before the wake fired",
    "premise-changed": "the flow's while condition no longer holds",
    "silenced": "the host cannot speak right now",
    "already-known": "every field this step collects is known",
    "asked-fixed": "the step's fixed question went out word for word",
    "another-reply": "another run already answered this turn",
    "already-sent": "this message was already sent once",
    "branch": "a branch of this step fired",
    "max-asks": "the field was asked the most times allowed",
    "inline-delay": "a short wait rides on the next message",
    "awaiting-trigger": "the trigger's delay has not passed",
    "awaiting-event": "the run is waiting for an event",
    "event-arrived": "the event was reported",
    "no-event": "the event did not arrive in time",
    "replied": "the customer replied while the run waited",
    "no-reply": "the customer did not reply while the run waited",
    "action-skipped": "the action decided not to run",
    "action-failed": "the action failed",
    "action-deferred": "the action asked to run again later",
    "unknown-field": "no field by that name is declared on the agent",
    "bad-value": "the value did not fit the field's type",
    "not-in-enum": "the value is not one of the field's options",
    "provider-quota": "the provider's usage limit is spent",
    "provider-context": "the conversation outgrew the model's context window",
    "provider-auth": "the provider rejected the credentials",
    "provider-invalid": "the provider rejected the request",
    "provider-unavailable": "the model call failed or came back empty",
}


# 2. Errors ###################################################################

class FalaiError(Exception):
    """Base class of every error falai raises on purpose."""


class FlowConfigurationError(FalaiError):
    """A flow cannot run (or cannot be stored) as written. The message starts with its class name."""

    def __init__(self, message: str):
        if not message.startswith("[FlowConfigurationError]"):
            message = f"[FlowConfigurationError] {message}"
        super().__init__(message)


class InvalidSessionError(FalaiError):
    """A stored blob is not a v4 session for its id (persistence.md §2.5)."""

    def __init__(self, session_id: str, why: str):
        self.session_id = session_id
        self.why = why
        super().__init__(f'[InvalidSessionError] stored session "{session_id}" is unreadable: {why}. '
                         "Repair or delete the row; it is never replaced by a fresh conversation.")


class SessionConflictError(FalaiError):
    """A store refused a save: the stored version is not the expected one (persistence.md Part 5)."""

    def __init__(self, session_id: str, expected_version: int, actual_version: int | None):
        self.session_id = session_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        if actual_version is None and expected_version > 0:
            text = (f'[SessionConflictError] Session "{session_id}" is gone from the store: it was at '
                    f"version {expected_version} and has since been deleted or expired. Load it again; "
                    "a load that finds nothing starts a new conversation.")
        else:
            found = "none" if actual_version is None else actual_version
            text = (f'[SessionConflictError] Session "{session_id}" was modified concurrently: expected '
                    f"version {expected_version}, found {found}. Reload the session and retry the operation.")
        super().__init__(text)


ERROR_KINDS = ("aborted", "timeout", "network", "overload", "rate", "quota", "entitlement",
               "auth", "model", "context", "content", "invalid", "unknown")


class ProviderError(FalaiError):
    """A model call failed after the provider's own retries (providers.md §8).

    Match on ``kind`` (one of ``ERROR_KINDS``), never on the message.
    """

    def __init__(self, message: str = "", *, provider: str = "unknown", kind: str = "unknown",
                 status: int | None = None, code: str | None = None,
                 retry_after_ms: int | None = None, reset_at_ms: int | None = None,
                 window: str | None = None, should_retry: bool | None = None,
                 body: str | None = None):
        if kind not in ERROR_KINDS:
            raise ValueError(f'ProviderError kind "{kind}" is not one of {", ".join(ERROR_KINDS)}')
        super().__init__(message or f"{provider} {kind} error")
        self.provider = provider
        self.kind = kind
        self.status = status
        self.code = code
        self.retry_after_ms = retry_after_ms
        self.reset_at_ms = reset_at_ms
        self.window = window
        self.should_retry = should_retry
        self.body = body[:2000] if isinstance(body, str) else body

    @property
    def is_transient(self) -> bool:
        return self.kind in ("timeout", "network", "overload", "rate")

    @property
    def is_backup_eligible(self) -> bool:
        return self.kind in ("overload", "rate")

    @classmethod
    def from_exception(cls, provider: str, exc: BaseException) -> "ProviderError":
        """Wrap any exception into a classified ProviderError; a ProviderError passes through."""
        if isinstance(exc, ProviderError):
            return exc
        error = cls(str(exc) or type(exc).__name__, provider=provider, kind=classify_error(exc))
        error.__cause__ = exc
        return error

    def __repr__(self) -> str:
        return f"ProviderError({str(self)!r}, provider={self.provider!r}, kind={self.kind!r}, status={self.status!r})"


# providers.md §8.3: the text patterns of the classification, first match wins.
_CONTEXT = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|prompt is too long|"
    r"input is too long|too many (input )?tokens|reduce the length of the (messages|prompt|input)|"
    r"exceeds? the (model'?s? )?maximum (input |prompt |context )?(tokens?|length|context)", re.I)
_ENTITLEMENT = re.compile(
    r"plan does(n't| not) (include|support)|not included (in|with) your .{0,40}plan|"
    r"upgrade to .{0,40}(or higher|plan)|no api access", re.I)
_QUOTA = re.compile(
    r"insufficient[_ ]quota|exceeded your current quota|insufficient (balance|credits?)|"
    r"credit balance is too low|(no|out of) credits|usage limits? (reached|exceeded|hit)|"
    r"reached your (usage|weekly|monthly|daily) limit|(weekly|monthly|daily|plan) usage limit|"
    r"purchase extra usage|upgrade your plan|quota.{0,80}(exhausted|exceeded|will be refreshed)|"
    r"balance (is )?(too low|not enough|insufficient)|余额不足|欠费|额度不足|额度已用完", re.I)
_MODEL = re.compile(r"models?/?[^.{\n]{0,40}?(not found|does not exist|unknown)|no model named|"
                    r"unsupported model", re.I)
_AUTH = re.compile(
    r"invalid (x-api-key|api[ _-]?key|token|credentials?)|api[ _-]?key (is )?(not valid|invalid|incorrect)|"
    r"unauthorized|UNAUTHENTICATED|PERMISSION_DENIED|authentication[_ ](failed|invalid|error)|"
    r"account (disabled|suspended|deactivated|banned)", re.I)
_CONTENT = re.compile(r"content[_ ]filter|content policy|safety|PROHIBITED_CONTENT|blocked|refusal", re.I)
_RATE = re.compile(r"rate[_ -]?limit|too many requests|RESOURCE_EXHAUSTED", re.I)
_OVERLOAD = re.compile(r"overloaded|\bunavailable\b|internal error|\bcapacity\b|\"code\":\s*5\d\d", re.I)
_OVERLOAD_EXACT = re.compile(r"UNAVAILABLE|\bINTERNAL\b")
_NETWORK = re.compile(
    r"failed to fetch|fetch failed|network error|connection (error|closed|refused|reset)|socket hang up|"
    r"premature close|stream (ended|closed) unexpectedly|ECONNRESET|ECONNREFUSED|ECONNABORTED|ETIMEDOUT|"
    r"EPIPE|ENETUNREACH|ENETDOWN|ENOTFOUND|EHOSTUNREACH|EAI_AGAIN", re.I)
_NETWORK_CLASSES = {("requests", "ConnectionError"), ("requests", "ChunkedEncodingError"),
                    ("urllib3", "ProtocolError"), ("urllib3", "NewConnectionError"),
                    ("http", "IncompleteRead"), ("http", "RemoteDisconnected")}


def _exception_chain(exc: BaseException | None, depth: int = 5) -> list[BaseException]:
    chain: list[BaseException] = []
    while exc is not None and len(chain) < depth and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _class_marks(exc: BaseException) -> set[tuple[str, str]]:
    """(top-level package, class name) of every class exc is an instance of, without importing them."""
    return {(klass.__module__.split(".")[0], klass.__name__) for klass in type(exc).__mro__}


def classify_error(exc: BaseException | None = None, status: int | None = None, body: str | None = None) -> str:
    """Give a failed model call one of ``ERROR_KINDS`` (providers.md §8.3)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    chain = _exception_chain(exc)
    if any(type(e).__name__ in ("CancelledError", "AbortError") for e in chain):
        return "aborted"
    text = " ".join(part for part in [str(exc) if exc is not None else "", body or ""] if part)
    if status is None and chain:
        marks = set().union(*(_class_marks(e) for e in chain))
        if any(pkg == "requests" and name in ("Timeout", "ReadTimeout", "ConnectTimeout") for pkg, name in marks):
            return "timeout"
        chain_text = " ".join(str(e) for e in chain)
        if (marks & _NETWORK_CLASSES or any(isinstance(e, ConnectionError) for e in chain)
                or _NETWORK.search(chain_text)):
            return "network"
    if status == 408 or any(type(e).__name__ == "TimeoutError" for e in chain):
        return "timeout"
    if status is None or status < 500:
        if _CONTEXT.search(text):
            return "context"
        if _ENTITLEMENT.search(text):
            return "entitlement"
        if _QUOTA.search(text):
            return "quota"
    if _MODEL.search(text):
        return "model"
    if status in (401, 403) or _AUTH.search(text):
        return "auth"
    if status == 402:
        return "quota"
    if status == 404:
        return "model"
    if status == 429:
        return "rate"
    if _CONTENT.search(text):
        return "content"
    if status is not None and (status in (409, 425, 529) or status >= 500):
        return "overload"
    if _RATE.search(text):
        return "rate"
    if _OVERLOAD.search(text) or _OVERLOAD_EXACT.search(text):
        return "overload"
    if re.search(r"timed out|timeout", text, re.I):
        return "timeout"
    if status is not None and status >= 400:
        return "invalid"
    return "unknown"


# 3. Time #####################################################################
#
# The blob's one time format is ISO text in UTC with milliseconds and a Z
# (persistence.md §2.4); keys embed epoch milliseconds computed with integers
# (runtime.md §0).

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DURATION = re.compile(r"[0-9]+(?:\.[0-9]+)?[smhd]")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def is_duration(value: Any) -> bool:
    """True for a Duration string such as "30s", "5m", "1.5h", "3d" (flows.md §13)."""
    return isinstance(value, str) and DURATION.fullmatch(value) is not None


def duration_ms(value: str) -> int:
    """Milliseconds of a Duration, rounded half up; ValueError names a bad one."""
    if not is_duration(value):
        raise ValueError(f'"{value}" is not a duration. Write a number and a unit: "30s", "5m", "24h" or "3d".')
    amount = Decimal(value[:-1]) * _UNIT_MS[value[-1]]
    return int(amount + Decimal("0.5"))


def iso(at: datetime) -> str:
    """An aware datetime as blob text; a naive one is read as UTC; truncated to ms."""
    at = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> datetime:
    """ISO text (Z, a numeric offset, or no zone read as UTC) as an aware UTC datetime."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not ISO date-time text such as \"2026-09-20T10:00:00.000Z\"")
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f'"{text}" is not ISO date-time text such as "2026-09-20T10:00:00.000Z"') from None
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def to_ms(at: datetime) -> int:
    """Epoch milliseconds of a datetime, by integer arithmetic."""
    at = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at
    return (at - EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def truncate_ms(at: datetime) -> datetime:
    """The instant at whole milliseconds, aware UTC (runtime.md §0, now)."""
    return from_ms(to_ms(at if at.tzinfo else at.replace(tzinfo=timezone.utc)))


def system_clock() -> datetime:
    """The default clock: the system's time, aware UTC."""
    return datetime.now(timezone.utc)


class FakeClock:
    """A clock that stands still until told (runtime.md §15). Call it for the held instant."""

    def __init__(self, at: str):
        self._now = truncate_ms(parse_iso(at))

    def __call__(self) -> datetime:
        return self._now

    def now(self) -> datetime:
        return self._now

    def advance(self, by: "str | int | float") -> datetime:
        """Move forward by a Duration ("2d") or a number of seconds; returns the new instant."""
        if isinstance(by, str):
            self._now = self._now + timedelta(milliseconds=duration_ms(by))
        elif isinstance(by, (int, float)) and not isinstance(by, bool):
            self._now = self._now + timedelta(seconds=by)
        else:
            raise TypeError(f"advance() takes a duration such as \"1d\" or a number of seconds, not {by!r}")
        return self._now

    def set(self, at: str) -> datetime:
        """Jump to an ISO instant; returns it."""
        self._now = truncate_ms(parse_iso(at))
        return self._now

    def __repr__(self) -> str:
        return f"fake_clock({iso(self._now)!r})"


def fake_clock(at: str) -> FakeClock:
    """A clock for tests: ``clock = fake_clock("2026-09-20T10:00:00.000Z"); clock.advance("1d")``."""
    return FakeClock(at)


# 4. Templates and predicates #################################################

def compact_json(value: Any) -> str:
    """JSON with no spaces, non-ASCII kept (the form every payload the model reads uses)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: getattr(value, f.name) for f in dataclass_fields(value)}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def js_kind(value: Any) -> str:
    """The JSON kind of a value: boolean, number, string or other."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "other"


JS_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
JS_PREFIXED = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")


def js_number(text: str) -> "int | float | None":
    """JavaScript's Number(string) with the first "," read as "."; None when it does not parse."""
    text = text.strip().replace(",", ".", 1)
    if JS_PREFIXED.fullmatch(text):
        return int(text, 0)
    if JS_DECIMAL.fullmatch(text):
        return float(text)
    return None


def js_number_text(x: "int | float") -> str:
    """JavaScript's Number.prototype.toString() (model-calls.md §4): 3.0 -> "3", 1e-7 -> "1e-7"."""
    if isinstance(x, int) and abs(x) < 10 ** 21:
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    raw = Decimal(repr(abs(x))).as_tuple()
    full = "".join(map(str, raw.digits))
    digits = full.rstrip("0")
    k = len(digits)
    n = raw.exponent + len(full)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e > 0 else "e-") + str(abs(e))
    return ("-" if x < 0 else "") + text


def value_text(value: Any) -> str:
    """How a value prints in a template: JS numbers, true/false, lists joined by ", " (flows.md §8.2)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number_text(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(item) for item in value)
    return compact_json(value)


PLACEHOLDER = re.compile(r"\{\{\s*([^\s}]+)\s*\}\}")
_MISSING = object()
_BLANK = object()


@dataclass
class Scope:
    """The roots a template reads: data, context and input (None = not provided)."""
    data: dict
    context: Any = None
    input: Any = None


def _lookup(path: str, scope: Scope) -> Any:
    """The value at a dotted path, or _MISSING (kept verbatim) or _BLANK (rendered as "")."""
    root, *keys = path.split(".")
    if root not in ("data", "context", "input"):
        return _MISSING
    value = getattr(scope, root)
    if value is None:
        return _MISSING  # a root the host did not provide counts as missing (model-calls.md §2.4)
    for key in keys:
        if value is None:
            return _BLANK
        if isinstance(value, dict):
            if key not in value:
                return _MISSING
            value = value[key]
        elif isinstance(value, (list, tuple)):
            if not key.isdigit() or int(key) >= len(value):
                return _MISSING
            value = value[int(key)]
        elif isinstance(value, (str, int, float, bool)) or not hasattr(value, key):
            return _MISSING
        else:
            value = getattr(value, key)
    return _MISSING if value is None else value


def _tidy(text: str) -> str:
    text = re.sub(r"(?<=\S)[ \t]{2,}", " ", text)
    text = re.sub(r"[ \t]+(?=[,.;:!?…])", "", text)
    return re.sub(r"[ \t]+$", "", text, flags=re.M)


def render(template: str, scope: Scope) -> str:
    """Fill {{data.x}}, {{context.x}}, {{input.x}} placeholders (flows.md §8).

    An unknown placeholder stays verbatim; a blank one becomes "" and tidies the text.
    """
    if "{{" not in template:
        return template
    blank = False

    def fill(match: re.Match) -> str:
        nonlocal blank
        value = _lookup(match.group(1), scope)
        if value is _MISSING:
            return match.group(0)
        text = "" if value is _BLANK else value_text(value)
        if text == "":
            blank = True
        return text

    out = PLACEHOLDER.sub(fill, template)
    return _tidy(out) if blank else out


def render_deep(value: Any, scope: Scope) -> Any:
    """Render every string inside lists and dicts (keys and non-strings untouched)."""
    if isinstance(value, str):
        return render(value, scope)
    if isinstance(value, dict):
        return {key: render_deep(item, scope) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_deep(item, scope) for item in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Strict JSON equality (flows.md §7.4): True != 1, 1 == 1.0, lists and dicts deeply."""
    kind_a, kind_b = js_kind(a), js_kind(b)
    if kind_a != kind_b:
        return False
    if kind_a != "other":
        return a == b
    if a is None or b is None:
        return a is b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def judge(predicate: Any, ctx: PredCtx, conditions: dict[str, Condition]) -> bool:
    """Whether a predicate holds (flows.md §7): a callable, or a JSON condition whose every key holds."""
    if predicate is None:
        return True
    if callable(predicate):
        return bool(predicate(ctx))
    for name, arg in predicate.items():
        if arg is None:
            continue
        if name == "equals":
            if not all(json_equal(ctx.data.get(slug), value) for slug, value in arg.items()):
                return False
        elif name == "known":
            if not all(is_known(ctx.data.get(slug)) for slug in arg):
                return False
        elif name == "silenced":
            if bool(arg) != (ctx.silenced is not None):
                return False
        elif name in conditions:
            if not conditions[name].check(ctx, arg):
                return False
        else:
            raise FlowConfigurationError(
                f'unknown condition "{name}" in a predicate at run time. '
                "Register it in conditions or use equals, known, silenced.")
    return True


def split_phrases(phrases: list[str]) -> tuple[list[str], list[str]]:
    """Split a message/mention list into (plain phrases, exclusions) (flows.md §4.3)."""
    plain: list[str] = []
    excluded: list[str] = []
    for phrase in phrases:
        text = phrase.strip()
        if not text:
            continue
        if text.startswith("!"):
            rest = text[1:].strip()
            if rest:
                excluded.append(rest)
        else:
            plain.append(text)
    return plain, excluded


# 5. Fields ###################################################################

def is_known(value: Any) -> bool:
    """A field value is known unless it is missing, None or "" (flows.md §2.2)."""
    return value is not None and value != ""


def extract_mode(definition: dict) -> str:
    """A field's effective extract mode: "asked" for booleans by default, else "anywhere"."""
    return definition.get("extract") or ("asked" if definition.get("type") == "boolean" else "anywhere")


def merge_patch(data: dict, patch: dict) -> None:
    """Merge a tool or action patch into session data as given; a None value deletes the key."""
    for slug, value in patch.items():
        if value is None:
            data.pop(slug, None)
        else:
            data[slug] = value


TRUE_WORDS = ("true", "sim", "yes", "1")
FALSE_WORDS = ("false", "não", "nao", "no", "0")


def coerce_field(definition: dict, raw: Any) -> tuple[str, Any]:
    """Check a model-given value against its field (flows.md §2.4, model-calls.md §4).

    Returns ("ok", value) or ("bad-value" | "not-in-enum", None).
    """
    kind = definition.get("type")
    value = None
    try:
        if kind == "string":
            if isinstance(raw, str):
                value = raw
            elif isinstance(raw, bool):
                value = "true" if raw else "false"
            elif isinstance(raw, (int, float)):
                value = js_number_text(raw)
        elif kind in ("number", "integer"):
            number = None
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                number = raw
            elif isinstance(raw, str):
                number = js_number(raw)
            if number is not None and math.isfinite(number):
                value = int(number) if kind == "integer" or float(number).is_integer() else number
        elif kind == "boolean":
            if isinstance(raw, bool):
                value = raw
            elif isinstance(raw, str):
                word = raw.strip().lower()
                value = True if word in TRUE_WORDS else False if word in FALSE_WORDS else None
    except OverflowError:
        value = None
    if value is None:
        return "bad-value", None
    if "enum" in definition and not any(js_kind(e) == js_kind(value) and e == value
                                        for e in definition["enum"]):
        return "not-in-enum", None
    return "ok", value


def read_boolean(raw: Any) -> bool | None:
    """The boolean coercion of model-calls.md §4, or None when raw is not one."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None
    return None


def nullable_property(definition: dict) -> dict:
    """One property of a nullable envelope (model-calls.md §2.7)."""
    if definition.get("type") == "array":
        items = definition.get("items") or {"type": "string"}
        item = {"type": items.get("type", "string")}
        for key in ("description", "enum"):
            if key in items:
                item[key] = copy.deepcopy(items[key])
        prop: dict = {"type": ["array", "null"]}
        if definition.get("description"):
            prop["description"] = definition["description"]
        prop["items"] = item
        return prop
    prop = {"type": [definition.get("type", "string"), "null"]}
    if definition.get("description"):
        prop["description"] = definition["description"]
    if "enum" in definition:
        prop["enum"] = [*definition["enum"], None]
    return prop


def nullable_envelope(definitions: dict[str, dict]) -> dict:
    """A closed object schema whose every property is required and nullable (model-calls.md §2.7)."""
    return {"type": "object",
            "properties": {name: nullable_property(d) for name, d in definitions.items()},
            "required": list(definitions),
            "additionalProperties": False}


# 6. The toolkit ##############################################################
#
# falai() and f.agent() build an Agent; construction validates everything
# (flows.md §14, persistence.md §1.10-§1.11) so a flow that cannot run fails
# here, never in the middle of a conversation.

class _Kit:
    """The methods the root and the bound toolkit share."""

    _field_defs: dict = {}

    def flow(self, flow: dict) -> dict:
        """Return the flow unchanged; it is validated when the agent is built."""
        return flow

    def from_spec(self, spec: dict) -> dict:
        """A stored FlowSpec as a flow dict (persistence.md §1.7)."""
        return from_spec(spec)

    def action(self, *, parameters: dict, run: Callable, description: str | None = None) -> Action:
        """A host action a ``do`` step names (flows.md §9)."""
        return Action(parameters=parameters, run=run, description=description)

    def event(self, *, direction: str | None = None) -> EventDef:
        """A host event (flows.md §10)."""
        if direction not in (None, "inbound", "outbound"):
            raise ValueError(f'event direction must be "inbound", "outbound" or None, not {direction!r}')
        return EventDef(direction=direction)

    def condition(self, check: Callable[[PredCtx, Any], bool]) -> Condition:
        """A named code predicate JSON flows may use (flows.md §7.3)."""
        return Condition(check=check)

    def agent(self, **options: Any) -> "Agent":
        """Build an Agent with this toolkit's fields."""
        if "fields" in options:
            raise TypeError("f.agent() takes its fields from the toolkit; pass them to falai().fields(...)")
        return Agent(fields=self._field_defs, **options)


class Toolkit(_Kit):
    """The bound toolkit: ``fields`` is the dict of field definitions that was passed."""

    def __init__(self, fields: dict):
        self.fields = fields
        self._field_defs = fields


class RootToolkit(_Kit):
    """What ``falai()`` returns: the toolkit with no fields bound yet."""

    def fields(self, defs: dict) -> Toolkit:
        """Bind the agent's field definitions (flows.md §2)."""
        if not isinstance(defs, dict):
            raise TypeError(f"fields() takes a dict of field definitions, not {type(defs).__name__}")
        return Toolkit(defs)


def falai() -> RootToolkit:
    """The root toolkit: ``f = falai().fields({...}); agent = f.agent(name=..., provider=..., flows=[...])``."""
    return RootToolkit()


class Agent:
    """Immutable configuration plus ``turn()``; one instance serves every session.

    ``turn()`` returns the messages to send, the wakes to schedule and the
    session to save. The agent never sends, never sleeps and never saves.
    """

    def __init__(self, *, name: str, provider: Any, fields: dict | None = None,
                 flows: list | None = None, actions: dict | None = None, events: dict | None = None,
                 conditions: dict | None = None, tools: list | None = None,
                 instructions: list | None = None, knowledge_base: dict | None = None,
                 goal: str | None = None, persona: str | None = None, idle: Any = None,
                 clock: Callable[[], datetime] | None = None,
                 business_hours: Callable[[datetime, Any], datetime] | None = None,
                 max_tool_loops: int = 5, compaction: dict | None = None, debug: bool = False):
        self.name = name
        self.provider = provider
        self.fields = fields or {}
        self.flows = list(flows or [])
        self.actions = dict(actions or {})
        self.events = dict(events or {})
        self.conditions = dict(conditions or {})
        self.tools = list(tools or [])
        self.instructions = list(instructions or [])
        self.knowledge_base = knowledge_base
        self.goal = goal
        self.persona = persona
        self.idle = {"prompt": ""} if idle is None else idle
        self.clock = clock or system_clock
        self.business_hours = business_hours
        self.max_tool_loops = max_tool_loops
        self.compaction = compaction
        if debug:
            log.setLevel(logging.DEBUG)
        self.flow_by_id = {}
        for flow in self.flows:
            if isinstance(flow, dict) and isinstance(flow.get("id"), str):
                self.flow_by_id.setdefault(flow["id"], flow)
        for warning in check_agent(self):
            log.warning("[Agent] %s", warning)

    def turn(self, **kwargs: Any) -> "TurnResult":
        """Run one turn (runtime.md §3); all arguments are keywords.

        ``agent.turn(session_id="s1", session=saved, message="oi", id="m1")``
        """
        stream = run_turn(self, kwargs, streaming=False)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                return done.value

    def turn_stream(self, **kwargs: Any) -> Iterator[TurnStreamChunk]:
        """Run one turn, yielding text deltas while the reply is phrased, then the result (runtime.md §16)."""
        stream = run_turn(self, kwargs, streaming=True)
        while True:
            try:
                delta = next(stream)
            except StopIteration as done:
                yield TurnStreamChunk(done=True, result=done.value)
                return
            yield TurnStreamChunk(delta=delta)

    def pending_wakes(self, *, session: Any, context: Any = None, anchors: dict | None = None,
                      claims: dict | None = None) -> list[ScheduleEntry]:
        """The wakes a saved session is waiting on (runtime.md §14); changes nothing."""
        return pending_wakes(self, session, context, anchors, claims)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, flows={[f.get('id') for f in self.flows if isinstance(f, dict)]!r})"


# >>> validation (helper region: validate_flow, check_agent) >>>>>>>>>>>>>>>>>>
#
# validate_flow reads a flow in three phases (persistence.md §1.10): strip the
# Nones, check the JSON's shape, then check every name and the step graph.
# The first problem raises FlowConfigurationError with the message
# "<where>: <what>. <fix>"; what runs but probably not as meant is a warning.

RESERVED_CONDITIONS = ("equals", "known", "silenced")
TRIGGER_KINDS = ("message", "mention", "silence", "event")
INSTRUCTION_KINDS = ("must", "never", "should")
_KEY_ABSENT = object()   # "the key is not there", which show() prints as "missing"


def _flow_error(where: str, what: str, fix: str) -> None:
    raise FlowConfigurationError(f"{where}: {what}. {fix}")


def strip_nones(value: Any) -> Any:
    """A copy with every None-valued dict key dropped, at any depth (persistence.md §1.7 step 1).

    Lists keep their length (a None inside one stays, so the shape check can
    report it); callables and other leaves are kept as they are.
    """
    if isinstance(value, dict):
        return {key: strip_nones(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [strip_nones(item) for item in value]
    if isinstance(value, tuple):
        return tuple(strip_nones(item) for item in value)
    return value


def json_literal(value: Any) -> str:
    """A value as JavaScript's JSON.stringify writes it: 429.0 -> 429, non-ASCII kept."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{json_literal(v)}"
                              for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def show(value: Any) -> str:
    """How a message names a value (persistence.md §1.10, *show*).

    A string is its JSON literal, cut to 37 characters plus "..." past 40
    (characters are code points; JavaScript counts UTF-16 units).
    """
    if value is _KEY_ABSENT:
        return "missing"
    if value is None or isinstance(value, (bool, int, float)):
        return json_literal(value)
    if isinstance(value, str):
        text = json_literal(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a function" if callable(value) else "an object"


def type_name(value: Any) -> str:
    """The JSON type a message names (persistence.md §1.10, *type name*)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    return "function" if callable(value) else "object"


def is_whole(value: Any) -> bool:
    """An int, or a float with no fraction (3.0); never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())


def article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def expected_text(definition: dict) -> str:
    """What a definition asks for: "a string", "an integer", "a list of strings" (*expected*)."""
    if definition.get("type") == "array":
        items = _as_definition(definition.get("items"))
        return f"a list of {items.get('type') or 'value'}s"
    kind = str(definition.get("type") or "value")
    return f"{article(kind)} {kind}"


def _quoted_kinds(kinds: list[str]) -> str:
    """"a", "a" and "b", "a", "b" and "c"."""
    quoted = [f'"{kind}"' for kind in kinds]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _listed_values(values: Any) -> str:
    return ", ".join(json_literal(value) for value in values)


def _as_definition(value: Any) -> dict:
    """A field or parameter definition, {} when the host gave something else."""
    return value if isinstance(value, dict) else {}


def _has_key(mapping: Any, key: Any) -> bool:
    """``key in mapping`` that is False for an unhashable key instead of raising."""
    try:
        return key in mapping
    except TypeError:
        return False


# Matching (persistence.md §1.10, "Matching"): values are never coerced. A
# definition whose type is none of the five known ones puts no type rule on the
# value (inferred: parameter definitions are host code and otherwise unchecked).

def _type_fits(definition: dict, value: Any) -> bool:
    kind = definition.get("type")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "number":
        return number and (isinstance(value, int) or math.isfinite(value))
    if kind == "integer":
        return number and is_whole(value)
    return True


def _in_enum(definition: dict, value: Any) -> bool:
    members = definition.get("enum")
    if members is None:
        return True
    if isinstance(value, str) and "{{" in value:
        return True   # a template's value is only known at run time
    if isinstance(value, bool):
        return False
    return any(json_equal(member, value) for member in members)


def _matches_scalar(definition: dict, value: Any) -> bool:
    return _type_fits(definition, value) and _in_enum(definition, value)


def matches_definition(definition: dict, value: Any) -> bool:
    """Whether a value fits a field or parameter definition as written."""
    if definition.get("type") == "array":
        items = _as_definition(definition.get("items"))
        return isinstance(value, (list, tuple)) and all(_matches_scalar(items, item) for item in value)
    return _matches_scalar(definition, value)


def _off_list(definition: dict, value: Any) -> tuple[str, str] | None:
    """The mismatch rule: (listed values, the offending item's literal) when an item of the right
    type is not listed, None when the type itself is wrong."""
    is_array = definition.get("type") == "array"
    scalar = _as_definition(definition.get("items")) if is_array else definition
    if scalar.get("enum") is not None:
        candidates = value if is_array and isinstance(value, (list, tuple)) else [value]
        for item in candidates:
            if _type_fits(scalar, item) and not _in_enum(scalar, item):
                return _listed_values(scalar["enum"]), json_literal(item)
    return None


# Phase 1: shape --------------------------------------------------------------

def _list_check(value: Any, label: str, where: str, objects: bool = False) -> None:
    """A list (or tuple) whose entries are all strings, or all dicts; absent passes."""
    if value is _KEY_ABSENT:
        return
    if not isinstance(value, (list, tuple)):
        fix = (f"Write {label}: {json_literal([value])}." if isinstance(value, str) and not objects
               else f"Write {label} as a list.")
        _flow_error(where, f"{label} is {show(value)}, not a list", fix)
    for i, item in enumerate(value):
        if objects and not isinstance(item, dict):
            _flow_error(where, f"{label}[{i}] is {show(item)}, not an object",
                        f"Write each entry of {label} as an object.")
        if not objects and not isinstance(item, str):
            _flow_error(where, f"{label}[{i}] is {show(item)}, not text", f"Write each entry of {label} as a string.")


def _condition_check(value: Any, label: str, where: str) -> None:
    if value is _KEY_ABSENT or callable(value) or isinstance(value, dict):
        return
    _flow_error(where, f"{label} is {show(value)}, not a condition",
                'Write it as an object, e.g. { known: ["nome"] }.')


def _target_check(value: Any, label: str, where: str) -> None:
    if value is _KEY_ABSENT or isinstance(value, str):
        return
    if isinstance(value, dict) and (isinstance(value.get("step"), str) or isinstance(value.get("flow"), str)):
        _list_check(value.get("clear", _KEY_ABSENT), f"{label}.clear", where)
        return
    _flow_error(where, f"{label} is {show(value)}, not a step id or a target",
                'Write a step id, "end", { step: "id" } or { flow: "id" }.')


def _instructions_check(owner: dict, where: str) -> None:
    instructions = owner.get("instructions", _KEY_ABSENT)
    _list_check(instructions, "instructions", where, objects=True)
    if instructions is _KEY_ABSENT:
        return
    for i, instruction in enumerate(instructions):
        label = f"instructions[{i}]"
        if "kind" in instruction and instruction["kind"] not in INSTRUCTION_KINDS:
            what = f'{label}.kind is {show(instruction["kind"])}, which is not one of "must", "never", "should"'
            _flow_error(where, what, "Use one of them.")
        if not isinstance(instruction.get("prompt"), str):
            _flow_error(where, f"{label}.prompt is {show(instruction.get('prompt', _KEY_ABSENT))}, not text",
                        "Write the rule as a sentence.")
        when = instruction.get("when", _KEY_ABSENT)
        if not isinstance(when, str):
            _list_check(when, f"{label}.when", where)
        _condition_check(instruction.get("if", _KEY_ABSENT), f"{label}.if", where)


def body_kinds(step: dict) -> list[str]:
    """The kinds a step's body carries, in the order of persistence.md §1.6."""
    kinds = []
    if step.get("collect") is not None:
        kinds.append("collect")
    elif step.get("prompt") is not None:
        kinds.append("prompt")
    for key in ("say", "do"):
        if step.get(key) is not None:
            kinds.append(key)
    if step.get("wait") is not None:
        kinds.append("wait" if isinstance(step["wait"], str) else "waitEvent")
    if step.get("if") is not None:
        kinds.append("if")
    return kinds


def _step_shape(step: dict, where: str) -> None:
    """T1-T13 of persistence.md §1.10, in order."""
    kinds = body_kinds(step)
    if not kinds:
        _flow_error(where, "does nothing",
                    "A step talks (`prompt` / `collect`), says (`say`), acts (`do`), waits (`wait`) or forks (`if`).")
    if len(kinds) > 1:
        _flow_error(where, f"mixes {_quoted_kinds(kinds)}", "A step does one thing. Split it into one step per kind.")
    if "kind" in step and step["kind"] != kinds[0]:
        _flow_error(where, f'has kind {show(step["kind"])}, but its body is a "{kinds[0]}" step',
                    f'Set kind to "{kinds[0]}", or change the body to match.')
    for key in ("say", "prompt", "question"):
        if key in step and not isinstance(step[key], str):
            _flow_error(where, f"{key} is {show(step[key])}, not text", f"Write {key} as a string.")
    _list_check(step.get("collect", _KEY_ABSENT), "collect", where)
    _list_check(step.get("tools", _KEY_ABSENT), "tools", where)
    if "ask" in step and not isinstance(step["ask"], dict):
        _flow_error(where, f"ask is {show(step['ask'])}, not an object", 'Write ask as { field: "how to ask" }.')
    if "with" in step and not isinstance(step["with"], dict):
        _flow_error(where, f"with is {show(step['with'])}, not an object", "Write with as { parameter: value }.")
    if "maxAsks" in step:
        asks = step["maxAsks"]
        if not is_whole(asks) or asks < 1:
            _flow_error(where, f"maxAsks is {show(asks)}, not a whole number of 1 or more", "Write a number like 3.")
    wait = step.get("wait", _KEY_ABSENT)
    if wait is not _KEY_ABSENT and not isinstance(wait, str) and not (
            isinstance(wait, dict) and isinstance(wait.get("event"), str)):
        _flow_error(where, "wait has no event",
                    'Write wait: { event: "name" } to wait for an event, or a duration like "1h".')
    _condition_check(step.get("if", _KEY_ABSENT), "if", where)
    for key in ("then", "else", "onFail"):
        _target_check(step.get(key, _KEY_ABSENT), key, where)
    _instructions_check(step, where)
    branches = step.get("branches", _KEY_ABSENT)
    _list_check(branches, "branches", where, objects=True)
    for j, branch in enumerate([] if branches is _KEY_ABSENT else branches):
        if "when" in branch and not isinstance(branch["when"], str):
            _flow_error(where, f"branches[{j}].when is {show(branch['when'])}, not text",
                        "Write the condition as one sentence.")
        _condition_check(branch.get("if", _KEY_ABSENT), f"branches[{j}].if", where)
        _target_check(branch.get("then", _KEY_ABSENT), f"branches[{j}].then", where)


def check_flow_shape(flow: Any) -> None:
    """Phase 1 (persistence.md §1.10, S1-S9): every value is the right kind of JSON.

    Reads a stripped flow; ``from_spec`` runs this too.
    """
    if not isinstance(flow, dict):
        _flow_error("flow", f"is {show(flow)}, not an object", "Pass the flow itself: { id, name, steps }.")
    where = f'flow "{flow["id"]}"' if isinstance(flow.get("id"), str) else "flow"
    if not isinstance(flow.get("steps"), (list, tuple)):
        _flow_error(where, "has no steps list", "Write steps as a list, even an empty one.")
    for key in ("description", "anchor"):
        if key in flow and not isinstance(flow[key], str):
            _flow_error(where, f"{key} is {show(flow[key])}, not text", f"Write {key} as a string.")
    for key in ("collect", "clearOnStart", "tools"):
        _list_check(flow.get(key, _KEY_ABSENT), key, where)
    if "onEnd" in flow and flow["onEnd"] not in ("end", "stay", "reset"):
        _flow_error(where, f'onEnd is {show(flow["onEnd"])}, which is not one of "end", "stay", "reset"',
                    "Use one of them.")
    _condition_check(flow.get("while", _KEY_ABSENT), "while", where)
    _instructions_check(flow, where)
    _list_check(flow.get("on", _KEY_ABSENT), "on", where, objects=True)
    for n, trigger in enumerate(flow.get("on", ()), 1):
        trigger_where = f"{where}, trigger #{n}"
        _list_check(trigger.get("message", _KEY_ABSENT), "message", trigger_where)
        _list_check(trigger.get("mention", _KEY_ABSENT), "mention", trigger_where)
        _condition_check(trigger.get("if", _KEY_ABSENT), "if", trigger_where)
        repeat = trigger.get("repeat", _KEY_ABSENT)
        if repeat is not _KEY_ABSENT and repeat not in ("once", "always") and not (
                isinstance(repeat, dict) and isinstance(repeat.get("cooldown"), str)):
            _flow_error(trigger_where, f"repeat is {show(repeat)}", 'Use "once", "always" or { cooldown: "24h" }.')
    _list_check(flow["steps"], "steps", where, objects=True)
    for n, step in enumerate(flow["steps"], 1):
        step_id = step.get("id")
        _step_shape(step, f'{where}, step "{step_id}"' if isinstance(step_id, str) else f"{where}, step #{n}")


# Phase 2: names and the step graph ---------------------------------------------

@dataclass
class _FlowNames:
    """What a flow's names are checked against: the registries of persistence.md §1.10."""
    fields: dict
    actions: dict
    events: dict
    conditions: dict
    tool_ids: list
    flow_ids: list | None     # None: targets naming a flow are not checked

    @classmethod
    def of(cls, registries: dict | None) -> "_FlowNames":
        registries = registries or {}
        tools = registries.get("tools") or []
        tool_ids = [tool if isinstance(tool, str) else tool.get("id") if isinstance(tool, dict)
                    else getattr(tool, "id", None) for tool in tools]
        flows = registries.get("flows")
        flow_ids = None
        if flows is not None:
            flow_ids = []
            for flow in flows:
                if isinstance(flow, dict) and isinstance(flow.get("id"), str) and flow["id"] not in flow_ids:
                    flow_ids.append(flow.get("id"))
        return cls(fields=registries.get("fields") or {}, actions=registries.get("actions") or {},
                   events=registries.get("events") or {}, conditions=registries.get("conditions") or {},
                   tool_ids=tool_ids, flow_ids=flow_ids)


def _field_check(slug: Any, names: _FlowNames, where: str, label: str) -> None:
    if not _has_key(names.fields, slug):
        _flow_error(where, f'unknown field "{slug}" in {label}', "Add it to the agent's fields or fix the slug.")


def _tool_check(tools: Any, names: _FlowNames, where: str) -> None:
    for tool in tools:
        if tool not in names.tool_ids:
            _flow_error(where, f'unknown tool "{tool}"', "Register it in the agent's tools or fix the name.")


def _duration_check(value: Any, label: str, where: str) -> None:
    if value is not _KEY_ABSENT and not is_duration(value):
        _flow_error(where, f'{label} has duration "{value}", which does not parse',
                    'Write a number and a unit: "30s", "5m", "24h" or "3d".')


def condition_names_check(condition: Any, label: str, where: str, names: _FlowNames) -> None:
    """The names inside one JSON predicate (persistence.md §1.10; flows.md §14.3).

    Absent and callables pass. Anything else that is not a dict fails as in the
    shape check (inferred: agent and idle instructions reach this without one).
    """
    if condition is _KEY_ABSENT or callable(condition):
        return
    _condition_check(condition, label, where)
    for key, arg in condition.items():
        if key == "equals":
            if not isinstance(arg, dict):
                _flow_error(where, f"{label}.equals is not an object", "Write equals as { field: value }.")
            for slug, value in arg.items():
                _field_check(slug, names, where, f"{label}.equals")
                definition = _as_definition(names.fields[slug])
                if matches_definition(definition, value):
                    continue
                off_list = _off_list(definition, value)
                if off_list:
                    listed, got = off_list
                    _flow_error(where, f'{label}.equals gives "{slug}" {got}, which is not one of {listed}',
                                "Use one of the listed values.")
                kind, expected = type_name(value), expected_text(definition)
                what = f'{label}.equals gives "{slug}" {article(kind)} {kind}, but the field is {expected}'
                _flow_error(where, what, f"Write {expected}; values are not coerced.")
        elif key == "known":
            if not isinstance(arg, (list, tuple)):
                _flow_error(where, f"{label}.known is not a list", "Write known as [field, ...].")
            for slug in arg:
                _field_check(str(slug), names, where, f"{label}.known")
        elif key == "silenced":
            if not isinstance(arg, bool):
                _flow_error(where, f"{label}.silenced is not a boolean", "Write true or false.")
        elif not _has_key(names.conditions, key):
            _flow_error(where, f'unknown condition "{key}" in {label}',
                        "Register it in conditions or use equals, known, silenced.")


def action_parameters(action: Any) -> dict:
    """An action's parameter definitions: its ``parameters`` attribute, or key of a dict."""
    parameters = action.get("parameters") if isinstance(action, dict) else getattr(action, "parameters", None)
    return parameters if isinstance(parameters, dict) else {}


def _with_check(name: str, parameters: dict, given: dict, where: str) -> None:
    """The `with` check of persistence.md §1.10 (flows.md §9.2)."""
    for parameter, raw in parameters.items():
        definition = _as_definition(raw)
        if parameter not in given:
            if not definition.get("optional"):
                _flow_error(where, f'action "{name}" needs parameter "{parameter}"', "Add it to `with`.")
            continue
        value = given[parameter]
        if matches_definition(definition, value):
            continue
        off_list = _off_list(definition, value)
        if off_list:
            expected, got, fix = f"one of {off_list[0]}", off_list[1], "Use one of the listed values."
        else:
            expected, got = expected_text(definition), type_name(value)
            fix = "Values are not coerced; write the right type."
        _flow_error(where, f'parameter "{parameter}" of action "{name}" must be {expected}, got {got}', fix)
    for key in given:
        if key not in parameters:
            _flow_error(where, f'action "{name}" has no parameter "{key}"', "Remove it or fix the name.")


def check_flow_names(flow: dict, names: _FlowNames) -> list[str]:
    """Phase 2 (persistence.md §1.10, N1-N8): names and the step graph; returns the warnings."""
    if not (isinstance(flow.get("id"), str) and flow["id"]):
        _flow_error("flow", "has no id", "Give the flow a short unique id.")
    where = f'flow "{flow["id"]}"'
    steps = flow["steps"]
    position: dict[str, int] = {}
    for n, step in enumerate(steps, 1):
        step_id = step.get("id")
        if not (isinstance(step_id, str) and step_id):
            _flow_error(f"{where}, step #{n}", "has no id", "Give every step a unique id.")
        if step_id == "end":
            _flow_error(f'{where}, step "end"', 'uses the reserved id "end"', '"end" ends the run; pick another id.')
        if step_id in position:
            _flow_error(f'{where}, step "{step_id}"', "duplicates an earlier step id", "Give each step its own id.")
        position[step_id] = n - 1
    if flow.get("on") and not steps:
        _flow_error(where, "has triggers but no steps", "Add at least one step or remove `on`.")
    for key in ("collect", "clearOnStart"):
        for slug in flow.get(key, ()):
            _field_check(slug, names, where, key)

    warnings: list[str] = []
    step_collects = {slug for step in steps for slug in step.get("collect", ())}
    for slug in flow.get("collect", ()):
        if extract_mode(_as_definition(names.fields[slug])) == "asked" and slug not in step_collects:
            warnings.append(f'{where}: collect lists "{slug}", which is only taken from the answer to a step '
                            "that asks it, and no step does. Add it to a step's collect, or set extract: "
                            "'anywhere' on the field.")

    condition_names_check(flow.get("while", _KEY_ABSENT), "while", where, names)
    _tool_check(flow.get("tools", ()), names, where)
    for i, instruction in enumerate(flow.get("instructions", ())):
        condition_names_check(instruction.get("if", _KEY_ABSENT), f"instructions[{i}].if", where, names)

    for n, trigger in enumerate(flow.get("on", ()), 1):
        trigger_where = f"{where}, trigger #{n}"
        if not any(kind in trigger for kind in TRIGGER_KINDS):
            _flow_error(trigger_where, "names no trigger kind", "A trigger is one of `message`, `mention`, "
                        "`silence`, `event`. A flow the host starts itself has no `on` at all.")
        if "event" in trigger and not _has_key(names.events, trigger["event"]):
            _flow_error(trigger_where, f'unknown event "{trigger["event"]}"',
                        "Register it in events or fix the name.")
        _duration_check(trigger.get("silence", _KEY_ABSENT), "silence", trigger_where)
        _duration_check(trigger.get("after", _KEY_ABSENT), "after", trigger_where)
        if isinstance(trigger.get("repeat"), dict):
            _duration_check(trigger["repeat"]["cooldown"], "repeat.cooldown", trigger_where)
        condition_names_check(trigger.get("if", _KEY_ABSENT), "if", trigger_where, names)
        for kind in ("message", "mention"):
            phrases = trigger.get(kind) or []
            if phrases and not split_phrases(phrases)[0]:
                fix = 'A "!" phrase rules the trigger out. Add at least one plain phrase saying when it should fire'
                fix += ", or use an empty list for a catch-all." if kind == "message" else "."
                _flow_error(trigger_where, f'every {kind} phrase starts with "!", so nothing can ever match it', fix)

    for i, step in enumerate(steps):
        _step_names(step, i, where, position, names, warnings)
    return warnings


def _step_names(step: dict, i: int, flow_where: str, position: dict, names: _FlowNames, warnings: list) -> None:
    """The step rules of persistence.md §1.10 for the step at index i."""
    where = f'{flow_where}, step "{step["id"]}"'

    def edge(target: Any, label: str) -> int | None:
        """Check one Next; the index it lands on, or None (persistence.md §1.10, edge check)."""
        if target is _KEY_ABSENT or target == "end":
            return None
        if isinstance(target, dict) and "flow" in target:
            flow_id = target["flow"]
            templated = isinstance(flow_id, str) and "{{" in flow_id
            if names.flow_ids is not None and not templated and flow_id not in names.flow_ids:
                fix = (f"Use one of {_listed_values(names.flow_ids)}, or add the flow." if names.flow_ids
                       else "Add the flow to the agent.")
                _flow_error(where, f'{label} names flow "{flow_id}", which this agent does not have', fix)
            return None
        step_id = target["step"] if isinstance(target, dict) else target
        if step_id not in position:
            _flow_error(where, f'{label} points at step "{step_id}", which does not exist',
                        'Use an existing step id or "end".')
        if isinstance(target, dict):
            for slug in target.get("clear", ()):
                _field_check(slug, names, where, f"{label}.clear")
        lands = position[step_id]
        if lands <= i and not (isinstance(target, dict) and target.get("clear")):
            warnings.append(f'{where}: {label} jumps back to "{step_id}" without clear; the fields collected '
                            "since stay known and those steps skip. Add clear: [...] to re-ask them.")
        return lands

    then_lands = edge(step.get("then", _KEY_ABSENT), "then")
    edge(step.get("else", _KEY_ABSENT), "else")
    if "collect" in step or "prompt" in step:
        collect = step.get("collect", [])
        for slug in collect:
            _field_check(slug, names, where, "collect")
        for slug in step.get("ask", {}):
            _field_check(slug, names, where, "ask")
        if "question" in step and not collect:
            _flow_error(where, "has a question but collects nothing",
                        "A fixed question asks for fields: add collect, or send the text with a say step.")
        asks = step.get("ask", {})
        if (collect and "prompt" not in step and "question" not in step
                and not any(is_known(asks.get(slug)) or is_known(_as_definition(names.fields[slug]).get("ask"))
                            for slug in collect)):
            quoted = ", ".join(f'"{slug}"' for slug in collect)
            warnings.append(f"{where}: collects {quoted} with no prompt and no ask; the AI has nothing to go on. "
                            "Add a prompt or an ask per field.")
    for j, branch in enumerate(step.get("branches", ())):
        if "when" not in branch and "if" not in branch:
            _flow_error(where, f"branches[{j}] has neither when nor if",
                        "Give the branch an AI condition (when) or a code one (if).")
        if "when" in branch and "wait" in step:
            _flow_error(where, f'branches[{j}] is a "when" branch, but a wait step is judged by code only',
                        'Use "if", or move the branch to a talk step.')
        condition_names_check(branch.get("if", _KEY_ABSENT), f"branches[{j}].if", where, names)
        edge(branch.get("then", _KEY_ABSENT), f"branches[{j}].then")
    for j, instruction in enumerate(step.get("instructions", ())):
        condition_names_check(instruction.get("if", _KEY_ABSENT), f"instructions[{j}].if", where, names)
    _tool_check(step.get("tools", ()), names, where)
    if "do" in step:
        name = step["do"]
        if not _has_key(names.actions, name):
            _flow_error(where, f'unknown action "{name}"', "Register it in actions or fix the name.")
        _with_check(name, action_parameters(names.actions[name]), step.get("with", {}), where)
        edge(step.get("onFail", _KEY_ABSENT), "onFail")
    wait = step.get("wait", _KEY_ABSENT)
    if isinstance(wait, str):
        _duration_check(wait, "wait", where)
    elif isinstance(wait, dict):
        if not _has_key(names.events, wait["event"]):
            _flow_error(where, f'unknown event "{wait["event"]}" in wait', "Register it in events or fix the name.")
        _duration_check(wait.get("upTo", _KEY_ABSENT), "wait.upTo", where)
    if "if" in step:
        condition_names_check(step["if"], "if", where, names)
        if then_lands is not None and then_lands <= i and "else" not in step:
            back_to = step["then"]["step"] if isinstance(step["then"], dict) else step["then"]
            _flow_error(where, f'"if" jumps back to "{back_to}" with no else',
                        "Add else so the false branch has somewhere to go.")


def validate_flow(spec: Any, registries: dict | None = None) -> FlowValidation:
    """Check a flow or FlowSpec against the agent's registries (persistence.md §1.10).

    Raises FlowConfigurationError on the first problem that would break at run
    time; otherwise returns the warnings. Never mutates ``spec``.

    ``validate_flow(spec, {"fields": f.fields, "actions": {"notify": notify}}).warnings``
    """
    flow = strip_nones(spec)
    check_flow_shape(flow)
    return FlowValidation(warnings=check_flow_names(flow, _FlowNames.of(registries)))


# Agent construction (persistence.md §1.11, model-calls.md §6.9 and §9.1) -------

def _scope_instructions_check(instructions: Any, where: str, names: _FlowNames) -> None:
    """Agent or idle instructions: their shape (inferred: nothing else checks it), then their names."""
    owner = strip_nones({"instructions": instructions})
    _instructions_check(owner, where)
    for i, instruction in enumerate(owner["instructions"]):
        condition_names_check(instruction.get("if", _KEY_ABSENT), f"instructions[{i}].if", where, names)


def _check_idle(idle: Any, names: _FlowNames) -> None:
    if idle == "silent":
        return
    if not isinstance(idle, dict):
        _flow_error("idle", f"is {show(idle)}, not an object",
                    'Write idle as { prompt: "..." }, or "silent" for no idle replies.')
    idle = strip_nones(idle)
    if "instructions" in idle:
        _scope_instructions_check(idle["instructions"], "idle", names)
    tools = idle.get("tools", _KEY_ABSENT)
    _list_check(tools, "tools", "idle")
    if tools is not _KEY_ABSENT:
        _tool_check(tools, names, "idle")


# model-calls.md §9.1: (key, required, rule, rule text, fix). The rule
# texts of the two counts say "whole number" because the engine slices by them.
_COMPACTION_RULES = (
    ("maxTokens", True, lambda v: v > 0, "more than 0",
     "Set it to how many tokens the history may take, such as 8000"),
    ("compactionThreshold", False, lambda v: 0.5 <= v <= 0.95, "between 0.5 and 0.95",
     "Use 0.8 unless you measured otherwise"),
    ("preserveRecentCount", False, lambda v: is_whole(v) and v >= 2, "a whole number of 2 or more",
     "Keep at least the last question and its answer; the default is 4"),
    ("maxToolResultChars", False, lambda v: is_whole(v) and v >= 1, "a whole number of 1 or more",
     "Use 5000, the default, or the longest tool result the model should read"),
)


def check_compaction(config: Any) -> None:
    """The compaction settings (model-calls.md §9.1); a plain ValueError names the first bad one."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise ValueError(f"[CompactionEngine] compaction is {show(config)}: it must be an object such as "
                         "{ maxTokens: 8000 }. Pass a dict, or leave compaction out to turn it off.")
    if config.get("enabled") is False:
        return
    for key, required, rule, rule_text, fix in _COMPACTION_RULES:
        value = config.get(key)
        if value is None and not required:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and (
            isinstance(value, int) or math.isfinite(value))
        if not number or not rule(value):
            shown = "missing" if value is None else show(value)
            raise ValueError(f"[CompactionEngine] {key} is {shown}: it must be {rule_text}. {fix}.")


def check_agent(agent: Agent) -> list[str]:
    """The construction checks of persistence.md §1.11 and model-calls.md §9.1; returns warnings.

    Raises FlowConfigurationError (ValueError for compaction) on the first
    problem, in this order: reserved condition names, agent instructions, each
    flow (a repeated id, then validate_flow), tool parameters, idle, compaction.
    """
    for name in agent.conditions:
        if name in RESERVED_CONDITIONS:
            raise FlowConfigurationError(f'condition "{name}" shadows a built-in: equals, known, silenced are '
                                         "reserved. Rename it.")
    registries = {"fields": agent.fields, "actions": agent.actions, "events": agent.events,
                  "conditions": agent.conditions, "tools": agent.tools, "flows": agent.flows}
    names = _FlowNames.of(registries)
    _scope_instructions_check(agent.instructions, "agent", names)
    warnings: list[str] = []
    seen: set[str] = set()
    for flow in agent.flows:
        flow_id = flow.get("id") if isinstance(flow, dict) else None
        if isinstance(flow_id, str) and flow_id in seen:
            raise FlowConfigurationError(f'flow "{flow_id}" is declared twice: flow ids must be unique. '
                                         "Rename one of them.")
        if isinstance(flow_id, str):
            seen.add(flow_id)
        warnings.extend(validate_flow(flow, registries).warnings)
    for tool in agent.tools:
        parameters = getattr(tool, "parameters", None)
        if parameters is not None and not (isinstance(parameters, dict) and parameters.get("type") == "object"):
            raise FlowConfigurationError(f'tool "{getattr(tool, "id", tool)}": parameters must be a JSON Schema '
                                         'object. Write { type: "object", properties: { ... }, required: [...] }.')
    _check_idle(agent.idle, names)
    check_compaction(agent.compaction)
    return warnings

# <<< validation <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 7. The session ##############################################################
#
# One conversation's whole state (runtime.md §13, persistence.md Part 2).
# Times stay ISO text; nested values stay the camelCase dicts the blob holds.

@dataclass
class Run:
    """One live execution of a flow inside a session (runtime.md §4.1)."""
    id: str
    flow_id: str
    anchor: str
    dedupe_key: str
    step_id: str | None
    status: str
    trigger: dict
    hop: int
    started_at: str
    asked: dict = field(default_factory=dict)
    visits: dict = field(default_factory=dict)
    outcomes: list = field(default_factory=list)
    input: Any = None
    suspended_at: str | None = None
    staying: bool = False
    waiting: dict | None = None

    def to_dict(self) -> dict:
        """The run as the blob stores it (persistence.md §2.2)."""
        return run_to_dict(self)


@dataclass
class EndedRun(Run):
    """A snapshot of a run that ended, with the reason (runtime.md §4.8)."""
    reason: str = "end"


@dataclass
class Session:
    """One conversation's state; ``to_dict()`` is the v4 blob (persistence.md §2.3)."""
    id: str
    version: int = 0
    data: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    claims: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    last_user_at: str | None = None
    last_assistant_at: str | None = None
    history: list | None = None
    v: int = 4

    def to_dict(self) -> dict:
        """The v4 blob, camelCase keys, absent keys left out."""
        return session_to_dict(self)

    @classmethod
    def from_dict(cls, blob: Any, session_id: str | None = None) -> "Session":
        """Read a v4 blob; anything else raises InvalidSessionError (persistence.md §2.5)."""
        return session_from_dict(blob, session_id)


# >>> session blob (helper region: run_to_dict, session_to_dict, session_from_dict) >>>

def run_to_dict(run: Run) -> dict:
    raise NotImplementedError("the session blob lands with the Foundation issue (session blob)")


def session_to_dict(session: Session) -> dict:
    raise NotImplementedError("the session blob lands with the Foundation issue (session blob)")


def session_from_dict(blob: Any, session_id: str | None) -> Session:
    raise NotImplementedError("the session blob lands with the Foundation issue (session blob)")

# <<< session blob <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 8. The turn #################################################################

@dataclass
class TurnResult:
    """What one turn produced (runtime.md §12). ``changed=False``: save, send, schedule nothing."""
    session: Session
    changed: bool
    messages: list[OutboundMessage] = field(default_factory=list)
    schedule: list[ScheduleEntry] = field(default_factory=list)
    outcomes: list[StepOutcome] = field(default_factory=list)
    started: list[StartedRun] = field(default_factory=list)
    ended: list[EndedRun] = field(default_factory=list)
    skipped: list[SkippedTrigger] = field(default_factory=list)
    llm_calls: int = 0
    usage: TokenUsage | None = None


def run_turn(agent: Agent, kwargs: dict, streaming: bool):
    """The one pipeline behind turn() and turn_stream(): yields deltas, returns the TurnResult."""
    raise NotImplementedError("turn() lands with the turn-engine issue")
    yield ""  # pragma: no cover - makes this a generator


def pending_wakes(agent: Agent, session: Any, context: Any, anchors: dict | None,
                  claims: dict | None) -> list[ScheduleEntry]:
    raise NotImplementedError("pending_wakes() lands with the time-and-events issue")


# 9. Runs and steps ###########################################################


# 10. Model calls #############################################################

# The engine (sections 8-9) decides *what* the model judges and *who* speaks;
# this section turns that into provider calls and reads the replies back.
# Interface used by the engine:
#   needs_understand_call(ask) -> bool       model-calls.md §3.1 zero-call rules
#   understand(agent, ask) -> Judgement      one "understand" call (raises on provider failure)
#   speak(agent, ask, streaming)             generator: yields deltas, returns Spoken | Deferred
#   compact_history(agent, history)          -> (history, llm_calls, usage), model-calls.md §9


@dataclass
class UnderstandAsk:
    """What the understand call may judge, as the engine worked it out (runtime.md §3.4)."""
    message: str
    scope: Scope                                  # data and context; input is None
    history: list
    floor_run: Run | None = None
    floor_flow: dict | None = None
    floor_step: dict | None = None                # the floor run's current step when it is a talk step
    floor_pending: list = field(default_factory=list)
    candidates: list = field(default_factory=list)   # flow dicts to score, the floor flow first
    mentions: list = field(default_factory=list)     # flow dicts whose first mention trigger is asked
    branches: list = field(default_factory=list)     # (run_id, step_id, index, when) tuples
    fields: list = field(default_factory=list)       # harvestable field slugs, in order


@dataclass
class Judgement:
    """The understand call's reading of a message (runtime.md §3.4)."""
    flows: dict = field(default_factory=dict)        # flow id -> score 0..100
    mentions: dict = field(default_factory=dict)     # flow id -> True/False
    extract: dict = field(default_factory=dict)      # flow id -> {param: value}
    branches: dict = field(default_factory=dict)     # "<runId>/<stepId>/<index>" -> True/False
    fields: dict = field(default_factory=dict)       # slug -> raw value, in reply order
    llm_calls: int = 0
    usage: TokenUsage | None = None


@dataclass
class SpeakAsk:
    """Everything one speak call needs (model-calls.md §5.1)."""
    input_kind: str                               # "message", "wake", "event" or "start"
    text: str | None                              # the message text on a message turn
    scope: Scope                                  # data (live), context, input (the run's; None for idle)
    history: list
    now: datetime
    run: Run | None = None                        # None for the idle speaker
    flow: dict | None = None
    step: dict | None = None
    pending: list = field(default_factory=list)
    instructions: list = field(default_factory=list)  # kept instruction dicts, agent -> flow -> step
    tools: list = field(default_factory=list)          # offered Tool objects, in agent order


@dataclass
class Spoken:
    """A speak call that produced a reply."""
    message: str
    fields: dict = field(default_factory=dict)    # slug -> raw envelope value
    data: dict = field(default_factory=dict)      # merged tool data patches
    llm_calls: int = 0
    usage: TokenUsage | None = None


@dataclass
class Deferred:
    """A speak call that failed: the step waits or the run fails (runtime.md §10.2)."""
    code: str
    retryable: bool
    reset_at_ms: int | None = None
    llm_calls: int = 0
    usage: TokenUsage | None = None


def needs_understand_call(ask: UnderstandAsk) -> bool:
    raise NotImplementedError("the understand call lands with the turn-engine issue")


def understand(agent: Agent, ask: UnderstandAsk) -> Judgement:
    raise NotImplementedError("the understand call lands with the turn-engine issue")


def speak(agent: Agent, ask: SpeakAsk, streaming: bool):
    raise NotImplementedError("the speak call lands with the turn-engine issue")
    yield ""  # pragma: no cover


def compact_history(agent: Agent, history: list) -> tuple[list, int, TokenUsage | None]:
    raise NotImplementedError("compaction lands with the turn-engine issue")

# <<< model calls <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 11. Streaming ###############################################################

# >>> streaming (helper region: the envelope stream decoder) >>>>>>>>>>>>>>>>>>

# <<< streaming <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 12. JSON and migration ######################################################

# >>> flow spec JSON (helper region: from_spec, to_spec, flow_spec_schema) >>>>
#
# A FlowSpec is a flow as plain JSON: every step carries its `kind`, every
# predicate is a condition object, and None means "not set" (persistence.md
# Part 1). The strip, the shape check and the messages live with validate_flow
# (section 6).

def from_spec(spec: Any) -> dict:
    """A stored FlowSpec as a flow dict: Nones and kinds stripped, shape checked (persistence.md §1.7).

    Names are not checked here; the agent checks them when it is built.

    ``from_spec({"id": "g", "name": "G", "steps": [{"id": "a", "kind": "say", "say": "Oi!", "then": None}]})``
    returns ``{"id": "g", "name": "G", "steps": [{"id": "a", "say": "Oi!"}]}``.
    """
    flow = strip_nones(spec)
    check_flow_shape(flow)
    flow["steps"] = [{key: value for key, value in step.items() if key != "kind"} for step in flow["steps"]]
    return flow


SPEC_FLOW_KEYS = ("id", "name", "description", "on", "anchor", "while", "collect", "clearOnStart", "steps",
                  "onEnd", "instructions", "tools")
SPEC_STEP_BASE_KEYS = ("id", "label", "then", "ui")
SPEC_KIND_KEYS = {
    "say": ("say", "media", "once"),
    "do": ("do", "with", "onFail"),
    "wait": ("wait", "businessHours", "else", "branches"),
    "waitEvent": ("wait", "else"),
    "if": ("if", "else"),
    "collect": ("collect", "prompt", "question", "ask", "maxAsks", "branches", "tools", "instructions"),
    "prompt": ("prompt", "ask", "maxAsks", "branches", "tools", "instructions"),
}


def _storable(predicate: Any, label: str) -> None:
    """A predicate in a spec must be JSON (persistence.md §1.8)."""
    if callable(predicate):
        raise FlowConfigurationError(
            f"{label}: is a function, which cannot be stored as JSON. Write it as a condition ({{ equals }}, "
            "{ known }, { silenced } or a named condition) to store this flow.")


def _instruction_ifs_storable(instructions: Any, label: str) -> None:
    for i, instruction in enumerate(instructions):
        if isinstance(instruction, dict):
            _storable(instruction.get("if"), f"{label}instructions[{i}].if")


def spec_kind(step: dict) -> str | None:
    """The kind to_spec writes for a step (persistence.md §1.8), None when it has no body."""
    present = [key for key in ("say", "do", "wait", "if", "collect", "prompt") if step.get(key) is not None]
    if not present:
        return None
    if present[0] == "wait":
        return "wait" if isinstance(step["wait"], str) else "waitEvent"
    return present[0]


def _step_to_spec(step: dict, flow_where: str) -> dict:
    where = f'{flow_where}, step "{step.get("id")}"'
    kind = spec_kind(step)
    if kind is None:
        _flow_error(where, "has neither prompt nor collect",
                    "A talk step needs a guideline, fields to collect, or both.")
    if kind == "prompt" and step.get("question") is not None:
        _flow_error(where, "has a question but collects nothing",
                    "A fixed question asks for fields: add collect, or send the text with a say step.")
    out = {key: strip_nones(step[key]) for key in SPEC_STEP_BASE_KEYS if step.get(key) is not None}
    out["kind"] = kind
    for key in SPEC_KIND_KEYS[kind]:
        value = step.get(key)
        if value is None:
            continue
        if key == "if":
            _storable(value, f"{where} if")
        elif key == "branches":
            for j, branch in enumerate(value):
                if isinstance(branch, dict):
                    _storable(branch.get("if"), f"{where} branches[{j}].if")
        elif key == "instructions":
            _instruction_ifs_storable(value, f"{where} ")
        out[key] = strip_nones(value)
    return out


def to_spec(flow: dict) -> dict:
    """A flow as a FlowSpec: every step with its kind, no None anywhere (persistence.md §1.8).

    Keys outside the FlowSpec are dropped; a callable predicate raises
    FlowConfigurationError, since it cannot be stored as JSON. Give it a flow
    that validate_flow accepts.

    ``to_spec({"id": "k", "name": "K", "steps": [{"id": "b", "prompt": "Agradeça."}]})["steps"]``
    is ``[{"id": "b", "kind": "prompt", "prompt": "Agradeça."}]``.
    """
    where = f'flow "{flow.get("id")}"'
    spec = {}
    for key in SPEC_FLOW_KEYS:
        value = flow.get(key)
        if value is None:
            continue
        if key == "on":
            for n, trigger in enumerate(value, 1):
                if isinstance(trigger, dict):
                    _storable(trigger.get("if"), f"{where}, trigger #{n} if")
        elif key == "while":
            _storable(value, f"{where}, while")
        elif key == "instructions":
            _instruction_ifs_storable(value, f"{where}, ")
        spec[key] = [_step_to_spec(step, where) for step in value] if key == "steps" else strip_nones(value)
    return spec


# flow_spec_schema: the building blocks of persistence.md §1.12, under the
# names the spec gives them inside flow_spec_schema.

def schema_closed(*properties: tuple[str, dict]) -> dict:
    """closed(p1: s1, ...): every property required, nothing else allowed."""
    return {"type": "object", "properties": dict(properties), "required": [name for name, _ in properties],
            "additionalProperties": False}


def schema_or_null(schema: dict) -> dict:
    """or_null(s): a type list (null appended to an enum) when s has one type, else an anyOf branch."""
    if isinstance(schema.get("type"), str):
        nullable = {**schema, "type": [schema["type"], "null"]}
        if "enum" in schema:
            nullable["enum"] = [*schema["enum"], None]
        return nullable
    return {"anyOf": [schema, {"type": "null"}]}


def _schema_with(schema: dict, description: str | None) -> dict:
    return schema if description is None else {**schema, "description": description}


def schema_union(*branches: dict, nullable: bool = False, description: str | None = None) -> dict:
    return _schema_with({"anyOf": [*branches, *([{"type": "null"}] if nullable else [])]}, description)


def schema_enum(values: list, description: str | None = None) -> dict:
    return _schema_with({"type": "string", "enum": list(values)}, description)


def schema_list(items: dict, description: str | None = None) -> dict:
    return _schema_with({"type": "array", "items": items}, description)


def _field_property(definition: dict) -> dict:
    """A field inside `equals`: type, description and enum, nullable; nothing else (persistence.md §1.12)."""
    prop: dict = {"type": [definition.get("type") or "string", "null"]}
    if definition.get("description"):
        prop["description"] = definition["description"]
    if definition.get("enum") is not None:
        prop["enum"] = [*definition["enum"], None]
    return prop


def _parameter_property(definition: dict) -> dict:
    """A parameter inside `with`; an optional one may be null (persistence.md §1.12)."""
    def scalar(d: dict) -> dict:
        prop: dict = {"type": d.get("type") or "string"}
        if d.get("description"):
            prop["description"] = d["description"]
        if d.get("enum") is not None:
            prop["enum"] = list(d["enum"])
        return prop

    if definition.get("type") == "array":
        prop = _schema_with({"type": "array", "items": scalar(_as_definition(definition.get("items")))},
                            definition.get("description") or None)
    else:
        prop = scalar(definition)
    return schema_or_null(prop) if definition.get("optional") else prop


def flow_spec_schema(registries: dict | None = None) -> dict:
    """A JSON Schema of a FlowSpec for this agent's names (persistence.md §1.12).

    Closed and fully required (a model writes null for what it leaves out),
    unions as anyOf, one `do` variant per action; it reads `fields`, `actions`,
    `events` and `conditions`. Pass it as a response schema, then run
    validate_flow and from_spec on the answer.
    """
    closed, or_null, union, enum_of, list_of = schema_closed, schema_or_null, schema_union, schema_enum, schema_list
    STRING, NUMBER, BOOLEAN = {"type": "string"}, {"type": "number"}, {"type": "boolean"}
    DURATION = {"type": "string", "description": "A number and a unit: 30s, 5m, 24h, 3d"}

    def text(description: str) -> dict:
        return {"type": "string", "description": description}

    def described(schema: dict, description: str) -> dict:
        return {**schema, "description": description}

    registries = registries or {}
    fields = registries.get("fields") or {}
    actions = registries.get("actions") or {}
    events = list(registries.get("events") or {})
    conditions = [name for name in registries.get("conditions") or {} if name not in RESERVED_CONDITIONS]
    slugs = list_of(enum_of(list(fields))) if fields else None

    condition_props: list = []
    if fields:
        equals = {"type": "object",
                  "properties": {slug: _field_property(_as_definition(d)) for slug, d in fields.items()},
                  "required": list(fields), "additionalProperties": False,
                  "description": "Fields that must hold these values"}
        condition_props += [("equals", or_null(equals)),
                            ("known", or_null(described(slugs, "Fields that must be known")))]
    condition_props.append(("silenced", or_null(described(BOOLEAN, "Whether the host gate is closed"))))
    for name in conditions:
        condition_props.append((name, union(STRING, NUMBER, BOOLEAN, list_of(STRING), nullable=True,
                                            description=f'Argument for condition "{name}"')))
    condition = closed(*condition_props)

    step_target = [("step", STRING)]
    if fields:
        step_target.append(("clear", or_null(described(slugs, "Fields to forget before jumping"))))
    next_variants = [text('A step id, or "end"'), closed(*step_target),
                     closed(("flow", text("Another flow to start; this run ends")))]
    next_, next_or_null = union(*next_variants), union(*next_variants, nullable=True)

    repeat = union(enum_of(["once", "always"]), closed(("cooldown", DURATION)), nullable=True,
                   description="How often a run may start: once per session or anchor, always, or after a cooldown")
    gates = [("if", or_null(condition)), ("repeat", repeat)]
    triggers = [
        closed(("message", list_of(STRING, "What the lead asks for, one phrase each; [] = catch-all")), *gates),
        closed(("mention", list_of(STRING, "What the lead mentions, one phrase each")), *gates),
        closed(("silence", described(DURATION, "How long the lead has been quiet")),
               ("businessHours", or_null(BOOLEAN)), *gates)]
    if events:
        triggers.append(closed(("event", enum_of(events)), ("after", or_null(DURATION)),
                               ("businessHours", or_null(BOOLEAN)), *gates))

    branches = or_null(list_of(union(closed(("when", STRING), ("then", next_)),
                                     closed(("if", condition), ("then", next_))),
                               "Exits judged while the step asks"))
    wait_branches = or_null(list_of(closed(("if", condition), ("then", next_)),
                                    "Exits checked by code when the lead replies before the wait ends"))
    base = [("id", STRING), ("label", or_null(STRING)), ("then", next_or_null)]

    def step(kind: str, *properties: tuple[str, dict]) -> dict:
        return closed(*base, ("kind", enum_of([kind])), *properties)

    steps = [step("prompt", ("prompt", text("Guideline for the AI's next message")), ("branches", branches))]
    if fields:
        steps.append(step(
            "collect", ("collect", described(slugs, "Fields the AI asks for until they are known")),
            ("prompt", or_null(STRING)),
            ("question", or_null(text("A fixed first question, sent word for word; later asks are the AI's"))),
            ("maxAsks", or_null({"type": "integer",
                                 "description": "Times a field may be asked before it is skipped; default 3"})),
            ("branches", branches)))
    steps.append(step("say", ("say", text("Sent verbatim")), ("media", or_null(closed(("slug", STRING)))),
                      ("once", or_null(BOOLEAN))))
    for name, action in actions.items():
        parameters = action_parameters(action)
        with_ = []
        if parameters:   # not nullable: required parameters cannot be skipped
            with_ = [("with", {"type": "object",
                               "properties": {p: _parameter_property(_as_definition(d))
                                              for p, d in parameters.items()},
                               "required": list(parameters), "additionalProperties": False})]
        steps.append(step("do", ("do", enum_of([name])), *with_, ("onFail", next_or_null)))
    steps.append(step("wait", ("wait", text("Park this long; then = time passed, else = the lead replied")),
                      ("businessHours", or_null(BOOLEAN)), ("else", next_or_null), ("branches", wait_branches)))
    if events:
        up_to = or_null(described(DURATION, "Give up after this long; default 30d"))
        steps.append(step("waitEvent", ("wait", closed(("event", enum_of(events)), ("upTo", up_to))),
                          ("else", next_or_null)))
    steps.append(step("if", ("if", condition), ("else", next_or_null)))

    instruction = closed(("kind", or_null(enum_of(list(INSTRUCTION_KINDS)))),
                         ("when", or_null(list_of(STRING, "When the rule applies, judged by the AI"))),
                         ("if", or_null(condition)), ("prompt", STRING))
    flow = [("id", text("Short slug, unique in the workspace")),
            ("name", STRING),
            ("description", or_null(text("When this flow should be used; the AI reads it when routing"))),
            ("on", or_null(list_of(union(*triggers), "What starts a run; null = started by hand"))),
            ("anchor", or_null(text("'session' (default) or a host anchor such as 'lead'"))),
            ("while", or_null(described(condition, "The run ends when this stops holding")))]
    if fields:
        data = "The data this flow needs; its steps ask for it in order, and any of it the lead gives is noted"
        flow += [("collect", or_null(described(slugs, data))),
                 ("clearOnStart", or_null(described(slugs, "Fields to forget when a run starts")))]
    flow += [("steps", list_of(union(*steps), "In order; a run moves to the next step unless `then` says otherwise")),
             ("onEnd", or_null(enum_of(["end", "stay", "reset"], "After the last step: end the run, stay on the last "
                                       "talk step it took answering every message, or reset to the first"))),
             ("instructions", or_null(list_of(instruction, "Rules that apply only inside this flow")))]
    return copy.deepcopy(closed(*flow))

# <<< flow spec JSON <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# >>> migration and history (helper region: migrate_session, history events) >>>

def migrate_session(blob: Any, *, session_id: str, flow_id_of: Callable | None = None,
                    now: Any = None) -> Session:
    """A 3.x session state as a v4 Session (persistence.md Part 4)."""
    raise NotImplementedError("migrate_session lands with the session-blob work")


def history_to_events(history: list) -> list:
    """History items as events (model-calls.md §11.2)."""
    raise NotImplementedError("history_to_events lands with the session-blob work")


def events_to_history(events: list) -> list:
    """Events as history items (model-calls.md §11.2)."""
    raise NotImplementedError("events_to_history lands with the session-blob work")

# <<< migration and history <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 13. Testing helpers #########################################################

class ScriptedProvider:
    """A provider that replays scripted replies, for tests and offline demos (python-api.md, Providers).

    ``ScriptedProvider(script={"understand": [{...}], "speak": [{"message": "Oi!"}]})``:
    each call takes the next entry of the queue named by its ``schema_name``.
    An entry is a dict (the structured reply), a str (raw text), a Generation,
    an exception (raised), or a callable ``f(request)`` returning one of those.
    """

    name = "scripted"

    def __init__(self, script: dict | None = None, usage: "bool | TokenUsage" = False):
        self.script = {name: list(entries) for name, entries in (script or {}).items()}
        self.usage = usage
        self.calls: list[GenerateRequest] = []
        self.capabilities = ProviderCapabilities()
        self._lock = threading.Lock()

    def remaining(self) -> dict[str, int]:
        """Entries left per schema name."""
        return {name: len(entries) for name, entries in self.script.items()}

    def _next_entry(self, request: GenerateRequest) -> Any:
        with self._lock:
            self.calls.append(request)
            queue = self.script.get(request.schema_name or "")
            if not queue:
                raise RuntimeError(f'no scripted "{request.schema_name}" reply left')
            entry = queue.pop(0)
        if callable(entry) and not isinstance(entry, type):
            entry = entry(request)
        if isinstance(entry, BaseException) or (isinstance(entry, type) and issubclass(entry, BaseException)):
            raise entry
        return entry

    def _generation(self, request: GenerateRequest, entry: Any) -> Generation:
        if isinstance(entry, Generation):
            return entry
        if isinstance(entry, str):
            return Generation(message=entry, usage=self._usage(request, entry))
        if isinstance(entry, dict):
            structured = {k: copy.deepcopy(v) for k, v in entry.items() if k != "toolCalls"}
            message = entry["message"] if isinstance(entry.get("message"), str) else compact_json(structured)
            calls = [ToolCallRequest(id=f"call_{i}", name=item["toolName"], arguments=item.get("arguments") or {})
                     for i, item in enumerate(entry.get("toolCalls") or [])]
            return Generation(message=message, structured=structured, tool_calls=calls,
                              usage=self._usage(request, message))
        raise TypeError(f"a scripted entry must be a dict, a str, a Generation, an exception or a callable, "
                        f"not {type(entry).__name__}")

    def _usage(self, request: GenerateRequest, message: str) -> TokenUsage | None:
        if isinstance(self.usage, TokenUsage):
            return self.usage
        if self.usage is True:
            return TokenUsage(prompt_tokens=len(request.system or "") + len(request.prompt),
                              completion_tokens=len(message), cached_input_tokens=0)
        return None

    def generate(self, request: GenerateRequest) -> Generation:
        return self._generation(request, self._next_entry(request))

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]:
        generation = self.generate(request)
        if generation.message:
            yield GenerationChunk(delta=generation.message, accumulated=generation.message, done=False)
        yield GenerationChunk(delta="", accumulated=generation.message, done=True,
                              structured=generation.structured, tool_calls=generation.tool_calls,
                              usage=generation.usage, reasoning=generation.reasoning,
                              reasoning_details=generation.reasoning_details, metadata=generation.metadata)


class MemoryScheduler:
    """An in-memory wake queue for tests and single-process hosts (python-api.md, Modules)."""

    def __init__(self):
        self._entries: list[ScheduleEntry] = []

    def add(self, entry: ScheduleEntry) -> None:
        """Queue a wake; the job its ``replaces`` names is dropped."""
        if entry.replaces is not None:
            self._entries = [e for e in self._entries if e.key != entry.replaces]
        self._entries = [e for e in self._entries if e.key != entry.key]
        self._entries.append(entry)

    def due(self, now: datetime) -> list[ScheduleEntry]:
        """Pop and return, in time order, every entry whose ``at`` is not after ``now``."""
        ready = sorted((e for e in self._entries if e.at <= now), key=lambda e: e.at)
        self._entries = [e for e in self._entries if e.at > now]
        return ready

    def __len__(self) -> int:
        return len(self._entries)


@runtime_checkable
class Store(Protocol):
    """A durable home for sessions: load, and save with compare-and-swap (persistence.md §3.1)."""

    def load(self, session_id: str) -> Session | None: ...

    def save(self, session: Session, expected_version: int) -> Session: ...


# >>> memory store (helper region: MemoryStore and the shared row rules) >>>>>>

class MemoryStore:
    """An in-process Store for tests and prototypes (persistence.md §3.3)."""

    def __init__(self):
        raise NotImplementedError("MemoryStore lands with the Foundation issue (session blob)")

# <<< memory store <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<
