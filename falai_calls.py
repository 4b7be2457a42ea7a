"""falai's model calls: the understand and speak calls, tool rounds, compaction, streaming.

The engine (falai.py, sections 2-3) decides *what* the model judges and *who* speaks; this module
turns that into provider calls and reads the replies back (docs/spec/model-calls.md). The engine
uses four functions:

    needs_understand_call(ask) -> bool          the zero-call rules (model-calls.md §3.1)
    understand(agent, ask) -> Judgement         one "understand" call; raises on a provider failure
    speak(agent, ask, streaming)                a generator: yields text deltas, returns Spoken or
                                                Deferred
    compact_history(agent, history)             -> Compacted(history, llm_calls, usage) (§9)

How a request is laid out is the protocol's (falai_protocols: ``Lean``, ``V4``), behind the
``ModelCalls`` seam below; everything else here is shared by both. It stands on falai_base (the
records it is handed and hands back, and the readers of model text) and falai_checks.

Sections: the protocol seam; shared building blocks (model-calls.md §2); the understand call
(§3) and reading its reply; the speak call (§5) and its tool rounds (§6); compaction (§9); the
envelope stream decoder (§8).

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in
LICENSE.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from falai_base import (
    ENVELOPE_SHAPED, decode_json_string, find_json_object, lenient_loads, unfenced,
    DEBUG, Deferred, FIELD_ENVELOPES_KEPT, GenerateRequest, Generation, Judgement, MAX_NESTING,
    ProviderError, Scope, ScriptError, SpeakAsk, Spoken, TokenUsage, Tool, ToolCtx, ToolResult,
    UNDERSTAND_PLANS_KEPT, UNSERIALIZABLE, UnderstandAsk, add_usage, closed_object, coerce_field,
    compact_json, error_text, field_description, first_trigger, is_known, js_number,
    js_number_text, log, log_swallowed, merge_patch, nests_deeper, nullable_envelope, read_boolean,
    render, reused, split_phrases, triggers_of, unstorable, value_text,
)

from falai_checks import check_compaction

if TYPE_CHECKING:
    from falai import Agent


# The protocol seam ----------------------------------------------------------------------------
#
# An agent's model calls follow one protocol (python-api.md, ``protocol``), chosen once when the
# agent is built: an object with the same small interface under each, so the engine and the call
# loops below never ask which one it is. falai_protocols holds the two, ``Lean`` and ``V4``.

@dataclass(slots=True)
class SpeakCall:
    """One speak call as a protocol lays it out: what its rounds share (model-calls.md §5)."""
    wire: list[tuple[str, str]]     # (slug, wire name) of each pending field
    system: str | None
    prompt: str                     # the prompt without the round's section
    schema: dict                    # the reply schema sent
    v4_schema: dict | None          # the v4 envelope, unsent, for a ScriptedProvider's strict check
    tools_section: str | None       # the section of a round that offers tools
    wrap_up: str                    # the section of a round after tool results that offers none
    cache_history: bool             # whether the provider may mark the history as a cached prefix

    def round_request(self, ask: SpeakAsk, history: list, tools: list | None,
                      round_no: int) -> GenerateRequest:
        """The request of one round; ``tools`` are the declarations it offers, None for none."""
        section = self.tools_section if tools else self.wrap_up if round_no > 0 else None
        return GenerateRequest(system=self.system, prompt=join_sections(self.prompt, section),
                               history=list(history), context=ask.scope.context,
                               schema=self.schema,      # shared: a provider never changes a request
                               schema_name="speak", tools=tools, cache_history=self.cache_history,
                               v4_schema=self.v4_schema,
                               message=ask.text if ask.input_kind == "message" else None)


_NOT_BUILT = object()


class ModelCalls:
    """One agent's model calls under a protocol: how a request is laid out, how its reply is read.

    The interface the call loops use: ``understand_request`` / ``read_understanding`` and
    ``speak_request`` / ``read_speak_reply``. A protocol (falai_protocols) writes the two
    requests; both read replies alike, so a reply in either form reads the same under each
    (docs/guide/tokens.md). The object also keeps what its agent's calls work out once: the
    agent's flows and fields never change after construction, so a part built from them alone,
    or from which of them a turn asks about, is built on first use and kept. It is a part of the
    agent's ``Compiled`` (``agent.compiled.model_calls()``), which owns every cache of the agent;
    its own caches are read only by its methods.
    """
    name = ""

    def __init__(self) -> None:
        self._envelopes: dict = {}          # what a call asks (ids, branches, fields) -> Envelope
        self._field_envelopes: dict = {}    # asked (alias, slug) or pending list -> its schema
        self._speak_system: Any = _NOT_BUILT  # (system, whether the Identity varies), on first use

    def understand_request(self, agent: Agent, ask: UnderstandAsk) -> UnderstandCall:
        """The understand request for ``ask`` (model-calls.md §3), and how to read its reply."""
        raise NotImplementedError

    def read_understanding(self, call: UnderstandCall, generation: Generation) -> Judgement:
        """The judgement in an understand reply (model-calls.md §3.5)."""
        return read_judgement(generation, call.aliases, call.lean)

    def speak_request(self, agent: Agent, ask: SpeakAsk) -> SpeakCall:
        """The speak call for ``ask`` (model-calls.md §5)."""
        raise NotImplementedError

    def read_speak_reply(self, call: SpeakCall, generation: Generation) -> Round:
        """The message, field values and tool calls of one speak round (model-calls.md §5.5)."""
        return read_round(generation, call.wire)

    # What both protocols build alike, kept for the agent ----------------------------------------

    def understand_envelope(self, agent: Agent, ask: UnderstandAsk, scope: Scope) -> Envelope:
        """The v4 envelope of this call: built once for each set of asked items of the agent's own
        flows (both protocols use its aliases)."""
        branches = [(f"{run_id}/{step_id}/{index}",
                     render(when, scope) if isinstance(when, str) else str(when))
                    for run_id, step_id, index, when in ask.branches]
        own = agent.compiled.flows_by_trigger().own
        candidates, mentions = tuple(map(id, ask.candidates)), tuple(map(id, ask.mentions))
        if not (own.issuperset(candidates) and own.issuperset(mentions)):
            return new_envelope(agent, ask, branches)      # a hand-made ask: its flows may change
        # The agent's flows live as long as it does, so their ids name them; a rendered when is part
        # of the key.
        key = (candidates, mentions, tuple(branches), tuple(ask.fields))
        return reused(self._envelopes, key, lambda: new_envelope(agent, ask, branches),
                      UNDERSTAND_PLANS_KEPT)

    def fields_envelope(self, agent: Agent, fields: list[tuple[str, str]]) -> dict:
        """The nullable envelope of the asked fields under their aliases (§2.7), built once per
        list."""
        return reused(self._field_envelopes, tuple(fields), lambda: nullable_envelope(
            {alias: agent.fields.get(slug) or {"type": "string"} for alias, slug in fields}),
            FIELD_ENVELOPES_KEPT)

    def speak_reply_shape(self, agent: Agent,
                          pending: list[str]) -> tuple[list[tuple[str, str]], dict]:
        """The wire names of the pending fields and the speak envelope over them, built once per
        list."""
        def build() -> tuple[list[tuple[str, str]], dict]:
            wire = wire_names(pending)
            return wire, speak_envelope(agent, wire)
        return reused(self._field_envelopes, ("speak", *pending), build, FIELD_ENVELOPES_KEPT)

    def speak_prefix(self, agent: Agent, scope: Scope) -> tuple[str | None, str | None]:
        """(system, Identity for the prompt) of a speak call: ``stable_prefix`` and the protocol's
        ``speak_system``, built once, as it never reads the turn."""
        if self._speak_system is _NOT_BUILT:
            system, _ = stable_prefix(agent, scope)
            self._speak_system = (self.speak_system(agent, system), identity_varies(agent))
        system, varies = self._speak_system
        return system, identity_section(agent, scope) if varies else None

    def speak_system(self, agent: Agent, system: str | None) -> str | None:
        """The system text of a speak call, from the stable prefix (model-calls.md §2.2)."""
        return system


# Shared building blocks (model-calls.md §2) ---------------------------------------------------

WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]+")
SECTION_KEYS = frozenset({"flows", "mentions", "extract", "branches", "fields"})


def log_call(request: GenerateRequest, generation: Generation) -> None:
    """debug=True: one DEBUG line per model call, what was asked and what came back."""
    if not log.isEnabledFor(DEBUG):
        return
    usage = generation.usage
    counted = (f"{usage.prompt_tokens} in / {usage.completion_tokens} out tokens"
               if usage is not None else "usage not reported")
    structured = (", ".join(generation.structured) if isinstance(generation.structured, dict)
                  else "none")
    chars = len(generation.message) if isinstance(generation.message, str) else 0
    log.debug('model call "%s": %d history items, %d prompt chars, %d tools offered -> %d reply '
              "chars, structured keys: %s, %d tool calls, %s", request.schema_name,
              len(request.history),
              len(request.prompt), len(request.tools or []), chars, structured,
              len(generation.tool_calls or []), counted)


def join_sections(*sections: str | None) -> str:
    """Drop None and blank sections, join the rest with a blank line, strip (model-calls.md
    §2.2)."""
    return "\n\n".join([text for text in sections if text is not None and text.strip()]).strip()


def render_text(text: Any, scope: Scope) -> str:
    """A prompt text rendered and stripped; "" when it is not a string."""
    return render(text, scope).strip() if isinstance(text, str) else ""


def json_text(value: Any) -> str:
    """Compact JSON, or str() for what JSON cannot hold, so a prompt never fails to build."""
    try:
        return compact_json(value)
    except UNSERIALIZABLE:
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
    return json_text(value)


def knowledge_lines(kb: dict, depth: int = 0) -> list[str]:
    """The knowledge base as nested markdown bullets, two spaces per depth (model-calls.md §2.3)."""
    pad = "  " * depth
    lines: list[str] = []
    for key, value in kb.items():
        if isinstance(value, dict):
            lines.append(f"{pad}- {key}:")
            lines += knowledge_lines(value, depth + 1)
        elif (isinstance(value, (list, tuple))
              and any(isinstance(v, (dict, list, tuple)) for v in value)):
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
    """Persona or goal is a template, so Identity changes with the turn's data (model-calls.md
    §2.3)."""
    return any(isinstance(text, str) and "{{" in text for text in (agent.persona, agent.goal))


def identity_section(agent: Agent, scope: Scope) -> str:
    """``## Identity``: the name, then persona, then goal, rendered (model-calls.md §2.3)."""
    persona, goal = render_text(agent.persona, scope), render_text(agent.goal, scope)
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
    """``<name> (<type>)[ [a | b]][: <description>]``; a slug with no definition prints alone
    (§2.5)."""
    if not isinstance(definition, dict):
        return name
    if definition.get("type") == "array":
        items = definition["items"] if isinstance(definition.get("items"), dict) else {}
        line = f"{name} (list of {items.get('type', 'string')})"
    else:
        line = f"{name} ({definition.get('type', 'string')})"
        if isinstance(definition.get("enum"), list) and definition["enum"]:
            line += " [" + " | ".join(value_text(v) for v in definition["enum"]) + "]"
    description = field_description(definition)
    if description:
        line += f": {description}"
    return line


def flow_name(flow: dict) -> str:
    """A flow's name; a flow without one prints its id (flows.md §3.1)."""
    return str(flow.get("name") or flow.get("id"))


def tool_arguments(raw: Any) -> dict:
    """A tool call's arguments: a dict as is; a string stripped, unfenced and parsed; else {}
    (§2.9)."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return {}
    try:
        value = lenient_loads(unfenced(raw))
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


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

    def aliases_of(self, reals: Iterable[str]) -> list[str]:
        """The aliases minted for any of ``reals``."""
        wanted = set(reals)
        return [alias for alias, real in self._real_of.items() if real in wanted and alias != real]


# The understand call (model-calls.md §3) ------------------------------------------------------

def needs_understand_call(ask: UnderstandAsk) -> bool:
    """Whether there is anything the model must judge (model-calls.md §3.1, zero-call rules).

    False when there is nothing at all to judge, and when only routing is left
    and the candidates are empty or only the floor run's own flow (nothing to
    compare it with). The single-flow shortcut reaches here as empty candidates.
    """
    return bool(ask.mentions or ask.branches or ask.fields) or asks_routing(ask)


def asks_routing(ask: UnderstandAsk) -> bool:
    """Whether the candidates hold a flow other than the floor run's own (model-calls.md §3.1)."""
    if not ask.candidates:
        return False
    floor_id = ask.floor_run.flow_id if ask.floor_run is not None else (
        ask.floor_flow.get("id") if isinstance(ask.floor_flow, dict) else None)
    return floor_id is None or any(flow.get("id") != floor_id for flow in ask.candidates)


def phrases(triggers: list[dict], kind: str, scope: Scope) -> tuple[list[str], list[str]]:
    """Rendered (plain phrases, exclusions) of the given triggers (flows.md §4.3)."""
    raw = [render(p, scope) for t in triggers for p in (t.get(kind) or []) if isinstance(p, str)]
    return split_phrases(raw)


def mention_trigger(flow: dict) -> dict:
    return first_trigger(flow, "mention") or {}


def mention_extract(flow: dict) -> dict:
    extract = mention_trigger(flow).get("extract")
    return extract if isinstance(extract, dict) and extract else {}


@dataclass(slots=True)
class UnderstandCall:
    """One understand request and what reading its reply needs."""
    request: GenerateRequest
    aliases: AliasTable
    lean: LeanReading | None = None


@dataclass(slots=True)
class Envelope:
    """The v4 understand envelope (§3.3), the aliased items it asks about (§2.8), and the prompt
    parts built from them alone: every call of the agent that asks the same reuses it."""
    schema: dict
    aliases: AliasTable
    cand: list                      # (alias, flow) of each candidate
    ment: list                      # (alias, flow) of each mention
    branches: list                  # (alias, rendered when) of each branch
    fields: list                    # (alias, slug) of each field
    cand_templated: bool = False    # a candidate's description or phrases render with the scope
    ment_templated: bool = False    # a mention's description or phrases render with the scope
    parts: dict = field(default_factory=dict)   # prompt parts built from the envelope alone


def new_envelope(agent: Agent, ask: UnderstandAsk, branches: list[tuple[str, str]]) -> Envelope:
    """The aliases, minted in the order of §2.8, and the schema of §3.3. The candidates are each
    flow once (understand_message lists them so, and flow ids are unique)."""
    aliases = AliasTable()
    cand = [(aliases.alias(f["id"], "f"), f) for f in ask.candidates]
    ment = [(aliases.alias(f["id"], "f"), f) for f in ask.mentions]
    asked = [(aliases.alias(real, "q"), when) for real, when in branches]
    fields = [(aliases.alias(slug, "d"), slug) for slug in ask.fields]
    return Envelope(understand_schema(agent, cand, ment, asked, fields), aliases, cand, ment, asked,
                    fields,
                    cand_templated=any(templated(*flow_texts(f, "message")) for _, f in cand),
                    ment_templated=any(templated(*flow_texts(f, "mention")) for _, f in ment))


def understand_schema(agent: Agent, cand: list, ment: list, branches: list, fields: list) -> dict:
    """The v4 envelope schema: one closed, nullable section per kind of item asked (§3.3)."""
    properties: dict = {}
    if cand:
        properties["flows"] = closed_object({
            # Bounded, so a weak model under a grammar cannot run a score away.
            alias: {"type": ["integer", "null"], "minimum": 0, "maximum": 100,
                    "description": f"0-100 fit of the message to {flow_name(f)}"}
            for alias, f in cand})
    if ment:
        properties["mentions"] = closed_object({
            alias: {"type": ["boolean", "null"],
                    "description": f"true when the customer brought up {flow_name(f)}"}
            for alias, f in ment})
        extracts = {alias: nullable_envelope(mention_extract(f)) for alias, f in ment
                    if mention_extract(f)}
        if extracts:
            properties["extract"] = closed_object(extracts)
    if branches:
        properties["branches"] = closed_object({
            alias: {"type": ["boolean", "null"], "description": when} for alias, when in branches})
    if fields:
        properties["fields"] = agent.compiled.model_calls().fields_envelope(agent, fields)
    return closed_object(properties)


def envelope_part(envelope: Envelope, name: str, build: Callable[[], Any],
                  varies: bool = False) -> Any:
    """A prompt part built from the envelope alone: built on first use and kept, unless a template
    in it renders with the turn's scope (``varies``); then built on every call. A kept part is
    never mutated."""
    if varies:
        return build()
    if name not in envelope.parts:
        envelope.parts[name] = build()
    return envelope.parts[name]


def latest_message_section(message: Any) -> str:
    """``## Customer's latest message``, verbatim between triple quotes (§3.4 item 9), in both
    protocols."""
    return f'## Customer\'s latest message\n"""\n{message}\n"""'


@dataclass(slots=True)
class LeanReading:
    """What reading a lean-form reply needs beyond the alias table."""
    flows: set = field(default_factory=set)             # real ids of this call's candidates
    mentions: dict = field(default_factory=dict)        # real mention flow id -> its extracts
    fields: list = field(default_factory=list)          # the slugs asked for this call
    field_names: list = field(default_factory=list)     # those slugs and aliases, longest first
    routing: bool = True        # whether the call asked for flow scores: only then is one read


def templated(*texts: Any) -> bool:
    return any(isinstance(t, str) and "{{" in t for t in texts)


def flow_texts(flow: dict, kind: str) -> list:
    triggers = triggers_of(flow, "message") if kind == "message" else [mention_trigger(flow)]
    return [flow.get("description"), *(p for t in triggers for p in (t.get(kind) or []))]


def mention_phrase_lines(flow: dict, scope: Scope) -> list[str]:
    """A mention's "Counts when" / "Does not count when" lines, shared by both protocols."""
    plain, excluded = phrases([mention_trigger(flow)], "mention", scope)
    return ([f"  Counts when: {'; '.join(plain)}"] if plain else []) + (
        [f"  Does not count when: {'; '.join(excluded)}"] if excluded else [])


def lean_extract_value(definition: Any, raw: Any) -> Any:
    """A lean extract value (always text) as the parameter's declared type; kept as text when it
    does not read."""
    definition = definition if isinstance(definition, dict) else {}
    if definition.get("type") in ("number", "integer", "boolean"):
        status, value = coerce_field({"type": definition["type"]}, raw)
        return value if status == "ok" else raw
    return raw


def read_lean_sections(reply: dict, aliases: AliasTable, asked: LeanReading,
                       judgement: Judgement) -> None:
    """The list-form sections of a reply (docs/guide/tokens.md): only what holds is listed.

    An id is a real id of this call, else an alias of it. Sparse means: a flow not listed is
    not scored (it counts as 0), a mention or branch not listed is not true, a detail not listed
    was not given; a detail not asked for this call is dropped.
    """
    def ids(key: str) -> Iterator[tuple[str, dict | str]]:
        value = reply.get(key)
        for item in value if isinstance(value, list) else []:
            name = item.get("id") if isinstance(item, dict) else item
            if isinstance(name, str):
                yield name, item

    def real(name: str, known: Iterable) -> str:
        return name if name in known else aliases.real(name)

    for name, item in ids("flows") if asked.routing else ():
        score = read_score(item.get("score")) if isinstance(item, dict) else None
        if score is not None:
            judgement.flows[real(name, asked.flows)] = score
    for name, _ in ids("mentions"):
        judgement.mentions[real(name, asked.mentions)] = True
    for name, _ in ids("branches"):
        judgement.branches[aliases.real(name)] = True
    for flow_id, definitions in asked.mentions.items():
        if (definitions and judgement.mentions.get(flow_id) is True
                and flow_id not in judgement.extract):
            judgement.extract[flow_id] = {}     # a strict v4 reply would have sent every value null
    for name, item in ids("extract"):
        flow_id = real(name, asked.mentions)
        param, raw = ((item.get("name"), item.get("value")) if isinstance(item, dict)
                      else (None, None))
        definitions = asked.mentions.get(flow_id) or {}
        if not isinstance(param, str) or not is_known(raw) or not is_finite_json(raw):
            continue                    # NaN and Infinity are dropped as in the v4 form (inferred)
        values = judgement.extract.setdefault(flow_id, {})
        definition = definitions[param] if isinstance(definitions.get(param), dict) else {}
        if definition.get("type") == "array":
            values.setdefault(param, []).append(lean_extract_value(definition.get("items"), raw))
        else:
            values[param] = lean_extract_value(definition, raw)
    items = reply.get("fields")
    for item in items if isinstance(items, list) else []:
        pair = lean_field_item(item, asked.field_names)
        slug = real(pair[0], asked.fields) if pair is not None else None
        if pair is not None and slug in asked.fields and is_known(pair[1]):
            judgement.fields[slug] = pair[1]


def lean_field_item(item: Any, names: Iterable[str]) -> tuple[str, Any] | None:
    """(id, value) of a lean ``fields`` item: a ``"<id>: <value>"`` string whose id is the longest
    of ``names`` it starts with (a value may hold a colon), or an ``{"id","value"}`` object; None
    otherwise."""
    if isinstance(item, dict):
        return (item["id"], item.get("value")) if isinstance(item.get("id"), str) else None
    if not isinstance(item, str):
        return None
    for name in sorted(names, key=len, reverse=True):
        rest = item[len(name):].lstrip() if item.startswith(name) else ""
        if rest.startswith(":"):
            return name, rest[1:].strip() or None
    return None


def understand(agent: Agent, ask: UnderstandAsk) -> Judgement:
    """The understand call (model-calls.md §3): one ``generate`` with ``schema_name="understand"``.

    Zero calls and an empty judgement when ``needs_understand_call`` is False.
    A provider exception propagates unchanged (§10.1); a malformed reply logs a
    warning and judges nothing, but still counts as a call (§3.5).
    """
    if not needs_understand_call(ask):
        return Judgement()
    protocol = agent.compiled.model_calls()
    call = protocol.understand_request(agent, ask)
    generation = agent.provider.generate(call.request)
    log_call(call.request, generation)
    return protocol.read_understanding(call, generation)


def _judgement_reply(generation: Generation) -> dict | None:
    structured = generation.structured
    if isinstance(structured, dict) and not SECTION_KEYS.isdisjoint(structured):
        return structured
    found = find_json_object(generation.message)
    if found is not None and not SECTION_KEYS.isdisjoint(found):
        return found
    return None


def read_score(value: Any) -> int | float | None:
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


def is_finite_json(value: Any) -> bool:
    """False when a float anywhere inside ``value`` is NaN or infinite (looked at without
    recursion)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return True


def read_judgement(generation: Generation, aliases: AliasTable,
                   lean: LeanReading | None = None) -> Judgement:
    """Read an understand reply section by section, mapping aliases back (model-calls.md §3.5).

    A section that is a list is the lean reply form (docs/guide/tokens.md), read by
    ``read_lean_sections``; a section that is an object is the v4 form, under either
    protocol, so a script written for v4 reads the same under "lean".
    """
    judgement = Judgement(llm_calls=1, usage=generation.usage)
    reply = _judgement_reply(generation)
    if reply is None:
        text = generation.message if isinstance(generation.message, str) else ""
        log.warning("understand: the reply is not a usable judgement; nothing is judged this turn: "
                    "%r",
                    text[:200])
        return judgement
    if any(isinstance(value, list) for value in reply.values()):    # only the lean form has lists
        read_lean_sections(reply, aliases, lean or LeanReading(), judgement)
    for key, value in _section(reply, "flows").items():
        score = read_score(value)
        if score is not None:
            judgement.flows[aliases.real(key)] = score
    for target, key in ((judgement.mentions, "mentions"), (judgement.branches, "branches")):
        for name, value in _section(reply, key).items():
            answer = read_boolean(value)
            if answer is not None:
                target[aliases.real(name)] = answer
    for key, value in _section(reply, "extract").items():
        if isinstance(value, dict):
            # NaN and Infinity (Python's json reads both, JSON has neither) would make the session
            # unsavable: such an entry is dropped like a blank one (inferred).
            judgement.extract[aliases.real(key)] = {name: v for name, v in value.items()
                                                    if is_known(v) and is_finite_json(v)}
    for key, value in _section(reply, "fields").items():
        if is_known(value):
            judgement.fields[aliases.real(key)] = value
    return judgement


def _section(reply: dict, key: str) -> dict:
    """A v4 reply section: an object, or nothing."""
    value = reply.get(key)
    return value if isinstance(value, dict) else {}
DEFAULT_ANSWER_GUIDELINE = "Answer the customer's message in the flow of the conversation."


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
    """``- [<kind>] [Always] <prompt>[ (apply only when: a OR b)]``, None when the prompt renders
    empty (§5.2)."""
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
    if not instructions:
        return None
    lines = [line for line in (instruction_line(i, scope) for i in instructions
                               if isinstance(i, dict)) if line]
    return "## Instructions\n" + "\n".join(lines) if lines else None


def input_section(ask: SpeakAsk) -> str | None:
    """The Input section of model-calls.md §5.3 (message, blank message, retry, speak first)."""
    if ask.input_kind == "message":
        text = (ask.text or "").strip()
        return f'## Customer\'s latest message\n"{text}"' if text else None
    last = ask.history[-1] if ask.history else None
    if isinstance(last, dict) and last.get("role") == "user":
        return ("## Situation\nThe customer's last message, in the conversation above, has no "
                "answer yet. Answer it now.")
    return ("## Situation\nThere is no new message from the customer: you speak first. Open "
            "naturally; do not answer a question nobody asked.")


@dataclass(slots=True)
class ToolCall:
    """One tool call of a speak round, as read from the reply (model-calls.md §5.5, §6.7)."""
    name: str
    arguments: dict
    thought_signature: Any = None       # Gemini's, carried back on the assistant item


@dataclass(slots=True)
class ToolOutput:
    """One call's result: what the model reads, and the data patch or None (model-calls.md §6.3,
    §6.6)."""
    text: str
    data: dict | None = None


@dataclass(slots=True)
class Round:
    """One speak round's reply as read by model-calls.md §5.5."""
    message: str
    fields: dict
    calls: list[ToolCall]
    reasoning: str | None = None
    reasoning_details: Any = None


def read_round(generation: Generation, wire: list[tuple[str, str]]) -> Round:
    """Message, field values and tool calls of one speak round (model-calls.md §5.5).

    Text that looks like an envelope but does not parse reads as "" so it can
    never reach the customer.
    """
    raw = generation.message if isinstance(generation.message, str) else ""
    structured = generation.structured
    parsed = structured if isinstance(structured, dict) else find_json_object(raw)
    if parsed is not None:
        message = parsed["message"] if isinstance(parsed.get("message"), str) else ""
        fields = {slug: parsed[name] for slug, name in wire if is_known(parsed.get(name))}
        if isinstance(parsed.get("fields"), list):          # the lean form (docs/guide/tokens.md)
            real = {name: slug for slug, name in wire} | {slug: slug for slug, _ in wire}
            for item in parsed["fields"]:
                pair = lean_field_item(item, real)
                if pair is not None and pair[0] in real and is_known(pair[1]):
                    fields[real[pair[0]]] = pair[1]
    else:
        message = "" if ENVELOPE_SHAPED.match(raw) else raw
        fields = {}
    calls = []
    for call in generation.tool_calls or []:
        get = call.get if isinstance(call, dict) else (lambda key, c=call: getattr(c, key, None))
        name = get("name")
        if isinstance(name, str) and name:
            calls.append(ToolCall(name, tool_arguments(get("arguments")), get("thought_signature")))
    reasoning = generation.reasoning
    reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    details = generation.reasoning_details
    details = details if isinstance(details, list) else None
    return Round(message, fields, calls, reasoning, details)


_DEFERRAL_CODES = {
    "timeout": ("provider-unavailable", True), "network": ("provider-unavailable", True),
    "overload": ("provider-unavailable", True), "rate": ("provider-unavailable", True),
    "unknown": ("provider-unavailable", True), "aborted": ("provider-unavailable", False),
    "quota": ("provider-quota", False), "auth": ("provider-auth", False),
    "entitlement": ("provider-auth", False), "model": ("provider-invalid", False),
    "invalid": ("provider-invalid", False), "content": ("provider-invalid", False),
    "context": ("provider-context", False),
    # A reply cut at the output cap: like any unusable reply (model-calls.md §5.5), a later wake
    # may do better.
    "length": ("provider-length", True),
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


def provided_generation(generation: Any) -> Generation:
    """What a host-written provider's ``generate`` returned, checked to be a Generation
    (providers.md §1.4).

    The engine reads the reply outside the provider's ``try``, so a provider
    that returns something else fails here, as a provider failure.
"""
    if not isinstance(generation, Generation):
        raise TypeError(f"provider.generate returned {type(generation).__name__}, not a "
                        "Generation. Return falai.Generation(message=...).")
    if generation.usage is not None and not isinstance(generation.usage, TokenUsage):
        raise TypeError(f"provider.generate returned usage {type(generation.usage).__name__}, not "
                        "a TokenUsage. Return falai.TokenUsage(...) or None.")
    if not isinstance(generation.tool_calls, (list, tuple)) and generation.tool_calls is not None:
        raise TypeError("provider.generate returned tool_calls "
                        f"{type(generation.tool_calls).__name__}, not a list. Return a list of "
                        "ToolCallRequest.")
    return generation


def stream_round(provider: Any, request: GenerateRequest) -> Generator[str, None, Generation]:
    """Stream one round: yield decoded deltas, return the round as a Generation (model-calls.md §8).

    The returned message is the raw accumulated text, read by ``read_round``
    exactly as ``generate``'s would be, so a streamed turn returns the same
    result as ``turn()`` for the same provider output, broken envelopes included.
    """
    decoder = StreamDecoder()
    raw: list[str] = []                         # the raw text, in pieces: joined once, at the end
    structured, tool_calls, usage = None, [], None
    reasoning, details, metadata = None, None, {}
    for chunk in provider.generate_stream(request):
        # A chunk with a delta is read by its delta alone: its ``accumulated`` is all deltas so far
        # (providers.md §1.6 rule 2), and reading it for every chunk would copy the reply each time.
        if isinstance(chunk.delta, str) and chunk.delta and not chunk.done:
            raw.append(chunk.delta)
            delta = decoder.feed(chunk.delta)
        elif isinstance(chunk.accumulated, str):
            raw[:] = [chunk.accumulated]
            _, delta = decoder.push(chunk.accumulated)  # no delta (the final chunk, a host's)
        else:
            raw.append(chunk.delta or "")
            fed = isinstance(chunk.delta, str) and chunk.delta
            delta = decoder.feed(chunk.delta) if fed else ""
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
    return Generation(message="".join(raw), structured=structured, tool_calls=tool_calls,
                      usage=usage,
                      reasoning=reasoning, reasoning_details=details, metadata=metadata)


def _overlay(data: dict, patch: dict) -> dict:
    """``session.data`` overlaid with the call's patches; a key patched to None is left out
    (§6.6)."""
    view = dict(data)
    merge_patch(view, patch)
    return view


def speak(agent: Agent, ask: SpeakAsk, streaming: bool) -> Generator[str, None, Spoken | Deferred]:
    """The speak call and its tool rounds (model-calls.md §5-§6, the Tool seed page).

    A generator: ``result = yield from speak(agent, ask, streaming)``. While
    streaming it yields text deltas (``provider.generate_stream`` through a
    ``StreamDecoder``); otherwise it uses ``provider.generate`` and yields
    nothing. It returns ``Spoken`` or ``Deferred`` and never raises for a
    provider failure or a tool.
    """
    protocol = agent.compiled.model_calls()
    plan = protocol.speak_request(agent, ask)
    declarations = [{"name": t.id, "description": t.description, "parameters": t.parameters}
                    for t in ask.tools]
    tools_by_id: dict[str, Tool] = {}
    for tool in ask.tools:
        tools_by_id.setdefault(tool.id, tool)
    loops = max(0, agent.max_tool_loops)           # 0 or less offers no tools (model-calls.md §6.2)
    history = list(ask.history)
    fields: dict = {}
    data: dict = {}
    ran: dict[str, ToolOutput] = {}     # this reply's destructive calls, by tool and arguments
    usage: TokenUsage | None = None
    calls = 0
    round_no = 0
    while True:
        offer = bool(ask.tools) and round_no < loops
        request = plan.round_request(ask, history, declarations if offer else None, round_no)
        calls += 1
        try:                       # only the provider's part: an engine bug below must surface
            if streaming:               # the decoder runs between the provider's chunks, so inside
                generation = provided_generation((yield from stream_round(agent.provider, request)))
            else:
                generation = provided_generation(agent.provider.generate(request))
        except ScriptError:
            raise                  # a wrong test script, not a provider failure
        except Exception as error:
            code, retryable, reset_at_ms = classify_deferral(error)
            log.warning("speak: call %d failed (%s): %s", calls, code, error_text(error))
            log_swallowed(f"speak: call {calls}")
            return Deferred(code=code, retryable=retryable, reset_at_ms=reset_at_ms,
                            llm_calls=calls, usage=usage, data=data)
        log_call(request, generation)
        reply = protocol.read_speak_reply(plan, generation)
        usage = add_usage(usage, generation.usage)
        fields.update(reply.fields)
        message = reply.message
        if not offer or not reply.calls:
            break
        last = history[-1] if history else None
        if round_no == 0 and not (isinstance(last, dict) and last.get("role") == "user"):
            # model-calls.md §6.7 rule 1: the message text, else the speak prompt. A blank message
            # text counts as "else" (inferred): providers drop a blank user item, and no
            # conversation may open with the model's own function call (providers.md §2.2).
            text = (ask.text or "").strip() if ask.input_kind == "message" else ""
            history.append({"role": "user", "content": ask.text if text else plan.prompt})
        # the tools see what the model saw, the round-0 user item included (§6.8)
        ctx = ToolCtx(context=ask.scope.context, data=_overlay(ask.scope.data, data),
                      history=list(history), run=ask.run, now=ask.now)
        results = run_tool_calls(agent, tools_by_id, reply.calls, ctx,
                                 OncePerReply(ran, ask.repeatable))
        history.append(_assistant_item(round_no, reply))
        for i, (call, output) in enumerate(zip(reply.calls, results)):
            history.append({"role": "tool", "tool_call_id": f"call-{round_no}-{i}",
                            "name": call.name, "content": output.text})
        for output in results:
            if output.data:
                data.update(output.data)
        round_no += 1
    text = message.strip()
    if not text:
        log.warning("speak: the reply is blank after %d call(s); the speaker defers", calls)
        return Deferred(code="provider-unavailable", retryable=True, llm_calls=calls, usage=usage,
                        data=data)
    return Spoken(message=text, fields=fields, data=data, llm_calls=calls, usage=usage)


def _assistant_item(round_no: int, reply: Round) -> dict:
    """The assistant history item of a round that called tools (model-calls.md §6.7)."""
    tool_calls = []
    for i, asked in enumerate(reply.calls):
        call = {"id": f"call-{round_no}-{i}", "name": asked.name, "arguments": asked.arguments}
        if isinstance(asked.thought_signature, str) and asked.thought_signature:
            call["thoughtSignature"] = asked.thought_signature
        tool_calls.append(call)
    item = {"role": "assistant", "content": reply.message if reply.message.strip() else None,
            "tool_calls": tool_calls}
    if reply.reasoning:
        item["reasoning"] = reply.reasoning
    if reply.reasoning_details is not None:
        item["reasoningDetails"] = reply.reasoning_details
    return item


# Tool calls (model-calls.md §6.3-§6.6) --------------------------------------------------------

def tool_payload(payload: dict) -> str:
    """An error payload the model reads: compact JSON, non-ASCII kept, never truncated (§6.3)."""
    try:
        return compact_json(payload)
    except UNSERIALIZABLE:
        return compact_json({"error": str(payload.get("error"))})


def tool_value_text(value: Any, limit: Any = None) -> str:
    """What the model reads from a tool's ``value``, cut at ``limit`` characters (model-calls.md
    §6.5)."""
    if value is None:
        text = '{"ok":true}'
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = compact_json(value)
        except UNSERIALIZABLE:
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


def run_tool(tool: Tool | None, name: str, arguments: dict, ctx: ToolCtx) -> ToolOutput:
    """One call through its gates (model-calls.md §6.3): what the model reads, and the data patch or
    None.

    Never raises: a hook or handler that raises becomes ``{"error": ...}``.
"""
    if tool is None:
        return ToolOutput(tool_payload({"error": f'Tool "{name}" is not available.'}))
    args = _copy_args(arguments)
    try:
        if tool.validate_input is not None:
            valid, error, corrected = _verdict(tool.validate_input(args, ctx), "valid", "error")
            if not valid:
                payload = {"error": "Validation failed: "
                                    f"{'invalid input' if error is None else error}"}
                if corrected is not None:
                    payload["correctedInput"] = corrected
                return ToolOutput(tool_payload(payload))
        if tool.check_permissions is not None:
            allowed, reason, _ = _verdict(tool.check_permissions(args, ctx), "allowed", "reason")
            if not allowed:
                why = "not allowed" if reason is None else reason
                return ToolOutput(tool_payload({"error": f"Permission denied: {why}"}))
        result = tool.handler(args, ctx)
    except Exception as error:
        log.warning('tool "%s" raised: %s', tool.id, error_text(error))
        log_swallowed(f'tool "{tool.id}"')
        return ToolOutput(tool_payload({"error": error_text(error)}))
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
    if data is not None and nests_deeper(data, MAX_NESTING + 1):
        log.warning('tool "%s" returned data nested deeper than %d levels; ignored', tool.id,
                    MAX_NESTING)
        data = None
    problem = unstorable(data) if data is not None else None
    if problem is not None:         # the session must stay one a store saves (limits.md)
        log.warning('tool "%s" returned data that %s, which no store keeps; ignored', tool.id,
                    problem)
        data = None
    return ToolOutput(tool_value_text(value, tool.max_result_size_chars), data)


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
        log.warning('tool "%s": a concurrency hook raised (%s); the call runs alone', tool.id,
                    error_text(error))
        log_swallowed(f'tool "{tool.id}" concurrency hook')
    return False


@dataclass(slots=True)
class OncePerReply:
    """The destructive calls one reply already ran, by tool and arguments, and the tools whose
    destructive calls the step lets repeat (``repeatTools``; docs/guide/tools.md)."""
    ran: dict
    repeatable: frozenset = frozenset()

    def key(self, tool: Tool | None, arguments: dict) -> str | None:
        """The call's key when it is destructive and may not repeat; None otherwise."""
        if tool is None or tool.id in self.repeatable or tool.is_destructive is None:
            return None
        try:
            destructive = bool(tool.is_destructive(_copy_args(arguments)))
        except Exception:
            destructive = True          # a hook that raises: the call is treated as destructive
        if not destructive:
            return None
        try:
            return f"{tool.id}\n{json.dumps(arguments, sort_keys=True, ensure_ascii=False)}"
        except (TypeError, ValueError):
            return f"{tool.id}\n{arguments!r}"

    def run(self, tool: Tool | None, call: ToolCall, ctx: ToolCtx) -> ToolOutput:
        """Run the call, unless the same destructive call already ran in this reply: then the
        model reads the first result again and nothing runs (model-calls.md §6.3a)."""
        key = self.key(tool, call.arguments)
        if key is not None and key in self.ran:
            log.warning('tool "%s": the same destructive call again in one reply; not run again',
                        call.name)
            return ToolOutput(tool_payload({"note": REPEATED_CALL_NOTE,
                                            "result": self.ran[key].text}))
        output = run_tool(tool, call.name, call.arguments, ctx)
        if key is not None:
            self.ran[key] = output
        return output


REPEATED_CALL_NOTE = ("Not run again: this exact call already ran earlier in this reply; "
                      "its result follows.")


def run_tool_calls(agent: Agent, tools_by_id: dict, calls: list[ToolCall],
                   ctx: ToolCtx, once: OncePerReply | None = None) -> list[ToolOutput]:
    """Run a round's calls in batches, results in call order (model-calls.md §6.4).

    A run of consecutive safe calls runs together on the agent's tool pool (at
    most TOOL_POOL_WORKERS at once); any other call runs alone. A batch starts
    when the previous ended. A destructive call is never safe, so it runs alone, through
    ``once`` (§6.3a).
    """
    once = once if once is not None else OncePerReply({})
    tools = [tools_by_id.get(call.name) for call in calls]
    safe = [is_safe_call(tool, _copy_args(call.arguments)) for tool, call in zip(tools, calls)]
    results: list = [None] * len(calls)
    i = 0
    while i < len(calls):
        end = i + 1
        if safe[i]:
            while end < len(calls) and safe[end]:
                end += 1
        if end - i == 1:
            results[i] = once.run(tools[i], calls[i], ctx)
        else:
            pool = agent.compiled.tool_pool()
            futures = [pool.submit(run_tool, tools[k], calls[k].name, calls[k].arguments, ctx)
                       for k in range(i, end)]
            for k, future in zip(range(i, end), futures):
                results[k] = future.result()
        i = end
    return results


# Compaction (model-calls.md §9) ---------------------------------------------------------------

SUMMARY_MARKER = "[Conversation Summary]\n"
SUMMARY_REQUEST = ("Summarize the conversation below concisely. Keep the key facts, the decisions "
                   "made and the context needed to continue it; leave out small talk.")


def _content_text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else item
    if isinstance(content, str):
        return content
    return "" if content is None else json_text(content)


def _item_chars(item: Any) -> int:
    """What one history item adds to the estimate: content and name characters, plus 4."""
    name = item.get("name") if isinstance(item, dict) else None
    return len(_content_text(item)) + (len(name) if isinstance(name, str) else 0) + 4


def estimate_tokens(history: list) -> int:
    """Characters of content and name, plus 4 per item, over 4, rounded up (model-calls.md §9.3)."""
    return -(-sum(map(_item_chars, history)) // 4)


def _is_tool_item(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "tool"


class Compacted(NamedTuple):
    """What compaction returns (model-calls.md §9): a NamedTuple, so ``history, calls, usage = ...``
    reads it."""
    history: list
    llm_calls: int              # 1 when a summary call was made (even a failed one), else 0
    usage: TokenUsage | None


def compact_history(agent: Agent, history: list) -> Compacted:
    """Trim the turn's history to the compaction budget (model-calls.md §9).

    Returns ``Compacted(history, llm_calls, usage)``; ``(history, 0, None)`` with no
    config, ``enabled: False`` or an empty history. Layers, cheapest first:
    none, tool_result_budget, micro_compact, auto_compact (one summary call;
    when it fails, the oldest messages are dropped instead). Never raises.
    """
    config = agent.compaction
    if not isinstance(config, dict) or config.get("enabled") is False or not history:
        return Compacted(history, 0, None)
    try:                    # construction checked it; this catches one swapped in since (inferred)
        check_compaction(config)
    except ValueError as error:
        log.warning("compaction: skipped (%s)", error_text(error))
        return Compacted(history, 0, None)
    return _compact(agent, config, list(history))


def _compact(agent: Agent, config: dict, history: list) -> Compacted:
    threshold = config["maxTokens"] * config.get("compactionThreshold", 0.8)
    keep = config.get("preserveRecentCount", 4)
    limit = config.get("maxToolResultChars", 5000)
    if estimate_tokens(history) < threshold:
        return Compacted(history, 0, None)
    edge = len(history) - min(keep, len(history))
    budgeted = list(history)
    for i in range(edge):
        text = _content_text(budgeted[i])
        if _is_tool_item(budgeted[i]) and len(text) > limit:
            budgeted[i] = {**budgeted[i],
                           "content": f"{text[:limit]}\n\n[Truncated: {len(text)} chars total, "
                                      f"showing first {limit}]"}
    if estimate_tokens(budgeted) < threshold:
        return Compacted(budgeted, 0, None)
    micro = list(budgeted)
    for i in range(edge):
        if _is_tool_item(micro[i]):
            micro[i] = {**micro[i], "content": re.sub(r"\s+", " ", _content_text(micro[i])).strip()}
    if estimate_tokens(micro) < threshold:
        return Compacted(micro, 0, None)
    while 0 < edge < len(micro) and _is_tool_item(micro[edge]):
        edge -= 1
    if edge == 0:  # nothing older than the window to summarize: a call would buy nothing (inferred)
        return Compacted(micro, 0, None)
    older, window = micro[:edge], micro[edge:]
    transcript = "\n".join(f"[{item.get('role') if isinstance(item, dict) else ''}]: "
                           f"{_content_text(item)}"
                           for item in older)
    request = GenerateRequest(system=None, prompt=f"{SUMMARY_REQUEST}\n\n{transcript}", history=[],
                              context={}, schema=None, schema_name="compaction", tools=None,
                              max_output_tokens=1024)
    try:
        generation = provided_generation(agent.provider.generate(request))
    except ScriptError:
        raise
    except Exception as error:
        log.warning("compaction: the summary call failed (%s); dropping the oldest messages "
                    "instead",
                    error_text(error))
        log_swallowed("compaction: the summary call")
        kept = list(window)
        total, added = sum(map(_item_chars, kept)), []   # a running sum: each item is measured once
        for item in reversed(older):
            total += _item_chars(item)
            if -(-total // 4) >= threshold:
                break
            added.append(item)
        return Compacted(added[::-1] + kept, 1, None)
    log_call(request, generation)
    summary = generation.message if isinstance(generation.message, str) else ""
    summary_item = {"role": "system", "content": SUMMARY_MARKER + summary}
    return Compacted([summary_item] + window, 1, generation.usage)


# The envelope stream decoder (model-calls.md §8) ----------------------------------------------

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_PLAIN_RUN = re.compile(r'[^"\\]+')


class StreamDecoder:
    """Turn a streamed speak envelope into the customer's text as it grows (model-calls.md §8).

    ``feed(delta) -> str``: feed the provider's next ``delta``; get back the
    customer-facing text that is new ("" when nothing is). A feed costs the
    length of its delta: the decoder scans only the new characters, carries
    over only an incomplete escape and the raw pieces of a key being read, and
    copies no whole text (it keeps the fed deltas as a list, uncopied, for a
    later ``push`` to compare). One decoder per round; ``text`` is the
    customer text so far, joined when read.

    ``push(accumulated) -> (text, delta)``: the same decoding, fed the whole
    text received so far (see ``push``).

    - A JSON object: the decoded value of its top-level ``"message"`` string.
      Keys before it are skipped with their values; a nested ``"message"`` is
      never taken; an incomplete escape (``\\``, a partial ``\\uXXXX``, a high
      surrogate waiting for its pair) is held back. A ``null`` or non-string
      message gives "".
    - A leading fence of three or more backticks is skipped to the end of its
      line; while only backticks have arrived nothing is emitted; one or two
      backticks are prose. Behind a fence, text that is not an object gives "".
    - Anything else is prose and passes through verbatim.
    """

    def __init__(self) -> None:
        self._restart()

    def _restart(self) -> None:
        self._source: list[str] = []    # what was fed since the start, for push's extension check
        self._text: list[str] = []      # the customer text so far, in pieces
        self._mode = "start"            # start, ticks, prose, fence, fenced, json, message, done
        self._lead: list[str] = []      # leading whitespace and backticks: prose keeps them
        self._ticks = 0                 # backticks in the leading run
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._key: list[str] | None = None    # raw pieces of a top-level key being read
        self._last_key: str | None = None
        self._expect = "key"            # at depth 1: key, colon, value, inside (a value skipped)
        self._tail = ""                 # the message string's end held back: an incomplete escape

    @staticmethod
    def _joined(pieces: list[str]) -> str:
        """The pieces as one string, kept as the only piece so the next join copies only what is
        new."""
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0] if pieces else ""

    @property
    def text(self) -> str:
        """The customer-facing text decoded so far."""
        return self._joined(self._text)

    def feed(self, delta: str) -> str:
        """Feed the text received since the last call; return the new customer-facing text."""
        if not isinstance(delta, str) or not delta:
            return ""
        self._source.append(delta)
        src = self._tail + delta if self._tail else delta
        self._tail = ""
        out: list[str] = []
        self._scan(src, out)
        new = "".join(out)
        if new:
            self._text.append(new)
        return new

    def push(self, accumulated: str) -> tuple[str, str]:
        """Feed everything received so far; return (text so far, new part since the last call).

        When ``accumulated`` does not extend what was fed before, the decoder
        starts over; when the new text does not extend the previous text, the
        whole new text is the delta. A push compares and returns whole texts,
        so it costs the length of ``accumulated``: a stream pushed chunk by
        chunk is quadratic, where ``feed`` is linear (the engine feeds deltas).
        """
        accumulated = accumulated if isinstance(accumulated, str) else ""
        source = self._joined(self._source)
        if accumulated.startswith(source):
            delta = self.feed(accumulated[len(source):])
            self._source[:] = [accumulated] if accumulated else []  # the caller's string itself
            return self.text, delta
        previous = self.text
        self._restart()
        self.feed(accumulated)
        text = self.text
        return text, (text[len(previous):] if text.startswith(previous) else text)

    def _scan(self, src: str, out: list[str]) -> None:
        """Read ``src`` (the new characters, after any held-back tail), appending new text to
        ``out``."""
        i, n = 0, len(src)
        while i < n:
            if self._mode in ("start", "fenced"):
                j = i
                while j < n and src[j].isspace():
                    j += 1
                if self._mode == "start" and j > i:
                    self._lead.append(src[i:j])
                i = j
                if i >= n:
                    return
                if src[i] == "{":
                    self._mode, self._lead = "json", []
                elif self._mode == "fenced":
                    self._mode = "done"
                elif src[i] == "`":
                    self._mode = "ticks"
                else:
                    self._prose(src, i, out)
                    return
            elif self._mode == "ticks":
                j = i
                while j < n and src[j] == "`":
                    j += 1
                self._ticks += j - i                # counted, not indexed: the run may span feeds
                self._lead.append(src[i:j])
                i = j
                if i >= n:
                    return                          # only backticks so far: wait
                if self._ticks < 3:
                    self._prose(src, i, out)
                    return
                self._mode, self._lead = "fence", []
            elif self._mode == "fence":
                newline = src.find("\n", i)
                if newline < 0:
                    return
                i, self._mode = newline + 1, "fenced"
            elif self._mode == "json":
                i = self._scan_json(src, i)
            elif self._mode == "message":
                self._scan_message(src, i, out)
                return
            elif self._mode == "prose":
                out.append(src[i:])
                return
            else:                                   # done reads nothing more
                return

    def _prose(self, src: str, i: int, out: list[str]) -> None:
        """Not an envelope: everything read so far and everything after passes through verbatim."""
        out.extend(self._lead)
        out.append(src[i:])
        self._mode, self._lead = "prose", []

    def _scan_json(self, src: str, i: int) -> int:
        """Walk the object's structure until the top-level "message" string starts; return where it
        stopped."""
        n = len(src)
        key_from = 0                        # where this feed's part of the key being read starts
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
                        raw_key = "".join(self._key) + src[key_from:i]
                        self._last_key = decode_json_string(raw_key)
                        self._key, self._expect = None, "colon"
                i += 1
                continue
            if c.isspace():
                i += 1
                continue
            if self._depth == 1 and self._expect == "value":
                self._expect = "inside"
                if self._last_key == "message":
                    if c == '"':
                        self._mode = "message"
                        return i + 1
                    self._mode = "done"
                    return i
            if c == '"':
                self._in_string = True
                if self._depth == 1 and self._expect == "key":
                    self._key, key_from = [], i + 1
            elif c in "{[":
                self._depth += 1
                if self._depth == 1:
                    self._expect = "key"
            elif c in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self._mode = "done"
                    return i + 1
            elif c == ":" and self._depth == 1:
                self._expect = "value"
            elif c == "," and self._depth == 1:
                self._expect = "key"
            i += 1
        if self._key is not None:                   # the key goes on in the next feed
            self._key.append(src[key_from:])
        return n

    def _scan_message(self, src: str, i: int, out: list[str]) -> None:
        """Decode the message string's characters into ``out``, holding back an incomplete
        escape."""
        n = len(src)
        while i < n:
            c = src[i]
            if c == '"':
                self._mode = "done"
                return
            if c != "\\":
                run = _PLAIN_RUN.match(src, i)
                assert run is not None      # src[i] is neither '"' nor a backslash
                out.append(run.group(0))
                i = run.end()
                continue
            if i + 1 >= n:
                break
            e = src[i + 1]
            if e != "u":
                out.append(_ESCAPES.get(e, e))
                i += 2
                continue
            digits = src[i + 2:i + 6]
            if len(digits) < 4 and _HEX4.match(digits.ljust(4, "0")):
                break                                # a partial \uXXXX: wait for the rest
            if not _HEX4.fullmatch(digits):
                out.append("u")                      # not an escape after all: keep the text
                i += 2
                continue
            code = int(digits, 16)
            if 0xD800 <= code < 0xDC00:
                rest = src[i + 6:i + 12]
                if len(rest) < 6 and (rest == "" or _PARTIAL_ESCAPE.fullmatch(rest)):
                    break                            # a high surrogate may be followed by its pair
                if _LOW_SURROGATE.fullmatch(rest):
                    low = int(rest[2:], 16)
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
            out.append(chr(code))
            i += 6
        self._tail = src[i:]                # under 12 characters, read again with the next feed

