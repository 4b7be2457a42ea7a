"""The agent option ``protocol`` (issue 11, docs/guide/tokens.md): "v4" sends today's requests byte for byte,
"lean" (the default) sends fewer tokens laid out for the prefix caches, and both reach the same results."""
from __future__ import annotations

import json

import pytest

from fake_model_server import check_anthropic, check_chat, check_gemini
from falai import FlowConfigurationError, Generation, ScriptedProvider, ScriptError, fake_clock, falai
from falai import lexical_top
from falai_calls import lean_field_item
from falai_protocols import lean_schema, lean_speak_schema
from falai_providers import _anthropic_native_ok, _anthropic_schema, is_strict_schema
from request_bodies import (GOLDEN, RICH_SCRIPT, VENDORS, capture, rich_conversation, triage_agent,
                            triage_conversation, wire_bodies)


def comparable(results):
    """What a turn decided and produced, for comparing the two protocols."""
    return [(r.messages, r.session.to_dict(), r.schedule, r.outcomes, r.started, r.ended, r.skipped, r.changed,
             r.llm_calls) for r in results]


def test_v4_request_bodies_are_byte_identical_to_the_golden_capture():
    """tests/fixtures/v4_request_bodies.json was captured from the code before the lean protocol existed, then
    again when the understand scores got their 0-100 bounds and OpenAI-compatible calls their output cap and
    tool_choice "auto" (nothing else changed)."""
    with open(GOLDEN, encoding="utf-8") as handle:
        golden = handle.read()
    now = json.dumps(capture({"protocol": "v4"}), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    assert now == golden


@pytest.mark.parametrize("conversation", [triage_conversation, rich_conversation])
def test_lean_reaches_the_same_results_as_v4_on_the_same_script(conversation):
    _, v4 = conversation({"protocol": "v4"})
    _, lean = conversation({"protocol": "lean"})
    assert comparable(lean) == comparable(v4)


def to_lean(reply: dict) -> dict:
    """A v4-form understand reply in the lean form (nulls and falses left out, values as text)."""
    out = {}
    if "flows" in reply:
        out["flows"] = [{"id": k, "score": v} for k, v in reply["flows"].items() if v]
    if "mentions" in reply:
        out["mentions"] = [k for k, v in reply["mentions"].items() if v]
    if "extract" in reply:
        out["extract"] = [{"id": k, "name": n, "value": str(v)} for k, values in reply["extract"].items()
                          for n, v in values.items() if v is not None]
    if "branches" in reply:
        out["branches"] = [k for k, v in reply["branches"].items() if v]
    if "fields" in reply:
        out["fields"] = [f"{k}: {v}" for k, v in reply["fields"].items() if v is not None]
    return out


def test_a_lean_form_reply_yields_the_same_results_as_the_v4_form():
    lean_script = {"understand": [to_lean(r) for r in RICH_SCRIPT["understand"]], "speak": RICH_SCRIPT["speak"]}
    _, v4 = rich_conversation({"protocol": "v4"})
    calls, lean = rich_conversation({"protocol": "lean"}, script=lean_script)
    assert comparable(lean) == comparable(v4)
    assert lean[0].session.data["idade"] == 30                  # "30" read through the integer field
    assert [s.flow_id for s in lean[0].started] == ["concorrente", "vendas"]


def test_a_lean_extract_reads_each_value_as_its_parameter_type_and_lists_one_entry_per_element():
    seen = []
    f = falai().fields({})
    flows = [{"id": "conc", "on": [{"mention": ["cita outra loja"], "extract": {
        "loja": {"type": "string"}, "itens": {"type": "array", "items": {"type": "integer"}},
        "urgente": {"type": "boolean"}}}], "steps": [{"id": "d", "do": "anotar"}]}]
    reply = {"mentions": ["conc"], "extract": [{"id": "conc", "name": "loja", "value": "Beta"},
                                               {"id": "conc", "name": "itens", "value": "3"},
                                               {"id": "conc", "name": "itens", "value": "5"},
                                               {"id": "conc", "name": "urgente", "value": "sim"}]}
    agent = f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [reply]}, strict=True),
                    flows=flows, actions={"anotar": f.action(parameters={}, run=lambda p, c: seen.append(c.input))},
                    clock=fake_clock("2026-09-20T10:00:00.000Z"), idle="silent")
    agent.turn(session_id="s", message="a Beta tem 3 e 5", id="m1")
    assert seen == [{"loja": "Beta", "itens": [3, 5], "urgente": True}]


def test_a_mention_listed_without_values_starts_with_an_empty_input_as_a_strict_v4_reply_would():
    seen = []
    flows = [{"id": "conc", "on": [{"mention": ["cita outra loja"], "extract": {"loja": {"type": "string"}}}],
              "steps": [{"id": "d", "do": "anotar"}]}]
    f = falai().fields({})
    for reply in ({"mentions": ["conc"]}, {"mentions": {"conc": True}, "extract": {"conc": {"loja": None}}}):
        agent = f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [reply]}), flows=flows,
                        actions={"anotar": f.action(parameters={}, run=lambda p, c: seen.append(c.input))},
                        clock=fake_clock("2026-09-20T10:00:00.000Z"), idle="silent")
        agent.turn(session_id="s", message="tem outra loja", id="m1")
    assert seen == [{}, {}]


def test_lean_ids_that_are_aliases_or_unasked_are_mapped_or_dropped():
    """An id may be the real id or its v4 alias; a detail the call did not ask for is dropped."""
    calls, results = triage_conversation({"protocol": "lean"}, script={
        "understand": [{"flows": [{"id": "triagem", "score": 95}],
                        "fields": ["nome: Ana", "cidade: Recife"]},
                       {"flows": []}, {"flows": []}, {"flows": []}],
        "speak": [{"message": "E a empresa?"}, {"message": "Ok"}, {"message": "Ok"}, {"message": "Ok"}]})
    assert results[0].session.data == {"nome": "Ana"}      # cidade is in no flow: not asked, not applied
    assert "- cidade" not in calls[0].system and "- porte [1-10 | 11-50 | 51+]" in calls[0].system  # nor described


def test_a_lean_field_item_is_an_id_colon_value_string_read_by_the_longest_id():
    names = ["cidade", "cidade natal", "hora"]
    assert lean_field_item("cidade natal: Recife", names) == ("cidade natal", "Recife")
    assert lean_field_item("cidade : Olinda", names) == ("cidade", "Olinda")
    assert lean_field_item("hora: 9:30", names) == ("hora", "9:30")          # a colon in the value stays
    assert lean_field_item("hora:", names) == ("hora", None)                 # no value: not given
    assert lean_field_item("horario: 9h", names) is None                     # no asked id: dropped
    assert lean_field_item("Recife", names) is None and lean_field_item(3, names) is None
    assert lean_field_item({"id": "hora", "value": "9h"}, names) == ("hora", "9h")   # the object form still reads


def test_lean_field_strings_name_ids_that_are_not_wire_names_and_coerce_like_v4_values():
    """ "cidade natal" travels as an alias in v4 and as itself in a lean string; "30" reads through an integer."""
    f = falai().fields({"cidade natal": {"type": "string"}, "idade": {"type": "integer"}})
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "q", "collect": ["cidade natal", "idade"],
                                                              "prompt": "Pergunte."}]}]

    def v4_reply(request):
        alias = next(name for name in request.schema["properties"]["fields"]["properties"] if name != "idade")
        return {"fields": {alias: "Recife", "idade": 30}}
    for protocol, reply in (("v4", v4_reply), ("lean", {"fields": ["cidade natal: Recife", "idade: 30"]})):
        provider = ScriptedProvider(script={"understand": [reply], "speak": [{"message": "Oi"}] * 2}, strict=True)
        agent = f.agent(name="Ana", provider=provider, flows=flows, protocol=protocol,
                        clock=fake_clock("2026-09-20T10:00:00.000Z"))
        r = agent.turn(session_id="s", message="oi", id="m1")
        r = agent.turn(session_id="s", session=r.session, message="de Recife, 30 anos", id="m2")
        assert r.session.data == {"cidade natal": "Recife", "idade": 30}, protocol


def test_the_lean_speak_schema_takes_field_strings_and_stays_strict():
    schema = lean_speak_schema()
    assert schema["properties"]["fields"] == {"type": "array", "items": {"type": "string"}}
    assert is_strict_schema(schema) and _anthropic_native_ok(schema)


def request_kinds(calls, kind):
    return [c for c in calls if c.schema_name == kind]


def test_lean_keeps_the_agent_constant_text_and_schema_ahead_of_the_history():
    """Every understand call of the conversation has the same system text and schema; so has every speak call
    (the speak schema is per step: the same on every turn of the step)."""
    calls, _ = triage_conversation({"protocol": "lean"}, history_items=4)
    understand = request_kinds(calls, "understand")
    assert len(understand) == 4 and len({c.system for c in understand}) == 1
    assert len({json.dumps(c.schema) for c in understand}) == 1
    assert "## Flows\n- triagem: Quer conhecer o produto." in understand[0].system      # the name says no more than the id
    assert "pede orçamento" in understand[0].system and "pede orçamento" not in understand[0].prompt
    speak = request_kinds(calls, "speak")
    assert len({c.system for c in speak}) == 1 and "## Reply\n\"message\": your answer" in speak[0].system
    assert all("## Reply" not in c.prompt and "## Response format" not in c.prompt for c in speak)
    assert len({json.dumps(c.schema) for c in speak}) == 1        # steps and the idle speaker alike


def test_lean_lists_each_pending_field_once_in_the_speak_prompt():
    calls, _ = triage_conversation({"protocol": "lean"})
    prompt = request_kinds(calls, "speak")[0].prompt
    assert prompt.count("- empresa") == 1 and "- empresa — ask: Pergunte a empresa." in prompt


def test_lean_understand_schema_has_no_descriptions_and_is_strict_on_every_vendor():
    schema = lean_schema(["flows", "mentions", "extract", "branches", "fields"])
    assert "description" not in json.dumps(schema)
    assert is_strict_schema(schema) and _anthropic_native_ok(schema)
    for requests in (triage_conversation({"protocol": "lean"})[0], rich_conversation({"protocol": "lean"})[0]):
        for request in requests:
            for vendor, body in wire_bodies(request).items():
                headers = {"x-goog-api-key": "k", "authorization": "Bearer k", "x-api-key": "k",
                           "anthropic-version": "2023-06-01"}
                if vendor == "gemini":
                    check_gemini(VENDORS[vendor][1], headers, {"alt": "sse"}, body)
                elif vendor == "openai":
                    check_chat("openai", headers, body)
                    if request.schema_name == "understand":
                        assert body["response_format"]["json_schema"]["strict"] is True
                else:
                    check_anthropic(headers, body)
                    if request.schema_name == "understand":
                        assert body["output_config"]["format"]["schema"] == _anthropic_schema(request.schema)


def test_anthropic_gets_a_breakpoint_at_the_end_of_the_history_under_lean_only():
    for protocol, expected in (("lean", 1), ("v4", 0)):
        calls, _ = triage_conversation({"protocol": protocol}, history_items=6)
        body = wire_bodies(calls[0])["anthropic"]
        marked = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
        assert len(marked) == expected
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        if expected:
            assert marked[0]["text"] == "mensagem antiga número 5"           # the last history item
            assert "cache_control" not in body["messages"][-1]["content"][-1]  # not the per-call prompt


def test_a_field_only_call_shares_the_routing_calls_system_text_and_schema():
    """The floor's flow is the only candidate: the call keeps the agent's one system text and schema,
    so the conversation's prefix stays byte-identical, and says after the history that it scores no
    flow; a flow listed anyway is not read (docs/guide/tokens.md)."""
    f = falai().fields({"nome": {"type": "string"}, "cidade": {"type": "string"}})
    flows = [{"id": "f", "on": [{"message": ["quero cadastrar"]}],
              "steps": [{"id": "q", "collect": ["nome", "cidade"], "prompt": "Pergunte."}]}]
    provider = ScriptedProvider(script={"understand": [{"flows": [{"id": "f", "score": 95}]},
                                                       {"flows": [{"id": "f", "score": 3}], "fields": ["nome: Ana"]}],
                                        "speak": [{"message": "Nome?"}, {"message": "Cidade?"}]}, strict=True)
    agent = f.agent(name="Ana", provider=provider, flows=flows, clock=fake_clock("2026-09-20T10:00:00.000Z"))
    r = agent.turn(session_id="s", message="quero cadastrar", id="m1")
    r = agent.turn(session_id="s", session=r.session, message="sou a Ana", id="m2")
    assert r.session.data == {"nome": "Ana"}
    routing, fields_only = request_kinds(provider.calls, "understand")
    assert (routing.system, routing.schema) == (fields_only.system, fields_only.schema)
    assert list(fields_only.schema["properties"]) == ["flows", "fields"]
    assert "Flows to score: none" in fields_only.prompt and "Flows to score" not in routing.prompt
    assert "## Details\n- nome\n- cidade" in fields_only.system
    assert list(fields_only.v4_schema["properties"]) == ["flows", "fields"]   # v4 scores the lone floor flow


def test_strict_scripts_in_the_v4_form_are_still_checked_under_lean():
    f = falai().fields({"nome": {"type": "string"}})
    flows = [{"id": "triagem", "on": [{"message": ["quer saber o preço"]}],
              "steps": [{"id": "q", "collect": ["nome"], "prompt": "Pergunte."}]}]
    for reply, words in (({"flows": {"Triagem": 95}}, 'reply.flows has the key "Triagem"'),
                         ({"flows": [{"id": "triagem", "score": "alta"}]}, 'reply.flows[0].score is "alta"')):
        agent = f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [reply]}, strict=True),
                        flows=flows, clock=fake_clock("2026-09-20T10:00:00.000Z"))
        with pytest.raises(ScriptError, match=words.replace("[", r"\[")):
            agent.turn(session_id="s", message="quanto custa?", id="m1")


def test_a_script_function_reads_the_v4_envelope_as_the_schema_while_calls_keep_the_request_sent():
    seen = []

    def reply(request):
        seen.append(list(request.schema["properties"]["flows"]["properties"]))
        return {"flows": {"triagem": 90}}
    f = falai().fields({"nome": {"type": "string"}})
    flows = [{"id": "triagem", "on": [{"message": ["quer saber o preço"]}],
              "steps": [{"id": "q", "collect": ["nome"], "prompt": "Pergunte."}]},
             {"id": "suporte", "on": [{"message": ["tem um problema"]}], "steps": [{"id": "q", "prompt": "Ajude."}]}]
    provider = ScriptedProvider(script={"understand": [reply], "speak": [{"message": "Nome?"}]})
    agent = f.agent(name="Ana", provider=provider, flows=flows, clock=fake_clock("2026-09-20T10:00:00.000Z"))
    r = agent.turn(session_id="s", message="quanto custa?", id="m1")
    assert seen == [["triagem", "suporte"]] and r.started[0].flow_id == "triagem"
    assert provider.calls[0].schema["properties"]["flows"]["type"] == "array"


def test_protocol_and_max_candidates_are_checked_at_construction():
    f = falai().fields({})
    with pytest.raises(FlowConfigurationError, match='protocol is "v5": it must be "lean" or "v4"'):
        f.agent(name="Ana", provider=ScriptedProvider(), protocol="v5")
    for bad in (0, 2.5, True, "3"):
        with pytest.raises(FlowConfigurationError, match="max_candidates is .*: it must be a whole number"):
            f.agent(name="Ana", provider=ScriptedProvider(), max_candidates=bad)


def flow_n(i, phrases):
    return {"id": f"f{i}", "name": f"Fluxo {i}", "on": [{"message": phrases}],
            "steps": [{"id": "q", "collect": [f"c{i}"], "prompt": "Pergunte."}]}


def test_the_lexical_prefilter_keeps_the_flows_sharing_most_words_in_agent_order():
    flows = [flow_n(0, ["segunda via do boleto"]), flow_n(1, ["cancelar o plano", "!não quero cancelar"]),
             flow_n(2, ["trocar o plano de internet"]), flow_n(3, ["falar com atendente"])]
    assert [f["id"] for f in lexical_top("Quero trocar meu plano", flows, 2)] == ["f1", "f2"]
    assert [f["id"] for f in lexical_top("BOLETO não chegou", flows, 1)] == ["f0"]
    assert [f["id"] for f in lexical_top("olá", flows, 2)] == ["f0", "f1"]        # no overlap: agent order


def test_max_candidates_scores_only_the_kept_flows_and_asks_only_their_fields():
    fields = {f"c{i}": {"type": "string"} for i in range(4)}
    flows = [flow_n(0, ["segunda via do boleto"]), flow_n(1, ["cancelar o plano"]),
             flow_n(2, ["trocar o plano de internet"]), flow_n(3, ["falar com atendente"])]
    for protocol in ("lean", "v4"):
        provider = ScriptedProvider(script={"understand": [{"flows": {"f2": 90}}], "speak": [{"message": "Ok"}]},
                                    strict=True)
        agent = falai().fields(fields).agent(name="Ana", provider=provider, flows=flows, max_candidates=1,
                                             protocol=protocol, clock=fake_clock("2026-09-20T10:00:00.000Z"))
        r = agent.turn(session_id="s", message="quero trocar de internet", id="m1")
        call = provider.calls[0]
        envelope = call.v4_schema or call.schema
        assert list(envelope["properties"]["flows"]["properties"]) == ["f2"]
        assert list(envelope["properties"]["fields"]["properties"]) == ["c2"]
        assert r.started[0].flow_id == "f2"
        if protocol == "lean":
            assert "## Flows" not in call.system and "- f2 — Fluxo 2" in call.prompt


def test_lean_understand_reply_that_is_not_usable_judges_nothing_as_v4_does():
    f = falai().fields({})
    flows = [{"id": "a", "on": [{"message": ["quer a"]}], "steps": [{"id": "s", "say": "A"}]},
             {"id": "b", "on": [{"message": ["quer b"]}], "steps": [{"id": "s", "say": "B"}]}]
    provider = ScriptedProvider(script={"understand": [Generation(message="não sei")]})
    agent = f.agent(name="Ana", provider=provider, flows=flows, idle="silent",
                    clock=fake_clock("2026-09-20T10:00:00.000Z"))
    r = agent.turn(session_id="s", message="hm", id="m1")
    assert r.llm_calls == 1 and r.started == [] and r.messages == []


def test_lean_tool_rounds_keep_the_tool_rule_in_the_system_part_and_wrap_up_after_the_history():
    calls, results = triage_conversation({"protocol": "lean", "max_tool_loops": 1}, script={
        "understand": [{"flows": [{"id": "suporte", "score": 0}]}] * 4,
        "speak": [{"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": "Recife"}}]},
                  {"message": "R$ 420."}, {"message": "Oi"}, {"message": "Oi"}, {"message": "Oi"}]})
    first, wrap = request_kinds(calls, "speak")[:2]
    assert "Call the offered tools" in first.system and "## Tools" not in first.prompt and first.tools
    assert wrap.tools is None and wrap.prompt.endswith("## Wrap up\nAnswer now with the tool results; call no tools.")
    assert wrap.history[-1]["role"] == "tool" and results[0].messages[0].text == "R$ 420."


def test_a_lean_speak_reply_lists_fields_and_a_v4_form_reply_still_reads():
    for reply in ({"message": "E a empresa?", "fields": ["nome: Ana"]},
                  {"message": "E a empresa?", "nome": "Ana"}):
        script = {"understand": [{"flows": [{"id": "triagem", "score": 95}]}] + [{"flows": []}] * 3,
                  "speak": [reply] + [{"message": "Ok"}] * 4}
        _, results = triage_conversation({"protocol": "lean"}, script=script)
        assert results[0].session.data == {"nome": "Ana"}


def test_a_streamed_lean_speak_reply_streams_only_the_message_and_ends_as_turn_does():
    reply = '{"fields":["nome: Ana"],"message":"Oi Ana! E a empresa?"}'

    def agent():
        script = {"understand": [{"flows": [{"id": "triagem", "score": 95}]}], "speak": [reply]}
        return triage_agent(ScriptedProvider(script=script))
    plain = agent().turn(session_id="s", message="quero saber como funciona", id="m1")
    chunks = list(agent().turn_stream(session_id="s", message="quero saber como funciona", id="m1"))
    assert "".join(c.delta for c in chunks if not c.done) == "Oi Ana! E a empresa?"
    streamed = chunks[-1].result
    assert streamed.messages == plain.messages and streamed.session.to_dict() == plain.session.to_dict()
    assert plain.session.data == {"nome": "Ana"}


def test_the_understand_schema_bounds_ids_lists_and_scores():
    """A weak model under a grammar cannot invent flow ids, lengthen a list or inflate a score: ids are an enum
    of the agent's flows (and mentions), each list at most as long as what it can hold, scores 0-100; OpenAI's
    strict mode still takes it, and Anthropic gets it without the bounds it refuses."""
    lean = [r for r in rich_conversation({"protocol": "lean"})[0] if r.schema_name == "understand"][0]
    properties = lean.schema["properties"]
    flows = properties["flows"]
    assert flows["maxItems"] == len(flows["items"]["properties"]["id"]["enum"]) >= 2
    assert flows["items"]["properties"]["score"] == {"type": "integer", "minimum": 0, "maximum": 100}
    assert properties["fields"]["maxItems"] >= 1
    if "mentions" in properties:
        assert properties["mentions"]["items"]["enum"]
    assert is_strict_schema(lean.schema) and _anthropic_native_ok(lean.schema)
    sent = json.dumps(_anthropic_schema(lean.schema))
    assert '"maxItems"' not in sent and '"minimum"' not in sent and "{maxItems: " in sent
    v4 = [r for r in rich_conversation({"protocol": "v4"})[0] if r.schema_name == "understand"][0]
    for node in v4.schema["properties"]["flows"]["properties"].values():
        assert (node["minimum"], node["maximum"]) == (0, 100)
    assert is_strict_schema(v4.schema)


def test_with_max_candidates_flow_ids_stay_free_strings():
    """An enum of every flow would put the whole catalog back into each call that max_candidates keeps small."""
    from conftest import build
    from falai_protocols import lean_parts

    flows = [{"id": f"f{i}", "on": [{"message": [f"quero {i}"]}], "steps": [{"id": "s", "prompt": "Oi."}]}
             for i in range(3)]
    for limit, enum in ((None, ["f0", "f1", "f2"]), (2, None)):
        agent, _, _ = build(flows, max_candidates=limit)
        item = lean_parts(agent).schema["properties"]["flows"]["items"]["properties"]["id"]
        assert item.get("enum") == enum


def test_a_call_that_scores_no_flow_reads_no_flow_score_from_a_lean_reply():
    """The shared schema lets a field-only reply list flows; the call asked for none, so none is read."""
    from falai_calls import AliasTable, LeanReading, read_judgement
    reply = Generation(message="", structured={"flows": [{"id": "f", "score": 80}], "fields": ["nome: Ana"]})
    asked = {"fields": ["nome"], "field_names": ["nome"]}
    judged = read_judgement(reply, AliasTable(), LeanReading(routing=False, **asked))
    assert judged.flows == {} and judged.fields == {"nome": "Ana"}
    assert read_judgement(reply, AliasTable(), LeanReading(flows={"f"}, **asked)).flows == {"f": 80}
