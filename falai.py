"""falai: a conversational state engine. The model understands; the code decides.

A host calls ``agent.turn(...)`` for every input (a customer message, a wake
that fired, a host event, a manual start) and gets back the messages to send,
the wakes to schedule and the session to save. falai never sends, never sleeps
and never saves: the host does.

Sections, in the order data flows through a turn: what a turn is built from
(1-7), then the turn itself (8-10).

   1. Public types ............ the API's dataclasses, the provider seam, OUTCOME_MESSAGES
   2. Errors .................. FalaiError and its four subclasses, ScriptError, classify_error
   3. Time .................... durations, ISO text, epoch milliseconds, clocks, fake_clock
   4. Templates and predicates  JavaScript-style values, {{data.x}} rendering, judge(), show()
   5. Fields .................. known values, coercion of model values, nullable schemas
   6. The toolkit ............. falai(), Agent: construction and its per-agent parts
   7. The session ............. Session, Run, writing and reading the v4 blob
   8. The turn ................ run_turn(): ingest, understand, decide, run, speak, settle
   9. Runs and steps .......... outcome lines, start_run(), move_run(), advance(), each step kind
  10. Model calls ............. UnderstandAsk, Judgement, SpeakAsk, Spoken, Deferred: what the
                                engine hands falai_calls and gets back

What stands on its own lives beside this file, in sibling modules (falai_*.py):

   falai_calls ....... the model calls: prompts, the understand and speak calls, tool rounds,
                       compaction, the stream decoder (StreamDecoder)
   falai_protocols ... the two protocols the calls follow, Lean and V4, one object each
   falai_checks ...... validate_flow, check_flow, check_agent: the construction checks
   falai_spec ........ from_spec, to_spec, flow_spec_schema, migrate_session, load_registry,
                       history_to_events, events_to_history
   falai_testing ..... ScriptedProvider, MemoryScheduler
   falai_stores ...... Store, MemoryStore, the row rules, SQLiteStore, PostgresStore, RedisStore
   falai_providers ... the HTTP model providers (requests)
   falai_cli ......... the command line, ``python -m falai``
   falai_host ........ the production host (queue workers, webhooks)

``import falai`` is all a user needs and loads none of them: a public name that
lives in a sibling (PUBLIC_ELSEWHERE, after ``__all__``) loads its module on
first use. A sibling imports from falai only the API and the names
FOR_SIBLING_MODULES lists; falai calls a sibling through its module object.

A reading path for a first visit: run_turn() (section 8) is the whole turn,
one line per phase; read on through ingest(), understand_message(), decide(),
run_phase(), choose_speaker() and settle(), then move_run(), advance() and the
step kinds (9), then falai_calls.understand() and falai_calls.speak(). The other
sibling modules never decide anything in a turn: skip them until you need them (the
construction checks run once, when an agent is built). The spec's numbers sit
in one block right after ``__all__``.

A section opens with a banner ``# N. Name ####``; its parts with
``# Part (spec section) ----``. The spec lives in ``docs/spec``; comments
cite it as "runtime.md §3.2".

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
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields as dataclass_fields, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, runtime_checkable

if TYPE_CHECKING:
    import logging

    import falai_calls

__version__ = "0.1.0"

__all__ = [
    # toolkit and agent
    "falai", "Agent", "Tool", "ToolCtx", "ToolResult", "ToolValidationResult",
    "ToolPermissionResult", "Action", "ActionCtx", "ActionResult", "EventDef", "Condition",
    "PredCtx",
    # results
    "TurnResult", "TurnStreamChunk", "OutboundMessage", "ScheduleEntry", "TokenUsage",
    "StartedRun", "EndedRun", "SkippedTrigger", "StepOutcome", "OUTCOME_MESSAGES",
    # session and stores
    "Session", "Run", "Store", "MemoryStore", "MemoryScheduler",
    # providers
    "AiProvider", "ProviderCapabilities", "GenerateRequest", "Generation", "GenerationChunk",
    "ToolCallRequest", "ScriptedProvider", "ScriptError", "ERROR_KINDS", "classify_error",
    # JSON, validation, migration, time
    "validate_flow", "check_flow", "Problem", "FlowValidation", "from_spec", "to_spec",
    "flow_spec_schema", "migrate_session", "history_to_events", "events_to_history", "fake_clock",
    "load_registry", "check_registry",
    # errors
    "FalaiError", "FlowConfigurationError", "ProviderError", "SessionConflictError",
    "InvalidSessionError",
]

# The public names that live in a sibling module, loaded on first use (PEP 562): ``falai.X`` and
# ``from falai import X`` import the module then, so ``import falai`` stays the engine alone.
PUBLIC_ELSEWHERE = {
    "validate_flow": "falai_checks", "check_flow": "falai_checks",
    "from_spec": "falai_spec", "to_spec": "falai_spec", "flow_spec_schema": "falai_spec",
    "migrate_session": "falai_spec", "history_to_events": "falai_spec",
    "events_to_history": "falai_spec", "load_registry": "falai_spec",
    "check_registry": "falai_spec",
    "ScriptedProvider": "falai_testing", "MemoryScheduler": "falai_testing",
    "Store": "falai_stores", "MemoryStore": "falai_stores",
}

# The names outside __all__ that the sibling modules (falai_*.py) import from falai. A sibling
# imports from falai, at its top, only names without a leading underscore: the public API and
# these. falai reaches a sibling only through its module object, imported in the function that
# calls it (or, for one every turn calls, at the bottom of this file, after every definition), so
# any module may be imported first.
# tests/construction/test_imports.py holds every sibling to this tuple. Renaming one of these
# breaks a sibling.
FOR_SIBLING_MODULES = (
    "ABSENT", "BLOB_NESTING", "FIELD_FORMATS", "MAX_DURATION", "MAX_NESTING",
    "PLACEHOLDER", "UNLIMITED_ASKS", "as_definition", "claim_prefix", "closed_object",
    "compact_json",
    "describe_blob_value", "extract_mode", "flow_error", "from_ms",
    "is_duration", "is_known", "is_too_long", "is_whole", "iso", "json_copy", "json_equal",
    "json_literal", "listed_values", "nests_deeper", "parse_iso", "reused", "show",
    "split_phrases", "strip_nones", "system_clock", "to_ms",
    # for falai_calls and falai_protocols: the engine's side of the model calls, and what they read
    "DEBUG", "FIELD_ENVELOPES_KEPT", "UNDERSTAND_PLANS_KEPT", "UNSERIALIZABLE", "Deferred",
    "Judgement", "Scope", "SpeakAsk", "Spoken", "UnderstandAsk", "add_usage", "coerce_field",
    "error_text", "field_description", "first_trigger", "flows_by_trigger", "js_number",
    "js_number_text", "log", "log_swallowed", "merge_patch", "message_trigger", "nullable_envelope",
    "read_boolean", "render", "tool_pool", "triggers_of", "unstorable", "value_text",
)

if TYPE_CHECKING:       # what a type checker sees for the names PUBLIC_ELSEWHERE loads on use
    from falai_checks import check_flow, validate_flow
    from falai_spec import (check_registry, events_to_history, flow_spec_schema, from_spec,
                            history_to_events, load_registry, migrate_session, to_spec)
    from falai_stores import MemoryStore, Store
    from falai_testing import MemoryScheduler, ScriptedProvider


def __getattr__(name: str) -> Any:
    """A public name that lives in a sibling module, imported on first use (PEP 562)."""
    module = PUBLIC_ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'falai' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value         # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    """``__all__`` and the module's dunders: what ``dir(falai)`` shows is the API."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


class _FalaiLog:
    """The "falai" logger, looked up on first use: ``import falai`` neither imports logging nor
    creates a logger. An attribute is the logger's own bound method, so a record still names the
    engine function that logged it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(falai_logger(), name)

    def isEnabledFor(self, level: int) -> bool:
        # Checked on every outcome line and model call: a method of its own, since __getattr__ runs
        # only after a failed lookup, which costs more than the check.
        return falai_logger().isEnabledFor(level)


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
class TurnStreamChunk:
    """A piece of ``turn_stream()``: text deltas, then one ``done=True`` chunk with the result."""
    delta: str = ""
    done: bool = False
    result: TurnResult | None = None


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


# 6. The toolkit ###############################################################################
#
# falai() and f.agent() build an Agent; construction validates everything
# (flows.md §14, persistence.md §1.10-§1.11) so a flow that cannot run fails
# here, never in the middle of a conversation.

class _Kit:
    """The methods the root and the bound toolkit share."""

    _field_defs: dict | None = None      # the root has none; Toolkit binds them

    def flow(self, flow: dict) -> dict:
        """Return the flow unchanged; it is validated when the agent is built."""
        return flow

    def from_spec(self, spec: dict) -> dict:
        """A stored FlowSpec as a flow dict (persistence.md §1.7)."""
        import falai_spec       # here, not at import: only a flow read from JSON needs it
        return falai_spec.from_spec(spec)

    def action(self, *, parameters: dict, run: Callable, description: str | None = None) -> Action:
        """A host action a ``do`` step names (flows.md §9)."""
        return Action(parameters=parameters, run=run, description=description)

    def event(self, *, direction: str | None = None) -> EventDef:
        """A host event (flows.md §10)."""
        if direction not in (None, "inbound", "outbound"):
            raise ValueError('event direction must be "inbound", "outbound" or None, not '
                             f'{direction!r}')
        return EventDef(direction=direction)

    def condition(self, check: Callable[[PredCtx, Any], bool]) -> Condition:
        """A named code predicate JSON flows may use (flows.md §7.3)."""
        return Condition(check=check)

    def agent(self, **options: Any) -> Agent:
        """Build an Agent with this toolkit's fields."""
        if "fields" in options:
            raise TypeError("f.agent() takes its fields from the toolkit; pass them to "
                            "falai().fields(...)")
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
            raise TypeError("fields() takes a dict of field definitions, not "
                            f"{type(defs).__name__}")
        return Toolkit(defs)


def correctable_fields(fields: Any, correctable: Any) -> Any:
    """The agent's option ``correctable=True``: every field that does not say otherwise reads as
    ``"correctable": True`` (docs/guide/flows.md, When the customer changes their mind)."""
    if correctable is not True:
        raise FlowConfigurationError(f"correctable is {show(correctable)}: it must be True or "
                                     "False. Leave it out to keep known values as they are.")
    if not isinstance(fields, dict):
        return fields           # check_agent names the problem
    return {slug: {**d, "correctable": True}
            if isinstance(d, dict) and "correctable" not in d else d for slug, d in fields.items()}


def falai() -> RootToolkit:
    """The root toolkit: ``f = falai().fields({...}); agent = f.agent(name=..., provider=...,
    flows=[...])``."""
    return RootToolkit()


PROTOCOLS = ("lean", "v4")     # docs/guide/tokens.md

FROZEN_HINT = ("an Agent's configuration cannot change after it is built: build a new Agent "
               "with the flows, fields and options you want (python-api.md, The toolkit)")


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(FROZEN_HINT)


class ReadOnlyDict(dict):
    """A dict an Agent holds as part of its configuration: read like any dict, never changed.

    A copy (``copy.copy``, ``copy.deepcopy``, ``dict(...)``, ``.copy()``) is a plain, writable dict,
    so the engine's copies of flow values into a session stay writable.
    """
    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return thawed(self)

    def __reduce__(self) -> tuple:
        return dict, (thawed(self),)


class ReadOnlyList(list):
    """A list an Agent holds as part of its configuration: read like any list, never changed.

    A copy (``copy.copy``, ``copy.deepcopy``, ``list(...)``, ``.copy()``, a slice) is a plain list.
    """
    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return thawed(self)

    def __reduce__(self) -> tuple:
        return list, (thawed(self),)


def frozen(value: Any) -> Any:
    """A read-only copy of JSON-shaped configuration: every dict and list in it, at any depth, is a
    ReadOnlyDict or ReadOnlyList; other values (callables, Tool objects) are kept as they are."""
    if isinstance(value, dict):
        return ReadOnlyDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(frozen(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A plain, writable deep copy of a value ``frozen()`` made, the other way round."""
    if isinstance(value, dict):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thawed(item) for item in value]
    return copy.deepcopy(value)


class Agent:
    """Configuration frozen when it is built, plus ``turn()``; one instance serves every session.

    ``turn()`` returns the messages to send, the wakes to schedule and the
    session to save. The agent never sends, never sleeps and never saves.

    The agent keeps its own read-only copies of the flows, fields, tools and other
    options it was given: a later change to the caller's lists or dicts changes nothing,
    and assigning an attribute or editing ``agent.flows`` raises. To change the
    configuration, build a new Agent (python-api.md, The toolkit).
    """

    def __init__(self, *, name: str, provider: Any, fields: dict | None = None,
                 flows: list | None = None, actions: dict | None = None, events: dict | None = None,
                 conditions: dict | None = None, tools: list | None = None,
                 instructions: list | None = None, knowledge_base: dict | None = None,
                 goal: str | None = None, persona: str | None = None, idle: Any = None,
                 clock: Callable[[], datetime] | None = None,
                 business_hours: Callable[[datetime, Any], datetime] | None = None,
                 max_tool_loops: int = DEFAULT_MAX_TOOL_LOOPS, compaction: dict | None = None,
                 debug: bool = False, protocol: str = "lean", max_candidates: int | None = None,
                 correctable: bool = False):
        # The agent's own read-only copies: the caches a turn reads rely on them never changing.
        self.name = name
        self.provider = provider
        fields = fields or {}
        if correctable is not False:
            fields = correctable_fields(fields, correctable)
        self.fields = frozen(fields)
        # A None anywhere in a flow means "not set" (flows.md, Notation): the engine reads stripped
        # copies.
        self.flows = ReadOnlyList(frozen(strip_nones(flow)) for flow in flows or [])
        self.actions = ReadOnlyDict(actions or {})
        self.events = ReadOnlyDict(events or {})
        self.conditions = ReadOnlyDict(conditions or {})
        self.tools = ReadOnlyList(tools or [])
        self.instructions = frozen(list(instructions or []))
        self.knowledge_base = frozen(knowledge_base)
        self.goal = goal
        self.persona = persona
        self.idle: dict | str = frozen({"prompt": ""} if idle is None else idle)
        self.clock = clock or system_clock
        self.business_hours = business_hours
        self.max_tool_loops = max_tool_loops
        self.compaction = frozen(compaction)
        if protocol not in PROTOCOLS:
            raise FlowConfigurationError(f'protocol is {show(protocol)}: it must be "lean" or '
                                         '"v4". Leave it out for "lean", or pass "v4" for the '
                                         'TypeScript original\'s model calls.')
        if max_candidates is not None and (not is_whole(max_candidates)
                                           or isinstance(max_candidates, bool)
                                           or max_candidates < 1):
            raise FlowConfigurationError(f"max_candidates is {show(max_candidates)}: it must be a "
                                         "whole number of at least 1. Leave it out to score every "
                                         "eligible flow.")
        if not isinstance(max_tool_loops, int) or isinstance(max_tool_loops, bool):
            raise FlowConfigurationError(f"max_tool_loops is {show(max_tool_loops)}: it must be a "
                                         "whole number (0 or less offers no tools). Leave it out "
                                         f"for {DEFAULT_MAX_TOOL_LOOPS} tool rounds.")
        self.protocol = protocol
        self.max_candidates = max_candidates
        # Everything worked out once from this configuration, its protocol object included.
        self.compiled = Compiled(self)
        if debug:
            log.setLevel(DEBUG)
        flow_by_id: dict[str, dict] = {}
        for flow in self.flows:
            if isinstance(flow, dict) and isinstance(flow.get("id"), str):
                flow_by_id.setdefault(flow["id"], flow)
        self.flow_by_id = ReadOnlyDict(flow_by_id)
        import falai_checks     # here, not at import: the checks run once, when an agent is built
        for warning in falai_checks.check_agent(self):
            log.warning("[Agent] %s", warning)
        self._built = True

    def __setattr__(self, name: str, value: Any) -> None:
        if "_built" in self.__dict__:
            raise AttributeError(f"cannot set agent.{name}: {FROZEN_HINT}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete agent.{name}: {FROZEN_HINT}")

    def turn(self, *, session_id: str, session: Session | dict | None = None,
             message: str | None = None, id: str | None = None, at: str | None = None,
             wake: str | None = None,
             event: str | None = None, key: str | None = None, payload: Any = None,
             hop: int | None = None, start: dict | None = None,
             context: Any = None, history: list | None = None, silenced: str | dict | None = None,
             anchors: dict | None = None, claims: dict | None = None) -> TurnResult:
        """Run one turn (runtime.md §3); all arguments are keywords.

        Exactly one of ``message`` (with ``id``, ``at``), ``wake``, ``event``
        (with ``key``, ``payload``, ``hop``) or ``start`` is given (python-api.md, One turn).

        ``agent.turn(session_id="s1", session=saved, message="oi", id="m1")``
        """
        arguments = given_keywords({
            "session_id": session_id, "session": session, "message": message, "id": id, "at": at,
            "wake": wake, "event": event, "key": key, "payload": payload, "hop": hop,
            "start": start, "context": context, "history": history, "silenced": silenced,
            "anchors": anchors, "claims": claims})
        stream = run_turn(self, arguments, streaming=False)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                return done.value

    def turn_stream(self, *, session_id: str, session: Session | dict | None = None,
                    message: str | None = None, id: str | None = None, at: str | None = None,
                    wake: str | None = None,
                    event: str | None = None, key: str | None = None, payload: Any = None,
                    hop: int | None = None, start: dict | None = None,
                    context: Any = None, history: list | None = None,
                    silenced: str | dict | None = None, anchors: dict | None = None,
                    claims: dict | None = None) -> Iterator[TurnStreamChunk]:
        """Run one turn, yielding text deltas while the reply is phrased, then the result
        (runtime.md §16).

        Takes the same keywords as ``turn()``.
        """
        arguments = given_keywords({
            "session_id": session_id, "session": session, "message": message, "id": id, "at": at,
            "wake": wake, "event": event, "key": key, "payload": payload, "hop": hop,
            "start": start, "context": context, "history": history, "silenced": silenced,
            "anchors": anchors, "claims": claims})
        stream = run_turn(self, arguments, streaming=True)
        while True:
            try:
                delta = next(stream)
            except StopIteration as done:
                yield TurnStreamChunk(done=True, result=done.value)
                return
            yield TurnStreamChunk(delta=delta)

    def pending_wakes(self, *, session: Session | dict, context: Any = None,
                      anchors: dict | None = None,
                      claims: dict | None = None) -> list[ScheduleEntry]:
        """The wakes a saved session is waiting on (runtime.md §14); changes nothing."""
        return pending_wakes(self, session, context, anchors, claims)

    def __repr__(self) -> str:
        return (f"Agent(name={self.name!r}, "
                f"flows={[f.get('id') for f in self.flows if isinstance(f, dict)]!r})")


class Compiled:
    """Everything an agent works out once from its frozen configuration and keeps, each on first
    use: each flow's facts and words, its flows by trigger kind, the fields a list of flows can
    fill, its silence flows, the thread pool for safe tool calls, and its protocol object, which
    keeps the parts of its model calls (envelopes, system texts, schemas: falai_protocols).

    One per agent (``agent.compiled``), the one owner of every cache the agent has. The engine
    and the model calls ask through these methods; nothing reaches into what they keep. Flows
    are the agent's own read-only copies, kept as long as the agent, so their ids name them.
    """

    def __init__(self, agent: Agent) -> None:
        import falai_calls      # here, not at import: the model calls load with the first agent
        self._agent = agent
        # The agent's one protocol object (Lean or V4): how its model calls are laid out, and the
        # parts of them it builds once, kept inside it and reached through its methods.
        self._model_calls = falai_calls.for_protocol(agent.protocol)
        self._flow_facts: dict[int, tuple[dict, FlowFacts]] = {}
        self._flow_words: dict[int, frozenset[str]] = {}
        self._by_trigger: FlowsByTrigger | None = None
        self._harvest: dict[tuple, tuple[str, ...]] = {}
        self._silence_flows: list[tuple[dict, dict]] | None = None
        self._tool_pool: Any = None
        self._tool_pool_lock = threading.Lock()

    def flow_facts(self, flow: dict) -> FlowFacts:
        """What routing reads of one of the agent's flows."""
        kept = self._flow_facts.get(id(flow))
        if kept is not None and kept[0] is flow:
            return kept[1]
        facts = work_out_flow_facts(flow)
        self._flow_facts[id(flow)] = (flow, facts)     # the flow is kept, so its id is not reused
        return facts

    def flow_words(self, flow: dict) -> frozenset[str]:
        """The words of one of the agent's flows, for the lexical prefilter."""
        words = self._flow_words.get(id(flow))
        if words is None:
            words = self._flow_words[id(flow)] = _flow_words(flow)
        return words

    def flows_by_trigger(self) -> FlowsByTrigger:
        """The agent's flows listed by trigger kind."""
        if self._by_trigger is None:
            self._by_trigger = work_out_flows_by_trigger(self._agent)
        return self._by_trigger

    def harvest(self, flows: list, work_out: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """The "anywhere" fields ``flows`` can fill, by ``work_out()`` once per list of flows; at
        most UNDERSTAND_PLANS_KEPT lists are kept (a bound on memory, not a policy)."""
        return reused(self._harvest, tuple(map(id, flows)), work_out, UNDERSTAND_PLANS_KEPT)

    def silence_flows(self) -> list[tuple[dict, dict]]:
        """(flow, its first silence trigger) of each flow whose silence is a duration."""
        if self._silence_flows is None:
            self._silence_flows = work_out_silence_flows(self._agent)
        return self._silence_flows

    def model_calls(self) -> falai_calls.ModelCalls:
        """The agent's protocol object (falai_protocols): it lays out the agent's model calls and
        keeps the parts of them it builds once."""
        return self._model_calls

    def tool_pool(self) -> Any:
        """The agent's one thread pool for safe tool calls, created on first use and capped."""
        with self._tool_pool_lock:
            if self._tool_pool is None:
                from concurrent.futures import ThreadPoolExecutor   # lazily: often never used
                self._tool_pool = ThreadPoolExecutor(max_workers=TOOL_POOL_WORKERS,
                                                     thread_name_prefix="falai-tool")
            return self._tool_pool


def given_keywords(keywords: dict) -> dict:
    """The keywords a turn() or turn_stream() call was given (None is "not given"), as
    read_turn_input checks them. A dict, not ``**keywords``: packing 16 keywords into a call costs
    more than the dict display."""
    return {name: value for name, value in keywords.items() if value is not None}


# 7. The session ###############################################################################
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


# 8. The turn ##################################################################################
#
# runtime.md §3: load -> ingest -> understand? -> decide -> run -> speak? ->
# settle -> return. One generator does it all: turn() drains it, turn_stream()
# forwards the text deltas the speak call yields (runtime.md §16).

# One turn: its input, its state, the pipeline (runtime.md §2, §3, §12) ------------------------

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


INPUT_KINDS = ("message", "wake", "event", "start")
KIND_KEYWORDS = {"message": ("id", "at"), "event": ("key", "payload", "hop"), "wake": (),
                 "start": ()}
TURN_KEYWORDS = {"session_id", "session", "context", "history", "silenced", "anchors", "claims",
                 *INPUT_KINDS, "id", "at", "key", "payload", "hop"}
# Per input kind, the keywords that belong to another kind, with that kind, in KIND_KEYWORDS order.
FOREIGN_KEYWORDS = {kind: tuple((keyword, other) for other, keywords in KIND_KEYWORDS.items()
                                if other != kind for keyword in keywords) for kind in INPUT_KINDS}
TYPED_KEYWORDS = (("id", str), ("at", str), ("history", list), ("anchors", dict), ("claims", dict))


@dataclass(slots=True)
class TurnInput:
    """The arguments of one turn, checked (runtime.md §2)."""
    session_id: str
    kind: str
    session: Session | None = None
    context: Any = None
    history: list | None = None
    silenced: Any = None
    anchors: dict = field(default_factory=dict)
    claims: dict = field(default_factory=dict)
    message: str | None = None
    id: str | None = None
    at: str | None = None
    wake: str | None = None
    event: str | None = None
    key: str | None = None
    payload: Any = None
    hop: int = 0
    start: dict | None = None


def read_turn_input(given: dict) -> TurnInput:
    """Check the keywords given to turn() (``given_keywords``: None is "not given"); a TypeError
    names what is wrong (runtime.md §2.2)."""
    if not TURN_KEYWORDS.issuperset(given):
        raise TypeError("turn() got unexpected keyword argument(s): "
                        f"{', '.join(sorted(set(given) - TURN_KEYWORDS))}")
    session_id = given.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise TypeError(f"turn() needs session_id=<non-empty str>, got {session_id!r}")
    kinds = [kind for kind in INPUT_KINDS if kind in given]
    if len(kinds) != 1:
        got = "none" if not kinds else " and ".join(kinds)
        raise TypeError("turn() takes exactly one input kind (message, wake, event or start); got "
                        f"{got}")
    kind = kinds[0]
    for keyword, other in FOREIGN_KEYWORDS[kind]:
        if keyword in given:
            raise TypeError(f"turn() got {keyword}= with a {kind} input; {keyword} belongs to "
                            f"{other}")
    value = given[kind]
    if kind == "start":
        if (not isinstance(value, dict) or not isinstance(value.get("flow"), str)
                or not isinstance(value.get("key"), str)):
            raise TypeError('turn(start=...) needs a dict with "flow" and "key" strings, '
                            f'such as {{"flow": "lembrete", "key": "k1"}}; got {value!r}')
        hop = value.get("hop", 0)
    else:
        if not isinstance(value, str):
            raise TypeError(f"turn({kind}=...) takes a str, got {type(value).__name__}")
        hop = given.get("hop") or 0
    if kind == "event" and not isinstance(given.get("key"), str):
        raise TypeError("turn(event=...) needs key=<str>, the host's idempotency key for the event")
    if not isinstance(hop, int) or isinstance(hop, bool) or hop < 0:
        raise TypeError(f"hop must be a whole number of 0 or more, got {hop!r}")
    for name, expected in TYPED_KEYWORDS:
        if name in given and not isinstance(given[name], expected):
            raise TypeError(f"turn({name}=...) takes a {expected.__name__}, got "
                            f"{type(given[name]).__name__}")
    at = given.get("at")
    if at is not None:
        try:
            check_instant(parse_iso(at), "the instant", "Pass an instant inside it.")
        except ValueError as error:
            raise TypeError(f"turn(at=...): {error}") from None
    if "payload" in given:
        check_nesting(given["payload"], "turn(payload=...)")
    if kind == "start" and value.get("input") is not None:
        check_nesting(value["input"], 'turn(start={"input": ...})')
    silenced = given.get("silenced")
    if silenced is not None and not isinstance(silenced, str) and not (
            isinstance(silenced, dict) and isinstance(silenced.get("reason"), str)):
        raise TypeError('silenced takes a reason string or {"reason": str, "understand"?: bool, '
                        '"skip"?: bool}')
    session = given.get("session")
    if isinstance(session, dict):
        session = Session.from_dict(session)
    elif session is not None and not isinstance(session, Session):
        raise TypeError("turn(session=...) takes a Session or a blob dict, got "
                        f"{type(session).__name__}")
    # the keywords are TurnInput's fields
    read = {**given, "kind": kind, "session": session, "hop": hop}
    if not read.get("id"):
        read.pop("id", None)                # id="" is no id
    return TurnInput(**read)


# The phases of runtime.md §3 a turn passes through, in order (load is part of "ingest", return of
# "settle").
Phase = Literal["ingest", "understand", "decide", "run", "speak", "settle"]


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


def run_values(run: Run) -> dict:
    """A run's fields as keywords for Run or EndedRun, its nested values copied (json_copy)."""
    return {"id": run.id, "flow_id": run.flow_id, "anchor": run.anchor,
            "dedupe_key": run.dedupe_key, "step_id": run.step_id, "status": run.status,
            "trigger": json_copy(run.trigger), "hop": run.hop, "started_at": run.started_at,
            "asked": json_copy(run.asked), "visits": json_copy(run.visits),
            "outcomes": json_copy(run.outcomes), "input": json_copy(run.input),
            "suspended_at": run.suspended_at, "staying": run.staying,
            "waiting": json_copy(run.waiting)}


def copy_session(session: Session) -> Session:
    """The turn's own copy of the input session: the host's object is never mutated (runtime.md
    §3.1)."""
    runs = [Run(**run_values(run)) if type(run) is Run else copy.deepcopy(run)
            for run in session.runs]
    ids = session.inputs
    values = dict(data=json_copy(session.data), runs=runs, claims=json_copy(session.claims),
                  # ids: text, only ever replaced
                  inputs=ids.copy() if type(ids) is list else json_copy(ids),
                  metadata=json_copy(session.metadata),
                  history=json_copy(session.history))
    if type(session) is not Session:
        return replace(session, **values)
    return Session(id=session.id, version=session.version, last_user_at=session.last_user_at,
                   last_assistant_at=session.last_assistant_at, v=session.v, **values)


class TurnGiven(NamedTuple):
    """What a turn is given and never changes: the agent, the checked input, the turn's one instant,
    and the host's context, anchors, claims and silenced (runtime.md §2, §3.1).

    Read-only as a NamedTuple: a frozen dataclass sets each field through ``object.__setattr__``,
    which took 2% of a triage turn's instructions.
    """
    agent: Agent
    input: TurnInput
    now: datetime
    now_text: str             # the turn's one instant as blob text, stamped on lines, claims, runs
    session_id: str
    context: Any
    anchors: dict
    held_claims: dict
    active_claims: frozenset[str]
    silenced: str | None      # the reason, whichever form the host gave (runtime.md §9)
    understand_when_silenced: bool
    skip_mode: bool
    trigger_key: str


def turn_given(agent: Agent, given: TurnInput, now: datetime, session: Session) -> TurnGiven:
    """What a turn is given, read once at its start; ``session`` is the turn's copy."""
    now_text = iso(now)
    silenced = given.silenced
    return TurnGiven(
        agent=agent, input=given, now=now, now_text=now_text, session_id=given.session_id,
        context=given.context, anchors=given.anchors,
        held_claims=given.claims.get("held") or {},
        active_claims=frozenset(given.claims.get("active") or []),
        silenced=(silenced if isinstance(silenced, str)
                  else silenced.get("reason") if silenced else None),
        understand_when_silenced=isinstance(silenced, dict) and bool(silenced.get("understand")),
        skip_mode=isinstance(silenced, dict) and bool(silenced.get("skip")),
        trigger_key=trigger_key_of(given, session, now_text))


def trigger_key_of(given: TurnInput, session: Session, now_text: str) -> str:
    """The input's trigger key (runtime.md §2.3)."""
    if given.kind == "message":
        return given.id or instant_key(session, given.at or now_text)
    # read_turn_input sets the field each kind names
    if given.kind == "wake":
        assert given.wake is not None
        return given.wake
    if given.kind == "event":
        assert given.key is not None
        return given.key
    assert given.start is not None
    return given.start["key"]


class Turn:
    """One turn in flight: what it was given (``given``, read-only) and what it changes: the
    session copy and the history, what it produces, where it is, the floor and the speaker.

    ``phase`` says where the turn is (runtime.md §3); run_turn alone moves it.
    """

    def __init__(self, agent: Agent, given: TurnInput):
        now = check_instant(agent.clock(), "the agent's clock reading", "Check the clock.")
        try:
            self.session = (copy_session(given.session) if given.session
                            else Session(id=given.session_id))
        # a Session built by hand far past BLOB_NESTING; no store would save it
        except RecursionError:
            assert given.session is not None    # a fresh Session never nests that deep
            raise InvalidSessionError(given.session.id,
                                      f"it nests deeper than {BLOB_NESTING} levels "
                                      f"(a value may nest {MAX_NESTING}; "
                                      "docs/guide/limits.md)") from None
        self.given = turn_given(agent, given, now, self.session)     # read-only from here on
        self.history = (given.history if given.history is not None
                        else list(self.session.history or []))
        # what the turn produces
        self.messages: list[OutboundMessage] = []
        self.schedule: list[ScheduleEntry] = []
        self.outcomes: list[StepOutcome] = []
        self.started: list[StartedRun] = []
        self.ended: list[EndedRun] = []
        self.skipped: list[SkippedTrigger] = []
        self.llm_calls = 0
        self.usage: TokenUsage | None = None
        # where the turn is, the floor and the speaker
        self.phase: Phase = "ingest"
        # The turn's floor run: the run a message is about. Set by Ingest (I-R, I-W, I-S, I-F), by a
        # routed or resumed start in Decide, and inherited by a chained child (runtime.md §3.2, §3.5
        # rule 3, §3.6.4); it moves only through move_floor(), by FLOOR_MOVES.
        self.floor_run: Run | None = None
        # A run took the floor in Ingest (rule I-F): Decide does no routing and asks no branches
        # (§3.2, §3.4). Set by move_floor() too.
        self.floor_from_ingest = False
        # The talk step that speaks in phase 6; the latest one wins (runtime.md §3.6.3 talk rule 6).
        self.talk_request: Run | None = None
        # Someone emitted a message this turn (say, fixed question, a `do` that spoke, the reply;
        # §3.6.6).
        self.spoke = False
        # the runs that spoke, for the silence wakes (runtime.md §7.6)
        self.spoke_runs: set[str] = set()
        # short waits riding on the next message (runtime.md §3.6.3, §7.2)
        self.pending_delay_ms = 0
        # runs to move in phases 5 and 7, in order (runtime.md §3.6)
        self.queue: list[Run] = []
        # compaction runs once, before the first model call (§3)
        self.compacted = False

    @property
    def is_message(self) -> bool:
        return self.given.input.kind == "message"

    def unanswered_message(self) -> bool:
        """Ingest is over, the turn is a message, not silenced, not yet spoken or answered
        (runtime.md §4.7 rule 5)."""
        return (self.phase not in ("ingest", "settle") and self.is_message
                and self.given.silenced is None and not self.spoke)

    def live(self, run: Run) -> bool:
        # A loop: any() over a generator costs more, per turn.
        for live in self.session.runs:      # noqa: SIM110
            if live is run:
                return True
        return False

    def asker(self) -> Run | None:
        for run in self.session.runs:
            if run.status == "asking":
                return run
        return None

    def scope(self, run: Run | None = None) -> Scope:
        return Scope(data=self.session.data, context=self.given.context,
                     input=run.input if run else None)

    def pred_ctx(self, run: Run | None, input: Any = None, silenced: Any = "turn") -> PredCtx:
        return PredCtx(context=self.given.context, data=self.session.data,
                       input=run.input if run is not None and input is None else input,
                       run=run, silenced=self.given.silenced if silenced == "turn" else silenced,
                       now=self.given.now)

    def holds(self, predicate: Any, run: Run | None, input: Any = None) -> bool:
        return judge(predicate, self.pred_ctx(run, input), self.given.agent.conditions)

    def count(self, llm_calls: int, usage: TokenUsage | None) -> None:
        self.llm_calls += llm_calls
        self.usage = add_usage(self.usage, usage)

    def compact_once(self) -> None:
        """Compaction runs right before the turn's first model call, at most once (runtime.md
        §3)."""
        if self.compacted:
            return
        self.compacted = True
        import falai_calls
        self.history, calls, usage = falai_calls.compact_history(self.given.agent, self.history)
        self.count(calls, usage)

    def result(self, changed: bool) -> TurnResult:
        return TurnResult(session=self.session, changed=changed, messages=self.messages,
                          schedule=self.schedule, outcomes=self.outcomes, started=self.started,
                          ended=self.ended, skipped=self.skipped, llm_calls=self.llm_calls,
                          usage=self.usage)


# Why the turn's floor run moves, by the spec's floor rules (runtime.md §3.2, §3.5, §3.6.4, §4.4).
# move_floor() is the one writer of ``turn.floor_run`` and ``turn.floor_from_ingest``.
FLOOR_MOVES: dict[str, str] = {
    # Ingest (§3.2)
    "replied": "I-R: a reply resolved the run's timer wait: it holds the floor, unless a run took "
               "it in Ingest, so that a stay it reaches answers this message",
    "resolved": "I-F: a run resolved in Ingest (I-R, an arrived event), still live after "
                "following its target, takes the floor in Ingest, once per turn",
    "woken": "I-W: the run a run wake moves on",
    "silence": "I-S: the run a silence wake started",
    # Decide (§3.5)
    "routed": "rule 5: the run routing started or resumed",
    "asker": "rule 6: nothing was routed and no run took the floor in Ingest: the asker holds it",
    # Run (§3.6.4)
    "chained": "chaining rule 6: a chained child inherits an unset floor or its parent's; during "
               "Ingest it so takes the floor in Ingest",
}


def move_floor(turn: Turn, run: Run, why: str, parent: Run | None = None) -> None:
    """``run`` takes the turn's floor on ``why``, a key of FLOOR_MOVES, when that rule lets it;
    otherwise nothing changes. ``parent``: the run a ``"chained"`` child was chained from."""
    if why not in FLOOR_MOVES:
        raise RuntimeError(f'the floor cannot move to run "{run.id}" on "{why}": FLOOR_MOVES has '
                           "no such rule (runtime.md §4.4). This is a bug in falai; please "
                           "report it.")
    if why in ("replied", "asker") and turn.floor_from_ingest:
        return
    if why == "resolved":
        if turn.floor_from_ingest or not turn.live(run):
            return
        turn.floor_from_ingest = True
    elif why == "chained":
        if turn.floor_run is not None and turn.floor_run is not parent:
            return
        if turn.phase == "ingest":
            turn.floor_from_ingest = True
    turn.floor_run = run


def run_turn(agent: Agent, kwargs: dict, streaming: bool) -> Generator[str, None, TurnResult]:
    """The one pipeline behind turn() and turn_stream(): yields deltas, returns the TurnResult.

    ``turn.given`` never changes. What each phase changes of the rest (the session copy, its runs,
    the history, what the turn produces, the floor) is said on its line; a run's status moves only
    through move_status(), by RUN_MOVES, and the turn's floor only through move_floor(), by
    FLOOR_MOVES.
    """
    given = read_turn_input(kwargs)
    turn = Turn(agent, given)                  # copies the session: the input one never changes
    ignored = ingest(turn)      # 1-2: inputs, last-at times, woken runs and their moves, the floor
    if ignored is not None:
        write_line(turn, None, "wait", "skipped", code=ignored.code, key=ignored.key,
                   detail=ignored.detail)                    # an ignored input changes nothing else
        return turn.result(changed=False)
    if turn.is_message:
        turn.phase = "understand"
        understood = understand_message(turn)   # 3: no session or run; compacts the history once
        turn.phase = "decide"
        decide(turn, understood)                # 4: field values, started, resumed runs, the floor
    turn.phase = "run"
    run_phase(turn)                             # 5: runs move (steps, data, waits), messages, lines
    turn.phase = "speak"
    speaker = choose_speaker(turn)              # 6: a due fixed question or a skip line; the call
    spoken = None
    if speaker is not None:
        ask = speak_ask(turn, speaker)
        turn.compact_once()
        import falai_calls
        spoken = yield from falai_calls.speak(agent, ask, streaming)   # ... itself changes nothing
    turn.phase = "settle"
    settle(turn, speaker, spoken)       # 7: the reply, its fields, the speaker's run, resumes
    # What the turn produced first: comparing the sessions walks the whole blob, a long history
    # included.
    changed = bool(turn.messages or turn.schedule or turn.outcomes or turn.skipped) or (
        given.session is None or turn.session != given.session)
    return turn.result(changed=changed)                      # phase 8


# Phases 1-2: load and ingest (runtime.md §3.1-§3.3) -------------------------------------------

@dataclass(slots=True)
class Ignored:
    """An input the turn ignores: its ``wait / skipped`` line's code and key (runtime.md §3.3)."""
    code: str
    key: str
    detail: str | None = None


def ingest(turn: Turn) -> Ignored | None:
    """Apply the input to the session copy; returns what was ignored, if the input is."""
    given = turn.given.input
    if given.kind == "wake" and given.session is None:
        assert given.wake is not None           # read_turn_input sets the field each kind names
        return Ignored("no-session", given.wake)
    if given.kind == "message":
        if given.id and given.id in turn.session.inputs:
            return Ignored("duplicate-input", given.id)
        if given.id:
            turn.session.inputs = [*turn.session.inputs, given.id][-INPUTS_KEPT:]
        elif turn.given.trigger_key != (given.at or turn.given.now_text):
            # An id-less message sharing its instant took a numbered key: kept, so the next one
            # in that instant takes the next number (instant_key).
            turn.session.inputs = [*turn.session.inputs, turn.given.trigger_key][-INPUTS_KEPT:]
        turn.session.last_user_at = iso(parse_iso(given.at)) if given.at else turn.given.now_text
        resolve_reply_waits(turn)
    elif given.kind == "wake":
        assert given.wake is not None
        if given.wake.startswith("silence:"):
            return ingest_silence_wake(turn, given.wake)
        return ingest_run_wake(turn, given.wake)
    elif given.kind == "event":
        if given.event not in turn.given.agent.events and not any(
                parked_on(run).get("event") == given.event for run in turn.session.runs):
            assert given.key is not None    # nothing waits on it and no trigger names it: say so
            return Ignored("unknown-event", given.key, given.event)
        ingest_event(turn, given)
    else:
        assert given.start is not None
        flow = turn.given.agent.flow_by_id.get(given.start["flow"])
        if flow is None:
            skip(turn, given.start["flow"], turn.given.session_id, given.start["key"], "flow-gone")
        else:
            start_run(turn, flow, "start", given.start["key"], payload=given.start.get("input"),
                      hop=given.hop)
    return None


def instant_key(session: Session, instant: str) -> str:
    """An id-less message's trigger key: its instant, unique in the session (docs/guide/limits.md).

    The instant alone, as in the original, unless the session's last customer message
    came at or after it: then an earlier id-less message may have used it, and the key
    is ``{instant}#{n}``, the first n from 2 not among the session's ``inputs``. A
    replay on the same session gets the same key.
    """
    last = session.last_user_at
    if last is None:
        return instant
    try:
        if parse_iso(instant) > parse_iso(last):
            return instant
    except (TypeError, ValueError, OverflowError):
        return instant             # a stored time that does not read: the original's key
    n = 2
    while f"{instant}#{n}" in session.inputs:
        n += 1
    return f"{instant}#{n}"


def resolve_reply_waits(turn: Turn) -> None:
    """Rule I-R: the customer spoke, so timer waits with an ``else`` resume (runtime.md §3.2)."""
    for run in list(turn.session.runs):
        if (run.status != "waiting" or (run.waiting or {}).get("kind") != "timer"
                or run.step_id is None):
            continue
        step = current_step(turn, run)
        if step is None or not isinstance(step.get("wait"), str) or step.get("else") is None:
            continue
        move_status(turn, run, "replied")
        target = next((branch.get("then") for branch in step.get("branches") or []
                       if branch.get("if") is not None and turn.holds(branch["if"], run)),
                      step["else"])
        moved = go(turn, run, "wait", "ok", target, code="replied")
        move_floor(turn, run, "replied")    # before advancing: a child it chains inherits it
        advance(turn, run, moved)
        move_floor(turn, run, "resolved")


def parked_on(run: Run) -> dict:
    """What a waiting run waits on; ``{}`` for a run that is not ``waiting``, whatever its blob
    carries (a ``waiting`` left beside another status is no wait: runtime.md §7.4)."""
    return (run.waiting or {}) if run.status == "waiting" else {}


def ingest_run_wake(turn: Turn, key: str) -> Ignored | None:
    """Rule I-W: the one live run parked under this exact key moves on (runtime.md §3.2)."""
    run = next((run for run in turn.session.runs if parked_on(run).get("key") == key), None)
    if run is None:
        return Ignored("stale-wake", key)
    set_at = run.waiting.get("setAt") or run.started_at
    move_status(turn, run, "wake")
    move_floor(turn, run, "woken")
    step = current_step(turn, run)
    if run.step_id is None or step is None:
        return None
    wait = step.get("wait")
    if isinstance(wait, str):
        replied = step.get("else") is not None and customer_wrote_since(turn, run.flow_id, set_at)
        target, code = (step["else"], "replied") if replied else (step.get("then"), "no-reply")
        advance(turn, run, go(turn, run, "wait", "ok", target, code=code))
    elif isinstance(wait, dict):
        advance(turn, run, go(turn, run, "wait", "ok", step.get("else", "end"), code="no-event"))
    return None


def ingest_silence_wake(turn: Turn, key: str) -> Ignored | None:
    """Rule I-S: a silence wake starts its flow while the silence still holds (runtime.md §3.2)."""
    body = key[len("silence:"):]
    ms = body.rsplit(":", 1)[-1]
    flow_id = unescape_key_part(body.split(":", 1)[0])    # the flow id part has no ":" (key_part)
    flow = turn.given.agent.flow_by_id.get(flow_id)
    if flow is None:
        skip(turn, flow_id, turn.given.session_id, ms, "flow-gone")
        return None
    last = turn.session.last_assistant_at
    if (last is None or str(to_ms(parse_iso(last))) != ms
            or customer_wrote_since(turn, flow_id, last)):
        return Ignored("silence-broken", key)
    trigger = first_trigger(flow, "silence")
    if trigger is not None:
        run = start_run(turn, flow, "silence", ms, trigger=trigger)
        if run is not None:
            move_floor(turn, run, "silence")
    return None


def ingest_event(turn: Turn, given: TurnInput) -> None:
    """An event: stamp its direction, release event waits, start event triggers (runtime.md
    §3.2)."""
    assert given.key is not None                # read_turn_input sets the field each kind names
    definition = turn.given.agent.events.get(given.event)
    direction = getattr(definition, "direction", None)
    if direction == "inbound":
        turn.session.last_user_at = turn.given.now_text
        resolve_reply_waits(turn)
    elif direction == "outbound":
        turn.session.last_assistant_at = turn.given.now_text
    for run in list(turn.session.runs):
        waiting = parked_on(run)
        if waiting.get("kind") != "event" or waiting.get("event") != given.event:
            continue
        move_status(turn, run, "event-arrived")
        step = current_step(turn, run)
        if flow_of(turn, run) is None or step is None:
            continue
        advance(turn, run, go(turn, run, "wait", "ok", step.get("then"), code="event-arrived"))
        move_floor(turn, run, "resolved")
    for flow in turn.given.agent.flows:
        for trigger in flow.get("on") or []:
            if trigger.get("event") == given.event and start_run(
                    turn, flow, "event", given.key, trigger=trigger, payload=given.payload,
                    hop=given.hop):
                break


def customer_wrote_since(turn: Turn, flow_id: str, since: str) -> bool:
    """runtime.md §7.6: lastUserAt, or an anchored flow's lastInboundAt, is strictly later than
    since."""
    moment = parse_iso(since)
    last_user = turn.session.last_user_at
    if last_user is not None and parse_iso(last_user) > moment:
        return True
    flow = turn.given.agent.flow_by_id.get(flow_id) or {}
    name = flow.get("anchor") or "session"
    anchor = turn.given.anchors.get(name) or {}
    inbound = anchor.get("lastInboundAt") if name != "session" else None
    return inbound is not None and parse_iso(inbound) > moment


# Phases 3-4: understand and decide (runtime.md §3.4-§3.5) -------------------------------------

@dataclass(slots=True)
class Eligibility:
    """Which message and mention flows may be judged on this message (runtime.md §3.4 items 2-5)."""
    eligible: list = field(default_factory=list)
    catch_alls: list = field(default_factory=list)
    unscored: bool = False
    mentions: list = field(default_factory=list)


def qualifies(turn: Turn, flow: dict, trigger: dict | None, kind: str) -> bool:
    """A trigger's ``if`` holds for a draft run and its ``repeat`` allows a start (runtime.md
    §3.4)."""
    if trigger is None:
        return False
    key = turn.given.trigger_key
    if trigger.get("if") is not None and not turn.holds(trigger["if"],
                                                        draft_run(turn, flow, kind, key)):
        return False
    return repeat_allows(turn, flow, trigger, kind, key)


def eligibility(turn: Turn, floor: Run | None) -> Eligibility:
    listed = flows_by_trigger(turn.given.agent)
    # With no claim held, no repeat refuses (runtime.md §6.1).
    claim_free = not turn.session.claims and not turn.given.held_claims
    found = Eligibility(eligible=qualifying(turn, listed.phrased, claim_free),
                        catch_alls=qualifying(turn, listed.catch_alls, claim_free))
    # A phrased mention is asked when its repeat allows; its if is judged when it starts (runtime.md
    # §3.5).
    found.mentions = list(listed.asked_mentions.flows) if claim_free else [
        flow for flow, trigger in zip(listed.asked_mentions.flows, listed.asked_mentions.triggers)
        if repeat_allows(turn, flow, trigger, "mention", turn.given.trigger_key)]
    found.unscored = (floor is None and len(found.eligible) == 1
                      and turn.given.agent.idle == "silent" and not found.catch_alls)
    return found


def qualifying(turn: Turn, listed: TriggerList, claim_free: bool) -> list:
    """The listed flows whose message trigger qualifies on this message, in agent order (runtime.md
    §3.4)."""
    if claim_free and not listed.conditional:
        return list(listed.flows)       # no if to judge and no claim to refuse: every one qualifies
    return [flow for flow, trigger in zip(listed.flows, listed.triggers)
            if qualifies(turn, flow, trigger, "message")]


@dataclass(slots=True)
class FlowFacts:
    """What phase 3 reads from a flow on every message; the agent's flows never change, so once per
    agent."""
    phrased: dict | None
    catch_all: dict | None
    mention: dict | None
    slugs: tuple[str, ...]


def flow_facts(agent: Agent, flow: dict) -> FlowFacts:
    """The FlowFacts of one of the agent's flows, worked out on first use."""
    return agent.compiled.flow_facts(flow)


def work_out_flow_facts(flow: dict) -> FlowFacts:
    """What routing reads of a flow: its message triggers, its mention trigger, what it collects."""
    slugs = list(flow.get("collect") or [])
    for step in flow.get("steps") or []:
        if is_talk(step):
            slugs.extend(step.get("collect") or [])
    return FlowFacts(message_trigger(flow, phrased=True), message_trigger(flow, phrased=False),
                     first_trigger(flow, "mention"), tuple(unique_slugs(slugs)))


@dataclass(slots=True)
class TriggerList:
    """Flows holding one kind of trigger, in agent order, each with that trigger."""
    flows: tuple = ()
    triggers: tuple = ()
    conditional: bool = False

    @classmethod
    def of(cls, pairs: list) -> TriggerList:
        return cls(tuple(flow for flow, _ in pairs), tuple(trigger for _, trigger in pairs),
                   any(trigger.get("if") is not None for _, trigger in pairs))


@dataclass(slots=True)
class FlowsByTrigger:
    """The agent's flows by the triggers phases 3 and 4 read on every message (runtime.md
    §3.4-§3.5)."""
    phrased: TriggerList
    catch_alls: TriggerList
    mentions: TriggerList
    asked_mentions: TriggerList
    own: frozenset


def flows_by_trigger(agent: Agent) -> FlowsByTrigger:
    """The agent's FlowsByTrigger, worked out on first use."""
    return agent.compiled.flows_by_trigger()


def work_out_flows_by_trigger(agent: Agent) -> FlowsByTrigger:
    """Each kind of trigger and the agent's flows that have one (runtime.md §3.4)."""
    facts = [(flow, flow_facts(agent, flow)) for flow in agent.flows]
    mentions = [(flow, f.mention) for flow, f in facts if f.mention is not None]
    phrased = [(flow, f.phrased) for flow, f in facts if f.phrased is not None]
    catch_alls = [(flow, f.catch_all) for flow, f in facts if f.catch_all is not None]
    return FlowsByTrigger(TriggerList.of(phrased), TriggerList.of(catch_alls),
                          TriggerList.of(mentions),
                          TriggerList.of([(flow, t) for flow, t in mentions if t["mention"]]),
                          frozenset(map(id, agent.flows)))


def reused(cache: dict, key: Any, build: Callable[[], Any], bound: int | None = None) -> Any:
    """``cache[key]``, built by ``build()`` on a miss; a full cache is emptied first (a bound, not a
    policy). Without a bound, the keys are a fixed few names."""
    value = cache.get(key)
    if value is None:
        if bound is not None and len(cache) >= bound:
            cache.clear()
        value = cache[key] = build()
    return value


def floor_of(turn: Turn) -> Run | None:
    """The asking run, else the run that took the floor in Ingest (still live)."""
    asker = turn.asker()
    if asker is not None:
        return asker
    return turn.floor_run if turn.floor_run is not None and turn.live(turn.floor_run) else None


@dataclass(slots=True)
class Understood:
    """What phase 3 hands phase 4: the judgement and who was eligible to be judged (runtime.md
    §3.4-§3.5)."""
    judgement: Judgement
    eligibility: Eligibility
    asked: tuple = ()           # the fields the call was asked to read: the only ones written


def understand_message(turn: Turn) -> Understood:
    """Phase 3: work out what the model may judge and make at most one call (runtime.md §3.4)."""
    floor = floor_of(turn)
    found = eligibility(turn, floor)
    if turn.given.silenced is not None and not turn.given.understand_when_silenced:
        return Understood(Judgement(), found)
    assert turn.given.input.message is not None      # understand runs for a message only
    ask = UnderstandAsk(message=turn.given.input.message, scope=turn.scope(), history=turn.history,
                        mentions=list(found.mentions))
    floor_flow = flow_of(turn, floor) if floor is not None else None
    if floor is not None and floor_flow is not None:
        ask_floor(turn, ask, floor, floor_flow)
    # item 4: the single-flow shortcut scores none
    scored = [] if found.unscored else found.eligible
    bound = turn.given.agent.max_candidates
    if bound is not None and len(scored) > bound:
        scored = lexical_top(turn.given.input.message, scored, bound,      # docs/guide/tokens.md
                             lambda flow: flow_words(turn.given.agent, flow))
    lead = [floor_flow] if floor_flow else []
    ask.candidates = lead + [flow for flow in scored if flow is not floor_flow]     # each flow once
    # a bound asks only its flows' fields
    asked_flows = found.eligible if found.unscored else scored
    ask.fields = harvestable(turn, lead + asked_flows)
    if floor is None and found.catch_alls:
        ask.fields = unique_slugs([*ask.fields, *catch_all_fields(turn, ask, found.catch_alls[0])])
    import falai_calls
    if not falai_calls.needs_understand_call(ask):
        return Understood(Judgement(), found)
    turn.compact_once()
    ask.history = turn.history
    return Understood(falai_calls.understand(turn.given.agent, ask), found, tuple(ask.fields))


def ask_floor(turn: Turn, ask: UnderstandAsk, floor: Run, flow: dict) -> None:
    """The floor part of the ask: the run, its flow, its talk step's pending fields (runtime.md §3.4
    item 1) and, when it is asking there and did not take the floor in Ingest, the step's when
    branches (item 6)."""
    ask.floor_run, ask.floor_flow = floor, flow
    step = current_step(turn, floor)
    if step is None or not is_talk(step):
        return
    ask.floor_step = step
    ask.floor_pending = model_fields(turn.given.agent.fields, pending_fields(turn, step, floor))
    if floor.status == "asking" and not turn.floor_from_ingest:
        ask.branches = [AskedBranch(floor.id, step["id"], index, branch["when"])
                        for index, branch in enumerate(step.get("branches") or [])
                        if branch.get("when") is not None]


def catch_all_fields(turn: Turn, ask: UnderstandAsk, catch_all: dict) -> list[str]:
    """The first qualifying catch-all's harvestable fields, when anything else is judged or one of
    them is not "free"; else none: its first step asks them on its own speak call (runtime.md §3.4
    item 8)."""
    first = (catch_all.get("steps") or [None])[0]
    free = (set(first.get("collect") or [])
            if first and is_talk(first) and not first.get("question") else set())
    own = harvestable(turn, [catch_all])
    if (ask.candidates or ask.mentions or ask.branches or ask.fields
            or any(slug not in free for slug in own)):
        return own
    return []


def _words(text: Any) -> set[str]:
    """Lower-cased words of three or more letters or digits, accents removed (the lexical
    prefilter)."""
    if not isinstance(text, str):
        return set()
    plain = "".join(c for c in unicodedata.normalize("NFKD", text.lower())
                    if not unicodedata.combining(c))
    return set(re.findall(r"[a-z0-9]{3,}", plain))


def lexical_top(message: Any, flows: list, k: int,
                words_of: Callable[[dict], frozenset[str]] | None = None) -> list:
    """The ``k`` flows sharing the most message words with their id, name and message phrases,
    exclusions left out; ties keep agent order (``max_candidates``, docs/guide/tokens.md).
    ``words_of`` may give a flow's words from a cache (``flow_words``)."""
    said = _words(message)
    words = words_of or _flow_words
    ranked = sorted(range(len(flows)), key=lambda i: (-len(said & words(flows[i])), i))[:k]
    return [flows[i] for i in sorted(ranked)]


def _flow_words(flow: dict) -> frozenset[str]:
    """The words of a flow's id, name and message phrases, exclusions left out (the lexical
    prefilter)."""
    phrases = [p for t in triggers_of(flow, "message") for p in t.get("message") or []
               if isinstance(p, str) and not p.strip().startswith("!")]
    return frozenset().union(*(_words(text)
                               for text in [flow.get("id"), flow.get("name"), *phrases]))


def flow_words(agent: Agent, flow: dict) -> frozenset[str]:
    """``_flow_words`` of one of the agent's flows, worked out once (its phrases are never
    rendered)."""
    return agent.compiled.flow_words(flow)


def unique_slugs(slugs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(slugs))


def harvestable(turn: Turn, flows: list) -> list[str]:
    """The unknown "anywhere" fields of the agent's ``flows``, each once: each flow's collect, then
    each talk step's collect (runtime.md §3.4 item 7). What the flows give is worked out once per
    list."""
    def anywhere() -> tuple[str, ...]:
        fields = turn.given.agent.fields
        slugs = (slug for flow in flows for slug in flow_facts(turn.given.agent, flow).slugs)
        return tuple(slug for slug in dict.fromkeys(slugs)
                     if slug in fields and extract_mode(fields[slug]) == "anywhere")

    slugs = turn.given.agent.compiled.harvest(flows, anywhere)
    known = {slug for slug, value in turn.session.data.items() if is_known(value)}
    if not known:
        return list(slugs)
    fields = turn.given.agent.fields      # a known correctable field stays asked: it may change
    return [slug for slug in slugs if slug not in known or fields[slug].get("correctable") is True]


def decide(turn: Turn, understood: Understood) -> None:
    """Phase 4: route, start mention runs, write judged fields, fire the asker's branch (runtime.md
    §3.5)."""
    judgement, found = understood.judgement, understood.eligibility
    turn.count(judgement.llm_calls, judgement.usage)
    asker = turn.asker()
    route, route_trigger = None, None
    if not turn.floor_from_ingest:
        route, route_trigger = choose_route(turn, judgement, found, asker)
    mentions = flows_by_trigger(turn.given.agent).mentions
    for flow, trigger in zip(mentions.flows, mentions.triggers):
        if not trigger["mention"]:
            start_run(turn, flow, "mention", turn.given.trigger_key, trigger=trigger)
        # asked ones only
        elif flow in found.mentions and judgement.mentions.get(flow["id"]) is True:
            values = judgement.extract.get(flow["id"])
            # a value no store keeps (a NUL, a lone surrogate) is dropped like a blank one
            payload = ({k: v for k, v in values.items()
                        if v is not None and v != "" and unstorable(v) is None}
                       if trigger.get("extract") and isinstance(values, dict) else None)
            start_run(turn, flow, "mention", turn.given.trigger_key, trigger=trigger,
                      payload=payload)
    routed = None
    if route is not None:
        routed = next((run for run in turn.session.runs if run.flow_id == route["id"]
                       and run.status == "suspended"), None)
        if routed is not None:
            move_status(turn, routed, "routed")
        else:
            routed = start_run(turn, route, "message", turn.given.trigger_key,
                               trigger=route_trigger)
        if routed is not None:
            move_floor(turn, routed, "routed")
    if asker is not None and routed is None:
        move_floor(turn, asker, "asker")
    for slug, raw in judgement.fields.items():
        write_value(turn, slug, raw, asked=understood.asked)
    if (asker is not None and turn.floor_run is asker and routed is None
            and not turn.floor_from_ingest and turn.live(asker) and asker.status == "asking"):
        step = current_step(turn, asker)
        if step is not None and is_talk(step):
            fire_branch(turn, asker, step, judgement)


def choose_route(turn: Turn, judgement: Judgement, found: Eligibility,
                 asker: Run | None) -> tuple[dict | None, dict | None]:
    """The flow a message is routed to, and the trigger it qualified through (runtime.md §3.5 rule
    3)."""
    def score(flow: dict) -> float:
        value = judgement.flows.get(flow["id"])
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    def best(flows: list) -> dict | None:
        """The first of the highest scored; a flow the judgement does not score counts as 0."""
        scored = [flow for flow in flows if flow["id"] in judgement.flows and score(flow) > 0]
        # max keeps the first
        return max(scored, key=score) if scored else (flows[0] if flows else None)

    if asker is not None:
        top = best([flow for flow in found.eligible if flow["id"] != asker.flow_id])
        asker_flow = turn.given.agent.flow_by_id.get(asker.flow_id)
        asker_score = score(asker_flow) if asker_flow else 0
        if (top is not None and score(top) >= ROUTE_MIN_SCORE
                and score(top) >= asker_score + ROUTE_OVER_ASKER):
            return top, flow_facts(turn.given.agent, top).phrased
        return None, None
    if found.unscored:
        return found.eligible[0], flow_facts(turn.given.agent, found.eligible[0]).phrased
    top = best(found.eligible)
    if top is not None and score(top) >= ROUTE_MIN_SCORE:
        return top, flow_facts(turn.given.agent, top).phrased
    if found.catch_alls:
        return found.catch_alls[0], flow_facts(turn.given.agent, found.catch_alls[0]).catch_all
    return None, None


def write_value(turn: Turn, slug: str, raw: Any, asked: Iterable[str] | None = None) -> None:
    """Write one model-given field value through its checks (runtime.md §3.5.1). ``asked``: the
    slugs the understand call was asked to read (rule 2a); the speak call's are its envelope's."""
    if raw is None or raw == "":
        return
    definition = turn.given.agent.fields.get(slug)
    if definition is None:
        write_line(turn, None, "collect", "skipped", code="unknown-field", detail=slug)
        return
    if extract_mode(definition) == "never":     # no model call is offered it: refuse it
        write_line(turn, None, "collect", "skipped", code="tool-only", detail=slug)
        return
    if asked is not None and slug not in asked:
        # a reply may not fill what it was not asked: a boolean no step asked, a known field
        write_line(turn, None, "collect", "skipped", code="not-asked", detail=slug)
        return
    verdict, value = coerce_field(definition, raw)
    if verdict != "ok":
        write_line(turn, None, "collect", "skipped", code=verdict, detail=slug)
        return
    if "format" in definition or "validate" in definition:
        verdict, value, reason = check_format_and_rule(definition, value)
        if verdict != "ok":
            write_line(turn, None, "collect", "skipped", code=verdict,
                       detail=f"{slug}: {reason}" if reason else slug)
            return
    if definition.get("evidence") == "message" and not says_value(
            definition, value, turn.given.input.message if turn.is_message else None):
        write_line(turn, None, "collect", "skipped", code="unsaid", detail=slug)
        return
    previous = turn.session.data.get(slug)
    turn.session.data[slug] = value
    if (definition.get("correctable") is True and is_known(previous)
            and not json_equal(previous, value)):
        write_line(turn, None, "collect", "ok", code="corrected", detail=slug)


# Phase 5: run (runtime.md §3.6) ---------------------------------------------------------------

def run_phase(turn: Turn) -> None:
    """Move every run that can move, hand the message back down the stack, pick the fixed
    question."""
    resumed = resume(turn)
    if resumed is not None and turn.is_message:
        judge_resumed_branches(turn, resumed)
    turn.queue = list(turn.session.runs)
    drain(turn)
    if turn.is_message and turn.given.silenced is None:
        for _ in range(len(turn.session.runs)):
            if turn.talk_request is not None or turn.spoke:
                break
            resumed = resume(turn)
            if resumed is None:
                break
            judge_resumed_branches(turn, resumed)
            turn.queue.append(resumed)
            drain(turn)


def drain(turn: Turn) -> None:
    while turn.queue:
        run = turn.queue.pop(0)
        if turn.live(run):
            move_run(turn, run)


def judge_resumed_branches(turn: Turn, run: Run) -> None:
    """A run resumed on a message has its talk step's ``if`` branches judged first (runtime.md
    §4.5)."""
    step = current_step(turn, run)
    if step is not None and is_talk(step):
        fire_branch(turn, run, step, None)


def choose_speaker(turn: Turn) -> Run | str | None:
    """The talk step's run, "idle", or None (runtime.md §3.6.6); sends a due fixed question."""
    if turn.given.silenced is not None:
        return None
    run = turn.talk_request
    if run is not None:
        step = current_step(turn, run)
        assert step is not None             # the talk request is a live run on its talk step
        if turn.is_message and any(other != run.id for other in turn.spoke_runs):
            write_line(turn, run, talk_kind(step), "skipped", code="another-reply",
                       key=step_key(run))
            return None
        if send_fixed_question(turn, run, step):
            return None
        return run
    if (turn.is_message and turn.asker() is None and turn.given.agent.idle != "silent"
            and not turn.spoke):
        return "idle"
    if turn.is_message and turn.asker() is None and not turn.spoke:
        explain_silence(turn)
    return None


def explain_silence(turn: Turn) -> None:
    """A message that started, moved and answered nothing gets an ``idle / skipped`` line naming the
    rule that decided: a trigger's repeat is spent, or nothing routed and the idle speaker is
    silent.
    A falai for Python addition (docs/guide/conformance.md): the original writes nothing."""
    if turn.started or any(line.run_id is not None for line in turn.outcomes):
        return
    def allowed(flow: dict, trigger: dict) -> bool:
        draft = draft_run(turn, flow, "message", turn.given.trigger_key)
        return trigger.get("if") is None or turn.holds(trigger["if"], draft)

    spent = [flow["id"] for flow, trigger in message_triggers(turn.given.agent)
             if allowed(flow, trigger)
             and not repeat_allows(turn, flow, trigger, "message", turn.given.trigger_key)]
    if spent:
        write_line(turn, None, "idle", "skipped", code="repeat-spent", detail=", ".join(spent))
    else:
        write_line(turn, None, "idle", "skipped", code="no-route")


def message_triggers(agent: Agent) -> list[tuple[dict, dict]]:
    """Each flow's first phrased message trigger, then each first catch-all, in agent order."""
    listed = flows_by_trigger(agent)
    return [*zip(listed.phrased.flows, listed.phrased.triggers),
            *zip(listed.catch_alls.flows, listed.catch_alls.triggers)]


# Phase 6: speak (runtime.md §3.7; the call itself is section 10) ------------------------------

def speak_ask(turn: Turn, speaker: Run | str) -> SpeakAsk:
    """The speak request for a talk step or the idle speaker (runtime.md §3.7, model-calls.md
    §5.1)."""
    agent = turn.given.agent
    text = turn.given.input.message if turn.is_message else None
    if speaker == "idle":
        idle = agent.idle
        assert isinstance(idle, dict)       # an idle "silent" never speaks (choose_speaker)
        instructions = kept_instructions(turn, [*agent.instructions,
                                                *(idle.get("instructions") or [])], None)
        return SpeakAsk(input_kind=turn.given.input.kind, text=text, scope=turn.scope(),
                        history=turn.history, now=turn.given.now, instructions=instructions,
                        tools=offered_tools(agent, idle.get("tools")))
    run = speaker
    assert isinstance(run, Run)
    flow = flow_of(turn, run)
    step = current_step(turn, run)
    assert flow is not None and step is not None    # the speaker is a live run on its talk step
    listed = step.get("tools") if step.get("tools") is not None else flow.get("tools")
    repeatable = (step.get("repeatTools") if step.get("repeatTools") is not None
                  else flow.get("repeatTools"))
    instructions = kept_instructions(
        turn, [*agent.instructions, *(flow.get("instructions") or []),
               *(step.get("instructions") or [])], run)
    return SpeakAsk(input_kind=turn.given.input.kind, text=text, scope=turn.scope(run),
                    history=turn.history, now=turn.given.now, run=run, flow=flow, step=step,
                    pending=model_fields(agent.fields, pending_fields(turn, step, run)),
                    instructions=instructions, tools=offered_tools(agent, listed),
                    repeatable=frozenset(repeatable or ()))


def kept_instructions(turn: Turn, instructions: list, run: Run | None) -> list:
    """Instructions whose ``if`` holds; a silenced turn never speaks, so ctx.silenced is None
    (model-calls.md §5.2)."""
    if all(item.get("if") is None for item in instructions):
        return instructions
    ctx = turn.pred_ctx(run, silenced=None)
    return [item for item in instructions
            if item.get("if") is None or judge(item["if"], ctx, turn.given.agent.conditions)]


def offered_tools(agent: Agent, listed: list | None) -> list:
    """The allow-list resolved against the agent's tools, in agent order (model-calls.md §6.1)."""
    if listed is None:
        return list(agent.tools)
    return [tool for tool in agent.tools if tool.id in listed]


# Phase 7: settle (runtime.md §3.8) ------------------------------------------------------------

def settle(turn: Turn, speaker: Run | str | None, spoken: Spoken | Deferred | None) -> None:
    """Apply the speak result, drain what it moved, stamp the time, resume, arm silence wakes."""
    if isinstance(spoken, Deferred):
        turn.count(spoken.llm_calls, spoken.usage)
        # A tool that ran did its work: what it wrote stays though the reply failed (runtime.md
        # §10.2; a deliberate difference from the original, which drops it).
        merge_patch(turn.session.data, spoken.data)
        if speaker == "idle":
            write_line(turn, None, "idle", "deferred", code=spoken.code, llm_calls=spoken.llm_calls)
        else:
            assert isinstance(speaker, Run)
            defer_talk(turn, speaker, spoken)
    elif isinstance(spoken, Spoken):
        turn.count(spoken.llm_calls, spoken.usage)
        if speaker == "idle":
            key = f"idle:{turn.given.trigger_key}"
            emit(turn, spoken.message, "ai", key)
            merge_patch(turn.session.data, spoken.data)
            write_line(turn, None, "idle", "ok", key=key, llm_calls=spoken.llm_calls)
        else:
            assert isinstance(speaker, Run)
            settle_talk(turn, speaker, spoken)
    drain(turn)
    if turn.spoke:
        turn.session.last_assistant_at = turn.given.now_text
    resume(turn)
    arm_silence_wakes(turn)


def settle_talk(turn: Turn, run: Run, spoken: Spoken) -> None:
    """The talk step spoke: send, write the fields, then stay, ask again or move on (runtime.md §3.8
    item 3)."""
    step = current_step(turn, run)
    assert step is not None                 # the speaker is a live run on its talk step
    key = step_key(run)
    emit(turn, spoken.message, "ai", message_key(turn, run, key), run=run)
    for slug, raw in spoken.fields.items():
        write_value(turn, slug, raw)
    merge_patch(turn.session.data, spoken.data)
    write_line(turn, run, talk_kind(step), "ok", key=key, llm_calls=spoken.llm_calls)
    if not turn.live(run):
        return
    pending = pending_fields(turn, step, run) if step.get("collect") else []
    for slug in pending:
        run.asked[slug] = run.asked.get(slug, 0) + 1
    if run.staying:
        for slug in pending:
            if run.asked[slug] == max_asks(step):
                write_line(turn, run, "collect", "skipped", code="max-asks", detail=slug, key=key)
        enter_step(turn, run, step["id"])
        run.staying = True
        move_status(turn, run, "ask")
    elif pending:
        move_status(turn, run, "ask")
    else:
        write_given_up(turn, run, step)
        move_status(turn, run, "answered")
        advance(turn, run, Go(step.get("then")))
        if turn.live(run) and run.status == "running":
            turn.queue.append(run)


def defer_talk(turn: Turn, run: Run, failure: Deferred) -> None:
    """A speak call failed: a retry wake on the ladder, or the run fails (runtime.md §10.2)."""
    step = current_step(turn, run)
    assert step is not None                 # the speaker is a live run on its talk step
    kind = talk_kind(step)
    key = step_key(run)
    attempt = 0
    for line in reversed(run.outcomes):
        if line.get("status") != "deferred" or line.get("stepId") != step["id"]:
            break
        attempt += 1
    if not failure.retryable or attempt >= len(RETRY_LADDER):
        write_line(turn, run, kind, "failed", code=failure.code, key=key)
        end_run(turn, run, "failed")
        return
    at = turn.given.now + timedelta(milliseconds=duration_ms(RETRY_LADDER[attempt]))
    if failure.reset_at_ms is not None and to_ms(at) < failure.reset_at_ms <= to_ms(LATEST):
        # a reset past the supported range keeps the ladder's time
        at = from_ms(failure.reset_at_ms)
    park(turn, run, f"{key}:retry:{to_ms(at)}", at)
    write_line(turn, run, kind, "deferred", code=failure.code, key=key, until=iso(at))



# Silence wakes and pending_wakes (runtime.md §7.5, §14) ---------------------------------------

def silence_flows(agent: Agent) -> list[tuple[dict, dict]]:
    """(flow, its first silence trigger) of each flow whose silence is a duration, once per
    agent."""
    return agent.compiled.silence_flows()


def work_out_silence_flows(agent: Agent) -> list[tuple[dict, dict]]:
    return [(flow, trigger) for flow in agent.flows for trigger in [first_trigger(flow, "silence")]
            if trigger is not None and is_duration(trigger.get("silence"))]


def arm_silence_wakes(turn: Turn) -> None:
    """Schedule each silence flow's wake when the assistant's last word moved (runtime.md §7.5)."""
    previous = turn.given.input.session.last_assistant_at if turn.given.input.session else None
    if turn.session.last_assistant_at == previous or not silence_flows(turn.given.agent):
        return
    replaces_ms = str(to_ms(parse_iso(previous))) if previous else None
    turn.schedule.extend(silence_wakes(turn, replaces_ms))


def silence_wakes(turn: Turn, replaces_ms: str | None = None) -> list[ScheduleEntry]:
    """The silence wakes a session shows now: one per silence flow whose if and repeat allow it.

    With ``replaces_ms`` each entry names the wake of that earlier silence as the one it replaces.
    """
    session = turn.session
    if session.last_assistant_at is None or not silence_flows(turn.given.agent):
        return []
    said = parse_iso(session.last_assistant_at)
    if session.last_user_at is not None and parse_iso(session.last_user_at) > said:
        return []
    ms = str(to_ms(said))
    entries = []
    for flow, trigger in silence_flows(turn.given.agent):
        draft = draft_run(turn, flow, "silence", ms)
        if trigger.get("if") is not None and not turn.holds(trigger["if"], draft):
            continue
        if not repeat_allows(turn, flow, trigger, "silence", ms):
            continue
        # said is blob text: it may be any instant
        at = later(said, duration_ms(trigger["silence"]))
        if trigger.get("businessHours"):
            at = business_time(turn, at)
        prefix = f"silence:{key_part(flow['id'])}:{turn.given.session_id}:"
        entries.append(ScheduleEntry(key=f"{prefix}{ms}", at=at,
                                     replaces=f"{prefix}{replaces_ms}" if replaces_ms else None))
    return entries


def pending_wakes(agent: Agent, session: Any, context: Any, anchors: dict | None,
                  claims: dict | None) -> list[ScheduleEntry]:
    """Each parked run's wake, then the session's silence wakes; no replaces (runtime.md §14)."""
    if isinstance(session, dict):
        session = Session.from_dict(session)
    if not isinstance(session, Session):
        raise TypeError("pending_wakes(session=...) takes a Session or a blob dict, got "
                        f"{type(session).__name__}")
    turn = Turn(agent, TurnInput(session_id=session.id, kind="wake", session=session,
                                 context=context, anchors=anchors or {}, claims=claims or {},
                                 wake="pending"))
    entries = [ScheduleEntry(key=run.waiting["key"], at=parse_iso(run.waiting["until"]))
               for run in turn.session.runs
               if run.status == "waiting" and (run.waiting or {}).get("key")
               and (run.waiting or {}).get("until")]
    return entries + silence_wakes(turn)


# 9. Runs and steps ############################################################################
#
# One way to move a run: move_run() executes steps; a step kind does its work
# and returns the target it names (Go) or None when it stopped the run here;
# advance() alone applies every then, else, onFail and branch target, from the
# step loop, from Ingest's releases, from a fired branch and from settle.

TALK_KEYS = ("prompt", "collect")


def is_talk(step: dict) -> bool:
    return any(step.get(key) is not None for key in TALK_KEYS)


def talk_kind(step: dict) -> str:
    """A talk step's outcome kind: "collect" when it collects, else "prompt"."""
    return "collect" if step.get("collect") else "prompt"


def step_kind(step: dict | None) -> str:
    """The outcome kind of a step: prompt, collect, say, do, wait or if."""
    if step is None:
        return "if"
    if is_talk(step):
        return talk_kind(step)
    for kind in ("say", "do", "wait"):
        if step.get(kind) is not None:
            return kind
    return "if"


def flow_of(turn: Turn, run: Run) -> dict | None:
    return turn.given.agent.flow_by_id.get(run.flow_id)


def find_step(flow: dict | None, step_id: str | None) -> dict | None:
    if flow is None or step_id is None:
        return None
    for step in flow.get("steps") or []:
        if step.get("id") == step_id:
            return step
    return None


def current_step(turn: Turn, run: Run) -> dict | None:
    return find_step(flow_of(turn, run), run.step_id)


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


def step_key(run: Run, step_id: str | None = None) -> str:
    """``{runId}:{stepId}:{visit}``: the key of every message, action and line a step produces."""
    step_id = step_id or run.step_id
    return f"{run.id}:{step_id}:{run.visits.get(step_id, 0)}"


def message_key(turn: Turn, run: Run, key: str) -> str:
    """A talk step's message key: the step key for the visit's first message,
    ``{key}:re:{triggerKey}`` after.

    A collect step asks again under the same visit; the seed's key alone would
    repeat, and a host deduping on keys would drop the re-ask (docs/guide/limits.md).
    The trigger key makes it unique and the same on a replay. A deliberate
    difference from the TypeScript original, which reuses the key.
    """
    return f"{key}:re:{turn.given.trigger_key}" if visit_spoke(run, key) else key


def visit_spoke(run: Run, key: str) -> bool:
    """Whether the step visit under ``key`` already sent a message (an ok talk line under it)."""
    if len(run.outcomes) >= 50 and run.outcomes[0].get("key") == key:
        # older lines of this visit were dropped: count it as spoken, so no key repeats
        return True
    return any(line.get("key") == key and line.get("status") == "ok"
               and line.get("kind") in TALK_KEYS
               and line.get("code") in (None, "asked-fixed") for line in run.outcomes)


def target_label(target: Any) -> str | None:
    """The ``next`` label of a target (runtime.md §11.3)."""
    if target is None or isinstance(target, str):
        return target
    if target.get("flow") is not None:
        return f"flow:{target['flow']}"
    return target.get("step")


# Outcome lines and messages (runtime.md §11) --------------------------------------------------

def write_line(turn: Turn, run: Run | None, kind: str, status: str, *, code: str | None = None,
               key: str | None = None, detail: str | None = None, next: str | None = None,
               until: str | None = None, llm_calls: int | None = None) -> StepOutcome:
    """Write one outcome line on the turn and, for a run, on the run's last 50."""
    line = StepOutcome(kind=kind, status=status, at=turn.given.now_text, code=code,
                       message=OUTCOME_MESSAGES[code] if code else None, key=key, detail=detail,
                       next=next, until=until, llm_calls=llm_calls)
    if run is not None:
        line.run_id, line.flow_id, line.step_id = run.id, run.flow_id, run.step_id
        run.outcomes = [*run.outcomes, line.to_dict()][-OUTCOMES_KEPT:]
    turn.outcomes.append(line)
    if log.isEnabledFor(DEBUG):      # debug=True (python-api.md, The toolkit)
        log.debug("outcome: %s", compact_json(line.to_dict()))
    return line


def emit(turn: Turn, text: str, kind: str, key: str, run: Run | None = None,
         media: dict | None = None) -> None:
    """Queue a message for the host; the pending short-wait delay rides on it (runtime.md §7.2)."""
    turn.messages.append(OutboundMessage(text=text, kind=kind, key=key, media=media,
                                         after_ms=turn.pending_delay_ms,
                                         run_id=run.id if run else None,
                                         step_id=run.step_id if run else None))
    turn.pending_delay_ms = 0
    turn.spoke = True
    if run is not None:
        turn.spoke_runs.add(run.id)


def skip(turn: Turn, flow_id: str, anchor: str, trigger_key: str, code: str) -> None:
    """A start that was refused goes to TurnResult.skipped, never to outcomes (runtime.md §5)."""
    turn.skipped.append(SkippedTrigger(flow_id=flow_id, anchor=anchor, trigger_key=trigger_key,
                                       code=code, message=OUTCOME_MESSAGES[code]))
    log.debug("skipped: flow %s at %s, trigger %s: %s", flow_id, anchor, trigger_key, code)


# Starting a run: the start order (runtime.md §5, §6) ------------------------------------------

DEFAULT_REPEAT = {"message": "once", "mention": "once", "silence": "once",
                  "event": "always", "start": "always", "flow": "always"}


def anchor_of(turn: Turn, flow: dict) -> str:
    """The session id, or the host anchor key the flow names (runtime.md §6.3)."""
    name = flow.get("anchor") or "session"
    if name == "session":
        return turn.given.session_id
    return (turn.given.anchors.get(name) or {}).get("key") or turn.given.session_id


def repeat_of(trigger: dict | None, kind: str) -> Any:
    repeat = trigger.get("repeat") if trigger else None
    return DEFAULT_REPEAT[kind] if repeat is None else repeat


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


def dedupe_key(flow: dict, anchor: str, repeat: Any, trigger_key: str) -> str:
    return claim_prefix(flow["id"], anchor) + (key_part(trigger_key) if repeat == "always" else "")


def claim_refusal(turn: Turn, key: str, repeat: Any) -> str | None:
    """The skip code a held claim gives (runtime.md §5 rule 3), or None."""
    held = (turn.session.claims.get(key) or {}).get("at") or turn.given.held_claims.get(key)
    if held is None:
        return None
    if isinstance(repeat, dict):
        cooldown = timedelta(milliseconds=duration_ms(repeat["cooldown"]))
        return "cooldown" if turn.given.now - parse_iso(held) < cooldown else None
    return "already-claimed"


def repeat_allows(turn: Turn, flow: dict, trigger: dict | None, kind: str,
                  trigger_key: str) -> bool:
    """The claim test of a start, without writing (runtime.md §6.1)."""
    if not turn.session.claims and not turn.given.held_claims:
        return True                 # no claim is held, so none refuses (and no key is worked out)
    repeat = repeat_of(trigger, kind)
    return claim_refusal(turn, dedupe_key(flow, anchor_of(turn, flow), repeat, trigger_key),
                         repeat) is None


def draft_run(turn: Turn, flow: dict, kind: str, trigger_key: str) -> Run:
    """The run a trigger ``if`` is judged on before a run exists (runtime.md §3.4)."""
    anchor = anchor_of(turn, flow)
    return Run(id=f"{flow['id']}#{trigger_key}", flow_id=flow["id"], anchor=anchor,
               dedupe_key=claim_prefix(flow["id"], anchor), step_id=None, status="running",
               trigger={"kind": kind, "key": trigger_key}, hop=0, started_at=turn.given.now_text)


def start_run(turn: Turn, flow: dict, kind: str, trigger_key: str, *, trigger: dict | None = None,
              payload: Any = None, hop: int = 0, keep_data: bool = False) -> Run | None:
    """Every start goes through one order: if, claim, hop, one live run, commit, delay (runtime.md
    §5)."""
    anchor = anchor_of(turn, flow)
    repeat = repeat_of(trigger, kind)
    claim = dedupe_key(flow, anchor, repeat, trigger_key)
    run = Run(id=f"{flow['id']}#{trigger_key}", flow_id=flow["id"], anchor=anchor, dedupe_key=claim,
              step_id=None, status="running", trigger={"kind": kind, "key": trigger_key}, hop=hop,
              started_at=turn.given.now_text, input=payload)
    if payload is not None:
        run.trigger["payload"] = payload
    if (trigger is not None and trigger.get("if") is not None
            and not turn.holds(trigger["if"], run, payload)):
        return None
    refusal = claim_refusal(turn, claim, repeat)
    if refusal is None and hop >= HOP_LIMIT:
        refusal = "hop-limit"
    if refusal is None:
        live = next((other for other in turn.session.runs
                     if other.flow_id == flow["id"] and other.anchor == anchor), None)
        if live is not None and live.status == "waiting" and live.step_id is None:
            end_run(turn, live, "replaced")
        elif live is not None or live_pair(flow["id"], anchor) in turn.given.active_claims:
            refusal = "already-running"
    if refusal is not None:
        skip(turn, flow["id"], anchor, trigger_key, refusal)
        return None
    turn.session.claims[claim] = {"at": turn.given.now_text}
    if repeat == "always":
        prune_always_claims(turn, claim_prefix(flow["id"], anchor))
    if not keep_data:
        for slug in flow.get("clearOnStart") or []:
            turn.session.data.pop(slug, None)
    turn.session.runs.append(run)
    turn.started.append(StartedRun(run_id=run.id, flow_id=run.flow_id, anchor=anchor,
                                   dedupe_key=claim))
    if kind == "event" and trigger is not None:
        after_ms = duration_ms(trigger["after"]) if trigger.get("after") else 0
        at = turn.given.now + timedelta(milliseconds=after_ms)
        if trigger.get("businessHours"):
            at = business_time(turn, at)
        if trigger.get("after") or at > turn.given.now:
            park(turn, run, f"{run.id}:start:{to_ms(at)}", at)
            write_line(turn, run, "wait", "waiting", code="awaiting-trigger", until=iso(at))
    return run



def prune_always_claims(turn: Turn, prefix: str) -> None:
    """Keep the 50 newest always-claims of a flow and anchor, by their ``at`` (runtime.md §6.1)."""
    claims = turn.session.claims
    keys = [key for key in claims if key.startswith(prefix) and len(key) > len(prefix)
            # a nonce has no ":" (key_part): a longer anchor is not ours
            and ":" not in key[len(prefix):]]
    if len(keys) <= ALWAYS_CLAIMS_KEPT:
        return
    order = {key: index for index, key in enumerate(keys)}
    newest = sorted(keys, key=lambda key: (parse_iso(claims[key]["at"]), order[key]), reverse=True)
    for key in newest[ALWAYS_CLAIMS_KEPT:]:
        del claims[key]


def business_time(turn: Turn, at: datetime) -> datetime:
    """Snap a time forward with the agent's business_hours, when it has one (runtime.md §7.7)."""
    if turn.given.agent.business_hours is None or not EARLIEST <= at <= LATEST:
        return at           # outside the supported range (a wait from its very end): no calendar
    snapped = turn.given.agent.business_hours(at, BusinessHoursCtx(context=turn.given.context))
    return check_instant(snapped, "the time business_hours returned",
                         "Return a working moment inside it.")


@dataclass
class BusinessHoursCtx:
    """What business_hours(at, ctx) gets besides the time: the turn's context."""
    context: Any


# A run's status (runtime.md §4.2-§4.3) ------------------------------------------------------
#
# The one table of how a run's status may move: (status, event) -> status. move_status() is the
# only writer of Run.status (a new run starts "running", runtime.md §5); an event is named as the
# spec names it, by its outcome code where it has one ("replied", "event-arrived").

RUN_MOVES: dict[tuple[str, str], RunStatus] = {
    # The run moves on this turn (§3.6.1 item 6): from asking, the customer's message answers it.
    ("running", "move"): "running",
    ("asking", "move"): "running",
    # A step is entered (§3.6.4, flows.md §5.1); a staying run re-enters its stay step (§4.7).
    ("running", "enter"): "running",
    ("asking", "enter"): "running",
    # A talk step asks, or asks again when it spoke and fields are pending (§3.6.3, §3.8 item 3).
    ("running", "ask"): "asking",
    ("asking", "ask"): "asking",
    # The talk step has every field it collects, or a branch fired (§3.8 item 3, §3.6.3).
    ("asking", "answered"): "running",
    ("running", "branch"): "running",
    ("asking", "branch"): "running",
    # A staying run with a message nobody answered yet answers it (§4.7).
    ("asking", "unanswered"): "running",
    # Parked: a wait, a trigger delay, a deferred action (§7.1); a talk step's speak retry (§10.2).
    ("running", "park"): "waiting",
    ("asking", "park"): "waiting",
    # Its wake (rule I-W, §3.2), a reply to a timer wait with "else", its event (§3.2, §7.3).
    ("waiting", "wake"): "running",
    ("waiting", "replied"): "running",
    ("waiting", "event-arrived"): "running",
    # Another run's talk step took the floor (§4.5).
    ("asking", "suspend"): "suspended",
    # The most recently suspended run when nobody asks (§4.5), or routing picked its flow (§3.5).
    ("suspended", "resume"): "asking",
    ("suspended", "routed"): "running",
}


def move_status(turn: Turn, run: Run, event: str, waiting: dict | None = None) -> None:
    """Move a run's status on ``event`` by RUN_MOVES. ``waiting`` (the wait, §7.1) is set exactly
    while the run is waiting and ``suspendedAt`` exactly while it is suspended (runtime.md §4.1)."""
    was = run.status
    to = RUN_MOVES.get((was, event))
    if to is None:
        raise RuntimeError(f'run "{run.id}" cannot move from "{was}" on "{event}": '
                           "RUN_MOVES has no such move (runtime.md §4.3). This is a bug in falai; "
                           "please report it.")
    if to == was:               # running or asking stays so: no wait, no suspension to set or clear
        return
    if to == "waiting":
        assert waiting is not None          # parking names the wake it waits for
        run.waiting = waiting
    elif was == "waiting":
        run.waiting = None
    if to == "suspended":
        run.suspended_at = turn.given.now_text
    elif was == "suspended":
        run.suspended_at = None
    run.status = to


# Moving a run (runtime.md §3.6.1-§3.6.5) ------------------------------------------------------

def move_run(turn: Turn, run: Run) -> None:
    """Move one run as far as it goes this turn (runtime.md §3.6.1)."""
    if run.status in ("waiting", "suspended"):
        return
    if run.status == "asking" and not turn.is_message:
        return
    flow = flow_of(turn, run)
    if flow is None:
        end_run(turn, run, "skipped", code="flow-gone")
        return
    failed = premise_failure(turn, run, flow)
    if failed is not None:
        end_run(turn, run, "skipped", code=failed)
        return
    if run.staying and flow.get("onEnd") != "stay":
        finish_flow(turn, run, flow)
        return
    resuming = run.status == "asking"
    move_status(turn, run, "move")
    if run.step_id is None:
        if not flow.get("steps"):
            finish_flow(turn, run, flow)
            return
        enter_step(turn, run, flow["steps"][0]["id"])
    executed = 0
    while run.status == "running" and turn.live(run):
        step = find_step(flow, run.step_id)
        if executed >= STEP_CAP:
            end_run(turn, run, "failed", code="step-loop", kind=step_kind(step))
            return
        if step is None:
            end_run(turn, run, "skipped", code="step-gone")
            return
        moved = execute_step(turn, run, flow, step, resuming and executed == 0)
        executed += 1
        advance(turn, run, moved)


def premise_failure(turn: Turn, run: Run, flow: dict) -> str | None:
    """The code that ends a run whose premise no longer holds, or None (runtime.md §3.6.2)."""
    kind = run.trigger.get("kind")
    if kind == "silence" and turn.given.input.kind == "wake" \
            and customer_wrote_since(turn, run.flow_id, run.started_at):
        return "customer-replied"
    if flow.get("while") is not None:
        return None if turn.holds(flow["while"], run) else "premise-changed"
    same_kind = triggers_of(flow, kind)
    if not same_kind or any(trigger.get("if") is None or turn.holds(trigger["if"], run)
                            for trigger in same_kind):
        return None
    return "premise-changed"


def enter_step(turn: Turn, run: Run, step_id: str) -> None:
    """Entering a step counts a visit and mints new keys (flows.md §5.1)."""
    run.step_id = step_id
    run.visits[step_id] = run.visits.get(step_id, 0) + 1
    move_status(turn, run, "enter")
    run.waiting, run.staying = None, False


def end_run(turn: Turn, run: Run, reason: str, *, code: str | None = None, kind: str | None = None,
            detail: str | None = None) -> None:
    """Remove a run from the session and report it in ``ended`` (runtime.md §4.8)."""
    if code is not None:
        write_line(turn, run, kind or step_kind(current_step(turn, run)),
                   "failed" if reason == "failed" else "skipped", code=code, detail=detail)
    turn.session.runs = [live for live in turn.session.runs if live is not run]
    turn.ended.append(EndedRun(**run_values(run), reason=reason))
    if turn.talk_request is run:
        turn.talk_request = None


def park(turn: Turn, run: Run, key: str, at: datetime, kind: str = "timer",
         event: str | None = None) -> None:
    """Park a run until its wake (runtime.md §7.1)."""
    waiting = {"kind": kind, "key": key, "until": iso(at), "setAt": turn.given.now_text}
    if event is not None:
        waiting["event"] = event
    move_status(turn, run, "park", waiting)
    turn.schedule.append(ScheduleEntry(key=key, at=at))


@dataclass(slots=True)
class Go:
    """What moves a run on: this then, else, onFail or branch target (``None``: the next step,
    runtime.md §3.6.4).

    A step kind returns one (runtime.md §3.6.3), and so do the releases of Ingest (a timer wait the
    customer answered, a wake, an event: §3.2), a branch that fired (§3.5.2) and a talk step settled
    with nothing left to ask (§3.8 item 3). ``advance`` applies it.
    """
    target: Any


def go(turn: Turn, run: Run, kind: str, status: str, target: Any, **line: Any) -> Go:
    """Write the outcome line that moves the run, ``next`` = the target's label (runtime.md §11.1),
    and the Go."""
    write_line(turn, run, kind, status, next=target_label(target), **line)
    return Go(target)


def advance(turn: Turn, run: Run, moved: Go | None) -> None:
    """The one place a run moves on: apply a Go's target (runtime.md §3.6.4); ``None`` leaves the
    run be.

    The target is the next step (``None``), ``"end"`` (the flow finishes, §3.6.5), ``{"flow": ...}``
    (chain: this run ends, that flow starts one hop deeper) or a step id, as text or ``{"step",
    "clear"?}``. A target step the flow no longer has ends the run (step-gone).
    """
    if moved is None:
        return
    target = moved.target
    flow = flow_of(turn, run)
    if target is None:
        assert flow is not None             # a run moves on only while its flow is the agent's
        steps = flow.get("steps") or []
        index = next((i for i, step in enumerate(steps) if step.get("id") == run.step_id),
                     len(steps))
        if index + 1 < len(steps):
            enter_step(turn, run, steps[index + 1]["id"])
        else:
            finish_flow(turn, run, flow)
        return
    if target == "end":
        assert flow is not None
        finish_flow(turn, run, flow)
        return
    if isinstance(target, dict) and target.get("flow") is not None:
        chain(turn, run, target)
        return
    if isinstance(target, dict):
        for slug in target.get("clear") or []:
            turn.session.data.pop(slug, None)
            run.asked.pop(slug, None)
        target = target.get("step")
    if find_step(flow, target) is None:
        end_run(turn, run, "skipped", code="step-gone")
        return
    enter_step(turn, run, target)


def chain(turn: Turn, run: Run, target: dict) -> None:
    """``{"flow": ...}``: end this run and start that flow one hop deeper (runtime.md §3.6.4)."""
    child_id = render(target["flow"], turn.scope(run))
    key = step_key(run)
    end_run(turn, run, "flow")
    flow = turn.given.agent.flow_by_id.get(child_id)
    if flow is None:
        skip(turn, child_id, turn.given.session_id, key, "flow-gone")
        return
    # not the Agent's
    payload = copy.deepcopy(target["input"]) if target.get("input") is not None else run.input
    start_child(turn, run, flow, key, payload, keep_data=False)


def start_child(turn: Turn, parent: Run, flow: dict, key: str, payload: Any,
                keep_data: bool) -> None:
    """Start a chained (or reset) run; it inherits the floor from its parent or an empty floor."""
    child = start_run(turn, flow, "flow", key, payload=payload, hop=parent.hop + 1,
                      keep_data=keep_data)
    if child is None:
        return
    move_floor(turn, child, "chained", parent)
    turn.queue.append(child)


def finish_flow(turn: Turn, run: Run, flow: dict) -> None:
    """The run passed its last step: onEnd end, reset or stay (runtime.md §3.6.5)."""
    on_end = flow.get("onEnd") or "end"
    steps = flow.get("steps") or []
    if on_end == "reset" and steps:
        key = step_key(run, steps[-1]["id"])
        end_run(turn, run, "reset")
        start_child(turn, run, flow, key, run.input, keep_data=True)
    elif on_end == "stay" and any(is_talk(step) for step in steps):
        stay(turn, run, flow)
    else:
        end_run(turn, run, "end")


def stay(turn: Turn, run: Run, flow: dict) -> None:
    """``onEnd: "stay"``: go back to the last talk step taken and keep answering (runtime.md
    §4.7)."""
    talk_ids = [step["id"] for step in flow.get("steps") or [] if is_talk(step)]
    stay_id = next((line.get("stepId") for line in reversed(run.outcomes)
                    if line.get("kind") in TALK_KEYS and line.get("stepId") in talk_ids),
                   talk_ids[-1])
    enter_step(turn, run, stay_id)
    run.staying = True
    move_status(turn, run, "ask")
    others = [other for other in turn.session.runs if other is not run and other.status == "asking"]
    if others and not (turn.is_message and turn.floor_run is run):
        suspend(turn, run)
        return
    for other in others:
        suspend(turn, other)
    if turn.unanswered_message():
        move_status(turn, run, "unanswered")


def suspend(turn: Turn, run: Run) -> None:
    """Set a run aside until nobody else asks (runtime.md §4.5); a suspended run does not speak this
    turn."""
    move_status(turn, run, "suspend")
    if turn.talk_request is run:
        turn.talk_request = None


def resume(turn: Turn) -> Run | None:
    """With nobody asking, the most recently suspended run asks again (runtime.md §4.5)."""
    if turn.asker() is not None:
        return None
    latest = None
    for run in turn.session.runs:
        if run.status == "suspended" and (latest is None or (run.suspended_at or run.started_at)
                                          >= (latest.suspended_at or latest.started_at)):
            latest = run
    if latest is not None:
        move_status(turn, latest, "resume")
    return latest


def fire_branch(turn: Turn, run: Run, step: dict, judgement: Judgement | None) -> bool:
    """The first branch of an asking talk step that holds moves the run (runtime.md §3.5.2)."""
    for index, branch in enumerate(step.get("branches") or []):
        target = branch.get("then")
        if branch.get("if") is not None:
            if run.staying and already_through(run, target):
                continue
            hit = turn.holds(branch["if"], run)
        else:
            hit = (judgement is not None
                   and judgement.branches.get(f"{run.id}/{step['id']}/{index}") is True)
        if hit:
            moved = go(turn, run, talk_kind(step), "ok", target, code="branch", key=step_key(run))
            move_status(turn, run, "branch")
            advance(turn, run, moved)
            return True
    return False


def already_through(run: Run, target: Any) -> bool:
    """A staying run never takes an ``if`` branch back onto its own path (runtime.md §3.5.2)."""
    if target == "end":
        return True
    if isinstance(target, dict):
        if target.get("flow") is not None:
            return False
        target = target.get("step")
    return run.visits.get(target, 0) > 0


# Executing a step (runtime.md §3.6.3) ---------------------------------------------------------
#
# A step kind does its work and returns what happened: Go(target) when the run
# moves on, None when it stopped here (it asks, it parked, or it ended). It
# never moves the run itself: move_run hands the Go to advance().

def execute_step(turn: Turn, run: Run, flow: dict, step: dict, resuming: bool) -> Go | None:
    """Execute the current step by its kind, tested in the spec's order (runtime.md §3.6.3)."""
    if is_talk(step):
        return run_talk_step(turn, run, step, resuming)
    if step.get("say") is not None:
        return run_say_step(turn, run, flow, step)
    if step.get("do") is not None:
        return run_do_step(turn, run, step)
    if isinstance(step.get("wait"), str):
        return run_timer_wait(turn, run, flow, step)
    if step.get("wait") is not None:
        run_event_wait(turn, run, step)         # it always parks
        return None
    return run_if_step(turn, run, step)


def run_if_step(turn: Turn, run: Run, step: dict) -> Go:
    """``if`` step: ``then`` when the predicate holds, else ``else`` (default "end") (runtime.md
    §3.6.3)."""
    target = step.get("then") if turn.holds(step.get("if"), run) else step.get("else", "end")
    return go(turn, run, "if", "ok", target, key=step_key(run))


def max_asks(step: dict) -> int | float:
    """How often a field of the step may be asked; ``"unlimited"`` never gives up (a falai for
    Python addition: a step that waits for a tool-only field, flows.md §2.2)."""
    asks = step.get("maxAsks")
    return math.inf if asks == UNLIMITED_ASKS else int(asks or DEFAULT_MAX_ASKS)


def pending_fields(turn: Turn, step: dict, run: Run) -> list[str]:
    """collect minus known fields minus fields asked maxAsks times, in order (flows.md §2.2)."""
    limit = max_asks(step)
    return [slug for slug in step.get("collect") or []
            if not is_known(turn.session.data.get(slug)) and run.asked.get(slug, 0) < limit]


def write_given_up(turn: Turn, run: Run, step: dict) -> None:
    """One max-asks line per collected field left unknown at its limit."""
    limit = max_asks(step)
    for slug in step.get("collect") or []:
        if not is_known(turn.session.data.get(slug)) and run.asked.get(slug, 0) >= limit:
            write_line(turn, run, "collect", "skipped", code="max-asks", detail=slug,
                       key=step_key(run))


def run_talk_step(turn: Turn, run: Run, step: dict, resuming: bool) -> Go | None:
    """Talk step (runtime.md §3.6.3 talk rules 1-6).

    Rule 2: every collected field known (or given up) and not staying: move on.
    Rule 3: silenced: a resuming run keeps asking; otherwise skip or end (silenced_step).
    Rules 4-5: every other asking run is suspended; this one asks.
    Rule 6: before phase 6 it becomes the talk request; after it, the fixed question (§3.6.7) may go
    out.
    """
    kind = talk_kind(step)
    key = step_key(run)
    then = step.get("then")
    if step.get("collect") and not pending_fields(turn, step, run) and not run.staying:
        write_given_up(turn, run, step)
        if resuming:
            return go(turn, run, kind, "ok", then, key=key)
        return go(turn, run, kind, "skipped", then, code="already-known", key=key)
    if turn.given.silenced is not None:
        if resuming:
            move_status(turn, run, "ask")
            return None
        return silenced_step(turn, run, kind, then, key)
    for other in turn.session.runs:
        if other is not run and other.status == "asking":
            suspend(turn, other)
    move_status(turn, run, "ask")
    if turn.phase != "settle":
        turn.talk_request = run
    else:
        send_fixed_question(turn, run, step)
    return None


def silenced_step(turn: Turn, run: Run, kind: str, then: Any, key: str) -> Go | None:
    """A silenced talk or say step: skip mode moves on, otherwise the run ends (runtime.md §3.6.3,
    §9)."""
    assert turn.given.silenced is not None
    if turn.given.skip_mode:
        return go(turn, run, kind, "skipped", then, code="silenced", detail=turn.given.silenced,
                  key=key)
    end_run(turn, run, "skipped", code="silenced", kind=kind, detail=turn.given.silenced)
    return None


def send_fixed_question(turn: Turn, run: Run, step: dict) -> bool:
    """A collect step's ``question`` goes out word for word on its first ask (runtime.md §3.6.7)."""
    collect = step.get("collect") or []
    if (step.get("question") is None or not collect or run.staying
            or pending_fields(turn, step, run) != collect
            or any(run.asked.get(slug) for slug in collect)):
        return False
    key = step_key(run)
    emit(turn, render(step["question"], turn.scope(run)), "verbatim", key, run=run)
    for slug in collect:
        run.asked[slug] = run.asked.get(slug, 0) + 1
    write_line(turn, run, "collect", "ok", code="asked-fixed", key=key)
    return True


def run_say_step(turn: Turn, run: Run, flow: dict, step: dict) -> Go | None:
    """``say`` step (runtime.md §3.6.3 say rules 1-4).

    Rule 1: silenced: skip or end (silenced_step). Rule 2: ``once`` holds a claim; a held claim
    moves on unsent. Rules 3-4: emit the rendered text verbatim and move on.
    """
    key = step_key(run)
    then = step.get("then")
    if turn.given.silenced is not None:
        return silenced_step(turn, run, "say", then, key)
    if step.get("once"):
        claim = f"{key_part(flow['id'])}:{key_part(step['id'])}:{turn.given.session_id}"
        if claim in turn.session.claims or claim in turn.given.held_claims:
            return go(turn, run, "say", "skipped", then, code="already-sent", key=key)
        turn.session.claims[claim] = {"at": turn.given.now_text}
    emit(turn, render(step["say"], turn.scope(run)), "verbatim", key, run=run,
         media=copy.deepcopy(step.get("media")))
    return go(turn, run, "say", "ok", then, key=key)


ACTION_SHAPES = ('Return {"ok": True}, {"skipped": reason}, {"failed": reason} or '
                 '{"defer": "1h", "detail": reason}.')


RESULT_KEYS = ("ok", "skipped", "failed", "defer")


def read_action_result(name: str, result: Any) -> tuple[str, Any, Any, bool]:
    """An action's return value as (which, value, detail, spoke); which is ok/skipped/failed/defer
    (flows.md §9.5)."""
    if result is None:
        return "ok", True, None, False
    if isinstance(result, ActionResult):
        for key in RESULT_KEYS:
            if getattr(result, key) is not None:
                return key, getattr(result, key), result.detail, bool(result.spoke)
    elif isinstance(result, dict):
        for key in RESULT_KEYS:
            if key in result:
                return key, result[key], result.get("detail"), bool(result.get("spoke"))
    return ("failed", f'action "{name}" returned no result it understands. {ACTION_SHAPES}', None,
            False)


def run_do_step(turn: Turn, run: Run, step: dict) -> Go | None:
    """``do`` step (runtime.md §3.6.3 do rules 1-4).

    Rules 1-3: render ``with``, call the action, read its result (a raise or an unknown action
    fails).
    Rule 4: ok and skipped follow ``then``, failed follows ``onFail`` (else ``then``), defer parks
    the run.
    """
    name = step["do"]
    key = step_key(run)
    action = turn.given.agent.actions.get(name)
    if action is None:
        which, value, detail, spoke = "failed", f'unknown action "{name}"', None, False
    else:
        ctx = ActionCtx(context=turn.given.context, data=turn.session.data, input=run.input,
                        run=run, key=key, dedupe_key=run.dedupe_key, silenced=turn.given.silenced,
                        now=turn.given.now)
        try:
            which, value, detail, spoke = read_action_result(
                name, action.run(render_deep(step.get("with") or {}, turn.scope(run)), ctx))
        except Exception as error:  # an action failure is an outcome, not a crash (flows.md §9.5)
            log_swallowed(f'action "{name}"')
            which, value, detail, spoke = "failed", error_text(error), None, False
    if which == "defer" and not is_duration(value):
        which, value = "failed", (f'action "{name}" asked to defer by "{value}", which is not a '
                                  'duration. Use a value like "2m" or "1h".')
    elif which == "defer" and is_too_long(value):
        which, value = "failed", (f'action "{name}" asked to defer by "{value}", longer than the '
                                  f'maximum duration "{MAX_DURATION}". Use a value like "2m" or '
                                  '"1h".')
    then = step.get("then")
    if which == "ok":
        if spoke:
            turn.spoke = True
            turn.spoke_runs.add(run.id)
        return go(turn, run, "do", "ok", then, key=key, detail=text_or_none(detail or None))
    if which == "skipped":
        return go(turn, run, "do", "skipped", then, code="action-skipped", key=key,
                  detail=text_or_none(value))
    if which == "failed":
        target = step.get("onFail") if step.get("onFail") is not None else then
        return go(turn, run, "do", "failed", target, code="action-failed", key=key,
                  detail=text_or_none(value))
    at = turn.given.now + timedelta(milliseconds=duration_ms(value))
    park(turn, run, f"{run.id}:{run.step_id}:{to_ms(at)}", at)
    write_line(turn, run, "do", "deferred", code="action-deferred", key=key,
               detail=text_or_none(detail), until=iso(at))
    return None


def text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def run_timer_wait(turn: Turn, run: Run, flow: dict, step: dict) -> Go | None:
    """Timer ``wait`` step (runtime.md §3.6.3 timer rules 1-3).

    Rule 2: a short wait before a say or talk step rides inline on the next message and moves on.
    Rule 3: otherwise park until now + the duration, snapped by business hours when asked (§7.7).
    """
    ms = duration_ms(step["wait"])
    key = step_key(run)
    then = step.get("then")
    if ms <= SHORT_WAIT_MS and speaks_next(flow, step, then):
        turn.pending_delay_ms += ms
        return go(turn, run, "wait", "ok", then, code="inline-delay", detail=f"{ms}ms", key=key)
    at = turn.given.now + timedelta(milliseconds=ms)
    if step.get("businessHours"):
        at = business_time(turn, at)
    park(turn, run, f"{run.id}:{run.step_id}:{to_ms(at)}", at)
    write_line(turn, run, "wait", "waiting", key=key, until=iso(at))
    return None


def speaks_next(flow: dict, step: dict, then: Any) -> bool:
    """Whether a wait's ``then`` leads straight to a say or talk step (runtime.md §3.6.3)."""
    steps = flow.get("steps") or []
    if then is None:
        index = steps.index(step)
        following = steps[index + 1] if index + 1 < len(steps) else None
    elif isinstance(then, str):
        following = None if then == "end" else find_step(flow, then)
    else:
        following = None if then.get("flow") is not None else find_step(flow, then.get("step"))
    return following is not None and (is_talk(following) or following.get("say") is not None)


def run_event_wait(turn: Turn, run: Run, step: dict) -> None:
    """Event ``wait`` step: park until the event or ``upTo`` (default 30d), never snapped
    (runtime.md §3.6.3)."""
    wait = step["wait"]
    at = turn.given.now + timedelta(milliseconds=duration_ms(wait.get("upTo") or DEFAULT_UP_TO))
    park(turn, run, f"{run.id}:{run.step_id}:{to_ms(at)}", at, kind="event", event=wait["event"])
    write_line(turn, run, "wait", "waiting", code="awaiting-event", detail=wait["event"],
               key=step_key(run), until=iso(at))


# 10. Model calls ##############################################################################

# The engine (sections 8-9) decides *what* the model judges and *who* speaks; falai_calls turns
# that into provider calls and reads the replies back, laid out by the agent's protocol object
# (falai_protocols). Here: what the engine hands it and gets back. The engine calls
#   falai_calls.needs_understand_call(ask) -> bool     model-calls.md §3.1 zero-call rules
#   falai_calls.understand(agent, ask) -> Judgement    one "understand" call (raises on provider
#                                                      failure)
#   falai_calls.speak(agent, ask, streaming)           generator: yields deltas, returns Spoken |
#                                                      Deferred
#   falai_calls.compact_history(agent, history)        -> Compacted(history, llm_calls, usage), §9


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


# The agent's tool pool ------------------------------------------------------------------------

def tool_pool(agent: Agent) -> Any:
    """The agent's one thread pool for safe tool calls, created on first use and capped."""
    return agent.compiled.tool_pool()




# `python -m falai`: the command line lives in falai_cli; `import falai` never loads it.
if __name__ == "__main__":
    import sys
    try:
        import falai_cli
    except ImportError as error:
        sys.exit(f"falai: the command line needs falai_cli.py next to falai.py ({error}). "
                 "Install falai (pip install falai) or copy falai_cli.py too.")
    sys.exit(falai_cli.main())
