"""JSON conditions: unknown, not and any, and an equals that tests nothing refused (flows.md §7.2)."""
import pytest

import falai as F
from falai import FlowConfigurationError, PredCtx, ScriptedProvider, fake_clock, falai, from_spec, to_spec

pytestmark = pytest.mark.protocols("lean", "v4")

FIELDS = {"reserva": {"type": "string", "extract": "never"}, "plano": {"type": "string"},
          "nome": {"type": "string", "ask": "Ask the name."}}


def holds(condition, data):
    return F.judge(condition, PredCtx(context=None, data=data, input=None, run=None, silenced=None, now=None), {})


@pytest.mark.parametrize("condition, data, expected", [
    ({"unknown": ["reserva"]}, {}, True),
    ({"unknown": ["reserva"]}, {"reserva": ""}, True),
    ({"unknown": ["reserva"]}, {"reserva": "R1"}, False),
    ({"unknown": ["reserva", "plano"]}, {"plano": "pro"}, False),
    ({"not": {"equals": {"plano": "pro"}}}, {"plano": "pro"}, False),
    ({"not": {"equals": {"plano": "pro"}}}, {"plano": "free"}, True),
    ({"not": {"known": ["nome"]}, "equals": {"plano": "pro"}}, {"plano": "pro"}, True),
    ({"not": {"not": {"known": ["nome"]}}}, {"nome": "Ana"}, True),
    ({"not": {}}, {}, False),
    ({"any": [{"known": ["nome"]}, {"equals": {"plano": "pro"}}]}, {"plano": "pro"}, True),
    ({"any": [{"known": ["nome"]}, {"equals": {"plano": "pro"}}]}, {"nome": "Ana"}, True),
    ({"any": [{"known": ["nome"]}, {"equals": {"plano": "pro"}}]}, {"plano": "free"}, False),
    ({"any": [{"known": ["nome"], "equals": {"plano": "pro"}}]}, {"nome": "Ana"}, False),   # AND inside
    ({"any": [{"known": ["nome"]}], "equals": {"plano": "pro"}}, {"nome": "Ana"}, False),   # AND beside
    ({"not": {"any": [{"known": ["nome"]}, {"known": ["plano"]}]}}, {}, True),
])
def test_unknown_and_not_hold_as_documented(condition, data, expected):
    assert holds(condition, data) is expected


def flow_with(condition):
    return {"id": "f", "name": "F", "steps": [{"id": "a", "if": condition, "then": "b", "else": "c"},
                                                {"id": "b", "say": "B", "then": "end"}, {"id": "c", "say": "C"}]}


def test_an_equals_that_tests_nothing_is_refused_with_the_fix():
    flow = flow_with({"equals": {"reserva": None}})
    expected = ('flow "f", step "a": if.equals gives "reserva" null, which a flow reads as "not set", so the '
                'condition would test nothing and always hold. For "not known" write { "unknown": ["reserva"] }.')
    with pytest.raises(FlowConfigurationError) as caught:
        falai().fields(FIELDS).agent(name="A", provider=ScriptedProvider(), flows=[flow])
    assert str(caught.value) == "[FlowConfigurationError] " + expected
    assert [p.message for p in F.check_flow(flow, {"fields": FIELDS})] == [expected]
    with pytest.raises(FlowConfigurationError, match="unknown"):     # the FlowSpec path refuses it too
        falai().fields(FIELDS).agent(name="A", provider=ScriptedProvider(),
                                     flows=[from_spec({**flow_with({"equals": {"reserva": None}}),
                                                       "steps": [{"kind": "if", **s} if "if" in s else
                                                                 {"kind": "say", **s}
                                                                 for s in flow["steps"]]})])


def test_a_strict_schema_none_beside_a_real_test_is_not_given():
    """flow_spec_schema requires every field in equals, nullable: a None there is "not given"."""
    flow = flow_with({"equals": {"reserva": None, "plano": "pro"}})
    agent = falai().fields(FIELDS).agent(name="A", provider=ScriptedProvider(), flows=[flow])
    r = agent.turn(session_id="s", start={"flow": "f", "key": "k"})
    assert [m.text for m in r.messages] == ["C"]          # plano is not "pro"


def test_the_names_inside_not_and_unknown_are_checked():
    with pytest.raises(FlowConfigurationError, match='unknown condition "vip" in if.not'):
        F.validate_flow(flow_with({"not": {"vip": True}}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match=r'if\.unknown'):
        F.validate_flow(flow_with({"unknown": ["nada"]}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match="if.not is 3, not a condition"):
        F.validate_flow(flow_with({"not": 3}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match="if.unknown is not a list"):
        F.validate_flow(flow_with({"unknown": "nome"}), {"fields": FIELDS})


def test_the_options_of_any_are_checked_like_any_condition():
    with pytest.raises(FlowConfigurationError, match=r'unknown condition "vip" in if\.any\[1\]'):
        F.validate_flow(flow_with({"any": [{"known": ["nome"]}, {"vip": True}]}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match=r"if\.any is empty, not a list of conditions"):
        F.validate_flow(flow_with({"any": []}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match=r"if\.any\[0\] is 3, not a condition"):
        F.validate_flow(flow_with({"any": [3]}), {"fields": FIELDS})
    with pytest.raises(FlowConfigurationError, match=r"step \"a\" if\.any\[0\]: is a function"):
        to_spec(flow_with({"any": [lambda ctx: True]}))


def test_any_round_trips_as_json_and_routes_a_run():
    """An OR rule stays storable: to_spec and from_spec keep it, and the run takes the branch it says."""
    flow = flow_with({"any": [{"equals": {"plano": "pro"}}, {"known": ["reserva"]}]})
    assert from_spec(to_spec(flow)) == flow
    agent = falai().fields(FIELDS).agent(name="Ana", provider=ScriptedProvider(), flows=[flow])
    for data, said in (({"reserva": "R1"}, "B"), ({"plano": "free"}, "C")):
        blob = {"id": "s1", "v": 4, "version": 0, "data": data, "runs": [], "claims": {}, "inputs": [],
                "metadata": {}}
        r = agent.turn(session_id="s1", session=blob, start={"flow": "f", "key": "k"})
        assert [m.text for m in r.messages] == [said]


def test_a_function_inside_not_cannot_be_stored():
    with pytest.raises(FlowConfigurationError, match=r"step \"a\" if\.not: is a function"):
        to_spec(flow_with({"not": lambda ctx: True}))


def test_the_silence_guard_recipe_stops_the_nudge_once_booked():
    """docs/guide/surprises.md: a silence trigger with "if": {"unknown": [...]} never nudges after the booking."""
    f = falai().fields(FIELDS)
    booking = f.flow({"id": "reservar", "name": "Book", "on": [{"message": ["wants a table"]}], "steps": [
        {"id": "quem", "collect": ["nome"]},
        {"id": "grava", "do": "book"},
        {"id": "ok", "say": "Booked, {{data.nome}}!"}]})
    nudge = f.flow({"id": "cutucar", "name": "Nudge", "on": [{"silence": "2h", "if": {"unknown": ["reserva"]}}],
                    "steps": [{"id": "p", "say": "Are you still there?"}]})
    book = f.action(parameters={}, run=lambda params, ctx: ctx.set({"reserva": "R1"}))
    provider = ScriptedProvider(script={"understand": [{"flows": {"reservar": 95}}, {"fields": {"nome": "Ana"}}],
                                        "speak": [{"message": "Your name?"}]})
    agent = f.agent(name="A", provider=provider, flows=[booking, nudge], actions={"book": book},
                    clock=fake_clock("2026-09-20T10:00:00.000Z"))
    asking = agent.turn(session_id="s", message="a table for two", id="m1")
    assert [e.key.split(":")[1] for e in asking.schedule] == ["cutucar"]     # unbooked: the nudge is armed
    booked = agent.turn(session_id="s", session=asking.session, message="Ana", id="m2")
    assert [m.text for m in booked.messages] == ["Booked, Ana!"] and booked.session.data["reserva"] == "R1"
    assert booked.schedule == []                                            # booked: no nudge
    late = agent.turn(session_id="s", session=booked.session, wake=asking.schedule[0].key)
    assert late.messages == [] and late.started == []                     # an old wake starts nothing
