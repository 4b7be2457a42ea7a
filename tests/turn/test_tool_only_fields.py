"""Tool-only fields: ``extract: "never"`` keeps a field out of every model call (docs/guide/flows.md, Fields)."""
import json

import pytest

import falai as F
from falai import FlowConfigurationError, ScriptedProvider, Tool, falai

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both

FIELDS = {
    "cidade": {"type": "string", "ask": "Ask which city."},
    "codigo": {"type": "string", "description": "Booking code", "extract": "never"},
}


def book(args, ctx):
    return {"value": {"codigo": "RES-1"}, "data": {"codigo": "RES-1"}}


BOOK = Tool(id="reservar", description="Book the room and return the code.", handler=book,
            parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]})


def booking_agent(script, tools=(BOOK,)):
    f = falai().fields(FIELDS)
    flow = f.flow({"id": "hospedagem", "name": "Lodging", "on": [{"message": ["wants to book a room"]}],
                   "steps": [
                       {"id": "onde", "collect": ["cidade"]},
                       {"id": "confirma", "prompt": "If they said yes, book and give the code.",
                        "collect": ["codigo"], "tools": ["reservar"]},
                       {"id": "fim", "say": "Booked: {{data.codigo}}."},
                   ]})
    provider = ScriptedProvider(script=script)
    return f.agent(name="Concierge", provider=provider, flows=[flow], tools=list(tools)), provider


def every_text(request):
    return json.dumps([request.system, request.prompt, request.schema, request.v4_schema, request.tools])


def test_a_tool_only_field_is_in_no_model_call():
    agent, provider = booking_agent({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}},
                       {"fields": {}}],
        "speak": [{"message": "Shall I book Curitiba?"}, {"message": "Booking now."}],
    })
    r = agent.turn(session_id="s", message="Quero um quarto em Curitiba", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="yes", id="m2")
    assert provider.calls, "the turns made model calls"
    for request in provider.calls:
        assert "codigo" not in every_text(request), request.schema_name


def test_a_model_reply_naming_a_tool_only_field_writes_nothing():
    """The customer's "yes" cannot fill the booking code, whatever the reply says."""
    agent, provider = booking_agent({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba", "codigo": "FAKE"}},
                       {"fields": {"codigo": "FAKE"}}],
        "speak": [{"message": "Shall I book?", "codigo": "FAKE"}, {"message": "Sure!", "codigo": "FAKE"}],
    })
    r = agent.turn(session_id="s", message="Quero um quarto em Curitiba", id="m1")
    refused = [o for o in r.outcomes if o.code == "tool-only"]
    assert [(o.kind, o.status, o.detail) for o in refused] == [("collect", "skipped", "codigo")]
    r = agent.turn(session_id="s", session=r.session, message="yes, booking code FAKE", id="m2")
    assert "codigo" not in r.session.data
    assert r.session.runs[0].step_id == "confirma" and r.session.runs[0].status == "asking"


def test_a_collect_step_waits_for_the_tool_then_moves_on():
    agent, provider = booking_agent({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}}, {"fields": {}}],
        "speak": [{"message": "Shall I book Curitiba?"},
                  {"message": "", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": "Curitiba"}}]},
                  {"message": "Done."}],
    })
    r = agent.turn(session_id="s", message="Quero um quarto em Curitiba", id="m1")
    assert r.session.runs[0].step_id == "confirma" and r.session.runs[0].status == "asking"
    r = agent.turn(session_id="s", session=r.session, message="yes", id="m2")
    assert r.session.data["codigo"] == "RES-1"
    assert [m.text for m in r.messages] == ["Done.", "Booked: RES-1."]


def test_validation_warns_when_nothing_can_write_a_tool_only_field():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "prompt": "Wait.", "collect": ["codigo"]}]}
    result = F.check_flow(flow, {"fields": FIELDS})
    assert any("extract: never" in p.message and p.severity == "warning" for p in result), result
    quiet = F.check_flow(flow, {"fields": FIELDS, "tools": ["reservar"]})
    assert not any("extract: never" in p.message for p in quiet)
    with_action = F.check_flow(flow, {"fields": FIELDS, "actions": {"grava": {"parameters": {}}}})
    assert not any("extract: never" in p.message for p in with_action)


def test_an_unknown_extract_mode_names_never_among_the_choices():
    with pytest.raises(FlowConfigurationError, match='"anywhere", "asked", "never"'):
        F.Agent(name="A", provider=ScriptedProvider(), fields={"x": {"type": "string", "extract": "tools"}})
