"""Field formats and validators: checked and normalised when a model-given value is read
(docs/guide/flows.md, "Formats and validators"; a falai for Python addition)."""
import json

import pytest

import falai as F
import falai_base
from falai import FlowConfigurationError, ScriptedProvider, fake_clock, falai

pytestmark = pytest.mark.protocols("lean", "v4")


@pytest.mark.parametrize("kind, text, normal", [
    ("date", "2026-12-20", "2026-12-20"),
    ("date", "2026/1/5", "2026-01-05"),
    ("date", " 2026-12-20T10:00:00Z ", "2026-12-20"),
    ("date", "next friday-ish", None),
    ("date", "2026-02-30", None),
    ("date", "20/12/2026", None),
    ("time", "19:30", "19:30"),
    ("time", "7pm", "19:00"),
    ("time", "7:30 p.m.", "19:30"),
    ("time", "12am", "00:00"),
    ("time", "7", None),
    ("time", "25:00", None),
    ("datetime", "2026-12-20T19:30", "2026-12-20T19:30"),
    ("datetime", "2026-12-20 19:30:15Z", "2026-12-20T19:30:15Z"),
    ("datetime", "tomorrow evening", None),
    ("email", " Ana@Example.COM ", "Ana@example.com"),
    ("email", "ana@example", None),
    ("email", "ana at example.com", None),
    ("phone", "+55 (11) 99999-8888", "+5511999998888"),
    ("phone", "11 9999-8888", "1199998888"),
    ("phone", "2026-12-20", None),
    ("phone", "12345", None),
])
def test_each_format_checks_and_normalises(kind, text, normal):
    assert falai_base.normal_format(kind, text) == normal


def midnight_rule(value):
    """Not on a Monday."""
    if value.endswith("-21"):
        raise ValueError("we are closed on Mondays")
    if value.endswith("-22"):
        return {"error": "fully booked"}
    return None


FIELDS = {"data": {"type": "string", "format": "date", "ask": "Ask the date.", "validate": midnight_rule},
          "email": {"type": "string", "format": "email", "description": "Where the confirmation goes."}}


def booking_agent(understand, speak, max_asks=3):
    f = falai().fields(FIELDS)
    flow = f.flow({"id": "reserva", "name": "Booking", "on": [{"message": ["wants a table"]}], "steps": [
        {"id": "quando", "collect": ["data"], "maxAsks": max_asks},
        {"id": "ok", "say": "Booked for {{data.data}}."}]})
    provider = ScriptedProvider(script={"understand": understand, "speak": speak})
    agent = f.agent(name="Ana", provider=provider, flows=[flow], clock=fake_clock("2026-12-01T10:00:00.000Z"))
    return agent, provider


def dropped(result):
    return [(o.code, o.detail) for o in result.outcomes if o.code in ("bad-format", "refused")]


def test_a_vague_date_is_refused_asked_again_then_a_real_one_is_kept_normalised():
    agent, _ = booking_agent(
        [{"flows": {"reserva": 95}, "fields": {"data": "next friday-ish"}}, {"fields": {"data": "2026/12/5"}}],
        [{"message": "Which date exactly?"}])
    first = agent.turn(session_id="s", message="a table next friday-ish", id="m1")
    assert dropped(first) == [("bad-format", "data")]
    assert "data" not in first.session.data and [m.text for m in first.messages] == ["Which date exactly?"]
    second = agent.turn(session_id="s", session=first.session, message="the 5th of December 2026", id="m2")
    assert second.session.data["data"] == "2026-12-05"
    assert [m.text for m in second.messages] == ["Booked for 2026-12-05."]


def test_a_refused_value_counts_against_max_asks():
    agent, _ = booking_agent(
        [{"flows": {"reserva": 95}}, {"fields": {"data": "soon"}}, {"fields": {"data": "sometime"}}],
        [{"message": "Which date?"}, {"message": "Which date, exactly?"}], max_asks=2)
    r = agent.turn(session_id="s", message="a table", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="soon", id="m2")
    assert dropped(r) == [("bad-format", "data")] and r.session.runs[0].asked == {"data": 2}
    r = agent.turn(session_id="s", session=r.session, message="sometime", id="m3")
    assert ("max-asks", "data") in [(o.code, o.detail) for o in r.outcomes]
    assert [m.text for m in r.messages] == ["Booked for {{data.data}}."]     # given up: the flow moves on


def test_the_validator_refuses_by_raising_or_returning_an_error():
    agent, _ = booking_agent(
        [{"flows": {"reserva": 95}, "fields": {"data": "2026-12-21"}}, {"fields": {"data": "2026-12-22"}}],
        [{"message": "Another date?"}, {"message": "And another?"}])
    r = agent.turn(session_id="s", message="a table on the 21st", id="m1")
    assert dropped(r) == [("refused", "data: we are closed on Mondays")]
    assert F.OUTCOME_MESSAGES["refused"] == "the field's validator refused the value"
    r = agent.turn(session_id="s", session=r.session, message="the 22nd then", id="m2")
    assert dropped(r) == [("refused", "data: fully booked")] and "data" not in r.session.data


def test_the_validator_returns_the_value_to_keep():
    f = falai().fields({"cidade": {"type": "string", "validate": lambda v: v.strip().title()}})
    flow = f.flow({"id": "c", "name": "C", "on": [{"message": ["x"]}], "steps": [{"id": "a", "collect": ["cidade"]},
                                                                              {"id": "b", "say": "{{data.cidade}}"}]})
    provider = ScriptedProvider(script={"understand": [{"flows": {"c": 90}, "fields": {"cidade": " são paulo "}}]})
    agent = f.agent(name="A", provider=provider, flows=[flow])
    assert agent.turn(session_id="s", message="x", id="m1").session.data["cidade"] == "São Paulo"


def test_the_speak_reply_is_checked_too():
    """A value the speak call gives (here, the asking step's own reply) goes through the same checks."""
    agent, _ = booking_agent([{"flows": {"reserva": 95}}, {"fields": {}}],
                             [{"message": "Which date?"}, {"message": "Got it.", "data": "next week"}])
    r = agent.turn(session_id="s", message="a table", id="m1")
    provider_reply = agent.turn(session_id="s", session=r.session, message="next week", id="m2")
    assert ("bad-format", "data") in dropped(provider_reply)


def test_the_model_reads_the_format_and_the_rule_in_the_field_description():
    agent, provider = booking_agent([{"flows": {"reserva": 95}}], [{"message": "Which date?"}])
    agent.turn(session_id="s", message="a table", id="m1")
    text = json.dumps([[c.system, c.prompt, c.schema, c.v4_schema] for c in provider.calls])
    assert "Format: a calendar date, written YYYY-MM-DD." in text
    assert "Rule: Not on a Monday." in text
    assert falai_base.field_description(FIELDS["email"]) == "Where the confirmation goes. Format: an e-mail address."


def test_values_a_tool_or_action_writes_are_not_checked():
    f = falai().fields(FIELDS)
    flow = f.flow({"id": "c", "name": "C", "steps": [{"id": "a", "do": "grava"}, {"id": "b", "say": "{{data.data}}"}]})
    grava = f.action(parameters={}, run=lambda params, ctx: ctx.set({"data": "whenever"}))
    agent = f.agent(name="A", provider=ScriptedProvider(), flows=[flow], actions={"grava": grava})
    assert agent.turn(session_id="s", start={"flow": "c", "key": "k"}).messages[0].text == "whenever"


@pytest.mark.parametrize("definition, message", [
    ({"type": "integer", "format": "date"}, 'field "x": has format "date" but type "integer". A format checks '
                                            'text: make the field "type": "string".'),
    ({"type": "string", "format": "dat"}, 'field "x": format is "dat", which is not one of "date", "time", '
                                          '"datetime", "email", "phone". Did you mean "date"?'),
    ({"type": "string", "validate": "is_date"}, 'field "x": validate is "is_date", not a function. Pass a Python '
                                                "function value -> value to keep (raise to refuse); a JSON "
                                                "registry cannot hold one."),
])
def test_a_bad_format_or_validator_is_refused_when_the_agent_is_built(definition, message):
    with pytest.raises(FlowConfigurationError) as caught:
        F.Agent(name="A", provider=ScriptedProvider(), fields={"x": definition})
    assert str(caught.value) == "[FlowConfigurationError] " + message
