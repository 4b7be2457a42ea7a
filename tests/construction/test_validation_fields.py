"""Field definitions are checked when the agent is built (issue 9; flows.md §2.1, the rule inferred), so a
field the engine could never fill fails at construction instead of asking forever at run time."""
import logging

import pytest

from falai import FlowConfigurationError, ScriptedProvider, falai

FLOW = {"id": "f", "name": "F", "on": [{"message": []}], "steps": [{"id": "a", "collect": ["motivo"],
                                                                     "prompt": "Pergunte o motivo."}]}


def build(definition, flows=(FLOW,)):
    return falai().fields({"motivo": definition}).agent(name="Ana", provider=ScriptedProvider(), flows=list(flows))


def error_of(definition):
    with pytest.raises(FlowConfigurationError) as caught:
        build(definition)
    return str(caught.value).removeprefix("[FlowConfigurationError] ")


@pytest.mark.parametrize("definition, message", [
    ({"type": "enum", "values": ["a"]},
     'field "motivo": type "enum" is not a field type. Use "type": "string" with "enum": [...].'),
    ({"type": "str"}, 'field "motivo": type "str" is not a field type. Did you mean "string"?'),
    ({"type": "float"}, 'field "motivo": type "float" is not a field type. Did you mean "number"?'),
    ({"type": "strnig"}, 'field "motivo": type "strnig" is not a field type. Did you mean "string"?'),
    ({"type": "date"}, 'field "motivo": type "date" is not a field type. '
                       'Use "string", "number", "integer" or "boolean".'),
    ({"type": 5}, 'field "motivo": type 5 is not a field type. Use "string", "number", "integer" or "boolean".'),
    ({"type": "array", "items": {"type": "string"}},
     'field "motivo": type "array" is not a field type. Use "string", "number", "integer" or "boolean".'),
])
def test_a_type_that_is_not_a_field_type_is_an_error_naming_the_field_and_the_fix(definition, message):
    assert error_of(definition) == message


@pytest.mark.parametrize("definition, message", [
    ({"tpye": "string"}, 'field "motivo": has no type; its only key is "tpye" (did you mean "type" for "tpye"?). '
                         'Add "type": "string", "number", "integer" or "boolean".'),
    ({"category": "string"}, 'field "motivo": has no type; its only key is "category". '
                             'Add "type": "string", "number", "integer" or "boolean".'),
    ({"enmu": ["a", "b"]}, 'field "motivo": has no type; its only key is "enmu" (did you mean "enum" for "enmu"?). '
                           'Add "type": "string", "number", "integer" or "boolean".'),
    ({}, 'field "motivo": has no type; it has no keys. Add "type": "string", "number", "integer" or "boolean".'),
    ("string", 'field "motivo": is "string", not an object. Write it as { "type": "string" }.'),
    (None, 'field "motivo": is null, not an object. Write it as { "type": "string" }.'),
])
def test_a_definition_without_a_type_lists_its_keys(definition, message):
    assert error_of(definition) == message


@pytest.mark.parametrize("definition, message", [
    ({"type": "string", "enum": []}, 'field "motivo": enum is a list, not a non-empty list. Write enum as the list '
                                     'of allowed values, such as ["P", "M", "G"].'),
    ({"type": "string", "enum": "a,b"}, 'field "motivo": enum is "a,b", not a non-empty list.'),
    ({"type": "string", "enum": ["a", 2]}, 'field "motivo": enum[1] is 2, not a string. Write every value of enum '
                                           "as a string, or change the type."),
    ({"type": "integer", "enum": [1, 2.5]}, 'field "motivo": enum[1] is 2.5, not an integer.'),
    ({"type": "number", "enum": [1, True]}, 'field "motivo": enum[1] is true, not a number.'),
    ({"type": "boolean", "enum": [True]}, 'field "motivo": is a boolean with an enum, and a boolean never matches '
                                          "an enum. Remove enum, or make the field a string"),
    ({"type": "string", "extract": "always"}, 'field "motivo": extract is "always", which is not one of "anywhere", '
                                              '"asked", "never". Use one of them.'),
    ({"type": "string", "ask": ["Pergunte."]}, 'field "motivo": ask is a list, not text. Write ask as a string.'),
    ({"type": "string", "description": 3}, 'field "motivo": description is 3, not text.'),
])
def test_enum_extract_and_texts_are_checked(definition, message):
    assert error_of(definition).startswith(message)


@pytest.mark.parametrize("definition", [
    {"type": "string"}, {"type": "string", "enum": ["a", "b"], "label": "Motivo", "description": "d", "ask": "?"},
    {"type": "integer", "enum": [1, 2.0]}, {"type": "number", "enum": [1.5, 2]},
    {"type": "boolean", "extract": "anywhere"},
    {"type": "string", "enum": None, "ask": None},     # None means "not set" (flows.md, Notation)
])
def test_well_formed_definitions_build(definition):
    build(definition)


def test_an_unknown_key_beside_a_type_is_a_warning_naming_the_closest_key(caplog):
    with caplog.at_level(logging.WARNING, logger="falai"):
        build({"type": "string", "enmu": ["a", "b"]})
    assert ('[Agent] field "motivo": unknown key "enmu" is kept but never read. Did you mean "enum"?'
            in caplog.messages)


def test_fields_that_are_not_a_dict_fail_at_construction():
    from falai import Agent
    with pytest.raises(FlowConfigurationError, match=r"fields is a list, not an object"):
        Agent(name="Ana", provider=ScriptedProvider(), fields=[{"type": "string"}])
