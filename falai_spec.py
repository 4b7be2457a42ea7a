"""falai_spec: flows and sessions as JSON (persistence.md Parts 1 and 4, model-calls.md §11.2).

   from_spec, to_spec ......... a flow as FlowSpec JSON and back (persistence.md §1.7-§1.9)
   flow_spec_schema ........... the JSON Schema of a FlowSpec (persistence.md §1.12)
   migrate_session ............ a 3.x state read once into a v4 Session (persistence.md Part 4)
   load_registry,
   check_registry ............. the CLI's registry file, read by a program (docs/guide/cli.md)
   history_to_events,
   events_to_history .......... history items and a host's event log (model-calls.md §11.2)

Nothing here runs in a turn. ``import falai`` is all a user needs: each of these
names, ``falai.from_spec`` and the rest, loads this module on first use. It
imports falai, falai_checks and the standard library only.

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

from falai_base import (
    ABSENT, EventDef, FlowConfigurationError, InvalidSessionError, Run, Session, as_definition,
    claim_prefix, closed_object, describe_blob_value, flow_error, from_ms, iso, parse_iso,
    strip_nones, system_clock,
)
from falai_checks import INSTRUCTION_KINDS, RESERVED_CONDITIONS, action_parameters, check_flow_shape

__all__ = ["from_spec", "to_spec", "flow_spec_schema", "migrate_session", "load_registry",
           "check_registry", "history_to_events", "events_to_history"]


# FlowSpec JSON: from_spec and to_spec (persistence.md §1.7-§1.9) ------------------------------
#
# A FlowSpec is a flow as plain JSON: every step carries its `kind`, every
# predicate is a condition object, and None means "not set" (persistence.md
# Part 1). The strip lives in falai; the shape check and the messages with
# validate_flow, in falai_checks.

def from_spec(spec: Any) -> dict:
    """A stored FlowSpec as a flow dict: Nones and kinds stripped, shape checked.

    persistence.md §1.7. Names are not checked here; the agent checks them when
    it is built.

    ``from_spec({"id": "g", "name": "G",
    "steps": [{"id": "a", "kind": "say", "say": "Oi!", "then": None}]})``
    returns ``{"id": "g", "name": "G", "steps": [{"id": "a", "say": "Oi!"}]}``.
    """
    flow = strip_nones(spec)
    check_flow_shape(flow)
    flow["steps"] = [{key: value for key, value in step.items() if key != "kind"}
                     for step in flow["steps"]]
    return flow


SPEC_FLOW_KEYS = ("id", "name", "description", "on", "anchor", "while", "collect", "clearOnStart",
                  "steps", "onEnd", "instructions", "tools", "repeatTools")
SPEC_STEP_BASE_KEYS = ("id", "label", "then", "ui")
SPEC_KIND_KEYS = {
    "say": ("say", "media", "once"),
    "do": ("do", "with", "onFail"),
    "wait": ("wait", "businessHours", "else", "branches"),
    "waitEvent": ("wait", "else"),
    "if": ("if", "else"),
    "collect": ("collect", "prompt", "question", "ask", "maxAsks", "branches", "tools",
                "repeatTools", "instructions"),
    "prompt": ("prompt", "ask", "maxAsks", "branches", "tools", "repeatTools", "instructions"),
}


def _storable(predicate: Any, label: str) -> None:
    """A predicate in a spec must be JSON (persistence.md §1.8), a ``not`` inside it too."""
    if callable(predicate):
        raise FlowConfigurationError(
            f"{label}: is a function, which cannot be stored as JSON. Write it as a condition "
            "({ equals }, { known }, { silenced } or a named condition) to store this flow.")
    if isinstance(predicate, dict) and predicate.get("not") is not None:
        _storable(predicate["not"], f"{label}.not")
    if isinstance(predicate, dict) and isinstance(predicate.get("any"), (list, tuple)):
        for i, option in enumerate(predicate["any"]):
            _storable(option, f"{label}.any[{i}]")


def _instruction_ifs_storable(instructions: Any, label: str) -> None:
    for i, instruction in enumerate(instructions):
        if isinstance(instruction, dict):
            _storable(instruction.get("if"), f"{label}instructions[{i}].if")


def spec_kind(step: dict) -> str | None:
    """The kind to_spec writes for a step (persistence.md §1.8), None when it has no body."""
    present = [key for key in ("say", "do", "wait", "if", "collect", "prompt")
               if step.get(key) is not None]
    if not present:
        return None
    if present[0] == "wait":
        return "wait" if isinstance(step["wait"], str) else "waitEvent"
    return present[0]


def _step_to_spec(step: dict, flow_where: str) -> dict:
    where = f'{flow_where}, step "{step.get("id")}"'
    kind = spec_kind(step)
    if kind is None:
        flow_error(where, "has neither prompt nor collect",
                   "A talk step needs a guideline, fields to collect, or both.")
    if kind == "prompt" and step.get("question") is not None:
        flow_error(where, "has a question but collects nothing",
                   "A fixed question asks for fields: add collect, or send the text with a say "
                   "step.")
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
        spec[key] = ([_step_to_spec(step, where) for step in value] if key == "steps"
                     else strip_nones(value))
    return spec


# flow_spec_schema (persistence.md §1.12) ------------------------------------------------------
#
# The building blocks keep the names the spec gives them inside flow_spec_schema.

def schema_closed(*properties: tuple[str, dict]) -> dict:
    """closed(p1: s1, ...): every property required, nothing else allowed."""
    return closed_object(dict(properties))


def schema_or_null(schema: dict) -> dict:
    """or_null(s): a type list (null appended to an enum) when s has one type, else an anyOf
    branch."""
    if isinstance(schema.get("type"), str):
        nullable = {**schema, "type": [schema["type"], "null"]}
        if "enum" in schema:
            nullable["enum"] = [*schema["enum"], None]
        return nullable
    return {"anyOf": [schema, {"type": "null"}]}


def _schema_with(schema: dict, description: str | None) -> dict:
    return schema if description is None else {**schema, "description": description}


def schema_union(*branches: dict, nullable: bool = False, description: str | None = None) -> dict:
    null = [{"type": "null"}] if nullable else []
    return _schema_with({"anyOf": [*branches, *null]}, description)


def schema_enum(values: list, description: str | None = None) -> dict:
    return _schema_with({"type": "string", "enum": list(values)}, description)


def schema_list(items: dict, description: str | None = None) -> dict:
    return _schema_with({"type": "array", "items": items}, description)


def _field_property(definition: dict) -> dict:
    """A field inside `equals`: type, description and enum, nullable; nothing else.

    persistence.md §1.12."""
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
        items = scalar(as_definition(definition.get("items")))
        description = definition.get("description") or None
        prop = _schema_with({"type": "array", "items": items}, description)
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
    closed, or_null, union = schema_closed, schema_or_null, schema_union
    enum_of, list_of = schema_enum, schema_list
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
    conditions = [name for name in registries.get("conditions") or {}
                  if name not in RESERVED_CONDITIONS]
    slugs = list_of(enum_of(list(fields))) if fields else None   # None exactly when there are none

    condition_props: list = []
    if slugs is not None:
        equals = {"type": "object",
                  "properties": {slug: _field_property(as_definition(d))
                                 for slug, d in fields.items()},
                  "required": list(fields), "additionalProperties": False,
                  "description": "Fields that must hold these values"}
        condition_props += [("equals", or_null(equals)),
                            ("known", or_null(described(slugs, "Fields that must be known")))]
    gate = described(BOOLEAN, "Whether the host gate is closed")
    condition_props.append(("silenced", or_null(gate)))
    for name in conditions:
        condition_props.append((name, union(STRING, NUMBER, BOOLEAN, list_of(STRING), nullable=True,
                                            description=f'Argument for condition "{name}"')))
    condition = closed(*condition_props)

    step_target = [("step", STRING)]
    if slugs is not None:
        step_target.append(("clear", or_null(described(slugs, "Fields to forget before jumping"))))
    next_variants = [text('A step id, or "end"'), closed(*step_target),
                     closed(("flow", text("Another flow to start; this run ends")))]
    next_, next_or_null = union(*next_variants), union(*next_variants, nullable=True)

    repeat = union(enum_of(["once", "always"]), closed(("cooldown", DURATION)), nullable=True,
                   description="How often a run may start: once per session or anchor, always, "
                               "or after a cooldown")
    gates = [("if", or_null(condition)), ("repeat", repeat)]
    triggers = [
        closed(("message", list_of(STRING, "What the lead asks for, one phrase each; "
                                           "[] = catch-all")), *gates),
        closed(("mention", list_of(STRING, "What the lead mentions, one phrase each")), *gates),
        closed(("silence", described(DURATION, "How long the lead has been quiet")),
               ("businessHours", or_null(BOOLEAN)), *gates)]
    if events:
        triggers.append(closed(("event", enum_of(events)), ("after", or_null(DURATION)),
                               ("businessHours", or_null(BOOLEAN)), *gates))

    branches = or_null(list_of(union(closed(("when", STRING), ("then", next_)),
                                     closed(("if", condition), ("then", next_))),
                               "Exits judged while the step asks"))
    wait_branches = or_null(list_of(
        closed(("if", condition), ("then", next_)),
        "Exits checked by code when the lead replies before the wait ends"))
    base = [("id", STRING), ("label", or_null(STRING)), ("then", next_or_null)]

    def step(kind: str, *properties: tuple[str, dict]) -> dict:
        return closed(*base, ("kind", enum_of([kind])), *properties)

    steps = [step("prompt", ("prompt", text("Guideline for the AI's next message")),
                  ("branches", branches))]
    if slugs is not None:
        steps.append(step(
            "collect", ("collect", described(slugs, "Fields the AI asks for until they are known")),
            ("prompt", or_null(STRING)),
            ("question", or_null(text("A fixed first question, sent word for word; "
                                      "later asks are the AI's"))),
            ("maxAsks", or_null({"type": "integer", "description": "Times a field may be asked "
                                 "before it is skipped; default 3"})),
            ("branches", branches)))
    steps.append(step("say", ("say", text("Sent verbatim")),
                      ("media", or_null(closed(("slug", STRING)))), ("once", or_null(BOOLEAN))))
    for name, action in actions.items():
        parameters = action_parameters(action)
        with_ = []
        if parameters:   # not nullable: required parameters cannot be skipped
            with_ = [("with", {"type": "object",
                               "properties": {p: _parameter_property(as_definition(d))
                                              for p, d in parameters.items()},
                               "required": list(parameters), "additionalProperties": False})]
        steps.append(step("do", ("do", enum_of([name])), *with_, ("onFail", next_or_null)))
    steps.append(step("wait", ("wait", text("Park this long; then = time passed, "
                                            "else = the lead replied")),
                      ("businessHours", or_null(BOOLEAN)), ("else", next_or_null),
                      ("branches", wait_branches)))
    if events:
        up_to = or_null(described(DURATION, "Give up after this long; default 30d"))
        waited = closed(("event", enum_of(events)), ("upTo", up_to))
        steps.append(step("waitEvent", ("wait", waited), ("else", next_or_null)))
    steps.append(step("if", ("if", condition), ("else", next_or_null)))

    instruction = closed(("kind", or_null(enum_of(list(INSTRUCTION_KINDS)))),
                         ("when", or_null(list_of(STRING,
                                                  "When the rule applies, judged by the AI"))),
                         ("if", or_null(condition)), ("prompt", STRING))
    flow = [("id", text("Short slug, unique in the workspace")),
            ("name", STRING),
            ("description", or_null(text("When this flow should be used; "
                                         "the AI reads it when routing"))),
            ("on", or_null(list_of(union(*triggers), "What starts a run; null = started by hand"))),
            ("anchor", or_null(text("'session' (default) or a host anchor such as 'lead'"))),
            ("while", or_null(described(condition, "The run ends when this stops holding")))]
    if slugs is not None:
        data = ("The data this flow needs; its steps ask for it in order, "
                "and any of it the lead gives is noted")
        flow += [("collect", or_null(described(slugs, data))),
                 ("clearOnStart", or_null(described(slugs, "Fields to forget when a run starts")))]
    in_order = "In order; a run moves to the next step unless `then` says otherwise"
    on_end = ("After the last step: end the run, stay on the last talk step it took answering "
              "every message, or reset to the first")
    flow += [("steps", list_of(union(*steps), in_order)),
             ("onEnd", or_null(enum_of(["end", "stay", "reset"], on_end))),
             ("instructions", or_null(list_of(instruction,
                                              "Rules that apply only inside this flow")))]
    return copy.deepcopy(closed(*flow))


# migrate_session (persistence.md Part 4) ------------------------------------------------------
#
# migrate_session reads a 3.x state once, at the place the host deserializes an
# old row; stores never call it.

LEGACY_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"   # text: re compiles it on the first migration


def migrate_session(blob: Any, *, session_id: str, flow_id_of: Callable | None = None,
                    now: Any = None) -> Session:
    """A 3.x session state as a v4 Session at version 0 (persistence.md Part 4).

    A blob with a `v` key is read as v4 (``Session.from_dict``). Otherwise the
    completed flows and fired signals become claims, the current flow becomes
    one run ``<flow>#legacy`` parked at the current step, and everything else
    of the 3.x state is dropped. ``flow_id_of`` maps a 3.x flow id or signal key
    to the v4 flow that took it over (default: kept as is); ``now`` stamps what
    carries no usable date (default: the current UTC time).

    >>> s = migrate_session({"id": "x", "data": {}, "currentFlow": {"id": "f"}, "currentStep": "q"},
    ...                     session_id="s1", now=datetime(2026, 9, 21, 12, tzinfo=timezone.utc))
    >>> (s.runs[0].id, s.runs[0].step_id, s.runs[0].status, s.claims)
    ('f#legacy', 'q', 'asking', {'f:s1:': {'at': '2026-09-21T12:00:00.000Z'}})
    """
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a string, not {type(session_id).__name__}")
    if now is None:
        now = system_clock()
    elif not isinstance(now, datetime):
        raise TypeError(f"now must be a datetime, not {type(now).__name__}")
    now_text = iso(now)

    def fail(why: str) -> NoReturn:
        raise InvalidSessionError(session_id, why)

    if not isinstance(blob, dict):
        fail(f"expected an object, got {describe_blob_value(blob)}")
    if "v" in blob:
        return Session.from_dict(blob, session_id=session_id)

    def flow_of(key: str) -> str:
        if flow_id_of is None:
            return key
        flow = flow_id_of(key)
        if not isinstance(flow, str):
            raise TypeError(f'flow_id_of("{key}") returned {flow!r}; it must return a v4 flow id '
                            "(a string)")
        return flow

    # L1-L6: the shape of a 3.x state, in order.
    data = blob.get("data", ABSENT)
    if not isinstance(data, dict):
        fail(f"data is {describe_blob_value(data)}, expected an object; not a 3.x session either")
    for key, kind, article in (("metadata", dict, "an object"), ("history", list, "a list"),
                               ("flowHistory", list, "a list"), ("signals", dict, "an object")):
        if key in blob and not isinstance(blob[key], kind):
            fail(f"{key} is {describe_blob_value(blob[key])}, expected {article}")
    triggers = blob.get("signals", {}).get("triggers")
    triggers = {} if triggers is None else triggers
    if not isinstance(triggers, dict):
        fail(f"signals.triggers is {describe_blob_value(triggers)}, expected an object")

    claims: dict[str, dict] = {}
    for index, entry in enumerate(blob.get("flowHistory", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("flowId"), str):
            fail(f"flowHistory[{index}] is not a flow entry")
        if entry.get("completed") is True:
            at = (_usable_date(entry.get("exitedAt")) or _usable_date(entry.get("enteredAt"))
                  or now_text)
            claims[claim_prefix(flow_of(entry["flowId"]), session_id)] = {"at": at}
    for key, state in triggers.items():
        if not isinstance(state, dict):
            fail(f"signals.triggers.{key} is not a trigger state")
        at = (_usable_date(state.get("lastTriggeredAt"))
              or _usable_date(state.get("firstTriggeredAt")) or now_text)
        claims[claim_prefix(flow_of(key), session_id)] = {"at": at}

    flow_ref, step_ref = (_legacy_reference(blob.get(key), key, fail)
                          for key in ("currentFlow", "currentStep"))
    runs = []
    if flow_ref is not None:
        flow = flow_of(flow_ref[0])
        started = _usable_date(flow_ref[1]) or now_text
        step = (step_ref[0] if step_ref else None) or None
        dedupe_key = claim_prefix(flow, session_id)
        runs.append(Run(id=f"{flow}#legacy", flow_id=flow, anchor=session_id, dedupe_key=dedupe_key,
                        step_id=step, status="asking" if step else "running",
                        trigger={"kind": "message", "key": "legacy"}, hop=0, started_at=started,
                        asked={}, visits={}, outcomes=[]))
        claims[dedupe_key] = {"at": started}     # a run never exists without its claim

    return Session(id=session_id, version=0, data=data, runs=runs, claims=claims, inputs=[],
                   metadata=_dates_as_text(blob.get("metadata", {})), history=blob.get("history"))


def _legacy_reference(value: Any, key: str,
                      fail: Callable[[str], NoReturn]) -> tuple[str, Any] | None:
    """A 3.x `currentFlow` / `currentStep` as (id, enteredAt), or None (persistence.md §4.2
    step 6)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        return value["id"], value.get("enteredAt")
    fail(f"{key} is {describe_blob_value(value)}, expected {{ id }} or text")


def _usable_date(value: Any) -> str | None:
    """A 3.x date as §2.4 text, or None when it is not usable (persistence.md §4.2, "Usable date").

    A datetime (naive read as UTC); epoch milliseconds as an int or float; or
    text starting with YYYY-MM-DD that parses as an ISO date or date-time
    (without an offset read as UTC).
    """
    try:
        if isinstance(value, datetime):
            return iso(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return iso(from_ms(value)) if math.isfinite(value) else None
        if isinstance(value, str) and re.match(LEGACY_DATE, value):
            return iso(parse_iso(value))
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _dates_as_text(value: Any) -> Any:
    """Metadata rebuilt with every datetime, in dicts and lists at any depth, as §2.4 text
    (§4.2 step 8)."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {key: _dates_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(item) for item in value]
    return value


# The CLI's registry file, read by a program (docs/guide/cli.md) ---------------------------------
#
# check_registry is the one place a registry's shape is checked: load_registry here and the CLI's
# own reader (which adds its size and nesting limits) both call it, so they refuse the same files
# with the same message.

REGISTRY_SECTIONS = ("fields", "actions", "events", "conditions", "tools", "agent")
REGISTRY_AGENT_OPTIONS = ("name", "persona", "goal", "idle", "instructions", "protocol")


def check_registry(value: Any, path: str) -> dict:
    """A registry file's parsed JSON, checked for its shape: every section, filled in.

    Gives ``fields`` ({slug: definition}), ``actions`` ({name: object}),
    ``events`` ({name: EventDef}), ``conditions`` ({name: true/false}),
    ``tools`` ([{"id", ...}]) and ``agent`` (its options that are not null).
    ``events``, ``actions`` and ``conditions`` may be written as a list of
    names. Every section is checked, the stand-ins' too, so a program refuses
    the files ``falai chat`` refuses; what the sections mean (a field's type,
    an event's direction) the agent checks when it is built. A registry of
    the wrong shape raises ValueError naming ``path``, the problem and the fix.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{path}: the registry is {_json_type(value)}, not an object. Write "
                         '{"fields": {...}, "actions": {...}, "events": {...}, "conditions": '
                         '{...}, "tools": [...], "agent": {...}}.')
    unknown = [key for key in value if key not in REGISTRY_SECTIONS]
    if unknown:
        raise ValueError(f'{path}: unknown key "{unknown[0]}". A registry has '
                         f'{", ".join(REGISTRY_SECTIONS)}.')
    return {"fields": _registry_object(value, "fields", path, '{"pedido": {"type": "string"}}'),
            "actions": _registry_actions(value, path), "events": _registry_events(value, path),
            "conditions": _registry_conditions(value, path), "tools": _registry_tools(value, path),
            "agent": _registry_agent(value, path)}


def _json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _registry_object(registry: dict, key: str, path: str, example: str) -> dict:
    """A section written as an object; absent or null is empty."""
    section = registry.get(key)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ValueError(f'{path}: "{key}" must be an object, not {_json_type(section)}. '
                         f"Write {example}.")
    return section


def _registry_named(registry: dict, key: str, path: str, example: str, default: Any) -> dict:
    """A section written as {name: ...} or as a list of names (each given ``default``)."""
    section = registry.get(key)
    if isinstance(section, list) and all(isinstance(name, str) for name in section):
        return {name: default for name in section}
    if section is not None and not isinstance(section, dict):
        raise ValueError(f'{path}: "{key}" must be an object {example} or a list of names, '
                         f"not {_json_type(section)}.")
    return section or {}


def _registry_actions(registry: dict, path: str) -> dict:
    actions = _registry_named(registry, "actions", path, '{name: {"parameters": {...}}}', {})
    for name, action in actions.items():
        if not isinstance(action, dict):
            raise ValueError(f'{path}: action "{name}" is {_json_type(action)}, not an object. '
                             'Write {"parameters": {...}, "result": {"ok": true}}.')
    return actions


def _registry_events(registry: dict, path: str) -> dict:
    events = _registry_named(registry, "events", path, '{name: {"direction": ...}}', None)
    for name, event in events.items():
        if event is not None and not isinstance(event, dict):
            raise ValueError(f'{path}: event "{name}" is {_json_type(event)}, not an object. '
                             'Write {"direction": "inbound"}, or {} for none.')
    return {name: EventDef(direction=(event or {}).get("direction"))
            for name, event in events.items()}


def _registry_conditions(registry: dict, path: str) -> dict:
    conditions = _registry_named(registry, "conditions", path, "{name: true or false}", False)
    for name, answer in conditions.items():
        if not isinstance(answer, bool):
            raise ValueError(f'{path}: condition "{name}" is {_json_type(answer)}, not true or '
                             "false. Write the answer its stand-in gives, e.g. "
                             f'{{"{name}": false}}.')
    return conditions


def _registry_tools(registry: dict, path: str) -> list:
    tools = registry.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list) or not all(isinstance(tool, dict)
                                              and isinstance(tool.get("id"), str)
                                              for tool in tools):
        raise ValueError(f'{path}: "tools" must be a list of objects with an "id". Write '
                         '[{"id": "price", "description": "...", "parameters": {...}}].')
    return tools


def _registry_agent(registry: dict, path: str) -> dict:
    """The agent section's options that are not null."""
    agent = _registry_object(registry, "agent", path, '{"name": "Shop", "persona": "..."}')
    unknown = [key for key in agent if key not in REGISTRY_AGENT_OPTIONS]
    if unknown:
        raise ValueError(f'{path}: "agent" has no option "{unknown[0]}". Its options are '
                         f'{", ".join(REGISTRY_AGENT_OPTIONS)}.')
    return {key: value for key, value in agent.items() if value is not None}


def load_registry(path: str) -> dict:
    """The registry file ``falai chat --registry`` reads, as Agent keyword arguments.

    Gives ``fields``, ``events`` (an EventDef per name, with its direction)
    and the ``agent`` section's options (name, persona, goal, idle,
    instructions, protocol). Its actions, tools and conditions describe your
    code for the CLI's stand-ins: pass your real ones yourself. The whole
    file is checked as the CLI checks it (``check_registry``), the stand-ins'
    sections too, so a file ``falai chat`` refuses is refused here with the
    same message: a ValueError naming the problem and the fix. The agent
    checks what the sections mean when it is built.

    ``Agent(provider=..., flows=..., actions={...}, **load_registry("registry.json"))``
    """
    with open(path, "rb") as file:
        data = file.read()
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError as error:            # UnicodeDecodeError is one
        raise ValueError(f"{path}: the registry is not valid JSON ({error}). "
                         "Fix its syntax.") from None
    sections = check_registry(value, path)
    return {**sections["agent"], "fields": sections["fields"], "events": sections["events"]}


# History items and events (model-calls.md §11.2) ----------------------------------------------
#
# The history helpers convert between history items and a host's event log.

class _Malformed(ValueError):
    """A malformed history item or event; the caller adds where it is."""


def _need(ok: bool, reason: str) -> None:
    if not ok:
        raise _Malformed(reason)


def history_to_events(history: list) -> list:
    """History items as events, for hosts that store history as events (model-calls.md §11.2).

    Every event of one call carries the same timestamp, the current UTC time
    (inferred: the items carry no time of their own). `reasoning` and
    `reasoningDetails` have no place in an event and are left out.

    >>> [e["data"]["message"] for e in history_to_events([{"role": "user", "content": "oi"}])]
    ['oi']
    """
    if not isinstance(history, list):
        raise ValueError("history_to_events takes a list of history items, "
                         f"not {describe_blob_value(history)}")
    timestamp = iso(system_clock())
    events = []
    for index, item in enumerate(history):
        try:
            events.append({**_history_item_event(item), "timestamp": timestamp})
        except _Malformed as error:
            raise ValueError(f"Error converting history item at index {index}: {error}") from None
    return events


def _history_item_event(item: Any) -> dict:
    _need(isinstance(item, dict), f"expected an object, got {describe_blob_value(item)}")
    role = item.get("role")
    content = item.get("content")
    if role == "user":
        _need(isinstance(content, str), "a user item needs text content")
        name = item.get("name")
        _need(name is None or isinstance(name, str), "a user item's name must be text")
        return _message_event("user", name or "User", content)
    if role == "assistant":
        _need(content is None or isinstance(content, str),
              "an assistant item's content must be text or null")
        event = _message_event("assistant", "Assistant", content or "")
        calls = item.get("tool_calls")
        _need(calls is None or isinstance(calls, list),
              "an assistant item's tool_calls must be a list")
        for number, call in enumerate(calls or []):
            _need(isinstance(call, dict) and isinstance(call.get("id"), str)
                  and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict),
                  f"tool_calls[{number}] needs an id, a name and an arguments object")
        if calls:
            event["data"]["toolCalls"] = calls
        return event
    if role == "tool":
        _need(isinstance(item.get("tool_call_id"), str) and isinstance(item.get("name"), str),
              "a tool item needs a tool_call_id and a name")
        return {"kind": "tool", "source": "agent",
                "data": {"tool_calls": [{"tool_id": item["tool_call_id"], "arguments": {},
                                         "result": {"data": content}}]}}
    if role == "system":
        _need(isinstance(content, str), "a system item needs text content")
        return _message_event("system", "System", content)
    raise _Malformed(f'unknown role {describe_blob_value(item.get("role", ABSENT))}; '
                     'expected "user", "assistant", "tool" or "system"')


def _message_event(source: str, display_name: str, message: str) -> dict:
    return {"kind": "message", "source": source,
            "data": {"participant": {"display_name": display_name}, "message": message}}


def events_to_history(events: list) -> list:
    """Events as history items (model-calls.md §11.2); a malformed event raises ValueError.

    >>> events_to_history([{"kind": "status", "source": "system", "data": {}}])
    [{'role': 'system', 'content': 'Status update'}]
    """
    if not isinstance(events, list):
        raise ValueError("events_to_history takes a list of events, "
                         f"not {describe_blob_value(events)}")
    history = []
    for index, event in enumerate(events):
        try:
            history.append(_event_history_item(event))
        except _Malformed as error:
            raise ValueError(f"Error converting event at index {index}: {error}") from None
    return history


def _event_history_item(event: Any) -> dict:
    _need(isinstance(event, dict), f"expected an object, got {describe_blob_value(event)}")
    _need(all(key in event for key in ("kind", "source", "data")),
          "an event needs kind, source and data")
    kind, source, data = event["kind"], event["source"], event["data"]
    _need(isinstance(data, dict), f"data is {describe_blob_value(data)}, expected an object")
    if kind == "message":
        message = data.get("message")
        _need(isinstance(message, str), "a message event needs a message (text)")
        if source == "user":
            item = {"role": "user", "content": message}
            participant = data.get("participant")
            name = participant.get("display_name") if isinstance(participant, dict) else None
            if isinstance(name, str) and name and name != "User":
                item["name"] = name
            return item
        if source == "assistant":
            item = {"role": "assistant", "content": message or None}
            calls = data.get("toolCalls")
            _need(calls is None or isinstance(calls, list), "toolCalls must be a list")
            if calls:
                item["tool_calls"] = calls
            return item
        if source == "system":
            return {"role": "system", "content": message}
        raise _Malformed(f"a message from {describe_blob_value(source)} has no history role; "
                         'expected source "user", "assistant" or "system"')
    if kind == "tool":
        calls = data.get("tool_calls")
        _need(isinstance(calls, list) and len(calls) > 0,
              "a tool event needs a non-empty tool_calls list")
        first = calls[0]
        _need(isinstance(first, dict) and isinstance(first.get("tool_id"), str),
              "tool_calls[0] needs a tool_id")
        result = first.get("result")
        _need(result is None or isinstance(result, dict), "tool_calls[0].result must be an object")
        return {"role": "tool", "tool_call_id": first["tool_id"], "name": first["tool_id"],
                "content": (result or {}).get("data")}
    if kind == "status":
        status = data.get("status")
        _need(status is None or isinstance(status, str), "a status event's status must be text")
        return {"role": "system", "content": status or "Status update"}
    raise _Malformed(f"unknown kind {describe_blob_value(kind)}; "
                     'expected "message", "tool" or "status"')
