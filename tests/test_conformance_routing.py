"""Conformance review: what a message turn asks the model to judge, and what happens with the judgement.

Adversarial tests of runtime.md §3.2 (I-R, I-F), §3.4, §3.5 (incl. §3.5.0-§3.5.2), §3.6, §4.4-§4.7, §9, §17;
model-calls.md §1, §3.1-§3.2, §3.5-§3.6; flows.md §2.2-§2.3, §3.6, §4, §5.3, §6, §7.5.

Every test drives whole turns through a ScriptedProvider and asserts only what the engine exposes: whether
the understand call happened and what it offered (`provider.calls[i].schema` and `.prompt`), `llm_calls`,
`started`/`ended`/`skipped`, runs' status, outcome lines, messages and keys.
"""
import pytest

from falai import Action, ScriptedProvider, falai, fake_clock

T0 = "2026-09-20T10:00:00.000Z"

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


def build(flows, script=None, *, fields=None, clock=None, **options):
    provider = ScriptedProvider(script=script or {})
    clock = clock or fake_clock(T0)
    agent = falai().fields(fields or FIELDS).agent(name="Ana", provider=provider, clock=clock, flows=flows,
                                                   **options)
    return agent, provider, clock


def understand_calls(provider):
    return [call for call in provider.calls if call.schema_name == "understand"]


def section(call, name):
    """The property names of one envelope section, in order; None when the section is absent."""
    props = call.schema["properties"]
    return list(props[name]["properties"]) if name in props else None


def lines(r):
    return [(o.run_id, o.kind, o.status, o.code) for o in r.outcomes]


def status(r):
    return [(run.id, run.status) for run in r.session.runs]


def noop(*keys):
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


# §3.4 items 4, 8, 9 and model-calls.md §3.1: when there is no understand call ---------------------------------

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
    assert t2.started == [] and t2.messages[0].key == "f#m1:q:1"


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
    assert list(call.schema["properties"]) == ["fields"] and section(call, "fields") == ["nome", "cidade"]
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
    assert list(call.schema["properties"]) == ["flows", "branches"]
    assert section(call, "flows") == ["f"] and section(call, "branches") == ["q1"]
    assert "- q1: a pessoa desiste" in call.prompt
