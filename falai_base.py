"""falai_base: the ground floor of falai. The building blocks every other module stands on.

It imports no other falai module, so any module may import it: the records of the API and the
provider seam, errors, time, templates and predicates, field values, the session and its blob, the
keys and flow readers the engine's parts share, the records the engine hands the model calls, and
the readers of model text. ``falai`` (the engine and the public API) re-exports its public names;
``import falai`` is all a user needs.

Sections, in the order a turn meets them:

   1. Public types ............ the API's dataclasses, the provider seam, OUTCOME_MESSAGES
   2. Errors .................. FalaiError and its four subclasses, ScriptError, classify_error
   3. Time .................... durations, ISO text, epoch milliseconds, clocks, fake_clock
   4. Templates and predicates  JavaScript-style values, {{data.x}} rendering, judge(), show()
   5. Fields .................. known values, coercion of model values, evidence, nullable schemas
   6. The session ............. Session, Run, writing and reading the v4 blob, nesting
   7. Keys and flow readers ... claim key parts, a flow's triggers, json_copy, reused
   8. Model-call records ...... UnderstandAsk, Judgement, SpeakAsk, Spoken, Deferred
   9. Reading model text ...... lenient JSON: find_json_object, lenient_loads, unfenced

The spec's numbers sit in one block right after the logger. A section opens with a banner
``# N. Name ####``; its parts with ``# Part (spec section) ----``. Comments cite the spec in
``docs/spec`` as "runtime.md §3.2".

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields as dataclass_fields
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, runtime_checkable

if TYPE_CHECKING:
    import logging

__version__ = "0.1.0"         # falai's version: setup.cfg and falai.__version__ read it here


class _FalaiLog:
    """The "falai" logger, looked up on first use: ``import falai`` neither imports logging nor
    creates a logger. An attribute is the logger's own bound method, so a record still names the
    engine function that logged it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(falai_logger(), name)


# logging keeps one logger per name for the process's life: remembering it changes nothing
@functools.cache
def falai_logger() -> logging.Logger:
    """``logging.getLogger("falai")``, importing logging on the first call."""
    import logging
    return logging.getLogger("falai")


log = _FalaiLog()
# logging.DEBUG, named here so that a level check need not import logging
DEBUG = 10


# The spec's numbers, in one place ------------------------------------------------------------

# a flow routes only when it scores at least this (runtime.md §3.5 rule 3)
ROUTE_MIN_SCORE = 40
# ... and, with an asker, beats the asker's flow by this much (§3.5 rule 3)
ROUTE_OVER_ASKER = 15
# a start at this chaining depth is skipped "hop-limit" (runtime.md §5 rule 4)
HOP_LIMIT = 5
# the session's last message ids, for duplicate-input (runtime.md §3.2, §13)
INPUTS_KEPT = 50
OUTCOMES_KEPT = 50             # each run keeps its last outcome lines (runtime.md §4.1, §11.1)
ALWAYS_CLAIMS_KEPT = 50        # "always" claims kept per flow and anchor (runtime.md §6.1, §13)
STEP_CAP = 50                  # step executions in one move before "step-loop" (runtime.md §3.6.1)
# a timer wait this short rides inline on the next message (runtime.md §3.6.3)
SHORT_WAIT_MS = 10_000
DEFAULT_UP_TO = "30d"          # an event wait's default upTo (runtime.md §3.6.3, flows.md §5.7)
DEFAULT_MAX_ASKS = 3           # a collect step's default maxAsks (flows.md §2.2)
UNLIMITED_ASKS = "unlimited"   # a maxAsks that never gives up (falai for Python, flows.md §2.2)
DEFAULT_MAX_TOOL_LOOPS = 5     # the agent's default max_tool_loops (model-calls.md §6.2)
TOOL_POOL_WORKERS = 8          # safe tool calls running at once, per agent (model-calls.md §6.4)
FIELD_ENVELOPES_KEPT = 256     # field-envelope schemas an agent keeps for reuse, a bound on memory
UNDERSTAND_PLANS_KEPT = 64     # understand envelopes (and harvest lists) kept per agent, a bound
# a talk step's speak retry wakes (runtime.md §10.2, §13)
RETRY_LADDER = ("1m", "5m", "15m", "1h", "6h")


# 1. Public types ##############################################################################
#
# Objects that carry code or results are dataclasses (python-api.md, Two rules); the records a turn
# passes between its phases are dataclasses too, slotted (docs/guide/development.md).
# Declarative data (flows, steps, fields, the blob) stays plain JSON dicts.


@dataclass
class TokenUsage:
    """Token counts reported by a provider, summed over a turn's calls.

    ``reasoning_tokens`` is the part of ``completion_tokens`` the model spent
    thinking, where the vendor reports it (0 otherwise)."""
    prompt_tokens: int
    completion_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int = 0


def add_usage(a: TokenUsage | None, b: TokenUsage | None) -> TokenUsage | None:
    """Sum two usages field by field; None means "nobody counted" (model-calls.md §7)."""
    if a is None or b is None:
        return a if b is None else b
    return TokenUsage(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens,
                      a.cached_input_tokens + b.cached_input_tokens,
                      a.reasoning_tokens + b.reasoning_tokens)


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
    # protocol "lean" (docs/guide/tokens.md): mark the end of the history as a cache breakpoint
    # where the vendor wants one (Anthropic), and the turn's v4 envelope, which only a
    # ScriptedProvider reads (to check a reply scripted in the v4 form); the HTTP providers never
    # send it.
    cache_history: bool = False
    v4_schema: dict | None = None
    # The customer's message this call reads (the understand call's, or the one a speak call
    # answers); None when there is none. For a test double such as a ScriptedProvider callable;
    # never sent.
    message: str | None = None


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
    """What a tool's ``validate_input`` returns (the Tool seed page)."""
    valid: bool
    error: str | None = None
    corrected_input: dict | None = None


@dataclass
class ToolPermissionResult:
    """What a tool's ``check_permissions`` returns (the Tool seed page)."""
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
    run: Run | None
    now: datetime


@dataclass
class Tool:
    """A function the model may call while phrasing a reply (the Tool seed page)."""
    id: str
    handler: Callable[[dict, ToolCtx], ToolResult | dict | None]
    description: str | None = None
    parameters: dict | None = None
    is_concurrency_safe: Callable[[dict], bool] | None = None
    is_read_only: Callable[[dict], bool] | None = None
    is_destructive: Callable[[dict], bool] | None = None
    max_result_size_chars: int | None = None
    validate_input: Callable[[dict, ToolCtx], ToolValidationResult | dict] | None = None
    check_permissions: Callable[[dict, ToolCtx], ToolPermissionResult | dict] | None = None


@dataclass
class PredCtx:
    """What a predicate sees (flows.md §7.5)."""
    context: Any
    data: dict
    input: Any
    run: Run | None
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
    run: Run
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
    run: Callable[[dict, ActionCtx], ActionResult | dict | None]
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
    """A run the turn started (runtime.md §12)."""
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
        """The line as the blob stores it: camelCase keys in OUTCOME_KEYS order, absent values
        omitted."""
        values = (self.run_id, self.flow_id, self.step_id, self.key, self.kind, self.status,
                  self.code, self.message, self.detail, self.next, self.until, self.at,
                  self.llm_calls)
        return {camel: value for camel, value in zip(OUTCOME_CAMEL, values) if value is not None}

    @classmethod
    def from_dict(cls, line: dict) -> StepOutcome:
        values: dict[str, Any] = {attr: line.get(camel) for attr, camel in OUTCOME_KEYS.items()}
        return cls(**values)


OUTCOME_KEYS = {"run_id": "runId", "flow_id": "flowId", "step_id": "stepId", "key": "key",
                "kind": "kind", "status": "status", "code": "code", "message": "message",
                "detail": "detail", "next": "next", "until": "until", "at": "at",
                "llm_calls": "llmCalls"}
# the order StepOutcome.to_dict reads its values in
OUTCOME_CAMEL = tuple(OUTCOME_KEYS.values())


@dataclass
class FlowValidation:
    """What ``validate_flow`` returns when a flow can run: its warnings."""
    warnings: list[str] = field(default_factory=list)


@dataclass
class Problem:
    """One finding of ``check_flow``: ``severity`` is "error" (the flow cannot run) or "warning".

    ``path`` leads from the flow to the spot, keys and list indexes:
    ``["steps", 2, "thne"]``; ``[]`` is the flow itself. ``message`` is the
    text ``validate_flow`` raises or warns with ("<where>: <what>. <fix>").
    """
    severity: str
    path: list
    message: str


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
    "tool-only": "only a tool, an action or the host writes this field",
    "not-asked": "the model was not asked for this field in this call",
    "unsaid": "the customer's own message does not say this value",
    "bad-format": "the value is not in the field's format",
    "refused": "the field's validator refused the value",
    "corrected": "the customer corrected a known value",
    "repeat-spent": "the message flow already ran as often as its trigger's repeat allows",
    "no-route": "no flow took the message and the idle speaker is silent",
    "unknown-event": "no event by that name is registered on the agent",
    "provider-quota": "the provider's usage limit is spent",
    "provider-context": "the conversation outgrew the model's context window",
    "provider-auth": "the provider rejected the credentials",
    "provider-invalid": "the provider rejected the request",
    "provider-unavailable": "the model call failed or came back empty",
    "provider-length": "the model's reply was cut at its output cap",
}


# 2. Errors ####################################################################################

class FalaiError(Exception):
    """Base class of every error falai raises on purpose."""


class FlowConfigurationError(FalaiError):
    """A flow cannot run (or cannot be stored) as written. The message starts with its class
    name."""

    def __init__(self, message: str):
        if not message.startswith("[FlowConfigurationError]"):
            message = f"[FlowConfigurationError] {message}"
        super().__init__(message)


class InvalidSessionError(FalaiError):
    """A stored blob is not a v4 session for its id (persistence.md §2.5)."""

    def __init__(self, session_id: str, why: str):
        self.session_id = session_id
        self.why = why
        super().__init__(f'[InvalidSessionError] stored session "{session_id}" is unreadable: '
                         f'{why}. Repair or delete the row; it is never replaced by a fresh '
                         'conversation.')


class SessionConflictError(FalaiError):
    """A store refused a save: the stored version is not the expected one (persistence.md
    Part 5)."""

    def __init__(self, session_id: str, expected_version: int, actual_version: int | None):
        self.session_id = session_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        if actual_version is None and expected_version > 0:
            text = (f'[SessionConflictError] Session "{session_id}" is gone from the store: it was '
                    f'at version {expected_version} and has since been deleted or expired. Load it '
                    'again; a load that finds nothing starts a new conversation.')
        else:
            found = "none" if actual_version is None else actual_version
            text = (f'[SessionConflictError] Session "{session_id}" was modified concurrently: '
                    f'expected version {expected_version}, found {found}. Reload the session and '
                    'retry the operation.')
        super().__init__(text)


class ScriptError(RuntimeError):
    """A strict ScriptedProvider's script does not fit the calls the engine made: the test is wrong.

    The engine lets it through instead of treating it as a provider failure, so
    ``turn()`` raises it and the test fails where the script went wrong.
    """


ERROR_KINDS = ("aborted", "timeout", "network", "overload", "rate", "quota", "entitlement",
               "auth", "model", "context", "content", "invalid", "length", "unknown")


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
    def from_exception(cls, provider: str, exc: BaseException) -> ProviderError:
        """Wrap any exception into a classified ProviderError; a ProviderError passes through."""
        if isinstance(exc, ProviderError):
            return exc
        error = cls(str(exc) or type(exc).__name__, provider=provider, kind=classify_error(exc))
        error.__cause__ = exc
        return error

    def __repr__(self) -> str:
        return (f"ProviderError({str(self)!r}, provider={self.provider!r}, kind={self.kind!r}, "
                f"status={self.status!r})")


# providers.md §8.3: the text patterns of the classification, first match wins. They stay text,
# compiled (and cached) by re on the first failure, so importing falai compiles none of them.
_CONTEXT = (
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|prompt is too long|"
    r"input is too long|too many (input )?tokens|reduce the length of the (messages|prompt|input)|"
    r"exceeds? the (model'?s? )?maximum (input |prompt |context )?(tokens?|length|context)")
_ENTITLEMENT = (
    r"plan does(n't| not) (include|support)|not included (in|with) your .{0,40}plan|"
    r"upgrade to .{0,40}(or higher|plan)|no api access")
_QUOTA = (
    r"insufficient[_ ]quota|exceeded your current quota|insufficient (balance|credits?)|"
    r"credit balance is too low|(no|out of) credits|usage limits? (reached|exceeded|hit)|"
    r"reached your (usage|weekly|monthly|daily) limit|(weekly|monthly|daily|plan) usage limit|"
    r"purchase extra usage|upgrade your plan|quota.{0,80}(exhausted|exceeded|will be refreshed)|"
    r"balance (is )?(too low|not enough|insufficient)|余额不足|欠费|额度不足|额度已用完")
_MODEL = (r"models?/?[^.{\n]{0,40}?(not found|does not exist|unknown)|no model named|"
          r"unsupported model")
_AUTH = (
    r"invalid (x-api-key|api[ _-]?key|token|credentials?)|api[ _-]?key (is )?(not "
    r"valid|invalid|incorrect)|"
    r"unauthorized|UNAUTHENTICATED|PERMISSION_DENIED|authentication[_ ](failed|invalid|error)|"
    r"account (disabled|suspended|deactivated|banned)")
_CONTENT = r"content[_ ]filter|content policy|safety|PROHIBITED_CONTENT|blocked|refusal"
_RATE = r"rate[_ -]?limit|too many requests|RESOURCE_EXHAUSTED"
_OVERLOAD = r"overloaded|\bunavailable\b|internal error|\bcapacity\b|\"code\":\s*5\d\d"
_OVERLOAD_EXACT = r"UNAVAILABLE|\bINTERNAL\b"
_NETWORK = (
    r"failed to fetch|fetch failed|network error|connection (error|closed|refused|reset)|socket "
    r"hang up|"
    r"premature close|stream (ended|closed) "
    r"unexpectedly|ECONNRESET|ECONNREFUSED|ECONNABORTED|ETIMEDOUT|"
    r"EPIPE|ENETUNREACH|ENETDOWN|ENOTFOUND|EHOSTUNREACH|EAI_AGAIN")
_NETWORK_CLASSES = {("requests", "ConnectionError"), ("requests", "ChunkedEncodingError"),
                    ("urllib3", "ProtocolError"), ("urllib3", "NewConnectionError"),
                    ("http", "IncompleteRead"), ("http", "RemoteDisconnected")}


def error_text(error: BaseException) -> str:
    """The text of an exception from user code; its class name when ``__str__`` itself raises.

    A tool or action may raise anything, so the tool error and action failure
    texts (model-calls.md §6.3, flows.md §9.5) must come out whatever it is.
    """
    try:
        return str(error)
    except Exception:
        return type(error).__name__


def shown_text(value: Any) -> str:
    """``str(value)`` of a host's object; its class name when ``__str__`` raises."""
    try:
        return str(value)
    except Exception:
        return type(value).__name__


def log_swallowed(where: str) -> None:
    """DEBUG: the traceback of a user-code exception that became an outcome instead of a crash.

    Call it inside the ``except`` block: the warning already names the error,
    this keeps where it came from for whoever turned debug on.
    """
    if log.isEnabledFor(DEBUG):
        log.debug("%s: the swallowed exception's traceback", where, exc_info=True)


def _exception_chain(exc: BaseException | None) -> list[BaseException]:
    """exc, then its cause (or context), and so on: five links at most (providers.md §8.3)."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 5 and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _class_marks(exc: BaseException) -> set[tuple[str, str]]:
    """(top-level package, class name) of every class exc is an instance of, without importing
    them."""
    return {(klass.__module__.split(".")[0], klass.__name__) for klass in type(exc).__mro__}


def classify_error(exc: BaseException | None = None, status: int | None = None,
                   body: str | None = None) -> str:
    """Give a failed model call one of ``ERROR_KINDS`` (providers.md §8.3)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    chain = _exception_chain(exc)
    if any(type(e).__name__ in ("CancelledError", "AbortError") for e in chain):
        return "aborted"
    text = " ".join(part for part in [error_text(exc) if exc is not None else "", body or ""]
                    if part)
    if status is None and chain:
        marks = set().union(*(_class_marks(e) for e in chain))
        if any(pkg == "requests" and name in ("Timeout", "ReadTimeout", "ConnectTimeout")
               for pkg, name in marks):
            return "timeout"
        chain_text = " ".join(error_text(e) for e in chain)
        if (marks & _NETWORK_CLASSES or any(isinstance(e, ConnectionError) for e in chain)
                or re.search(_NETWORK, chain_text, re.I)):
            return "network"
    if status == 408 or any(type(e).__name__ == "TimeoutError" for e in chain):
        return "timeout"
    if status is None or status < 500:
        if re.search(_CONTEXT, text, re.I):
            return "context"
        if re.search(_ENTITLEMENT, text, re.I):
            return "entitlement"
        if re.search(_QUOTA, text, re.I):
            return "quota"
    if re.search(_MODEL, text, re.I):
        return "model"
    if status in (401, 403) or re.search(_AUTH, text, re.I):
        return "auth"
    if status == 402:
        return "quota"
    if status == 404:
        return "model"
    if status == 429:
        return "rate"
    if re.search(_CONTENT, text, re.I):
        return "content"
    if status is not None and (status in (409, 425, 529) or status >= 500):
        return "overload"
    if re.search(_RATE, text, re.I):
        return "rate"
    if re.search(_OVERLOAD, text, re.I) or re.search(_OVERLOAD_EXACT, text):
        return "overload"
    if re.search(r"timed out|timeout", text, re.I):
        return "timeout"
    if status is not None and status >= 400:
        return "invalid"
    return "unknown"


# 3. Time ######################################################################################
#
# The blob's one time format is ISO text in UTC with milliseconds and a Z
# (persistence.md §2.4); keys embed epoch milliseconds computed with integers
# (runtime.md §0).

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DURATION = re.compile(r"[0-9]+(?:\.[0-9]+)?[smhd]")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

# The limits of time (docs/guide/limits.md). A duration is at most ten years, far
# beyond any wait a conversation needs. An instant lies in years 1000-8999: the
# blob writes four-digit years (year 999 would not read back as ISO text), and
# the latest instant plus the longest duration stays inside datetime's year 9999.
MAX_DURATION = "3650d"
MAX_DURATION_MS = 3650 * 86_400_000
EARLIEST = datetime(1000, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(8999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
INSTANT_RANGE = "1000-01-01T00:00:00.000Z to 8999-12-31T23:59:59.999Z"


def is_duration(value: Any) -> bool:
    """True for a Duration string such as "30s", "5m", "1.5h", "3d" (flows.md §13)."""
    return isinstance(value, str) and DURATION.fullmatch(value) is not None


def duration_ms(value: str) -> int:
    """Milliseconds of a Duration, rounded half up; ValueError names a bad one."""
    if not is_duration(value):
        raise ValueError(f'"{value}" is not a duration. Write a number and a unit: "30s", "5m", '
                         '"24h" or "3d".')
    if is_too_long(value):
        raise ValueError(f'"{value}" is longer than the maximum duration "{MAX_DURATION}" (ten '
                         'years). Use a shorter one.')
    return _exact_ms(value)


def _exact_ms(value: str) -> int:
    from decimal import Decimal     # lazily: `import falai` stays quick
    return int(Decimal(value[:-1]) * _UNIT_MS[value[-1]] + Decimal("0.5"))


def is_too_long(value: str) -> bool:
    """True for a Duration longer than MAX_DURATION (docs/guide/limits.md)."""
    if len(value[:-1].split(".")[0].lstrip("0")) > 15:     # a number that long needs no arithmetic
        return True
    return _exact_ms(value) > MAX_DURATION_MS


def iso(at: datetime) -> str:
    """An aware datetime as blob text; a naive one is read as UTC; truncated to ms."""
    if at.tzinfo is not timezone.utc:
        at = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    # isoformat pads the year to four digits, where strftime's %Y does not
    if at.year >= 1000:
        # isoformat() without timespec= is the cheaper call, and every turn stamps its instant
        text = at.isoformat()   # "YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00"
        return text[:23] + "Z" if at.microsecond else text[:19] + ".000Z"
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
        return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    except ValueError:
        raise ValueError(f'"{text}" is not ISO date-time text such as '
                         '"2026-09-20T10:00:00.000Z"') from None
    except OverflowError:   # an offset that moves year 1 or 9999 out of datetime's range
        raise ValueError(f'"{text}" is outside the supported range {INSTANT_RANGE}') from None


def check_instant(at: datetime, what: str, fix: str) -> datetime:
    """``at`` as aware UTC at whole ms; ValueError naming ``what`` outside the supported range."""
    if not isinstance(at, datetime):
        raise TypeError(f"{what} must be a datetime, not {type(at).__name__}")
    at = truncate_ms(at)
    if not EARLIEST <= at <= LATEST:
        raise ValueError(f"{what} is {iso(at) if at.year >= 1000 else at.isoformat()}, outside the "
                         f"supported range {INSTANT_RANGE} (docs/guide/limits.md). {fix}")
    return at


def later(at: datetime, ms: int) -> datetime:
    """``at`` plus ``ms`` milliseconds; an instant past datetime's range stays at its last
    millisecond.

    Only an instant already outside the supported range (an old blob's time) can get there.
    """
    try:
        return at + timedelta(milliseconds=ms)
    except OverflowError:
        return datetime.max.replace(microsecond=999000, tzinfo=timezone.utc)


def to_ms(at: datetime) -> int:
    """Epoch milliseconds of a datetime, by integer arithmetic."""
    at = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at
    return (at - EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int | float) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def truncate_ms(at: datetime) -> datetime:
    """The instant at whole milliseconds, aware UTC (runtime.md §0, now)."""
    if type(at) is datetime and at.tzinfo is timezone.utc and at.microsecond % 1000 == 0:
        # already there (a clock that reads whole milliseconds, fake_clock's)
        return at
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

    def advance(self, by: str | int | float) -> datetime:
        """Move forward by a Duration ("2d") or a number of seconds; returns the new instant."""
        if isinstance(by, str):
            self._now = self._now + timedelta(milliseconds=duration_ms(by))
        elif isinstance(by, (int, float)) and not isinstance(by, bool):
            self._now = self._now + timedelta(seconds=by)
        else:
            raise TypeError("advance() takes a duration such as \"1d\" or a number of seconds, "
                            f"not {by!r}")
        return self._now

    def set(self, at: str) -> datetime:
        """Jump to an ISO instant; returns it."""
        self._now = truncate_ms(parse_iso(at))
        return self._now

    def __repr__(self) -> str:
        return f"fake_clock({iso(self._now)!r})"


def fake_clock(at: str) -> FakeClock:
    """A clock for tests: ``clock = fake_clock("2026-09-20T10:00:00.000Z");
    clock.advance("1d")``."""
    return FakeClock(at)


# 4. Templates and predicates ##################################################################

def compact_json(value: Any) -> str:
    """JSON with no spaces, non-ASCII kept (the form every payload the model reads uses)."""
    return _COMPACT_ENCODER.encode(value)


# What compact_json may raise for a value JSON cannot hold (a set, a cycle, too deep a nesting).
UNSERIALIZABLE = (TypeError, ValueError, OverflowError, RecursionError)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: getattr(value, f.name) for f in dataclass_fields(value)
                if not f.name.startswith("_")}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# What json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default) builds on
# every call; it holds only those settings, so one serves every call.
_COMPACT_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                    default=_json_default)


def js_kind(value: Any) -> str:
    """The JSON kind of a value: boolean, number, string or other."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "other"


# One way to match each number (no "[0-9]+[0-9]*" split to backtrack over): linear in the text.
JS_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
JS_PREFIXED = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")


def js_number(text: str) -> int | float | None:
    """JavaScript's Number(string) with the first "," read as "."; None when it does not parse."""
    text = text.strip().replace(",", ".", 1)
    if JS_PREFIXED.fullmatch(text):
        return int(text, 0)
    if JS_DECIMAL.fullmatch(text):
        return float(text)
    return None


def js_number_text(x: int | float) -> str:
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
    from decimal import Decimal     # lazily: `import falai` stays quick
    raw = Decimal(repr(abs(x))).as_tuple()
    assert isinstance(raw.exponent, int)        # x is finite: no "n", "N" or "F" exponent
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
        text = (digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e > 0 else "e-")
                + str(abs(e)))
    return ("-" if x < 0 else "") + text


def value_text(value: Any) -> str:
    """How a value prints in a template: JS numbers, true/false, lists joined by ", " (flows.md
    §8.2)."""
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
_PLACEHOLDER_HEAD = re.compile(r"\{\{\s*[^\s}]*")
_BLANKS = re.compile(r"[ \t]+")


def _fill_placeholders(template: str, fill: Callable[[re.Match], str]) -> str:
    """``PLACEHOLDER.sub(fill, template)``, in linear time.

    A ``{{`` that opens no placeholder is passed over with the name after it: re.sub would try
    again from every ``{`` inside that name, which is quadratic on a long run of braces.
    """
    out, done, at = [], 0, template.find("{{")
    while at >= 0:
        match = PLACEHOLDER.match(template, at)
        if match is None:
            # Only a "{{" ending the name can still open a placeholder (the next "{" after it starts
            # one).
            head = _PLACEHOLDER_HEAD.match(template, at)
            assert head is not None                 # at is a "{{": the head always matches
            at = template.find("{{", max(at + 1, head.end() - 2))
            continue
        out.append(template[done:at])
        out.append(fill(match))
        done = match.end()
        at = template.find("{{", done)
    out.append(template[done:])
    return "".join(out)


_MISSING = object()
_BLANK = object()


@dataclass(slots=True)
class Scope:
    """The roots a template reads: data, context and input (None = not provided)."""
    data: dict
    context: Any = None
    input: Any = None


def _lookup(path: str, scope: Scope) -> Any:
    """The value at a dotted path, or _MISSING (kept verbatim) or _BLANK (rendered as "").

    A template reads data, never objects (docs/guide/limits.md): a mapping by key,
    a list or tuple by decimal index, a named tuple's or a dataclass's fields by
    name. Anything else stops the walk, with a warning naming the fix.
    """
    root, *keys = path.split(".")
    if root not in ("data", "context", "input"):
        return _MISSING
    value = getattr(scope, root)
    if value is None:
        return _MISSING  # a root the host did not provide counts as missing (model-calls.md §2.4)
    walked = root
    for key in keys:
        if value is None:
            return _BLANK
        if isinstance(value, Mapping):
            if key not in value:
                return _MISSING
            value = value[key]
        elif isinstance(value, (list, tuple)) and key.isascii() and key.isdigit():
            if int(key) >= len(value):
                return _MISSING
            value = value[int(key)]
        else:
            value = _data_field(value, key, path, walked)
        if value is _MISSING:
            return _MISSING
        if callable(value) and not isinstance(value, Mapping):
            _not_data(path, f"{walked}.{key}", value)
            return _MISSING     # a template reads data, never code (docs/guide/limits.md)
        walked = f"{walked}.{key}"
    return _MISSING if value is None else value


def _data_field(value: Any, key: str, path: str, walked: str) -> Any:
    """A field of a named tuple or a dataclass instance; _MISSING for anything else.

    Flow JSON may come from a flow editor or another tenant, so a template never
    reaches a host object's attributes (a client's session, its headers, a
    provider's settings), a name starting with "_", a method or a property.
    """
    if key.startswith("_"):
        return _MISSING
    if isinstance(value, tuple):
        names = getattr(type(value), "_fields", ())
        return getattr(value, key) if isinstance(names, tuple) and key in names else _MISSING
    if not isinstance(value, type) and hasattr(type(value), "__dataclass_fields__"):
        if any(f.name == key for f in dataclass_fields(value)):
            return getattr(value, key, _MISSING)
        return _MISSING                       # a field the dataclass does not have: a typo
    if not isinstance(value, (str, int, float, bool, list)):
        _not_data(path, walked, value)
    return _MISSING


def _not_data(path: str, walked: str, value: Any) -> None:
    log.warning("[falai] template {{%s}}: %s is a %s, not data; a template reads only mappings by "
                "key, lists and tuples by index, and the fields of dataclasses and named tuples. "
                "Put the value itself in the context, e.g. context={\"name\": client.name} "
                "(docs/guide/limits.md).", path, walked, type(value).__name__)


def _tidy(text: str) -> str:
    """Collapse the gaps a blank placeholder leaves: runs of blanks after text become one space,
    blanks before punctuation and at line ends go. Each run is matched once, whole (linear in the
    text)."""
    text = _BLANKS.sub(lambda run: " " if run.start() > 0 and not text[run.start() - 1].isspace()
                       and run.end() - run.start() >= 2 else run.group(0), text)
    return _BLANKS.sub(lambda run: "" if run.end() == len(text) or text[run.end()] in ",.;:!?…\n"
                       else run.group(0), text)


def render(template: str, scope: Scope) -> str:
    """Fill {{data.x}}, {{context.x}}, {{input.x}} placeholders (flows.md §8).

    An unknown placeholder stays verbatim; a blank one becomes "" and tidies the text.
    """
    if "{{" not in template:
        return template
    blank = False

    def fill(match: re.Match) -> str:
        nonlocal blank
        try:
            value = _lookup(match.group(1), scope)
            if value is _MISSING:
                return match.group(0)
            text = "" if value is _BLANK else value_text(value)
        # a host object that fails to be read or printed is unknown, never a crash
        except Exception:
            return match.group(0)
        if text == "":
            blank = True
        return text

    out = _fill_placeholders(template, fill)
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
    """Whether a predicate holds (flows.md §7): a callable, or a JSON condition whose every key
    holds (AND); ``any`` lists conditions of which one must hold (OR)."""
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
        elif name == "unknown":     # falai for Python: "not known", which equals cannot say
            if any(is_known(ctx.data.get(slug)) for slug in arg):
                return False
        elif name == "not":         # falai for Python: the inner condition does not hold
            if judge(arg, ctx, conditions):
                return False
        elif name == "any":         # falai for Python: at least one listed condition holds
            if not any(judge(option, ctx, conditions) for option in arg):
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


# How a message names a value (persistence.md §1.10: show, expected) --------------------------
#
# Shared by the construction checks, the blob reader and the model calls: each names a value
# in a message the same way.

class _Absent:
    """The value of a key that is not there: ``show`` and ``describe_blob_value`` print it as
    `missing`."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def flow_error(where: str, what: str, fix: str) -> NoReturn:
    raise FlowConfigurationError(f"{where}: {what}. {fix}")


# a flow's own levels (8 at most above a value, in a branch's equals) + a value's
FLOW_NESTING = 96


def strip_nones(value: Any) -> Any:
    """A copy with every None-valued dict key dropped, at any depth (persistence.md §1.7 step 1).

    Lists keep their length (a None inside one stays, so the shape check can
    report it); callables and other leaves are kept as they are. A flow nested
    deeper than FLOW_NESTING raises FlowConfigurationError: the copies a turn
    makes of its values never recurse without bound (docs/guide/limits.md).
    """
    if nests_deeper(value, FLOW_NESTING):
        flow_error("flow", f"nests lists and dicts deeper than {FLOW_NESTING} levels",
                   f"Flatten its values: a value may nest {MAX_NESTING} levels.")
    return _strip_nones(value)


def _strip_nones(value: Any, in_equals: bool = False) -> Any:
    """``in_equals``: the dict is a condition's ``equals``. One whose every value is None tests
    nothing (a strict FlowSpec writes "no test" as ``"equals": null``), so it keeps them for the
    check to refuse; otherwise a None there is the strict schema's "not given" and goes."""
    if isinstance(value, dict):
        keep = in_equals and bool(value) and all(item is None for item in value.values())
        return {key: _strip_nones(item, key == "equals") for key, item in value.items()
                if item is not None or keep}
    if isinstance(value, list):
        return [_strip_nones(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_strip_nones(item) for item in value)
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
    if value is ABSENT:
        return "missing"
    if value is None or isinstance(value, (bool, int, float)):
        return json_literal(value)
    if isinstance(value, str):
        text = json_literal(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a function" if callable(value) else "an object"


def is_whole(value: Any) -> bool:
    """An int, or a float with no fraction (3.0); never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)
                                      and value.is_integer())


def listed_values(values: Any) -> str:
    return ", ".join(json_literal(value) for value in values)


def as_definition(value: Any) -> dict:
    """A field or parameter definition, {} when the host gave something else."""
    return value if isinstance(value, dict) else {}


# 5. Fields ####################################################################################

def is_known(value: Any) -> bool:
    """A field value is known unless it is missing, None or "" (flows.md §2.2)."""
    return value is not None and value != ""


def extract_mode(definition: dict) -> str:
    """A field's effective extract mode: "asked" for booleans by default, else "anywhere".

    "never" marks a tool-only field: no model call is offered it, so only a
    tool, an action or the host writes it (docs/guide/flows.md, Fields).
    """
    return definition.get("extract") or ("asked" if definition.get("type") == "boolean"
                                         else "anywhere")


def model_fields(fields: dict, slugs: list[str]) -> list[str]:
    """The slugs a model call may be offered: all but the tool-only fields (extract "never")."""
    return [slug for slug in slugs if extract_mode(as_definition(fields.get(slug))) != "never"]


def merge_patch(data: dict, patch: dict) -> None:
    """Merge a tool or action patch into session data as given; a None value deletes the key.

    The values are copied, so the session shares nothing with the code that
    wrote them; one a session cannot hold (``unstorable``) raises ValueError before
    anything is written.
    """
    for slug, value in patch.items():
        check_nesting(value, f'the value written to "{slug}"')
        problem = unstorable(value)
        if problem is not None:
            raise ValueError(f'the value written to "{slug}" {problem}, which no store keeps '
                             "(docs/guide/limits.md). Clean it before writing it.")
    for slug, value in patch.items():
        if value is None:
            data.pop(slug, None)
        else:
            data[slug] = json_copy(value)


TRUE_WORDS = ("true", "sim", "yes", "1")
FALSE_WORDS = ("false", "não", "nao", "no", "0")


def read_boolean(raw: Any) -> bool | None:
    """The boolean coercion of model-calls.md §4, or None when raw is not one."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None
    return None


def unstorable(value: Any) -> str | None:
    """Why a session could not hold ``value`` (so no store would save it), or None when it can:
    JSON values and datetimes, text without a NUL character or a lone surrogate, finite numbers,
    string keys, nested at most MAX_NESTING levels (docs/guide/limits.md). A loop: no recursion."""
    if nests_deeper(value, MAX_NESTING):
        return f"nests deeper than {MAX_NESTING} levels"
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "holds a NUL character (U+0000)"
            if _LONE_SURROGATE.search(item):
                return "holds a lone surrogate (not UTF-8 text)"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"holds {item}, which JSON has no number for"
        elif isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return "has a key that is not text"
            todo.extend(item)
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
        elif not (item is None or isinstance(item, (bool, int, datetime))):
            return f"is a {type(item).__name__}, not a JSON value"
    return None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def coerce_field(definition: dict, raw: Any) -> tuple[str, Any]:
    """Check a model-given value against its field (flows.md §2.4, model-calls.md §4).

    Returns ("ok", value) or ("bad-value" | "not-in-enum", None).
    """
    kind = definition.get("type")
    value: Any = None
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
            value = read_boolean(raw)
    except OverflowError:
        value = None
    if value is None or (isinstance(value, str) and unstorable(value) is not None):
        return "bad-value", None            # text no store keeps is no value of the field
    if "enum" in definition and not any(js_kind(e) == js_kind(value) and e == value
                                        for e in definition["enum"]):
        return "not-in-enum", None
    return "ok", value


# Formats and validators, a falai for Python addition (docs/guide/flows.md, Formats and validators).
# A model-given value of a field with one is checked after its type and enum, and kept normalised.

FORMAT_HINTS = {
    "date": "a calendar date, written YYYY-MM-DD",
    "time": "a time of day, written HH:MM (24-hour)",
    "datetime": "a date and time, written YYYY-MM-DDTHH:MM (ISO 8601, an offset if known)",
    "email": "an e-mail address",
    "phone": "a phone number: digits, with a leading + and the country code when given",
}
FIELD_FORMATS = tuple(FORMAT_HINTS)
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(\.[^@\s.]+)+")
_CLOCK_TIME = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*([ap]\.?m\.?)?", re.IGNORECASE)


def normal_format(kind: str, text: str) -> str | None:
    """``text`` in the normal form of a field format, or None when it is not one (FORMAT_HINTS)."""
    text = text.strip()
    if kind == "date":
        found = re.fullmatch(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?:[T ].*)?", text)
        if not found:
            return None
        year, month, day = (int(part) for part in found.groups())
        try:
            return datetime(year, month, day).date().isoformat()
        except ValueError:
            return None
    if kind == "time":
        found = _CLOCK_TIME.fullmatch(text)
        if not found or not (found.group(2) or found.group(4)):     # a bare number is no time
            return None
        hour, minute, second = (int(part or 0) for part in found.groups()[:3])
        if found.group(4):
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if found.group(4).lower().startswith("p") else 0)
        if hour > 23 or minute > 59 or second > 59:
            return None
        return f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second else "")
    if kind == "datetime":
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return None
        return moment.isoformat(timespec="minutes" if not moment.second else "seconds").replace(
            "+00:00", "Z")
    if kind == "email":
        if not _EMAIL.fullmatch(text):
            return None
        local, domain = text.rsplit("@", 1)
        return f"{local}@{domain.lower()}"
    if kind == "phone":
        if not re.fullmatch(r"\+?[\d\s().-]+", text) or re.fullmatch(r"\d{4}-\d\d?-\d\d?", text):
            return None         # a date is no phone number
        digits = re.sub(r"\D", "", text)
        return ("+" if text.startswith("+") else "") + digits if 7 <= len(digits) <= 15 else None
    return None


def check_format_and_rule(definition: dict, value: Any) -> tuple[str, Any, str | None]:
    """A coerced value through the field's ``format``, then its ``validate`` function.

    Returns ("ok", value to keep, None), ("bad-format", None, None) or
    ("refused", None, the validator's reason). The validator returns the value
    to keep (None keeps it as it is), or refuses by raising or by returning
    ``{"error": "why"}``.
    """
    kind = definition.get("format")
    if kind is not None and isinstance(value, str):
        value = normal_format(kind, value)
        if value is None:
            return "bad-format", None, None
    rule = definition.get("validate")
    if rule is None:
        return "ok", value, None
    try:
        kept = rule(value)
    except Exception as error:      # the host's own code: a raise is its refusal
        return "refused", None, error_text(error) or type(error).__name__
    if isinstance(kept, dict) and set(kept) == {"error"}:
        return "refused", None, shown_text(kept["error"])
    problem = unstorable(kept)
    if problem is not None:         # what it keeps must be something a session holds
        return "refused", None, f"the validator returned a value that {problem}"
    return "ok", value if kept is None else kept, None


# Evidence, a falai for Python addition (docs/guide/flows.md, "Values the customer must say"):
# a field with ``"evidence": "message"`` keeps a model-given value only when the customer's own
# message says it, so a model that invents a "yes" or an account id cannot write one.

YES_WORDS = frozenset({
    "yes", "yeah", "yea", "yep", "yup", "sure", "ok", "okay", "confirm", "confirmed",
    "confirming", "correct", "proceed", "absolutely", "definitely", "certainly", "affirmative",
    "agreed", "agree", "alright",
    "sim", "pode", "isso", "claro", "confirmo", "confirmado", "certo", "correto", "beleza",
    "fechado", "perfeito"})
YES_PHRASES = ("go ahead", "do it", "of course", "all right", "sounds good", "that is right",
               "that's right", "that's correct", "pode ser", "com certeza", "manda ver")
NO_WORDS = frozenset({
    "no", "nope", "nah", "not", "don't", "dont", "never", "stop", "wait", "negative",
    "nao", "nem", "negativo", "espera", "pare"})
NO_PHRASES = ("do not", "hold on", "hang on", "changed my mind", "mudei de ideia")


def _says_any(words: list[str], joined: str, single: frozenset, phrases: tuple) -> bool:
    padded = f" {joined} "
    return any(word in single for word in words) or any(f" {p} " in padded for p in phrases)


def says_value(definition: dict, value: Any, message: str | None) -> bool:
    """Whether the customer's ``message`` says ``value`` ("evidence": "message"): for a boolean, a
    yes (for true) or a no (for false) and not the other; for text and numbers, the value itself,
    case and spacing aside (a phone number by its digits)."""
    if not isinstance(message, str) or not message.strip():
        return False
    if isinstance(value, bool):
        plain = "".join(c for c in unicodedata.normalize("NFKD", message.casefold())
                        if not unicodedata.combining(c)).replace("\u2019", "'")
        words = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", plain)
        joined = " ".join(words)
        yes = _says_any(words, joined, YES_WORDS, YES_PHRASES)
        no = _says_any(words, joined, NO_WORDS, NO_PHRASES)
        return yes and not no if value else no and not yes
    if definition.get("format") == "phone":
        digits = re.sub(r"\D", "", str(value))
        return bool(digits) and digits in re.sub(r"\D", "", message)
    wanted = " ".join((js_number_text(value) if isinstance(value, (int, float))
                       else str(value)).casefold().split())
    said = " ".join(message.casefold().split())       # a whole word or number, not a part of one
    return bool(wanted) and re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", said) is not None


def field_description(definition: dict) -> str | None:
    """What the model reads about a field: its description, then its format and its validator's
    first docstring line, when it has them."""
    parts = [definition["description"]] if definition.get("description") else []
    if definition.get("format") in FORMAT_HINTS:
        parts.append(f"Format: {FORMAT_HINTS[definition['format']]}.")
    rule = definition.get("validate")
    doc = (getattr(rule, "__doc__", None) or "").strip().splitlines() if rule is not None else []
    if doc and doc[0].strip():
        parts.append(f"Rule: {doc[0].strip()}")
    if definition.get("correctable") is True:
        parts.append("When the customer corrects an earlier value, give the new one.")
    return " ".join(parts) or None


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
    description = field_description(definition)
    if description:
        prop["description"] = description
    if "enum" in definition:
        prop["enum"] = [*definition["enum"], None]
    return prop


def closed_object(properties: dict) -> dict:
    """An object schema that requires every property and allows nothing else."""
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def nullable_envelope(definitions: dict[str, dict]) -> dict:
    """A closed object schema whose every property is required and nullable (model-calls.md
    §2.7)."""
    return closed_object({name: nullable_property(d) for name, d in definitions.items()})


# 6. The session ###############################################################################
#
# One conversation's whole state (runtime.md §13, persistence.md Part 2).
# Times stay ISO text; nested values stay the camelCase dicts the blob holds.

RunStatus = Literal["running", "asking", "waiting", "suspended"]     # runtime.md §4.2


@dataclass
class Run:
    """One live execution of a flow inside a session (runtime.md §4.1). Its ``status`` moves only
    through ``move_status()``, by the table RUN_MOVES."""
    id: str
    flow_id: str
    anchor: str
    dedupe_key: str
    step_id: str | None
    status: RunStatus
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
    def from_dict(cls, blob: Any, session_id: str | None = None) -> Session:
        """Read a v4 blob; anything else raises InvalidSessionError (persistence.md §2.5)."""
        return session_from_dict(blob, session_id)


# Nesting: how deep a value a session holds may be (docs/guide/limits.md) ----------------------
#
# Every value that enters a session (event payloads, start input, tool and
# action data, a {flow} target's input) is checked at the door, so a saved
# session always loads, copies and saves without deep recursion.

MAX_NESTING = 64                  # levels of lists and dicts inside one value
# a value sits at most four levels down a blob: runs[i].trigger.payload
BLOB_NESTING = MAX_NESTING + 4


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether lists and dicts inside ``value`` nest more than ``limit`` levels (a loop: no
    recursion)."""
    containers = (dict, list, tuple)
    stack = [(value, 1)] if isinstance(value, containers) else []
    # depth first, so even a cycle ends as soon as it passes the limit
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, containers):
                stack.append((child, depth + 1))
    return False


def check_nesting(value: Any, where: str) -> None:
    """ValueError naming ``where`` when ``value`` nests deeper than MAX_NESTING."""
    if nests_deeper(value, MAX_NESTING):
        raise ValueError(f"{where} nests lists and dicts deeper than {MAX_NESTING} levels, the "
                         "limit for a value a session holds (docs/guide/limits.md). Flatten it, or "
                         "keep it outside the session.")


# The v4 blob: writing and reading it (persistence.md Part 2) ----------------------------------
#
# The reader checks the rules of §2.5 in their order and stops at the first one
# that fails; it trusts what only the framework writes (trigger content,
# waiting, asked, visits, outcome lines, time formats). Nested values are shared
# with the blob, not copied, both ways (§2.3 rule 2; migrate_session relies on
# it for `data`).

RUN_STATUSES = ("running", "asking", "waiting", "suspended")


def describe_blob_value(value: Any) -> str:
    """*describe(v)* of persistence.md §2.5: how InvalidSessionError messages name a value."""
    if value is ABSENT:
        return "missing"
    if value is None or isinstance(value, (bool, int, float)):
        return json_literal(value)
    if isinstance(value, str):
        return f'"{value}"'      # the text as it is, unescaped and uncut, unlike show()
    if isinstance(value, list):
        return "a list"
    if not isinstance(value, dict) and callable(value):
        return "a function"
    return "an object"


def blob_whole_number(value: Any) -> int | None:
    """A "whole number" (§2.5) as an int: int >= 0, or an integral float >= 0; a bool never is."""
    return int(value) if is_whole(value) and value >= 0 else None


def run_to_dict(run: Run) -> dict:
    """The run as the blob stores it (persistence.md §2.2, §2.3 rule 2): optional keys only when
    set."""
    blob = {"id": run.id, "flowId": run.flow_id, "anchor": run.anchor, "dedupeKey": run.dedupe_key,
            "stepId": run.step_id, "status": run.status, "trigger": run.trigger, "hop": run.hop,
            "startedAt": run.started_at, "asked": run.asked, "visits": run.visits,
            "outcomes": run.outcomes}
    if run.input is not None:
        blob["input"] = run.input
    if run.waiting is not None:
        blob["waiting"] = run.waiting
    if run.suspended_at is not None:
        blob["suspendedAt"] = run.suspended_at
    if run.staying:
        blob["staying"] = True
    return blob


def session_to_dict(session: Session) -> dict:
    """The v4 blob (persistence.md §2.1, §2.3 rule 2). `v` is always 4; absent keys are left out."""
    blob = {"id": session.id, "v": 4, "version": session.version, "data": session.data,
            "runs": [run_to_dict(run) for run in session.runs], "claims": session.claims,
            "inputs": session.inputs, "metadata": session.metadata}
    if session.last_user_at is not None:
        blob["lastUserAt"] = session.last_user_at
    if session.last_assistant_at is not None:
        blob["lastAssistantAt"] = session.last_assistant_at
    if session.history is not None:
        blob["history"] = session.history
    return blob


def session_from_dict(blob: Any, session_id: str | None) -> Session:
    """The one reader of a v4 blob (persistence.md §2.5); the first failed rule raises
    InvalidSessionError."""
    if session_id is None:
        own = blob.get("id") if isinstance(blob, dict) else None
        session_id = own if isinstance(own, str) else ""

    def fail(why: str) -> NoReturn:
        raise InvalidSessionError(session_id, why)

    if not isinstance(blob, dict):
        fail(f"expected an object, got {describe_blob_value(blob)}")
    def get(key: str) -> Any:
        return blob.get(key, ABSENT)

    v = get("v")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != 4:
        fail(f"v is {describe_blob_value(v)}, expected 4")
    if get("id") != session_id or not isinstance(get("id"), str):
        fail(f'id is {describe_blob_value(get("id"))}, expected "{session_id}"')
    version = blob_whole_number(get("version"))
    if version is None:
        fail(f'version is {describe_blob_value(get("version"))}, expected a whole number')
    if not isinstance(get("data"), dict):
        fail(f'data is {describe_blob_value(get("data"))}, expected an object')
    if not isinstance(get("runs"), list):
        fail(f'runs is {describe_blob_value(get("runs"))}, expected a list')
    claims = get("claims")
    if not isinstance(claims, dict) or not all(isinstance(c, dict) and isinstance(c.get("at"), str)
                                               for c in claims.values()):
        fail("claims is not a map of { at }")
    inputs = get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        fail("inputs is not a list of ids")
    if not isinstance(get("metadata"), dict):
        fail(f'metadata is {describe_blob_value(get("metadata"))}, expected an object')
    if "history" in blob and not isinstance(blob["history"], list):
        fail(f'history is {describe_blob_value(blob["history"])}, expected a list')
    for key in ("lastUserAt", "lastAssistantAt"):
        if key in blob and not isinstance(blob[key], str):
            fail(f"{key} is not text")
    last_spoke = blob.get("lastAssistantAt")
    if "lastAssistantAt" in blob and not is_time_text(last_spoke):     # the engine reads it
        fail(f'lastAssistantAt is "{last_spoke}", not a time')
    runs = []
    for index, raw in enumerate(blob["runs"]):
        why = _run_problem(raw, f"runs[{index}]")
        if why:
            fail(why)
        runs.append(_read_run(raw))
    if nests_deeper(blob, BLOB_NESTING):   # it would not copy or save; docs/guide/limits.md
        fail(f"it nests deeper than {BLOB_NESTING} levels (a value may nest {MAX_NESTING})")
    return Session(id=session_id, version=version, data=blob["data"], runs=runs, claims=claims,
                   inputs=inputs, metadata=blob["metadata"], last_user_at=blob.get("lastUserAt"),
                   last_assistant_at=blob.get("lastAssistantAt"), history=blob.get("history"))


def _run_problem(run: Any, at: str) -> str | None:
    """The `why` of the first run rule (R1-R12, persistence.md §2.5) this run fails, or None."""
    if not isinstance(run, dict):
        return f"{at} is {describe_blob_value(run)}, expected an object"
    def get(key: str) -> Any:
        return run.get(key, ABSENT)

    status = get("status")
    if not isinstance(status, str):
        return f"{at}.status is {describe_blob_value(status)}, expected text"
    if status not in RUN_STATUSES:
        return f'{at}.status is "{status}"'
    if get("stepId") is not None and not isinstance(get("stepId"), str):
        return f'{at}.stepId is {describe_blob_value(get("stepId"))}, expected text or null'
    if blob_whole_number(get("hop")) is None:
        return f'{at}.hop is {describe_blob_value(get("hop"))}, expected a whole number'
    if not isinstance(get("outcomes"), list):
        return f'{at}.outcomes is {describe_blob_value(get("outcomes"))}, expected a list'
    trigger = get("trigger")
    if not isinstance(trigger, dict):
        return f"{at}.trigger is {describe_blob_value(trigger)}, expected an object"
    if not isinstance(trigger.get("kind"), str) or not isinstance(trigger.get("key"), str):
        return f"{at}.trigger needs kind and key"
    if "waiting" in run and not isinstance(run["waiting"], dict):
        return f'{at}.waiting is {describe_blob_value(run["waiting"])}, expected an object'
    for key in ("id", "flowId", "anchor", "dedupeKey", "startedAt"):
        if not isinstance(get(key), str):
            return f"{at}.{key} is {describe_blob_value(get(key))}, expected text"
    for key in ("asked", "visits"):
        if not isinstance(get(key), dict):
            return f"{at}.{key} is {describe_blob_value(get(key))}, expected an object"
    return _run_content_problem(run, at)


def _run_content_problem(run: dict, at: str) -> str | None:
    """R13-R15 (falai for Python, persistence.md §2.5): the contents the engine reads, which the
    original trusts, so that every blob the reader accepts also turns and saves."""
    for key in ("asked", "visits"):
        for name, count in run[key].items():
            if blob_whole_number(count) is None:
                return f"{at}.{key}.{name} is {describe_blob_value(count)}, expected a whole number"
    for index, line in enumerate(run["outcomes"]):
        if not isinstance(line, dict):
            return f"{at}.outcomes[{index}] is {describe_blob_value(line)}, expected an object"
    waiting = run.get("waiting")
    if isinstance(waiting, dict):
        if "key" in waiting and not isinstance(waiting["key"], str):
            return f'{at}.waiting.key is {describe_blob_value(waiting["key"])}, expected text'
        for key in ("until", "setAt"):
            if key in waiting and not is_time_text(waiting[key]):
                return f"{at}.waiting.{key} is {describe_blob_value(waiting[key])}, expected a time"
    return None


def is_time_text(value: Any) -> bool:
    """Whether ``value`` is ISO time text the engine reads (parse_iso)."""
    try:
        parse_iso(value)
    except ValueError:
        return False
    return True


def _read_run(run: dict) -> Run:
    """A checked run as a Run; keeps `suspendedAt` only as text and `staying` only when true
    (§2.5)."""
    suspended_at = run.get("suspendedAt")
    hop = blob_whole_number(run["hop"])
    assert hop is not None              # checked: a run whose hop is no whole number is refused
    return Run(id=run["id"], flow_id=run["flowId"], anchor=run["anchor"],
               dedupe_key=run["dedupeKey"], step_id=run["stepId"], status=run["status"],
               trigger=run["trigger"], hop=hop, started_at=run["startedAt"], asked=run["asked"],
               visits=run["visits"], outcomes=run["outcomes"], input=run.get("input"),
               suspended_at=suspended_at if isinstance(suspended_at, str) else None,
               staying=run.get("staying") is True, waiting=run.get("waiting"))


# 7. Keys and flow readers ####################################################################

_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data, several times faster than deepcopy; other values go through
    deepcopy."""
    kind = type(value)
    if kind is dict:
        # flat: one copy, the loop in C
        if not value or _JSON_SCALARS.issuperset(map(type, value.values())):
            return value.copy()
        return {key: item if type(item) in _JSON_SCALARS else json_copy(item)
                for key, item in value.items()}
    if kind is list:
        if _JSON_SCALARS.issuperset(map(type, value)):
            return value.copy()
        return [item if type(item) in _JSON_SCALARS else json_copy(item) for item in value]
    if kind in _JSON_SCALARS:
        return value
    return copy.deepcopy(value)


def reused(cache: dict, key: Any, build: Callable[[], Any], bound: int | None = None) -> Any:
    """``cache[key]``, built by ``build()`` on a miss; a full cache is emptied first (a bound, not a
    policy). Without a bound, the keys are a fixed few names."""
    value = cache.get(key)
    if value is None:
        if bound is not None and len(cache) >= bound:
            cache.clear()
        value = cache[key] = build()
    return value


def triggers_of(flow: dict, kind: str | None) -> list[dict]:
    """The flow's triggers of a kind, in order."""
    return [trigger for trigger in flow.get("on") or [] if trigger.get(kind) is not None]


def first_trigger(flow: dict, kind: str) -> dict | None:
    """The flow's first trigger of a kind (mention and silence use only the first, flows.md §4)."""
    found = triggers_of(flow, kind)
    return found[0] if found else None


def message_trigger(flow: dict, phrased: bool) -> dict | None:
    """The first message trigger with a non-empty list (phrased) or an empty one (the catch-all)."""
    return next((trigger for trigger in triggers_of(flow, "message")
                 if bool(trigger["message"]) == phrased), None)


_ESCAPED = re.compile(r"%3A|%25")


def key_part(text: str) -> str:
    """A part of a claim or silence wake key with no ":" in it (docs/guide/limits.md).

    Text with ":" (or that already reads as escaped, with "%3A" or "%25") has
    "%" and ":" percent-escaped; any other text stays as it is. Claim keys
    escape the flow id and the nonce, so the anchor is what lies between the
    first and the last ":" and distinct (flow, anchor) pairs never share a key.
    A deliberate difference from the TypeScript original, which joins raw ids.
    """
    if ":" in text or "%3A" in text or "%25" in text:
        return text.replace("%", "%25").replace(":", "%3A")
    return text


def unescape_key_part(part: str) -> str:
    """The id a key_part() stands for."""
    return _ESCAPED.sub(lambda match: ":" if match.group(0) == "%3A" else "%", part)


def live_pair(flow_id: str, anchor: str) -> str:
    """``${flowId}:${anchor}``, a live run's entry in the host's ``claims["active"]`` (runtime.md
    §6.4)."""
    return f"{key_part(flow_id)}:{anchor}"


def claim_prefix(flow_id: str, anchor: str) -> str:
    """``${flowId}:${anchor}:``, the start of every claim key of a flow and anchor (runtime.md
    §6.1)."""
    return live_pair(flow_id, anchor) + ":"


# 8. Model-call records ######################################################################

# The engine (falai.py, sections 2-3) decides *what* the model judges and *who* speaks;
# falai_calls turns that into provider calls and reads the replies back, laid out by the agent's
# protocol object (falai_protocols). These are what the engine hands falai_calls and gets back.


class AskedBranch(NamedTuple):
    """A ``when`` branch of the floor's asking talk step, for the model to judge (runtime.md §3.4
    item 6).

    A NamedTuple, so an ask built by hand with plain 4-tuples reads the same.
    """
    run_id: str
    step_id: str
    position: int               # the branch's index in the step's ``branches``
    when: Any                   # the question the model answers


@dataclass(slots=True)
class UnderstandAsk:
    """What the understand call may judge, as the engine worked it out (runtime.md §3.4)."""
    message: str
    scope: Scope
    history: list
    floor_run: Run | None = None
    floor_flow: dict | None = None
    floor_step: dict | None = None
    floor_pending: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    mentions: list = field(default_factory=list)
    branches: list = field(default_factory=list)
    fields: list = field(default_factory=list)


@dataclass(slots=True)
class Judgement:
    """The understand call's reading of a message (runtime.md §3.4)."""
    flows: dict = field(default_factory=dict)
    mentions: dict = field(default_factory=dict)
    extract: dict = field(default_factory=dict)
    branches: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)
    llm_calls: int = 0
    usage: TokenUsage | None = None


@dataclass(slots=True)
class SpeakAsk:
    """Everything one speak call needs (model-calls.md §5.1)."""
    input_kind: str
    text: str | None
    scope: Scope
    history: list
    now: datetime
    run: Run | None = None
    flow: dict | None = None
    step: dict | None = None
    pending: list = field(default_factory=list)
    instructions: list = field(default_factory=list)
    tools: list = field(default_factory=list)
    repeatable: frozenset = frozenset()     # tools whose destructive calls may repeat in a reply


@dataclass(slots=True)
class Spoken:
    """A speak call that produced a reply."""
    message: str
    fields: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    llm_calls: int = 0
    usage: TokenUsage | None = None


@dataclass(slots=True)
class Deferred:
    """A speak call that failed: the step waits or the run fails (runtime.md §10.2)."""
    code: str
    retryable: bool
    reset_at_ms: int | None = None
    llm_calls: int = 0
    usage: TokenUsage | None = None
    data: dict = field(default_factory=dict)    # what the tools that ran wrote: it stays (§10.2)


# 9. Reading model text ########################################################################
#
# What a model sends back is text that should hold JSON: the understand and speak envelopes, tool
# arguments, and (falai_providers) a vendor's own envelopes. Each reader takes time linear in the
# text, whatever it holds (docs/guide/limits.md).

ENVELOPE_SHAPED = re.compile(r"\s*(?:```|\{)")


READ_NESTING = 256      # levels of brackets a reply may open before json.loads is never called
_JSON_SPECIALS = re.compile(r'[\[\]{}"\\]')


def nests_past(text: str, limit: int = READ_NESTING) -> bool:
    """Whether JSON text opens more than ``limit`` brackets at once (strings skipped; linear).

    Text that deep is refused before json.loads reads it: its C recursion, that deep, leaves
    no stack for a finalizer the garbage collector may run meanwhile, which then fails.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, skip_to = 0, False, 0
    for match in _JSON_SPECIALS.finditer(text):
        at = match.start()
        if at < skip_to:                # the character a backslash escapes
            continue
        char = text[at]
        if in_string:
            if char == "\\":
                skip_to = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def lenient_loads(text: str) -> Any:
    """Strict JSON first, then with raw control characters allowed inside strings (§2.9 step 2).

    falai_providers reads envelopes with it too (providers.md §3.6 rules 2-3). Text nested past
    READ_NESTING raises RecursionError without being read (see nests_past).
    """
    if nests_past(text):
        raise RecursionError(f"nested deeper than {READ_NESTING} levels: not read")
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text, strict=False)


_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n?(.*?)\n?```\Z", re.S | re.I)


def unfenced(text: str) -> str:
    """The text stripped; when the whole of it is a code fence, the fence's content, stripped.

    model-calls.md §2.9 (tool arguments) and providers.md §3.6 rule 1 (envelopes).
    """
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def decode_json_string(raw: str) -> str:
    """The body of a JSON string literal (without its quotes) decoded; as it is when it does not
    decode."""
    try:
        return json.loads(f'"{raw}"', strict=False)
    except ValueError:
        return raw


# JSON's own grammar, as Python's json module reads it with strict=False: whitespace, strings (any
# escape passes here; json itself rejects a bad one), numbers, and the words json accepts.
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_JSON_WORD = re.compile(r"null|true|false|NaN|Infinity|-Infinity")
# A "{" that can open an object: "}" or a key and its ":" follow (the lookahead keeps starts
# overlapping).
_OBJECT_START = re.compile(r'\{(?=[ \t\n\r]*(?:\}|"[^"\\]*(?:\\.[^"\\]*)*"[ \t\n\r]*:))', re.S)


def _json_scalar_end(text: str, i: int) -> int | None:
    """Where the string, number or word at ``text[i]`` ends, or None when none starts there."""
    if text[i] == '"':
        found = _JSON_STRING.match(text, i)
        return found.end() if found else None
    found = _JSON_NUMBER.match(text, i)
    if found is not None:
        if len(found.group(0)) > 640 and not (found.group(1) or found.group(2)):
            try:
                # json refuses an integer beyond int's digit limit, so does this walk
                int(found.group(0))
            except ValueError:
                return None
        return found.end()
    found = _JSON_WORD.match(text, i)
    return found.end() if found else None


def _walk_json_object(text: str, start: int, failed: set, walked: dict) -> None:
    """Walk the object opening at ``text[start]`` by JSON's grammar, iteratively, in one pass.

    Each object that closes lands in ``walked`` as ``{start: (end, height)}`` (height: how many
    containers deep it nests); when the walk fails, every object still open is added to ``failed``:
    a fresh parse from any of them fails at the same place. The walk accepts all JSON accepts (and
    a few bad escapes besides), so ``failed`` never holds an object json would read.
    """
    n = len(text)
    # the open containers: opening position, closer, height so far
    stack: list[list[Any]] = [[start, "}", 0]]
    expect = "key_or_close"
    i = start + 1
    while True:
        space = _JSON_SPACE.match(text, i)
        assert space is not None            # the pattern matches the empty string
        i = space.end()
        if i >= n:
            break
        c = text[i]
        if expect == "colon":
            if c != ":":
                break
            expect, i = "value", i + 1
            continue
        if expect in ("key", "key_or_close"):
            if c == '"':
                end = _json_scalar_end(text, i)
                if end is None:
                    break
                expect, i = "colon", end
                continue
            if c != "}" or expect == "key":
                break
        elif expect == "comma_or_close":
            if c == ",":
                expect, i = ("key" if stack[-1][1] == "}" else "value"), i + 1
                continue
            if c != stack[-1][1]:
                break
        elif c in "{[":
            stack.append([i, "}" if c == "{" else "]", 0])
            expect, i = ("key_or_close" if c == "{" else "value_or_close"), i + 1
            continue
        elif c != "]" or expect != "value_or_close":
            end = _json_scalar_end(text, i)
            if end is None:
                break
            expect, i = "comma_or_close", end
            continue
        opened, closer, height = stack.pop()       # c closes the innermost container
        if closer == "}":
            walked[opened] = (i + 1, height + 1)
        if not stack:
            return
        stack[-1][2] = max(stack[-1][2], height + 1)
        expect, i = "comma_or_close", i + 1
    failed.update(opened for opened, closer, _ in stack if closer == "}")


def find_json_object(text: Any) -> dict | None:
    """The first balanced ``{...}`` slice of a reply that parses to a dict (model-calls.md §2.9).

    Linear in the reply: a "{" that cannot open an object is never walked, an object walked once
    is never walked again, and an object that failed inside a walk is never tried again.
    """
    if not isinstance(text, str):
        return None
    failed: set[int] = set()
    walked: dict[int, tuple[int, int]] = {}
    depth_budget = None             # the deepest nesting json.loads manages from here, once known
    for match in _OBJECT_START.finditer(text):
        start = match.start()
        if start in failed:
            continue
        if start not in walked:
            _walk_json_object(text, start, failed, walked)
            if start not in walked:
                continue
        end, height = walked[start]
        if depth_budget is not None and height > depth_budget:
            continue
        try:
            value = lenient_loads(text[start:end])
        except RecursionError:
            # Every json.loads below runs at this same stack depth, so one budget holds for them
            # all.
            low, high = 0, height - 1
            while low < high:
                middle = (low + high + 1) // 2
                try:
                    lenient_loads("[" * middle + "]" * middle)
                    low = middle
                except RecursionError:
                    high = middle - 1
            depth_budget = low
            continue
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
