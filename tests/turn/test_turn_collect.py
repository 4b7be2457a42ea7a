"""Talk steps that collect fields: pending, out-of-order extraction, maxAsks, fixed questions,
clearing and re-asking (flows.md §2, §5.3; runtime.md §3.6.3, §3.8)."""
import pytest

import conftest

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "empresa": {"type": "string", "ask": "Pergunte a empresa."},
    "porte": {"type": "string", "enum": ["1-10", "11-50", "51+"], "ask": "Pergunte o porte."},
    "confirmado": {"type": "boolean", "ask": "Pergunte se está certo."},
}


def build(flows, script, **options):
    """conftest's build over this file's FIELDS: (agent, its ScriptedProvider)."""
    agent, provider, _ = conftest.build(flows, script=script, fields=options.pop("fields", FIELDS), **options)
    return agent, provider


TRIAGEM = {
    "id": "triagem", "name": "Triagem", "on": [{"message": []}],
    "steps": [
        {"id": "quem", "collect": ["nome", "empresa"]},
        {"id": "porte", "collect": ["porte"]},
        {"id": "fim", "prompt": "Agradeça."},
    ],
}


def test_first_step_asks_and_counts_one_ask_per_pending_field():
    """runtime.md §3.8 item 3.6: after speaking, each field still pending has its asked count raised.
    runtime.md §3.4 item 8: the catch-all's first step asks nome and empresa itself, but porte is not
    free, so all its harvestable fields go to an understand call."""
    agent, provider = build([TRIAGEM], {"understand": [{}], "speak": [{"message": "Qual seu nome e empresa?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    run = r.session.runs[0]
    assert (run.status, run.step_id, run.asked) == ("asking", "quem", {"nome": 1, "empresa": 1})
    assert r.messages[0].text == "Qual seu nome e empresa?" and r.messages[0].kind == "ai"
    assert r.llm_calls == 2 and [c.schema_name for c in provider.calls] == ["understand", "speak"]


def test_a_catch_all_whose_fields_all_ride_on_its_first_step_costs_one_call():
    """runtime.md §3.4 item 8 and §17: an opening message with nothing else to judge costs no understand call."""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}], "steps": [{"id": "q", "collect": ["nome"]}]}]
    agent, provider = build(flows, {"speak": [{"message": "Como você se chama?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["speak"]


def test_fields_given_out_of_order_are_taken_and_their_steps_skip():
    """flows.md §2.3: the understand call harvests any unknown "anywhere" field of the flow in play;
    runtime.md §3.6.3 talk rule 2: a step whose fields are all known is skipped with already-known."""
    agent, provider = build([TRIAGEM], {
        "speak": [{"message": "Qual seu nome e empresa?"}, {"message": "Obrigada!"}],
        "understand": [{}, {"fields": {"nome": "Ana", "empresa": "Acme", "porte": "11-50"}}],
    })
    r1 = agent.turn(session_id="s1", message="oi", id="m1")
    r2 = agent.turn(session_id="s1", session=r1.session, message="Ana da Acme, somos 20", id="m2")
    assert r2.session.data == {"nome": "Ana", "empresa": "Acme", "porte": "11-50"}
    assert [(o.step_id, o.status, o.code) for o in r2.outcomes] == [
        ("quem", "ok", None), ("porte", "skipped", "already-known"), ("fim", "ok", None)]
    assert r2.messages[0].key == "triagem#m1:fim:1" and r2.llm_calls == 2
    assert r2.ended[0].reason == "end"


def test_a_value_off_the_enum_is_dropped_and_the_field_asked_again():
    """runtime.md §3.5.1: a judged value outside the enum is dropped with not-in-enum and stays pending."""
    agent, _ = build([TRIAGEM], {
        "speak": [{"message": "Nome e empresa?"}, {"message": "Quantas pessoas?"}],
        "understand": [{}, {"fields": {"nome": "Ana", "empresa": "Acme", "porte": "vinte"}}],
    })
    r1 = agent.turn(session_id="s1", message="oi", id="m1")
    r2 = agent.turn(session_id="s1", session=r1.session, message="Ana da Acme, vinte pessoas", id="m2")
    dropped = [o for o in r2.outcomes if o.code == "not-in-enum"]
    assert [(o.kind, o.status, o.detail, o.run_id, o.key) for o in dropped] == [
        ("collect", "skipped", "porte", None, None)]
    assert dropped[0].message == "the value is not one of the field's options"
    assert "porte" not in r2.session.data
    assert r2.session.runs[0].step_id == "porte" and r2.session.runs[0].status == "asking"


def test_speak_envelope_values_are_coerced_and_written():
    """runtime.md §3.8 item 3.2: the speak envelope's field values go through §3.5.1."""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}],
              "steps": [{"id": "q", "collect": ["confirmado"]}, {"id": "ok", "say": "Feito."}]}]
    agent, _ = build(flows, {"speak": [{"message": "Está certo?"}, {"message": "Anotado", "confirmado": "sim"}]})
    r1 = agent.turn(session_id="s1", message="oi", id="m1")
    # a boolean is "asked" by default: nothing to harvest, so no understand call
    r2 = agent.turn(session_id="s1", session=r1.session, message="sim", id="m2")
    assert r2.llm_calls == 1 and r2.session.data == {"confirmado": True}
    assert [m.text for m in r2.messages] == ["Anotado", "Feito."]


def test_max_asks_gives_a_field_up_and_the_step_moves_on():
    """flows.md §2.2 and the Note: an "anywhere" field at maxAsks leaves pending; the step exits with max-asks."""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}],
              "steps": [{"id": "q", "collect": ["empresa"], "maxAsks": 2}, {"id": "fim", "say": "Tudo bem."}]}]
    agent, provider = build(flows, {"speak": [{"message": "Qual empresa?"}, {"message": "E a empresa?"}],
                                    "understand": [{}, {}]})
    r1 = agent.turn(session_id="s1", message="oi", id="m1")
    r2 = agent.turn(session_id="s1", session=r1.session, message="prefiro não dizer", id="m2")
    assert r2.session.runs[0].asked == {"empresa": 2} and r2.session.runs[0].status == "asking"
    r3 = agent.turn(session_id="s1", session=r2.session, message="não", id="m3")
    assert r3.llm_calls == 1                          # the understand call reads the last answer; no speak call
    assert [(o.code, o.detail, o.status) for o in r3.outcomes] == [
        ("max-asks", "empresa", "skipped"), (None, None, "ok"), (None, None, "ok")]
    assert r3.outcomes[0].message == "the field was asked the most times allowed"
    assert [m.text for m in r3.messages] == ["Tudo bem."]


def test_unlimited_max_asks_waits_for_a_tool_only_field_however_many_replies():
    """flows.md §2.2 (falai for Python): "maxAsks": "unlimited" never gives a field up, so a step waiting
    for what only a tool writes stays until the tool writes it; with the default it gives up after 3."""
    fields = {**FIELDS, "pedido": {"type": "string", "extract": "never"}}
    flows = [{"id": "f", "name": "F", "on": [{"message": []}],
              "steps": [{"id": "q", "prompt": "Help.", "collect": ["pedido"], "maxAsks": "unlimited"},
                        {"id": "fim", "say": "Pedido {{data.pedido}}."}]}]
    agent, provider = build(flows, {"speak": [{"message": f"Ajudo? {n}"} for n in range(6)],
                                    "understand": [{}] * 6}, fields=fields)
    r = agent.turn(session_id="s1", message="oi", id="m0")
    for n in range(1, 6):
        r = agent.turn(session_id="s1", session=r.session, message=f"e então {n}", id=f"m{n}")
    assert r.session.runs[0].asked == {"pedido": 6} and r.session.runs[0].status == "asking"
    assert "max-asks" not in [o.code for o in r.outcomes] and r.messages[0].text == "Ajudo? 5"
    flows[0]["steps"][0].pop("maxAsks")
    agent, provider = build(flows, {"speak": [{"message": "Ajudo?"}] * 3, "understand": [{}] * 4}, fields=fields)
    r = agent.turn(session_id="s1", message="oi", id="m0")
    for n in range(1, 4):                     # the fourth message finds the field asked 3 times: given up
        r = agent.turn(session_id="s1", session=r.session, message="e então", id=f"m{n}")
    assert [o.code for o in r.outcomes][:1] == ["max-asks"] and r.messages[-1].text == "Pedido {{data.pedido}}."


def test_fixed_question_goes_out_verbatim_without_a_model_call():
    """runtime.md §3.6.7: the first ask of a question step is the rendered question, kind verbatim, no speak call.
    (runtime.md §3.4 item 8: a question step's fields are not "free", so the opening message is read for them.)"""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}],
              "steps": [{"id": "quem", "collect": ["nome"], "question": "Oi! Como você se chama?"}]}]
    agent, provider = build(flows, {"speak": [{"message": "Ainda preciso do seu nome."}], "understand": [{}, {}]})
    r1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert r1.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["understand"]
    assert (r1.messages[0].text, r1.messages[0].kind, r1.messages[0].key) == (
        "Oi! Como você se chama?", "verbatim", "f#m1:quem:1")
    assert [(o.kind, o.status, o.code) for o in r1.outcomes] == [("collect", "ok", "asked-fixed")]
    assert r1.session.runs[0].asked == {"nome": 1}
    assert r1.session.last_assistant_at == "2026-09-20T10:00:00.000Z"
    r2 = agent.turn(session_id="s1", session=r1.session, message="por quê?", id="m2")
    assert r2.messages[0].kind == "ai" and r2.llm_calls == 2   # later asks are the model's own words


def test_a_no_clears_the_fields_and_asks_again_from_the_start():
    """flows.md §2.5 and §5.2: {step, clear} deletes the fields and their asked counts, then jumps;
    the fixed question goes out again because its counts were reset."""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}], "steps": [
        {"id": "quem", "collect": ["nome"], "question": "Qual seu nome?"},
        {"id": "conf", "collect": ["confirmado"], "prompt": "Confirme o nome."},
        {"id": "ok", "if": {"equals": {"confirmado": True}},
         "else": {"step": "quem", "clear": ["nome", "confirmado"]}},
        {"id": "fim", "say": "Perfeito, {{data.nome}}!"},
    ]}]
    agent, _ = build(flows, {"understand": [{}, {"fields": {"nome": "Bia"}}, {"fields": {"nome": "Ana"}}],
                             "speak": [{"message": "Seu nome é Bia?"},
                                       {"message": "Certo.", "confirmado": False},
                                       {"message": "Seu nome é Ana?"},
                                       {"message": "Ótimo.", "confirmado": True}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="Bia", id="m2")
    r = agent.turn(session_id="s1", session=r.session, message="não, errou", id="m3")
    assert [m.text for m in r.messages] == ["Certo.", "Qual seu nome?"]
    assert r.session.data == {} and r.session.runs[0].asked == {"nome": 1}
    if_line = next(o for o in r.outcomes if o.kind == "if")
    assert if_line.next == "quem" and r.messages[1].key == "f#m1:quem:2"
    r = agent.turn(session_id="s1", session=r.session, message="Ana", id="m4")
    r = agent.turn(session_id="s1", session=r.session, message="isso", id="m5")
    assert [m.text for m in r.messages] == ["Ótimo.", "Perfeito, Ana!"]
    assert r.ended[0].reason == "end"


def test_an_asked_boolean_is_never_harvested_by_the_understand_call():
    """flows.md §2.3: extract "asked" (every boolean by default) is read only by the speak call of the step asking it."""
    flows = [{"id": "f", "name": "F", "on": [{"message": ["quer ajuda"]}], "collect": ["nome", "confirmado"],
              "steps": [{"id": "q", "collect": ["nome", "confirmado"]}]}]
    agent, provider = build(flows, {"understand": [{"flows": {"f": 90}}], "speak": [{"message": "Nome?"}]})
    agent.turn(session_id="s1", message="quero ajuda", id="m1")
    call = provider.calls[0]
    asked = str(call.v4_schema or call.schema) + call.prompt      # "lean": the turn's list is in the prompt
    assert "confirmado" not in asked and "nome" in asked
    assert "confirmado" not in (call.system or "")                 # nor in the lean field catalog
