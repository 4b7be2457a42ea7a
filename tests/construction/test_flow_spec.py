"""FlowSpec JSON: from_spec, to_spec, the round-trip laws and flow_spec_schema.

persistence.md §1.1-§1.9 and §1.12.
"""
import copy
import functools
import json

import pytest
from hypothesis import given, settings, strategies as st

from falai import (Action, Condition, EventDef, FlowConfigurationError, falai, flow_spec_schema, from_spec,
                   to_spec, validate_flow)


# from_spec (persistence.md §1.7) -----------------------------------------------------------------

def test_from_spec_strips_nones_and_kinds_spec_example():
    """persistence.md §1.7, the example."""
    row = {"id": "g", "name": "Gerado", "description": None, "on": None,
           "steps": [{"id": "a", "kind": "say", "say": "Oi!", "then": None, "media": None},
                     {"id": "b", "kind": "wait", "wait": "2d", "else": "end", "branches": None}]}
    assert from_spec(row) == {"id": "g", "name": "Gerado",
                              "steps": [{"id": "a", "say": "Oi!"}, {"id": "b", "wait": "2d", "else": "end"}]}


def test_the_toolkit_from_spec_is_the_same_function():
    """persistence.md §1.7: f.from_spec(spec) on the toolkit is the same function."""
    spec = {"id": "g", "name": "G", "steps": [{"id": "a", "kind": "say", "say": "Oi", "then": None}]}
    expected = {"id": "g", "name": "G", "steps": [{"id": "a", "say": "Oi"}]}
    assert falai().from_spec(spec) == expected
    assert falai().fields({}).from_spec(spec) == expected


def test_from_spec_strips_nones_at_any_depth_but_keeps_list_length():
    """persistence.md §1.7 step 1: every dict loses its None keys, recursively."""
    spec = {"id": "g", "name": "G", "on": [{"message": ["oi"], "if": None, "repeat": None}],
            "steps": [{"id": "a", "kind": "if", "if": {"equals": {"nome": None, "plano": "pro"}, "known": None},
                       "then": {"step": "a", "clear": None}, "else": None}]}
    assert from_spec(spec) == {"id": "g", "name": "G", "on": [{"message": ["oi"]}],
                               "steps": [{"id": "a", "if": {"equals": {"plano": "pro"}}, "then": {"step": "a"}}]}


def test_from_spec_runs_the_shape_check():
    """persistence.md §1.7 step 2: any phase-1 failure raises."""
    with pytest.raises(FlowConfigurationError) as caught:
        from_spec({"id": "fx", "name": "FX", "steps": [{"id": "a", "kind": "collect", "collect": "nome"}]})
    assert str(caught.value) == ('[FlowConfigurationError] flow "fx", step "a": collect is "nome", not a list. '
                                 'Write collect: ["nome"].')


def test_from_spec_rejects_a_kind_that_disagrees_with_the_body():
    """persistence.md §1.6: when a spec's kind is set it must equal the body kind."""
    with pytest.raises(FlowConfigurationError, match='has kind "do", but its body is a "say" step'):
        from_spec({"id": "fx", "steps": [{"id": "a", "kind": "do", "say": "Oi"}]})


def test_from_spec_reports_a_none_inside_a_list():
    """persistence.md §1.7 step 1: a None inside a list stays, so the shape check reports it."""
    with pytest.raises(FlowConfigurationError, match=r"steps\[1\] is null, not an object"):
        from_spec({"id": "fx", "steps": [{"id": "a", "say": "Oi"}, None]})


def test_from_spec_does_not_check_names():
    """persistence.md §1.7: unknown fields, actions, events, conditions, tools and targets pass."""
    spec = {"id": "fx", "name": "FX", "on": [{"event": "nada", "if": {"nada": 1}}], "tools": ["nada"],
            "steps": [{"id": "a", "kind": "collect", "collect": ["nada"], "then": "nowhere"},
                      {"id": "b", "kind": "do", "do": "nada", "with": {"x": 1}},
                      {"id": "b", "kind": "wait", "wait": "5 min"}]}
    flow = from_spec(spec)
    assert [step.get("kind") for step in flow["steps"]] == [None, None, None]


def test_from_spec_keeps_unknown_keys_and_steps_without_kind():
    """persistence.md §1.7 step 3: nothing else changes; a step without kind is accepted."""
    spec = {"id": "fx", "name": "FX", "x-editor": {"color": "blue"},
            "steps": [{"id": "a", "say": "Oi", "ui": {"x": 1}, "note": "keep"}]}
    assert from_spec(spec) == spec


def test_from_spec_never_mutates_its_input_and_returns_a_copy():
    """persistence.md §1.7 step 1: the input is never mutated."""
    spec = {"id": "fx", "name": None, "steps": [{"id": "a", "kind": "say", "say": "Oi", "media": {"slug": "x"}}]}
    before = copy.deepcopy(spec)
    flow = from_spec(spec)
    flow["steps"][0]["media"]["slug"] = "changed"
    assert spec == before


def test_from_spec_keeps_callables():
    """persistence.md §1.7 step 1: callables and other leaves are kept as they are."""
    check = lambda ctx: True  # noqa: E731
    assert from_spec({"id": "fx", "steps": [{"id": "a", "if": check}]})["steps"][0]["if"] is check


# to_spec (persistence.md §1.8) ---------------------------------------------------------------------

def test_to_spec_spec_example_and_its_round_trip():
    """persistence.md §1.9, the example."""
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome."}})
    flow = f.flow({"id": "k", "name": "K", "steps": [
        {"id": "a", "prompt": "Descubra.", "collect": ["nome"]},
        {"id": "b", "prompt": "Agradeça."}]})
    spec = to_spec(flow)
    assert spec["steps"][0] == {"id": "a", "kind": "collect", "prompt": "Descubra.", "collect": ["nome"]}
    assert spec["steps"][1] == {"id": "b", "kind": "prompt", "prompt": "Agradeça."}
    assert from_spec(spec) == flow


def test_to_spec_writes_flow_keys_in_order_and_drops_the_rest():
    """persistence.md §1.8: id, name, description, on, anchor, while, collect, clearOnStart, steps, onEnd,
    instructions, tools; any other flow key is dropped."""
    flow = {"tools": [], "instructions": [{"prompt": "p"}], "onEnd": "stay", "steps": [{"id": "a", "prompt": "p"}],
            "clearOnStart": ["x"], "collect": ["x"], "while": {"known": ["x"]}, "anchor": "lead",
            "on": [{"message": []}], "description": "d", "name": "N", "id": "f", "x-editor": 1, "version": 3}
    assert list(to_spec(flow)) == ["id", "name", "description", "on", "anchor", "while", "collect",
                                   "clearOnStart", "steps", "onEnd", "instructions", "tools"]


@pytest.mark.parametrize("step, expected", [
    ({"id": "s", "say": "Oi", "media": {"slug": "logo"}, "once": True, "then": "end", "maxAsks": 2},
     {"id": "s", "then": "end", "kind": "say", "say": "Oi", "media": {"slug": "logo"}, "once": True}),
    ({"id": "d", "do": "notify", "with": {"to": "x"}, "onFail": "end", "else": "x", "label": "L"},
     {"id": "d", "label": "L", "kind": "do", "do": "notify", "with": {"to": "x"}, "onFail": "end"}),
    ({"id": "w", "wait": "1h", "businessHours": True, "else": "a", "branches": [{"if": {}, "then": "a"}],
      "ui": {"x": 1}, "onFail": "a"},
     {"id": "w", "ui": {"x": 1}, "kind": "wait", "wait": "1h", "businessHours": True, "else": "a",
      "branches": [{"if": {}, "then": "a"}]}),
    ({"id": "e", "wait": {"event": "booked", "upTo": "7d"}, "else": "a", "businessHours": True},
     {"id": "e", "kind": "waitEvent", "wait": {"event": "booked", "upTo": "7d"}, "else": "a"}),
    ({"id": "i", "if": {"known": ["nome"]}, "else": "end", "then": "a", "prompt": None},
     {"id": "i", "then": "a", "kind": "if", "if": {"known": ["nome"]}, "else": "end"}),
    ({"id": "c", "collect": ["nome"], "prompt": "p", "question": "q", "ask": {"nome": "?"}, "maxAsks": 2,
      "branches": [], "tools": ["t"], "instructions": [{"prompt": "i"}], "once": True},
     {"id": "c", "kind": "collect", "collect": ["nome"], "prompt": "p", "question": "q", "ask": {"nome": "?"},
      "maxAsks": 2, "branches": [], "tools": ["t"], "instructions": [{"prompt": "i"}]}),
    ({"id": "p", "prompt": "p", "ask": {"nome": "?"}, "maxAsks": 1, "branches": [], "tools": [],
      "instructions": [], "say": None, "media": {"slug": "x"}},
     {"id": "p", "kind": "prompt", "prompt": "p", "ask": {"nome": "?"}, "maxAsks": 1, "branches": [],
      "tools": [], "instructions": []}),
])
def test_to_spec_writes_each_kind_with_only_its_keys(step, expected):
    """persistence.md §1.8: {id, label?, then?, ui?, kind, ...} with only the kind's keys, in order."""
    written = to_spec({"id": "f", "name": "F", "steps": [step]})["steps"][0]
    assert written == expected
    assert list(written) == list(expected)


def test_to_spec_never_writes_none():
    """persistence.md §1.8: a key whose value is None is left out, at any depth."""
    flow = {"id": "f", "name": "F", "description": None, "anchor": None,
            "on": [{"message": ["oi"], "if": None, "repeat": {"cooldown": "1d"}}],
            "instructions": [{"prompt": "p", "kind": None}],
            "steps": [{"id": "a", "say": "Oi", "then": {"step": "a", "clear": None}, "media": None}]}
    assert to_spec(flow) == {"id": "f", "name": "F", "on": [{"message": ["oi"], "repeat": {"cooldown": "1d"}}],
                             "instructions": [{"prompt": "p"}],
                             "steps": [{"id": "a", "then": {"step": "a"}, "kind": "say", "say": "Oi"}]}


def test_to_spec_copies_and_never_mutates():
    """persistence.md §1.8: a deep copy is fine; json.dumps always works on a spec."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "n", "with": {"tags": ["a"]}}]}
    before = copy.deepcopy(flow)
    spec = to_spec(flow)
    spec["steps"][0]["with"]["tags"].append("b")
    assert flow == before
    json.dumps(spec)


def storable_error(flow):
    with pytest.raises(FlowConfigurationError) as caught:
        to_spec(flow)
    return str(caught.value)


FUNCTION_FIX = ("is a function, which cannot be stored as JSON. Write it as a condition ({ equals }, { known }, "
                "{ silenced } or a named condition) to store this flow.")


@pytest.mark.parametrize("flow, where", [
    ({"id": "vip", "on": [{"message": ["oi"], "if": lambda ctx: True}], "steps": []}, 'flow "vip", trigger #1 if'),
    ({"id": "vip", "on": [{"message": []}, {"event": "e", "if": lambda ctx: True}], "steps": []},
     'flow "vip", trigger #2 if'),
    ({"id": "vip", "while": lambda ctx: True, "steps": []}, 'flow "vip", while'),
    ({"id": "vip", "instructions": [{"prompt": "a"}, {"prompt": "b", "if": lambda ctx: True}], "steps": []},
     'flow "vip", instructions[1].if'),
    ({"id": "fn", "steps": [{"id": "gate", "if": lambda ctx: True}]}, 'flow "fn", step "gate" if'),
    ({"id": "fn", "steps": [{"id": "s", "prompt": "p", "branches": [{"when": "w", "then": "s"},
                                                                    {"if": lambda ctx: 1, "then": "s"}]}]},
     'flow "fn", step "s" branches[1].if'),
    ({"id": "fn", "steps": [{"id": "s", "prompt": "p", "instructions": [{"prompt": "i", "if": lambda c: 1}]}]},
     'flow "fn", step "s" instructions[0].if'),
])
def test_to_spec_refuses_function_predicates(flow, where):
    """persistence.md §1.8 errors, including the two example messages."""
    assert storable_error(flow) == f"[FlowConfigurationError] {where}: {FUNCTION_FIX}"


def test_to_spec_example_messages_word_for_word():
    """persistence.md §1.8, the example messages."""
    assert storable_error({"id": "vip", "on": [{"message": [], "if": lambda ctx: True}], "steps": []}) == (
        '[FlowConfigurationError] flow "vip", trigger #1 if: is a function, which cannot be stored as JSON. '
        "Write it as a condition ({ equals }, { known }, { silenced } or a named condition) to store this flow.")
    assert storable_error({"id": "fn", "steps": [{"id": "gate", "if": lambda ctx: True}]}) == (
        '[FlowConfigurationError] flow "fn", step "gate" if: is a function, which cannot be stored as JSON. '
        "Write it as a condition ({ equals }, { known }, { silenced } or a named condition) to store this flow.")


def test_to_spec_a_step_with_no_body_has_neither_prompt_nor_collect():
    """persistence.md §1.8: the `otherwise` row."""
    assert storable_error({"id": "f", "steps": [{"id": "s", "question": "Qual?"}]}) == (
        '[FlowConfigurationError] flow "f", step "s": has neither prompt nor collect. '
        "A talk step needs a guideline, fields to collect, or both.")


def test_to_spec_a_prompt_step_cannot_carry_a_question():
    """persistence.md §1.8; §1.3: a fixed question needs fields to ask for."""
    assert storable_error({"id": "f", "steps": [{"id": "s", "prompt": "p", "question": "Qual?"}]}) == (
        '[FlowConfigurationError] flow "f", step "s": has a question but collects nothing. '
        "A fixed question asks for fields: add collect, or send the text with a say step.")


# Round-trip laws (persistence.md §1.9) ---------------------------------------------------------------

slug = st.sampled_from(["nome", "cargo", "porte", "e-mail"])
text = st.text(max_size=6)
words = st.text(alphabet="abcdefgh-_ ", min_size=1, max_size=6)
duration = st.builds(lambda n, unit: f"{n}{unit}", st.integers(0, 99), st.sampled_from("smhd"))
scalar = st.one_of(st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), text)
json_value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(words, inner, max_size=3)), max_leaves=6)
condition = st.fixed_dictionaries({}, optional={
    "equals": st.dictionaries(slug, scalar, max_size=2), "known": st.lists(slug, max_size=2),
    "silenced": st.booleans(), "vip": json_value})
next_ = st.one_of(words, st.just("end"), st.fixed_dictionaries({"step": words}, optional={"clear": st.lists(slug)}),
                  st.fixed_dictionaries({"flow": words}, optional={"input": json_value}))
instruction = st.fixed_dictionaries({"prompt": text}, optional={
    "id": words, "kind": st.sampled_from(["must", "never", "should"]),
    "when": st.one_of(text, st.lists(text, max_size=2)), "if": condition})
branch = st.one_of(st.fixed_dictionaries({"when": text, "then": next_}),
                   st.fixed_dictionaries({"if": condition, "then": next_}))
talk = {"ask": st.dictionaries(slug, text, max_size=2), "maxAsks": st.integers(1, 5),
        "branches": st.lists(branch, max_size=2), "tools": st.lists(words, max_size=2),
        "instructions": st.lists(instruction, max_size=2)}
bodies = {
    "prompt": ({"prompt": text}, talk),
    "collect": ({"collect": st.lists(slug, max_size=3)}, {**talk, "prompt": text, "question": text}),
    "say": ({"say": text}, {"media": st.fixed_dictionaries({"slug": words}), "once": st.booleans()}),
    "do": ({"do": words}, {"with": st.dictionaries(words, json_value, max_size=3), "onFail": next_}),
    "wait": ({"wait": duration}, {"businessHours": st.booleans(), "else": next_,
                                  "branches": st.lists(st.fixed_dictionaries({"if": condition, "then": next_}),
                                                       max_size=2)}),
    "waitEvent": ({"wait": st.fixed_dictionaries({"event": words}, optional={"upTo": duration})},
                  {"else": next_}),
    "if": ({"if": condition}, {"else": next_}),
}


@st.composite
def spec_step(draw):
    kind = draw(st.sampled_from(sorted(bodies)))
    required, optional = bodies[kind]
    body = draw(st.fixed_dictionaries({"id": words, **required}, optional={
        "label": text, "then": next_, "ui": st.dictionaries(words, json_value, max_size=2), **optional}))
    return {**body, "kind": kind}


trigger = st.one_of(
    st.fixed_dictionaries({"message": st.lists(text, max_size=3)}),
    st.fixed_dictionaries({"mention": st.lists(text, max_size=3)},
                          optional={"extract": st.dictionaries(words, st.fixed_dictionaries(
                              {"type": st.sampled_from(["string", "number"])}), max_size=2)}),
    st.fixed_dictionaries({"silence": duration}, optional={"businessHours": st.booleans()}),
    st.fixed_dictionaries({"event": words}, optional={"after": duration, "businessHours": st.booleans()}),
).flatmap(lambda base: st.fixed_dictionaries({k: st.just(v) for k, v in base.items()}, optional={
    "if": condition, "repeat": st.one_of(st.sampled_from(["once", "always"]),
                                         st.fixed_dictionaries({"cooldown": duration}))}))

spec_flow = st.fixed_dictionaries({"id": words, "name": text, "steps": st.lists(spec_step(), max_size=4)}, optional={
    "description": text, "on": st.lists(trigger, max_size=3), "anchor": words, "while": condition,
    "collect": st.lists(slug, max_size=3), "clearOnStart": st.lists(slug, max_size=2),
    "onEnd": st.sampled_from(["end", "stay", "reset"]), "instructions": st.lists(instruction, max_size=2),
    "tools": st.lists(words, max_size=2)})


@st.composite
def with_nones(draw, value, in_equals=False):
    """The value with None-valued keys sprinkled into its dicts (known keys and new ones).

    Not into a condition's ``equals``: one whose every value is None tests nothing, which
    from_spec keeps for validation to refuse (flows.md §7.2, a falai for Python rule)."""
    if isinstance(value, list):
        return [draw(with_nones(item)) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: draw(with_nones(item, key == "equals")) for key, item in value.items()}
    if in_equals:
        return out
    for key in draw(st.lists(st.sampled_from(["then", "else", "label", "description", "if", "kind", "clear",
                                              "prompt", "zz"]), max_size=2)):
        out.setdefault(key, None)
    return out


@settings(max_examples=300, deadline=None)
@given(spec_flow)
def test_law_to_spec_of_from_spec_is_the_spec(spec):
    """persistence.md §1.9 law 1: to_spec(from_spec(spec)) == spec with no None and only allowed keys."""
    assert to_spec(from_spec(spec)) == spec


@settings(max_examples=300, deadline=None)
@given(spec_flow.flatmap(lambda spec: st.tuples(st.just(spec), with_nones(spec))))
def test_law_with_nones_the_round_trip_removes_them(pair):
    """persistence.md §1.9 law 2: with Nones, to_spec(from_spec(spec)) is spec without its None keys."""
    spec, nullified = pair
    assert to_spec(from_spec(nullified)) == spec


@settings(max_examples=300, deadline=None)
@given(spec_flow)
def test_law_from_spec_of_to_spec_is_the_flow(spec):
    """persistence.md §1.9 law 3: from_spec(to_spec(flow)) == flow for a flow without callables or Nones."""
    flow = from_spec(spec)
    assert all("kind" not in step for step in flow["steps"])
    assert from_spec(to_spec(flow)) == flow


def test_law_key_order_is_not_significant():
    """persistence.md §1.9: dict equality, key order ignored."""
    spec = {"steps": [{"say": "Oi", "kind": "say", "id": "a"}], "name": "N", "id": "f"}
    assert to_spec(from_spec(spec)) == spec


# flow_spec_schema (persistence.md §1.12) --------------------------------------------------------------

def _run(params, ctx):
    return None


FIELDS = {"nome": {"type": "string", "ask": "Pergunte o nome.", "extract": "anywhere", "label": "Nome"},
          "tamanho": {"type": "string", "enum": ["1-10", "11-50"], "description": "Porte"},
          "orcamento": {"type": "number", "description": ""},
          "confirmado": {"type": "boolean"}}
ACTIONS = {"notify": Action(parameters={"texto": {"type": "string", "description": "O aviso"}}, run=_run),
           "add_tags": Action(parameters={"tags": {"type": "array", "items": {"type": "string"}},
                                          "urgent": {"type": "boolean", "optional": True},
                                          "canal": {"type": "string", "enum": ["email", "sms"], "optional": True},
                                          "nivel": {"type": "integer", "enum": [1, 2]}}, run=_run),
           "send_template": Action(parameters={}, run=_run)}
EVENTS = {"booked": EventDef(), "stage_entered": EventDef(direction="inbound")}
CONDITIONS = {"vip": Condition(check=lambda ctx, arg: True), "tagsAny": Condition(check=lambda ctx, arg: True)}
FULL = {"fields": FIELDS, "actions": ACTIONS, "events": EVENTS, "conditions": CONDITIONS}


def walk(schema):
    """Every schema inside: itself, its properties, items and anyOf branches."""
    yield schema
    for child in schema.get("properties", {}).values():
        yield from walk(child)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"])
    for branch in schema.get("anyOf", []):
        yield from walk(branch)


def types_of(schema):
    kind = schema.get("type")
    return kind if isinstance(kind, list) else [kind]


def assert_strict(schema):
    for node in walk(schema):
        if "object" in types_of(node):
            assert node["additionalProperties"] is False, node
            assert node["required"] == list(node["properties"]), node


def step_variants(schema):
    return schema["properties"]["steps"]["items"]["anyOf"]


def variant(schema, kind, index=0):
    return [v for v in step_variants(schema) if v["properties"]["kind"]["enum"] == [kind]][index]


def kinds(schema):
    return sorted({v["properties"]["kind"]["enum"][0] for v in step_variants(schema)})


def condition_of(schema):
    return variant(schema, "if")["properties"]["if"]


@pytest.mark.parametrize("registries", [None, {}, {"fields": FIELDS}, {"actions": ACTIONS}, {"events": EVENTS},
                                        {"conditions": CONDITIONS}, FULL])
def test_schema_is_closed_and_fully_required_everywhere(registries):
    """persistence.md §1.12 rule 1 and the strictness property."""
    assert_strict(flow_spec_schema(registries))


definition = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "number", "integer", "boolean"])},
                          optional={"description": text, "enum": st.lists(scalar, max_size=3),
                                    "optional": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("array"), "items": st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer"])}, optional={"enum": st.lists(text, max_size=2)})},
        optional={"optional": st.booleans(), "description": text}))
registries_strategy = st.fixed_dictionaries({}, optional={
    "fields": st.dictionaries(words, st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "number", "integer", "boolean"])},
        optional={"enum": st.lists(text, max_size=3), "description": text, "ask": text}), max_size=3),
    "actions": st.dictionaries(words, st.builds(lambda p: Action(parameters=p, run=_run),
                                                st.dictionaries(words, definition, max_size=3)), max_size=3),
    "events": st.dictionaries(words, st.just(EventDef()), max_size=2),
    "conditions": st.dictionaries(words, st.just(Condition(check=lambda ctx, arg: True)), max_size=2)})


@settings(max_examples=40, deadline=None)
@given(registries_strategy)
def test_schema_strictness_and_validity_hold_for_any_registries(registries):
    """persistence.md §1.12: strictness holds for any set of fields, actions, events and conditions;
    nullable enums end with null; the result is a valid Draft 2020-12 schema."""
    import jsonschema
    schema = flow_spec_schema(registries)
    assert_strict(schema)
    for node in walk(schema):
        if "null" in types_of(node) and "enum" in node:
            assert node["enum"][-1] is None
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_with_only_fields():
    """persistence.md §1.12: kinds collect, if, prompt, say, wait; wait branches items have exactly if and
    then; `on` items have three variants."""
    schema = flow_spec_schema({"fields": FIELDS})
    assert kinds(schema) == ["collect", "if", "prompt", "say", "wait"]
    wait_branch = variant(schema, "wait")["properties"]["branches"]["items"]
    assert list(wait_branch["properties"]) == ["if", "then"]
    assert len(schema["properties"]["on"]["items"]["anyOf"]) == 3


def test_schema_with_everything():
    """persistence.md §1.12, the properties a test can rely on with fields, actions, events, conditions."""
    schema = flow_spec_schema(FULL)
    slugs = list(FIELDS)
    props = schema["properties"]
    assert kinds(schema) == ["collect", "do", "if", "prompt", "say", "wait", "waitEvent"]
    do_variants = [v for v in step_variants(schema) if v["properties"]["kind"]["enum"] == ["do"]]
    assert [v["properties"]["do"]["enum"] for v in do_variants] == [["notify"], ["add_tags"], ["send_template"]]
    with_ = do_variants[1]["properties"]["with"]["properties"]
    assert with_["tags"] == {"type": "array", "items": {"type": "string"}}
    assert with_["urgent"] == {"type": ["boolean", "null"]}
    assert do_variants[1]["properties"]["with"]["required"] == ["tags", "urgent", "canal", "nivel"]
    assert variant(schema, "collect")["properties"]["collect"]["items"]["enum"] == slugs
    assert props["clearOnStart"]["items"]["enum"] == slugs
    assert props["collect"]["items"]["enum"] == slugs
    assert variant(schema, "collect")["properties"]["question"]["type"] == ["string", "null"]
    assert variant(schema, "waitEvent")["properties"]["wait"]["properties"]["event"]["enum"] == list(EVENTS)
    event_trigger = props["on"]["items"]["anyOf"][3]
    assert event_trigger["properties"]["event"]["enum"] == list(EVENTS)
    assert list(condition_of(schema)["properties"]) == ["equals", "known", "silenced", "vip", "tagsAny"]
    assert props["description"]["type"] == ["string", "null"]
    assert {"type": "null"} in variant(schema, "say")["properties"]["then"]["anyOf"]
    for field_prop in condition_of(schema)["properties"]["equals"]["properties"].values():
        assert "ask" not in field_prop


def test_schema_an_action_with_no_parameters_has_no_with():
    """persistence.md §1.12 rule 3."""
    schema = flow_spec_schema(FULL)
    template = [v for v in step_variants(schema)
                if v["properties"].get("do", {}).get("enum") == ["send_template"]][0]
    assert list(template["properties"]) == ["id", "label", "then", "kind", "do", "onFail"]


def test_schema_empty_registries_drop_variants():
    """persistence.md §1.12 rule 3: no fields, actions or events -> fewer variants and properties."""
    schema = flow_spec_schema()
    assert kinds(schema) == ["if", "prompt", "say", "wait"]
    assert "collect" not in schema["properties"] and "clearOnStart" not in schema["properties"]
    assert list(condition_of(schema)["properties"]) == ["silenced"]
    step_target = variant(schema, "say")["properties"]["then"]["anyOf"][1]
    assert list(step_target["properties"]) == ["step"]
    assert [list(t["properties"])[0] for t in schema["properties"]["on"]["items"]["anyOf"]] == [
        "message", "mention", "silence"]
    assert flow_spec_schema(None) == flow_spec_schema({}) == schema


def test_schema_leaves_out_what_a_model_should_not_write():
    """persistence.md §1.12 rule 4: ui, tools, step instructions, ask, extract, a {flow} target's input."""
    schema = flow_spec_schema(FULL)
    assert "tools" not in schema["properties"]
    for v in step_variants(schema):
        assert not {"ui", "tools", "instructions", "ask"} & set(v["properties"]), v["properties"]["kind"]
    mention = schema["properties"]["on"]["items"]["anyOf"][1]
    assert "extract" not in mention["properties"]
    flow_target = variant(schema, "say")["properties"]["then"]["anyOf"][2]
    assert list(flow_target["properties"]) == ["flow"]


def test_schema_condition_arguments_are_loose():
    """persistence.md §1.12 rule 5: a string, a number, a boolean or a list of strings (or null)."""
    assert condition_of(flow_spec_schema(FULL))["properties"]["vip"] == {
        "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                  {"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "description": 'Argument for condition "vip"'}


def test_schema_nullable_enums_list_null_last():
    """persistence.md §1.12: onEnd, an instruction kind, an equals field with an enum, an optional
    parameter with an enum."""
    schema = flow_spec_schema(FULL)
    assert schema["properties"]["onEnd"]["enum"] == ["end", "stay", "reset", None]
    instruction = schema["properties"]["instructions"]["items"]
    assert instruction["properties"]["kind"]["enum"] == ["must", "never", "should", None]
    assert condition_of(schema)["properties"]["equals"]["properties"]["tamanho"] == {
        "type": ["string", "null"], "description": "Porte", "enum": ["1-10", "11-50", None]}
    add_tags = [v for v in step_variants(schema) if v["properties"].get("do", {}).get("enum") == ["add_tags"]][0]
    with_ = add_tags["properties"]["with"]["properties"]
    assert with_["canal"] == {"type": ["string", "null"], "enum": ["email", "sms", None]}
    assert with_["nivel"] == {"type": "integer", "enum": [1, 2]}          # required: not nullable
    for node in walk(schema):
        if "null" in types_of(node) and "enum" in node:
            assert node["enum"][-1] is None and None not in node["enum"][:-1]


def test_schema_field_properties_carry_type_description_and_enum_only():
    """persistence.md §1.12, Field property: description only when non-empty; ask, extract, label dropped."""
    equals = condition_of(flow_spec_schema(FULL))["properties"]["equals"]
    assert equals["properties"] == {
        "nome": {"type": ["string", "null"]},
        "tamanho": {"type": ["string", "null"], "description": "Porte", "enum": ["1-10", "11-50", None]},
        "orcamento": {"type": ["number", "null"]},
        "confirmado": {"type": ["boolean", "null"]}}
    assert equals["type"] == ["object", "null"] and equals["description"] == "Fields that must hold these values"


def test_schema_concrete_fragment_the_if_step_variant():
    """persistence.md §1.12, the concrete fragment for fields nome, tamanho and condition vip."""
    schema = flow_spec_schema({"fields": {"nome": {"type": "string"},
                                          "tamanho": {"type": "string", "enum": ["1-10", "11-50"]}},
                               "conditions": {"vip": Condition(check=lambda ctx, arg: True)}})
    next_ = {"anyOf": [
        {"type": "string", "description": "A step id, or \"end\""},
        {"type": "object", "properties": {"step": {"type": "string"},
         "clear": {"type": ["array", "null"], "items": {"type": "string", "enum": ["nome", "tamanho"]},
                   "description": "Fields to forget before jumping"}},
         "required": ["step", "clear"], "additionalProperties": False},
        {"type": "object", "properties": {"flow": {"type": "string",
                                                   "description": "Another flow to start; this run ends"}},
         "required": ["flow"], "additionalProperties": False},
        {"type": "null"}]}
    expected = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "label": {"type": ["string", "null"]},
            "then": next_,
            "kind": {"type": "string", "enum": ["if"]},
            "if": {"type": "object",
                   "properties": {
                       "equals": {"type": ["object", "null"],
                                  "properties": {"nome": {"type": ["string", "null"]},
                                                 "tamanho": {"type": ["string", "null"],
                                                             "enum": ["1-10", "11-50", None]}},
                                  "required": ["nome", "tamanho"], "additionalProperties": False,
                                  "description": "Fields that must hold these values"},
                       "known": {"type": ["array", "null"], "items": {"type": "string", "enum": ["nome", "tamanho"]},
                                 "description": "Fields that must be known"},
                       "silenced": {"type": ["boolean", "null"], "description": "Whether the host gate is closed"},
                       "vip": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                                         {"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                               "description": "Argument for condition \"vip\""}},
                   "required": ["equals", "known", "silenced", "vip"], "additionalProperties": False},
            "else": next_},
        "required": ["id", "label", "then", "kind", "if", "else"],
        "additionalProperties": False}
    assert variant(schema, "if") == expected


def test_schema_flow_level_shape():
    """persistence.md §1.12, FLOW: every property, in order, each nullable but id, name, steps."""
    schema = flow_spec_schema(FULL)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert list(schema["properties"]) == ["id", "name", "description", "on", "anchor", "while", "collect",
                                          "clearOnStart", "steps", "onEnd", "instructions"]
    assert schema["properties"]["id"]["type"] == "string"
    assert schema["properties"]["steps"]["type"] == "array"
    assert schema["properties"]["while"]["type"] == ["object", "null"]
    assert schema["properties"]["while"]["description"] == "The run ends when this stops holding"
    repeat = schema["properties"]["on"]["items"]["anyOf"][0]["properties"]["repeat"]
    assert repeat["anyOf"][-1] == {"type": "null"} and repeat["anyOf"][0]["enum"] == ["once", "always"]


@pytest.mark.parametrize("registries", [None, {"fields": FIELDS}, FULL])
def test_schema_is_a_valid_draft_7_and_2020_12_schema(registries):
    """persistence.md §1.12: Draft 7 and 2020-12 meta-schemas accept it."""
    import jsonschema
    schema = flow_spec_schema(registries)
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    json.dumps(schema)


def test_schema_calls_return_independent_copies():
    """Inferred: a caller may edit the schema it got without changing the next one."""
    first = flow_spec_schema(FULL)
    first["properties"]["steps"]["items"]["anyOf"].clear()
    assert step_variants(flow_spec_schema(FULL))


NULL_CONDITION = {"equals": None, "known": None, "silenced": None, "vip": None, "tagsAny": None}
GENERATED = {
    "id": "avisa", "name": "Avisa o dono", "description": None,
    "on": [{"message": ["quer falar com uma pessoa"], "if": None, "repeat": None},
           {"event": "booked", "after": "1h", "businessHours": None, "if": {**NULL_CONDITION, "vip": "gold"},
            "repeat": {"cooldown": "1d"}}],
    "anchor": None, "while": None, "collect": ["nome"], "clearOnStart": None,
    "steps": [
        {"id": "quem", "label": None, "then": None, "kind": "collect", "collect": ["nome"], "prompt": None,
         "question": "Qual o seu nome?", "maxAsks": None,
         "branches": [{"when": "pede um humano", "then": {"flow": "humano"}}]},
        {"id": "n", "label": None, "then": None, "kind": "do", "do": "add_tags",
         "with": {"tags": ["lead"], "urgent": None, "canal": None, "nivel": 1}, "onFail": None},
        {"id": "confere", "label": None, "then": "fim", "kind": "if",
         "if": {**NULL_CONDITION, "equals": {"nome": None, "tamanho": "1-10", "orcamento": None,
                                             "confirmado": None}},
         "else": {"step": "fim", "clear": ["tamanho"]}},
        {"id": "espera", "label": None, "then": None, "kind": "waitEvent",
         "wait": {"event": "booked", "upTo": None}, "else": None},
        {"id": "fim", "label": None, "then": "end", "kind": "say", "say": "Obrigado!", "media": None, "once": None}],
    "onEnd": None, "instructions": [{"kind": "never", "when": None, "if": None, "prompt": "Prometa prazos."}]}


def test_a_spec_written_to_the_schema_validates_and_converts():
    """persistence.md §1.12 rule 6 and its example: the schema shapes the answer, validate_flow checks it,
    from_spec turns it into a flow."""
    import jsonschema
    jsonschema.validate(GENERATED, flow_spec_schema(FULL), cls=jsonschema.Draft202012Validator)
    registries = {**FULL, "flows": [{"id": "humano"}]}
    assert validate_flow(GENERATED, registries).warnings == []
    flow = from_spec(GENERATED)
    assert flow["steps"][2] == {"id": "confere", "then": "fim", "if": {"equals": {"tamanho": "1-10"}},
                                "else": {"step": "fim", "clear": ["tamanho"]}}
    assert to_spec(flow)["steps"][2]["kind"] == "if"


@pytest.mark.parametrize("change", [
    lambda s: s["steps"][1].update({"do": "send_email"}),                    # an action the agent lacks
    lambda s: s["steps"][0].update({"collect": ["nmoe"]}),                   # a field the agent lacks
    lambda s: s["steps"][4].update({"ui": {}}),                              # left out on purpose
    lambda s: s["steps"][4].pop("once"),                                     # every property is required
    lambda s: s.update({"onEnd": "restart"}),
    lambda s: s["steps"][3]["wait"].update({"event": "nada"}),
])
def test_the_schema_rejects_what_the_agent_does_not_have(change):
    """persistence.md §1.12: enums and closed objects keep a model to the agent's names."""
    import jsonschema
    spec = copy.deepcopy(GENERATED)
    change(spec)
    with pytest.raises(jsonschema.ValidationError):
        full_validator().validate(spec)


@functools.cache
def full_validator():
    """A 2020-12 validator of the schema over FULL, built once: checking the schema itself (about a third
    of a second) is test_schema_is_a_valid_draft_7_and_2020_12_schema's."""
    import jsonschema
    return jsonschema.Draft202012Validator(flow_spec_schema(FULL))
