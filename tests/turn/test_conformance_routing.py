"""Conformance review: what a message turn asks the model to judge, and what happens with the judgement.

Adversarial tests of runtime.md §3.2 (I-R, I-F), §3.4, §3.5 (incl. §3.5.0-§3.5.2), §3.6, §4.4-§4.7, §9, §17;
model-calls.md §1, §3.1-§3.2, §3.5-§3.6; flows.md §2.2-§2.3, §3.6, §4, §5.3, §6, §7.5.

Every test drives whole turns through a ScriptedProvider and asserts only what the engine exposes: whether
the understand call happened and what it offered (`provider.calls[i].schema` and `.prompt`), `llm_calls`,
`started`/`ended`/`skipped`, runs' status, outcome lines, messages and keys. The Run-phase half (displaced
asker, stack and hand-back, another-reply, `understand: True`, staying) is tests/turn/test_conformance_run_phase.py.
"""
import pytest
import conftest
from conftest import T0
from falai import Action

pytestmark = pytest.mark.protocols("lean", "v4")     # the same judgements under both (issue 11)


FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "email": {"type": "string", "ask": "Pergunte o e-mail."},
    "pedido": {"type": "string", "ask": "Pergunte o número do pedido."},
    "cidade": {"type": "string", "ask": "Pergunte a cidade."},
    "plano": {"type": "string", "ask": "Pergunte o plano."},
    "x": {"type": "string", "ask": "Pergunte x."},
    "y": {"type": "string", "ask": "Pergunte y."},
    "aceita": {"type": "boolean", "ask": "Pergunte se aceita."},
    "aceita_livre": {"type": "boolean", "extract": "anywhere", "ask": "Pergunte se aceita."},
    "cpf": {"type": "string", "extract": "asked", "ask": "Pergunte o CPF."},
}


def build(flows, script=None, *, fields=None, **options):
    """conftest's build over this review's FIELDS, the script second."""
    return conftest.build(flows, script=script, fields=fields or FIELDS, **options)


def understand_calls(provider):
    return [call for call in provider.calls if call.schema_name == "understand"]


def section(call, name):
    """The property names of one envelope section, in order; None when the section is absent (under
    protocol "lean" the request carries the turn's v4 envelope beside the lean schema)."""
    props = (call.v4_schema or call.schema)["properties"]
    return list(props[name]["properties"]) if name in props else None


def status(r):
    return [(run.id, run.status) for run in r.session.runs]


def noop():
    """An action that records its step key."""
    log = []

    def run(params, ctx):
        log.append(ctx.key)
    return Action(parameters={}, run=run), log


def flow(fid, on=None, steps=None, **keys):
    out = {"id": fid, "name": fid.capitalize(), "steps": steps or [{"id": "p", "prompt": "Responda."}]}
    if on is not None:
        out["on"] = on
    out.update(keys)
    return out


VENDAS = flow("vendas", on=[{"message": ["quer comprar"]}], steps=[{"id": "q", "collect": ["cpf"]}])


SUPORTE = flow("suporte", on=[{"message": ["tem um problema"]}], steps=[{"id": "q", "collect": ["pedido"]}])


TROCA = flow("troca", on=[{"message": ["quer trocar um produto"]}], steps=[{"id": "q", "collect": ["pedido"]}])


# §3.4 items 4, 8, 9 and model-calls.md §3.1: when there is no understand call -------------------------------------


def test_a_floor_holder_alone_with_nothing_harvestable_and_only_if_branches_makes_no_understand_call():
    """runtime.md §3.4 item 9, model-calls.md §3.1 (only the floor flow to score), §17 row 2: an asker whose
    flow has no unknown "anywhere" field, no `when` branch and no other eligible flow spends only the speak call;
    its `if` branch is still judged by code (§3.5 rule 8)."""
    f = flow("f", on=[{"message": []}], steps=[
        {"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["nome"]}, "then": "fim"}]},
        {"id": "fim", "say": "Até mais, {{data.nome}}."}])
    agent, provider, _ = build([f], {"speak": [{"message": "CPF?"}, {"message": "Preciso do CPF."}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="hm", id="m2")
    assert t2.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["speak", "speak"]
    t2.session.data["nome"] = "Bia"
    t3 = agent.turn(session_id="s1", session=t2.session, message="ok", id="m3")
    assert t3.llm_calls == 0 and [m.text for m in t3.messages] == ["Até mais, Bia."]
    assert [(o.code, o.next) for o in t3.outcomes][:1] == [("branch", "fim")]


def test_an_askers_own_flow_eligible_again_is_still_only_the_floor_flow_and_costs_no_understand_call():
    """model-calls.md §3.1: only routing left and the candidate list holds only the floor holder's own flow
    (its `repeat: "always"` makes it eligible again, but each id is listed once): zero understand calls."""
    f = flow("f", on=[{"message": ["quer ajuda"], "repeat": "always"}],
             steps=[{"id": "q", "collect": ["cpf"]}])
    agent, provider, _ = build([f], {"understand": [{"flows": {"f": 90}}],
                                     "speak": [{"message": "CPF?"}, {"message": "CPF, por favor."}]})
    t1 = agent.turn(session_id="s1", message="quero ajuda", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero ajuda de novo", id="m2")
    assert t2.llm_calls == 1 and len(understand_calls(provider)) == 1
    assert t2.started == [] and t2.messages[0].key == "f#m1:q:1:re:m2"


def test_the_unscored_lone_flow_still_has_its_fields_judged_in_a_call_without_candidates():
    """runtime.md §3.4 items 4 and 7, model-calls.md §3.1: under the unscored-start rule the lone flow is not a
    candidate, but its harvestable fields are still judged ("a call is made for them alone"); then it is routed
    to without a score and the extracted value lands before it moves."""
    f = flow("f", on=[{"message": ["quer um orçamento"]}], steps=[
        {"id": "q", "collect": ["nome"]}, {"id": "c", "collect": ["cidade"]}])
    agent, provider, _ = build([f], {"understand": [{"fields": {"cidade": "Recife"}}],
                                     "speak": [{"message": "Seu nome?"}]}, idle="silent")
    r = agent.turn(session_id="s1", message="sou de Recife", id="m1")
    call = understand_calls(provider)[0]
    assert list((call.v4_schema or call.schema)["properties"]) == ["fields"]
    assert section(call, "fields") == ["nome", "cidade"]
    assert "## Flows the customer may want" not in call.prompt
    assert [s.run_id for s in r.started] == ["f#m1"] and r.llm_calls == 2
    assert r.session.data == {"cidade": "Recife"} and r.messages[0].key == "f#m1:q:1"


@pytest.mark.parametrize("extra, idle", [
    ([flow("geral", on=[{"message": []}], steps=[{"id": "oi", "prompt": "Cumprimente."}])], "silent"),
    ([], {"prompt": "Atenda."}),
])
def test_a_lone_flow_is_scored_when_a_catch_all_or_the_idle_speaker_could_stand_in(extra, idle):
    """runtime.md §3.4 item 4, model-calls.md §3.1 last paragraph: with a qualifying catch-all or a non-silent
    idle speaker, the lone eligible flow is a candidate and needs 40 to start."""
    f = flow("f", on=[{"message": ["quer um orçamento"]}], steps=[{"id": "s", "say": "Orçamento!"}])
    agent, provider, _ = build([f, *extra], {"understand": [{"flows": {"f": 39}}],
                                             "speak": [{"message": "Olá!"}]}, idle=idle)
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["f"]
    assert "f" not in [s.flow_id for s in r.started] and [m.text for m in r.messages] == ["Olá!"]


def test_the_unscored_rule_does_not_apply_when_a_run_took_the_floor_in_ingest():
    """runtime.md §3.4 items 1 and 4: the rule needs "no floor run"; a run that took the floor in Ingest (I-F)
    is one, so the lone eligible flow is scored beside the floor flow (and routing is then skipped, §3.5 rule 3)."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "d"}, {"id": "x", "say": "Sem resposta."},
                                   {"id": "d", "do": "anotar"}])
    f = flow("f", on=[{"message": ["quer um orçamento"]}], steps=[{"id": "s", "say": "Orçamento!"}])
    anotar, log = noop()
    agent, provider, _ = build([espera, f], {"understand": [{"flows": {"espera": 0, "f": 95}}]},
                               idle="silent", actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero um orçamento", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["espera", "f"]
    assert t2.started == [] and t2.messages == [] and log == ["espera#k1:d:1"]


def test_a_floor_run_from_ingest_with_nothing_else_to_judge_costs_no_understand_call():
    """model-calls.md §3.1: the floor run that took the floor in Ingest is the only candidate (no eligible flow,
    no field, no branch is sent for a run that is not asking): zero understand calls."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "q"}, {"id": "x", "say": "Sem resposta."},
                                   {"id": "q", "prompt": "Responda ao retorno.",
                                    "branches": [{"when": "a pessoa pede um humano", "then": "x"}]}])
    agent, provider, _ = build([espera], {"speak": [{"message": "Que bom que voltou!"}]}, idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="voltei", id="m1")
    assert [c.schema_name for c in provider.calls] == ["speak"] and t2.llm_calls == 1
    assert t2.messages[0].key == "espera#k1:q:1"


def test_a_claimed_once_mention_is_not_asked_so_nothing_is_left_to_judge():
    """runtime.md §3.4 items 5 and 9, flows.md §4.2: a claimed "once" mention is simply not asked; with nothing
    else to judge there is no understand call."""
    m = flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "s", "do": "anotar"}])
    anotar, _ = noop()
    agent, provider, _ = build([m], {"understand": [{"mentions": {"conc": True}}],
                                     "speak": [{"message": "Oi!"}, {"message": "Oi de novo!"}]},
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="a ACME é melhor", id="m1")
    assert [s.run_id for s in t1.started] == ["conc#m1"] and section(provider.calls[0], "mentions") == ["conc"]
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m2")
    assert t2.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["understand", "speak", "speak"]
    assert t2.skipped == []


def test_a_when_branch_alone_is_the_reason_for_the_understand_call():
    """flows.md §6 last paragraph, runtime.md §3.4 items 4 and 6: the asker's `when` branch is what makes the
    call; the floor flow rides along as the lone candidate "so the asker's own score exists"."""
    f = flow("f", on=[{"message": []}], steps=[
        {"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["nome"]}, "then": "fim"},
                                                     {"when": "a pessoa desiste", "then": "fim"}]},
        {"id": "fim", "say": "Tudo bem."}])
    agent, provider, _ = build([f], {"understand": [{"branches": {"f#m1/q/1": False}}],
                                     "speak": [{"message": "CPF?"}, {"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    agent.turn(session_id="s1", session=t1.session, message="hm", id="m2")
    call = understand_calls(provider)[0]
    assert list((call.v4_schema or call.schema)["properties"]) == ["flows", "branches"]
    assert section(call, "flows") == ["f"] and section(call, "branches") == ["q1"]
    assert "- q1: a pessoa desiste" in call.prompt


# §3.4 items 1-3 and 7, model-calls.md §3.2: eligibility, candidates and fields ------------------------------------


def test_candidates_lead_with_the_floor_flow_whatever_its_trigger_then_eligible_flows_in_agent_order():
    """runtime.md §3.4 item 4, model-calls.md §3.2 (candidates): the floor run's flow comes first even when it
    has no message trigger and sits last in agent order; then every eligible message flow in agent order. A
    catch-all, a flow whose trigger `if` is false and a claimed "once" flow are never candidates."""
    a = flow("a", on=[{"message": ["quer A"]}])
    b = flow("b", on=[{"message": ["quer B"], "if": {"known": ["plano"]}}])
    c = flow("c", on=[{"message": ["quer C"]}])
    geral = flow("geral", on=[{"message": []}])
    d = flow("d", on=[{"message": ["quer D"]}])
    dono = flow("dono", steps=[{"id": "q", "collect": ["cpf"]}])
    agent, provider, _ = build([a, b, c, geral, d, dono], {"understand": [{}], "speak": [{"message": "CPF?"}] * 2})
    t1 = agent.turn(session_id="s1", start={"flow": "dono", "key": "k1"})
    t1.session.claims["c:s1:"] = {"at": T0}                 # c already ran once here
    agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["dono", "a", "d"]


def test_eligibility_judges_a_message_triggers_if_on_a_draft_run():
    """runtime.md §3.4 (draft run), flows.md §7.5 rows 1 and 3: the eligibility `if` sees `run.id` = "<flowId>#<triggerKey>",
    `stepId` None, status running, trigger {kind, key}, hop 0, empty asked/visits/outcomes, a dedupe key with an
    empty nonce even for `repeat: "always"`, and `input` None."""
    seen = []

    def gate(ctx):
        run = ctx.run
        seen.append((run.id, run.flow_id, run.anchor, run.dedupe_key, run.step_id, run.status, run.trigger,
                     run.input, run.hop, run.started_at, run.asked, run.visits, run.outcomes, ctx.input))
        return True
    f = flow("f", on=[{"message": ["quer um orçamento"], "repeat": "always", "if": gate}],
             steps=[{"id": "s", "say": "Ok"}])
    agent, _, _ = build([f], {}, idle="silent")
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert seen[0] == ("f#m1", "f", "s1", "f:s1:", None, "running", {"kind": "message", "key": "m1"}, None, 0,
                       T0, {}, {}, [], None)
    # §5 rule 2, flows.md §7.5 row 3: at start the same `if` is judged again on the real candidate run (its
    # claim carries the key); §3.6.2 rule 3: then once more as the premise, before the run first moves
    assert [entry[3] for entry in seen] == ["f:s1:", "f:s1:m1", "f:s1:m1"]
    assert [s.run_id for s in r.started] == ["f#m1"]


def test_only_the_first_phrased_message_trigger_decides_eligibility():
    """runtime.md §3.4 item 2, flows.md §4.1 ("flows whose first non-empty message trigger passes `if`"): a
    second phrased trigger whose `if` holds does not make the flow eligible when the first one fails."""
    f = flow("f", on=[{"message": ["quer A"], "if": {"known": ["plano"]}}, {"message": ["quer B"]}],
             steps=[{"id": "s", "say": "F"}])
    agent, provider, _ = build([f, SUPORTE], {"understand": [{}], "speak": [{"message": "Oi"}]})
    agent.turn(session_id="s1", message="oi", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["suporte"]


@pytest.mark.parametrize("claims, advance, eligible", [
    ({"held": {"vendas:s1:": T0}}, None, False),              # a "once" claim held in another session
    ({"active": ["vendas:s1"]}, None, True),                  # `active` refuses only the start, not eligibility
    (None, "59m", False),                                     # cooldown not yet passed
    (None, "61m", True),
])
def test_eligibility_reads_the_repeat_with_session_and_host_claims_without_writing(claims, advance, eligible):
    """runtime.md §3.4 item 2 ("its `repeat` allows a start under this turn's trigger key (§6.1, checked without
    writing)"), §6.4: host-held claims count; `claims.active` is a start check (§5 rule 5), not a repeat one."""
    v = flow("vendas", on=[{"message": ["quer comprar"], **({} if claims else {"repeat": {"cooldown": "1h"}})}],
             steps=[{"id": "s", "say": "Vendas!"}])
    agent, provider, clock = build([v, SUPORTE], {"understand": [{}], "speak": [{"message": "Oi"}]})
    session = None
    if advance:                      # the cooldown flow started at T0
        session = {"id": "s1", "v": 4, "version": 0, "data": {}, "runs": [], "claims": {"vendas:s1:": {"at": T0}},
                   "inputs": [], "metadata": {}}
        clock.advance(advance)
    before = dict(session["claims"]) if session else {}
    r = agent.turn(session_id="s1", session=session, message="oi", id="m1", claims=claims)
    assert section(understand_calls(provider)[0], "flows") == (["vendas", "suporte"] if eligible else ["suporte"])
    assert {k: v for k, v in r.session.claims.items() if k.startswith("vendas")} == before


@pytest.mark.parametrize("lead, eligible", [("lead-1", False), ("lead-2", True)])
def test_eligibility_checks_the_claim_under_the_flows_anchor(lead, eligible):
    """runtime.md §3.4 item 2 and the draft run (anchor), §6.1, §6.3: an anchored "once" flow is eligible per
    host anchor key, not per session."""
    v = flow("vendas", on=[{"message": ["quer comprar"]}], anchor="lead", steps=[{"id": "s", "say": "Vendas!"}])
    agent, provider, _ = build([v, SUPORTE], {"understand": [{}], "speak": [{"message": "Oi"}]})
    blob = {"id": "s1", "v": 4, "version": 0, "data": {}, "runs": [], "claims": {"vendas:lead-1:": {"at": T0}},
            "inputs": [], "metadata": {}}
    agent.turn(session_id="s1", session=blob, message="oi", id="m1", anchors={"lead": {"key": lead}})
    assert section(understand_calls(provider)[0], "flows") == (["vendas", "suporte"] if eligible else ["suporte"])


def test_fields_are_the_floor_flows_then_each_eligible_flows_first_occurrence_first():
    """runtime.md §3.4 item 7, model-calls.md §3.2, flows.md §2.3: a flow's field list is its own `collect`, then
    each talk step's `collect`; the floor flow's come first, then the eligible flows' in agent order, each slug
    once. Known fields, `extract: "asked"` fields (booleans by default) and fields of flows that are not eligible
    (a false `if`, a mention flow) are never offered; an `"anywhere"` boolean is."""
    outro = flow("outro", on=[{"message": ["quer outro"], "if": {"known": ["plano"]}}],
                 steps=[{"id": "q", "collect": ["pedido"]}])
    m = flow("m", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "q", "collect": ["pedido"]}])
    a = flow("a", on=[{"message": ["quer A"]}], collect=["email", "aceita"],
             steps=[{"id": "s", "say": "Oi"}, {"id": "q", "collect": ["cidade", "nome"]},
                    {"id": "r", "prompt": "Confirme.", "collect": ["aceita_livre", "cpf"]}])
    dono = flow("dono", collect=["plano"], steps=[{"id": "q1", "collect": ["nome", "cpf"]},
                                                  {"id": "d", "do": "anotar"},
                                                  {"id": "q2", "collect": ["x", "plano"]}])
    anotar, _ = noop()
    agent, provider, _ = build([outro, m, a, dono], {"understand": [{}], "speak": [{"message": "Nome?"}] * 2},
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "dono", "key": "k1"})
    t1.session.data["x"] = "conhecido"
    agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert section(understand_calls(provider)[0], "fields") == [
        "plano", "nome", "email", "cidade", "aceita_livre"]


@pytest.mark.parametrize("value", [0, False, "0", []])
def test_a_known_value_that_is_falsy_is_still_known_and_never_offered(value):
    """runtime.md §0 (known), §3.4 item 7, flows.md §2.2: any value but absent, None and "" is known."""
    f = flow("f", on=[{"message": ["quer A"]}], steps=[{"id": "q", "collect": ["x", "y"]}])
    agent, provider, _ = build([f, SUPORTE], {"understand": [{}], "speak": [{"message": "Oi"}]})
    blob = {"id": "s1", "v": 4, "version": 0, "data": {"x": value, "y": ""}, "runs": [], "claims": {},
            "inputs": [], "metadata": {}}
    agent.turn(session_id="s1", session=blob, message="oi", id="m1")
    assert section(understand_calls(provider)[0], "fields") == ["y", "pedido"]


def test_a_suspended_runs_flow_gives_no_fields_unless_it_is_eligible():
    """runtime.md §3.4 item 7, flows.md §2.3: only the floor flow's and eligible flows' fields are offered; a
    suspended "once" run's unknown field is not (it is neither), and a value the model adds on its own is
    dropped with `not-asked` (model-calls.md §3.5, runtime.md §3.5.1 rule 2a)."""
    a = flow("a", on=[{"message": ["quer A"]}], steps=[{"id": "q", "collect": ["email"]}])
    b = flow("b", on=[{"message": ["quer B"]}], steps=[{"id": "q", "collect": ["nome"]}])
    agent, provider, clock = build([a, b], {
        "understand": [{"flows": {"a": 90}}, {"flows": {"b": 90}}, {"fields": {"email": "a@b.c"}}],
        "speak": [{"message": "E-mail?"}, {"message": "Nome?"}, {"message": "Nome, por favor?"}]})
    r = agent.turn(session_id="s1", message="quero A", id="m1")
    clock.advance("1s")
    r = agent.turn(session_id="s1", session=r.session, message="quero B", id="m2")
    r = agent.turn(session_id="s1", session=r.session, message="meu e-mail é a@b.c", id="m3")
    call = understand_calls(provider)[2]
    assert section(call, "fields") == ["nome"] and section(call, "flows") == ["b"]
    assert r.session.data == {}
    assert [(o.code, o.detail) for o in r.outcomes if o.code] == [("not-asked", "email")]


def test_a_floor_run_from_ingest_is_the_floor_only_when_nobody_asks():
    """runtime.md §3.4 item 1: "the asking run; if none, the run marked as the turn's floor run in Ingest". With
    both, the asker's flow leads the candidates and gives the fields, and no branch is sent (item 6)."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "q"}, {"id": "q", "collect": ["email"]}])
    dono = flow("dono", steps=[{"id": "q", "collect": ["nome"],
                                "branches": [{"when": "a pessoa pede um humano", "then": "q"}]}])
    outro = flow("outro", on=[{"message": ["quer outro"]}])
    agent, provider, _ = build([espera, dono, outro], {"understand": [{}], "speak": [{"message": "Nome?"}] * 2})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "dono", "key": "k2"})
    assert status(t2) == [("espera#k1", "waiting"), ("dono#k2", "asking")]
    agent.turn(session_id="s1", session=t2.session, message="voltei", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "flows") == ["dono", "outro"] and section(call, "fields") == ["nome"]
    assert section(call, "branches") is None


@pytest.mark.parametrize("catch_all, others, fields", [
    # first step asks nome itself, no question: free; nothing else judged: no call at all
    ({"steps": [{"id": "q", "collect": ["nome"]}]}, [], None),
    # a field of a later step is not free: all the catch-all's fields go to the call
    ({"steps": [{"id": "q", "collect": ["nome"]}, {"id": "c", "collect": ["cidade"]}]}, [], ["nome", "cidade"]),
    # a fixed question on the first step: its fields are not free
    ({"steps": [{"id": "q", "collect": ["nome"], "question": "Seu nome?"}]}, [], ["nome"]),
    # a first step that is not a talk step frees nothing
    ({"steps": [{"id": "s", "say": "Oi!"}, {"id": "q", "collect": ["nome"]}]}, [], ["nome"]),
    # the flow-level collect is harvestable but not free
    ({"collect": ["email"], "steps": [{"id": "q", "collect": ["nome"]}]}, [], ["email", "nome"]),
    # something else judged (a mention): the free fields ride on the call too
    ({"steps": [{"id": "q", "collect": ["nome"]}]},
     [flow("m", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "s", "say": "Ok"}])], ["nome"]),
    # something else judged (an eligible flow): its fields first, then the catch-all's
    ({"steps": [{"id": "q", "collect": ["nome"]}]},
     [flow("v", on=[{"message": ["quer comprar"]}], steps=[{"id": "q", "collect": ["pedido"]}])],
     ["pedido", "nome"]),
])
def test_catch_all_fields_are_offered_only_when_something_else_is_judged_or_one_is_not_free(
        catch_all, others, fields):
    """runtime.md §3.4 item 8, model-calls.md §3.2 (catch-all fields), §17 row 2: with no floor run the first
    qualifying catch-all's free fields (its first step's `collect`, a talk step without `question`) ride on its
    own speak call; they are added, with all its other harvestable fields, when anything else is judged or one
    of its fields is not free."""
    geral = {"id": "geral", "name": "Geral", "on": [{"message": []}], **catch_all}
    agent, provider, _ = build([*others, geral], {"understand": [{}], "speak": [{"message": "Oi!"}]})
    agent.turn(session_id="s1", message="oi", id="m1")
    calls = understand_calls(provider)
    if fields is None:
        assert calls == []
    else:
        assert len(calls) == 1 and section(calls[0], "fields") == fields


def test_only_the_first_qualifying_catch_all_gives_fields():
    """runtime.md §3.4 item 8: "take the first qualifying catch-all"; a later catch-all's fields are never
    offered, and a catch-all whose `if` is false does not count as the first."""
    fechado = {"id": "fechado", "name": "Fechado", "on": [{"message": [], "if": {"known": ["plano"]}}],
               "steps": [{"id": "s", "say": "Fechado."}, {"id": "q", "collect": ["pedido"]}]}
    a = {"id": "a", "name": "A", "on": [{"message": []}], "steps": [{"id": "s", "say": "A"},
                                                                  {"id": "q", "collect": ["nome"]}]}
    b = {"id": "b", "name": "B", "on": [{"message": []}], "steps": [{"id": "s", "say": "B"},
                                                                  {"id": "q", "collect": ["cidade"]}]}
    agent, provider, _ = build([fechado, a, b], {"understand": [{}], "speak": [{"message": "Nome?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert section(understand_calls(provider)[0], "fields") == ["nome"]
    assert [s.flow_id for s in r.started] == ["a"]


def test_with_a_floor_run_no_catch_all_fields_are_offered():
    """runtime.md §3.4 item 8, flows.md §2.3: the catch-all's fields are added "only when there is no floor run"."""
    geral = {"id": "geral", "name": "Geral", "on": [{"message": []}],
             "steps": [{"id": "s", "say": "Oi"}, {"id": "q", "collect": ["cidade"]}]}
    dono = flow("dono", steps=[{"id": "q", "collect": ["nome"]}])
    agent, provider, _ = build([geral, dono], {"understand": [{}], "speak": [{"message": "Nome?"}] * 2})
    t1 = agent.turn(session_id="s1", start={"flow": "dono", "key": "k1"})
    agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "fields") == ["nome"] and section(call, "flows") == ["dono"]


# §3.2 I-R / I-F and §3.4 item 6: a run that took the floor in Ingest ----------------------------------------------


def test_a_run_that_took_the_floor_in_ingest_blocks_routing_catch_all_and_the_askers_branches():
    """runtime.md §3.2 I-F, §3.4 item 6, §3.5 rules 3, 6, 8, §4.4 rule 4: a reply wait resolved in Ingest holds
    the floor: no route even at 95, no catch-all, no `when` branch sent for the asker and none of its branches
    fired (not even an `if` that holds); a code-only mention detector still starts (rule 4)."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "d"}, {"id": "x", "say": "Sem resposta."},
                                   {"id": "d", "do": "anotar"}])
    dono = flow("dono", steps=[{"id": "q", "collect": ["cpf"],
                                "branches": [{"if": {"known": ["plano"]}, "then": "fim"},
                                             {"when": "a pessoa desiste", "then": "fim"}]},
                               {"id": "fim", "say": "Encerrado."}])
    vendas = flow("vendas", on=[{"message": ["quer comprar"]}], steps=[{"id": "s", "say": "Vendas!"}])
    geral = flow("geral", on=[{"message": []}], steps=[{"id": "s", "say": "Geral!"}])
    detector = flow("det", on=[{"mention": [], "repeat": "always"}], steps=[{"id": "d", "do": "anotar"}])
    anotar, log = noop()
    agent, provider, _ = build([espera, dono, vendas, geral, detector], {
        "understand": [{"flows": {"dono": 0, "vendas": 95}, "branches": {"q1": True}}],
        "speak": [{"message": "CPF?"}, {"message": "E o CPF?"}]}, actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "dono", "key": "k2"})
    t2.session.data["plano"] = "pro"
    t3 = agent.turn(session_id="s1", session=t2.session, message="quero comprar", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "branches") is None and section(call, "flows") == ["dono", "vendas"]
    assert [s.run_id for s in t3.started] == ["det#m1"]
    assert "branch" not in [o.code for o in t3.outcomes]
    assert [(o.run_id, o.code) for o in t3.outcomes if o.kind == "wait"] == [("espera#k1", "replied")]
    assert log == ["espera#k1:d:1", "det#m1:d:1"]
    assert [m.key for m in t3.messages] == ["dono#k2:q:1:re:m1"]          # the asker still answers, as an asker


def test_mentions_are_asked_even_while_a_run_holds_the_floor_from_ingest():
    """runtime.md §3.4 item 5, flows.md §4.2 ("reaches the understand call on every message turn while `repeat`
    allows it"): routing is skipped (I-F) but mentions are still judged and started (§3.5 rule 4)."""
    anotar, log = noop()
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "d"}, {"id": "x", "say": "Sem resposta."},
                                   {"id": "d", "do": "anotar"}])
    conc = flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "d", "do": "anotar"}])
    agent, provider, _ = build([espera, conc], {"understand": [{"mentions": {"conc": True}}]}, idle="silent",
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="a ACME é melhor", id="m1")
    assert section(understand_calls(provider)[0], "mentions") == ["conc"]
    assert [s.run_id for s in t2.started] == ["conc#m1"] and log == ["espera#k1:d:1", "conc#m1:d:1"]


def test_a_run_that_took_the_floor_in_ingest_and_entered_a_talk_step_sends_no_branches():
    """runtime.md §3.4 item 6: not the branches "of a run that took the floor in Ingest and has just entered a
    talk step (it is not asking yet)"; its fields are offered, as the floor flow's (item 7)."""
    espera = flow("espera", steps=[
        {"id": "w", "wait": "1h", "else": "q"}, {"id": "x", "say": "Sem resposta."},
        {"id": "q", "collect": ["nome"], "branches": [{"when": "a pessoa pede um humano", "then": "end"}]}])
    agent, provider, _ = build([espera], {"understand": [{"branches": {"q1": True}}],
                                          "speak": [{"message": "Seu nome?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="voltei", id="m2")
    call = understand_calls(provider)[0]
    assert section(call, "branches") is None and section(call, "fields") == ["nome"]
    assert section(call, "flows") == ["espera"]
    assert [m.key for m in t2.messages] == ["espera#k1:q:1"] and "branch" not in [o.code for o in t2.outcomes]


def test_a_child_chained_from_a_reply_wait_in_ingest_takes_the_floor_in_ingest():
    """runtime.md §3.2 I-F ("A child chained while Ingest is running ... takes the floor in Ingest when it
    inherits the floor"), §3.6.4 chaining rule 6: the child is the floor run: its flow leads the candidates and
    gives the fields, and no routing happens even at 95."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": {"flow": "filho"}},
                                   {"id": "x", "say": "Sem resposta."}])
    filho = flow("filho", steps=[{"id": "q", "collect": ["email"]}])
    agent, provider, _ = build([espera, filho, VENDAS], {
        "understand": [{"flows": {"filho": 0, "vendas": 95}}], "speak": [{"message": "Seu e-mail?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero comprar", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "flows") == ["filho", "vendas"] and section(call, "fields") == ["email"]
    assert "## Current flow" in call.prompt
    assert [s.run_id for s in t2.started] == ["filho#espera#k1:w:1"]
    assert [m.key for m in t2.messages] == ["filho#espera#k1:w:1:q:1"]


def test_a_reply_wait_that_ends_in_ingest_does_not_hold_the_floor_so_the_message_is_routed():
    """runtime.md §3.2 I-R rule 4 and I-F ("if it is still live"): the resolved run ended, so no run took the
    floor in Ingest; there is no floor run (§3.4 item 1) and routing proceeds as usual."""
    espera = flow("espera", steps=[{"id": "w", "wait": "1h", "else": "end"}, {"id": "x", "say": "Sem resposta."}])
    agent, provider, _ = build([espera, VENDAS, SUPORTE], {
        "understand": [{"flows": {"vendas": 95, "suporte": 0}}], "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero comprar", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "flows") == ["vendas", "suporte"] and "## Current flow" not in call.prompt
    assert [(e.id, e.reason) for e in t2.ended] == [("espera#k1", "end")]
    assert [s.run_id for s in t2.started] == ["vendas#m1"] and [m.key for m in t2.messages] == ["vendas#m1:q:1"]


def test_only_the_first_resolved_reply_wait_takes_the_floor_so_a_later_one_that_stays_waits_behind_it():
    """runtime.md §3.2 I-R rule 4 and I-F, §4.7 rule 3: two reply waits resolve in Ingest; the first still-live
    one takes the floor and asks; the second, which reaches `onEnd: "stay"` on the same message, is not the
    turn's floor run, so it is suspended behind the asker (staying, on its last talk step, a new visit)."""
    a = flow("a", steps=[{"id": "w", "wait": "1h", "else": "q"}, {"id": "q", "collect": ["cpf"]}])
    b = flow("b", onEnd="stay", steps=[{"id": "w", "wait": "1h", "else": "d"}, {"id": "p", "prompt": "B."},
                                       {"id": "d", "do": "anotar", "then": "end"}])
    anotar, log = noop()
    agent, provider, _ = build([a, b], {"speak": [{"message": "A responde."}]}, idle="silent",
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "a", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "b", "key": "k2"})
    t3 = agent.turn(session_id="s1", session=t2.session, message="oi", id="m1")
    assert [(o.run_id, o.code) for o in t3.outcomes if o.kind == "wait"] == [("a#k1", "replied"),
                                                                             ("b#k2", "replied")]
    assert understand_calls(provider) == [] and [m.key for m in t3.messages] == ["a#k1:q:1"]
    assert log == ["b#k2:d:1"]
    b_run = t3.session.runs[1]
    assert status(t3) == [("a#k1", "asking"), ("b#k2", "suspended")]
    assert (b_run.step_id, b_run.staying, b_run.visits.get("p")) == ("p", True, 1)


# §3.5 rule 3: thresholds and ties ---------------------------------------------------------------------------------


def asker_then(scores):
    """vendas asks (cpf); the next message is judged with `scores`; returns that turn's result."""
    agent, _, _ = build([VENDAS, SUPORTE, TROCA], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": scores}],
        "speak": [{"message": "CPF?"}, {"message": "Próxima resposta."}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    return agent.turn(session_id="s1", session=t1.session, message="...", id="m2")


@pytest.mark.parametrize("scores, routed", [
    ({"vendas": 25, "suporte": 40}, "suporte"),           # exactly 40 and exactly +15
    ({"vendas": 26, "suporte": 40}, None),                # 40 but only +14
    ({"vendas": 0, "suporte": 39}, None),                 # +39 but under 40
    ({"suporte": 40}, "suporte"),                         # the asker's missing score counts as 0
    ({"vendas": 50, "suporte": 65}, "suporte"),
    ({"vendas": 50, "suporte": 64.9}, None),              # scores are not rounded
    ({"vendas": 100, "suporte": 100}, None),
    ({"vendas": 10, "suporte": 70, "troca": 70}, "suporte"),   # a tie among the others: earlier in agent order
    ({"vendas": 10, "suporte": 60, "troca": 70}, "troca"),
])
def test_with_an_asker_another_flow_takes_over_only_at_40_and_15_above_the_askers_score(scores, routed):
    """runtime.md §3.5 rule 3, §4.4 rule 3, flows.md §4.1: with an asker, the best other eligible flow (ties:
    earlier in agent order; missing score: 0) is routed to only when it scores >= 40 and >= asker + 15."""
    r = asker_then(scores)
    assert [s.flow_id for s in r.started] == ([routed] if routed else [])
    if routed:
        assert [m.key for m in r.messages] == [f"{routed}#m2:q:1"]
        assert status(r) == [("vendas#m1", "suspended"), (f"{routed}#m2", "asking")]
    else:
        assert [m.key for m in r.messages] == ["vendas#m1:q:1:re:m2"] and status(r) == [("vendas#m1", "asking")]


def test_the_best_other_flow_is_compared_once_a_lower_one_passing_the_bar_does_not_stand_in():
    """runtime.md §3.5 rule 3: "take the best. Route to it only if ..." - the check is made on the best one
    alone (here the best is a flow whose start is then refused), never on a runner-up."""
    agent, _, _ = build([VENDAS, SUPORTE, TROCA], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 10, "suporte": 60, "troca": 95}}],
        "speak": [{"message": "CPF?"}, {"message": "CPF ainda?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="...", id="m2", claims={"active": ["troca:s1"]})
    assert [(s.flow_id, s.code) for s in t2.skipped] == [("troca", "already-running")]
    assert t2.started == [] and [m.key for m in t2.messages] == ["vendas#m1:q:1:re:m2"]


def test_with_an_asker_the_catch_all_never_starts_even_when_nothing_scores():
    """runtime.md §3.5 rule 3, §3.5.0 item 3: the catch-all starts only "with no asker"; with an asker and no
    flow over the bar nothing starts (no skip) and the asker answers."""
    geral = flow("geral", on=[{"message": [], "repeat": "always"}], steps=[{"id": "s", "say": "Geral!"}])
    agent, _, _ = build([VENDAS, geral], {"understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 0}}],
                                          "speak": [{"message": "CPF?"}, {"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m2")
    assert t2.started == [] and t2.skipped == [] and [m.key for m in t2.messages] == ["vendas#m1:q:1:re:m2"]


def test_without_an_asker_a_score_of_exactly_40_starts_and_ties_go_to_agent_order():
    """runtime.md §3.5 rule 3 (no asker): the best eligible flow at >= 40; on a tie the earlier flow."""
    agent, _, _ = build([VENDAS, SUPORTE, TROCA], {"understand": [{"flows": {"suporte": 40, "troca": 40}}],
                                                   "speak": [{"message": "Pedido?"}]})
    r = agent.turn(session_id="s1", message="...", id="m1")
    assert [s.flow_id for s in r.started] == ["suporte"]


def test_scores_for_flows_that_were_not_candidates_are_never_read():
    """model-calls.md §3.5 (last paragraph), runtime.md §3.5 rule 3: only eligible flows are routed to; a score
    the model gives a flow that is not eligible (its `if` is false) is ignored, and the catch-all starts."""
    fechado = flow("fechado", on=[{"message": ["quer fechado"], "if": {"known": ["plano"]}}],
                   steps=[{"id": "s", "say": "Fechado!"}])
    geral = flow("geral", on=[{"message": []}], steps=[{"id": "s", "say": "Geral!"}])
    agent, provider, _ = build([fechado, VENDAS, geral], {"understand": [{"flows": {"fechado": 100,
                                                                                    "vendas": 10}}]})
    r = agent.turn(session_id="s1", message="...", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["vendas"]
    assert [s.flow_id for s in r.started] == ["geral"] and [m.text for m in r.messages] == ["Geral!"]


def test_scores_and_mentions_under_aliases_are_mapped_back_before_routing():
    """model-calls.md §2.8, §3.5 ("Keys are mapped back from aliases"), runtime.md §3.5 rules 3-4: ids that are
    not valid property names travel as `f<n>` (one counter shared by all prefixes, kept real ids never minted);
    the reply under those aliases routes and starts the real flows."""
    anotar, log = noop()
    v = flow("vendas b2b", on=[{"message": ["quer comprar"]}], steps=[{"id": "q", "collect": ["cpf"]}])
    m = flow("conc:x", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "d", "do": "anotar"}])
    agent, provider, _ = build([v, SUPORTE, m], {"understand": [{"flows": {"f1": 90}, "mentions": {"f2": True}}],
                                                 "speak": [{"message": "CPF?"}]}, actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="quero comprar; a ACME é melhor", id="m1")
    call = understand_calls(provider)[0]
    assert section(call, "flows") == ["f1", "suporte"] and section(call, "mentions") == ["f2"]
    assert [s.run_id for s in r.started] == ["conc:x#m1", "vendas b2b#m1"] and log == ["conc:x#m1:d:1"]


# §3.5 rule 5, §4.5: routing to a flow with a suspended run --------------------------------------------------------


def a_and_b(a_trigger, a_steps=None, script_understand=(), speak=()):
    """a (with `a_trigger`) asks x, then b is routed to and asks y: a is suspended behind b."""
    a = flow("a", on=[a_trigger], steps=a_steps or [{"id": "qa", "collect": ["x"]},
                                                   {"id": "fim", "say": "A pronto: {{data.x}}."}])
    b = flow("b", on=[{"message": ["quer B"], "repeat": "always"}], steps=[{"id": "qb", "collect": ["y"]}])
    agent, provider, clock = build([a, b], {
        "understand": [{"flows": {"a": 90, "b": 0}}, {"flows": {"a": 0, "b": 90}}, *script_understand],
        "speak": [{"message": "x?"}, {"message": "y?"}, *speak]})
    t1 = agent.turn(session_id="s1", message="quero A", id="m1")
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero B", id="m2")
    assert status(t2) == [("a#m1", "suspended"), ("b#m2", "asking")]
    clock.advance("1m")
    return agent, provider, clock, t2


def test_routing_to_an_always_flow_resumes_its_suspended_run_as_a_fresh_arrival_already_known():
    """runtime.md §3.5 rule 5, §4.5, flows.md §4.1 Note: the routed "always" flow has a suspended run: it becomes
    `running` (no new run, no claim, no new visit) and re-executes its step as a fresh arrival, so a collect step
    whose field the same message gave writes `already-known` (not `ok`) under the old key; it is the floor run."""
    agent, provider, clock, t2 = a_and_b({"message": ["quer A"], "repeat": "always"},
                                         script_understand=[{"flows": {"a": 90, "b": 0}, "fields": {"x": "1"}}])
    claims = dict(t2.session.claims)
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltando ao A: x é 1", id="m3")
    assert t3.started == [] and t3.skipped == [] and t3.session.claims == claims
    assert [(o.run_id, o.kind, o.status, o.code, o.key, o.next) for o in t3.outcomes][:2] == [
        ("a#m1", "collect", "skipped", "already-known", "a#m1:qa:1", None),
        ("a#m1", "say", "ok", None, "a#m1:fim:1", None)]
    assert [m.text for m in t3.messages] == ["A pronto: 1."]
    assert [(e.id, e.reason, e.visits) for e in t3.ended] == [("a#m1", "end", {"qa": 1, "fim": 1})]
    assert "another-reply" in [o.code for o in t3.outcomes if o.run_id == "b#m2"]
    assert status(t3) == [("b#m2", "asking")]


def test_a_routed_suspended_run_whose_field_is_still_missing_asks_again_at_the_same_visit():
    """runtime.md §3.5 rule 5, §3.5 "The displaced asker", §4.4 rule 2: the resumed run is earlier in
    `session.runs`; its talk step suspends the asker and speaks under the same key (no new visit)."""
    agent, provider, clock, t2 = a_and_b({"message": ["quer A"], "repeat": "always"},
                                         script_understand=[{"flows": {"a": 90, "b": 0}}],
                                         speak=[{"message": "Voltando: x?"}])
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltando ao A", id="m3")
    assert t3.started == [] and [m.key for m in t3.messages] == ["a#m1:qa:1:re:m3"]
    a, b = t3.session.runs
    assert (a.id, a.status, a.visits, a.asked) == ("a#m1", "asking", {"qa": 1}, {"x": 2})
    assert (b.id, b.status, b.suspended_at) == ("b#m2", "suspended", "2026-09-20T10:02:00.000Z")
    assert [o.run_id for o in t3.outcomes if o.run_id == "b#m2"] == []     # suspended before it moved


def test_routing_to_a_cooldown_flow_past_its_cooldown_resumes_its_suspended_run():
    """runtime.md §4.5, flows.md §4.1 Note: a cooldown flow past its cooldown is eligible again; routed to, its
    suspended run resumes (not a new start, so no `cooldown` skip and no new claim)."""
    agent, provider, clock, t2 = a_and_b({"message": ["quer A"], "repeat": {"cooldown": "1h"}},
                                         script_understand=[{"flows": {"a": 90, "b": 0}}],
                                         speak=[{"message": "Voltando: x?"}])
    clock.advance("2h")
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltando ao A", id="m3")
    assert section(understand_calls(provider)[2], "flows") == ["b", "a"]
    assert t3.started == [] and t3.skipped == [] and t3.session.claims["a:s1:"] == {"at": T0}
    assert [m.key for m in t3.messages] == ["a#m1:qa:1:re:m3"] and status(t3) == [("a#m1", "asking"),
                                                                            ("b#m2", "suspended")]


def test_a_once_flow_with_a_suspended_run_is_not_a_candidate_and_comes_back_only_through_the_stack():
    """flows.md §4.1 Note, runtime.md §4.5: a suspended run holds its "once" claim, so its flow is not eligible:
    not scored, not routed to (even a score of 100 for it is never read)."""
    agent, provider, clock, t2 = a_and_b({"message": ["quer A"]},
                                         script_understand=[{"flows": {"a": 100, "b": 0}}],
                                         speak=[{"message": "y, por favor?"}])
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltando ao A", id="m3")
    assert section(understand_calls(provider)[2], "flows") == ["b"]
    assert [m.key for m in t3.messages] == ["b#m2:qb:1:re:m3"] and status(t3) == [("a#m1", "suspended"),
                                                                            ("b#m2", "asking")]


# §3.5 rules 6-8, §3.5.2: judged fields, then the branches of the asker that kept the floor ------------------------


MENU = flow("menu", on=[{"message": ["quer o menu"]}], steps=[
    {"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["plano"]}, "then": "pro"},
                                                 {"when": "a pessoa pede um humano", "then": "humano"}]},
    {"id": "pro", "say": "Plano pro!", "then": "end"}, {"id": "humano", "say": "Chamando um humano."}])


LOG = flow("log", on=[{"message": ["reclama"]}], steps=[{"id": "d", "do": "anotar"}])


def menu_asking(second_reply, speak=(), claims=None, flows=(MENU, SUPORTE)):
    anotar, log = noop()
    agent, provider, _ = build(list(flows), {"understand": [{"flows": {"menu": 90}}, second_reply],
                                             "speak": [{"message": "CPF?"}, *speak]},
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="quero o menu", id="m1")
    t1.session.data["plano"] = "pro"                   # the `if` branch now holds
    t2 = agent.turn(session_id="s1", session=t1.session, message="...", id="m2", claims=claims)
    return t2, provider, log


def test_an_askers_if_branch_fires_when_it_keeps_the_floor():
    """runtime.md §3.5 rules 6 and 8, §3.5.2: no route: the asker is the floor run; its first holding branch
    (an `if`, judged by code) fires with `<kind> / ok / branch`, key = step key, next = the branch target."""
    t2, _, _ = menu_asking({"flows": {"menu": 90, "suporte": 10}})
    assert [(o.kind, o.status, o.code, o.key, o.next) for o in t2.outcomes][0] == (
        "collect", "ok", "branch", "menu#m1:q:1", "pro")
    assert [m.text for m in t2.messages] == ["Plano pro!"]


@pytest.mark.parametrize("branches", [{}, {"q1": True}])
def test_an_asker_routed_away_from_never_fires_its_branches(branches):
    """runtime.md §3.5 rule 8, flows.md §6 rule 1: "A message routed to another flow ... never fires the asker's
    branches" - neither the `if` that holds nor a `when` the model answered true; the routed run's talk step
    suspends the asker, still on its step."""
    t2, provider, _ = menu_asking({"flows": {"menu": 10, "suporte": 90}, "branches": branches},
                                  speak=[{"message": "Pedido?"}])
    assert section(understand_calls(provider)[1], "branches") == ["q1"]        # asked, but not applied
    assert "branch" not in [o.code for o in t2.outcomes]
    assert [m.key for m in t2.messages] == ["suporte#m2:q:1"]
    menu = t2.session.runs[0]
    assert (menu.status, menu.step_id, menu.visits) == ("suspended", "q", {"q": 1})


def test_an_asker_routed_away_to_a_do_only_flow_answers_without_firing_its_branches():
    """runtime.md §3.5 "The displaced asker" and rule 8: the routed run has no talk step, so the asker keeps
    the floor in Run and answers as a resuming asker, but its branches are not fired (it was not the floor run)."""
    t2, _, log = menu_asking({"flows": {"menu": 10, "log": 90}, "branches": {"q1": True}},
                             speak=[{"message": "Anotado. CPF?"}], flows=(MENU, LOG))
    assert log == ["log#m2:d:1"] and "branch" not in [o.code for o in t2.outcomes]
    assert [m.key for m in t2.messages] == ["menu#m1:q:1:re:m2"] and status(t2) == [("menu#m1", "asking")]


def test_a_refused_route_leaves_the_asker_as_floor_run_so_its_branch_fires():
    """runtime.md §3.5 rule 6 (inferred for a refused start) and rule 8, model-calls.md §3.6 items 3 and 5: the
    routed start is refused, so the asker keeps the floor and its `when` branch answered true fires."""
    t2, _, _ = menu_asking({"flows": {"menu": 10, "suporte": 90}, "branches": {"q1": True}},
                           claims={"active": ["suporte:s1"]})
    assert [(s.flow_id, s.code) for s in t2.skipped] == [("suporte", "already-running")]
    # the `if` branch (index 0) holds first: list order wins over the `when` answer
    assert [(o.code, o.next) for o in t2.outcomes][0] == ("branch", "pro")


def test_a_when_branch_answered_true_fires_when_the_asker_keeps_the_floor_and_list_order_decides():
    """runtime.md §3.5.2: branches are checked in list order and the first that hits fires; a `when` hits on
    the judgement's True for "<runId>/<stepId>/<index>" (index in the whole `branches` list)."""
    anotar, _ = noop()
    agent, provider, _ = build([MENU, SUPORTE], {
        "understand": [{"flows": {"menu": 90}}, {"flows": {"menu": 90}, "branches": {"q1": True}}],
        "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero o menu", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero um humano", id="m2")
    assert "q1: a pessoa pede um humano" in understand_calls(provider)[1].prompt
    assert [(o.code, o.next, o.key) for o in t2.outcomes][0] == ("branch", "humano", "menu#m1:q:1")
    assert [m.text for m in t2.messages] == ["Chamando um humano."]


def test_branches_are_not_fired_when_a_suspended_run_is_routed_back_to():
    """runtime.md §3.5 rules 5, 6 and 8: a route that resumes a suspended run is a route: the asker is not the
    floor run and its `if` branch that holds is not fired."""
    b = flow("b", on=[{"message": ["quer B"], "repeat": "always"}],
             steps=[{"id": "qb", "collect": ["y"], "branches": [{"if": {"known": ["plano"]}, "then": "fim"}]},
                    {"id": "fim", "say": "B fim."}])
    a = flow("a", on=[{"message": ["quer A"], "repeat": "always"}], steps=[{"id": "qa", "collect": ["x"]}])
    agent, _, clock = build([a, b], {
        "understand": [{"flows": {"a": 90}}, {"flows": {"a": 0, "b": 90}}, {"flows": {"a": 90, "b": 0}}],
        "speak": [{"message": "x?"}, {"message": "y?"}, {"message": "x, de novo?"}]})
    t1 = agent.turn(session_id="s1", message="quero A", id="m1")
    clock.advance("1s")
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero B", id="m2")
    t2.session.data["plano"] = "pro"
    clock.advance("1s")
    t3 = agent.turn(session_id="s1", session=t2.session, message="volta pro A", id="m3")
    assert "branch" not in [o.code for o in t3.outcomes]
    assert [m.key for m in t3.messages] == ["a#m1:qa:1:re:m3"] and status(t3) == [("a#m1", "asking"),
                                                                            ("b#m2", "suspended")]


def test_a_routed_runs_clear_on_start_happens_before_the_judged_values_land():
    """runtime.md §3.5 closing note ("a routed run's `clearOnStart` ... happens before the judged values land"),
    model-calls.md §3.5 (a `fields` key the call was not asked for is dropped): the stale value is cleared by the
    start; "cidade" was known when the call was made, so it was not asked and the value the model adds anyway is
    dropped (`not-asked`): the step asks for it."""
    f = flow("pedido", on=[{"message": ["quer fazer um pedido"]}], clearOnStart=["cidade", "pedido"],
             steps=[{"id": "q", "collect": ["cidade", "pedido"]}])
    agent, provider, _ = build([f], {"understand": [{"flows": {"pedido": 90}, "fields": {"cidade": "Recife"}}],
                                     "speak": [{"message": "Qual o pedido?"}]})
    blob = {"id": "s1", "v": 4, "version": 0, "data": {"cidade": "Natal", "pedido": "antigo"}, "runs": [],
            "claims": {}, "inputs": [], "metadata": {}}
    r = agent.turn(session_id="s1", session=blob, message="quero pedir em Recife", id="m1")
    assert section(understand_calls(provider)[0], "fields") is None          # both known: none offered
    assert r.session.data == {} and r.messages[0].key == "pedido#m1:q:1"
    assert [(o.code, o.detail) for o in r.outcomes if o.code == "not-asked"] == [("not-asked", "cidade")]


def test_judged_fields_are_written_before_the_askers_branches_are_judged():
    """runtime.md §3.5 rules 7-8, flows.md §6 rule 3: an `if` branch sees the value the same message gave, and
    a branch target whose fields the message completed is skipped `already-known`."""
    f = flow("f", on=[{"message": []}], steps=[
        {"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["plano"]}, "then": "r"}]},
        {"id": "x", "say": "Nunca."}, {"id": "r", "collect": ["cidade"]}, {"id": "fim", "say": "Plano {{data.plano}} em {{data.cidade}}."}])
    f["collect"] = ["plano"]
    agent, _, _ = build([f], {"understand": [{"fields": {"plano": "pro", "cidade": "Recife"}}],
                              "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="plano pro, Recife", id="m2")
    assert [(o.kind, o.status, o.code, o.next) for o in t2.outcomes][:2] == [
        ("collect", "ok", "branch", "r"), ("collect", "skipped", "already-known", None)]
    assert [m.text for m in t2.messages] == ["Plano pro em Recife."]


def test_a_malformed_reply_still_lets_the_askers_if_branch_fire():
    """model-calls.md §3.5 item 2 ("`if` branches still happen"), runtime.md §3.5 rule 8."""
    agent, _, _ = build([MENU, SUPORTE], {"understand": [{"flows": {"menu": 90}}, "{broken"],
                                          "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero o menu", id="m1")
    t1.session.data["plano"] = "pro"
    t2 = agent.turn(session_id="s1", session=t1.session, message="...", id="m2")
    assert t2.llm_calls == 1 and [(o.code, o.next) for o in t2.outcomes][0] == ("branch", "pro")


# §3.5 rule 4: mention runs and their payloads ---------------------------------------------------------------------


def mention_flow(extract=True, **trigger):
    on = {"mention": ["cita um concorrente"], **trigger}
    if extract:
        on["extract"] = {"marca": {"type": "string"}, "preco": {"type": "number", "optional": True}}
    return flow("conc", on=[on], steps=[{"id": "d", "do": "anotar"}])


def mention_turn(reply, **trigger_keys):
    seen = []
    anotar = Action(parameters={}, run=lambda params, ctx: seen.append(ctx.input))
    agent, provider, _ = build([mention_flow(**trigger_keys)], {"understand": [reply],
                                                                "speak": [{"message": "Oi!"}]},
                               actions={"anotar": anotar})
    return agent.turn(session_id="s1", message="a ACME é mais barata", id="m1"), provider, seen


@pytest.mark.parametrize("extract_reply, payload", [
    ({"conc": {"marca": "ACME", "preco": None}}, {"marca": "ACME"}),
    ({"conc": {"marca": "", "preco": None}}, {}),           # every entry dropped: still the dict {}
    ({"conc": {"marca": 12}}, {"marca": 12}),                # not coerced to the extract definition
    ({}, None),                                               # the model returned no dict for the flow
    ({"conc": "ACME"}, None),                                 # not a dict
])
def test_a_mention_judged_true_starts_with_the_extracted_dict_even_when_empty(extract_reply, payload):
    """runtime.md §3.5 rule 4, model-calls.md §3.5-§3.6 item 2, flows.md §4.2: the payload is the dict returned
    under `extract` minus `None` and `""` entries, `{}` when nothing is left, and absent only when the model
    returned no dict for that flow; the run's `input` and `trigger.payload` carry it."""
    r, _, seen = mention_turn({"mentions": {"conc": True}, "extract": extract_reply})
    assert [s.run_id for s in r.started] == ["conc#m1"] and seen == [payload]
    ended = r.ended[0]
    assert ended.input == payload
    assert ended.trigger == ({"kind": "mention", "key": "m1"} if payload is None
                             else {"kind": "mention", "key": "m1", "payload": payload})


def test_a_mention_without_extract_starts_with_no_payload_even_if_the_model_sent_values():
    """runtime.md §3.5 rule 4: "The payload is absent only when the trigger has no `extract` or ..."."""
    r, provider, seen = mention_turn({"mentions": {"conc": True}, "extract": {"conc": {"marca": "ACME"}}},
                                     extract=False)
    assert section(understand_calls(provider)[0], "extract") is None
    assert seen == [None] and r.ended[0].trigger == {"kind": "mention", "key": "m1"}


@pytest.mark.parametrize("answer", [False, None])
def test_a_phrased_mention_not_judged_true_does_nothing(answer):
    """runtime.md §3.5 rule 4: "non-empty list not judged True: nothing" - no run, no skip, no claim."""
    r, _, seen = mention_turn({"mentions": {"conc": answer}, "extract": {"conc": {"marca": "ACME"}}})
    assert r.started == [] and r.skipped == [] and seen == [] and r.session.claims == {}


def is_acme(ctx):
    return isinstance(ctx.input, dict) and ctx.input.get("marca") == "ACME"


def test_a_mention_trigger_if_is_judged_at_start_with_the_extracted_values():
    """runtime.md §3.4 item 5 and §3.5 rule 4, flows.md §4.2, §7.5: the mention's `if` is not judged before the
    call (the flow is asked), but at start with `input` = the extracted values; false: no run, no skip, no claim."""
    r, provider, seen = mention_turn({"mentions": {"conc": True}, "extract": {"conc": {"marca": "Outra"}}},
                                     **{"if": is_acme})
    assert section(understand_calls(provider)[0], "mentions") == ["conc"]
    assert r.started == [] and r.skipped == [] and r.session.claims == {} and seen == []
    r, _, seen = mention_turn({"mentions": {"conc": True}, "extract": {"conc": {"marca": "ACME"}}},
                              **{"if": is_acme})
    assert [s.run_id for s in r.started] == ["conc#m1"] and seen == [{"marca": "ACME"}]


def test_mention_runs_start_before_the_routed_run_and_only_the_first_mention_trigger_counts():
    """runtime.md §3.5 rule 4 and the closing note (mention runs start before the routed run, so `started` lists
    them first), flows.md §4 ("mention: only the first trigger of that kind")."""
    m = flow("m", on=[{"mention": ["cita um concorrente"]}, {"mention": ["fala de preço"]}],
             steps=[{"id": "d", "do": "anotar"}])
    anotar, _ = noop()
    agent, provider, _ = build([VENDAS, m], {"understand": [{"flows": {"vendas": 90}, "mentions": {"m": True}}],
                                             "speak": [{"message": "CPF?"}]}, actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="quero comprar, a ACME é mais barata", id="m1")
    assert [s.run_id for s in r.started] == ["m#m1", "vendas#m1"]
    call = understand_calls(provider)[0]
    prompt = (call.system or "") + call.prompt          # "lean" keeps the mention catalog in the system part
    assert "cita um concorrente" in prompt and "fala de preço" not in prompt


@pytest.mark.parametrize("order", [("conc", "det"), ("det", "conc")])
def test_mention_runs_start_in_agent_order_whether_judged_or_code_only(order):
    """runtime.md §3.5 rule 4: "for every flow that has a `mention` trigger (its first one), in agent order"."""
    anotar, _ = noop()
    flows = {"conc": flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "d", "do": "anotar"}]),
             "det": flow("det", on=[{"mention": []}], steps=[{"id": "d", "do": "anotar"}])}
    agent, _, _ = build([flows[fid] for fid in order], {"understand": [{"mentions": {"conc": True}}],
                                                        "speak": [{"message": "Oi"}]}, actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="a ACME é melhor", id="m1")
    assert [s.flow_id for s in r.started] == list(order)


def test_a_malformed_understand_reply_judges_nothing_but_code_only_decisions_still_happen(caplog):
    """model-calls.md §3.5 item 2: the call counts, nothing is routed, mentioned or branched by the model, but
    the catch-all still starts and code-only mention detectors still run."""
    anotar, log = noop()
    geral = flow("geral", on=[{"message": []}], steps=[{"id": "s", "say": "Geral!"}])
    conc = flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "d", "do": "anotar"}])
    det = flow("det", on=[{"mention": []}], steps=[{"id": "d", "do": "anotar"}])
    agent, provider, _ = build([VENDAS, geral, conc, det], {"understand": ["não sei responder"]},
                               actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1")
    assert r.llm_calls == 1 and [s.flow_id for s in r.started] == ["det", "geral"]
    assert log == ["det#m1:d:1"] and [m.text for m in r.messages] == ["Geral!"]


def test_a_mention_that_was_not_asked_is_never_read_even_if_the_reply_marks_it_true():
    """model-calls.md §3.5 last paragraph ("scores, mentions and branches for ids that were not asked about are
    simply never read"), flows.md §4.2 ("a claimed "once" mention is simply not asked and writes nothing"),
    runtime.md §3.4 item 5: the claimed mention is left out of the call; a reply that still says true for it
    must not start it, so no `already-claimed` skip appears."""
    anotar, log = noop()
    m = flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "d", "do": "anotar"}])
    agent, provider, _ = build([VENDAS, SUPORTE, m], {
        "understand": [{"flows": {"vendas": 90}, "mentions": {"conc": True}},
                       {"flows": {"vendas": 90, "suporte": 0}, "mentions": {"conc": True}}],
        "speak": [{"message": "CPF?"}, {"message": "E o CPF?"}]}, actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="quero comprar; a ACME é melhor", id="m1")
    assert log == ["conc#m1:d:1"]
    t2 = agent.turn(session_id="s1", session=t1.session, message="a ACME é melhor mesmo", id="m2")
    call = understand_calls(provider)[1]                   # made to score suporte against the asker
    assert section(call, "flows") == ["vendas", "suporte"] and section(call, "mentions") is None
    assert t2.skipped == [] and t2.started == []


# flows.md §4 "Which trigger object is used": a flow with a phrased and an empty message trigger -------------------


def both(phrased_extra=None, empty_extra=None):
    return flow("ambos", on=[{"message": ["quer um orçamento"], **(phrased_extra or {})},
                             {"message": [], **(empty_extra or {})}],
                steps=[{"id": "s", "say": "Vamos lá."}])


def test_a_flow_with_both_triggers_is_a_candidate_and_starts_through_the_phrased_one_when_scored():
    """flows.md §4, runtime.md §3.5 rule 5: scored >= 40, the start uses the first non-empty message trigger:
    here its `repeat: "always"` puts the trigger key into the claim."""
    agent, provider, _ = build([both({"repeat": "always"})], {"understand": [{"flows": {"ambos": 80}}]})
    r = agent.turn(session_id="s1", message="quero um orçamento", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["ambos"]
    assert [(s.run_id, s.dedupe_key) for s in r.started] == [("ambos#m1", "ambos:s1:m1")]


def test_a_flow_with_both_triggers_scoring_under_40_starts_through_its_catch_all_trigger():
    """flows.md §4, runtime.md §3.5 rule 5, §3.5.0: under 40 the same flow is the first qualifying catch-all and
    starts through its empty trigger (default "once": empty nonce); the lone phrased flow was scored because a
    catch-all qualifies (§3.4 item 4), even with `idle: "silent"`."""
    agent, provider, _ = build([both({"repeat": "always"})], {"understand": [{"flows": {"ambos": 10}}]},
                               idle="silent")
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert section(understand_calls(provider)[0], "flows") == ["ambos"]
    assert [(s.run_id, s.dedupe_key) for s in r.started] == [("ambos#m1", "ambos:s1:")]


def test_each_trigger_of_a_flow_with_both_keeps_its_own_repeat():
    """flows.md §4, runtime.md §3.4 items 2-3: eligibility reads the phrased trigger, catch-all qualification
    reads the empty one. Once the catch-all's "once" claim is used, the flow is still eligible through its
    phrased "always" trigger, and a score >= 40 starts it again under the message id."""
    agent, provider, _ = build([both({"repeat": "always"})], {
        "understand": [{"flows": {"ambos": 10}}, {"flows": {"ambos": 10}}, {"flows": {"ambos": 90}}],
        "speak": [{"message": "Oi, em que ajudo?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert [s.dedupe_key for s in t1.started] == ["ambos:s1:"]
    t2 = agent.turn(session_id="s1", session=t1.session, message="hm", id="m2")
    assert t2.started == [] and t2.skipped == [] and [m.key for m in t2.messages] == ["idle:m2"]
    t3 = agent.turn(session_id="s1", session=t2.session, message="quero um orçamento", id="m3")
    assert [s.dedupe_key for s in t3.started] == ["ambos:s1:m3"]


def test_a_flow_whose_phrased_trigger_fails_its_if_is_no_candidate_but_still_a_catch_all():
    """runtime.md §3.4 items 2-3: the phrased trigger's `if` is false, so the flow is not scored (no call at
    all: its catch-all's fields would ride on its first step), but its empty trigger qualifies and it starts."""
    agent, provider, _ = build([both({"if": {"known": ["plano"]}})], {})
    r = agent.turn(session_id="s1", message="quero um orçamento", id="m1")
    assert provider.calls == [] and [(s.run_id, s.dedupe_key) for s in r.started] == [("ambos#m1", "ambos:s1:")]


def test_the_premise_of_a_run_started_through_one_message_trigger_reads_them_all():
    """runtime.md §3.6.2 rule 3, flows.md §4: started as the catch-all (whose `if` holds), the run's premise
    holds while any `message` trigger has no `if` or a holding one, here the phrased one without `if`."""
    f = flow("ambos", on=[{"message": ["quer um orçamento"]}, {"message": [], "if": lambda ctx: "plano" not in ctx.data}],
             steps=[{"id": "q", "collect": ["cpf"]}, {"id": "s", "say": "Fim."}])
    agent, _, _ = build([f], {"understand": [{"flows": {"ambos": 0}}, {"flows": {"ambos": 0}}],
                              "speak": [{"message": "CPF?"}, {"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t1.session.data["plano"] = "pro"                      # the catch-all's own `if` no longer holds
    t2 = agent.turn(session_id="s1", session=t1.session, message="hm", id="m2")
    assert "premise-changed" not in [o.code for o in t2.outcomes] and status(t2) == [("ambos#m1", "asking")]
