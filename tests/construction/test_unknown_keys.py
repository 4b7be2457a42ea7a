"""Issue 9: unknown keys, template references to fields that do not exist, check_flow and strict validation.

Unknown keys stay in the flow (persistence.md §1.7 step 3); each is a warning naming the key, where it is and
the closest known key. The agent logs its warnings with the "[Agent]" prefix.
"""
import copy
import logging

import pytest

from falai import FlowConfigurationError, Problem, ScriptedProvider, check_flow, falai, validate_flow

FIELDS = {"nome": {"type": "string", "ask": "Pergunte o nome."}, "cidade": {"type": "string"}}
REGISTRIES = {"fields": FIELDS, "actions": {"avisar": {"parameters": {"para": {"type": "string"}}}}}


def flow(*steps, **keys):
    return {"id": "f", "name": "F", "steps": list(steps or [{"id": "oi", "say": "Olá"}]), **keys}


def warnings(spec, registries=REGISTRIES):
    return validate_flow(spec, registries).warnings


@pytest.mark.parametrize("spec, path, message", [
    (flow(mystery=1), ["mystery"],
     'flow "f": unknown key "mystery" is kept but never read. Remove it or fix the name.'),
    (flow(onend="stay"), ["onend"], 'flow "f": unknown key "onend" is kept but never read. Did you mean "onEnd"?'),
    (flow(on=[{"message": [], "repet": "always"}]), ["on", 0, "repet"],
     'flow "f", trigger #1: unknown key "repet" is kept but never read. Did you mean "repeat"?'),
    (flow({"id": "oi", "say": "Olá", "thne": "end"}), ["steps", 0, "thne"],
     'flow "f", step "oi": unknown key "thne" is kept but never read. Did you mean "then"?'),
    (flow({"id": "oi", "say": "Olá", "then": {"step": "b", "claer": ["nome"]}}, {"id": "b", "say": "Oi"}),
     ["steps", 0, "then", "claer"],
     'flow "f", step "oi", then: unknown key "claer" is kept but never read. Did you mean "clear"?'),
    (flow({"id": "oi", "prompt": "Ajude.", "branches": [{"when": "quer sair", "then": "end", "iff": {}}]}),
     ["steps", 0, "branches", 0, "iff"],
     'flow "f", step "oi", branches[0]: unknown key "iff" is kept but never read. Did you mean "if"?'),
    (flow({"id": "oi", "prompt": "Ajude.", "instructions": [{"prompt": "Seja breve.", "knd": "must"}]}),
     ["steps", 0, "instructions", 0, "knd"],
     'flow "f", step "oi", instructions[0]: unknown key "knd" is kept but never read. Did you mean "kind"?'),
    (flow({"id": "oi", "wait": {"event": "pago", "upto": "1d"}}), ["steps", 0, "wait", "upto"],
     'flow "f", step "oi", wait: unknown key "upto" is kept but never read. Did you mean "upTo"?'),
    (flow(on=[{"mention": ["cidade"], "extract": {"cidade": {"type": "string", "optinal": True}}}]),
     ["on", 0, "extract", "cidade", "optinal"],
     'flow "f", trigger #1, extract "cidade": unknown key "optinal" is kept but never read. Did you mean "optional"?'),
])
def test_an_unknown_key_at_every_flow_level_is_a_warning_with_its_path(spec, path, message):
    registries = {**REGISTRIES, "events": {"pago": object()}}
    assert warnings(spec, registries) == [message]
    assert check_flow(spec, registries) == [Problem("warning", path, message)]


def test_unknown_keys_stay_in_the_flow_and_the_spec():
    """persistence.md §1.7 step 3: unknown keys are kept; validating never mutates the flow."""
    spec = flow({"id": "oi", "say": "Olá", "thne": "end"}, mystery={"a": 1})
    before = copy.deepcopy(spec)
    validate_flow(spec, REGISTRIES)
    agent = falai().fields(FIELDS).agent(name="Ana", provider=ScriptedProvider(), flows=[spec])
    assert spec == before and agent.flows[0]["mystery"] == {"a": 1} and agent.flows[0]["steps"][0]["thne"] == "end"


def test_the_spec_keys_raise_no_warning():
    """Every key of flows.md §3.1, §4, §5, §6 and §12 is known, a FlowSpec's kind and ui included."""
    spec = {"id": "f", "name": "F", "description": "d", "anchor": "lead", "collect": ["nome"],
            "clearOnStart": ["cidade"], "onEnd": "stay", "tools": [], "while": {"known": ["nome"]},
            "instructions": [{"id": "i", "kind": "must", "when": "sempre", "if": {"known": ["nome"]}, "prompt": "p"}],
            "on": [{"message": ["oi"], "if": {"known": []}, "repeat": "once"},
                   {"silence": "1h", "businessHours": True},
                   {"mention": ["cidade"], "extract": {"c": {"type": "string", "description": "d", "optional": True}}}],
            "steps": [{"id": "a", "kind": "collect", "label": "A", "ui": {"x": 1}, "collect": ["nome"],
                       "prompt": "p", "ask": {"nome": "?"}, "question": "Nome?", "maxAsks": 2, "tools": [],
                       "instructions": [], "branches": [{"when": "sair", "then": {"step": "a", "clear": ["nome"]}}]},
                      {"id": "b", "say": "Oi", "media": {"slug": "x"}, "once": True},
                      {"id": "c", "do": "avisar", "with": {"para": "x"}, "onFail": "end"},
                      {"id": "d", "wait": "1h", "businessHours": True, "else": "end",
                       "branches": [{"if": {"known": ["nome"]}, "then": "end"}]},
                      {"id": "e", "if": {"known": ["nome"]}, "else": {"flow": "f", "input": {}}}]}
    assert [w for w in warnings(spec) if "unknown key" in w] == []


def test_the_agent_logs_unknown_keys_with_the_agent_prefix(caplog):
    with caplog.at_level(logging.WARNING, logger="falai"):
        falai().fields(FIELDS).agent(name="Ana", provider=ScriptedProvider(),
                                     flows=[flow({"id": "oi", "sya": "Olá", "say": "Oi"})])
    assert '[Agent] flow "f", step "oi": unknown key "sya" is kept but never read. Did you mean "say"?' in (
        caplog.messages)


def test_unknown_keys_outside_the_flows_are_warned_at_construction(caplog):
    """Action parameters, agent and idle instructions, idle and compaction (issue 9)."""
    f = falai().fields(FIELDS)
    notify = f.action(parameters={"para": {"type": "string", "optinal": True}}, run=lambda p, c: None)
    with caplog.at_level(logging.WARNING, logger="falai"):
        f.agent(name="Ana", provider=ScriptedProvider(), actions={"avisar": notify},
                instructions=[{"prompt": "Seja breve.", "wen": "sempre"}],
                idle={"prompt": "Atenda.", "tols": [], "instructions": [{"promt": "x", "prompt": "y"}]},
                compaction={"maxTokens": 8000, "preserveRecent": 4})
    assert caplog.messages == [
        '[Agent] action "avisar", parameter "para": unknown key "optinal" is kept but never read. '
        'Did you mean "optional"?',
        '[Agent] idle: unknown key "tols" is kept but never read. Did you mean "tools"?',
        '[Agent] agent, instructions[0]: unknown key "wen" is kept but never read. Did you mean "when"?',
        '[Agent] idle, instructions[0]: unknown key "promt" is kept but never read. Did you mean "prompt"?',
        '[Agent] compaction: unknown key "preserveRecent" is kept but never read. '
        'Did you mean "preserveRecentCount"?']


# Template references (flows.md §8) ------------------------------------------------------------

def test_a_data_reference_to_a_field_that_does_not_exist_warns_with_the_closest_field():
    spec = flow({"id": "oi", "say": "Olá, {{data.nmae}}!"})
    message = ('flow "f", step "oi": say refers to {{data.nmae}}, but no field "nmae" is declared, so it is sent '
               "as written. Did you mean {{data.nome}}?")
    assert warnings(spec) == [message]
    assert check_flow(spec, REGISTRIES) == [Problem("warning", ["steps", 0, "say"], message)]


@pytest.mark.parametrize("step, label, path", [
    ({"id": "oi", "prompt": "Confirme {{ data.cidadee }}."}, "prompt", ["steps", 0, "prompt"]),
    ({"id": "oi", "collect": ["nome"], "question": "{{data.cidad}}?"}, "question", ["steps", 0, "question"]),
    ({"id": "oi", "collect": ["nome"], "ask": {"nome": "{{data.cidadde}}"}}, "ask.nome", ["steps", 0, "ask", "nome"]),
    ({"id": "oi", "do": "avisar", "with": {"para": "{{data.cidad.uf}}"}}, "with.para", ["steps", 0, "with", "para"]),
    ({"id": "oi", "prompt": "p", "instructions": [{"prompt": "Use {{data.cidad}}"}]}, "instructions[0].prompt",
     ["steps", 0, "instructions", 0]),
    ({"id": "oi", "prompt": "p", "branches": [{"when": "mora em {{data.cidad}}", "then": "end"}]},
     "branches[0].when", ["steps", 0, "branches", 0, "when"]),
])
def test_every_rendered_text_is_read_for_data_references(step, label, path):
    problems = check_flow(flow(step), REGISTRIES)
    assert [(p.severity, p.path) for p in problems] == [("warning", path)]
    assert f"{label} refers to" in problems[0].message and "Did you mean {{data.cidade}}?" in problems[0].message


def test_a_placeholder_without_a_root_warns_and_suggests_data():
    assert warnings(flow({"id": "oi", "say": "Olá, {{nome}}!"})) == [
        'flow "f", step "oi": say refers to {{nome}}, which is none of data, context, input, so it is sent as '
        "written. Did you mean {{data.nome}}?"]


def test_declared_fields_context_and_input_references_do_not_warn():
    spec = flow({"id": "oi", "say": "Olá, {{data.nome}} de {{ data.cidade }}, {{context.lead.nome}} {{input.x}}"})
    assert warnings(spec) == []


def test_without_fields_in_the_registries_data_references_are_not_read():
    assert validate_flow(flow({"id": "oi", "say": "{{data.nmae}}"})).warnings == []


def test_templates_outside_the_flows_are_read_at_construction(caplog):
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome de {{data.empresaa}}."}})
    with caplog.at_level(logging.WARNING, logger="falai"):
        f.agent(name="Ana", provider=ScriptedProvider(), persona="Fala com {{data.nom}}",
                idle={"prompt": "Atenda {{data.nome}}."})
    assert caplog.messages == [
        '[Agent] field "nome": ask refers to {{data.empresaa}}, but no field "empresaa" is declared, so it is sent '
        "as written. Declare the field or fix the name.",
        '[Agent] agent: persona refers to {{data.nom}}, but no field "nom" is declared, so it is sent as written. '
        "Did you mean {{data.nome}}?"]


# check_flow and strict ------------------------------------------------------------------------

def test_check_flow_collects_every_error_and_warning_with_its_path():
    spec = flow({"id": "a", "say": 5}, {"id": "b", "collect": ["nmoe"], "thne": "a"},
                {"id": "c", "do": "sumir"}, {"id": "d", "wait": "5 min"}, on=[{"mesage": []}], mystery=1)
    problems = check_flow(spec, REGISTRIES)
    assert [(p.severity, p.path) for p in problems] == [
        ("error", ["steps", 0]), ("error", ["on", 0]), ("error", ["steps", 1]), ("error", ["steps", 2]),
        ("error", ["steps", 3]), ("warning", ["mystery"]), ("warning", ["on", 0, "mesage"]),
        ("warning", ["steps", 1, "thne"])]
    errors = [p.message for p in problems if p.severity == "error"]
    assert errors[0] == 'flow "f", step "a": say is 5, not text. Write say as a string.'     # shape first
    assert errors[1].startswith('flow "f", trigger #1: names no trigger kind; its only key is "mesage" '
                                '(did you mean "message" for "mesage"?).')
    assert errors[2] == ('flow "f", step "b": unknown field "nmoe" in collect. Add it to the agent\'s fields or '
                         "fix the slug.")
    assert errors[3].startswith('flow "f", step "c": unknown action "sumir"')
    assert errors[4].startswith('flow "f", step "d": wait has duration "5 min", which does not parse')


def test_validate_flow_raises_the_first_error_check_flow_lists():
    spec = flow({"id": "a", "say": 5}, {"id": "b", "collect": ["nmoe"]})
    with pytest.raises(FlowConfigurationError) as caught:
        validate_flow(spec, REGISTRIES)
    assert str(caught.value) == "[FlowConfigurationError] " + check_flow(spec, REGISTRIES)[0].message


def test_a_shape_error_leaves_that_units_names_unread():
    """A collect that is not a list is reported once, not also as unknown fields "n", "o", ..."""
    problems = check_flow(flow({"id": "a", "collect": "nome", "prompt": "p"}, collect="nome"), REGISTRIES)
    assert [(p.severity, p.path) for p in problems] == [("error", ["collect"]), ("error", ["steps", 0])]


@pytest.mark.parametrize("spec", [None, [], {"id": "f"}, {"id": "f", "steps": 5}])
def test_check_flow_never_raises_for_a_flow_it_cannot_read(spec):
    problems = check_flow(spec)
    assert len(problems) == 1 and problems[0].severity == "error" and problems[0].path == []


def test_a_clean_flow_has_no_problems():
    assert check_flow(flow(), REGISTRIES) == []


def test_strict_turns_the_first_warning_into_an_error():
    spec = flow({"id": "oi", "say": "Olá {{data.nmae}}", "thne": "end"})
    assert len(validate_flow(spec, REGISTRIES).warnings) == 2
    with pytest.raises(FlowConfigurationError) as caught:
        validate_flow(spec, REGISTRIES, strict=True)
    assert str(caught.value) == "[FlowConfigurationError] " + validate_flow(spec, REGISTRIES).warnings[0]
    assert validate_flow(flow(), REGISTRIES, strict=True).warnings == []


def test_a_with_key_that_is_no_parameter_names_the_closest_one():
    """persistence.md §1.10 `with` check; issue 9: the fix names the parameter the key probably meant."""
    with pytest.raises(FlowConfigurationError) as caught:
        validate_flow(flow({"id": "a", "do": "avisar", "with": {"para": "x", "paar": "y"}}), REGISTRIES)
    assert str(caught.value) == ('[FlowConfigurationError] flow "f", step "a": action "avisar" has no parameter '
                                 '"paar". Did you mean "para"?')


def test_a_misspelt_required_compaction_key_is_named_in_the_error():
    with pytest.raises(ValueError) as caught:
        falai().fields({}).agent(name="Ana", provider=ScriptedProvider(), compaction={"maxToken": 8000})
    assert str(caught.value).startswith('[CompactionEngine] maxTokens is missing (did you mean "maxTokens" for '
                                        '"maxToken"?): it must be more than 0.')
