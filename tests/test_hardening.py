"""Hardening (issue 8): nothing a flow author, a customer or a model writes can crash a turn or reach code.

Spec: flows.md §8 (templates), §13 (durations); runtime.md §2.2, §6, §8 (keys), §15 (time);
persistence.md §2.5 (the blob reader). The limits themselves: docs/guide/limits.md.
"""
import copy
from dataclasses import dataclass, field

import pytest

import falai as F
from falai import ScriptedProvider, fake_clock, falai

T0 = "2026-09-20T10:00:00.000Z"


def build(flows, *, fields=None, script=None, clock=None, **options):
    clock = clock or fake_clock(T0)
    provider = ScriptedProvider(script=script or {})
    agent = falai().fields(fields or {}).agent(name="Ana", provider=provider, clock=clock,
                                               flows=flows, **options)
    return agent, provider, clock


def say_flow(text, **extra):
    return {"id": "f", "name": "F", "steps": [{"id": "s", "say": text, **extra}]}


# Templates read data, never code (flows.md §8.1, docs/guide/limits.md) -----------------------

class Secretive:
    """A host object holding a secret behind a private name, a method and a property."""

    def __init__(self):
        self.name = "Ana"
        self._token = "sk-secret"

    def greet(self):
        return "hi"

    @property
    def token(self):
        return self._token


@dataclass
class Ctx:
    lead: str = "Bia"
    tags: list = field(default_factory=lambda: ["a", "b"])
    host: object = field(default_factory=Secretive)
    _key: str = "sk-private-field"


@pytest.mark.parametrize("path", [
    "context.__init__", "context.__init__.__globals__", "context.__class__.__name__",
    "context.__dict__", "context._key", "context.host._token", "context.host.greet",
    "context.host.token", "context.host", "context.tags.append", "context.__dataclass_fields__",
])
def test_template_never_reaches_private_names_callables_or_unprintable_values(path):
    agent, _, _ = build([say_flow("x {{%s}} y" % path)])
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["x {{%s}} y" % path]


def test_template_reads_dataclass_fields_instance_attributes_and_mappings():
    agent, _, _ = build([say_flow("{{context.lead}} {{context.host.name}} {{context.tags}} {{context.tags.1}}")])
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "Bia Ana a, b b"


def test_a_whole_dataclass_prints_without_its_private_fields():
    @dataclass
    class Plain:
        nome: str = "Ana"
        _segredo: str = "sk-1"
    agent, _, _ = build([say_flow("{{context.p}}")])
    r = agent.turn(session_id="s1", context={"p": Plain()}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == '{"nome":"Ana"}'


def test_callable_values_inside_a_mapping_are_unknown():
    agent, _, _ = build([say_flow("{{context.f}} {{context.g.x}}")])
    r = agent.turn(session_id="s1", context={"f": print, "g": {"x": lambda: 1}}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "{{context.f}} {{context.g.x}}"


def test_unknown_host_objects_in_prompt_persona_goal_and_knowledge_stay_verbatim():
    flow = {"id": "f", "name": "F",
            "steps": [{"id": "p", "prompt": "P {{context.__init__}} {{context.host}}"}]}
    agent, provider, _ = build([flow], script={"speak": [{"message": "ok"}]},
                               persona="Persona {{context.__class__}}", goal="Goal {{context.host.greet}}",
                               knowledge_base={"k": "{{context._key}}"})
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["ok"]
    sent = repr([(call.system, call.prompt, call.history) for call in provider.calls])
    assert "sk-private-field" not in sent and "sk-secret" not in sent
    assert "{{context.__init__}}" in sent and "{{context.__class__}}" in sent and "{{context.host.greet}}" in sent


# Exceptions from user code that cannot print (flows.md §9.5, model-calls.md §6.3) --------------

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken")

    def __repr__(self):
        raise RuntimeError("__repr__ is broken")


def raise_unprintable(*args):
    raise Unprintable()


def test_an_action_exception_that_cannot_print_is_an_action_failure_named_by_its_class():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=raise_unprintable)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    failed = [o for o in r.outcomes if o.code == "action-failed"]
    assert [o.detail for o in failed] == ["Unprintable"]


def test_a_tool_exception_that_cannot_print_becomes_the_tool_error_text():
    tool = F.Tool(id="t", description="T", parameters={"type": "object", "properties": {}}, handler=raise_unprintable)
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "P", "tools": ["t"]}]}
    script = {"speak": [{"message": "", "toolCalls": [{"toolName": "t", "arguments": {}}]},
                        {"message": "done"}]}
    agent, provider, _ = build([flow], script=script, tools=[tool])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["done"]
    assert '{"error":"Unprintable"}' in repr(provider.calls[1].history)


# Durations and instants (flows.md §13, runtime.md §15, docs/guide/limits.md) -----------------

@pytest.mark.parametrize("trigger, step", [
    ({"silence": "3000000d"}, {"id": "a", "say": "Oi"}),
    ({"event": "ev", "after": "3000000d"}, {"id": "a", "say": "Oi"}),
    ({"event": "ev", "repeat": {"cooldown": "3651d"}}, {"id": "a", "say": "Oi"}),
    ({"event": "ev"}, {"id": "a", "wait": "87601h"}),
    ({"event": "ev"}, {"id": "a", "wait": {"event": "ev", "upTo": "99999999999999999999999999d"}}),
])
def test_validate_flow_rejects_a_duration_beyond_the_maximum_and_names_it(trigger, step):
    spec = {"id": "fx", "name": "FX", "on": [trigger], "steps": [step]}
    with pytest.raises(F.FlowConfigurationError) as caught:
        F.validate_flow(spec, {"events": {"ev": F.EventDef()}})
    assert 'longer than the maximum "3650d"' in str(caught.value)


def test_the_maximum_duration_itself_is_valid_and_runs():
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "3650d"}, {"id": "s", "say": "Oi"}]}
    agent, _, _ = build([flow], clock=fake_clock("8999-12-31T23:59:59.999Z"))
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [w.at.year for w in r.schedule] == [9009]


def test_an_action_deferring_beyond_the_maximum_fails_with_a_reason():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=lambda p, c: {"defer": "3000000d"})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    failed = [o for o in r.outcomes if o.code == "action-failed"]
    assert len(failed) == 1 and 'longer than the maximum duration "3650d"' in failed[0].detail
    assert r.schedule == []


@pytest.mark.parametrize("at", ["0999-12-31T23:59:59.999Z", "9000-01-01T00:00:00.000Z",
                                "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00+01:00",
                                "9999-12-31T23:30:00-01:00"])
def test_turn_rejects_an_at_outside_the_supported_range(at):
    agent, _, _ = build([{"id": "f", "name": "F", "steps": [{"id": "s", "say": "Oi"}]}])
    with pytest.raises(TypeError) as caught:
        agent.turn(session_id="s1", message="oi", id="m1", at=at)
    assert "outside the supported range 1000-01-01T00:00:00.000Z to 8999-12-31T23:59:59.999Z" in str(caught.value)


@pytest.mark.parametrize("now", ["0500-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"])
def test_a_clock_outside_the_supported_range_is_a_value_error_not_an_overflow(now):
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "3650d"}]}
    agent, _, _ = build([flow], clock=fake_clock(now))
    with pytest.raises(ValueError, match="the agent's clock reading is .* outside the supported range"):
        agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})


def test_business_hours_returning_an_instant_out_of_range_is_named():
    from datetime import datetime, timezone
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "1d", "businessHours": True}]}
    agent, _, _ = build([flow], business_hours=lambda at, ctx: datetime(9999, 12, 31, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="the time business_hours returned"):
        agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})


def test_a_provider_reset_beyond_the_supported_range_keeps_the_retry_ladder():
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "P"}]}
    failure = F.ProviderError("quota", kind="quota", reset_at_ms=10 ** 18)
    agent, _, _ = build([flow], script={"speak": [failure]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [w.at.isoformat() for w in r.schedule] == ["2026-09-20T10:01:00+00:00"]


def test_a_silence_armed_from_an_old_blob_time_near_year_9999_does_not_overflow():
    flow = {"id": "f", "name": "F", "on": [{"silence": "3650d"}], "steps": [{"id": "s", "say": "Oi"}]}
    agent, _, _ = build([flow])
    blob = {"id": "s1", "v": 4, "version": 3, "data": {}, "runs": [], "claims": {}, "inputs": [], "metadata": {},
            "lastAssistantAt": "9999-12-31T00:00:00.000Z"}
    wakes = agent.pending_wakes(session=blob)
    assert [w.at.year for w in wakes] == [9999]
