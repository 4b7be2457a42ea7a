"""validate_flow, phase 2: names and the step graph (persistence.md §1.10 N1-N8, step rules,
the `with` check, matching, the mismatch rule; flows.md §14.2, §14.3, §9.2)."""
import pytest

import test_validation
from falai import Action, Condition, EventDef, Tool, validate_flow
from test_validation import flow

FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "cargo": {"type": "string"},
    "tamanho": {"type": "string", "enum": ["1-10", "11-50", "51-200", "200+"]},
    "orcamento": {"type": "number"},
    "idade": {"type": "integer"},
    "prioridade": {"type": "integer", "enum": [1, 2, 3]},
    "confirmado": {"type": "boolean"},
}


def _run(params, ctx):
    return {"ok": True}


ACTIONS = {
    "notify": Action(parameters={"recipient": {"type": "string"}, "message": {"type": "string"}}, run=_run),
    "add_tags": Action(parameters={"tags": {"type": "array", "items": {"type": "string"}},
                                   "priority": {"type": "integer", "optional": True}}, run=_run),
    "send_webhook": Action(parameters={"method": {"type": "string", "enum": ["GET", "POST"]},
                                       "retryOn": {"type": "array", "items": {"type": "integer", "enum": [429, 503]},
                                                   "optional": True},
                                       "urgent": {"type": "boolean", "optional": True},
                                       "score": {"type": "number", "optional": True}}, run=_run),
    "ping": Action(parameters={}, run=_run),
}
REGISTRIES = {
    "fields": FIELDS, "actions": ACTIONS,
    "events": {"booked": EventDef(), "stage_entered": EventDef(direction="inbound")},
    "conditions": {"vip": Condition(check=lambda ctx, arg: True)},
    "tools": [Tool(id="agenda", handler=lambda args, ctx: None)],
}


def error_of(spec, registries=REGISTRIES):
    """test_validation's error_of over this file's registries."""
    return test_validation.error_of(spec, registries)


def step_error(*steps, registries=REGISTRIES):
    return error_of(flow(*steps), registries)


def ok(spec, registries=REGISTRIES):
    return validate_flow(spec, registries).warnings


# N1-N3: ids and the flow's frame ------------------------------------------------------------

@pytest.mark.parametrize("flow_id", [None, "", 5])
def test_n1_the_flow_needs_a_non_empty_string_id(flow_id):
    """persistence.md §1.10 N1: where is `flow`."""
    assert error_of({"id": flow_id, "name": "FX", "steps": []}) == (
        "[FlowConfigurationError] flow: has no id. Give the flow a short unique id.")


@pytest.mark.parametrize("step_id", [None, "", 3])
def test_n2_every_step_needs_a_non_empty_string_id(step_id):
    """persistence.md §1.10 N2: where is `flow "F", step #N` (N from 1)."""
    assert step_error({"id": "a", "say": "Oi"}, {"id": step_id, "say": "Oi"}) == (
        '[FlowConfigurationError] flow "fx", step #2: has no id. Give every step a unique id.')


def test_n2_end_is_a_reserved_step_id():
    """persistence.md §1.10 N2."""
    assert step_error({"id": "end", "say": "Oi"}) == (
        '[FlowConfigurationError] flow "fx", step "end": uses the reserved id "end". '
        '"end" ends the run; pick another id.')


def test_n2_step_ids_are_unique():
    """persistence.md §1.10 N2."""
    assert step_error({"id": "a", "say": "Oi"}, {"id": "b", "say": "Oi"}, {"id": "a", "say": "Tchau"}) == (
        '[FlowConfigurationError] flow "fx", step "a": duplicates an earlier step id. Give each step its own id.')


def test_n2_all_ids_are_checked_before_any_step_rule():
    """persistence.md §1.10 order: N2 runs over every step before N3-N8."""
    assert "duplicates" in step_error({"id": "a", "collect": ["nmoe"]}, {"id": "a", "say": "Oi"})


def test_n3_a_flow_with_triggers_needs_steps():
    """persistence.md §1.10 N3."""
    assert error_of({"id": "fx", "name": "FX", "on": [{"message": []}], "steps": []}) == (
        '[FlowConfigurationError] flow "fx": has triggers but no steps. Add at least one step or remove `on`.')


def test_n3_no_steps_is_fine_without_triggers():
    """persistence.md §1.2: steps may be empty only when `on` is absent or empty."""
    assert ok({"id": "fx", "name": "FX", "steps": []}) == []
    assert ok({"id": "fx", "name": "FX", "on": [], "steps": []}) == []


def test_name_is_never_checked():
    """persistence.md §1.2: no rule reads `name`; a flow without one is accepted."""
    assert ok({"id": "fx", "steps": [{"id": "a", "say": "Oi"}]}) == []


# N4-N6: flow-level names ---------------------------------------------------------------------

@pytest.mark.parametrize("key", ["collect", "clearOnStart"])
def test_n4_flow_field_lists_name_agent_fields(key):
    """persistence.md §1.10 N4, field check."""
    assert error_of(flow(**{key: ["nome", "nmoe"]})) == (
        f'[FlowConfigurationError] flow "fx": unknown field "nmoe" in {key}. '
        "Add it to the agent's fields or fix the slug.")


def test_n4_collect_is_checked_before_clear_on_start():
    """persistence.md §1.10 N4 order."""
    assert "in collect" in error_of(flow(collect=["x"], clearOnStart=["y"]))


def test_n4_no_registries_means_no_fields():
    """flows.md §1: with no fields bound every slug is unknown, so any collect fails."""
    assert "unknown field" in error_of(flow(collect=["nome"]), None)


def test_n6_while_names_registered_conditions():
    """persistence.md §1.10 N6: condition names check of while, labelled `while`."""
    assert error_of(flow(**{"while": {"tagsAny": ["x"]}})) == (
        '[FlowConfigurationError] flow "fx": unknown condition "tagsAny" in while. '
        "Register it in conditions or use equals, known, silenced.")


def test_n6_flow_tools_name_registered_tools():
    """persistence.md §1.10 N6 tool check; the Tool seed page: every name must be a registered tool id."""
    assert error_of(flow(tools=["agenda", "preco"])) == (
        '[FlowConfigurationError] flow "fx": unknown tool "preco". Register it in the agent\'s tools or fix the name.')
    assert ok(flow(tools=["agenda"])) == []
    assert ok(flow(tools=[])) == []


def test_n6_flow_instruction_ifs_name_registered_conditions():
    """persistence.md §1.10 N6: labelled instructions[i].if."""
    assert error_of(flow(instructions=[{"prompt": "a"}, {"prompt": "b", "if": {"lojista": True}}])) == (
        '[FlowConfigurationError] flow "fx": unknown condition "lojista" in instructions[1].if. '
        "Register it in conditions or use equals, known, silenced.")


def test_n6_order_is_while_then_tools_then_instructions():
    """persistence.md §1.10 N6 order."""
    spec = flow(**{"while": {"x": 1}}, tools=["y"], instructions=[{"prompt": "p", "if": {"z": 1}}])
    assert "in while" in error_of(spec)
    del spec["while"]
    assert 'tool "y"' in error_of(spec)
    del spec["tools"]
    assert "in instructions[0].if" in error_of(spec)


def test_n4_to_n7_flow_names_come_before_triggers_and_steps():
    """persistence.md §1.10 order: N4 and N6 before N7 and N8."""
    spec = flow({"id": "a", "collect": ["x"]}, collect=["y"], on=[{"event": "z"}])
    assert 'unknown field "y" in collect' in error_of(spec)


# N7: triggers ---------------------------------------------------------------------------------

def test_n7_a_trigger_names_one_kind():
    """persistence.md §1.10 N7, the spec's example (a 3.x trigger lands here too)."""
    fix = ("A trigger is one of `message`, `mention`, `silence`, `event`. A flow the host starts itself has no "
           "`on` at all.")
    assert error_of(flow(on=[{"if": {"known": ["nome"]}}])) == (
        f'[FlowConfigurationError] flow "fx", trigger #1: names no trigger kind; its only key is "if". {fix}')
    assert error_of(flow(on=[{"kind": "message", "when": ["quer um orçamento"]}])) == (
        f'[FlowConfigurationError] flow "fx", trigger #1: names no trigger kind; its keys are "kind" and "when". '
        f"{fix}")


def test_n7_a_trigger_with_no_kind_names_the_misspelt_kind():
    """issue 9: the error lists the keys found and the kind one of them probably meant."""
    assert 'names no trigger kind; its only key is "mesage" (did you mean "message" for "mesage"?). A trigger' in (
        error_of(flow(on=[{"mesage": []}])))
    assert "names no trigger kind; it has no keys." in error_of(flow(on=[{}]))


def test_n7_triggers_are_numbered_from_one():
    """persistence.md §1.10 Message format: trigger #N counts from 1."""
    assert error_of(flow(on=[{"message": []}, {"repeat": "once"}])).startswith(
        '[FlowConfigurationError] flow "fx", trigger #2: names no trigger kind;')


def test_n7_an_event_trigger_names_a_registered_event():
    """persistence.md §1.10 N7."""
    assert error_of(flow(on=[{"event": "bookd"}])) == (
        '[FlowConfigurationError] flow "fx", trigger #1: unknown event "bookd". '
        "Register it in events or fix the name.")
    assert ok(flow(on=[{"event": "booked", "after": "1h", "businessHours": True}])) == []


@pytest.mark.parametrize("trigger, label, value", [
    ({"silence": "5 min"}, "silence", "5 min"),
    ({"silence": "1h30m"}, "silence", "1h30m"),
    ({"event": "booked", "after": "1w"}, "after", "1w"),
    ({"message": [], "repeat": {"cooldown": "1 day"}}, "repeat.cooldown", "1 day"),
    ({"silence": "2D"}, "silence", "2D"),
    ({"silence": 30}, "silence", "30"),
])
def test_n7_trigger_durations_must_parse(trigger, label, value):
    """persistence.md §1.10 N7 duration check; the value is quoted as is (a non-string via str)."""
    assert error_of(flow(on=[trigger])) == (
        f'[FlowConfigurationError] flow "fx", trigger #1: {label} has duration "{value}", which does not parse. '
        'Write a number and a unit: "30s", "5m", "24h" or "3d".')


def test_n7_durations_are_checked_silence_after_cooldown():
    """persistence.md §1.10 N7 order: silence, after, then repeat.cooldown."""
    trigger = {"silence": "x", "after": "y", "repeat": {"cooldown": "z"}}
    assert 'silence has duration "x"' in error_of(flow(on=[trigger]))
    trigger["silence"] = "1h"
    assert 'after has duration "y"' in error_of(flow(on=[trigger]))
    trigger["after"] = "1h"
    assert 'repeat.cooldown has duration "z"' in error_of(flow(on=[trigger]))


@pytest.mark.parametrize("text", ["30s", "5m", "24h", "3d", "1.5h", "0s"])
def test_n7_valid_durations_pass(text):
    """flows.md §13."""
    assert ok(flow(on=[{"silence": text, "repeat": {"cooldown": text}}])) == []


def test_n7_a_trigger_if_names_registered_conditions():
    """persistence.md §1.10 N7: condition names check of if, labelled `if`."""
    assert error_of(flow(on=[{"message": ["oi"], "if": {"vipp": True}}])) == (
        '[FlowConfigurationError] flow "fx", trigger #1: unknown condition "vipp" in if. '
        "Register it in conditions or use equals, known, silenced.")


def test_n7_a_message_list_of_only_exclusions_can_never_match():
    """persistence.md §1.10 N7; flows.md §4.3."""
    assert error_of(flow(on=[{"message": ["!só agradece", " ! spam "]}])) == (
        '[FlowConfigurationError] flow "fx", trigger #1: every message phrase starts with "!", so nothing can '
        'ever match it. A "!" phrase rules the trigger out. Add at least one plain phrase saying when it should '
        "fire, or use an empty list for a catch-all.")


def test_n7_a_mention_list_of_only_exclusions_can_never_match():
    """persistence.md §1.10 N7: for mention the fix ends at `...when it should fire.`"""
    assert error_of(flow(on=[{"mention": ["!fala de outra pessoa"]}])) == (
        '[FlowConfigurationError] flow "fx", trigger #1: every mention phrase starts with "!", so nothing can '
        'ever match it. A "!" phrase rules the trigger out. Add at least one plain phrase saying when it should '
        "fire.")


def test_n7_blank_phrases_and_a_bare_bang_leave_nothing():
    """persistence.md §1.10 footnote 2: blank phrases and a bare `!` are dropped."""
    assert "every message phrase" in error_of(flow(on=[{"message": ["  ", "!", " !  "]}]))


def test_n7_an_empty_list_is_the_catch_all_and_one_plain_phrase_is_enough():
    """persistence.md §1.10 footnote 2: `message: []` passes; exclusions beside a plain phrase pass."""
    assert ok(flow(on=[{"message": []}, {"mention": ["pede humano", "!só concorda"]},
                       {"message": ["!só agradece", "quer preço"]}])) == []


def test_n7_checks_run_in_order_kind_event_durations_if_phrases():
    """persistence.md §1.10 N7 order."""
    trigger = {"event": "x", "after": "y", "if": {"z": 1}, "message": ["!a"]}
    assert 'unknown event "x"' in error_of(flow(on=[trigger]))
    trigger["event"] = "booked"
    assert 'after has duration "y"' in error_of(flow(on=[trigger]))
    trigger["after"] = "1h"
    assert 'unknown condition "z" in if' in error_of(flow(on=[trigger]))
    del trigger["if"]
    assert "every message phrase" in error_of(flow(on=[trigger]))


# N8, step rule 1: edges ---------------------------------------------------------------------

def test_step_then_must_point_at_an_existing_step():
    """persistence.md Part 5 example: then points at step "fim", which does not exist."""
    spec = {"id": "triagem", "name": "T", "steps": [{"id": "quem", "collect": ["nome"], "then": "fim"}]}
    assert error_of(spec) == (
        '[FlowConfigurationError] flow "triagem", step "quem": then points at step "fim", which does not exist. '
        'Use an existing step id or "end".')


@pytest.mark.parametrize("key", ["then", "else"])
def test_step_edges_to_a_step_target_must_exist(key):
    """persistence.md §1.10 edge check: a dict with `step` (same message as a string)."""
    assert step_error({"id": "a", "if": {}, key: {"step": "b"}}) == (
        f'[FlowConfigurationError] flow "fx", step "a": {key} points at step "b", which does not exist. '
        'Use an existing step id or "end".')


def test_step_edge_clear_names_fields():
    """persistence.md §1.10 edge check: each slug of clear gets a field check in <where>.clear."""
    assert step_error({"id": "a", "say": "Oi"}, {"id": "b", "say": "Oi", "then": {"step": "a", "clear": ["nmoe"]}}) == (
        '[FlowConfigurationError] flow "fx", step "b": unknown field "nmoe" in then.clear. '
        "Add it to the agent's fields or fix the slug.")


def test_step_edges_to_end_and_forward_pass():
    """persistence.md §1.4 Next: "end" ends the run."""
    assert ok(flow({"id": "a", "say": "Oi", "then": {"step": "c"}}, {"id": "b", "say": "x", "then": "end"},
                   {"id": "c", "say": "y", "then": "d"}, {"id": "d", "say": "z"})) == []


def test_step_edges_are_checked_then_before_else():
    """persistence.md §1.10 step rule 1."""
    assert "then points at" in step_error({"id": "a", "if": {}, "then": "x", "else": "y"})


def test_a_flow_target_must_name_one_of_the_agents_flows():
    """persistence.md §1.10 edge check, the spec's example (every registered id, in order)."""
    registries = {**REGISTRIES, "flows": [{"id": "fx"}, {"id": "humano"}]}
    assert step_error({"id": "a", "say": "Oi", "then": {"flow": "humnao"}}, registries=registries) == (
        '[FlowConfigurationError] flow "fx", step "a": then names flow "humnao", which this agent does not have. '
        'Use one of "fx", "humano", or add the flow.')
    assert ok(flow({"id": "a", "say": "Oi", "then": {"flow": "humano", "input": {"x": 1}}}), registries) == []


def test_a_flow_target_with_no_registered_flows_says_to_add_it():
    """persistence.md §1.10 edge check: with an empty list, `Add the flow to the agent.`"""
    assert step_error({"id": "a", "say": "Oi", "then": {"flow": "humano"}},
                      registries={**REGISTRIES, "flows": []}) == (
        '[FlowConfigurationError] flow "fx", step "a": then names flow "humano", which this agent does not have. '
        "Add the flow to the agent.")


def test_flow_targets_are_checked_only_when_registries_has_flows():
    """persistence.md §1.10 registries: flows only checked when the key is present."""
    assert ok(flow({"id": "a", "say": "Oi", "then": {"flow": "qualquer"}})) == []


def test_a_templated_flow_target_is_resolved_per_run():
    """persistence.md §1.10 edge check; flows.md §5.2: an id holding {{ is not checked."""
    registries = {**REGISTRIES, "flows": [{"id": "fx"}]}
    assert ok(flow({"id": "a", "say": "Oi", "then": {"flow": "{{input.next}}"}}), registries) == []


def test_a_flow_target_in_else_on_fail_and_branches_is_checked_too():
    """persistence.md §1.10: every Next gets the edge check."""
    registries = {**REGISTRIES, "flows": [{"id": "fx"}]}
    assert "else names flow" in step_error({"id": "a", "if": {}, "else": {"flow": "y"}}, registries=registries)
    assert "onFail names flow" in step_error({"id": "a", "do": "ping", "onFail": {"flow": "y"}},
                                             registries=registries)
    assert "branches[0].then names flow" in step_error(
        {"id": "a", "prompt": "p", "branches": [{"when": "w", "then": {"flow": "y"}}]}, registries=registries)


# N8, step rule 2: talk steps ----------------------------------------------------------------

def test_talk_step_collect_names_fields():
    """persistence.md Part 5 example: unknown field "orcamento" in collect."""
    spec = {"id": "triagem", "name": "T", "steps": [{"id": "grana", "collect": ["orcamento"]}]}
    assert error_of(spec, {"fields": {"nome": {"type": "string"}}}) == (
        '[FlowConfigurationError] flow "triagem", step "grana": unknown field "orcamento" in collect. '
        "Add it to the agent's fields or fix the slug.")


def test_talk_step_ask_keys_name_fields():
    """persistence.md §1.10 step rule 2: field check of each ask key in `ask`."""
    assert step_error({"id": "a", "collect": ["nome"], "ask": {"nome": "Como se chama?", "nmoe": "x"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown field "nmoe" in ask. '
        "Add it to the agent's fields or fix the slug.")


@pytest.mark.parametrize("step", [{"prompt": "p", "question": "Qual o nome?"},
                                  {"collect": [], "question": "Qual o nome?"}])
def test_a_fixed_question_needs_fields_to_ask(step):
    """persistence.md §1.10 step rule 2; flows.md §5.3: question needs a non-empty collect."""
    assert step_error({"id": "a", **step}) == (
        '[FlowConfigurationError] flow "fx", step "a": has a question but collects nothing. '
        "A fixed question asks for fields: add collect, or send the text with a say step.")


def test_talk_rules_run_collect_then_ask_then_question():
    """persistence.md §1.10 step rule 2 order."""
    step = {"id": "a", "collect": ["x"], "ask": {"y": "?"}, "prompt": "p"}
    assert 'unknown field "x" in collect' in step_error(step)
    step["collect"] = []
    assert 'unknown field "y" in ask' in step_error(step)
    step["ask"] = {}
    step["question"] = "q"
    assert "has a question" in step_error(step)


# N8, step rule 3: branches -------------------------------------------------------------------

def test_a_branch_needs_when_or_if():
    """persistence.md §1.10 step rule 3."""
    assert step_error({"id": "a", "prompt": "p", "branches": [{"when": "w", "then": "a"}, {"then": "a"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[1] has neither when nor if. '
        "Give the branch an AI condition (when) or a code one (if).")


@pytest.mark.parametrize("wait", ["1h", {"event": "booked"}])
def test_a_wait_step_takes_only_if_branches(wait):
    """persistence.md §1.10 step rule 3; flows.md §6: nothing would ever judge a `when` on a wait."""
    assert step_error({"id": "a", "wait": wait, "else": "end", "branches": [{"when": "disse oi", "then": "a"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[0] is a "when" branch, but a wait step is judged '
        'by code only. Use "if", or move the branch to a talk step.')


def test_a_branch_if_names_registered_conditions_and_its_then_an_existing_step():
    """persistence.md §1.10 step rule 3: labelled branches[j].if and branches[j].then."""
    assert step_error({"id": "a", "prompt": "p", "branches": [{"if": {"vipp": 1}, "then": "a"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown condition "vipp" in branches[0].if. '
        "Register it in conditions or use equals, known, silenced.")
    assert step_error({"id": "a", "prompt": "p", "branches": [{"if": {"vip": 1}, "then": "b"}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": branches[0].then points at step "b", which does not '
        'exist. Use an existing step id or "end".')


def test_wait_if_branches_pass():
    """persistence.md §1.3: a wait step takes `if` branches."""
    assert ok(flow({"id": "a", "wait": "1d", "else": "b", "branches": [{"if": {"known": ["nome"]}, "then": "b"}]},
                   {"id": "b", "say": "Oi"})) == []


# N8, step rules 4-5: step instructions and tools -----------------------------------------------

def test_step_instruction_ifs_name_registered_conditions():
    """persistence.md §1.10 step rule 4: labelled instructions[j].if."""
    assert step_error({"id": "a", "prompt": "p", "instructions": [{"prompt": "x", "if": {"vipp": 1}}]}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown condition "vipp" in instructions[0].if. '
        "Register it in conditions or use equals, known, silenced.")


def test_step_tools_name_registered_tools():
    """persistence.md §1.10 step rule 5."""
    assert step_error({"id": "a", "prompt": "p", "tools": ["reservar"]}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown tool "reservar". '
        "Register it in the agent's tools or fix the name.")


def test_registries_tools_are_read_by_id():
    """persistence.md §1.10 registries: tools is a list of Tool objects (their id)."""
    assert ok(flow({"id": "a", "prompt": "p", "tools": ["agenda"]})) == []
    assert "unknown tool" in error_of(flow({"id": "a", "prompt": "p", "tools": ["agenda"]}), {"tools": []})


# N8, step rule 6: do steps and the `with` check -------------------------------------------------

def do_error(action, with_):
    return step_error({"id": "a", "do": action, "with": with_})


def test_do_names_a_registered_action():
    """persistence.md §1.10 step rule 6, the spec's example."""
    assert step_error({"id": "x", "do": "send_email", "with": {}}) == (
        '[FlowConfigurationError] flow "fx", step "x": unknown action "send_email". '
        "Register it in actions or fix the name.")


def test_with_needs_every_required_parameter():
    """persistence.md §1.10 with check 1, the spec's example."""
    assert do_error("notify", {"recipient": "owner"}) == (
        '[FlowConfigurationError] flow "fx", step "a": action "notify" needs parameter "message". '
        "Add it to `with`.")


def test_with_absent_counts_as_empty():
    """persistence.md §1.10 with check: `with` absent counts as {}."""
    assert step_error({"id": "a", "do": "notify"}).endswith('action "notify" needs parameter "recipient". '
                                                            "Add it to `with`.")
    assert ok(flow({"id": "a", "do": "ping"})) == []


def test_a_none_parameter_is_a_missing_one():
    """persistence.md §1.10 with check: absent after the strip."""
    assert 'needs parameter "message"' in do_error("notify", {"recipient": "x", "message": None})
    assert ok(flow({"id": "a", "do": "add_tags", "with": {"tags": [], "priority": None}})) == []


@pytest.mark.parametrize("action, with_, message", [
    ("notify", {"recipient": "o", "message": 5},
     'parameter "message" of action "notify" must be a string, got number. '
     "Values are not coerced; write the right type."),
    ("add_tags", {"tags": "vip"},
     'parameter "tags" of action "add_tags" must be a list of strings, got string. '
     "Values are not coerced; write the right type."),
    ("add_tags", {"tags": ["vip"], "priority": "3"},
     'parameter "priority" of action "add_tags" must be an integer, got string. '
     "Values are not coerced; write the right type."),
    ("send_webhook", {"method": "FETCH"},
     'parameter "method" of action "send_webhook" must be one of "GET", "POST", got "FETCH". '
     "Use one of the listed values."),
    ("send_webhook", {"method": "GET", "retryOn": [429, 500]},
     'parameter "retryOn" of action "send_webhook" must be one of 429, 503, got 500. '
     "Use one of the listed values."),
])
def test_with_values_match_their_definitions_spec_examples(action, with_, message):
    """persistence.md §1.10, the with-check examples."""
    assert do_error(action, with_) == f'[FlowConfigurationError] flow "fx", step "a": {message}'


@pytest.mark.parametrize("name, value, expected, got", [
    ("priority", 3.5, "an integer", "number"),
    ("priority", True, "an integer", "boolean"),
    ("tags", ["vip", 3], "a list of strings", "list"),
    ("tags", {"a": "b"}, "a list of strings", "object"),
    ("tags", ["vip", None], "a list of strings", "list"),
])
def test_with_type_mismatches_name_the_whole_values_type(name, value, expected, got):
    """persistence.md §1.10 mismatch rule: <got> is the type name of the whole value."""
    with_ = {"tags": ["vip"], name: value}
    assert do_error("add_tags", with_).endswith(
        f'parameter "{name}" of action "add_tags" must be {expected}, got {got}. '
        "Values are not coerced; write the right type.")


@pytest.mark.parametrize("value, got", [(True, "boolean"), ("3", "string"), (float("nan"), "number"),
                                        (float("inf"), "number")])
def test_a_number_parameter_is_a_finite_non_bool_number(value, got):
    """persistence.md §1.10 Matching: number needs an int or a finite float (never a bool)."""
    assert do_error("send_webhook", {"method": "GET", "score": value}).endswith(
        f'parameter "score" of action "send_webhook" must be a number, got {got}. '
        "Values are not coerced; write the right type.")


def test_matching_accepts_the_right_types_without_coercion():
    """persistence.md §1.10 Matching: 3.0 is an integer, 429.0 is 429, a bool is a boolean."""
    assert ok(flow({"id": "a", "do": "add_tags", "with": {"tags": ["a", "b"], "priority": 3.0}},
                   {"id": "b", "do": "send_webhook",
                    "with": {"method": "POST", "retryOn": [429.0, 503], "urgent": False, "score": 1.5}})) == []


def test_a_boolean_parameter_needs_a_bool():
    """flows.md §9.2: nothing is coerced."""
    assert do_error("send_webhook", {"method": "GET", "urgent": "true"}).endswith(
        'must be a boolean, got string. Values are not coerced; write the right type.')


def test_a_template_string_skips_the_enum_check_but_not_the_type_check():
    """persistence.md §1.10 Matching: a string containing {{ skips the enum check only."""
    assert ok(flow({"id": "a", "do": "send_webhook", "with": {"method": "{{context.method}}"}})) == []
    assert do_error("send_webhook", {"method": "GET", "score": "{{data.n}}"}).endswith(
        'parameter "score" of action "send_webhook" must be a number, got string. '
        'A template renders text: declare the parameter "type": "string" and convert it in your action.')


def test_a_typo_of_a_missing_parameter_is_named_as_a_typo():
    """A key of with that is the closest name of a missing parameter: the fix names the parameter
    (a falai for Python rule; the original reports only the missing parameter)."""
    assert do_error("notify", {"recipent": "o", "message": "m"}).endswith(
        'action "notify" has no parameter "recipent". Did you mean "recipient"?')


def test_a_bool_never_matches_an_enum():
    """persistence.md §1.10 Matching: a bool never matches an enum; 1 is not True."""
    registries = {**REGISTRIES, "actions": {"n": Action(parameters={"p": {"type": "integer", "enum": [1]}},
                                                        run=_run)}}
    assert step_error({"id": "a", "do": "n", "with": {"p": True}}, registries=registries).endswith(
        'parameter "p" of action "n" must be an integer, got boolean. Values are not coerced; write the right type.')


def test_an_array_enum_reports_the_first_listed_type_item_that_is_off_the_list():
    """persistence.md §1.10 mismatch rule: the first offending item of the right type."""
    registries = {**REGISTRIES, "actions": {"tag": Action(parameters={
        "tags": {"type": "array", "items": {"type": "string", "enum": ["vip", "lead"]}}}, run=_run)}}
    assert step_error({"id": "a", "do": "tag", "with": {"tags": ["vip", 3, "frio"]}}, registries=registries).endswith(
        'parameter "tags" of action "tag" must be one of "vip", "lead", got "frio". Use one of the listed values.')
    assert step_error({"id": "a", "do": "tag", "with": {"tags": ["vip", 3]}}, registries=registries).endswith(
        'parameter "tags" of action "tag" must be a list of strings, got list. '
        "Values are not coerced; write the right type.")


def test_an_array_definition_given_a_scalar_off_its_enum_reports_the_value_itself():
    """persistence.md §1.10 mismatch rule: the offending item is the value itself when it is not a list."""
    registries = {**REGISTRIES, "actions": {"tag": Action(parameters={
        "tags": {"type": "array", "items": {"type": "string", "enum": ["vip", "lead"]}}}, run=_run)}}
    assert step_error({"id": "a", "do": "tag", "with": {"tags": "frio"}}, registries=registries).endswith(
        'parameter "tags" of action "tag" must be one of "vip", "lead", got "frio". Use one of the listed values.')


def test_with_rejects_keys_that_are_not_parameters():
    """persistence.md §1.10 with check 2."""
    assert do_error("notify", {"recipient": "o", "message": "m", "urgente": True}) == (
        '[FlowConfigurationError] flow "fx", step "a": action "notify" has no parameter "urgente". '
        "Remove it or fix the name.")
    assert 'action "ping" has no parameter "x"' in do_error("ping", {"x": 1})


def test_with_checks_parameters_in_order_before_unknown_keys():
    """persistence.md §1.10 with check: parameters in declaration order, then the keys of with."""
    assert 'needs parameter "recipient"' in do_error("notify", {"extra": 1, "message": 5})
    assert 'parameter "message" of action "notify" must be' in do_error("notify", {"extra": 1, "recipient": "o",
                                                                                  "message": 5})


def test_an_action_given_as_a_dict_with_parameters_is_read_too():
    """persistence.md §1.10 registries: a dict with a "parameters" key is accepted (inferred)."""
    registries = {**REGISTRIES, "actions": {"n": {"parameters": {"to": {"type": "string"}}}}}
    assert 'action "n" needs parameter "to"' in step_error({"id": "a", "do": "n"}, registries=registries)


def test_on_fail_is_edge_checked_on_do_steps_only():
    """persistence.md §1.10 step rule 6: only do steps have their onFail target checked."""
    assert step_error({"id": "a", "do": "ping", "onFail": "falhou"}) == (
        '[FlowConfigurationError] flow "fx", step "a": onFail points at step "falhou", which does not exist. '
        'Use an existing step id or "end".')
    assert ok(flow({"id": "a", "say": "Oi", "onFail": "falhou"})) == []


def test_do_rules_run_action_then_with_then_on_fail():
    """persistence.md §1.10 step rule 6 order."""
    assert "needs parameter" in step_error({"id": "a", "do": "notify", "onFail": "x"})
    assert "onFail points at" in step_error({"id": "a", "do": "ping", "onFail": "x"})


# N8, step rule 7: waits --------------------------------------------------------------------

@pytest.mark.parametrize("text", ["5 min", "1w", "-1h", ".5h", "30"])
def test_a_timer_wait_needs_a_duration(text):
    """persistence.md §1.10 step rule 7: duration check labelled `wait`."""
    assert step_error({"id": "a", "wait": text}) == (
        f'[FlowConfigurationError] flow "fx", step "a": wait has duration "{text}", which does not parse. '
        'Write a number and a unit: "30s", "5m", "24h" or "3d".')


def test_an_event_wait_names_a_registered_event():
    """persistence.md §1.10 step rule 7."""
    assert step_error({"id": "a", "wait": {"event": "meeting_booked"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown event "meeting_booked" in wait. '
        "Register it in events or fix the name.")


def test_an_event_wait_up_to_is_a_duration():
    """persistence.md §1.10 step rule 7: duration check of upTo labelled `wait.upTo`."""
    assert step_error({"id": "a", "wait": {"event": "booked", "upTo": "7 days"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": wait.upTo has duration "7 days", which does not parse. '
        'Write a number and a unit: "30s", "5m", "24h" or "3d".')
    assert ok(flow({"id": "a", "wait": {"event": "booked", "upTo": "7d"}, "else": "end"})) == []


# N8, step rule 8: if steps -----------------------------------------------------------------

def test_an_if_names_registered_conditions():
    """persistence.md §1.10 step rule 8: labelled `if`."""
    assert step_error({"id": "a", "if": {"vipp": True}}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown condition "vipp" in if. '
        "Register it in conditions or use equals, known, silenced.")


@pytest.mark.parametrize("then", ["a", "b", {"step": "a"}, {"step": "a", "clear": ["nome"]}])
def test_an_if_jumping_back_needs_an_else(then):
    """persistence.md §1.10 step rule 8; flows.md §5.8 (to itself or an earlier step)."""
    target = then["step"] if isinstance(then, dict) else then
    assert step_error({"id": "a", "collect": ["nome"]}, {"id": "b", "if": {"known": ["nome"]}, "then": then}) == (
        f'[FlowConfigurationError] flow "fx", step "b": "if" jumps back to "{target}" with no else. '
        "Add else so the false branch has somewhere to go.")


def test_an_if_jumping_forward_needs_no_else():
    """flows.md §5.8: else defaults to "end"."""
    assert ok(flow({"id": "a", "if": {"known": ["nome"]}, "then": "b"}, {"id": "b", "say": "Oi"})) == []


def test_the_if_condition_is_checked_before_the_backward_jump():
    """persistence.md §1.10 step rule 8 order."""
    assert "unknown condition" in step_error({"id": "a", "if": {"x": 1}, "then": "a"})


def test_step_rules_run_in_order_for_one_step():
    """persistence.md §1.10 step rules 1-8: edges, talk, branches, instructions, tools, do, wait, if."""
    step = {"id": "a", "prompt": "p", "then": "x", "question": "q",
            "branches": [{"then": "a"}], "instructions": [{"prompt": "i", "if": {"z": 1}}], "tools": ["t"]}
    ladder = [("then", "then points at"), ("question", "has a question"), ("branches", "has neither"),
              ("instructions", "in instructions[0].if"), ("tools", 'unknown tool "t"')]
    for key, expected in ladder:
        assert expected in step_error(step), key
        del step[key]
    assert ok(flow(step)) == []


def test_steps_are_checked_in_order():
    """persistence.md §1.10 N8: per step, in order."""
    assert step_error({"id": "a", "say": "Oi", "then": "x"}, {"id": "b", "do": "nada"}).startswith(
        '[FlowConfigurationError] flow "fx", step "a":')


# Predicates (persistence.md §1.10 condition names check; flows.md §14.3) ------------------------

def if_error(condition):
    return step_error({"id": "a", "if": condition})


def test_equals_must_be_an_object():
    """flows.md §14.3: `if.equals is not an object`."""
    assert if_error({"equals": ["nome"]}) == (
        '[FlowConfigurationError] flow "fx", step "a": if.equals is not an object. Write equals as { field: value }.')


def test_equals_names_fields():
    """flows.md §14.3: `unknown field "x" in if.equals`."""
    assert if_error({"equals": {"plano": "pro"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown field "plano" in if.equals. '
        "Add it to the agent's fields or fix the slug.")


def test_equals_value_of_the_wrong_type_spec_example():
    """persistence.md §1.10 example: if.equals gives "confirmado" a string, but the field is a boolean."""
    assert if_error({"equals": {"confirmado": "sim"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": if.equals gives "confirmado" a string, but the field is '
        "a boolean. Write a boolean; values are not coerced.")


def test_equals_value_off_the_enum_spec_example():
    """persistence.md §1.10 example: if.equals gives "tamanho" "5", which is not one of ..."""
    assert if_error({"equals": {"tamanho": "5"}}) == (
        '[FlowConfigurationError] flow "fx", step "a": if.equals gives "tamanho" "5", which is not one of '
        '"1-10", "11-50", "51-200", "200+". Use one of the listed values.')


@pytest.mark.parametrize("slug, value, message", [
    ("orcamento", "1500", 'gives "orcamento" a string, but the field is a number. Write a number'),
    ("idade", 3.5, 'gives "idade" a number, but the field is an integer. Write an integer'),
    ("idade", True, 'gives "idade" a boolean, but the field is an integer. Write an integer'),
    ("nome", ["Ana"], 'gives "nome" a list, but the field is a string. Write a string'),
    ("nome", {"a": 1}, 'gives "nome" an object, but the field is a string. Write a string'),
    ("prioridade", "2", 'gives "prioridade" a string, but the field is an integer. Write an integer'),
])
def test_equals_values_are_not_coerced(slug, value, message):
    """flows.md §14.3: a value of the wrong type (or not a scalar), with its article."""
    assert if_error({"equals": {slug: value}}).endswith(f"if.equals {message}; values are not coerced.")


def test_equals_numeric_enum_off_list():
    """persistence.md §1.10 mismatch: the value's JSON literal and the listed values."""
    assert if_error({"equals": {"prioridade": 4}}).endswith(
        'if.equals gives "prioridade" 4, which is not one of 1, 2, 3. Use one of the listed values.')


def test_equals_values_that_match():
    """persistence.md §1.10 Matching: numeric equality, templates skip the enum, ints are integers."""
    assert ok(flow({"id": "a", "if": {"equals": {"prioridade": 2.0, "idade": 30, "orcamento": 1500.5,
                                                  "confirmado": False, "tamanho": "{{context.porte}}",
                                                  "nome": "Ana"}}})) == []


def test_known_must_be_a_list_of_fields():
    """flows.md §14.3: `if.known is not a list` / `unknown field "x" in if.known`."""
    assert if_error({"known": "nome"}) == (
        '[FlowConfigurationError] flow "fx", step "a": if.known is not a list. Write known as [field, ...].')
    assert if_error({"known": ["nome", "nmoe"]}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown field "nmoe" in if.known. '
        "Add it to the agent's fields or fix the slug.")


def test_silenced_must_be_a_boolean():
    """flows.md §14.3: `if.silenced is not a boolean`."""
    assert if_error({"silenced": "yes"}) == (
        '[FlowConfigurationError] flow "fx", step "a": if.silenced is not a boolean. Write true or false.')


def test_any_other_key_must_be_a_registered_condition():
    """flows.md §14.3: `unknown condition "x" in if`."""
    assert if_error({"tagsAny": ["vip"]}) == (
        '[FlowConfigurationError] flow "fx", step "a": unknown condition "tagsAny" in if. '
        "Register it in conditions or use equals, known, silenced.")


def test_condition_keys_are_checked_in_order():
    """persistence.md §1.10 condition names check: for each key in order."""
    assert "unknown condition" in if_error({"x": 1, "known": "nome"})
    assert "known is not a list" in if_error({"known": "nome", "x": 1})


def test_function_predicates_and_empty_conditions_are_not_checked():
    """flows.md §14.3: function predicates are not checked; {} always holds."""
    assert ok(flow({"id": "a", "if": lambda ctx: True, "then": "b", "else": "b"}, {"id": "b", "if": {}},
                   **{"while": lambda ctx: True}, on=[{"message": [], "if": lambda ctx: False}])) == []


def test_registered_and_built_in_condition_keys_pass():
    """flows.md §7.2."""
    assert ok(flow({"id": "a", "if": {"vip": ["x"], "known": ["nome"], "silenced": False,
                                      "equals": {"nome": "Ana"}}})) == []


@pytest.mark.parametrize("spec, label", [
    (flow(**{"while": {"equals": {"nome": 1}}}), 'flow "fx": while.equals gives'),
    (flow(on=[{"message": [], "if": {"equals": {"nome": 1}}}]), 'flow "fx", trigger #1: if.equals gives'),
    (flow(instructions=[{"prompt": "p", "if": {"equals": {"nome": 1}}}]), 'flow "fx": instructions[0].if.equals'),
    (flow({"id": "a", "prompt": "p", "branches": [{"if": {"equals": {"nome": 1}}, "then": "a"}]}),
     'flow "fx", step "a": branches[0].if.equals'),
    (flow({"id": "a", "prompt": "p", "instructions": [{"prompt": "i", "if": {"equals": {"nome": 1}}}]}),
     'flow "fx", step "a": instructions[0].if.equals'),
])
def test_every_predicate_position_is_checked_with_its_label(spec, label):
    """flows.md §14.3: <where> names the position: while, if, instructions[i].if, branches[i].if."""
    assert error_of(spec).startswith(f"[FlowConfigurationError] {label}")


# Edge cases the spec leaves open (inferred) -----------------------------------------------------

def test_huge_integers_are_whole_numbers_not_overflows():
    """Inferred: an int too large for a float is still an int (maxAsks, number and integer parameters)."""
    huge = 10 ** 400
    assert ok(flow({"id": "a", "collect": ["nome"], "maxAsks": huge},
                   {"id": "b", "do": "add_tags", "with": {"tags": [], "priority": huge}},
                   {"id": "c", "do": "send_webhook", "with": {"method": "GET", "score": huge}})) == []


def test_registered_flows_without_a_string_id_are_not_listed():
    """Inferred: `Use one of ...` lists the ids a target could name."""
    registries = {**REGISTRIES, "flows": [{"id": "fx"}, {"name": "sem id"}, "x", {"id": "fx"}]}
    assert step_error({"id": "a", "say": "Oi", "then": {"flow": "y"}}, registries=registries).endswith(
        'then names flow "y", which this agent does not have. Use one of "fx", or add the flow.')


def test_a_parameter_definition_of_an_unknown_type_puts_no_type_rule():
    """Inferred: parameter definitions are host code; an unknown type is not second-guessed."""
    registries = {**REGISTRIES, "actions": {"n": Action(parameters={"extra": {"type": "object"}}, run=_run)}}
    assert ok(flow({"id": "a", "do": "n", "with": {"extra": {"a": 1}}}), registries) == []


def test_enum_members_are_written_as_javascript_prints_them():
    """persistence.md §1.10: a list of values is each value's JSON literal joined with ", "."""
    registries = {**REGISTRIES, "actions": {"n": Action(parameters={"p": {"type": "number", "enum": [1.5, 2.0]}},
                                                        run=_run)}}
    assert step_error({"id": "a", "do": "n", "with": {"p": 3}}, registries=registries).endswith(
        'parameter "p" of action "n" must be one of 1.5, 2, got 3. Use one of the listed values.')
