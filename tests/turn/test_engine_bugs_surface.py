"""Engine bugs surface (issue 12): the speak call's try wraps only the provider, compaction only checks its
settings, and a swallowed user-code exception keeps its traceback at DEBUG."""
import logging

import pytest

import falai as F
import falai_calls
from falai import Generation, ScriptedProvider, Tool

FIELDS = {"nome": {"type": "string", "description": "Nome da pessoa"}}
FLOW = {"id": "triagem", "name": "Triagem", "on": [{"message": []}],
        "steps": [{"id": "quem", "prompt": "Descubra quem é.", "collect": ["nome"]}]}


def agent_with(provider, **options):
    return F.Agent(name="Ana", provider=provider, fields=FIELDS, flows=[FLOW],
                   clock=F.fake_clock("2026-09-20T10:00:00.000Z"), **options)


class Returning:
    """A host-written provider whose generate returns whatever it is given."""
    name = "returning"
    capabilities = F.ProviderCapabilities()

    def __init__(self, value):
        self.value = value

    def generate(self, request):
        return self.value

    def generate_stream(self, request):
        raise NotImplementedError


def test_an_engine_bug_reading_the_speak_reply_raises_instead_of_deferring(monkeypatch):
    """runtime.md §10.2 defers on a *provider* failure; a bug in the engine's reading is not one."""
    def broken(generation, wire):
        raise KeyError("engine bug")

    monkeypatch.setattr(falai_calls, "read_round", broken)
    agent = agent_with(ScriptedProvider(script={"speak": [{"message": "Oi"}]}))
    with pytest.raises(KeyError, match="engine bug"):
        agent.turn(session_id="s1", message="oi", id="m1")


@pytest.mark.parametrize("value", [None, {"message": "Oi"}, Generation(message="Oi", usage="lots"),
                                   Generation(message="Oi", tool_calls=7)])
def test_a_provider_that_returns_no_generation_defers_as_a_provider_failure(value, caplog):
    """providers.md §1.4: generate returns a Generation; anything else is the provider's failure."""
    agent = agent_with(Returning(value))
    with caplog.at_level(logging.WARNING, logger="falai"):
        result = agent.turn(session_id="s1", message="oi", id="m1")
    assert result.messages == [] and [line.code for line in result.outcomes][-1:] == ["provider-unavailable"]
    assert any("speak: call 1 failed" in r.getMessage() and "not a" in r.getMessage() for r in caplog.records)


def test_a_raising_tool_logs_its_traceback_at_debug(caplog):
    """A tool that raises becomes {"error": ...}; at DEBUG its traceback is kept."""
    def boom(args, ctx):
        raise ValueError("sem estoque")

    ask = F.SpeakAsk(input_kind="message", text="oi", scope=F.Scope(data={}, context=None), history=[],
                     now=F.fake_clock("2026-09-20T10:00:00.000Z")(), tools=[Tool(id="estoque", handler=boom)])
    provider = ScriptedProvider(script={"speak": [
        {"message": "", "toolCalls": [{"toolName": "estoque", "arguments": {}}]}, {"message": "Sem estoque."}]})
    agent = F.Agent(name="Ana", provider=provider)
    with caplog.at_level(logging.DEBUG, logger="falai"):
        gen = falai_calls.speak(agent, ask, False)
        with pytest.raises(StopIteration) as stop:
            next(gen)
    assert stop.value.value.message == "Sem estoque."
    traced = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(traced) == 1 and 'tool "estoque"' in traced[0].getMessage()
    assert traced[0].exc_info[0] is ValueError


def test_a_raising_action_logs_its_traceback_at_debug(caplog):
    """flows.md §9.5: an action that raises is an action-failed line; at DEBUG its traceback is kept."""
    class Boom:
        def run(self, params, ctx):
            raise RuntimeError("api fora")

    flow = {"id": "f", "name": "F", "on": [{"message": []}], "steps": [{"id": "a", "do": "chamar"}]}
    agent = F.Agent(name="Ana", provider=ScriptedProvider(script={"speak": [{"message": "Oi"}]}), flows=[flow], actions={"chamar": Boom()})
    with caplog.at_level(logging.DEBUG, logger="falai"):
        result = agent.turn(session_id="s1", message="oi", id="m1")
    assert [line.code for line in result.outcomes if line.kind == "do"] == ["action-failed"]
    traced = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(traced) == 1 and traced[0].exc_info[0] is RuntimeError and "chamar" in traced[0].getMessage()


def test_compaction_checks_only_its_settings_so_a_bug_inside_surfaces(monkeypatch):
    """model-calls.md §9: construction validated the settings; a bug in the layers is not swallowed."""
    def broken(history):
        raise ZeroDivisionError("engine bug")

    monkeypatch.setattr(falai_calls, "estimate_tokens", broken)
    agent = F.Agent(name="Ana", provider=ScriptedProvider(script={}), compaction={"maxTokens": 1000})
    with pytest.raises(ZeroDivisionError):
        falai_calls.compact_history(agent, [{"role": "user", "content": "oi"}])
