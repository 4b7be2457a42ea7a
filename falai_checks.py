"""falai_checks: what falai() and f.agent() check before a flow can run.

The construction checks of persistence.md §1.10-§1.11:

   validate_flow ........ a flow in three phases: strip the Nones, check the JSON's shape, then
                          every name and the step graph; the first problem raises
                          FlowConfigurationError, what runs but probably not as meant is a warning
   check_flow ........... the same checks, every problem collected as a Problem
   check_agent .......... an agent's construction checks, run once when it is built
   check_compaction ..... the compaction settings (model-calls.md §9.1)

Nothing here decides anything in a turn. ``import falai`` is all a user needs:
``falai.validate_flow`` and ``falai.check_flow`` load this module on first use,
and building an agent loads it to check the agent. It imports falai and the
standard library only (``jsonschema``, when installed, checks a tool's schema).

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from falai_base import (
    ABSENT, FIELD_FORMATS, FlowConfigurationError, FlowValidation, MAX_DURATION, MAX_NESTING,
    PLACEHOLDER, Problem, UNLIMITED_ASKS, as_definition, extract_mode, flow_error, is_duration,
    is_known, is_too_long, is_whole, json_equal, json_literal, listed_values, nests_deeper, show,
    split_phrases, strip_nones,
)

if TYPE_CHECKING:
    from falai import Agent

__all__ = ["validate_flow", "check_flow", "check_agent", "check_compaction", "check_flow_shape"]


# validate_flow and the agent's construction checks (persistence.md §1.10-§1.11) ---------------
#
# validate_flow reads a flow in three phases (persistence.md §1.10): strip the
# Nones, check the JSON's shape, then check every name and the step graph.
# The first problem raises FlowConfigurationError with the message
# "<where>: <what>. <fix>"; what runs but probably not as meant is a warning.

RESERVED_CONDITIONS = ("equals", "known", "unknown", "not", "any", "silenced")
TRIGGER_KINDS = ("message", "mention", "silence", "event")
INSTRUCTION_KINDS = ("must", "never", "should")


# How a message names a value (persistence.md §1.10: type name, expected) --------------------

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


def article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def expected_text(definition: dict) -> str:
    """What a definition asks for: "a string", "an integer", "a list of strings" (*expected*)."""
    if definition.get("type") == "array":
        items = as_definition(definition.get("items"))
        return f"a list of {items.get('type') or 'value'}s"
    kind = str(definition.get("type") or "value")
    return f"{article(kind)} {kind}"


def _quoted_kinds(kinds: list[str]) -> str:
    """"a", "a" and "b", "a", "b" and "c"."""
    quoted = [f'"{kind}"' for kind in kinds]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _has_key(mapping: Any, key: Any) -> bool:
    """``key in mapping`` that is False for an unhashable key instead of raising."""
    try:
        return key in mapping
    except TypeError:
        return False


# Matching (persistence.md §1.10, "Matching") --------------------------------------------------
#
# Values are never coerced. A definition whose type is none of the five known
# ones puts no type rule on the value (inferred: parameter definitions are host
# code and otherwise unchecked).

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
        items = as_definition(definition.get("items"))
        return isinstance(value, (list, tuple)) and all(_matches_scalar(items, item)
                                                        for item in value)
    return _matches_scalar(definition, value)


def _off_list(definition: dict, value: Any) -> tuple[str, str] | None:
    """The mismatch rule: (listed values, the offending item's literal) when an item of the right
    type is not listed, None when the type itself is wrong."""
    is_array = definition.get("type") == "array"
    scalar = as_definition(definition.get("items")) if is_array else definition
    if scalar.get("enum") is not None:
        candidates = value if is_array and isinstance(value, (list, tuple)) else [value]
        for item in candidates:
            if _type_fits(scalar, item) and not _in_enum(scalar, item):
                return listed_values(scalar["enum"]), json_literal(item)
    return None


# Phase 1: shape -------------------------------------------------------------------------------

def _list_check(value: Any, label: str, where: str, objects: bool = False) -> None:
    """A list (or tuple) whose entries are all strings, or all dicts; absent passes."""
    if value is ABSENT:
        return
    if not isinstance(value, (list, tuple)):
        fix = (f"Write {label}: {json_literal([value])}." if isinstance(value, str) and not objects
               else f"Write {label} as a list.")
        flow_error(where, f"{label} is {show(value)}, not a list", fix)
    for i, item in enumerate(value):
        if objects and not isinstance(item, dict):
            flow_error(where, f"{label}[{i}] is {show(item)}, not an object",
                       f"Write each entry of {label} as an object.")
        if not objects and not isinstance(item, str):
            flow_error(where, f"{label}[{i}] is {show(item)}, not text",
                       f"Write each entry of {label} as a string.")


def _condition_check(value: Any, label: str, where: str) -> None:
    if value is ABSENT or callable(value) or isinstance(value, dict):
        return
    flow_error(where, f"{label} is {show(value)}, not a condition",
               'Write it as an object, e.g. { known: ["nome"] }.')


def _target_check(value: Any, label: str, where: str) -> None:
    if value is ABSENT or isinstance(value, str):
        return
    if isinstance(value, dict) and (isinstance(value.get("step"), str)
                                    or isinstance(value.get("flow"), str)):
        _list_check(value.get("clear", ABSENT), f"{label}.clear", where)
        # the input becomes a run's input (docs/guide/limits.md)
        if nests_deeper(value.get("input"), MAX_NESTING):
            flow_error(where, f"{label}.input nests lists and dicts deeper than {MAX_NESTING} "
                       "levels", "Flatten it.")
        return
    flow_error(where, f"{label} is {show(value)}, not a step id or a target",
               'Write a step id, "end", { step: "id" } or { flow: "id" }.')


def _instructions_check(owner: dict, where: str) -> None:
    instructions = owner.get("instructions", ABSENT)
    _list_check(instructions, "instructions", where, objects=True)
    if instructions is ABSENT:
        return
    for i, instruction in enumerate(instructions):
        label = f"instructions[{i}]"
        if "kind" in instruction and instruction["kind"] not in INSTRUCTION_KINDS:
            what = (f'{label}.kind is {show(instruction["kind"])}, which is not one of "must", '
                    '"never", "should"')
            flow_error(where, what, "Use one of them.")
        if not isinstance(instruction.get("prompt"), str):
            prompt = instruction.get("prompt", ABSENT)
            flow_error(where, f"{label}.prompt is {show(prompt)}, not text",
                       "Write the rule as a sentence.")
        when = instruction.get("when", ABSENT)
        if not isinstance(when, str):
            _list_check(when, f"{label}.when", where)
        _condition_check(instruction.get("if", ABSENT), f"{label}.if", where)


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
        flow_error(where, f"does nothing; {_keys_found(step, BODY_KEYS)}",
                   "A step talks (`prompt` / `collect`), says (`say`), acts (`do`), waits (`wait`) "
                   "or forks (`if`).")
    if len(kinds) > 1:
        flow_error(where, f"mixes {_quoted_kinds(kinds)}",
                   "A step does one thing. Split it into one step per kind.")
    if "kind" in step and step["kind"] != kinds[0]:
        flow_error(where, f'has kind {show(step["kind"])}, but its body is a "{kinds[0]}" step',
                   f'Set kind to "{kinds[0]}", or change the body to match.')
    for key in ("say", "prompt", "question"):
        if key in step and not isinstance(step[key], str):
            flow_error(where, f"{key} is {show(step[key])}, not text", f"Write {key} as a string.")
    _list_check(step.get("collect", ABSENT), "collect", where)
    _list_check(step.get("tools", ABSENT), "tools", where)
    _list_check(step.get("repeatTools", ABSENT), "repeatTools", where)
    if "ask" in step and not isinstance(step["ask"], dict):
        flow_error(where, f"ask is {show(step['ask'])}, not an object",
                   'Write ask as { field: "how to ask" }.')
    if "with" in step and not isinstance(step["with"], dict):
        flow_error(where, f"with is {show(step['with'])}, not an object",
                   "Write with as { parameter: value }.")
    if "maxAsks" in step:
        asks = step["maxAsks"]
        if asks != UNLIMITED_ASKS and (not is_whole(asks) or asks < 1):
            flow_error(where, f"maxAsks is {show(asks)}, not a whole number of 1 or more",
                       'Write a number like 3, or "unlimited" for a step that never gives up.')
    wait = step.get("wait", ABSENT)
    if wait is not ABSENT and not isinstance(wait, str) and not (
            isinstance(wait, dict) and isinstance(wait.get("event"), str)):
        flow_error(where, "wait has no event",
                   'Write wait: { event: "name" } to wait for an event, or a duration like "1h".')
    _condition_check(step.get("if", ABSENT), "if", where)
    for key in ("then", "else", "onFail"):
        _target_check(step.get(key, ABSENT), key, where)
    _instructions_check(step, where)
    branches = step.get("branches", ABSENT)
    _list_check(branches, "branches", where, objects=True)
    for j, branch in enumerate([] if branches is ABSENT else branches):
        if "when" in branch and not isinstance(branch["when"], str):
            flow_error(where, f"branches[{j}].when is {show(branch['when'])}, not text",
                       "Write the condition as one sentence.")
        _condition_check(branch.get("if", ABSENT), f"branches[{j}].if", where)
        _target_check(branch.get("then", ABSENT), f"branches[{j}].then", where)


class Checks:
    """Where the problems of one flow go.

    Each check runs as a unit: a step, a trigger, one flow-level key. Raising
    (the default) lets the first unit's FlowConfigurationError through, so the
    first error is the one validate_flow has always raised; collecting records
    it as a Problem and goes on with the next unit. Warnings are recorded either way.
    """

    def __init__(self, collect: bool = False):
        self.collect = collect
        self.problems: list[Problem] = []
        self.failed: set[tuple] = set()

    def run(self, path: tuple, check: Callable, *args: Any) -> bool:
        """Run one unit; False when it found an error (collecting only)."""
        if self.broken(path):
            return False           # its shape is already reported; its names cannot be read
        try:
            check(*args)
            return True
        except FlowConfigurationError as error:
            if not self.collect:
                raise
            message = str(error).removeprefix("[FlowConfigurationError] ")
            self.problems.append(Problem("error", list(path), message))
        except Exception:
            if not (self.collect and self.failed):
                raise
            # a later unit tripped over a shape problem that is already reported: nothing new to say
        self.failed.add(path)
        return False

    def broken(self, path: tuple) -> bool:
        """A unit at ``path`` or around it already failed."""
        return any(path[:n] in self.failed for n in range(len(path) + 1))

    def warn(self, path: tuple, message: str) -> None:
        self.problems.append(Problem("warning", list(path), message))


def flow_frame(flow: Any) -> None:
    """S1-S2: a flow is an object with a steps list; nothing else can be read without them."""
    if not isinstance(flow, dict):
        flow_error("flow", f"is {show(flow)}, not an object",
                   "Pass the flow itself: { id, name, steps }.")
    where = f'flow "{flow["id"]}"' if isinstance(flow.get("id"), str) else "flow"
    if not isinstance(flow.get("steps"), (list, tuple)):
        found = f"; {_keys_found(flow, ['steps'])}" if "steps" not in flow else ""
        flow_error(where, f"has no steps list{found}", "Write steps as a list, even an empty one.")


def _flow_key_shape(flow: dict, key: str, where: str) -> None:
    """S3-S8 for one flow-level key."""
    if key in ("description", "anchor"):
        if key in flow and not isinstance(flow[key], str):
            flow_error(where, f"{key} is {show(flow[key])}, not text", f"Write {key} as a string.")
    elif key in ("collect", "clearOnStart", "tools", "repeatTools"):
        _list_check(flow.get(key, ABSENT), key, where)
    elif key == "onEnd":
        if "onEnd" in flow and flow["onEnd"] not in ("end", "stay", "reset"):
            flow_error(where, f'onEnd is {show(flow["onEnd"])}, which is not one of "end", "stay", '
                       '"reset"', "Use one of them.")
    elif key == "while":
        _condition_check(flow.get("while", ABSENT), "while", where)
    elif key == "instructions":
        _instructions_check(flow, where)


def _trigger_shape(trigger: dict, trigger_where: str) -> None:
    _list_check(trigger.get("message", ABSENT), "message", trigger_where)
    _list_check(trigger.get("mention", ABSENT), "mention", trigger_where)
    _condition_check(trigger.get("if", ABSENT), "if", trigger_where)
    repeat = trigger.get("repeat", ABSENT)
    if repeat is not ABSENT and repeat not in ("once", "always") and not (
            isinstance(repeat, dict) and isinstance(repeat.get("cooldown"), str)):
        flow_error(trigger_where, f"repeat is {show(repeat)}",
                   'Use "once", "always" or { cooldown: "24h" }.')


def _not_an_object(where: str, label: str, i: int, item: Any) -> None:
    flow_error(where, f"{label}[{i}] is {show(item)}, not an object",
               f"Write each entry of {label} as an object.")


def step_where(flow_where: str, step: Any, n: int) -> str:
    """``flow "f", step "id"``, or ``step #n`` (from 1) when the id is not a string (S9)."""
    step_id = step.get("id") if isinstance(step, dict) else None
    if isinstance(step_id, str):
        return f'{flow_where}, step "{step_id}"'
    return f"{flow_where}, step #{n}"


def check_flow_shape(flow: Any, checks: Checks | None = None) -> None:
    """Phase 1 (persistence.md §1.10, S1-S9): every value is the right kind of JSON.

    Reads a stripped flow; ``from_spec`` runs this too. Raises on the first
    problem unless ``checks`` collects.
    """
    checks = checks or Checks()
    flow_frame(flow)
    where = f'flow "{flow["id"]}"' if isinstance(flow.get("id"), str) else "flow"
    for key in ("description", "anchor", "collect", "clearOnStart", "tools", "repeatTools", "onEnd",
                "while", "instructions"):
        checks.run((key,), _flow_key_shape, flow, key, where)
    on = flow.get("on", ABSENT)
    if on is not ABSENT and not isinstance(on, (list, tuple)):
        checks.run(("on",), _list_check, on, "on", where, True)
    else:
        triggers = list(enumerate(_items(on)))
        for i, trigger in triggers:
            if not isinstance(trigger, dict):
                checks.run(("on", i), _not_an_object, where, "on", i, trigger)
        for i, trigger in triggers:
            if isinstance(trigger, dict):
                checks.run(("on", i), _trigger_shape, trigger, f"{where}, trigger #{i + 1}")
    steps = list(enumerate(flow["steps"]))
    for i, step in steps:
        if not isinstance(step, dict):
            checks.run(("steps", i), _not_an_object, where, "steps", i, step)
    for i, step in steps:
        if isinstance(step, dict):
            checks.run(("steps", i), _step_shape, step, step_where(where, step, i + 1))


# Phase 2: names and the step graph ------------------------------------------------------------

@dataclass
class _FlowNames:
    """What a flow's names are checked against: the registries of persistence.md §1.10."""
    fields: dict
    actions: dict
    events: dict
    conditions: dict
    tool_ids: list
    flow_ids: list | None        # None: targets naming a flow are not checked

    @classmethod
    def of(cls, registries: dict | None) -> _FlowNames:
        registries = registries or {}
        tools = registries.get("tools") or []
        tool_ids = [tool if isinstance(tool, str) else tool.get("id") if isinstance(tool, dict)
                    else getattr(tool, "id", None) for tool in tools]
        flows = registries.get("flows")
        flow_ids = None
        # each id once, in order (one pass: an agent checks every flow with this)
        if flows is not None:
            flow_ids = list(dict.fromkeys(
                flow["id"] for flow in flows
                if isinstance(flow, dict) and isinstance(flow.get("id"), str)))
        return cls(fields=registries.get("fields") or {},
                   actions=registries.get("actions") or {},
                   events=registries.get("events") or {},
                   conditions=registries.get("conditions") or {},
                   tool_ids=tool_ids, flow_ids=flow_ids)


def _field_check(slug: Any, names: _FlowNames, where: str, label: str) -> None:
    if not _has_key(names.fields, slug):
        flow_error(where, f'unknown field "{slug}" in {label}',
                   "Add it to the agent's fields or fix the slug.")


def _tool_check(tools: Any, names: _FlowNames, where: str) -> None:
    for tool in tools:
        if tool not in names.tool_ids:
            flow_error(where, f'unknown tool "{tool}"',
                       "Register it in the agent's tools or fix the name.")


def _duration_check(value: Any, label: str, where: str) -> None:
    if value is not ABSENT and not is_duration(value):
        flow_error(where, f'{label} has duration "{value}", which does not parse',
                   'Write a number and a unit: "30s", "5m", "24h" or "3d".')
    if value is not ABSENT and is_too_long(value):
        flow_error(where, f'{label} has duration "{value}", longer than the maximum '
                   f'"{MAX_DURATION}" (ten years)',
                   "Use a shorter duration (docs/guide/limits.md).")


def condition_names_check(condition: Any, label: str, where: str, names: _FlowNames) -> None:
    """The names inside one JSON predicate (persistence.md §1.10; flows.md §14.3).

    Absent and callables pass. Anything else that is not a dict fails as in the
    shape check (inferred: agent and idle instructions reach this without one).
    """
    if condition is ABSENT or callable(condition):
        return
    _condition_check(condition, label, where)
    for key, arg in condition.items():
        if key == "equals":
            if not isinstance(arg, dict):
                flow_error(where, f"{label}.equals is not an object",
                           "Write equals as { field: value }.")
            for slug, value in arg.items():
                _field_check(slug, names, where, f"{label}.equals")
                if value is None:   # kept only when every value is None (strip_nones)
                    flow_error(where, f'{label}.equals gives "{slug}" null, which a flow reads as '
                               '"not set", so the condition would test nothing and always hold',
                               f'For "not known" write {{ "unknown": ["{slug}"] }}.')
                definition = as_definition(names.fields[slug])
                if matches_definition(definition, value):
                    continue
                off_list = _off_list(definition, value)
                if off_list:
                    listed, got = off_list
                    flow_error(where, f'{label}.equals gives "{slug}" {got}, which is not one of '
                               f"{listed}", "Use one of the listed values.")
                kind, expected = type_name(value), expected_text(definition)
                what = (f'{label}.equals gives "{slug}" {article(kind)} {kind}, but the field is '
                        f"{expected}")
                flow_error(where, what, f"Write {expected}; values are not coerced.")
        elif key in ("known", "unknown"):
            if not isinstance(arg, (list, tuple)):
                flow_error(where, f"{label}.{key} is not a list", f"Write {key} as [field, ...].")
            for slug in arg:
                _field_check(str(slug), names, where, f"{label}.{key}")
        elif key == "not":
            if not isinstance(arg, dict) and not callable(arg):
                flow_error(where, f"{label}.not is {show(arg)}, not a condition",
                           'Write it as an object, e.g. { "not": { "known": ["nome"] } }.')
            condition_names_check(arg, f"{label}.not", where, names)
        elif key == "any":
            if not isinstance(arg, (list, tuple)) or not arg:
                given = "empty" if isinstance(arg, (list, tuple)) else show(arg)
                flow_error(where, f"{label}.any is {given}, not a list of conditions",
                           'Write it as a list, e.g. { "any": [{ "known": ["email"] }, '
                           '{ "known": ["phone"] }] }.')
            for i, option in enumerate(arg):
                if not isinstance(option, dict) and not callable(option):
                    flow_error(where, f"{label}.any[{i}] is {show(option)}, not a condition",
                               'Write each option as an object, e.g. { "known": ["email"] }.')
                condition_names_check(option, f"{label}.any[{i}]", where, names)
        elif key == "silenced":
            if not isinstance(arg, bool):
                flow_error(where, f"{label}.silenced is not a boolean", "Write true or false.")
        elif not _has_key(names.conditions, key):
            flow_error(where, f'unknown condition "{key}" in {label}',
                       "Register it in conditions or use equals, known, silenced.")


def action_parameters(action: Any) -> dict:
    """An action's parameter definitions: its ``parameters`` attribute, or key of a dict."""
    parameters = (action.get("parameters") if isinstance(action, dict)
                  else getattr(action, "parameters", None))
    return parameters if isinstance(parameters, dict) else {}


def _with_check(name: str, parameters: dict, given: dict, where: str) -> None:
    """The `with` check of persistence.md §1.10 (flows.md §9.2). A key the action does not take
    that is the closest name of a missing parameter is a typo: it is named first, with the fix."""
    missing = [str(p) for p in parameters if p not in given]
    for key in given:
        if key not in parameters and missing and closest(key, missing):
            flow_error(where, f'action "{name}" has no parameter "{key}"',
                       f'Did you mean "{closest(key, missing)}"?')
    for parameter, raw in parameters.items():
        definition = as_definition(raw)
        if parameter not in given:
            if not definition.get("optional"):
                flow_error(where, f'action "{name}" needs parameter "{parameter}"',
                           "Add it to `with`.")
            continue
        value = given[parameter]
        if matches_definition(definition, value):
            continue
        off_list = _off_list(definition, value)
        if off_list:
            expected, got = f"one of {off_list[0]}", off_list[1]
            fix = "Use one of the listed values."
        else:
            expected, got = expected_text(definition), type_name(value)
            fix = "Values are not coerced; write the right type."
            if isinstance(value, str) and "{{" in value:    # a template always renders text
                fix = ('A template renders text: declare the parameter "type": "string" and '
                       "convert it in your action.")
        flow_error(where,
                   f'parameter "{parameter}" of action "{name}" must be {expected}, got {got}', fix)
    for key in given:
        if key not in parameters:
            near = closest(key, [str(parameter) for parameter in parameters])
            flow_error(where, f'action "{name}" has no parameter "{key}"',
                       f'Did you mean "{near}"?' if near else "Remove it or fix the name.")


def _step_id_check(step: dict, n: int, where: str, position: dict) -> None:
    step_id = step.get("id")
    if not (isinstance(step_id, str) and step_id):
        flow_error(f"{where}, step #{n}", "has no id", "Give every step a unique id.")
    if step_id == "end":
        flow_error(f'{where}, step "end"', 'uses the reserved id "end"',
                   '"end" ends the run; pick another id.')
    if step_id in position:
        flow_error(f'{where}, step "{step_id}"', "duplicates an earlier step id",
                   "Give each step its own id.")
    position[step_id] = n - 1


def _flow_names_check(flow: dict, key: str, where: str, names: _FlowNames) -> None:
    """N-rules for one flow-level key."""
    if key in ("collect", "clearOnStart"):
        for slug in flow.get(key, ()):
            _field_check(slug, names, where, key)
    elif key == "while":
        condition_names_check(flow.get("while", ABSENT), "while", where, names)
    elif key in ("tools", "repeatTools"):
        _tool_check(flow.get(key, ()), names, where)


def _instruction_names(instruction: dict, i: int, where: str, names: _FlowNames) -> None:
    condition_names_check(instruction.get("if", ABSENT), f"instructions[{i}].if", where, names)


def _trigger_names(trigger: dict, trigger_where: str, names: _FlowNames) -> None:
    """N7 for one trigger."""
    if not any(kind in trigger for kind in TRIGGER_KINDS):
        flow_error(trigger_where, f"names no trigger kind; {_keys_found(trigger, TRIGGER_KINDS)}",
                   "A trigger is one of `message`, `mention`, `silence`, `event`. A flow the host "
                   "starts itself has no `on` at all.")
    if "event" in trigger and not _has_key(names.events, trigger["event"]):
        flow_error(trigger_where, f'unknown event "{trigger["event"]}"',
                   "Register it in events or fix the name.")
    _duration_check(trigger.get("silence", ABSENT), "silence", trigger_where)
    _duration_check(trigger.get("after", ABSENT), "after", trigger_where)
    if isinstance(trigger.get("repeat"), dict):
        _duration_check(trigger["repeat"]["cooldown"], "repeat.cooldown", trigger_where)
    condition_names_check(trigger.get("if", ABSENT), "if", trigger_where, names)
    for kind in ("message", "mention"):
        phrases = trigger.get(kind) or []
        if phrases and not split_phrases(phrases)[0]:
            fix = ('A "!" phrase rules the trigger out. Add at least one plain phrase saying when '
                   "it should fire")
            fix += ", or use an empty list for a catch-all." if kind == "message" else "."
            flow_error(trigger_where,
                       f'every {kind} phrase starts with "!", so nothing can ever match it', fix)


def check_flow_names(flow: dict, names: _FlowNames, checks: Checks | None = None) -> list[str]:
    """Phase 2 (persistence.md §1.10, N1-N8): names and the step graph; returns the warnings.

    Raises on the first problem unless ``checks`` collects; the warnings go to
    ``checks`` too, each with its path.
    """
    checks = checks or Checks()
    first = len(checks.problems)
    if not (isinstance(flow.get("id"), str) and flow["id"]):
        checks.run(("id",), flow_error, "flow", "has no id", "Give the flow a short unique id.")
        return []            # collecting: every other message names the flow by its id
    where = f'flow "{flow["id"]}"'
    if flow["id"].startswith("silence:"):   # its wakes read as silence wakes (runtime.md §3.2)
        flow_error(where, 'has an id starting with "silence:", the prefix of silence wake keys',
                   "Rename the flow.")
    steps = flow["steps"]
    position: dict[str, int] = {}
    for n, step in enumerate(steps, 1):
        checks.run(("steps", n - 1), _step_id_check, step, n, where, position)
    if flow.get("on") and not steps:
        checks.run(("on",), flow_error, where, "has triggers but no steps",
                   "Add at least one step or remove `on`.")
    for key in ("collect", "clearOnStart"):
        checks.run((key,), _flow_names_check, flow, key, where, names)

    step_collects = {slug for step in steps
                     if isinstance(step, dict) and isinstance(step.get("collect"), list)
                     for slug in step["collect"] if isinstance(slug, str)}
    for slug in flow.get("collect", ()) if not checks.broken(("collect",)) else ():
        if extract_mode(as_definition(names.fields[slug])) == "asked" and slug not in step_collects:
            checks.warn(("collect",), f'{where}: collect lists "{slug}", which is only taken from '
                        "the answer to a step that asks it, and no step does. Add it to a step's "
                        "collect, or set extract: 'anywhere' on the field.")

    checks.run(("while",), _flow_names_check, flow, "while", where, names)
    checks.run(("tools",), _flow_names_check, flow, "tools", where, names)
    checks.run(("repeatTools",), _flow_names_check, flow, "repeatTools", where, names)
    for i, instruction in enumerate(_items(flow.get("instructions"))):
        checks.run(("instructions", i), _instruction_names, instruction, i, where, names)

    for n, trigger in enumerate(_items(flow.get("on")), 1):
        checks.run(("on", n - 1), _trigger_names, trigger, f"{where}, trigger #{n}", names)

    for i, step in enumerate(steps):
        found: list[str] = []
        checks.run(("steps", i), _step_names, step, i, where, position, names, found)
        for text in found:
            checks.warn(("steps", i), text)
    return [p.message for p in checks.problems[first:] if p.severity == "warning"]


def _step_names(step: dict, i: int, flow_where: str, position: dict, names: _FlowNames,
                warnings: list) -> None:
    """The step rules of persistence.md §1.10 for the step at index i."""
    where = f'{flow_where}, step "{step["id"]}"'

    def edge(target: Any, label: str) -> int | None:
        """Check one Next; the index it lands on, or None (persistence.md §1.10, edge check)."""
        if target is ABSENT or target == "end":
            return None
        if isinstance(target, dict) and "flow" in target:
            flow_id = target["flow"]
            templated = isinstance(flow_id, str) and "{{" in flow_id
            if names.flow_ids is not None and not templated and flow_id not in names.flow_ids:
                fix = (f"Use one of {listed_values(names.flow_ids)}, or add the flow."
                       if names.flow_ids else "Add the flow to the agent.")
                flow_error(where, f'{label} names flow "{flow_id}", which this agent does not have',
                           fix)
            return None
        step_id = target["step"] if isinstance(target, dict) else target
        if step_id not in position:
            flow_error(where, f'{label} points at step "{step_id}", which does not exist',
                       'Use an existing step id or "end".')
        if isinstance(target, dict):
            for slug in target.get("clear", ()):
                _field_check(slug, names, where, f"{label}.clear")
        lands = position[step_id]
        if lands <= i and not (isinstance(target, dict) and target.get("clear")):
            warnings.append(f'{where}: {label} jumps back to "{step_id}" without clear; the fields '
                            "collected since stay known and those steps skip. Add clear: [...] to "
                            "re-ask them.")
        return lands

    then_lands = edge(step.get("then", ABSENT), "then")
    edge(step.get("else", ABSENT), "else")
    if "collect" in step or "prompt" in step:
        collect = step.get("collect", [])
        for slug in collect:
            _field_check(slug, names, where, "collect")
        for slug in step.get("ask", {}):
            _field_check(slug, names, where, "ask")
        tool_only = [slug for slug in collect
                     if extract_mode(as_definition(names.fields[slug])) == "never"]
        if tool_only and step.get("tools") != [] and names.tool_ids:
            tool_only = []
        if tool_only and not names.actions:
            quoted = ", ".join(f'"{slug}"' for slug in tool_only)
            warnings.append(f"{where}: collects {quoted}, which only a tool, an action or the "
                            "host writes (extract: never), and this step offers no tool and the "
                            "agent has no action, so the step waits until your host writes it. "
                            "Offer the tool that writes it, or drop extract: never.")
        if "question" in step and not collect:
            flow_error(where, "has a question but collects nothing",
                       "A fixed question asks for fields: add collect, or send the text with a say "
                       "step.")
        asks = step.get("ask", {})
        if (collect and "prompt" not in step and "question" not in step
                and not any(is_known(asks.get(slug))
                            or is_known(as_definition(names.fields[slug]).get("ask"))
                            for slug in collect)):
            quoted = ", ".join(f'"{slug}"' for slug in collect)
            warnings.append(f"{where}: collects {quoted} with no prompt and no ask; the AI has "
                            "nothing to go on. Add a prompt or an ask per field.")
    for j, branch in enumerate(step.get("branches", ())):
        if "when" not in branch and "if" not in branch:
            flow_error(where, f"branches[{j}] has neither when nor if",
                       "Give the branch an AI condition (when) or a code one (if).")
        if "when" in branch and "wait" in step:
            flow_error(where, f'branches[{j}] is a "when" branch, but a wait step is judged by '
                       "code only", 'Use "if", or move the branch to a talk step.')
        condition_names_check(branch.get("if", ABSENT), f"branches[{j}].if", where, names)
        edge(branch.get("then", ABSENT), f"branches[{j}].then")
    for j, instruction in enumerate(step.get("instructions", ())):
        condition_names_check(instruction.get("if", ABSENT), f"instructions[{j}].if", where, names)
    _tool_check(step.get("tools", ()), names, where)
    _tool_check(step.get("repeatTools", ()), names, where)
    if "do" in step:
        name = step["do"]
        if not _has_key(names.actions, name):
            flow_error(where, f'unknown action "{name}"', "Register it in actions or fix the name.")
        _with_check(name, action_parameters(names.actions[name]), step.get("with", {}), where)
        edge(step.get("onFail", ABSENT), "onFail")
    wait = step.get("wait", ABSENT)
    if isinstance(wait, str):
        _duration_check(wait, "wait", where)
    elif isinstance(wait, dict):
        if not _has_key(names.events, wait["event"]):
            flow_error(where, f'unknown event "{wait["event"]}" in wait',
                       "Register it in events or fix the name.")
        _duration_check(wait.get("upTo", ABSENT), "wait.upTo", where)
    if "if" in step:
        condition_names_check(step["if"], "if", where, names)
        if then_lands is not None and then_lands <= i and "else" not in step:
            back_to = step["then"]["step"] if isinstance(step["then"], dict) else step["then"]
            flow_error(where, f'"if" jumps back to "{back_to}" with no else',
                       "Add else so the false branch has somewhere to go.")


# Unknown keys and template references (a falai for Python addition) ------------
#
# Unknown keys stay in the flow (persistence.md §1.7 step 3); what is new is a
# warning naming the key, where it is and the closest known key. The key lists
# are the spec's tables: flows.md §3.1, §4, §5, §6, §12; persistence.md §1.2-§1.4.

FLOW_KEYS = ("id", "name", "description", "on", "anchor", "while", "collect", "clearOnStart",
             "steps", "onEnd", "instructions", "tools", "repeatTools")
TRIGGER_KEYS = (*TRIGGER_KINDS, "if", "repeat", "extract", "businessHours", "after")
BODY_KEYS = ("collect", "prompt", "say", "do", "wait", "if")
STEP_KEYS = ("id", "kind", "label", "then", "ui", *BODY_KEYS, "ask", "question", "maxAsks",
             "branches", "tools", "repeatTools", "instructions", "media", "once", "with", "onFail",
             "businessHours", "else")
BRANCH_KEYS = ("when", "if", "then")
INSTRUCTION_KEYS = ("id", "kind", "when", "if", "prompt")
TARGET_KEYS = ("step", "clear", "flow", "input")
WAIT_KEYS = ("event", "upTo")
FIELD_KEYS = ("type", "enum", "label", "description", "ask", "extract", "format", "validate",
              "correctable", "evidence")
PARAMETER_KEYS = ("type", "items", "enum", "description", "optional")
IDLE_KEYS = ("prompt", "instructions", "tools")
COMPACTION_KEYS = ("enabled", "maxTokens", "compactionThreshold", "preserveRecentCount",
                   "maxToolResultChars")


def _items(value: Any) -> list:
    """A list or tuple as a list; anything else (already reported by the shape check) as []."""
    return list(value) if isinstance(value, (list, tuple)) else []


def closest(word: Any, candidates: Iterable[str]) -> str | None:
    """The candidate a misspelt word most likely meant (difflib's ratio of 0.6 or more), or None."""
    import difflib  # only when a check needs it: `import falai` stays quick
    found = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _keys_found(mapping: dict, wanted: Iterable[str]) -> str:
    """The keys a rejected object has, and the wanted key one of them probably meant."""
    keys = [str(key) for key in mapping]
    wanted = list(wanted)
    if not keys:
        return "it has no keys"
    text = (f'its only key is "{keys[0]}"' if len(keys) == 1
            else f"its keys are {_quoted_kinds(keys)}")
    for key in keys:
        match = None if key in wanted else closest(key, wanted)
        if match:
            return f'{text} (did you mean "{match}" for "{key}"?)'
    return text


def unknown_key_warnings(mapping: Any, known: tuple, where: str) -> list[tuple[str, str]]:
    """(key, warning) for each key of ``mapping`` that is not in ``known``."""
    if not isinstance(mapping, dict):
        return []
    found = []
    for key in mapping:
        if key in known:
            continue
        match = closest(key, known)
        fix = f'Did you mean "{match}"?' if match else "Remove it or fix the name."
        found.append((key, f'{where}: unknown key "{key}" is kept but never read. {fix}'))
    return found


def _unknown_flow_keys(flow: dict, checks: Checks) -> None:
    """A warning per unknown key of the flow, its triggers, steps, branches, instructions, targets
    and waits."""
    where = f'flow "{flow["id"]}"' if isinstance(flow.get("id"), str) else "flow"

    def warn(mapping: Any, known: tuple, at: str, path: tuple) -> None:
        for key, text in unknown_key_warnings(mapping, known, at):
            checks.warn((*path, key), text)

    def instructions(owner: dict, at: str, path: tuple) -> None:
        for i, instruction in enumerate(_items(owner.get("instructions"))):
            warn(instruction, INSTRUCTION_KEYS, f"{at}, instructions[{i}]",
                 (*path, "instructions", i))

    def target(value: Any, label: str, at: str, path: tuple) -> None:
        if isinstance(value, dict):
            warn(value, TARGET_KEYS, f"{at}, {label}", path)

    warn(flow, FLOW_KEYS, where, ())
    instructions(flow, where, ())
    for i, trigger in enumerate(_items(flow.get("on"))):
        at = f"{where}, trigger #{i + 1}"
        warn(trigger, TRIGGER_KEYS, at, ("on", i))
        extract = trigger.get("extract") if isinstance(trigger, dict) else None
        for name, definition in (extract.items() if isinstance(extract, dict) else ()):
            warn(definition, PARAMETER_KEYS, f'{at}, extract "{name}"', ("on", i, "extract", name))
    for i, step in enumerate(flow["steps"]):
        if not isinstance(step, dict):
            continue
        at = step_where(where, step, i + 1)
        path = ("steps", i)
        warn(step, STEP_KEYS, at, path)
        instructions(step, at, path)
        for key in ("then", "else", "onFail"):
            target(step.get(key), key, at, (*path, key))
        if isinstance(step.get("wait"), dict):
            warn(step["wait"], WAIT_KEYS, f"{at}, wait", (*path, "wait"))
        for j, branch in enumerate(_items(step.get("branches"))):
            warn(branch, BRANCH_KEYS, f"{at}, branches[{j}]", (*path, "branches", j))
            if isinstance(branch, dict):
                target(branch.get("then"), f"branches[{j}].then", at,
                       (*path, "branches", j, "then"))


def template_reference_warnings(text: Any, label: str, where: str, fields: dict) -> list[str]:
    """A warning per ``{{data.x}}`` whose field x is not declared, or ``{{x}}`` whose root is
    none of data, context, input (flows.md §8.1: both are sent verbatim)."""
    if not isinstance(text, str) or "{{" not in text:
        return []
    found = []
    for match in PLACEHOLDER.finditer(text):
        path = match.group(1)
        root, _, rest = path.partition(".")
        slug = rest.split(".")[0]
        if root == "data" and slug not in fields:
            near = closest(slug, [str(name) for name in fields])
            fix = (f'Did you mean {{{{data.{near}}}}}?' if near
                   else "Declare the field or fix the name.")
            found.append(f'{where}: {label} refers to {match.group(0)}, but no field "{slug}" is '
                         f"declared, so it is sent as written. {fix}")
        elif root not in ("data", "context", "input"):
            fix = (f"Did you mean {{{{data.{root}}}}}?" if root in fields
                   else "A placeholder starts with data., context. or input.")
            found.append(f"{where}: {label} refers to {match.group(0)}, which is none of data, "
                         f"context, input, so it is sent as written. {fix}")
    return found


def _template_references(flow: dict, names: _FlowNames, checks: Checks) -> None:
    """The texts flows.md §8.3 renders with data in scope."""
    where = f'flow "{flow["id"]}"' if isinstance(flow.get("id"), str) else "flow"

    def check(text: Any, label: str, at: str, path: tuple) -> None:
        for warning in template_reference_warnings(text, label, at, names.fields):
            checks.warn(path, warning)

    def deep(value: Any, label: str, at: str, path: tuple) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                deep(item, f"{label}.{key}", at, (*path, key))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                deep(item, f"{label}[{i}]", at, (*path, i))
        else:
            check(value, label, at, path)

    def instructions(owner: dict, at: str, path: tuple) -> None:
        for i, instruction in enumerate(_items(owner.get("instructions"))):
            if isinstance(instruction, dict):
                check(instruction.get("prompt"), f"instructions[{i}].prompt", at,
                      (*path, "instructions", i))

    check(flow.get("description"), "description", where, ("description",))
    instructions(flow, where, ())
    for i, trigger in enumerate(_items(flow.get("on"))):
        for kind in ("message", "mention"):
            phrases = trigger.get(kind) if isinstance(trigger, dict) else None
            for j, phrase in enumerate(_items(phrases)):
                check(phrase, f"{kind}[{j}]", f"{where}, trigger #{i + 1}", ("on", i, kind, j))
    for i, step in enumerate(flow["steps"]):
        if not isinstance(step, dict):
            continue
        at, path = step_where(where, step, i + 1), ("steps", i)
        for key in ("say", "prompt", "question"):
            check(step.get(key), key, at, (*path, key))
        if isinstance(step.get("ask"), dict):
            for slug, text in step["ask"].items():
                check(text, f"ask.{slug}", at, (*path, "ask", slug))
        if "with" in step:
            deep(step["with"], "with", at, (*path, "with"))
        instructions(step, at, path)
        for j, branch in enumerate(_items(step.get("branches"))):
            if isinstance(branch, dict):
                check(branch.get("when"), f"branches[{j}].when", at, (*path, "branches", j, "when"))
        for key in ("then", "else", "onFail"):
            if isinstance(step.get(key), dict):
                check(step[key].get("flow"), f"{key}.flow", at, (*path, key, "flow"))


def check_flow(spec: Any, registries: dict | None = None) -> list[Problem]:
    """Every error and warning of a flow or FlowSpec at once, each with its path.

    For editors and CI.

    The same checks as ``validate_flow`` (persistence.md §1.10), plus the
    unknown keys and the ``{{data.x}}`` references to fields that do not exist.
    Errors come in the order validate_flow meets them, so the first is the one
    it raises. A unit (a step, a trigger, a flow-level key) stops at its first
    error; a unit whose shape is wrong has its names left unread. Never raises
    for a bad flow, never mutates ``spec``.

    ``[p.message for p in check_flow(spec, registries)
    if p.severity == "error"]``
    """
    checks = Checks(collect=True)
    flow = strip_nones(spec)
    if not checks.run((), flow_frame, flow):
        return checks.problems
    names = _FlowNames.of(registries)
    check_flow_shape(flow, checks)
    check_flow_names(flow, names, checks)
    _unknown_flow_keys(flow, checks)
    if registries is not None and "fields" in registries:
        _template_references(flow, names, checks)
    return checks.problems


def validate_flow(spec: Any, registries: dict | None = None, *,
                  strict: bool = False) -> FlowValidation:
    """Check a flow or FlowSpec against the agent's registries (persistence.md §1.10).

    Raises FlowConfigurationError on the first problem that would break at run
    time; otherwise returns the warnings. With ``strict=True`` a warning raises
    too (the first one). Never mutates ``spec``. ``check_flow`` lists them all.

    ``validate_flow(spec, {"fields": f.fields, "actions": {"notify": notify}}).warnings``
    """
    problems = check_flow(spec, registries)
    for problem in problems:
        if problem.severity == "error":
            raise FlowConfigurationError(problem.message)
    warnings = [problem.message for problem in problems]
    if strict and warnings:
        raise FlowConfigurationError(warnings[0])
    return FlowValidation(warnings=warnings)


# Agent construction (persistence.md §1.11, model-calls.md §6.9 and §9.1) ----------------------

def _scope_instructions_check(instructions: Any, where: str, names: _FlowNames) -> None:
    """Agent or idle instructions: their shape (inferred: nothing else checks it), then their
    names."""
    owner = strip_nones({"instructions": instructions})
    _instructions_check(owner, where)
    for i, instruction in enumerate(owner["instructions"]):
        condition_names_check(instruction.get("if", ABSENT), f"instructions[{i}].if", where, names)


def _check_idle(idle: Any, names: _FlowNames) -> None:
    if idle == "silent":
        return
    if not isinstance(idle, dict):
        flow_error("idle", f"is {show(idle)}, not an object",
                   'Write idle as { prompt: "..." }, or "silent" for no idle replies.')
    idle = strip_nones(idle)
    if "instructions" in idle:
        _scope_instructions_check(idle["instructions"], "idle", names)
    tools = idle.get("tools", ABSENT)
    _list_check(tools, "tools", "idle")
    if tools is not ABSENT:
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
        raise ValueError(f"[CompactionEngine] compaction is {show(config)}: it must be an object "
                         "such as { maxTokens: 8000 }. Pass a dict, or leave compaction out to "
                         "turn it off.")
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
            if value is None:
                near = [other for other in config
                        if other not in COMPACTION_KEYS and closest(other, [key])]
                shown += f' (did you mean "{key}" for "{near[0]}"?)' if near else ""
            raise ValueError(f"[CompactionEngine] {key} is {shown}: it must be {rule_text}. {fix}.")


FIELD_TYPES = ("string", "number", "integer", "boolean")
EXTRACT_MODES = ("anywhere", "asked", "never")
# What people write for a field type, and the type they mean (inferred): named in the message.
TYPE_ALIASES = {"str": "string", "text": "string", "int": "integer", "float": "number",
                "bool": "boolean"}


def check_field_definition(slug: Any, definition: Any) -> list[str]:
    """One entry of the agent's fields (flows.md §2.1; checked at construction, inferred).

    Returns its warnings.

    Raises FlowConfigurationError naming the field and the fix: not an object,
    no type or one that is not a field type, an enum that is not a non-empty
    list of values of that type (or any enum on a boolean), an extract other
    than "anywhere", "asked" or "never", a label, description or ask that is
    not text.
    """
    where = f'field "{slug}"'
    if not isinstance(definition, dict):
        example = json_literal(definition) if definition in FIELD_TYPES else '"string"'
        flow_error(where, f"is {show(definition)}, not an object",
                   f"Write it as {{ \"type\": {example} }}.")
    definition = strip_nones(definition)
    kind = definition.get("type", ABSENT)
    if kind is ABSENT:
        flow_error(where, f"has no type; {_keys_found(definition, FIELD_KEYS)}",
                   'Add "type": "string", "number", "integer" or "boolean".')
    if kind not in FIELD_TYPES:
        if kind == "enum":
            fix = 'Use "type": "string" with "enum": [...].'
        else:
            near = ((TYPE_ALIASES.get(kind) or closest(kind, FIELD_TYPES))
                    if isinstance(kind, str) else None)
            fix = (f'Did you mean "{near}"?' if near
                   else 'Use "string", "number", "integer" or "boolean".')
        flow_error(where, f"type {show(kind)} is not a field type", fix)
    if "enum" in definition:
        values = definition["enum"]
        if kind == "boolean":
            flow_error(where, "is a boolean with an enum, and a boolean never matches an enum",
                       "Remove enum, or make the field a string with the options as text.")
        if not isinstance(values, (list, tuple)) or not values:
            flow_error(where, f"enum is {show(values)}, not a non-empty list",
                       'Write enum as the list of allowed values, such as ["P", "M", "G"].')
        for i, value in enumerate(values):
            if not _type_fits(definition, value):
                flow_error(where, f"enum[{i}] is {show(value)}, not {article(kind)} {kind}",
                           f"Write every value of enum as {article(kind)} {kind}, or change the "
                           "type.")
    if "extract" in definition and definition["extract"] not in EXTRACT_MODES:
        flow_error(where, f'extract is {show(definition["extract"])}, which is not one of '
                   + ", ".join(f'"{mode}"' for mode in EXTRACT_MODES), "Use one of them.")
    for key in ("label", "description", "ask"):
        if key in definition and not isinstance(definition[key], str):
            flow_error(where, f"{key} is {show(definition[key])}, not text",
                       f"Write {key} as a string.")
    if "format" in definition:
        if definition["format"] not in FIELD_FORMATS:
            given = definition["format"]
            near = closest(given, FIELD_FORMATS) if isinstance(given, str) else None
            flow_error(where, f'format is {show(definition["format"])}, which is not one of '
                       + ", ".join(f'"{name}"' for name in FIELD_FORMATS),
                       f'Did you mean "{near}"?' if near else "Use one of them.")
        if kind != "string":
            flow_error(where, f'has format "{definition["format"]}" but type {show(kind)}',
                       'A format checks text: make the field "type": "string".')
    if "correctable" in definition and not isinstance(definition["correctable"], bool):
        flow_error(where, f'correctable is {show(definition["correctable"])}, not true or false',
                   "Write true to let the customer correct a known value, or leave it out.")
    if "evidence" in definition and definition["evidence"] != "message":
        flow_error(where, f'evidence is {show(definition["evidence"])}, not "message"',
                   'Write "evidence": "message" to keep only values the customer\'s own message '
                   "says, or leave it out.")
    if "validate" in definition and not callable(definition["validate"]):
        flow_error(where, f'validate is {show(definition["validate"])}, not a function',
                   "Pass a Python function value -> value to keep (raise to refuse); a JSON "
                   "registry cannot hold one.")
    return [text for _, text in unknown_key_warnings(definition, FIELD_KEYS, where)]


def _agent_key_warnings(agent: Agent) -> list[str]:
    """Unknown keys outside the flows: action parameters, agent and idle instructions, idle,
    compaction."""
    found: list[tuple[str, str]] = []
    for name, action in agent.actions.items():
        for parameter, definition in action_parameters(action).items():
            found += unknown_key_warnings(definition, PARAMETER_KEYS,
                                          f'action "{name}", parameter "{parameter}"')
    scopes: list[tuple[str, Any]] = [("agent", agent.instructions)]
    if isinstance(agent.idle, dict):
        found += unknown_key_warnings(agent.idle, IDLE_KEYS, "idle")
        scopes.append(("idle", agent.idle.get("instructions")))
    for where, instructions in scopes:
        for i, instruction in enumerate(_items(instructions)):
            found += unknown_key_warnings(instruction, INSTRUCTION_KEYS,
                                          f"{where}, instructions[{i}]")
    found += unknown_key_warnings(agent.compaction, COMPACTION_KEYS, "compaction")
    return [text for _, text in found]


def _agent_template_warnings(agent: Agent) -> list[str]:
    """``{{data.x}}`` references outside the flows: field asks, persona, goal, idle and agent
    instructions."""
    fields = agent.fields
    found = []
    for slug, definition in fields.items():
        ask = as_definition(definition).get("ask")
        found += template_reference_warnings(ask, "ask", f'field "{slug}"', fields)
    found += template_reference_warnings(agent.persona, "persona", "agent", fields)
    found += template_reference_warnings(agent.goal, "goal", "agent", fields)
    scopes: list[tuple[str, Any]] = [("agent", agent.instructions)]
    if isinstance(agent.idle, dict):
        found += template_reference_warnings(agent.idle.get("prompt"), "prompt", "idle", fields)
        scopes.append(("idle", agent.idle.get("instructions")))
    for where, instructions in scopes:
        for i, instruction in enumerate(_items(instructions)):
            prompt = instruction.get("prompt") if isinstance(instruction, dict) else None
            found += template_reference_warnings(prompt, f"instructions[{i}].prompt", where, fields)
    return found


def _tool_schema_check(tool: Any, parameters: dict) -> None:
    """With jsonschema installed (the optional extra), a tool's parameters must be a valid JSON
    Schema (Draft 2020-12); without it, nothing is checked beyond the object rule."""
    try:
        import jsonschema  # optional, and only here: `import falai` stays stdlib-only
    except ImportError:
        return
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as error:
        at = "/".join(str(part) for part in error.absolute_path) or "the top level"
        raise FlowConfigurationError(f'tool "{getattr(tool, "id", tool)}": parameters is not a '
                                     f"valid JSON Schema at {at}: {error.message}. Fix the schema "
                                     "(JSON Schema 2020-12).") from None


def check_agent(agent: Agent) -> list[str]:
    """The construction checks of persistence.md §1.11 and model-calls.md §9.1; returns warnings.

    Raises FlowConfigurationError (ValueError for compaction) on the first
    problem, in this order: field definitions, reserved condition
    names, agent instructions, each flow (a repeated id, then validate_flow),
    tool parameters, idle, compaction. The warnings: the flows', then unknown
    keys and template references outside the flows.
    """
    if not isinstance(agent.fields, dict):
        raise FlowConfigurationError(f"fields is {show(agent.fields)}, not an object. Pass a dict "
                                     "of field definitions, such as "
                                     '{ "nome": { "type": "string" } }.')
    warnings: list[str] = []
    for slug, definition in agent.fields.items():
        warnings.extend(check_field_definition(slug, definition))
    for name in agent.conditions:
        if name in RESERVED_CONDITIONS:
            raise FlowConfigurationError(f'condition "{name}" shadows a built-in: equals, known, '
                                         "unknown, not, silenced are reserved. Rename it.")
    registries = {"fields": agent.fields, "actions": agent.actions, "events": agent.events,
                  "conditions": agent.conditions, "tools": agent.tools, "flows": agent.flows}
    names = _FlowNames.of(registries)
    _scope_instructions_check(agent.instructions, "agent", names)
    flow_warnings: list[str] = []
    seen: set[str] = set()
    for flow in agent.flows:
        flow_id = flow.get("id") if isinstance(flow, dict) else None
        if isinstance(flow_id, str) and flow_id in seen:
            raise FlowConfigurationError(f'flow "{flow_id}" is declared twice: flow ids must be '
                                         "unique. Rename one of them.")
        if isinstance(flow_id, str):
            seen.add(flow_id)
        flow_warnings.extend(validate_flow(flow, registries).warnings)
    for tool in agent.tools:
        parameters = getattr(tool, "parameters", None)
        if parameters is not None and not (isinstance(parameters, dict)
                                           and parameters.get("type") == "object"):
            raise FlowConfigurationError(f'tool "{getattr(tool, "id", tool)}": parameters must be '
                                         'a JSON Schema object. Write { type: "object", '
                                         "properties: { ... }, required: [...] }.")
        if parameters is not None:
            _tool_schema_check(tool, parameters)
    _check_idle(agent.idle, names)
    check_compaction(agent.compaction)
    return flow_warnings + warnings + _agent_key_warnings(agent) + _agent_template_warnings(agent)
