"""falai: a conversational state engine. The model understands; the code decides.

A host calls ``agent.turn(...)`` for every input (a customer message, a wake
that fired, a host event, a manual start) and gets back the messages to send,
the wakes to schedule and the session to save. falai never sends, never sleeps
and never saves: the host does.

This module is the engine and the public API; ``import falai`` is all a user
needs. Its sections, in the order a turn flows:

   1. The toolkit ............. falai(), Agent, Compiled: construction and the agent's parts
   2. The turn ................ run_turn(): ingest, understand, decide, run, speak, settle
   3. Runs and steps .......... outcome lines, start_run(), move_run(), advance(), each step kind

The modules stack like a ladder, each importing only those below it, at its top:

   falai_cli, falai_host ...... the command line (``python -m falai``) and the production host
   falai_providers ............ the HTTP model providers (requests); falai_stores, falai_testing
   falai (this file) .......... the engine and the public face
   falai_protocols ............ the two protocols the model calls follow, Lean and V4
   falai_calls, falai_spec .... the model calls (prompts, understand, speak, tool rounds,
                                compaction, the stream decoder); flows and sessions as JSON
   falai_checks ............... validate_flow, check_flow, check_agent: the construction checks
   falai_base ................. the ground floor: records, errors, time, templates, fields, the
                                session blob, the records of the model calls, lenient JSON

falai re-exports the base's public names; the JSON helpers (``from_spec``, ...),
``Store``, ``MemoryStore``, ``ScriptedProvider`` and ``MemoryScheduler`` load
their modules on first use (PUBLIC_ELSEWHERE), so ``import falai`` loads what a
turn needs and no more.

A reading path for a first visit: run_turn() (section 2) is the whole turn,
one line per phase; read on through ingest(), understand_message(), decide(),
run_phase(), choose_speaker() and settle(), then move_run(), advance() and the
step kinds (section 3), then falai_calls.understand() and falai_calls.speak().
The other modules never decide anything in a turn: skip them until you need
them (the construction checks run once, when an agent is built). The spec's
numbers sit in one block in falai_base.

A section opens with a banner ``# N. Name ####``; its parts with
``# Part (spec section) ----``. The spec lives in ``docs/spec``; comments
cite it as "runtime.md §3.2".

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import copy
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, get_args, get_type_hints, Literal, NamedTuple, NoReturn

import falai_calls
import falai_checks
import falai_protocols
from falai_base import (
    Action, ActionCtx, ActionResult, add_usage, AiProvider, ALWAYS_CLAIMS_KEPT, AskedBranch,
    BLOB_NESTING, check_format_and_rule, check_instant, check_nesting, claim_prefix,
    classify_error, coerce_field, compact_json, Condition, DEBUG, DEFAULT_MAX_ASKS,
    DEFAULT_MAX_TOOL_LOOPS, DEFAULT_UP_TO, Deferred, duration_ms, EARLIEST, EndedRun, ERROR_KINDS,
    error_text, EventDef, extract_mode, fake_clock, FalaiError, first_trigger,
    FlowConfigurationError, FlowValidation, from_ms, GenerateRequest, Generation, GenerationChunk,
    HOP_LIMIT, INPUTS_KEPT, InvalidSessionError, is_duration, is_known, is_too_long, is_whole,
    iso, json_copy, json_equal, judge, Judgement, key_part, later, LATEST, live_pair, log,
    log_swallowed, MAX_DURATION, MAX_NESTING, merge_patch, message_trigger, model_fields,
    OutboundMessage, OUTCOME_MESSAGES, OUTCOMES_KEPT, parse_iso, PredCtx, Problem,
    ProviderCapabilities, ProviderError, render, render_deep, RETRY_LADDER, reused,
    ROUTE_MIN_SCORE, ROUTE_OVER_ASKER, Run, RunStatus, says_value, ScheduleEntry, Scope,
    ScriptError, Session, SessionConflictError, SHORT_WAIT_MS, show, SkippedTrigger, SpeakAsk,
    Spoken, StartedRun, STEP_CAP, StepOutcome, strip_nones, system_clock, to_ms, TokenUsage, Tool,
    TOOL_POOL_WORKERS, ToolCallRequest, ToolCtx, ToolPermissionResult, ToolResult,
    ToolValidationResult, triggers_of, UNDERSTAND_PLANS_KEPT, UnderstandAsk,
    unescape_key_part, UNLIMITED_ASKS, unstorable,
)
from falai_base import __version__ as __version__      # the version lives in the ground floor
from falai_checks import check_flow, validate_flow


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

# The public names whose modules load on first use (PEP 562): ``falai.X`` and ``from falai import
# X`` import the module then, so ``import falai`` loads no JSON helper, store or test double.
PUBLIC_ELSEWHERE = {
    "from_spec": "falai_spec", "to_spec": "falai_spec", "flow_spec_schema": "falai_spec",
    "migrate_session": "falai_spec", "history_to_events": "falai_spec",
    "events_to_history": "falai_spec", "load_registry": "falai_spec",
    "check_registry": "falai_spec",
    "ScriptedProvider": "falai_testing", "MemoryScheduler": "falai_testing",
    "Store": "falai_stores", "MemoryStore": "falai_stores",
}

if TYPE_CHECKING:       # what a type checker sees for the names PUBLIC_ELSEWHERE loads on use
    from falai_spec import (check_registry, events_to_history, flow_spec_schema, from_spec,
                            history_to_events, load_registry, migrate_session, to_spec)
    from falai_stores import MemoryStore, Store
    from falai_testing import MemoryScheduler, ScriptedProvider


def __getattr__(name: str) -> Any:
    """A public name that lives in a module loaded on first use (PEP 562)."""
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


# 1. The toolkit ###############################################################################
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
        return __getattr__("from_spec")(spec)      # falai_spec loads on first use (PEP 562)

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
        stream = run_turn(self, TurnInput.of_call(locals()), streaming=False)
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
        stream = run_turn(self, TurnInput.of_call(locals()), streaming=True)
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
        self._agent = agent
        # The agent's one protocol object (Lean or V4): how its model calls are laid out, and the
        # parts of them it builds once, kept inside it and reached through its methods.
        self._model_calls = falai_protocols.for_protocol(agent.protocol)
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


# 2. The turn ##################################################################################
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


@dataclass
class TurnStreamChunk:
    """A piece of ``turn_stream()``: text deltas, then one ``done=True`` chunk with the result."""
    delta: str = ""
    done: bool = False
    result: TurnResult | None = None


InputKind = Literal["message", "wake", "event", "start"]
INPUT_KINDS: tuple[InputKind, ...] = ("message", "wake", "event", "start")


@dataclass(slots=True)
class TurnInput:
    """The keywords of one ``turn()`` or ``turn_stream()`` call, declared once (python-api.md, One
    turn; runtime.md §2): the two methods list these fields as their keyword-only parameters
    (tests/turn/test_turn_input.py holds them to it) and hand the engine this record. None is "not
    given". A keyword that belongs to one input kind names it in its metadata.

    check_turn_input() checks it; the turn reads it as given (``turn.given.input``), with its
    kind, hop and session read once into TurnGiven.
    """
    session_id: str
    session: Session | dict | None = None
    message: str | None = None
    id: str | None = field(default=None, metadata={"kind": "message"})
    at: str | None = field(default=None, metadata={"kind": "message"})
    wake: str | None = None
    event: str | None = None
    key: str | None = field(default=None, metadata={"kind": "event"})
    payload: Any = field(default=None, metadata={"kind": "event"})
    hop: int | None = field(default=None, metadata={"kind": "event"})
    start: dict | None = None
    context: Any = None
    history: list | None = None
    silenced: str | dict | None = None
    anchors: dict | None = None
    claims: dict | None = None

    @classmethod
    def of_call(cls, call: dict[str, Any]) -> TurnInput:
        """The record of a turn() or turn_stream() call, from its ``locals()``: ``self`` and the
        method's keyword-only parameters, which are these fields."""
        del call["self"]
        return cls(**call)


# Per input kind, the keywords that belong to another kind, with that kind, in TurnInput's order.
FOREIGN_KEYWORDS = {kind: tuple((keyword.name, keyword.metadata["kind"])
                                for keyword in fields(TurnInput)
                                if keyword.metadata.get("kind") not in (None, kind))
                    for kind in INPUT_KINDS}


# The keywords typed ``X | None`` with a class X (the hint's args: X, NoneType), each held to its X
# by check_types(), after check_kind_keywords() has checked the kinds, key and hop in words of
# their own.
TYPED_KEYWORDS = tuple((name, args[0]) for name, hint in get_type_hints(TurnInput).items()
                       for args in [get_args(hint)]
                       if len(args) == 2 and args[1] is type(None) and isinstance(args[0], type))


def check_turn_input(given: TurnInput) -> None:
    """Check the keywords given to turn(); a TypeError names the first that is wrong (runtime.md
    §2.2, python-api.md, One turn). The session is read (and its type checked) as the turn loads
    it: load_session()."""
    if not isinstance(given.session_id, str) or not given.session_id:
        raise TypeError(f"turn() needs session_id=<non-empty str>, got {given.session_id!r}")
    kind = input_kind(given)
    check_kind_keywords(given, kind)
    check_types(given)
    check_input_values(given)


def input_kind(given: TurnInput) -> InputKind:
    """The one input kind given: exactly one of message, wake, event and start is not None."""
    kinds = [kind for kind in INPUT_KINDS if getattr(given, kind) is not None]
    if len(kinds) != 1:
        got = "none" if not kinds else " and ".join(kinds)
        raise TypeError("turn() takes exactly one input kind (message, wake, event or start); got "
                        f"{got}")
    return kinds[0]


def check_kind_keywords(given: TurnInput, kind: InputKind) -> None:
    """The keywords of the input's kind: no other kind's, the kind's own value and hop."""
    for keyword, other in FOREIGN_KEYWORDS[kind]:
        if getattr(given, keyword) is not None:
            raise TypeError(f"turn() got {keyword}= with a {kind} input; {keyword} belongs to "
                            f"{other}")
    value = getattr(given, kind)
    if kind == "start":
        if (not isinstance(value, dict) or not isinstance(value.get("flow"), str)
                or not isinstance(value.get("key"), str)):
            raise TypeError('turn(start=...) needs a dict with "flow" and "key" strings, '
                            f'such as {{"flow": "lembrete", "key": "k1"}}; got {value!r}')
    elif not isinstance(value, str):
        raise TypeError(f"turn({kind}=...) takes a str, got {type(value).__name__}")
    if kind == "event" and not isinstance(given.key, str):
        raise TypeError("turn(event=...) needs key=<str>, the host's idempotency key for the event")
    hop = input_hop(given, kind)
    if not isinstance(hop, int) or isinstance(hop, bool) or hop < 0:
        raise TypeError(f"hop must be a whole number of 0 or more, got {hop!r}")


def check_types(given: TurnInput) -> None:
    """Each keyword typed ``X | None`` with a class X (TYPED_KEYWORDS) is None or an X."""
    for name, expected in TYPED_KEYWORDS:
        value = getattr(given, name)
        if value is not None and not isinstance(value, expected):
            raise TypeError(f"turn({name}=...) takes a {expected.__name__}, got "
                            f"{type(value).__name__}")


def input_hop(given: TurnInput, kind: InputKind) -> Any:
    """The input's hop: a start carries it in its dict; an event's hop of None, like any other
    kind's, is 0."""
    if kind == "start":
        assert given.start is not None
        return given.start.get("hop", 0)
    return given.hop or 0


def check_input_values(given: TurnInput) -> None:
    """What the keywords carry: an ``at`` instant in range, payloads no deeper than MAX_NESTING, a
    ``silenced`` of either form."""
    if given.at is not None:
        try:
            check_instant(parse_iso(given.at), "the instant", "Pass an instant inside it.")
        except ValueError as error:
            raise TypeError(f"turn(at=...): {error}") from None
    if given.payload is not None:
        check_nesting(given.payload, "turn(payload=...)")
    if given.start is not None and given.start.get("input") is not None:
        check_nesting(given.start["input"], 'turn(start={"input": ...})')
    silenced = given.silenced
    if silenced is not None and not isinstance(silenced, str) and not (
            isinstance(silenced, dict) and isinstance(silenced.get("reason"), str)):
        raise TypeError('silenced takes a reason string or {"reason": str, "understand"?: bool, '
                        '"skip"?: bool}')


def load_session(session: Session | dict | None) -> Session | None:
    """The session a turn was given, as a Session: a blob dict is read (runtime.md §2.2)."""
    if isinstance(session, dict):
        return Session.from_dict(session)
    if session is not None and not isinstance(session, Session):
        raise TypeError("turn(session=...) takes a Session or a blob dict, got "
                        f"{type(session).__name__}")
    return session


# The phases of runtime.md §3 a turn passes through, in order (load is part of "ingest", return of
# "settle").
Phase = Literal["ingest", "understand", "decide", "run", "speak", "settle"]






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
    """What a turn is given and never changes: the agent, the checked input and what is read of it
    once (its kind, hop and session), the turn's one instant, and the host's context, anchors,
    claims and silenced (runtime.md §2, §3.1).

    Read-only as a NamedTuple: a frozen dataclass sets each field through ``object.__setattr__``,
    which took 2% of a triage turn's instructions.
    """
    agent: Agent
    input: TurnInput          # as the host gave it
    kind: InputKind
    hop: int                  # a start's from its dict, an event's, or 0
    input_session: Session | None     # the session given, read; the turn changes its copy
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


def turn_given(agent: Agent, given: TurnInput, input_session: Session | None, now: datetime,
               session: Session) -> TurnGiven:
    """What a turn is given, read once at its start; ``input_session`` is the session given, read
    (load_session), and ``session`` the turn's copy."""
    now_text = iso(now)
    kind = input_kind(given)
    silenced = given.silenced
    claims = given.claims or {}
    return TurnGiven(
        agent=agent, input=given, kind=kind, hop=input_hop(given, kind),
        input_session=input_session, now=now, now_text=now_text, session_id=given.session_id,
        context=given.context, anchors=given.anchors or {},
        held_claims=claims.get("held") or {},
        active_claims=frozenset(claims.get("active") or []),
        silenced=(silenced if isinstance(silenced, str)
                  else silenced.get("reason") if silenced else None),
        understand_when_silenced=isinstance(silenced, dict) and bool(silenced.get("understand")),
        skip_mode=isinstance(silenced, dict) and bool(silenced.get("skip")),
        trigger_key=trigger_key_of(given, kind, session, now_text))


def trigger_key_of(given: TurnInput, kind: InputKind, session: Session, now_text: str) -> str:
    """The input's trigger key (runtime.md §2.3); an empty id is no id."""
    if kind == "message":
        return given.id or instant_key(session, given.at or now_text)
    # check_turn_input holds the field each kind names to a value
    if kind == "wake":
        assert given.wake is not None
        return given.wake
    if kind == "event":
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
        input_session = load_session(given.session)
        now = check_instant(agent.clock(), "the agent's clock reading", "Check the clock.")
        try:
            self.session = (copy_session(input_session) if input_session
                            else Session(id=given.session_id))
        # a Session built by hand far past BLOB_NESTING; no store would save it
        except RecursionError:
            assert input_session is not None    # a fresh Session never nests that deep
            raise InvalidSessionError(input_session.id,
                                      f"it nests deeper than {BLOB_NESTING} levels "
                                      f"(a value may nest {MAX_NESTING}; "
                                      "docs/guide/limits.md)") from None
        self.given = turn_given(agent, given, input_session, now, self.session)   # read-only now
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
        return self.given.kind == "message"

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


def run_turn(agent: Agent, given: TurnInput,
             streaming: bool) -> Generator[str, None, TurnResult]:
    """The one pipeline behind turn() and turn_stream(): yields deltas, returns the TurnResult.

    ``turn.given`` never changes. What each phase changes of the rest (the session copy, its runs,
    the history, what the turn produces, the floor) is said on its line; a run's status moves only
    through move_status(), by RUN_MOVES, and the turn's floor only through move_floor(), by
    FLOOR_MOVES.
    """
    check_turn_input(given)
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
    given, kind = turn.given.input, turn.given.kind
    if kind == "wake" and turn.given.input_session is None:
        assert given.wake is not None           # check_turn_input holds it to a str
        return Ignored("no-session", given.wake)
    if kind == "message":
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
    elif kind == "wake":
        assert given.wake is not None
        if given.wake.startswith("silence:"):
            return ingest_silence_wake(turn, given.wake)
        return ingest_run_wake(turn, given.wake)
    elif kind == "event":
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
                      hop=turn.given.hop)
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
    assert given.key is not None                # check_turn_input holds it to a str
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
                    hop=turn.given.hop):
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
        return SpeakAsk(input_kind=turn.given.kind, text=text, scope=turn.scope(),
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
    return SpeakAsk(input_kind=turn.given.kind, text=text, scope=turn.scope(run),
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
    previous = turn.given.input_session.last_assistant_at if turn.given.input_session else None
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
    turn = Turn(agent, TurnInput(session_id=session.id, session=session, wake="pending",
                                 context=context, anchors=anchors, claims=claims))
    entries = [ScheduleEntry(key=run.waiting["key"], at=parse_iso(run.waiting["until"]))
               for run in turn.session.runs
               if run.status == "waiting" and (run.waiting or {}).get("key")
               and (run.waiting or {}).get("until")]
    return entries + silence_wakes(turn)


# 3. Runs and steps ############################################################################
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
    if kind == "silence" and turn.given.kind == "wake" \
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
