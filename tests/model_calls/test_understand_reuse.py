"""What the understand side of a turn builds once per agent and reuses (issue 12): the flows by trigger,
the harvestable fields of a list of flows, the envelope and the prompt parts of the same asked items.
Speed itself is measured in bench/bench_turn.py, never here."""
import pytest

import falai as F
import falai_calls
from falai import ScriptedProvider, falai

pytestmark = pytest.mark.protocols("lean", "v4")

FIELDS = {"nome": {"type": "string"}, "cidade": {"type": "string"}}
VENDAS = {"id": "vendas", "name": "Vendas", "description": "Vende para {{data.nome}}",
          "on": [{"message": ["quer comprar", "!quer {{data.cidade}}"]}],
          "steps": [{"id": "q", "collect": ["cidade"]}]}
SUPORTE = {"id": "suporte", "name": "Suporte", "on": [{"message": ["quer ajuda"]}],
           "steps": [{"id": "s", "collect": ["nome"]}]}


def agent_with(script):
    return falai().fields(FIELDS).agent(name="Ana", provider=ScriptedProvider(script=script),
                                        flows=[VENDAS, SUPORTE], idle={"prompt": "Atenda."})


def understand_prompts(agent):
    return [call.prompt + "\n" + (call.system or "") for call in agent.provider.calls
            if call.schema_name == "understand"]


def test_a_templated_flow_text_renders_with_each_turn_though_the_envelope_is_reused():
    """flows.md §8: a description or phrase that is a template renders with the turn's data every time."""
    script = {"understand": [{"flows": {"suporte": 0}}] * 2, "speak": [{"message": "Certo."}] * 2}
    agent = agent_with(script)
    for session_id, nome, cidade in (("a", "Bia", "Recife"), ("b", "Caio", "Olinda")):
        agent.turn(session_id=session_id, session=F.Session(id=session_id, data={"nome": nome, "cidade": cidade}),
                   message="oi", id="m1")
    first, second = understand_prompts(agent)
    assert "Vende para Bia" in first and "quer Recife" in first and "Caio" not in first
    assert "Vende para Caio" in second and "quer Olinda" in second and "Bia" not in second
    a, b = [call for call in agent.provider.calls if call.schema_name == "understand"]
    assert (a.v4_schema or a.schema) is (b.v4_schema or b.schema)   # the same items asked: one envelope


def test_the_same_asked_items_give_the_same_request_whether_built_or_reused():
    """model-calls.md §3: a reused envelope changes no byte of the request."""
    script = {"understand": [{"flows": {"suporte": 0}}] * 2, "speak": [{"message": "Certo."}] * 2}
    agent = agent_with(script)
    for session_id in ("a", "b"):
        agent.turn(session_id=session_id, session=F.Session(id=session_id, data={"nome": "Bia"}), message="oi", id="m1")
    first, second = [call for call in agent.provider.calls if call.schema_name == "understand"]
    assert (first.system, first.prompt, first.schema, first.v4_schema) == \
        (second.system, second.prompt, second.schema, second.v4_schema)


def test_a_hand_made_ask_is_never_kept():
    """An ask naming flow dicts that are not the agent's own builds its envelope afresh each time."""
    agent = agent_with({"understand": [{}, {}]})
    flow = {**SUPORTE, "name": "Um"}
    ask = F.UnderstandAsk(message="oi", scope=F.Scope(data={}), history=[], candidates=[flow])
    falai_calls.understand(agent, ask)
    flow["name"] = "Dois"
    falai_calls.understand(agent, ask)
    first, second = agent.provider.calls
    assert "Um" in (first.v4_schema or first.schema)["properties"]["flows"]["properties"]["suporte"]["description"]
    assert "Dois" in (second.v4_schema or second.schema)["properties"]["flows"]["properties"]["suporte"]["description"]
    assert (first.v4_schema or first.schema) is not (second.v4_schema or second.schema)
