"""The typed API (issue 9): turn(), turn_stream() and pending_wakes() spell out their keyword-only
parameters, so editors complete them and a misspelt keyword is a TypeError (python-api.md, One turn)."""
import inspect
import typing

import pytest

import falai
from falai import Agent, ScriptedProvider, fake_clock
from falai import falai as toolkit

TURN_PARAMETERS = ["session_id", "session", "message", "id", "at", "wake", "event", "key", "payload", "hop",
                   "start", "context", "history", "silenced", "anchors", "claims"]


@pytest.fixture
def agent():
    f = toolkit().fields({"nome": {"type": "string"}})
    return f.agent(name="Ana", provider=ScriptedProvider(script={"speak": [{"message": "Oi!"}] * 3}),
                   clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."},
                   flows=[f.flow({"id": "x", "name": "X", "steps": [{"id": "s", "say": "Olá"}]})])


@pytest.mark.parametrize("method", [Agent.turn, Agent.turn_stream])
def test_turn_and_turn_stream_list_their_real_keyword_only_parameters(method):
    parameters = list(inspect.signature(method).parameters.values())[1:]     # after self
    assert [p.name for p in parameters] == TURN_PARAMETERS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert parameters[0].default is inspect.Parameter.empty          # session_id is required
    assert all(p.default is None for p in parameters[1:])


@pytest.mark.parametrize("method", [Agent.turn, Agent.turn_stream, Agent.pending_wakes])
def test_every_parameter_and_the_return_value_are_annotated(method):
    hints = typing.get_type_hints(method, vars(falai))
    names = [name for name in inspect.signature(method).parameters if name != "self"]
    assert set(names) | {"return"} == set(hints)


def test_pending_wakes_takes_session_context_anchors_and_claims_as_keywords():
    parameters = list(inspect.signature(Agent.pending_wakes).parameters.values())[1:]
    assert [p.name for p in parameters] == ["session", "context", "anchors", "claims"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)


def test_a_misspelt_keyword_is_a_type_error_naming_it(agent):
    with pytest.raises(TypeError, match="sesion"):
        agent.turn(session_id="s1", sesion=None, message="oi")
    with pytest.raises(TypeError, match="mesage"):
        next(agent.turn_stream(session_id="s1", mesage="oi"))
    with pytest.raises(TypeError, match="contxt"):
        agent.pending_wakes(session={"v": 4}, contxt={})


def test_turn_stream_with_explicit_keywords_ends_with_the_same_result_as_turn(agent):
    result = agent.turn(session_id="s1", start={"flow": "x", "key": "k1"})
    chunks = list(agent.turn_stream(session_id="s1", start={"flow": "x", "key": "k1"}))
    assert chunks[-1].done and chunks[-1].result.messages == result.messages
    assert [m.text for m in result.messages] == ["Olá"]
