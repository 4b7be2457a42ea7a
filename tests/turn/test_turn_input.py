"""turn() arguments: exactly one input kind, keywords of one kind only, clear TypeErrors
(runtime.md §2, python-api.md "One turn")."""
import copy
import dataclasses
import inspect

import pytest

from falai import Agent, ScriptedProvider, Session, TurnInput, falai, fake_clock

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)


def test_turn_and_turn_stream_list_the_fields_of_turn_input():
    """The keywords are declared once, as TurnInput's fields: both signatures list them, keyword-only,
    with the same types and defaults (what editors and help() show), and hand the engine the record."""
    fields = [(f.name, f.type, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
              for f in dataclasses.fields(TurnInput)]
    for method in (Agent.turn, Agent.turn_stream):
        parameters = list(inspect.signature(method).parameters.values())[1:]     # after self
        assert [(p.name, p.annotation, p.default) for p in parameters] == fields
        assert {p.kind for p in parameters} == {inspect.Parameter.KEYWORD_ONLY}


@pytest.fixture
def agent():
    f = falai().fields({"nome": {"type": "string"}})
    return f.agent(name="Ana", provider=ScriptedProvider(script={"speak": [{"message": "Oi!"}] * 5}),
                   clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."},
                   flows=[f.flow({"id": "x", "name": "X", "steps": [{"id": "s", "say": "Olá"}]})])


@pytest.mark.parametrize("kwargs, words", [
    ({}, "got none"),
    ({"message": "oi", "wake": "k"}, "message and wake"),
    ({"event": "e", "key": "k", "start": {"flow": "x", "key": "k"}}, "event and start"),
])
def test_zero_or_several_input_kinds_is_a_type_error_naming_them(agent, kwargs, words):
    with pytest.raises(TypeError, match=words):
        agent.turn(session_id="s1", **kwargs)


@pytest.mark.parametrize("kwargs, words", [
    ({"message": "oi", "key": "k"}, "key= with a message input"),
    ({"wake": "w", "id": "m1"}, "id= with a wake input"),
    ({"event": "e", "key": "k", "at": "2026-09-20T10:00:00Z"}, "at= with a event input"),
    ({"start": {"flow": "x", "key": "k"}, "hop": 2}, "hop= with a start input"),
    ({"event": "e"}, "needs key="),
    ({"start": {"flow": "x"}}, '"flow" and "key"'),
    ({"message": "oi", "at": "ontem"}, "not ISO date-time text"),
    ({"message": 5}, "takes a str"),
    ({"message": "oi", "colour": "blue"}, "unexpected keyword argument"),
    ({"message": "oi", "silenced": 3}, "silenced takes"),
    ({"message": "oi", "session": "blob"}, "Session or a blob dict"),
])
def test_misplaced_or_malformed_keywords_are_type_errors(agent, kwargs, words):
    with pytest.raises(TypeError, match=words):
        agent.turn(session_id="s1", **kwargs)


def test_session_id_is_required(agent):
    with pytest.raises(TypeError, match="session_id"):
        agent.turn(message="oi")


def test_an_empty_message_text_is_still_a_message(agent):
    """python-api.md, One turn: a kind counts as given when it is not None, so message="" is a message."""
    r = agent.turn(session_id="s1", message="", id="m1")
    assert r.session.inputs == ["m1"] and r.messages[0].key == "idle:m1"


def test_an_empty_id_is_not_recorded_and_the_trigger_key_falls_back_to_at(agent):
    """runtime.md §2.3: id="" counts as absent; the trigger key is the message's at text, as given."""
    r = agent.turn(session_id="s1", message="oi", id="", at="2026-09-20T07:00:00-03:00")
    assert r.session.inputs == [] and r.messages[0].key == "idle:2026-09-20T07:00:00-03:00"
    assert r.session.last_user_at == "2026-09-20T10:00:00.000Z"   # stored in the blob's one format


def test_the_input_session_is_never_mutated(agent):
    """runtime.md §2.2: turn() deep-copies the session and works on the copy."""
    first = agent.turn(session_id="s1", start={"flow": "x", "key": "k1"})
    before = copy.deepcopy(first.session)
    again = agent.turn(session_id="s1", session=first.session, message="oi", id="m1")
    assert first.session == before and again.session is not first.session


def test_a_fresh_session_has_the_spec_shape(agent):
    """runtime.md §3.1: a first turn starts from a fresh session under session_id, version 0."""
    r = agent.turn(session_id="s9", start={"flow": "x", "key": "k1"})
    assert isinstance(r.session, Session) and r.session.id == "s9" and r.session.version == 0 and r.session.v == 4
