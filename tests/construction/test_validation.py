"""validate_flow, phases 0 and 1: the strip, the message format and the shape checks.

persistence.md §1.10 (message format, phase 0, phase 1 S1-S9 and T1-T13);
flows.md §14.1. Names and the step graph are in test_validation_names.py,
warnings in test_validation_warnings.py.
"""
import copy

import pytest

from falai import FlowConfigurationError, FlowValidation, validate_flow

FIELDS = {"nome": {"type": "string", "ask": "Pergunte o nome."}, "cargo": {"type": "string"}}
REGISTRIES = {"fields": FIELDS}


def flow(*steps, **keys):
    """A flow "fx" that passes every check, with the given steps and flow keys."""
    return {"id": "fx", "name": "FX", "steps": list(steps) or [{"id": "a", "say": "Oi"}], **keys}


def error_of(spec, registries=REGISTRIES):
    with pytest.raises(FlowConfigurationError) as caught:
        validate_flow(spec, registries)
    return str(caught.value)


def step_error(step, registries=REGISTRIES):
    return error_of(flow(step), registries)


# Message format and the helpers show / type name -------------------------------------------

def test_a_valid_flow_returns_a_flow_validation_with_no_warnings():
    """persistence.md §1.10: a flow that can run returns FlowValidation(warnings=[])."""
    assert validate_flow(flow(), REGISTRIES) == FlowValidation(warnings=[])


def test_registries_default_to_empty():
    """persistence.md §1.10: registries=None counts as {}."""
    assert validate_flow(flow()).warnings == []
    assert validate_flow(flow(), {}).warnings == []


def test_every_message_starts_with_the_class_name_and_reads_where_what_fix():
    """persistence.md §1.10, Message format: [FlowConfigurationError] <where>: <what>. <fix>"""
    message = step_error({"id": "a", "say": 42})
    assert message == '[FlowConfigurationError] flow "fx", step "a": say is 42, not text. Write say as a string.'


def test_the_error_is_a_falai_error():
    """persistence.md Part 5: FlowConfigurationError derives from FalaiError."""
    from falai import FalaiError
    with pytest.raises(FalaiError):
        validate_flow(None)


@pytest.mark.parametrize("value, shown", [
    (3, "3"), (42.0, "42"), (3.5, "3.5"), (1e21, "1e+21"), (1e-7, "1e-7"), (True, "true"), (False, "false"),
    ([1], "a list"), ((1,), "a list"), ({"a": 1}, "an object"), (lambda ctx: 1, "a function"),
    (object(), "an object"),
])
def test_show_names_values_as_json_and_javascript_print_them(value, shown):
    """persistence.md §1.10, show: JSON literal, JavaScript numbers, true/false, a list, an object, a function."""
    assert step_error({"id": "a", "prompt": value}) == (
        f'[FlowConfigurationError] flow "fx", step "a": prompt is {shown}, not text. Write prompt as a string.')


@pytest.mark.parametrize("value, shown", [("término", '"término"'), ('diz "oi"', '"diz \\"oi\\""'),
                                          ("a\nb", '"a\\nb"')])
def test_show_writes_a_string_as_its_json_literal_keeping_non_ascii(value, shown):
    """persistence.md §1.10, show: a string is its JSON literal, non-ASCII kept as is."""
    assert step_error({"id": "a", "say": "Oi", "maxAsks": value}) == (
        f'[FlowConfigurationError] flow "fx", step "a": maxAsks is {shown}, not a whole number of 1 or more. '
        "Write a number like 3, or \"unlimited\" for a step that never gives up.")


def test_show_cuts_a_string_literal_longer_than_40_characters_to_37_plus_dots():
    """persistence.md §1.10, show: cut to its first 37 characters plus ... when longer than 40."""
    long = "x" * 39                      # its literal is 41 characters
    assert step_error({"id": "a", "say": "Oi", "maxAsks": long}).startswith(
        f'[FlowConfigurationError] flow "fx", step "a": maxAsks is "{"x" * 36}..., not a whole')
    exact = "y" * 38                     # its literal is 40 characters: kept whole
    assert f'maxAsks is "{exact}", not' in step_error({"id": "a", "say": "Oi", "maxAsks": exact})


def test_show_prints_missing_for_an_absent_value():
    """persistence.md §1.10, show: absent reads `missing`."""
    assert error_of(flow(instructions=[{"kind": "must"}])) == (
        '[FlowConfigurationError] flow "fx": instructions[0].prompt is missing, not text. '
        "Write the rule as a sentence.")


# Phase 0: the strip -----------------------------------------------------------------------

def test_none_anywhere_counts_as_absent():
    """persistence.md §1.10 phase 0: a None value is the same as an absent key, at any depth."""
    spec = {"id": "fx", "name": None, "description": None, "on": None, "anchor": None, "while": None,
            "collect": None, "onEnd": None, "instructions": [{"prompt": "Seja breve.", "kind": None, "if": None}],
            "steps": [{"id": "a", "kind": "say", "say": "Oi", "then": None, "media": None, "once": None,
                       "collect": None, "do": None, "wait": None, "if": None, "maxAsks": None}]}
    assert validate_flow(spec, REGISTRIES).warnings == []


def test_a_none_inside_a_list_stays_and_the_shape_check_reports_it():
    """persistence.md §1.7 step 1: lists keep their length, so a None entry is reported."""
    assert error_of(flow(collect=["nome", None])) == (
        '[FlowConfigurationError] flow "fx": collect[1] is null, not text. Write each entry of collect as a string.')


def test_validate_flow_never_mutates_its_input():
    """persistence.md §1.10: validate_flow never mutates its input."""
    spec = {"id": "fx", "name": "FX", "on": None,
            "steps": [{"id": "a", "kind": "collect", "collect": ["nome"], "then": None},
                      {"id": "b", "kind": "say", "say": "Oi", "then": "a"}]}
    before = copy.deepcopy(spec)
    validate_flow(spec, REGISTRIES)
    assert spec == before


# Phase 1, flow level: S1-S9 ---------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(None, "null"), ("abc", '"abc"'), ([], "a list"), (5, "5")])
def test_s1_the_flow_must_be_an_object(value, shown):
    """persistence.md §1.10 S1: the input is a dict."""
    assert error_of(value) == (
        f"[FlowConfigurationError] flow: is {shown}, not an object. Pass the flow itself: {{ id, name, steps }}.")


@pytest.mark.parametrize("steps", ["a", 5, {"id": "a"}])
def test_s2_steps_must_be_a_list(steps):
    """persistence.md §1.10 S2: `steps` is a list."""
    assert error_of({"id": "fx", "name": "FX", "steps": steps}) == (
        '[FlowConfigurationError] flow "fx": has no steps list. Write steps as a list, even an empty one.')


@pytest.mark.parametrize("spec, found", [
    ({"id": "fx", "name": "FX", "steps": None}, 'its keys are "id" and "name"'),
    ({"id": "fx", "stpes": []}, 'its keys are "id" and "stpes" (did you mean "steps" for "stpes"?)'),
])
def test_s2_a_flow_without_steps_lists_the_keys_it_has(spec, found):
    """persistence.md §1.10 S2 (absent and None fail too); issue 9: the message lists the keys found."""
    assert error_of(spec) == (
        f'[FlowConfigurationError] flow "fx": has no steps list; {found}. Write steps as a list, even an empty one.')


def test_s2_an_empty_steps_list_and_a_tuple_pass_the_shape_check():
    """persistence.md §1.10 S2 (a tuple counts as a list, inferred)."""
    assert validate_flow({"id": "fx", "steps": []}).warnings == []
    assert validate_flow({"id": "fx", "steps": ({"id": "a", "say": "Oi"},)}).warnings == []


@pytest.mark.parametrize("flow_id, where", [(5, "flow"), (None, "flow"), ("", 'flow ""'), ("x y", 'flow "x y"')])
def test_s_where_names_the_flow_when_its_id_is_a_string_even_an_empty_one(flow_id, where):
    """persistence.md §1.10 footnote 1: F is flow "<id>" when id is a string, else flow."""
    assert error_of({"id": flow_id, "steps": "x"}) == (
        f"[FlowConfigurationError] {where}: has no steps list. Write steps as a list, even an empty one.")


@pytest.mark.parametrize("key", ["description", "anchor"])
def test_s3_description_and_anchor_must_be_text(key):
    """persistence.md §1.10 S3."""
    assert error_of(flow(**{key: 5})) == (
        f'[FlowConfigurationError] flow "fx": {key} is 5, not text. Write {key} as a string.')


def test_s3_description_is_checked_before_anchor():
    """persistence.md §1.10 S3: description, then anchor."""
    assert "description is" in error_of(flow(anchor=1, description=2))


def test_s4_a_string_where_a_list_of_text_belongs_gets_the_list_written_out():
    """persistence.md §1.10 list check: fix `Write <k>: <JSON list holding the value>.`"""
    assert error_of(flow(collect="nome")) == (
        '[FlowConfigurationError] flow "fx": collect is "nome", not a list. Write collect: ["nome"].')


@pytest.mark.parametrize("key", ["collect", "clearOnStart", "tools"])
def test_s4_flow_lists_of_text(key):
    """persistence.md §1.10 S4: collect, clearOnStart, tools are lists of strings."""
    assert error_of(flow(**{key: 5})) == (
        f'[FlowConfigurationError] flow "fx": {key} is 5, not a list. Write {key} as a list.')
    assert error_of(flow(**{key: ["nome", 3]})) == (
        f'[FlowConfigurationError] flow "fx": {key}[1] is 3, not text. Write each entry of {key} as a string.')


def test_s4_lists_are_checked_in_order_collect_clear_on_start_tools():
    """persistence.md §1.10 S4: collect, then clearOnStart, then tools."""
    assert "tools is" in error_of(flow(tools=1))
    assert "clearOnStart is" in error_of(flow(tools=1, clearOnStart=1))
    assert "collect is" in error_of(flow(tools=1, clearOnStart=1, collect=1))


def test_s5_on_end_must_be_end_stay_or_reset():
    """persistence.md §1.10 S5."""
    assert error_of(flow(onEnd="restart")) == (
        '[FlowConfigurationError] flow "fx": onEnd is "restart", which is not one of "end", "stay", "reset". '
        "Use one of them.")
    for value in ("end", "stay", "reset"):
        validate_flow(flow(onEnd=value))


def test_s6_while_must_be_a_condition_object_or_a_function():
    """persistence.md §1.10 S6, condition check: absent, a callable or a dict passes."""
    assert error_of(flow(**{"while": 5})) == (
        '[FlowConfigurationError] flow "fx": while is 5, not a condition. '
        'Write it as an object, e.g. { known: ["nome"] }.')
    validate_flow(flow(**{"while": lambda ctx: True}))
    validate_flow(flow(**{"while": {}}))


def test_s7_instructions_must_be_a_list_of_objects():
    """persistence.md §1.10 S7, instructions check: list check (objects)."""
    assert error_of(flow(instructions="Seja breve.")) == (
        '[FlowConfigurationError] flow "fx": instructions is "Seja breve.", not a list. '
        "Write instructions as a list.")
    assert error_of(flow(instructions=["Seja breve."])) == (
        '[FlowConfigurationError] flow "fx": instructions[0] is "Seja breve.", not an object. '
        "Write each entry of instructions as an object.")


def test_s7_an_instruction_kind_is_must_never_or_should():
    """persistence.md §1.10 S7: instructions[i].kind."""
    assert error_of(flow(instructions=[{"prompt": "a"}, {"kind": "always", "prompt": "b"}])) == (
        '[FlowConfigurationError] flow "fx": instructions[1].kind is "always", which is not one of '
        '"must", "never", "should". Use one of them.')


def test_s7_an_instruction_prompt_must_be_text():
    """persistence.md §1.10 S7: instructions[i].prompt is a string."""
    assert error_of(flow(instructions=[{"prompt": 5}])) == (
        '[FlowConfigurationError] flow "fx": instructions[0].prompt is 5, not text. Write the rule as a sentence.')


def test_s7_an_instruction_when_is_a_string_or_a_list_of_strings():
    """persistence.md §1.10 S7: `when` present and not a string gets a list check (text)."""
    validate_flow(flow(instructions=[{"prompt": "a", "when": "always"}, {"prompt": "b", "when": ["x", "y"]}]))
    assert error_of(flow(instructions=[{"prompt": "a", "when": 5}])) == (
        '[FlowConfigurationError] flow "fx": instructions[0].when is 5, not a list. '
        "Write instructions[0].when as a list.")
    assert error_of(flow(instructions=[{"prompt": "a", "when": ["x", 1]}])) == (
        '[FlowConfigurationError] flow "fx": instructions[0].when[1] is 1, not text. '
        "Write each entry of instructions[0].when as a string.")


def test_s7_an_instruction_if_must_be_a_condition():
    """persistence.md §1.10 S7: condition check of instructions[i].if."""
    assert error_of(flow(instructions=[{"prompt": "a", "if": "vip"}])) == (
        '[FlowConfigurationError] flow "fx": instructions[0].if is "vip", not a condition. '
        'Write it as an object, e.g. { known: ["nome"] }.')


def test_s7_instruction_checks_run_kind_prompt_when_if_in_order():
    """persistence.md §1.10, instructions check order."""
    bad = {"kind": "x", "prompt": 1, "when": 1, "if": 1}
    assert "instructions[0].kind" in error_of(flow(instructions=[bad]))
    assert "instructions[0].prompt" in error_of(flow(instructions=[{**bad, "kind": "must"}]))
    assert "instructions[0].when" in error_of(flow(instructions=[{**bad, "kind": "must", "prompt": "p"}]))
    assert "instructions[0].if" in error_of(flow(instructions=[{**bad, "kind": "must", "prompt": "p", "when": "w"}]))


def test_s8_on_must_be_a_list_of_objects():
    """persistence.md §1.10 S8: list check (objects) of `on`."""
    assert error_of(flow(on={"message": []})) == (
        '[FlowConfigurationError] flow "fx": on is an object, not a list. Write on as a list.')
    assert error_of(flow(on=[{"message": []}, "oi"])) == (
        '[FlowConfigurationError] flow "fx": on[1] is "oi", not an object. Write each entry of on as an object.')


@pytest.mark.parametrize("key", ["message", "mention"])
def test_s8_trigger_phrases_must_be_a_list_of_text(key):
    """persistence.md §1.10 S8: list check (text) of message, of mention, at trigger #N."""
    assert error_of(flow(on=[{"event": "x"}, {key: "oi"}])) == (
        f'[FlowConfigurationError] flow "fx", trigger #2: {key} is "oi", not a list. Write {key}: ["oi"].')
    assert error_of(flow(on=[{key: ["oi", 5]}])) == (
        f'[FlowConfigurationError] flow "fx", trigger #1: {key}[1] is 5, not text. '
        f"Write each entry of {key} as a string.")


def test_s8_a_trigger_if_must_be_a_condition():
    """persistence.md §1.10 S8: condition check of a trigger's `if`."""
    assert error_of(flow(on=[{"message": [], "if": True}])) == (
        '[FlowConfigurationError] flow "fx", trigger #1: if is true, not a condition. '
        'Write it as an object, e.g. { known: ["nome"] }.')


@pytest.mark.parametrize("repeat, shown", [("never", '"never"'), ({"cooldown": 5}, "an object"),
                                           ({}, "an object"), (3, "3"), (["once"], "a list")])
def test_s8_repeat_is_once_always_or_a_cooldown(repeat, shown):
    """persistence.md §1.10 S8: `repeat is <show>` with no further text."""
    assert error_of(flow(on=[{"message": [], "repeat": repeat}])) == (
        f'[FlowConfigurationError] flow "fx", trigger #1: repeat is {shown}. '
        'Use "once", "always" or { cooldown: "24h" }.')


def test_s8_repeat_forms_that_pass():
    """persistence.md §1.4 Trigger: repeat is "once", "always" or {"cooldown": <duration>}."""
    for repeat in ("once", "always", {"cooldown": "24h"}):
        validate_flow(flow(on=[{"message": [], "repeat": repeat}]))


def test_s9_steps_entries_must_be_objects():
    """persistence.md §1.10 S9, the example `steps[0] is null, not an object`."""
    assert error_of({"id": "fx", "name": "FX", "steps": [None]}) == (
        '[FlowConfigurationError] flow "fx": steps[0] is null, not an object. '
        "Write each entry of steps as an object.")


def test_s9_a_step_without_a_string_id_is_named_by_its_position():
    """persistence.md §1.10 S9: `F, step #N` (from 1) when `id` is not a string."""
    assert error_of(flow({"id": "a", "say": "Oi"}, {"id": 7, "say": 1})) == (
        '[FlowConfigurationError] flow "fx", step #2: say is 1, not text. Write say as a string.')
    assert error_of(flow({"say": 1})) == (
        '[FlowConfigurationError] flow "fx", step #1: say is 1, not text. Write say as a string.')


def test_s_flow_level_checks_run_in_order_s2_to_s9():
    """persistence.md §1.10 phase 1 order: fixing each problem reveals the next one."""
    spec = {"id": "fx", "steps": "x", "description": 1, "collect": 1, "onEnd": "x", "while": 1,
            "instructions": 1, "on": 1}
    ladder = [("steps", "has no steps list"), ("description", "description is 1"), ("collect", "collect is 1"),
              ("onEnd", "onEnd is"), ("while", "while is 1"), ("instructions", "instructions is 1"),
              ("on", "on is 1")]
    for key, expected in ladder:
        assert expected in error_of(spec), key
        spec[key] = [{"id": "a", "say": "Oi"}] if key == "steps" else None
    spec["steps"] = [None]
    assert "steps[0] is null" in error_of(spec)


def test_shape_is_checked_before_any_name():
    """persistence.md §1.10, flows.md §14.1: phase 1 runs before a name is looked up."""
    spec = flow({"id": "a", "collect": ["nmoe"]}, {"id": "a", "say": 5}, on=[{"event": "nada"}])
    assert "say is 5" in error_of(spec, {})


# Phase 1, per step: T1-T13 ------------------------------------------------------------------

def test_t1_a_step_with_no_body_does_nothing():
    """persistence.md §1.10 T1."""
    assert step_error({"id": "a", "label": "Oi", "then": "end"}) == (
        '[FlowConfigurationError] flow "fx", step "a": does nothing; its keys are "id", "label" and "then". '
        "A step talks (`prompt` / `collect`), says (`say`), acts (`do`), waits (`wait`) or forks (`if`).")


def test_t1_a_step_that_does_nothing_names_the_misspelt_body_key():
    """issue 9: "does nothing" lists the keys found and the body key one of them probably meant."""
    assert step_error({"id": "oi", "sya": "Olá"}).startswith(
        '[FlowConfigurationError] flow "fx", step "oi": does nothing; its keys are "id" and "sya" '
        '(did you mean "say" for "sya"?). A step talks')
    assert 'does nothing; its keys are "id" and "colect" (did you mean "collect" for "colect"?)' in step_error(
        {"id": "oi", "colect": ["nome"]})


def test_t1_question_alone_is_not_a_body():
    """persistence.md §1.6: only collect, prompt, say, do, wait and if are body keys."""
    assert "does nothing" in step_error({"id": "a", "question": "Qual o seu nome?"})


@pytest.mark.parametrize("step, kinds", [
    ({"say": "Oi", "do": "notify"}, '"say" and "do"'),
    ({"collect": ["nome"], "say": "Oi", "if": {}}, '"collect", "say" and "if"'),
    ({"prompt": "p", "wait": "1h"}, '"prompt" and "wait"'),
    ({"wait": {"event": "e"}, "if": {}}, '"waitEvent" and "if"'),
])
def test_t2_a_step_mixing_kinds_names_every_body_kind(step, kinds):
    """persistence.md §1.10 T2: every body kind, in §1.6 order, joined "a", "b" and "c"."""
    assert step_error({"id": "a", **step}) == (
        f'[FlowConfigurationError] flow "fx", step "a": mixes {kinds}. '
        "A step does one thing. Split it into one step per kind.")


def test_t2_prompt_with_collect_is_one_talk_kind():
    """persistence.md §1.6: collect present -> collect, whatever prompt says."""
    validate_flow(flow({"id": "a", "prompt": "Descubra.", "collect": ["nome"]}), REGISTRIES)


def test_t3_kind_must_agree_with_the_body():
    """persistence.md §1.10 T3, the spec's example message."""
    assert step_error({"id": "a", "kind": "do", "say": "Oi"}) == (
        '[FlowConfigurationError] flow "fx", step "a": has kind "do", but its body is a "say" step. '
        'Set kind to "say", or change the body to match.')


@pytest.mark.parametrize("step, kind", [
    ({"kind": "prompt", "prompt": "p", "collect": ["nome"]}, "collect"),
    ({"kind": "wait", "wait": {"event": "e"}}, "waitEvent"),
    ({"kind": "waitEvent", "wait": "1h"}, "wait"),
    ({"kind": "talk", "prompt": "p"}, "prompt"),
])
def test_t3_the_body_kind_is_derived_by_the_kind_rule(step, kind):
    """persistence.md §1.6: collect beats prompt; a string wait is `wait`, a dict `waitEvent`."""
    assert f'its body is a "{kind}" step' in step_error({"id": "a", **step})


def test_t3_a_non_string_kind_is_shown():
    """persistence.md §1.10 T3: `has kind <show(kind)>`."""
    assert 'has kind 5, but its body is a "say" step' in step_error({"id": "a", "kind": 5, "say": "Oi"})


def test_t3_every_matching_kind_passes():
    """persistence.md §1.3: a spec step's kind equal to its body kind passes."""
    steps = [{"id": "p", "kind": "prompt", "prompt": "p"}, {"id": "c", "kind": "collect", "collect": ["nome"]},
             {"id": "s", "kind": "say", "say": "Oi"}, {"id": "w", "kind": "wait", "wait": "1h"},
             {"id": "i", "kind": "if", "if": {}}]
    validate_flow(flow(*steps), REGISTRIES)


@pytest.mark.parametrize("key, body", [("say", {}), ("prompt", {}), ("question", {"collect": ["nome"]})])
def test_t4_say_prompt_and_question_must_be_text(key, body):
    """persistence.md §1.10 T4."""
    assert step_error({"id": "a", **body, key: ["x"]}) == (
        f'[FlowConfigurationError] flow "fx", step "a": {key} is a list, not text. Write {key} as a string.')


def test_t5_a_step_collect_and_tools_are_lists_of_text():
    """persistence.md §1.10 T5: collect, then tools."""
    assert step_error({"id": "a", "collect": "nome"}) == (
        '[FlowConfigurationError] flow "fx", step "a": collect is "nome", not a list. Write collect: ["nome"].')
    assert step_error({"id": "a", "prompt": "p", "tools": ["agenda", None]}) == (
        '[FlowConfigurationError] flow "fx", step "a": tools[1] is null, not text. '
        "Write each entry of tools as a string.")
    assert "collect[0]" in step_error({"id": "a", "collect": [1], "tools": 1})


def test_t6_ask_must_be_an_object():
    """persistence.md §1.10 T6."""
    assert step_error({"id": "a", "collect": ["nome"], "ask": "Pergunte."}) == (
        '[FlowConfigurationError] flow "fx", step "a": ask is "Pergunte.", not an object. '
        'Write ask as { field: "how to ask" }.')


def test_t7_with_must_be_an_object():
    """persistence.md §1.10 T7, flows.md §14.1 example `with is "x", not an object`."""
    assert step_error({"id": "a", "do": "notify", "with": "x"}) == (
        '[FlowConfigurationError] flow "fx", step "a": with is "x", not an object. '
        "Write with as { parameter: value }.")


@pytest.mark.parametrize("value, shown", [("3", '"3"'), (0, "0"), (-1, "-1"), (2.5, "2.5"), (True, "true"),
                                          (float("inf"), "Infinity"), (float("nan"), "NaN"), ([3], "a list")])
def test_t8_max_asks_must_be_a_whole_number_of_1_or_more(value, shown):
    """persistence.md §1.10 T8: an int, or an integral float; never a bool."""
    assert step_error({"id": "a", "collect": ["nome"], "maxAsks": value}) == (
        f'[FlowConfigurationError] flow "fx", step "a": maxAsks is {shown}, not a whole number of 1 or more. '
        "Write a number like 3, or \"unlimited\" for a step that never gives up.")


@pytest.mark.parametrize("value", [1, 3, 3.0, 10])
def test_t8_whole_max_asks_pass(value):
    """persistence.md §1.10 T8: 3 and 3.0 both pass."""
    validate_flow(flow({"id": "a", "collect": ["nome"], "maxAsks": value}), REGISTRIES)


@pytest.mark.parametrize("wait", [{}, {"event": 5}, {"upTo": "1d"}, 5, True, ["e"]])
def test_t9_an_event_wait_needs_a_string_event(wait):
    """persistence.md §1.10 T9; a wait that is neither a string nor a dict fails here too (inferred)."""
    assert step_error({"id": "a", "wait": wait}) == (
        '[FlowConfigurationError] flow "fx", step "a": wait has no event. '
        'Write wait: { event: "name" } to wait for an event, or a duration like "1h".')


def test_t10_an_if_must_be_a_condition():
    """persistence.md §1.10 T10."""
    assert step_error({"id": "a", "if": "vip"}) == (
        '[FlowConfigurationError] flow "fx", step "a": if is "vip", not a condition. '
        'Write it as an object, e.g. { known: ["nome"] }.')
    validate_flow(flow({"id": "a", "if": lambda ctx: True}))


@pytest.mark.parametrize("key", ["then", "else", "onFail"])
@pytest.mark.parametrize("value, shown", [(5, "5"), ({"clear": ["nome"]}, "an object"), (["a"], "a list"),
                                          ({"step": 1}, "an object"), ({"flow": None}, "an object")])
def test_t11_targets_must_be_a_step_id_or_a_target(key, value, shown):
    """persistence.md §1.10 T11: target check of then, else, onFail."""
    assert step_error({"id": "a", "say": "Oi", key: value}) == (
        f'[FlowConfigurationError] flow "fx", step "a": {key} is {shown}, not a step id or a target. '
        'Write a step id, "end", { step: "id" } or { flow: "id" }.')


def test_t11_targets_are_checked_then_else_on_fail():
    """persistence.md §1.10 T11 order."""
    assert "onFail is 1" in step_error({"id": "a", "say": "Oi", "onFail": 1})
    assert "else is 1" in step_error({"id": "a", "say": "Oi", "onFail": 1, "else": 1})
    assert "then is 1" in step_error({"id": "a", "say": "Oi", "onFail": 1, "else": 1, "then": 1})


def test_t11_a_target_clear_is_a_list_of_text():
    """persistence.md §1.10 target check: list check (text) of clear, labelled <w>.clear."""
    assert step_error({"id": "a", "say": "Oi", "then": {"step": "a", "clear": "nome"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": then.clear is "nome", not a list. '
        'Write then.clear: ["nome"].')
    assert step_error({"id": "a", "say": "Oi", "else": {"flow": "b", "clear": [1]}}) == (
        '[FlowConfigurationError] flow "fx", step "a": else.clear[0] is 1, not text. '
        "Write each entry of else.clear as a string.")


def test_t12_step_instructions_get_the_instructions_check():
    """persistence.md §1.10 T12."""
    assert step_error({"id": "a", "prompt": "p", "instructions": [{"prompt": "x", "kind": "may"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": instructions[0].kind is "may", which is not one of '
        '"must", "never", "should". Use one of them.')


def test_t13_branches_must_be_a_list_of_objects():
    """persistence.md §1.10 T13: list check (objects) of branches."""
    assert step_error({"id": "a", "prompt": "p", "branches": {"when": "x"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches is an object, not a list. '
        "Write branches as a list.")
    assert step_error({"id": "a", "prompt": "p", "branches": ["x"]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[0] is "x", not an object. '
        "Write each entry of branches as an object.")


def test_t13_a_branch_when_is_one_sentence():
    """persistence.md §1.10 T13: branches[j].when is a string."""
    assert step_error({"id": "a", "prompt": "p", "branches": [{"when": "x", "then": "a"},
                                                               {"when": ["x"], "then": "a"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[1].when is a list, not text. '
        "Write the condition as one sentence.")


def test_t13_a_branch_if_is_a_condition_and_its_then_a_target():
    """persistence.md §1.10 T13: condition check of branches[j].if, target check of branches[j].then."""
    assert step_error({"id": "a", "prompt": "p", "branches": [{"if": 1, "then": "a"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[0].if is 1, not a condition. '
        'Write it as an object, e.g. { known: ["nome"] }.')
    assert step_error({"id": "a", "prompt": "p", "branches": [{"if": {}, "then": 1}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[0].then is 1, not a step id or a target. '
        'Write a step id, "end", { step: "id" } or { flow: "id" }.')


def test_t_step_checks_run_in_order_t1_to_t13():
    """persistence.md §1.10 step checks: fixing each problem reveals the next one."""
    step = {"id": "a", "kind": "prompt", "collect": "nome", "question": 1, "tools": 1, "ask": 1, "with": 1,
            "maxAsks": 0, "if": 1, "then": 1, "instructions": 1, "branches": 1}
    assert "mixes" in step_error(step)
    del step["if"]
    ladder = [("kind", 'has kind "prompt"'), ("question", "question is 1"), ("collect", "collect is"),
              ("tools", "tools is 1"), ("ask", "ask is 1"), ("with", "with is 1"), ("maxAsks", "maxAsks is 0"),
              ("then", "then is 1"), ("instructions", "instructions is 1"), ("branches", "branches is 1")]
    for key, expected in ladder:
        assert expected in step_error(step), key
        step[key] = ["nome"] if key == "collect" else None


def test_t_the_steps_are_checked_one_after_the_other():
    """persistence.md §1.10 S9: per step, in order; the first failure raises."""
    message = error_of(flow({"id": "a", "say": 1}, {"id": "b", "kind": "x"}))
    assert message.startswith('[FlowConfigurationError] flow "fx", step "a": say is 1')
