"""Corrections: a correctable field lets the understand call replace a known value
(docs/guide/flows.md, "When the customer changes their mind"; a falai for Python addition)."""
import json

import pytest

import falai as F
from falai import FlowConfigurationError, ScriptedProvider, falai

pytestmark = pytest.mark.protocols("lean", "v4")


def booking(fields, understand, agent_options=None):
    f = falai().fields(fields)
    flow = f.flow({"id": "hotel", "name": "Hotel", "on": [{"message": ["wants to book a room"]}], "steps": [
        {"id": "onde", "collect": ["cidade"]},
        {"id": "quando", "collect": ["noites"]},
        {"id": "ok", "say": "Booked {{data.noites}} nights in {{data.cidade}}."}]})
    provider = ScriptedProvider(script={"understand": understand,
                                        "speak": [{"message": "How many nights?"}, {"message": "Sure."}]})
    agent = f.agent(name="Ana", provider=provider, flows=[flow], **(agent_options or {}))
    return agent, provider


CITY = {"type": "string", "ask": "Ask the city."}
NIGHTS = {"type": "integer", "ask": "Ask how many nights."}


def asked_fields(request):
    return json.dumps(request.v4_schema or request.schema)


def last_understand(provider):
    return [call for call in provider.calls if call.schema_name == "understand"][-1]


def test_a_known_value_is_not_read_again_by_default():
    agent, provider = booking({"cidade": CITY, "noites": NIGHTS},
                              [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}}, {"fields": {"noites": 2}}])
    r = agent.turn(session_id="s", message="a room in Recife", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="actually Curitiba, 2 nights", id="m2")
    assert '"cidade"' not in asked_fields(last_understand(provider))
    assert r.messages[0].text == "Booked 2 nights in Recife."


def test_a_correctable_field_takes_the_correction_with_an_outcome_line():
    agent, provider = booking({"cidade": {**CITY, "correctable": True}, "noites": NIGHTS},
                              [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                               {"fields": {"cidade": "Curitiba", "noites": 2}}])
    r = agent.turn(session_id="s", message="a room in Recife", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="actually Curitiba, 2 nights", id="m2")
    assert '"cidade"' in asked_fields(last_understand(provider))    # the understand call of m2 asks it again
    assert [(o.kind, o.status, o.code, o.message, o.detail) for o in r.outcomes if o.code == "corrected"] == [
        ("collect", "ok", "corrected", "the customer corrected a known value", "cidade")]
    assert r.messages[0].text == "Booked 2 nights in Curitiba."


def test_the_same_value_again_is_no_correction():
    agent, _ = booking({"cidade": {**CITY, "correctable": True}, "noites": NIGHTS},
                       [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                        {"fields": {"cidade": "Recife", "noites": 2}}])
    r = agent.turn(session_id="s", message="a room in Recife", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="Recife, 2 nights", id="m2")
    assert not [o for o in r.outcomes if o.code == "corrected"]


def test_the_agent_option_makes_every_field_correctable_unless_one_says_otherwise():
    agent, provider = booking({"cidade": CITY, "noites": {**NIGHTS, "correctable": False}},
                              [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                               {"fields": {"cidade": "Curitiba"}}], {"correctable": True})
    assert agent.fields["cidade"]["correctable"] is True and agent.fields["noites"]["correctable"] is False
    r = agent.turn(session_id="s", message="a room in Recife", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="no wait, Curitiba", id="m2")
    assert r.session.data["cidade"] == "Curitiba"
    assert "When the customer corrects an earlier value, give the new one." in json.dumps(
        [last_understand(provider).system, last_understand(provider).prompt,
         asked_fields(last_understand(provider))])


def test_a_correction_goes_through_the_field_checks():
    agent, _ = booking({"cidade": {**CITY, "correctable": True, "enum": ["Recife", "Curitiba"]}, "noites": NIGHTS},
                       [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}}, {"fields": {"cidade": "Paris"}}])
    r = agent.turn(session_id="s", message="a room in Recife", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="make it Paris", id="m2")
    assert r.session.data["cidade"] == "Recife" and ("not-in-enum", "cidade") in [(o.code, o.detail)
                                                                                 for o in r.outcomes]


def test_correctable_must_be_a_boolean():
    with pytest.raises(FlowConfigurationError, match='field "cidade": correctable is "yes", not true or false'):
        F.Agent(name="A", provider=ScriptedProvider(), fields={"cidade": {**CITY, "correctable": "yes"}})
    with pytest.raises(FlowConfigurationError, match="correctable is 1: it must be True or False"):
        F.Agent(name="A", provider=ScriptedProvider(), fields={"cidade": CITY}, correctable=1)
