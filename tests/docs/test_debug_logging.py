"""debug=True (python-api.md, The toolkit; issue 9): the engine writes each outcome line and a one-line
summary of each model call at DEBUG on the "falai" logger."""
import json
import logging

import pytest

from falai import ScriptedProvider, TokenUsage, fake_clock, falai


@pytest.fixture
def restore_level():
    logger = logging.getLogger("falai")
    level = logger.level
    yield
    logger.setLevel(level)


def build(debug):
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome."}})
    flow = {"id": "oi", "name": "Oi", "on": [{"message": ["quer conversar"]}],
            "steps": [{"id": "nome", "collect": ["nome"]}]}
    provider = ScriptedProvider(script={"understand": [{"flows": {"oi": 95}}], "speak": [{"message": "Seu nome?"}]},
                                usage=TokenUsage(10, 3, 0))
    return f.agent(name="Ana", provider=provider, flows=[flow], clock=fake_clock("2026-09-20T10:00:00.000Z"),
                   debug=debug)


def test_debug_logs_every_outcome_line_and_every_model_call(caplog, restore_level):
    agent = build(debug=True)
    with caplog.at_level(logging.DEBUG, logger="falai"):
        result = agent.turn(session_id="s1", message="quero conversar", id="m1")
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    outcomes = [json.loads(m.removeprefix("outcome: ")) for m in debug if m.startswith("outcome: ")]
    assert outcomes == [line.to_dict() for line in result.outcomes] and outcomes
    calls = [m for m in debug if m.startswith("model call ")]
    assert len(calls) == result.llm_calls == 2
    assert calls[0].startswith('model call "understand": 0 history items, ')
    assert "structured keys: flows, 0 tool calls, 10 in / 3 out tokens" in calls[0]
    assert calls[1].startswith('model call "speak": ') and "-> 9 reply chars, structured keys: message" in calls[1]


def test_debug_sets_the_logger_level_and_without_it_nothing_is_written(caplog, restore_level):
    logging.getLogger("falai").setLevel(logging.WARNING)
    agent = build(debug=False)
    with caplog.at_level(logging.WARNING, logger="falai"):
        agent.turn(session_id="s1", message="quero conversar", id="m1")
    assert [r for r in caplog.records if r.levelno == logging.DEBUG] == []
    build(debug=True)
    assert logging.getLogger("falai").getEffectiveLevel() == logging.DEBUG
