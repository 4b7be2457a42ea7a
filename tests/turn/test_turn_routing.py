"""Routing, the floor, suspension and hand-back, mentions, branches and the idle speaker
(flows.md §4.1-§4.3, §6; runtime.md §3.4-§3.6, §4.4-§4.7)."""
import conftest
from falai import Action
import pytest

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

FIELDS = {"nome": {"type": "string", "ask": "Pergunte o nome."},
          "pedido": {"type": "string", "ask": "Pergunte o número do pedido."},
          "cidade": {"type": "string"}}

VENDAS = {"id": "vendas", "name": "Vendas", "description": "Quer comprar.",
          "on": [{"message": ["quer comprar", "pede preço"]}],
          "steps": [{"id": "quem", "collect": ["nome"]}, {"id": "fim", "say": "Um vendedor fala com você."}]}
SUPORTE = {"id": "suporte", "name": "Suporte", "on": [{"message": ["tem um problema com o pedido"]}],
           "steps": [{"id": "num", "collect": ["pedido"]}, {"id": "ok", "say": "Vou verificar o pedido {{data.pedido}}."}]}
GERAL = {"id": "geral", "name": "Geral", "on": [{"message": []}],
         "steps": [{"id": "oi", "prompt": "Cumprimente e pergunte como ajudar."}]}


def build(flows, script, **options):
    """conftest's build over this file's FIELDS: (agent, its ScriptedProvider)."""
    agent, provider, _ = conftest.build(flows, script=script, fields=options.pop("fields", FIELDS), **options)
    return agent, provider


def test_the_top_scoring_flow_at_40_or_more_starts_and_takes_the_floor():
    """runtime.md §3.5 rule 3: with no asker the best eligible flow starts when it scores at least 40."""
    agent, _ = build([VENDAS, SUPORTE], {"understand": [{"flows": {"vendas": 85, "suporte": 10}}],
                                         "speak": [{"message": "Qual seu nome?"}]})
    r = agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert [s.run_id for s in r.started] == ["vendas#m1"]
    assert r.session.runs[0].status == "asking" and r.llm_calls == 2


def test_a_tie_goes_to_the_flow_earlier_in_agent_order():
    """runtime.md §3.5 rule 3: on a tie the flow earlier in agent order wins."""
    agent, _ = build([SUPORTE, VENDAS], {"understand": [{"flows": {"vendas": 70, "suporte": 70}}],
                                         "speak": [{"message": "Número do pedido?"}]})
    r = agent.turn(session_id="s1", message="?", id="m1")
    assert [s.flow_id for s in r.started] == ["suporte"]


def test_below_40_the_catch_all_starts_and_below_that_the_idle_speaker_answers():
    """runtime.md §3.5 rule 3 and §3.5.0: no score of 40 -> the first catch-all; no catch-all -> the idle speaker."""
    agent, _ = build([VENDAS, GERAL], {"understand": [{"flows": {"vendas": 39}}],
                                       "speak": [{"message": "Olá! Como posso ajudar?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert [s.flow_id for s in r.started] == ["geral"]
    agent, _ = build([VENDAS], {"understand": [{"flows": {"vendas": 20}}], "speak": [{"message": "Oi!"}]},
                     idle={"prompt": "Atenda."})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.started == [] and r.messages[0].key == "idle:m1" and r.messages[0].run_id is None
    assert [(o.kind, o.status, o.key, o.llm_calls) for o in r.outcomes] == [("idle", "ok", "idle:m1", 1)]


def test_a_lone_flow_starts_unscored_when_idle_is_silent_and_no_catch_all():
    """runtime.md §3.4 item 4: the unscored-start rule routes the one eligible flow without a score."""
    flows = [{"id": "f", "name": "F", "on": [{"message": ["qualquer coisa"]}], "steps": [{"id": "s", "say": "Olá!"}]}]
    agent, provider = build(flows, {}, idle="silent")
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.llm_calls == 0 and provider.calls == [] and [m.text for m in r.messages] == ["Olá!"]


def test_idle_silent_with_nothing_eligible_makes_no_call_and_says_nothing():
    """runtime.md §17: a message with idle "silent" and no eligible flow costs 0 calls."""
    agent, provider = build([], {}, idle="silent")
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.llm_calls == 0 and r.messages == [] and r.changed is True   # lastUserAt and inputs changed


def test_an_asker_keeps_the_floor_unless_another_flow_scores_15_more_and_40():
    """runtime.md §3.5 rule 3: with an asker, another flow takes over only at >= 40 and >= asker + 15."""
    agent, _ = build([VENDAS, SUPORTE], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 50, "suporte": 60}, "fields": {}},
                       {"flows": {"vendas": 30, "suporte": 80}}],
        "speak": [{"message": "Seu nome?"}, {"message": "Ainda preciso do seu nome."},
                  {"message": "Qual o número do pedido?"}]})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="e o meu pedido?", id="m2")
    assert r.started == [] and r.messages[0].key == "vendas#m1:quem:1:re:m2"
    r = agent.turn(session_id="s1", session=r.session, message="meu pedido não chegou!", id="m3")
    assert [s.flow_id for s in r.started] == ["suporte"]
    status = {run.flow_id: run.status for run in r.session.runs}
    assert status == {"vendas": "suspended", "suporte": "asking"}
    assert r.messages[0].key == "suporte#m3:num:1"


def test_a_suspended_run_resumes_when_the_asker_is_done():
    """runtime.md §4.5: the stack: the run suspended last comes back first, at the end of Settle."""
    agent, _ = build([VENDAS, SUPORTE], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 0, "suporte": 90}},
                       {"fields": {"pedido": "123"}}],
        "speak": [{"message": "Seu nome?"}, {"message": "Número do pedido?"}]})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="antes, meu pedido sumiu", id="m2")
    r = agent.turn(session_id="s1", session=r.session, message="é o 123", id="m3")
    assert [m.text for m in r.messages] == ["Vou verificar o pedido 123."]
    assert [e.flow_id for e in r.ended] == ["suporte"]
    assert [(run.flow_id, run.status) for run in r.session.runs] == [("vendas", "asking")]
    assert r.session.runs[0].suspended_at is None


def test_hand_back_answers_the_message_when_the_asker_moves_on_silently():
    """runtime.md §4.6: the asker ends without a word, so the suspended run resumes and answers this message."""
    silent_end = {"id": "suporte", "name": "Suporte", "on": [{"message": ["tem um problema com o pedido"]}],
                  "steps": [{"id": "num", "collect": ["pedido"]}, {"id": "registra", "do": "registrar"}]}
    registered = []
    agent, _ = build([VENDAS, silent_end], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"suporte": 90}}, {"fields": {"pedido": "7"}}],
        "speak": [{"message": "Seu nome?"}, {"message": "Número do pedido?"},
                  {"message": "Registrado! Voltando: qual seu nome?"}]},
        actions={"registrar": Action(parameters={}, run=lambda p, ctx: registered.append(ctx.key))})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="problema no pedido", id="m2")
    r = agent.turn(session_id="s1", session=r.session, message="7", id="m3")
    assert registered == ["suporte#m2:registra:1"]
    assert [(m.text, m.key) for m in r.messages] == [("Registrado! Voltando: qual seu nome?", "vendas#m1:quem:1:re:m3")]


def test_a_routed_do_only_flow_leaves_the_asker_to_answer():
    """runtime.md §3.5, "The displaced asker": routing never suspends; with no talk step in the routed run
    the asker keeps the floor and answers."""
    log_flow = {"id": "log", "name": "Log", "on": [{"message": ["reclama"]}],
                "steps": [{"id": "a", "do": "anotar"}]}
    agent, _ = build([VENDAS, log_flow], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 10, "log": 95}}],
        "speak": [{"message": "Seu nome?"}, {"message": "Anotei. E seu nome?"}]},
        actions={"anotar": Action(parameters={}, run=lambda p, ctx: None)})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="que demora!", id="m2")
    assert [s.flow_id for s in r.started] == ["log"] and [e.flow_id for e in r.ended] == ["log"]
    assert [m.key for m in r.messages] == ["vendas#m1:quem:1:re:m2"]
    assert r.session.runs[0].status == "asking"


def test_a_refused_route_starts_nothing_and_no_catch_all_stands_in():
    """runtime.md §3.5 rules 5-6: a route whose start is refused (the flow is live elsewhere, claims.active)
    starts nothing: the asker keeps the floor, and with no asker no catch-all is tried (the idle speaker answers)."""
    agent, _ = build([VENDAS, SUPORTE, GERAL], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"suporte": 90}}, {"flows": {"suporte": 90}}],
        "speak": [{"message": "Seu nome?"}, {"message": "Ainda: seu nome?"}, {"message": "Oi! Em que ajudo?"}]})
    elsewhere = {"active": ["suporte:s1", "suporte:s2"]}
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="meu pedido!", id="m2", claims=elsewhere)
    assert [(s.flow_id, s.anchor, s.code) for s in r.skipped] == [("suporte", "s1", "already-running")]
    assert r.skipped[0].message == "a run of this flow is already live here"
    assert r.started == [] and r.messages[0].key == "vendas#m1:quem:1:re:m2"
    r = agent.turn(session_id="s2", message="meu pedido!", id="m1", claims=elsewhere)
    assert r.started == [] and r.messages[0].key == "idle:m1"


def test_a_mention_flow_speaks_beside_the_floor_and_the_asker_waits():
    """flows.md §4.2: a say in a mention run answers the message; the asker's talk step writes another-reply."""
    mention = {"id": "concorrente", "name": "Concorrente",
               "on": [{"mention": ["cita um concorrente", "!só elogia"],
                       "extract": {"nome_concorrente": {"type": "string"}}}],
               "steps": [{"id": "r", "say": "Sobre a {{input.nome_concorrente}}: somos mais baratos."}]}
    agent, _ = build([VENDAS, mention], {
        "understand": [{"flows": {"vendas": 90}, "mentions": {"concorrente": False}},
                       {"mentions": {"concorrente": True}, "extract": {"concorrente": {"nome_concorrente": "ACME"}}}],
        "speak": [{"message": "Seu nome?"}]})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="a ACME é mais barata", id="m2")
    assert [m.text for m in r.messages] == ["Sobre a ACME: somos mais baratos."]
    assert r.started[0].run_id == "concorrente#m2" and r.ended[0].input == {"nome_concorrente": "ACME"}
    skipped = [o for o in r.outcomes if o.code == "another-reply"]
    assert [(o.run_id, o.kind, o.key) for o in skipped] == [("vendas#m1", "collect", "vendas#m1:quem:1")]
    assert r.llm_calls == 1 and r.session.runs[0].status == "asking"


def test_a_code_only_mention_detector_runs_its_start_order_on_every_message():
    """flows.md §4.2: mention [] never reaches the model; if and repeat decide, and a blocked repeat is a skip."""
    detector = {"id": "vip", "name": "VIP", "on": [{"mention": [], "if": {"known": ["nome"]}}],
                "steps": [{"id": "a", "do": "marcar"}]}
    marked = []
    agent, provider = build([detector], {"speak": [{"message": "Oi"}, {"message": "Oi de novo"},
                                                   {"message": "Olá"}]},
                            actions={"marcar": Action(parameters={}, run=lambda p, ctx: marked.append(ctx.key))})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.started == [] and r.skipped == []            # if is false: nothing, not even a skip
    r.session.data["nome"] = "Ana"
    r = agent.turn(session_id="s1", session=r.session, message="oi", id="m2")
    assert marked == ["vip#m2:a:1"]
    r = agent.turn(session_id="s1", session=r.session, message="oi", id="m3")
    assert [(s.flow_id, s.code, s.trigger_key) for s in r.skipped] == [("vip", "already-claimed", "m3")]
    assert all(c.schema_name == "speak" for c in provider.calls)


def test_a_when_branch_fires_only_for_the_asker_that_keeps_the_floor():
    """flows.md §6: the branch is judged by the understand call and moves the run with code branch."""
    flows = [{"id": "menu", "name": "Menu", "on": [{"message": []}], "steps": [
        {"id": "q", "collect": ["nome"],
         "branches": [{"when": "a pessoa pede um humano", "then": {"flow": "humano"}}]}]},
        {"id": "humano", "name": "Humano", "steps": [{"id": "aviso", "say": "Chamando alguém da equipe."}]}]
    agent, _ = build(flows, {"understand": [{"branches": {"menu#m1/q/0": True}}],
                             "speak": [{"message": "Seu nome?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="quero falar com gente", id="m2")
    branch = r.outcomes[0]
    assert (branch.kind, branch.status, branch.code, branch.next, branch.key) == (
        "collect", "ok", "branch", "flow:humano", "menu#m1:q:1")
    assert [s.run_id for s in r.started] == ["humano#menu#m1:q:1"]
    assert r.started[0].run_id == "humano#menu#m1:q:1" and r.session.runs == []
    assert [m.text for m in r.messages] == ["Chamando alguém da equipe."]
    assert [(e.flow_id, e.reason) for e in r.ended] == [("menu", "flow"), ("humano", "end")]


def test_an_if_branch_is_judged_by_code_without_an_understand_call():
    """flows.md §6: if branches never reach the model and are judged even when no understand call happens."""
    flows = [{"id": "f", "name": "F", "on": [{"message": []}], "steps": [
        {"id": "q", "prompt": "Converse.", "collect": ["nome"],
         "branches": [{"if": lambda ctx: "tchau" in (ctx.context or {}).get("texto", ""), "then": "fim"}]},
        {"id": "fim", "say": "Até logo!"}]}]
    fields = {"nome": {"type": "string", "extract": "asked"}}
    agent, provider = build(flows, {"speak": [{"message": "Oi! Seu nome?"}]}, fields=fields)
    r = agent.turn(session_id="s1", message="oi", id="m1")
    r = agent.turn(session_id="s1", session=r.session, message="tchau", id="m2", context={"texto": "tchau"})
    assert r.llm_calls == 0 and [m.text for m in r.messages] == ["Até logo!"]
    assert r.outcomes[0].code == "branch" and r.outcomes[0].next == "fim"


def test_on_end_stay_answers_every_message_with_a_new_visit():
    """flows.md §3.6 "stay": the stay step answers every message, each answer a new visit with a new key."""
    flows = [{"id": "faq", "name": "FAQ", "on": [{"message": []}], "onEnd": "stay",
              "steps": [{"id": "r", "prompt": "Responda dúvidas."}]}]
    agent, _ = build(flows, {"speak": [{"message": "Oi!"}, {"message": "Abrimos às 9h."},
                                       {"message": "Sim, aos sábados."}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.session.runs[0].staying and r.session.runs[0].status == "asking"
    r = agent.turn(session_id="s1", session=r.session, message="que horas abrem?", id="m2")
    r = agent.turn(session_id="s1", session=r.session, message="e sábado?", id="m3")
    assert [m.key for m in r.messages] == ["faq#m1:r:3"] and r.llm_calls == 1
    assert r.session.runs[0].visits == {"r": 4}


def test_on_end_reset_starts_a_fresh_run_keeping_the_data_and_stops_at_hop_5():
    """flows.md §3.6 "reset": a fresh run at steps[0], data kept (no clearOnStart), hop + 1, trigger key the
    last step's key; a flow that resets forever without asking stops at hop 5 (hop-limit)."""
    flows = [{"id": "loop", "name": "Loop", "on": [{"message": []}], "onEnd": "reset", "clearOnStart": ["nome"],
              "steps": [{"id": "q", "collect": ["nome"]}, {"id": "s", "say": "Ok {{data.nome}}."}]}]
    agent, _ = build(flows, {"speak": [{"message": "Nome?", "nome": "Ana"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert [m.text for m in r.messages] == ["Nome?"] + ["Ok Ana."] * 5
    assert [(e.id, e.hop, e.reason) for e in r.ended][:2] == [("loop#m1", 0, "reset"),
                                                            ("loop#loop#m1:s:1", 1, "reset")]
    assert r.started[1].run_id == "loop#loop#m1:s:1" and r.ended[1].trigger == {"kind": "flow", "key": "loop#m1:s:1"}
    assert [(s.code, s.trigger_key) for s in r.skipped] == [("hop-limit", "loop#loop#loop#loop#loop#m1:s:1:s:1:s:1:s:1:s:1")]
    assert r.session.runs == [] and r.session.data == {"nome": "Ana"}


def test_idle_speaker_stays_quiet_when_a_say_answered():
    """runtime.md §3.6.6 rule 3: the idle speaker answers only when nobody spoke this turn."""
    flows = [{"id": "m", "name": "M", "on": [{"mention": [], "repeat": "always"}],
              "steps": [{"id": "s", "say": "Recebido."}]}]
    agent, provider = build(flows, {"speak": []})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert [m.text for m in r.messages] == ["Recebido."] and r.llm_calls == 0
