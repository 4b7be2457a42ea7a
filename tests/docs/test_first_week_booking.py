"""A newcomer's restaurant-booking bot built from the guide alone, as JSON and a registry file: it cannot
be talked into a tool-only value, validates and normalises its date, takes a correction, explains every
silence and does not nudge after the booking (docs/guide/surprises.md)."""
import json

import pytest

import falai
from falai import Agent, ScriptedProvider, Tool, fake_clock, from_spec

pytestmark = pytest.mark.protocols("lean", "v4")

REGISTRY = {
    "agent": {"name": "Mesa", "idle": "silent"},
    "fields": {
        "data": {"type": "string", "format": "date", "ask": "Ask the date.", "correctable": True},
        "pessoas": {"type": "integer", "ask": "Ask how many people.", "correctable": True},
        "disponivel": {"type": "boolean", "extract": "never", "description": "The date has a free table."},
        "reserva": {"type": "string", "extract": "never", "description": "The booking code."},
    },
}
FLOWS = [
    {"id": "reservar", "name": "Book a table", "on": [{"message": ["wants to book a table"], "repeat": "always"}],
     "steps": [
         {"id": "quando", "kind": "collect", "collect": ["data", "pessoas"]},
         {"id": "confere", "kind": "collect", "prompt": "Check the date with the tool.", "collect": ["disponivel"],
          "tools": ["agenda"]},
         {"id": "fecha", "kind": "collect", "prompt": "Book it and give the code.", "collect": ["reserva"],
          "tools": ["agendar"]},
         {"id": "ok", "kind": "say", "say": "Booked {{data.pessoas}} for {{data.data}}: {{data.reserva}}."}]},
    {"id": "horario", "name": "Opening hours", "on": [{"message": ["asks the opening hours"]}],
     "steps": [{"id": "h", "kind": "say", "say": "We open at noon."}]},
    {"id": "menu", "name": "Menu", "on": [{"message": ["asks for the menu"]}],
     "steps": [{"id": "m", "kind": "say", "say": "Here is the menu."}]},
    {"id": "cutucar", "name": "Nudge", "on": [{"silence": "2h", "if": {"unknown": ["reserva"]}}],
     "steps": [{"id": "p", "kind": "say", "say": "Still there? I can finish your booking."}]},
]


def tools():
    return [Tool(id="agenda", description="Whether the date has a free table.",
                 parameters={"type": "object", "properties": {"data": {"type": "string"}}, "required": ["data"]},
                 handler=lambda args, ctx: {"value": {"free": True}, "data": {"disponivel": True}}),
            Tool(id="agendar", description="Book the table.",
                 parameters={"type": "object", "properties": {}},
                 handler=lambda args, ctx: {"value": {"code": "MESA-1"}, "data": {"reserva": "MESA-1"}})]


def build(tmp_path, script):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(REGISTRY))
    provider = ScriptedProvider(script=script)
    agent = Agent(provider=provider, flows=[from_spec(spec) for spec in FLOWS], tools=tools(),
                  clock=fake_clock("2026-12-01T10:00:00.000Z"), **falai.load_registry(str(path)))
    return agent, provider


def test_the_booking_bot_of_the_first_week(tmp_path):
    agent, provider = build(tmp_path, {
        "understand": [
            {"flows": {"reservar": 95}, "fields": {"data": "next friday-ish", "pessoas": 2}},   # m1
            {"fields": {"data": "2026/12/20"}},                                                # m2
            {"fields": {"pessoas": 4}},                                                        # m3: a correction
            {"fields": {}},                                                                    # m4
            {"flows": {"reservar": 5, "horario": 0, "menu": 0}},                               # m5
        ],
        "speak": [
            {"message": "Which date exactly?"},                                                # m1
            {"message": "", "toolCalls": [{"toolName": "agenda", "arguments": {"data": "2026-12-20"}}]},  # m2
            {"message": "The 20th is free. Shall I book?", "disponivel": True},
            {"message": "For 4 then. Shall I book?"},                                          # m3
            {"message": "", "toolCalls": [{"toolName": "agendar", "arguments": {}}]},          # m4
            {"message": "Done."},
        ]})
    r = agent.turn(session_id="s", message="a table for two next friday-ish", id="m1")
    assert ("bad-format", "data") in [(o.code, o.detail) for o in r.outcomes]
    assert r.session.data == {"pessoas": 2} and [m.text for m in r.messages] == ["Which date exactly?"]
    r = agent.turn(session_id="s", session=r.session, message="the 20th of December", id="m2")
    assert r.session.data["data"] == "2026-12-20"                       # normalised
    assert r.session.data["disponivel"] is True                          # the tool wrote it, not the reply
    assert "disponivel" not in json.dumps([c.schema for c in provider.calls])
    r = agent.turn(session_id="s", session=r.session, message="actually, make it 4 people", id="m3")
    assert r.session.data["pessoas"] == 4 and "corrected" in [o.code for o in r.outcomes]
    r = agent.turn(session_id="s", session=r.session, message="yes", id="m4")
    assert [m.text for m in r.messages] == ["Done.", "Booked 4 for 2026-12-20: MESA-1."]
    assert r.schedule == []                                             # booked: no "still there?" nudge
    quiet = agent.turn(session_id="s", session=r.session, message="thanks!", id="m5")
    assert quiet.messages == [] and [o.code for o in quiet.outcomes] == ["no-route"]
