"""Issue 9: jsonschema is optional. When it is installed, the agent checks that each tool's parameters is a valid
JSON Schema (2020-12) at construction; without it only the object rule of model-calls.md §6.9 applies."""
import sys

import pytest

from falai import FlowConfigurationError, ScriptedProvider, Tool, falai

BROKEN = {"type": "object", "properties": {"cidade": {"type": "texto"}}}


def build(parameters):
    tool = Tool(id="clima", handler=lambda args, ctx: None, parameters=parameters)
    return falai().fields({}).agent(name="Ana", provider=ScriptedProvider(), tools=[tool])


def test_an_invalid_schema_fails_at_construction_naming_the_tool_and_the_spot():
    pytest.importorskip("jsonschema")
    with pytest.raises(FlowConfigurationError) as caught:
        build(BROKEN)
    message = str(caught.value)
    assert message.startswith('[FlowConfigurationError] tool "clima": parameters is not a valid JSON Schema at '
                              "properties/cidade/type: ")
    assert message.endswith("Fix the schema (JSON Schema 2020-12).")


def test_a_valid_schema_builds():
    build({"type": "object", "properties": {"cidade": {"type": "string", "enum": ["Curitiba"]}},
           "required": ["cidade"], "additionalProperties": False})


def test_without_jsonschema_the_schema_is_not_checked(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)      # import jsonschema now raises ImportError
    build(BROKEN)
