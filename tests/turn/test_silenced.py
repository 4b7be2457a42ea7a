"""The host gate `silenced`: its three forms and what each does to a turn.

Spec: runtime.md §9 (and §3.4, §3.5, §3.6.3, §3.6.6), flows.md §4.1, §5.3 rule 2, §5.4, §7.2.
"""
from datetime import datetime, timezone

import pytest

import falai as F

from conftest import T0, build, lines  # the shared builders

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
MS0 = 1789898400000
REASON = "humano assumiu"
SILENCED_TEXT = "the host cannot speak right now"

NOME = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
NOME_ASKED = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}


def triagem(trigger=None, steps=None):
    return {"id": "triagem", "name": "Triagem", "on": [trigger or {"message": []}],
            "steps": steps or [{"id": "quem", "collect": ["nome"]}, {"id": "ajuda", "prompt": "Pergunte como ajudar."}]}


@pytest.mark.parametrize("silenced", [REASON, {"reason": REASON}, {"reason": REASON, "understand": False}])
def test_a_plain_reason_calls_no_model_and_the_catch_all_ends_silenced_keeping_its_claim(silenced):
    """runtime.md §9: a catch-all starts, writes its claim, and ends `silenced` at its first talk step; zero calls."""
    agent, provider, _ = build([triagem()], fields=NOME)
    r = agent.turn(session_id="s1", message="oi", id="m1", silenced=silenced)
    assert r.llm_calls == 0 and provider.calls == [] and r.usage is None
    assert [s.run_id for s in r.started] == ["triagem#m1"]
    assert lines(r) == [("collect", "skipped", "silenced")]
    line = r.outcomes[0]
    assert (line.detail, line.message, line.key, line.step_id, line.run_id) == (
        REASON, SILENCED_TEXT, None, "quem", "triagem#m1")
    assert [(e.id, e.reason) for e in r.ended] == [("triagem#m1", "skipped")]
    assert r.session.claims == {"triagem:s1:": {"at": T0}}
    assert r.messages == [] and r.session.last_assistant_at is None and r.schedule == []


def test_a_once_catch_all_used_up_while_silenced_does_not_start_when_the_gate_opens():
    """runtime.md §9 Claims: the claim stays written; a "once" catch-all does not start again."""
    agent, _, _ = build([triagem()], fields=NOME, script={"speak": [{"message": "Olá! Em que posso ajudar?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1", silenced=REASON)
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi?", id="m2")
    assert t2.started == [] and t2.skipped == []
    assert [(m.key, m.kind) for m in t2.messages] == [("idle:m2", "ai")]          # the idle speaker answers


def test_a_catch_all_gated_on_silenced_false_waits_for_the_gate_to_open():
    """runtime.md §9, flows.md §4.1: "if": {"silenced": False} keeps the catch-all for after the gate opens."""
    agent, _, _ = build([triagem({"message": [], "if": {"silenced": False}})], fields=NOME,
                        script={"speak": [{"message": "Oi! Como você se chama?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1", silenced=REASON)
    assert (t1.started, t1.skipped, t1.outcomes, t1.session.claims) == ([], [], [], {})
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi?", id="m2")
    assert [s.run_id for s in t2.started] == ["triagem#m2"]
    assert [m.key for m in t2.messages] == ["triagem#m2:quem:1"]


def test_predicates_see_the_reason_as_ctx_silenced():
    """runtime.md §9: predicates see the reason as ctx.silenced; actions too."""
    seen = []
    flow = {"id": "f", "name": "F", "on": [{"message": [], "if": lambda ctx: seen.append(("if", ctx.silenced)) or True}],
            "steps": [{"id": "a", "do": "a"}]}
    agent, _, _ = build([flow], idle="silent",
                        actions={"a": F.Action(parameters={}, run=lambda p, c: seen.append(("do", c.silenced)))})
    agent.turn(session_id="s1", message="oi", id="m1", silenced={"reason": REASON, "skip": True})
    assert ("do", REASON) in seen and ("if", REASON) in seen


def test_do_if_and_wait_steps_run_while_silenced():
    """runtime.md §9: do, if and wait steps run normally under any form."""
    ran = []
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "a"}, {"id": "c", "if": {"silenced": True}},
                                              {"id": "espera", "wait": "1h"}]}
    agent, _, _ = build([flow], actions={"a": F.Action(parameters={}, run=lambda p, c: ran.append(c.key))})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=REASON)
    assert ran == ["f#k1:a:1"]
    assert lines(r) == [("do", "ok", None), ("if", "ok", None), ("wait", "waiting", None)]
    assert [e.key for e in r.schedule] == [f"f#k1:espera:{MS0 + 3_600_000}"]


def test_a_say_reached_while_silenced_ends_the_run():
    """runtime.md §3.6.3 say rule 1, §9: default form -> the run ends skipped silenced (line kind say, detail reason)."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}, {"id": "b", "say": "B"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=REASON)
    assert [(o.kind, o.status, o.code, o.detail, o.step_id, o.key) for o in r.outcomes] == [
        ("say", "skipped", "silenced", REASON, "oi", None)]
    assert r.messages == [] and [(e.id, e.reason) for e in r.ended] == [("f#k1", "skipped")]


def test_a_say_once_reached_while_silenced_writes_no_claim():
    """runtime.md §3.6.3 say rules 1-2: the silenced check comes first, so no once-claim is written."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi", "once": True}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=REASON)
    assert "f:oi:s1" not in r.session.claims


def test_a_talk_step_reached_by_a_wake_while_silenced_ends_the_run():
    """runtime.md §3.6.3 talk rule 3: a fresh talk step under silence ends the run skipped silenced, no speak call."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "espera", "wait": "1h"}, {"id": "p", "prompt": "Retome."}]}
    agent, provider, clock = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, silenced=REASON)
    assert lines(t2) == [("wait", "ok", "no-reply"), ("prompt", "skipped", "silenced")]
    assert t2.outcomes[1].detail == REASON and provider.calls == []
    assert t2.ended[0].reason == "skipped"


def test_no_fixed_question_goes_out_while_silenced():
    """runtime.md §9: fixed questions are not sent; the step ends the run like any talk step."""
    flow = triagem(steps=[{"id": "quem", "collect": ["nome"], "question": "Qual é o seu nome?"}])
    agent, _, _ = build([flow], fields=NOME)
    r = agent.turn(session_id="s1", message="oi", id="m1", silenced=REASON)
    assert r.messages == [] and lines(r) == [("collect", "skipped", "silenced")]


def test_an_asker_stays_asking_with_no_line_and_answers_when_the_gate_opens():
    """runtime.md §3.6.3 talk rule 3, §9: a resumed asker stays asking (no line) and speaks on a later open message."""
    flow = {"id": "triagem", "name": "Triagem", "steps": [{"id": "quem", "collect": ["nome"]}]}
    agent, provider, clock = build([flow], fields=NOME_ASKED,
                                   script={"speak": [{"message": "Como você se chama?"},
                                                     {"message": "E o seu nome?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, message="um momento", id="m1", silenced=REASON)
    assert t2.outcomes == [] and t2.messages == [] and t2.llm_calls == 0
    run = t2.session.runs[0]
    assert (run.status, run.asked, run.visits) == ("asking", {"nome": 1}, {"quem": 1})
    assert t2.session.last_user_at == "2026-09-20T10:01:00.000Z" and t2.session.inputs == ["m1"]
    t3 = agent.turn(session_id="s1", session=t2.session, message="oi", id="m2")
    assert [(m.text, m.key) for m in t3.messages] == [("E o seu nome?", "triagem#k1:quem:1:re:m2")]


def test_the_asker_keeps_the_floor_and_its_if_branches_are_judged_while_silenced():
    """runtime.md §9 The asker: its if branches are judged under a plain reason and may move it."""
    flow = {"id": "triagem", "name": "Triagem", "steps": [
        {"id": "quem", "collect": ["nome"],
         "branches": [{"if": lambda ctx: bool((ctx.context or {}).get("sair")), "then": "fim"}]},
        {"id": "fim", "do": "log"}]}
    logged = []
    agent, _, _ = build([flow], fields=NOME_ASKED, script={"speak": [{"message": "Como você se chama?"}]},
                        actions={"log": F.Action(parameters={}, run=lambda p, c: logged.append(c.key))})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="tchau", id="m1", silenced=REASON,
                    context={"sair": True})
    assert [(o.kind, o.status, o.code, o.next) for o in t2.outcomes][:1] == [("collect", "ok", "branch", "fim")]
    assert logged == ["triagem#k1:fim:1"] and t2.llm_calls == 0


def test_no_idle_reply_while_silenced():
    """runtime.md §3.6.6 rule 1, §9: silenced -> no speaker, the idle speaker included."""
    agent, provider, _ = build([])
    r = agent.turn(session_id="s1", message="oi", id="m1", silenced=REASON)
    assert r.messages == [] and r.outcomes == [] and provider.calls == [] and r.llm_calls == 0
    assert r.changed is True                                           # lastUserAt and inputs changed


def test_an_action_that_spoke_while_silenced_still_stamps_and_arms():
    """runtime.md §9: lastAssistantAt and silence arming happen only if something still spoke (spoke: True)."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "a"}]}
    retomar = {"id": "retomar", "name": "Retomar", "on": [{"silence": "24h"}], "steps": [{"id": "p", "say": "Oi?"}]}
    agent, _, _ = build([flow, retomar],
                        actions={"a": F.Action(parameters={}, run=lambda p, c: {"ok": True, "spoke": True})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=REASON)
    assert r.session.last_assistant_at == T0
    assert [e.key for e in r.schedule] == [f"silence:retomar:s1:{MS0}"]


def test_a_code_only_mention_starts_while_silenced_but_a_phrased_one_is_not_judged():
    """runtime.md §9 Mention flows: mention: [] goes through the start order; a phrased mention never starts."""
    ran = []
    detector = {"id": "detector", "name": "D", "on": [{"mention": []}], "steps": [{"id": "a", "do": "a"}]}
    phrased = {"id": "humano", "name": "H", "on": [{"mention": ["pede um humano"]}], "steps": [{"id": "b", "do": "a"}]}
    agent, provider, _ = build([detector, phrased], idle="silent",
                               actions={"a": F.Action(parameters={}, run=lambda p, c: ran.append(c.key))})
    r = agent.turn(session_id="s1", message="quero falar com alguém", id="m1", silenced=REASON)
    assert [s.run_id for s in r.started] == ["detector#m1"] and ran == ["detector#m1:a:1"]
    assert provider.calls == []


def test_the_lone_unscored_flow_starts_while_silenced_and_ends_at_its_talk_step():
    """runtime.md §9: the lone eligible flow of the unscored-start rule starts as a catch-all would."""
    vendas = {"id": "vendas", "name": "Vendas", "on": [{"message": ["quer comprar"]}],
              "steps": [{"id": "p", "prompt": "Ofereça ajuda."}]}
    agent, provider, _ = build([vendas], idle="silent")
    r = agent.turn(session_id="s1", message="quero comprar", id="m1", silenced=REASON)
    assert [s.run_id for s in r.started] == ["vendas#m1"]
    assert lines(r) == [("prompt", "skipped", "silenced")] and provider.calls == []


# understand: True ---------------------------------------------------------------------------------------

def test_understand_true_keeps_the_understand_call_and_routing_but_nothing_is_phrased():
    """runtime.md §9: with understand: True, routing still works; the routed run ends silenced at its talk step."""
    vendas = {"id": "vendas", "name": "Vendas", "on": [{"message": ["quer comprar"]}],
              "steps": [{"id": "p", "prompt": "Ofereça ajuda."}]}
    suporte = {"id": "suporte", "name": "Suporte", "on": [{"message": ["tem um problema"]}],
               "steps": [{"id": "p", "prompt": "Ajude."}]}
    agent, provider, _ = build([vendas, suporte],
                               script={"understand": [{"flows": {"vendas": 90, "suporte": 5}}]})
    r = agent.turn(session_id="s1", message="quero comprar", id="m1",
                   silenced={"reason": REASON, "understand": True})
    assert r.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["understand"]
    assert [s.run_id for s in r.started] == ["vendas#m1"]
    assert lines(r) == [("prompt", "skipped", "silenced")] and r.messages == []


def test_understand_true_still_extracts_fields():
    """runtime.md §9: with understand: True, field extraction happens while the assistant stays quiet."""
    flow = {"id": "triagem", "name": "Triagem", "steps": [{"id": "quem", "collect": ["nome"]},
                                                          {"id": "fim", "do": "log"}]}
    logged = []
    agent, _, _ = build([flow], fields=NOME,
                        script={"speak": [{"message": "Como você se chama?"}],
                                "understand": [{"fields": {"nome": "Ana"}}]},
                        actions={"log": F.Action(parameters={}, run=lambda p, c: logged.append(c.key))})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="sou a Ana", id="m1",
                    silenced={"reason": REASON, "understand": True})
    assert t2.session.data == {"nome": "Ana"} and t2.llm_calls == 1
    # §3.6.3 talk rule 2 comes before the silenced check: the resumed asker's fields are known, it moves on.
    assert ("collect", "ok", None) in lines(t2) and logged == ["triagem#k1:fim:1"]


# skip mode ------------------------------------------------------------------------------------------------

SKIP = {"reason": "janela fechada", "skip": True}


def test_skip_mode_passes_a_say_and_takes_then():
    """runtime.md §3.6.3 say rule 1, §9: skip mode -> say / skipped / silenced with key, detail, next; the run goes on."""
    ran = []
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi", "then": "fim"}, {"id": "meio", "say": "x"},
                                              {"id": "fim", "do": "a"}]}
    agent, _, _ = build([flow], actions={"a": F.Action(parameters={}, run=lambda p, c: ran.append(c.key))})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=SKIP)
    say = r.outcomes[0]
    assert (say.kind, say.status, say.code, say.detail, say.key, say.next, say.message) == (
        "say", "skipped", "silenced", "janela fechada", "f#k1:oi:1", "fim", SILENCED_TEXT)
    assert ran == ["f#k1:fim:1"] and r.messages == [] and r.ended[0].reason == "end"


@pytest.mark.parametrize("step, kind", [({"id": "p", "prompt": "Diga oi.", "then": "fim"}, "prompt"),
                                        ({"id": "p", "collect": ["nome"], "then": "fim"}, "collect"),
                                        ({"id": "p", "collect": ["nome"], "question": "Nome?", "then": "fim"},
                                         "collect")])
def test_skip_mode_passes_a_fresh_talk_step_and_takes_then(step, kind):
    """runtime.md §3.6.3 talk rule 3, §9: skip mode -> <kind> / skipped / silenced, key and next set, asked unchanged."""
    ran = []
    flow = {"id": "f", "name": "F", "steps": [step, {"id": "meio", "say": "x"}, {"id": "fim", "do": "a"}]}
    agent, provider, _ = build([flow], fields=NOME,
                               actions={"a": F.Action(parameters={}, run=lambda p, c: ran.append(c.key))})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, silenced=SKIP)
    line = r.outcomes[0]
    assert (line.kind, line.status, line.code, line.detail, line.key, line.next) == (
        kind, "skipped", "silenced", "janela fechada", "f#k1:p:1", "fim")
    assert ran == ["f#k1:fim:1"] and provider.calls == [] and r.messages == []
    assert r.ended[0].asked == {}


def test_skip_mode_leaves_a_resumed_asker_asking():
    """runtime.md §9 (inferred): an asking run resumed by the message stays asking in skip mode too."""
    flow = {"id": "triagem", "name": "Triagem", "steps": [{"id": "quem", "collect": ["nome"]},
                                                          {"id": "fim", "say": "Fim"}]}
    agent, _, _ = build([flow], fields=NOME_ASKED, script={"speak": [{"message": "Como você se chama?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1", silenced=SKIP)
    assert t2.outcomes == [] and t2.session.runs[0].status == "asking" and t2.messages == []


def test_skip_mode_makes_no_model_call_and_no_idle_reply():
    """runtime.md §9: skip mode is still a closed gate: no understand call, no speaker."""
    flows = [{"id": "v", "name": "V", "on": [{"message": ["x"]}], "steps": [{"id": "p", "prompt": "y"}]},
             {"id": "w", "name": "W", "on": [{"message": ["z"]}], "steps": [{"id": "p", "prompt": "y"}]}]
    agent, provider, _ = build(flows)
    r = agent.turn(session_id="s1", message="oi", id="m1", silenced=SKIP)
    assert provider.calls == [] and r.messages == []


def test_understand_true_routing_back_to_a_suspended_run_ends_it_silenced():
    """runtime.md §9 Note, §3.5 rule 5: a suspended run that routing resumes re-enters as a fresh arrival and ends silenced."""
    fields = {"x": {"type": "string", "extract": "asked", "ask": "Pergunte x."},
              "y": {"type": "string", "extract": "asked", "ask": "Pergunte y."}}
    a = {"id": "a", "name": "A", "on": [{"message": ["quer A"], "repeat": "always"}],
         "steps": [{"id": "qa", "collect": ["x"]}]}
    b = {"id": "b", "name": "B", "on": [{"message": ["quer B"], "repeat": "always"}],
         "steps": [{"id": "qb", "collect": ["y"]}]}
    agent, provider, clock = build([a, b], fields=fields, script={
        "understand": [{"flows": {"a": 90, "b": 0}}, {"flows": {"a": 0, "b": 90}}, {"flows": {"a": 90, "b": 0}}],
        "speak": [{"message": "x?"}, {"message": "y?"}]})
    t1 = agent.turn(session_id="s1", message="quero A", id="m1")
    clock.advance("1s")
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero B", id="m2")
    assert [(r.id, r.status) for r in t2.session.runs] == [("a#m1", "suspended"), ("b#m2", "asking")]
    clock.advance("1s")
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltando ao A", id="m3",
                    silenced={"reason": REASON, "understand": True})
    assert t3.llm_calls == 1 and t3.messages == []
    assert [(o.run_id, o.kind, o.status, o.code, o.detail) for o in t3.outcomes] == [
        ("a#m1", "collect", "skipped", "silenced", REASON)]
    assert [(e.id, e.reason) for e in t3.ended] == [("a#m1", "skipped")]
    assert [(r.id, r.status) for r in t3.session.runs] == [("b#m2", "asking")]
