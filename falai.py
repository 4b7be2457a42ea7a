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

def validate_flow(spec: Any, registries: dict | None = None) -> FlowValidation:
    """Check a flow or FlowSpec against the agent's registries (persistence.md §1.10)."""
    raise NotImplementedError("validate_flow lands with the Foundation issue (validation)")


def check_agent(agent: Agent) -> list[str]:
    """The construction checks of persistence.md §1.11 and model-calls.md §9.1; returns warnings."""
    return []

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


# --- Shared building blocks (model-calls.md §2) ---------------------------------------------

WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]+")
ENVELOPE_SHAPED = re.compile(r"\s*(?:```|\{)")
SECTION_KEYS = ("flows", "mentions", "extract", "branches", "fields")


def join_sections(*sections: str | None) -> str:
    """Drop None and blank sections, join the rest with one blank line, strip (model-calls.md §2.2)."""
    return "\n\n".join(text for text in sections if text is not None and text.strip()).strip()


def _json_text(value: Any) -> str:
    """Compact JSON, or str() for what JSON cannot hold, so a prompt never fails to build."""
    try:
        return compact_json(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return str(value)


def _scalar_text(value: Any) -> str:
    """A knowledge-base scalar: a string as itself, numbers as JavaScript prints them, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return js_number_text(value)
        except OverflowError:
            return str(value)
    return _json_text(value)


def knowledge_lines(kb: dict, depth: int = 0) -> list[str]:
    """The knowledge base as nested markdown bullets, two spaces per depth (model-calls.md §2.3)."""
    pad = "  " * depth
    lines: list[str] = []
    for key, value in kb.items():
        if isinstance(value, dict):
            lines.append(f"{pad}- {key}:")
            lines += knowledge_lines(value, depth + 1)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
            lines.append(f"{pad}- {key}:")
            for item in value:
                if isinstance(item, dict):
                    lines += knowledge_lines(item, depth + 1)
                elif isinstance(item, (list, tuple)):
                    lines += knowledge_lines(dict(enumerate(item)), depth + 1)
                else:
                    lines.append(f"{pad}  - {_scalar_text(item)}")
        elif isinstance(value, (list, tuple)):
            lines.append(f"{pad}- {key}: {', '.join(_scalar_text(v) for v in value)}".rstrip())
        else:
            lines.append(f"{pad}- {key}: {_scalar_text(value)}")
    return lines


def identity_varies(agent: Agent) -> bool:
    """Persona or goal is a template, so Identity changes with the turn's data (model-calls.md §2.3)."""
    return any(isinstance(text, str) and "{{" in text for text in (agent.persona, agent.goal))


def identity_section(agent: Agent, scope: Scope) -> str:
    """``## Identity``: the name, then persona, then goal, rendered (model-calls.md §2.3)."""
    persona, goal = _render_text(agent.persona, scope), _render_text(agent.goal, scope)
    lines = [f'You are "{agent.name}". Always refer to yourself by that name.']
    if persona:
        lines.append(persona)
    if goal:
        lines.append(f"Your goal: {goal}")
    return "## Identity\n" + "\n".join(lines)


def knowledge_section(agent: Agent) -> str | None:
    """``## Knowledge base``, only for a non-empty dict; never rendered as a template."""
    kb = agent.knowledge_base
    if not isinstance(kb, dict) or not kb:
        return None
    return "## Knowledge base\n" + "\n".join(knowledge_lines(kb))


def stable_prefix(agent: Agent, scope: Scope) -> tuple[str | None, str | None]:
    """(system, Identity for the prompt) per the stable-prefix split of model-calls.md §2.3.

    Text that never changes between turns goes in ``system``, where a provider
    can cache it; an Identity built from templates stays in the per-call prompt.
    """
    if identity_varies(agent):
        return knowledge_section(agent), identity_section(agent, scope)
    return join_sections(identity_section(agent, scope), knowledge_section(agent)), None


def field_line(name: str, definition: dict | None) -> str:
    """``<name> (<type>)[ [a | b]][: <description>]``; a slug with no definition prints alone (§2.5)."""
    if not isinstance(definition, dict):
        return name
    if definition.get("type") == "array":
        items = definition.get("items") if isinstance(definition.get("items"), dict) else {}
        line = f"{name} (list of {items.get('type', 'string')})"
    else:
        line = f"{name} ({definition.get('type', 'string')})"
        if isinstance(definition.get("enum"), list) and definition["enum"]:
            line += " [" + " | ".join(value_text(v) for v in definition["enum"]) + "]"
    if definition.get("description"):
        line += f": {definition['description']}"
    return line


def already_known_section(agent: Agent, data: dict) -> str | None:
    """``## Already known``: the agent's known fields, in definition order (model-calls.md §2.6)."""
    lines = [f"- {slug}: {_json_text(data.get(slug))}" for slug in agent.fields if is_known(data.get(slug))]
    if not lines:
        return None
    return "## Already known\nThese values are settled. Never ask for them again.\n" + "\n".join(lines)


def flow_name(flow: dict) -> str:
    """A flow's name; a flow without one prints its id (flows.md §3.1)."""
    return str(flow.get("name") or flow.get("id"))


def _lenient_loads(text: str) -> Any:
    """Strict JSON first, then with raw control characters allowed inside strings (§2.9 step 2)."""
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text, strict=False)


def find_json_object(text: Any) -> dict | None:
    """The first balanced ``{...}`` slice of a reply that parses to a dict (model-calls.md §2.9)."""
    if not isinstance(text, str):
        return None
    start = text.find("{")
    while start >= 0:
        depth, in_string, escaped, end = 0, False, False, -1
        for i in range(start, len(text)):
            c = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        if end >= 0:
            try:
                value = _lenient_loads(text[start:end + 1])
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    return None


_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n?(.*?)\n?```\Z", re.S | re.I)


def tool_arguments(raw: Any) -> dict:
    """A tool call's arguments: a dict as is; a string stripped, unfenced and parsed; else {} (§2.9)."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return {}
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = _lenient_loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _closed_object(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


class AliasTable:
    """Property-name aliases of one understand call (model-calls.md §2.8).

    A real id that is a valid property name and not yet taken keeps its name;
    any other gets ``<prefix><n>`` from one shared counter that skips taken
    names, so a kept real id such as ``f1`` is never minted for another id.
    """

    def __init__(self):
        self._taken: set[str] = set()
        self._alias_of: dict[str, str] = {}
        self._real_of: dict[str, str] = {}
        self._n = 0

    def alias(self, real: str, prefix: str) -> str:
        real = str(real)
        if real in self._alias_of:
            return self._alias_of[real]
        if WIRE_NAME.fullmatch(real) and real not in self._taken:
            name = real
        else:
            while True:
                self._n += 1
                name = f"{prefix}{self._n}"
                if name not in self._taken:
                    break
        self._taken.add(name)
        self._alias_of[real] = name
        self._real_of[name] = real
        return name

    def real(self, name: str) -> str:
        """The real id behind an alias; an unknown name passes through unchanged."""
        return self._real_of.get(name, name)


# --- The understand call (model-calls.md §3) ------------------------------------------------

def needs_understand_call(ask: UnderstandAsk) -> bool:
    """Whether there is anything the model must judge (model-calls.md §3.1, zero-call rules).

    False when there is nothing at all to judge, and when only routing is left
    and the candidates are empty or only the floor run's own flow (nothing to
    compare it with). The single-flow shortcut reaches here as empty candidates.
    """
    if ask.mentions or ask.branches or ask.fields:
        return True
    if not ask.candidates:
        return False
    floor_id = ask.floor_run.flow_id if ask.floor_run is not None else (
        ask.floor_flow.get("id") if isinstance(ask.floor_flow, dict) else None)
    ids = {flow.get("id") for flow in ask.candidates}
    return not (floor_id is not None and ids == {floor_id})


def _triggers(flow: dict, kind: str) -> list[dict]:
    return [t for t in (flow.get("on") or []) if isinstance(t, dict) and kind in t]


def _phrases(triggers: list[dict], kind: str, scope: Scope) -> tuple[list[str], list[str]]:
    """Rendered (plain phrases, exclusions) of the given triggers (flows.md §4.3)."""
    raw = [render(p, scope) for t in triggers for p in (t.get(kind) or []) if isinstance(p, str)]
    return split_phrases(raw)


def _mention_trigger(flow: dict) -> dict:
    found = _triggers(flow, "mention")
    return found[0] if found else {}


def _mention_extract(flow: dict) -> dict:
    extract = _mention_trigger(flow).get("extract")
    return extract if isinstance(extract, dict) and extract else {}


SCORE_RUBRIC = ("How to score:\n"
                "- 90–100: explicit keywords and clear intent\n"
                "- 70–89: strong contextual evidence and relevant keywords\n"
                "- 50–69: moderate relevance\n"
                "- 30–49: weak connection or ambiguous\n"
                "- 0–29: minimal or no evidence")


@dataclass
class _UnderstandCall:
    request: GenerateRequest
    aliases: AliasTable


def _understand_call(agent: Agent, ask: UnderstandAsk) -> _UnderstandCall:
    """The understand request: prompt (§3.4), envelope (§3.3) and its alias table (§2.8)."""
    scope = Scope(data=ask.scope.data, context=ask.scope.context)
    aliases = AliasTable()
    candidates, seen = [], set()
    for flow in ask.candidates:
        if flow.get("id") not in seen:
            seen.add(flow.get("id"))
            candidates.append(flow)
    cand = [(aliases.alias(f["id"], "f"), f) for f in candidates]
    ment = [(aliases.alias(f["id"], "f"), f) for f in ask.mentions]
    branches = [(aliases.alias(f"{run_id}/{step_id}/{index}", "q"), render(when, scope) if isinstance(when, str)
                 else str(when)) for run_id, step_id, index, when in ask.branches]
    fields = [(aliases.alias(slug, "d"), slug) for slug in ask.fields]

    properties: dict = {}
    if cand:
        properties["flows"] = _closed_object({
            alias: {"type": ["integer", "null"], "description": f"0-100 fit of the message to {flow_name(f)}"}
            for alias, f in cand})
    if ment:
        properties["mentions"] = _closed_object({
            alias: {"type": ["boolean", "null"], "description": f"true when the customer brought up {flow_name(f)}"}
            for alias, f in ment})
        extracts = {alias: nullable_envelope(_mention_extract(f)) for alias, f in ment if _mention_extract(f)}
        if extracts:
            properties["extract"] = _closed_object(extracts)
    if branches:
        properties["branches"] = _closed_object({
            alias: {"type": ["boolean", "null"], "description": when} for alias, when in branches})
    if fields:
        properties["fields"] = nullable_envelope({alias: agent.fields.get(slug) or {"type": "string"}
                                                  for alias, slug in fields})
    schema = _closed_object(properties)

    system, identity = stable_prefix(agent, scope)
    sections = [identity, (
        "## Task\nJudge the customer's latest message, quoted below, against the conversation so far. "
        "Only the customer's own words are evidence: never the assistant's questions, suggestions or guesses. "
        'Answer with one JSON object in the shape given under "Output".')]
    sections.append(_current_flow_section(agent, ask, scope))
    sections.append(already_known_section(agent, ask.scope.data))
    if cand:
        lines = ["## Flows the customer may want",
                 "Score every flow below from 0 to 100 for how well the customer's latest message fits it, "
                 "the current flow included."]
        for n, (alias, flow) in enumerate(cand, 1):
            lines.append(f"{n}. {alias} — {_named(flow, scope)}")
            plain, excluded = _phrases(_triggers(flow, "message"), "message", scope)
            if plain:
                lines.append(f"   The customer says things like: {'; '.join(plain)}")
            if excluded:
                lines.append(f"   Score 0 when: {'; '.join(excluded)}")
        lines.append(SCORE_RUBRIC)
        sections.append("\n".join(lines))
    if ment:
        lines = ["## Things the customer may mention",
                 "Answer true only on clear, explicit evidence in the customer's message. The phrases of an item "
                 "are alternatives: one match is enough. An exclusion overrides any match."]
        for alias, flow in ment:
            lines.append(f"- {alias} — {_named(flow, scope)}")
            plain, excluded = _phrases([_mention_trigger(flow)], "mention", scope)
            if plain:
                lines.append(f"  Counts when: {'; '.join(plain)}")
            if excluded:
                lines.append(f"  Does not count when: {'; '.join(excluded)}")
            extract = _mention_extract(flow)
            if extract:
                lines.append("  When true, also extract these values from the message:")
                lines += [f"  - {field_line(name, d)}" for name, d in extract.items()]
        sections.append("\n".join(lines))
    if branches:
        sections.append("\n".join(
            ["## Questions about this message",
             "Answer each question with true or false, judging the customer's latest message in the context "
             "of the conversation."] + [f"- {alias}: {when}" for alias, when in branches]))
    if fields:
        sections.append("\n".join(
            ["## Details the customer may have given",
             "Report a value only when the customer gave it in this message. Never guess, and never take a value "
             "from the assistant's words. Use null when it was not given."]
            + [f"- {field_line(alias, agent.fields.get(slug))}" for alias, slug in fields]))
    sections.append(f'## Customer\'s latest message\n"""\n{ask.message}\n"""')
    sections.append(_understand_output_section(schema))
    request = GenerateRequest(system=system, prompt=join_sections(*sections), history=list(ask.history),
                              context=ask.scope.context, schema=schema, schema_name="understand")
    return _UnderstandCall(request=request, aliases=aliases)


def _named(flow: dict, scope: Scope) -> str:
    """``<name>[: <rendered description>]``."""
    text = _render_text(flow.get("description"), scope)
    return f"{flow_name(flow)}: {text}" if text else flow_name(flow)


def _current_flow_section(agent: Agent, ask: UnderstandAsk, scope: Scope) -> str | None:
    """``## Current flow`` (model-calls.md §3.4 item 3), only with a floor run."""
    if ask.floor_run is None and ask.floor_flow is None:
        return None
    flow = ask.floor_flow or {"id": ask.floor_run.flow_id}
    lines = ["## Current flow", f'The conversation is in the flow "{flow_name(flow)}" (id: {flow.get("id")}).']
    description = _render_text(flow.get("description"), scope)
    if description:
        lines.append(f"About this flow: {description}")
    step = ask.floor_step
    if isinstance(step, dict):
        lines.append(f"Current step: {step.get('id')}")
        prompt = _render_text(step.get("prompt"), scope)
        if prompt:
            lines.append(f"What the step is doing: {prompt}")
        if ask.floor_pending:
            lines.append("Still being asked for:")
            lines += [f"- {field_line(slug, agent.fields.get(slug))}" for slug in ask.floor_pending]
    lines.append("The customer may continue here or switch to something else; score the current flow like "
                 "any other.")
    return "\n".join(lines)


_SKELETON_LEAF = {"flows": 0, "mentions": False, "branches": False, "extract": None, "fields": None}
_OUTPUT_LINES = {
    "flows": '"flows": a score from 0 to 100 for every flow under "Flows the customer may want"',
    "mentions": '"mentions": true or false for every item under "Things the customer may mention"',
    "extract": '"extract": for each mention, the values pulled from the message, null when not given',
    "branches": '"branches": true or false for every question under "Questions about this message"',
    "fields": '"fields": each detail the customer gave in this message, null when not given',
}


def _skeleton(node: dict, leaf: Any) -> Any:
    """The schema as an example: object nodes expand into their properties, other nodes are ``leaf``."""
    if isinstance(node, dict) and node.get("type") == "object" and isinstance(node.get("properties"), dict):
        return {key: _skeleton(child, leaf) for key, child in node["properties"].items()}
    return leaf


def _understand_output_section(schema: dict) -> str:
    present = list(schema["properties"])
    skeleton = {key: _skeleton(schema["properties"][key], _SKELETON_LEAF[key]) for key in present}
    return "\n".join(
        ["## Output",
         "Return exactly one JSON object and nothing else: no prose, no code fence. Every key is required; use "
         "null where there is nothing to report."]
        + [f"- {_OUTPUT_LINES[key]}" for key in present]
        + ["The exact shape:", compact_json(skeleton)])


def understand(agent: Agent, ask: UnderstandAsk) -> Judgement:
    """The understand call (model-calls.md §3): one ``generate`` with ``schema_name="understand"``.

    Zero calls and an empty judgement when ``needs_understand_call`` is False.
    A provider exception propagates unchanged (§10.1); a malformed reply logs a
    warning and judges nothing, but still counts as a call (§3.5).
    """
    if not needs_understand_call(ask):
        return Judgement()
    call = _understand_call(agent, ask)
    generation = agent.provider.generate(call.request)
    return read_judgement(generation, call.aliases)


def _judgement_reply(generation: Generation) -> dict | None:
    structured = generation.structured
    if isinstance(structured, dict) and any(key in structured for key in SECTION_KEYS):
        return structured
    found = find_json_object(generation.message)
    if found is not None and any(key in found for key in SECTION_KEYS):
        return found
    return None


def read_score(value: Any) -> "int | float | None":
    """A flow score: a number (not a bool) or a numeric string, finite, clamped to 0..100 (§3.5)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = js_number(value)
    if not isinstance(value, (int, float)):
        return None
    try:
        if not math.isfinite(value):
            return None
    except OverflowError:
        return None
    value = min(100, max(0, value))
    return int(value) if isinstance(value, float) and value.is_integer() else value


def read_judgement(generation: Generation, aliases: AliasTable) -> Judgement:
    """Read an understand reply section by section, mapping aliases back (model-calls.md §3.5)."""
    judgement = Judgement(llm_calls=1, usage=generation.usage)
    reply = _judgement_reply(generation)
    if reply is None:
        text = generation.message if isinstance(generation.message, str) else ""
        log.warning("understand: the reply is not a usable judgement; nothing is judged this turn: %r",
                    text[:200])
        return judgement

    def section(key: str) -> dict:
        value = reply.get(key)
        return value if isinstance(value, dict) else {}

    for key, value in section("flows").items():
        score = read_score(value)
        if score is not None:
            judgement.flows[aliases.real(key)] = score
    for target, key in ((judgement.mentions, "mentions"), (judgement.branches, "branches")):
        for name, value in section(key).items():
            answer = read_boolean(value)
            if answer is not None:
                target[aliases.real(name)] = answer
    for key, value in section("extract").items():
        if isinstance(value, dict):
            judgement.extract[aliases.real(key)] = {name: v for name, v in value.items() if is_known(v)}
    for key, value in section("fields").items():
        if is_known(value):
            judgement.fields[aliases.real(key)] = value
    return judgement


# --- The speak call (model-calls.md §5) -----------------------------------------------------

DEFAULT_COLLECT_GUIDELINE = ("Collect what is still missing below, in the flow of the conversation, "
                             "one or two things per message.")
DEFAULT_ANSWER_GUIDELINE = "Answer the customer's message in the flow of the conversation."
GUIDELINE_HEADING = "## Guideline for your reply (adapt to the conversation)"
TOOLS_SECTION = ("## Tools\nCall the provided tools when something must be looked up or done before you "
                 "answer. Once you have enough, answer the customer.")
WRAP_UP_SECTION = ("## Wrap up\nAnswer the customer now, using the tool results in the conversation. "
                   "Do not call any tools.")


def wire_names(pending: list[str]) -> list[tuple[str, str]]:
    """(slug, wire name) for the speak envelope (model-calls.md §5.4).

    A slug that is a valid property name (and not ``message``) travels as
    itself; any other as ``field_<index>``, skipping to the next free
    ``field_<n>`` when a real slug already uses that name (inferred).
    """
    slugs = list(dict.fromkeys(pending))
    kept = {slug for slug in slugs if WIRE_NAME.fullmatch(slug) and slug != "message"}
    taken = {"message"} | kept
    names = []
    for i, slug in enumerate(slugs):
        if slug in kept:
            names.append((slug, slug))
            continue
        n = i
        while f"field_{n}" in taken:
            n += 1
        taken.add(f"field_{n}")
        names.append((slug, f"field_{n}"))
    return names


def speak_envelope(agent: Agent, wire: list[tuple[str, str]]) -> dict:
    """``{"message", <wire name>...}`` as a nullable envelope (model-calls.md §5.4, §2.7)."""
    definitions: dict = {"message": {"type": "string"}}
    for slug, name in wire:
        definitions[name] = agent.fields.get(slug) or {"type": "string"}
    return nullable_envelope(definitions)


def instruction_line(instruction: dict, scope: Scope) -> str | None:
    """``- [<kind>] [Always] <prompt>[ (apply only when: a OR b)]``, None when the prompt renders empty (§5.2)."""
    prompt = instruction.get("prompt")
    text = render(prompt, scope).strip() if isinstance(prompt, str) else ""
    if not text:
        return None
    when = instruction.get("when")
    whens = [when] if isinstance(when, str) else [w for w in (when or []) if isinstance(w, str)]
    whens = [w for w in whens if w.strip()]
    line = f"- [{instruction.get('kind') or 'should'}] [Always] {text}"
    return line + f" (apply only when: {' OR '.join(whens)})" if whens else line


def instructions_section(instructions: list, scope: Scope) -> str | None:
    lines = [line for line in (instruction_line(i, scope) for i in instructions if isinstance(i, dict)) if line]
    return "## Instructions\n" + "\n".join(lines) if lines else None


def input_section(ask: SpeakAsk) -> str | None:
    """The Input section of model-calls.md §5.3 (message, blank message, retry, speak first)."""
    if ask.input_kind == "message":
        text = (ask.text or "").strip()
        return f'## Customer\'s latest message\n"{text}"' if text else None
    last = ask.history[-1] if ask.history else None
    if isinstance(last, dict) and last.get("role") == "user":
        return ("## Situation\nThe customer's last message, in the conversation above, has no answer yet. "
                "Answer it now.")
    return ("## Situation\nThere is no new message from the customer: you speak first. Open naturally; do not "
            "answer a question nobody asked.")


def response_format_section(agent: Agent, wire: list[tuple[str, str]]) -> str:
    lines = ["## Response format",
             'Answer with one JSON object and nothing else: no text around it, no code fences. "message" is what '
             "you say to the customer, as natural text; it never contains field names, keys or raw values."]
    for slug, name in wire:
        lines.append(f'- "{name}": {field_line(slug, agent.fields.get(slug))}. '
                     "The value the customer gave, or null.")
    if wire:
        lines += ["Rules for these properties:",
                  "- Fill a property only with what the customer actually said, in this message or earlier; "
                  "never guess.",
                  "- When the customer gives several details at once, take every one of them.",
                  "- A property the customer did not answer stays null: never a question or a placeholder.",
                  "- Write the property names exactly as shown."]
    return "\n".join(lines)


def _render_text(text: Any, scope: Scope) -> str:
    return render(text, scope).strip() if isinstance(text, str) else ""


def speak_prompt(agent: Agent, ask: SpeakAsk, wire: list[tuple[str, str]]) -> tuple[str | None, str]:
    """(system, prompt without the round section) for a talk step or the idle speaker (§5.3).

    A step ``prompt`` that renders blank counts as absent, so the default
    guideline applies (inferred: a heading with nothing under it helps nobody).
    """
    scope = ask.scope
    system, identity = stable_prefix(agent, scope)
    if ask.step is None:
        idle = agent.idle if isinstance(agent.idle, dict) else {}
        return system, join_sections(
            identity, f"{GUIDELINE_HEADING}\n{_render_text(idle.get('prompt'), scope)}".strip(),
            instructions_section(ask.instructions, scope), input_section(ask),
            response_format_section(agent, []))
    flow = ask.flow or {}
    flow_text = flow_name(flow) if flow else ""
    if flow.get("description"):
        flow_text += f": {flow['description']}"
    guideline = _render_text(ask.step.get("prompt"), scope) or (
        DEFAULT_COLLECT_GUIDELINE if ask.pending else DEFAULT_ANSWER_GUIDELINE)
    return system, join_sections(
        identity, f"## Flow\n{flow_text}" if flow_text else None, f"{GUIDELINE_HEADING}\n{guideline}",
        _still_to_collect_section(agent, ask), already_known_section(agent, scope.data),
        instructions_section(ask.instructions, scope), input_section(ask), response_format_section(agent, wire))


def _still_to_collect_section(agent: Agent, ask: SpeakAsk) -> str | None:
    if not ask.pending:
        return None
    step_ask = ask.step.get("ask") if isinstance(ask.step.get("ask"), dict) else {}
    lines = ["## Still to collect",
             "Ask for these in this order, at the pace the guideline sets. If the customer's message already "
             "gives one of them, take it and do not ask for it again."]
    for slug in ask.pending:
        definition = agent.fields.get(slug)
        lines.append(f"- {field_line(slug, definition)}")
        wording = step_ask.get(slug)
        if wording is None and isinstance(definition, dict):
            wording = definition.get("ask")
        how = _render_text(wording, ask.scope)
        if how:
            lines.append(f"  How to ask: {how}")
    return "\n".join(lines)


@dataclass
class _Round:
    """One speak round's reply as read by model-calls.md §5.5."""
    message: str
    fields: dict
    calls: list            # (name, arguments, thought_signature)
    reasoning: str | None = None
    reasoning_details: Any = None


def read_round(generation: Generation, wire: list[tuple[str, str]]) -> _Round:
    """Message, field values and tool calls of one speak round (model-calls.md §5.5).

    Text that looks like an envelope but does not parse reads as "" so it can
    never reach the customer.
    """
    raw = generation.message if isinstance(generation.message, str) else ""
    parsed = generation.structured if isinstance(generation.structured, dict) else find_json_object(raw)
    if parsed is not None:
        message = parsed["message"] if isinstance(parsed.get("message"), str) else ""
        fields = {slug: parsed[name] for slug, name in wire if is_known(parsed.get(name))}
    else:
        message = "" if ENVELOPE_SHAPED.match(raw) else raw
        fields = {}
    calls = []
    for call in generation.tool_calls or []:
        get = call.get if isinstance(call, dict) else (lambda key, c=call: getattr(c, key, None))
        name = get("name")
        if isinstance(name, str) and name:
            calls.append((name, tool_arguments(get("arguments")), get("thought_signature")))
    reasoning = generation.reasoning if isinstance(generation.reasoning, str) and generation.reasoning else None
    details = generation.reasoning_details if isinstance(generation.reasoning_details, list) else None
    return _Round(message, fields, calls, reasoning, details)


_DEFERRAL_CODES = {
    "timeout": ("provider-unavailable", True), "network": ("provider-unavailable", True),
    "overload": ("provider-unavailable", True), "rate": ("provider-unavailable", True),
    "unknown": ("provider-unavailable", True), "aborted": ("provider-unavailable", False),
    "quota": ("provider-quota", False), "auth": ("provider-auth", False),
    "entitlement": ("provider-auth", False), "model": ("provider-invalid", False),
    "invalid": ("provider-invalid", False), "content": ("provider-invalid", False),
    "context": ("provider-context", False),
}


def classify_deferral(error: BaseException) -> tuple[str, bool, int | None]:
    """(code, retryable, reset_at_ms) of a failed speak round (model-calls.md §10.2)."""
    if not isinstance(error, ProviderError):
        return "provider-unavailable", True, None
    code, retryable = _DEFERRAL_CODES.get(error.kind, ("provider-unavailable", True))
    if error.kind == "quota":
        retryable = error.reset_at_ms is not None
    if error.should_retry is not None:
        retryable = bool(error.should_retry)
    return code, retryable, error.reset_at_ms


def _stream_round(provider: Any, request: GenerateRequest):
    """Stream one round: yield decoded deltas, return the round as a Generation (model-calls.md §8).

    The returned message is the raw accumulated text, read by ``read_round``
    exactly as ``generate``'s would be, so a streamed turn returns the same
    result as ``turn()`` for the same provider output, broken envelopes included.
    """
    decoder = StreamDecoder()
    raw, structured, tool_calls, usage = "", None, [], None
    reasoning, details, metadata = None, None, {}
    for chunk in provider.generate_stream(request):
        raw = chunk.accumulated if isinstance(chunk.accumulated, str) else raw + (chunk.delta or "")
        _, delta = decoder.push(raw)
        if delta:
            yield delta
        if chunk.structured is not None:
            structured = chunk.structured
        if chunk.tool_calls:
            tool_calls = list(chunk.tool_calls)
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.reasoning:
            reasoning = chunk.reasoning
        if chunk.reasoning_details is not None:
            details = chunk.reasoning_details
        if chunk.metadata:
            metadata = chunk.metadata
    return Generation(message=raw, structured=structured, tool_calls=tool_calls, usage=usage,
                      reasoning=reasoning, reasoning_details=details, metadata=metadata)


def _overlay(data: dict, patch: dict) -> dict:
    """``session.data`` overlaid with the call's patches; a key patched to None is left out (§6.6)."""
    view = dict(data)
    merge_patch(view, patch)
    return view


def speak(agent: Agent, ask: SpeakAsk, streaming: bool):
    """The speak call and its tool rounds (model-calls.md §5-§6, the Tool seed page).

    A generator: ``result = yield from speak(agent, ask, streaming)``. While
    streaming it yields text deltas (``provider.generate_stream`` through a
    ``StreamDecoder``); otherwise it uses ``provider.generate`` and yields
    nothing. It returns ``Spoken`` or ``Deferred`` and never raises for a
    provider failure or a tool.
    """
    wire = wire_names(ask.pending) if ask.step is not None else []
    system, base = speak_prompt(agent, ask, wire)
    schema = speak_envelope(agent, wire)
    declarations = [{"name": t.id, "description": t.description, "parameters": t.parameters} for t in ask.tools]
    tools_by_id: dict[str, Tool] = {}
    for tool in ask.tools:
        tools_by_id.setdefault(tool.id, tool)
    loops = max(0, agent.max_tool_loops if isinstance(agent.max_tool_loops, int) else 5)
    history = list(ask.history)
    fields: dict = {}
    data: dict = {}
    usage: TokenUsage | None = None
    calls = 0
    round_no = 0
    while True:
        offer = bool(ask.tools) and round_no < loops
        section = TOOLS_SECTION if offer else WRAP_UP_SECTION if round_no > 0 else None
        request = GenerateRequest(system=system, prompt=join_sections(base, section), history=list(history),
                                  context=ask.scope.context, schema=copy.deepcopy(schema), schema_name="speak",
                                  tools=[dict(d) for d in declarations] if offer else None)
        calls += 1
        try:
            if streaming:
                generation = yield from _stream_round(agent.provider, request)
            else:
                generation = agent.provider.generate(request)
            reply = read_round(generation, wire)
            round_usage = add_usage(usage, generation.usage)
        except Exception as error:
            code, retryable, reset_at_ms = classify_deferral(error)
            log.warning("speak: call %d failed (%s): %s", calls, code, error)
            return Deferred(code=code, retryable=retryable, reset_at_ms=reset_at_ms, llm_calls=calls, usage=usage)
        usage = round_usage
        fields.update(reply.fields)
        message = reply.message
        if not offer or not reply.calls:
            break
        ctx = ToolCtx(context=ask.scope.context, data=_overlay(ask.scope.data, data), history=list(history),
                      run=ask.run, now=ask.now)
        results = run_tool_calls(tools_by_id, reply.calls, ctx)
        if round_no == 0 and not (history and isinstance(history[-1], dict) and history[-1].get("role") == "user"):
            history.append({"role": "user", "content": (ask.text or "") if ask.input_kind == "message" else base})
        history.append(_assistant_item(round_no, reply))
        for i, ((name, _, _), (text, _)) in enumerate(zip(reply.calls, results)):
            history.append({"role": "tool", "tool_call_id": f"call-{round_no}-{i}", "name": name, "content": text})
        for _, patch in results:
            if patch:
                data.update(patch)
        round_no += 1
    text = message.strip()
    if not text:
        log.warning("speak: the reply is blank after %d call(s); the speaker defers", calls)
        return Deferred(code="provider-unavailable", retryable=True, llm_calls=calls, usage=usage)
    return Spoken(message=text, fields=fields, data=data, llm_calls=calls, usage=usage)


def _assistant_item(round_no: int, reply: _Round) -> dict:
    """The assistant history item of a round that called tools (model-calls.md §6.7)."""
    tool_calls = []
    for i, (name, arguments, signature) in enumerate(reply.calls):
        call = {"id": f"call-{round_no}-{i}", "name": name, "arguments": arguments}
        if isinstance(signature, str) and signature:
            call["thoughtSignature"] = signature
        tool_calls.append(call)
    item = {"role": "assistant", "content": reply.message if reply.message.strip() else None,
            "tool_calls": tool_calls}
    if reply.reasoning:
        item["reasoning"] = reply.reasoning
    if reply.reasoning_details is not None:
        item["reasoningDetails"] = reply.reasoning_details
    return item


# --- Tool calls (model-calls.md §6.3-§6.6) --------------------------------------------------

def tool_payload(payload: dict) -> str:
    """An error payload the model reads: compact JSON, non-ASCII kept, never truncated (§6.3)."""
    try:
        return compact_json(payload)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return compact_json({"error": str(payload.get("error"))})


def tool_value_text(value: Any, limit: Any = None) -> str:
    """What the model reads from a tool's ``value``, cut at ``limit`` characters (model-calls.md §6.5)."""
    if value is None:
        text = '{"ok":true}'
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = compact_json(value)
        except (TypeError, ValueError, OverflowError, RecursionError):
            text = "[result could not be serialized]"
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 and len(text) > limit:
        text = f"{text[:limit]}\n[truncated: {len(text)} chars total, showing the first {limit}]"
    return text


def _verdict(result: Any, ok_key: str, why_key: str) -> tuple[bool, Any, Any]:
    """(passes, why, correctedInput) of a validate/permission hook result.

    None passes; a dataclass or a dict with the spec keys is read; a bare bool
    is read as the answer itself (inferred: what a user writing ``lambda a, c:
    True`` expects).
    """
    if result is None:
        return True, None, None
    if isinstance(result, bool):
        return result, None, None
    if isinstance(result, dict):
        corrected = result.get("correctedInput", result.get("corrected_input"))
        return bool(result.get(ok_key)), result.get(why_key), corrected
    return bool(getattr(result, ok_key, False)), getattr(result, why_key, None), \
        getattr(result, "corrected_input", None)


def _copy_args(arguments: dict) -> dict:
    try:
        return copy.deepcopy(arguments)
    except Exception:
        return dict(arguments)


def run_tool(tool: Tool | None, name: str, arguments: dict, ctx: ToolCtx) -> tuple[str, dict | None]:
    """One call through its gates (model-calls.md §6.3): (what the model reads, data patch or None).

    Never raises: a hook or handler that raises becomes ``{"error": ...}``.
    """
    if tool is None:
        return tool_payload({"error": f'Tool "{name}" is not available.'}), None
    args = _copy_args(arguments)
    try:
        if tool.validate_input is not None:
            valid, error, corrected = _verdict(tool.validate_input(args, ctx), "valid", "error")
            if not valid:
                payload = {"error": f"Validation failed: {'invalid input' if error is None else error}"}
                if corrected is not None:
                    payload["correctedInput"] = corrected
                return tool_payload(payload), None
        if tool.check_permissions is not None:
            allowed, reason, _ = _verdict(tool.check_permissions(args, ctx), "allowed", "reason")
            if not allowed:
                why = "not allowed" if reason is None else reason
                return tool_payload({"error": f"Permission denied: {why}"}), None
        result = tool.handler(args, ctx)
    except Exception as error:
        log.warning('tool "%s" raised: %s', tool.id, error)
        return tool_payload({"error": str(error)}), None
    if result is None:
        value, data = None, None
    elif isinstance(result, ToolResult):
        value, data = result.value, result.data
    elif isinstance(result, dict):
        value, data = result.get("value"), result.get("data")
    else:
        log.warning('tool "%s" returned %s, not a ToolResult or a dict; read as an empty result',
                    tool.id, type(result).__name__)
        value, data = None, None
    if data is not None and not isinstance(data, dict):
        log.warning('tool "%s" returned data that is not a dict; ignored', tool.id)
        data = None
    return tool_value_text(value, tool.max_result_size_chars), data


def is_safe_call(tool: Tool | None, arguments: dict) -> bool:
    """May this call run beside others (model-calls.md §6.4)? A hook that raises means no."""
    if tool is None:
        return False
    try:
        if tool.is_destructive is not None and tool.is_destructive(arguments):
            return False
        if tool.is_concurrency_safe is not None:
            return bool(tool.is_concurrency_safe(arguments))
        if tool.is_read_only is not None:
            return bool(tool.is_read_only(arguments))
    except Exception as error:
        log.warning('tool "%s": a concurrency hook raised (%s); the call runs alone', tool.id, error)
    return False


def run_tool_calls(tools_by_id: dict, calls: list, ctx: ToolCtx) -> list[tuple[str, dict | None]]:
    """Run a round's calls in batches, results in call order (model-calls.md §6.4).

    A run of consecutive safe calls runs together in a thread pool, one worker
    per call; any other call runs alone. A batch starts when the previous ended.
    """
    tools = [tools_by_id.get(name) for name, _, _ in calls]
    safe = [is_safe_call(tool, _copy_args(args)) for tool, (_, args, _) in zip(tools, calls)]
    results: list = [None] * len(calls)
    i = 0
    while i < len(calls):
        end = i + 1
        if safe[i]:
            while end < len(calls) and safe[end]:
                end += 1
        if end - i == 1:
            results[i] = run_tool(tools[i], calls[i][0], calls[i][1], ctx)
        else:
            with ThreadPoolExecutor(max_workers=end - i) as pool:
                futures = [pool.submit(run_tool, tools[k], calls[k][0], calls[k][1], ctx) for k in range(i, end)]
                for k, future in zip(range(i, end), futures):
                    results[k] = future.result()
        i = end
    return results


# --- Compaction (model-calls.md §9) ---------------------------------------------------------

SUMMARY_MARKER = "[Conversation Summary]\n"
SUMMARY_REQUEST = ("Summarize the conversation below concisely. Keep the key facts, the decisions made and the "
                   "context needed to continue it; leave out small talk.")


def _content_text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else item
    if isinstance(content, str):
        return content
    return "" if content is None else _json_text(content)


def estimate_tokens(history: list) -> int:
    """Characters of content and name, plus 4 per item, over 4, rounded up (model-calls.md §9.3)."""
    total = 0
    for item in history:
        name = item.get("name") if isinstance(item, dict) else None
        total += len(_content_text(item)) + (len(name) if isinstance(name, str) else 0) + 4
    return -(-total // 4)


def _is_tool_item(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "tool"


def compact_history(agent: Agent, history: list) -> tuple[list, int, TokenUsage | None]:
    """Trim the turn's history to the compaction budget (model-calls.md §9).

    Returns ``(history, llm_calls, usage)``; ``(history, 0, None)`` with no
    config, ``enabled: False`` or an empty history. Layers, cheapest first:
    none, tool_result_budget, micro_compact, auto_compact (one summary call;
    when it fails, the oldest messages are dropped instead). Never raises.
    """
    config = agent.compaction
    if not isinstance(config, dict) or config.get("enabled") is False or not history:
        return history, 0, None
    try:
        return _compact(agent, config, list(history))
    except Exception as error:  # a malformed config or item: keep the history as it is
        log.warning("compaction: skipped (%s)", error)
        return history, 0, None


def _compact(agent: Agent, config: dict, history: list) -> tuple[list, int, TokenUsage | None]:
    threshold = config["maxTokens"] * config.get("compactionThreshold", 0.8)
    keep = config.get("preserveRecentCount", 4)
    limit = config.get("maxToolResultChars", 5000)
    if estimate_tokens(history) < threshold:
        return history, 0, None
    edge = len(history) - min(keep, len(history))
    budgeted = list(history)
    for i in range(edge):
        text = _content_text(budgeted[i])
        if _is_tool_item(budgeted[i]) and len(text) > limit:
            budgeted[i] = {**budgeted[i],
                           "content": f"{text[:limit]}\n\n[Truncated: {len(text)} chars total, showing first {limit}]"}
    if estimate_tokens(budgeted) < threshold:
        return budgeted, 0, None
    micro = list(budgeted)
    for i in range(edge):
        if _is_tool_item(micro[i]):
            micro[i] = {**micro[i], "content": re.sub(r"\s+", " ", _content_text(micro[i])).strip()}
    if estimate_tokens(micro) < threshold:
        return micro, 0, None
    while 0 < edge < len(micro) and _is_tool_item(micro[edge]):
        edge -= 1
    if edge == 0:  # nothing older than the window to summarize: a call would buy nothing (inferred)
        return micro, 0, None
    older, window = micro[:edge], micro[edge:]
    transcript = "\n".join(f"[{item.get('role') if isinstance(item, dict) else ''}]: {_content_text(item)}"
                           for item in older)
    request = GenerateRequest(system=None, prompt=f"{SUMMARY_REQUEST}\n\n{transcript}", history=[], context={},
                              schema=None, schema_name="compaction", tools=None, max_output_tokens=1024)
    try:
        generation = agent.provider.generate(request)
        summary = generation.message if isinstance(generation.message, str) else ""
    except Exception as error:
        log.warning("compaction: the summary call failed (%s); dropping the oldest messages instead", error)
        kept = list(window)
        for item in reversed(older):
            if estimate_tokens([item] + kept) >= threshold:
                break
            kept.insert(0, item)
        return kept, 1, None
    return [{"role": "system", "content": SUMMARY_MARKER + summary}] + window, 1, generation.usage

# <<< model calls <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 11. Streaming ###############################################################

# >>> streaming (helper region: the envelope stream decoder) >>>>>>>>>>>>>>>>>>

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_PLAIN_RUN = re.compile(r'[^"\\]+')


def _decode_json_string(raw: str) -> str:
    try:
        return json.loads(f'"{raw}"', strict=False)
    except ValueError:
        return raw


class StreamDecoder:
    """Turn a streamed speak envelope into the customer's text as it grows (model-calls.md §8).

    ``push(accumulated) -> (text, delta)``: feed the provider's ``accumulated``
    text (everything so far); get back the reply text so far and the part that
    is new since the previous push ("" when nothing is). One decoder per round.

    - A JSON object: the decoded value of its top-level ``"message"`` string.
      Keys before it are skipped with their values; a nested ``"message"`` is
      never taken; an incomplete escape (``\\``, a partial ``\\uXXXX``, a high
      surrogate waiting for its pair) is held back. A ``null`` or non-string
      message gives "".
    - A leading fence of three or more backticks is skipped to the end of its
      line; while only backticks have arrived nothing is emitted; one or two
      backticks are prose. Behind a fence, text that is not an object gives "".
    - Anything else is prose and passes through verbatim.
    - When ``accumulated`` does not extend the previous push the decoder starts
      over; when the new text does not extend the previous text, the whole new
      text is the delta.

    Work is incremental: each push scans only the new characters.
    """

    def __init__(self):
        self.text = ""
        self._restart()

    def _restart(self) -> None:
        self._source = ""
        self._pos = 0
        self._mode = "start"       # start, prose, fence, fenced, json, message, done
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._key: str | None = None    # raw text of a top-level key being read
        self._last_key: str | None = None
        self._expect = "key"       # at depth 1: key, colon, value, inside (a value is being skipped)
        self._parts: list[str] = []

    def push(self, accumulated: str) -> tuple[str, str]:
        """Feed everything received so far; return (text so far, new part since the last push)."""
        accumulated = accumulated if isinstance(accumulated, str) else ""
        if not accumulated.startswith(self._source):
            self._restart()
        self._source = accumulated
        self._scan()
        text = self._source if self._mode == "prose" else "".join(self._parts)
        delta = text[len(self.text):] if text.startswith(self.text) else text
        self.text = text
        return text, delta

    def _scan(self) -> None:
        src, n = self._source, len(self._source)
        while self._pos < n:
            if self._mode == "start":
                i = self._pos
                while i < n and src[i].isspace():
                    i += 1
                if i >= n:
                    return
                if src[i] == "{":
                    self._pos, self._mode = i, "json"
                elif src[i] == "`":
                    j = i
                    while j < n and src[j] == "`":
                        j += 1
                    if j >= n:
                        return                      # only backticks so far: wait
                    if j - i >= 3:
                        self._pos, self._mode = j, "fence"
                    else:
                        self._mode = "prose"
                else:
                    self._mode = "prose"
            elif self._mode == "fence":
                newline = src.find("\n", self._pos)
                if newline < 0:
                    self._pos = n
                    return
                self._pos, self._mode = newline + 1, "fenced"
            elif self._mode == "fenced":
                i = self._pos
                while i < n and src[i].isspace():
                    i += 1
                if i >= n:
                    self._pos = n
                    return
                self._pos, self._mode = i, ("json" if src[i] == "{" else "done")
            elif self._mode == "json":
                self._scan_json()
            elif self._mode == "message":
                self._scan_message()
                return
            else:                                   # prose is read whole; done reads nothing more
                return

    def _scan_json(self) -> None:
        """Walk the object's structure until the top-level "message" string starts."""
        src, n = self._source, len(self._source)
        i = self._pos
        while i < n:
            c = src[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
                    if self._key is not None:
                        self._last_key, self._key, self._expect = _decode_json_string(self._key), None, "colon"
                    i += 1
                    continue
                if self._key is not None:
                    self._key += c
                i += 1
                continue
            if c.isspace():
                i += 1
                continue
            if self._depth == 1 and self._expect == "value":
                self._expect = "inside"
                if self._last_key == "message":
                    self._pos, self._mode = (i + 1, "message") if c == '"' else (i, "done")
                    return
            if c == '"':
                self._in_string = True
                if self._depth == 1 and self._expect == "key":
                    self._key = ""
            elif c in "{[":
                self._depth += 1
                if self._depth == 1:
                    self._expect = "key"
            elif c in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self._pos, self._mode = i + 1, "done"
                    return
            elif c == ":" and self._depth == 1:
                self._expect = "value"
            elif c == "," and self._depth == 1:
                self._expect = "key"
            i += 1
        self._pos = n

    def _scan_message(self) -> None:
        """Decode the message string's characters, holding back an incomplete escape."""
        src, n = self._source, len(self._source)
        i = self._pos
        while i < n:
            c = src[i]
            if c == '"':
                self._pos, self._mode = i + 1, "done"
                return
            if c != "\\":
                run = _PLAIN_RUN.match(src, i)
                self._parts.append(run.group(0))
                i = run.end()
                continue
            if i + 1 >= n:
                break
            e = src[i + 1]
            if e != "u":
                self._parts.append(_ESCAPES.get(e, e))
                i += 2
                continue
            digits = src[i + 2:i + 6]
            if len(digits) < 4 and _HEX4.match(digits.ljust(4, "0")):
                break                                # a partial \uXXXX: wait for the rest
            if not _HEX4.fullmatch(digits):
                self._parts.append("u")              # not an escape after all: keep the text
                i += 2
                continue
            code = int(digits, 16)
            if 0xD800 <= code < 0xDC00:
                rest = src[i + 6:i + 12]
                if len(rest) < 6 and (rest == "" or _PARTIAL_ESCAPE.fullmatch(rest)):
                    break                            # a high surrogate may be followed by its pair
                if _LOW_SURROGATE.fullmatch(rest):
                    low = int(rest[2:], 16)
                    self._parts.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
            self._parts.append(chr(code))
            i += 6
        self._pos = i

# <<< streaming <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<


# 12. JSON and migration ######################################################

# >>> flow spec JSON (helper region: from_spec, to_spec, flow_spec_schema) >>>>

def from_spec(spec: Any) -> dict:
    """A stored FlowSpec as a flow dict: Nones and kinds stripped, shape checked (persistence.md §1.7)."""
    raise NotImplementedError("from_spec lands with the Foundation issue (validation)")


def to_spec(flow: dict) -> dict:
    """A flow as a FlowSpec: every step with its kind (persistence.md §1.8)."""
    raise NotImplementedError("to_spec lands with the Foundation issue (validation)")


def flow_spec_schema(registries: dict | None = None) -> dict:
    """A JSON Schema of a FlowSpec for this agent's names (persistence.md §1.12)."""
    raise NotImplementedError("flow_spec_schema lands with the Foundation issue (validation)")

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
