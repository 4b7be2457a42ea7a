"""Steps: say, do (every result form), if, then targets, chains, onEnd, the premise, caps and edits.

Spec: runtime.md §3.6.1-§3.6.5, §4.7, §4.8, §5; flows.md §3.4-§3.6, §5.2, §5.4, §5.5, §5.8, §5.9, §9.
"""
import copy
from datetime import datetime, timedelta, timezone

import pytest

import falai as F
from falai import ActionResult, fake_clock

from conftest import T0, build, lines  # the shared builders

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
MS0 = 1789898400000
HOUR = 3_600_000

UNRECOGNISED = ('action "acao" returned no result it understands. Return {"ok": True}, {"skipped": reason}, '
                '{"failed": reason} or {"defer": "1h", "detail": reason}.')


def action(run, **parameters):
    return F.Action(parameters=parameters, run=run)


def line_of(r, kind, status=None):
    found = [o for o in r.outcomes if o.kind == kind and (status is None or o.status == status)]
    assert len(found) == 1, lines(r)
    return found[0]


def setter(**values):
    def run(params, ctx):
        ctx.set(values)
    return action(run)


def do_flow(result, *, then=None, on_fail=None, fid="f"):
    """A flow whose first step runs `acao` returning `result`; then a say `b`, a say `falhou`."""
    step = {"id": "acao", "do": "acao"}
    if then is not None:
        step["then"] = then
    if on_fail is not None:
        step["onFail"] = on_fail
    return {"id": fid, "name": "F", "steps": [step, {"id": "b", "say": "B", "then": "end"},
                                              {"id": "falhou", "say": "Falhou"}]}


def run_do(result, **flow_keys):
    returns = result if callable(result) else (lambda params, ctx: result)
    agent, _, _ = build([do_flow(result, **flow_keys)], actions={"acao": action(returns)})
    return agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})


# say ---------------------------------------------------------------------------------------------

def test_say_renders_its_text_and_emits_a_verbatim_message_with_media():
    """runtime.md §3.6.3 say rule 3: rendered text, kind verbatim, media, after_ms 0, key, run and step ids."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "nome", "do": "poe"},
        {"id": "oi", "say": "Olá {{data.nome}}, bem-vinda à {{context.loja}} ({{input.x}})",
         "media": {"slug": "logo-{{data.nome}}"}}]}
    agent, _, _ = build([flow], actions={"poe": setter(nome="Ana")})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"x": "X"}}, context={"loja": "Azul"})
    m = r.messages[0]
    assert (m.text, m.kind, m.key, m.after_ms, m.run_id, m.step_id) == (
        "Olá Ana, bem-vinda à Azul (X)", "verbatim", "f#k1:oi:1", 0, "f#k1", "oi")
    assert m.media == {"slug": "logo-{{data.nome}}"}                      # flows.md §8.3: media is not rendered
    say = line_of(r, "say")
    assert (say.status, say.code, say.key, say.next, say.step_id) == ("ok", None, "f#k1:oi:1", None, "oi")
    assert r.session.last_assistant_at == T0 and r.llm_calls == 0


def test_say_without_media_has_none():
    """runtime.md §12: media is None unless the say step has one."""
    agent, _, _ = build([{"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}]}])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.messages[0].media is None


def test_say_line_names_its_then():
    """runtime.md §11.2: say / ok, next = label of then."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi", "then": "fim"},
                                              {"id": "meio", "say": "Meio"}, {"id": "fim", "say": "Fim"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["Oi", "Fim"]
    assert r.outcomes[0].next == "fim"


def test_say_once_goes_out_once_per_session_and_writes_its_claim():
    """runtime.md §3.6.3 say rule 2: the claim ${flowId}:${stepId}:${sessionId}; a second time: already-sent."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Bem-vinda!", "once": True, "then": "fim"},
                                              {"id": "meio", "say": "Meio"}, {"id": "fim", "say": "Fim"}]}
    agent, _, _ = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in t1.messages] == ["Bem-vinda!", "Fim"]
    assert t1.session.claims["f:oi:s1"] == {"at": T0}
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2"})
    assert [m.text for m in t2.messages] == ["Fim"]
    skipped = t2.outcomes[0]
    assert (skipped.kind, skipped.status, skipped.code, skipped.key, skipped.next) == (
        "say", "skipped", "already-sent", "f#k2:oi:1", "fim")
    assert skipped.message == "this message was already sent once"


def test_say_once_held_by_the_host_is_not_sent():
    """runtime.md §3.6.3 say rule 2, §6.4: a say once-claim in claims["held"] counts."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Bem-vinda!", "once": True}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, claims={"held": {"f:oi:s1": T0}})
    assert r.messages == [] and lines(r) == [("say", "skipped", "already-sent")]
    assert "f:oi:s1" not in r.session.claims


def test_an_already_sent_say_does_not_count_as_speaking():
    """runtime.md §3.8 item 4: lastAssistantAt is stamped only when something was emitted."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Bem-vinda!", "once": True}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, claims={"held": {"f:oi:s1": T0}})
    assert r.session.last_assistant_at is None


# do: the result forms --------------------------------------------------------------------------------

@pytest.mark.parametrize("result, detail", [
    ({"ok": True}, None),
    ({"ok": True, "detail": "enviado"}, "enviado"),
    ({"ok": True, "detail": ""}, None),
    ({"ok": False}, None),                                    # presence counts, not the value
    ({"ok": True, "failed": "ignored"}, None),                # ok is checked first
    (ActionResult(ok=True), None),
    (ActionResult(ok=True, detail="enviado"), "enviado"),
    (ActionResult(ok=False, detail="x"), "x"),
    (None, None),                                             # flows.md §9.5: None counts as ok
])
def test_an_ok_result_writes_do_ok_and_follows_then(result, detail):
    """runtime.md §3.6.3 do rule 4: ok -> do / ok, detail when non-empty, next = label of then."""
    r = run_do(result, then="b")
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.key, do.next) == ("ok", None, detail, "f#k1:acao:1", "b")
    assert [m.text for m in r.messages] == ["B"]


@pytest.mark.parametrize("result", [{"skipped": "fora do horário"}, ActionResult(skipped="fora do horário"),
                                    {"skipped": "fora do horário", "failed": "x"}])
def test_a_skipped_result_writes_action_skipped_and_follows_then(result):
    """runtime.md §3.6.3 do rule 4: skipped -> do / skipped / action-skipped, detail = its text, then."""
    r = run_do(result, then="b", on_fail="falhou")
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.next) == ("skipped", "action-skipped", "fora do horário", "b")
    assert do.message == "the action decided not to run"
    assert [m.text for m in r.messages] == ["B"]


@pytest.mark.parametrize("result", [{"failed": "timeout"}, ActionResult(failed="timeout"),
                                    {"failed": "timeout", "defer": "1h"}])
def test_a_failed_result_follows_on_fail(result):
    """runtime.md §3.6.3 do rule 4: failed -> do / failed / action-failed, target = onFail."""
    r = run_do(result, then="b", on_fail="falhou")
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.key, do.next) == ("failed", "action-failed", "timeout",
                                                                "f#k1:acao:1", "falhou")
    assert do.message == "the action failed"
    assert [m.text for m in r.messages] == ["Falhou"]


def test_a_failed_result_without_on_fail_follows_then():
    """runtime.md §3.6.3 do rule 4: failed with no onFail follows then."""
    r = run_do({"failed": "timeout"}, then="b")
    assert line_of(r, "do").next == "b" and [m.text for m in r.messages] == ["B"]


def test_a_failed_result_with_no_target_goes_to_the_next_step():
    """runtime.md §3.6.4, §11.3: no onFail and no then: no next, the run enters the next step."""
    r = run_do({"failed": "timeout"})
    assert line_of(r, "do").next is None and [m.text for m in r.messages] == ["B"]


def test_a_raising_action_fails_with_the_exception_text():
    """runtime.md §3.6.3 do rule 3: the handler raised -> failed with str(exc)."""
    def boom(params, ctx):
        raise ValueError("CRM fora do ar")
    r = run_do(boom, then="b", on_fail="falhou")
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.next) == ("failed", "action-failed", "CRM fora do ar", "falhou")


def test_an_unregistered_action_fails_with_unknown_action():
    """runtime.md §3.6.3 do rule 3: action not registered (registry changed under a built flow)."""
    agent, _, _ = build([do_flow(None, on_fail="falhou")], actions={"acao": action(lambda p, c: None)})
    dict.pop(agent.actions, "acao")        # past the agent's freeze, as only a test may
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.next) == ("failed", "action-failed", 'unknown action "acao"', "falhou")


@pytest.mark.parametrize("value", ["amanhã", "2 h", "-1h", "1w"])
def test_a_defer_that_is_not_a_duration_fails_with_the_bad_defer_text(value):
    """runtime.md §3.6.3 do rule 3: a bad defer fails with the exact text, then onFail."""
    r = run_do({"defer": value, "detail": "x"}, on_fail="falhou")
    do = line_of(r, "do")
    assert (do.status, do.code, do.next) == ("failed", "action-failed", "falhou")
    assert do.detail == (f'action "acao" asked to defer by "{value}", which is not a duration. '
                         'Use a value like "2m" or "1h".')
    assert r.schedule == []


@pytest.mark.parametrize("result", [{}, {"detail": "x"}, {"spoke": True}, ActionResult(), ActionResult(detail="x"),
                                    "ok", 42, True, ["ok"]])
def test_an_unrecognised_result_fails_with_the_unrecognised_text(result):
    """runtime.md §3.6.3 do rule 3, flows.md §9.5: any other value fails, naming the action and the four shapes."""
    r = run_do(result, then="b", on_fail="falhou")
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.next) == ("failed", "action-failed", UNRECOGNISED, "falhou")


@pytest.mark.parametrize("result", [{"defer": "2h", "detail": "fora do horário"},
                                    ActionResult(defer="2h", detail="fora do horário")])
def test_a_defer_parks_the_run_under_the_step_key_and_fire_time(result):
    """runtime.md §3.6.3 do rule 4, §7.1: defer -> do / deferred / action-deferred, until, park ${runId}:${stepId}:${atMs}."""
    r = run_do(result, then="b")
    key = f"f#k1:acao:{MS0 + 2 * HOUR}"
    assert [(e.key, e.at) for e in r.schedule] == [(key, NOW0 + timedelta(hours=2))]
    do = line_of(r, "do")
    assert (do.status, do.code, do.detail, do.key, do.until, do.next) == (
        "deferred", "action-deferred", "fora do horário", "f#k1:acao:1", "2026-09-20T12:00:00.000Z", None)
    assert do.message == "the action asked to run again later"
    run = r.session.runs[0]
    assert (run.status, run.step_id) == ("waiting", "acao")
    assert run.waiting == {"kind": "timer", "key": key, "until": "2026-09-20T12:00:00.000Z", "setAt": T0}
    assert r.messages == []


def test_a_defer_is_never_snapped_by_business_hours():
    """runtime.md §3.6.3 do rule 4: at = now + duration, no business-hours snap."""
    clock = fake_clock("2026-09-20T20:00:00.000Z")
    agent, _, _ = build([do_flow(None)], clock=clock,
                        actions={"acao": action(lambda p, c: {"defer": "1h"})},
                        business_hours=lambda at, ctx: at + timedelta(days=3))
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.at for e in r.schedule] == [datetime(2026, 9, 20, 21, tzinfo=timezone.utc)]


def test_a_deferred_action_runs_again_at_the_same_visit_on_its_wake():
    """runtime.md §3.2 I-W rule 7, §8: the wake re-runs the same step without entering it: same ctx.key."""
    keys, answers = [], [{"defer": "1h", "detail": "tente depois"}, {"ok": True}]

    def run(params, ctx):
        keys.append(ctx.key)
        return answers.pop(0)

    agent, _, clock = build([do_flow(None, then="b")], actions={"acao": action(run)})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert keys == ["f#k1:acao:1", "f#k1:acao:1"]
    assert lines(t2) == [("do", "ok", None), ("say", "ok", None)]      # no wait line for a deferred do
    assert t2.ended[0].visits == {"acao": 1, "b": 1}


# do: the action context -----------------------------------------------------------------------------

def test_the_action_context_carries_the_turn_and_the_run():
    """runtime.md §3.6.3 do rule 2, flows.md §9.4: context, data, input, run, key, dedupe_key, silenced, now."""
    seen = {}

    def run(params, ctx):
        seen.update(context=ctx.context, data=ctx.data, input=ctx.input, run_id=ctx.run.id, run_step=ctx.run.step_id,
                    key=ctx.key, dedupe=ctx.dedupe_key, silenced=ctx.silenced, now=ctx.now)

    agent, _, _ = build([do_flow(None)], actions={"acao": action(run)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"a": 1}}, context={"loja": "Azul"})
    assert seen == {"context": {"loja": "Azul"}, "data": {}, "input": {"a": 1}, "run_id": "f#k1", "run_step": "acao",
                    "key": "f#k1:acao:1", "dedupe": "f:s1:k1", "silenced": None, "now": NOW0}
    assert r.messages[0].text == "B"


def test_the_dedupe_key_of_a_once_flow_has_an_empty_nonce():
    """flows.md §9.4: dedupe_key = ${flowId}:${anchor}:${nonce}, the nonce empty for "once"."""
    seen = []
    flow = do_flow(None)
    flow["on"] = [{"message": []}]
    agent, _, _ = build([flow], actions={"acao": action(lambda p, c: seen.append(c.dedupe_key))})
    agent.turn(session_id="s1", message="oi", id="m1")
    assert seen == ["f:s1:"]


def test_ctx_set_writes_at_once_and_none_deletes():
    """flows.md §9.4: set() merges into session.data immediately, as given; a None value deletes the field."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "a", "do": "poe"}, {"id": "b", "say": "Oi {{data.nome}}, {{data.idade}}"},
        {"id": "c", "do": "tira"}]}
    agent, _, _ = build([flow], fields={"nome": {"type": "string"}, "idade": {"type": "integer"}},
                        actions={"poe": setter(nome="Ana", idade="trinta", extra=[1]),
                                 "tira": setter(nome=None)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "Oi Ana, trinta"                     # no coercion, written as given
    assert r.session.data == {"idade": "trinta", "extra": [1]}
    assert r.outcomes[0].code is None                                 # no value-check lines for set()


def test_with_is_rendered_deeply_and_the_flow_is_left_untouched():
    """runtime.md §3.6.3 do rule 1, flows.md §9.3: every string inside with is rendered; keys, non-strings untouched."""
    got = []
    params = {"texto": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
              "n": {"type": "number"}, "b": {"type": "boolean"}}
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "a", "do": "poe"},
        {"id": "envia", "do": "envia", "with": {"texto": "Lead {{data.nome}} ({{context.loja}})",
                                                "tags": ["{{input.tag}}", "fixo"], "n": 5, "b": True}}]}
    original = copy.deepcopy(flow)
    agent, _, _ = build([flow], fields={"nome": {"type": "string"}},
                        actions={"poe": setter(nome="Ana"),
                                 "envia": action(lambda p, c: got.append(p), **params)})
    agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"tag": "vip"}}, context={"loja": "Azul"})
    assert got == [{"texto": "Lead Ana (Azul)", "tags": ["vip", "fixo"], "n": 5, "b": True}]
    assert flow == original


def test_a_do_step_without_with_gets_empty_params():
    """flows.md §5.5: with defaults to {}."""
    got = []
    agent, _, _ = build([do_flow(None)], actions={"acao": action(lambda p, c: got.append(p))})
    agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert got == [{}]


# do: spoke: True ----------------------------------------------------------------------------------------

RETOMAR = {"id": "retomar", "name": "Retomar", "on": [{"silence": "24h"}],
           "steps": [{"id": "p1", "say": "Ainda está aí?"}]}


@pytest.mark.parametrize("result", [{"ok": True, "spoke": True}, ActionResult(ok=True, spoke=True)])
def test_an_action_that_spoke_stamps_last_assistant_at_and_arms_silence(result):
    """flows.md §9.5: spoke: True counts as the assistant speaking (lastAssistantAt, silence re-armed)."""
    agent, _, _ = build([do_flow(None, then="end"), RETOMAR], actions={"acao": action(lambda p, c: result)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.messages == []
    assert r.session.last_assistant_at == T0
    assert [e.key for e in r.schedule] == [f"silence:retomar:s1:{MS0}"]


def test_an_action_that_did_not_speak_stamps_nothing():
    """runtime.md §3.8 item 4: without spoke, a do step is not the assistant speaking."""
    agent, _, _ = build([do_flow(None, then="end"), RETOMAR], actions={"acao": action(lambda p, c: {"ok": True})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.session.last_assistant_at is None and r.schedule == []


@pytest.mark.parametrize("spoke, idle_calls", [(True, 0), (False, 1)])
def test_an_action_that_spoke_keeps_the_idle_speaker_quiet(spoke, idle_calls):
    """runtime.md §3.6.6 rule 3, flows.md §9.5: the idle speaker stays quiet when an action spoke this turn."""
    flow = do_flow(None, then="end")
    flow["on"] = [{"message": []}]
    agent, _, _ = build([flow], actions={"acao": action(lambda p, c: {"ok": True, "spoke": spoke})},
                        script={"speak": [{"message": "Olá!"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.llm_calls == idle_calls
    assert [m.key for m in r.messages] == ([] if spoke else ["idle:m1"])


def test_an_action_that_spoke_makes_the_floors_talk_step_wait_with_another_reply():
    """runtime.md §3.6.6 rule 2: a spoke: True action from another run -> <talk kind> / skipped / another-reply."""
    fields = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}
    triagem = {"id": "triagem", "name": "Triagem", "steps": [{"id": "quem", "collect": ["nome"]}]}
    aviso = {"id": "aviso", "name": "Aviso", "on": [{"mention": [], "repeat": "always"}],
             "steps": [{"id": "manda", "do": "manda"}]}
    agent, provider, _ = build([triagem, aviso], fields=fields,
                               actions={"manda": action(lambda p, c: {"ok": True, "spoke": True})},
                               script={"speak": [{"message": "Qual o seu nome?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    assert t1.session.runs[0].status == "asking"
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    another = [o for o in t2.outcomes if o.code == "another-reply"]
    assert [(o.kind, o.status, o.key, o.run_id) for o in another] == [
        ("collect", "skipped", "triagem#k1:quem:1", "triagem#k1")]
    assert another[0].message == "another run already answered this turn"
    assert t2.messages == [] and t2.llm_calls == 0
    asker = [r for r in t2.session.runs if r.id == "triagem#k1"][0]
    assert asker.status == "asking" and asker.asked == {"nome": 1}
    assert t2.session.last_assistant_at == T0


# if steps -------------------------------------------------------------------------------------------

def if_flow(predicate, **keys):
    return {"id": "f", "name": "F", "steps": [{"id": "c", "if": predicate, **keys},
                                              {"id": "sim", "say": "Sim", "then": "end"},
                                              {"id": "nao", "say": "Não"}]}


def test_an_if_step_that_holds_goes_to_the_next_step_with_no_next():
    """runtime.md §3.6.3 if step, §11.3: then absent -> no next; the run enters the next step."""
    agent, _, _ = build([if_flow({})])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    c = r.outcomes[0]
    assert (c.kind, c.status, c.code, c.key, c.next) == ("if", "ok", None, "f#k1:c:1", None)
    assert [m.text for m in r.messages] == ["Sim"]


def test_an_if_step_that_fails_without_else_ends_with_next_end():
    """flows.md §5.8, runtime.md §11.3: a missing else is "end", labelled next="end"."""
    agent, _, _ = build([if_flow({"silenced": True})])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("if", "ok", None)] and r.outcomes[0].next == "end"
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")] and r.messages == []


def test_an_if_step_that_fails_follows_else():
    """runtime.md §3.6.3 if step: false -> else."""
    agent, _, _ = build([if_flow({"silenced": True}, **{"else": "nao"})])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.outcomes[0].next == "nao" and [m.text for m in r.messages] == ["Não"]


def test_an_if_step_predicate_sees_the_run_and_its_input():
    """flows.md §7.5: an if step's ctx.run is the run, ctx.input the run's input."""
    seen = []

    def pred(ctx):
        seen.append((ctx.run.id, ctx.input, ctx.context, ctx.silenced, ctx.now))
        return ctx.input["ok"]

    agent, _, _ = build([if_flow(pred, then="sim", **{"else": "nao"})])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"ok": False}}, context={"c": 1})
    assert seen == [("f#k1", {"ok": False}, {"c": 1}, None, NOW0)]
    assert r.outcomes[0].next == "nao"


# then targets ----------------------------------------------------------------------------------------

def test_a_step_and_clear_target_deletes_the_data_then_jumps():
    """runtime.md §3.6.4: {step, clear} deletes the slugs from session.data, then enters the step; next = its id."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "poe", "do": "poe"},
        {"id": "pula", "if": {}, "then": {"step": "fim", "clear": ["nome"]}},
        {"id": "meio", "say": "Meio"},
        {"id": "fim", "say": "Fim: {{data.nome}} / {{data.cidade}}"}]}
    agent, _, _ = build([flow], fields={"nome": {"type": "string"}, "cidade": {"type": "string"}},
                        actions={"poe": setter(nome="Ana", cidade="Curitiba")})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["Fim: {{data.nome}} / Curitiba"]
    assert r.outcomes[1].next == "fim"
    assert r.session.data == {"cidade": "Curitiba"}


def test_a_clear_target_resets_the_asked_count_so_the_fixed_question_goes_out_again():
    """flows.md §2.5, §5.3 rule 5: clear deletes run.asked too; the question goes out again at the new visit."""
    fields = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "q", "collect": ["nome"], "question": "Qual é o seu nome?",
         "branches": [{"if": lambda ctx: bool((ctx.context or {}).get("reset")),
                       "then": {"step": "q", "clear": ["nome"]}}]}]}
    agent, _, _ = build([flow], fields=fields)
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.kind, m.key) for m in t1.messages] == [("Qual é o seu nome?", "verbatim", "f#k1:q:1")]
    assert t1.session.runs[0].asked == {"nome": 1}
    t2 = agent.turn(session_id="s1", session=t1.session, message="como?", id="m1", context={"reset": True})
    branch = [o for o in t2.outcomes if o.code == "branch"][0]
    assert (branch.kind, branch.status, branch.key, branch.next) == ("collect", "ok", "f#k1:q:1", "q")
    assert [(m.text, m.kind, m.key) for m in t2.messages] == [("Qual é o seu nome?", "verbatim", "f#k1:q:2")]
    assert t2.session.runs[0].asked == {"nome": 1} and t2.llm_calls == 0


def test_a_flow_target_chains_a_child_that_moves_in_the_same_turn():
    """runtime.md §3.6.4 Chaining: the parent ends `flow` (no line); the child is ${child}#${parentStepKey}, hop + 1."""
    pai = {"id": "pai", "name": "Pai", "steps": [
        {"id": "vai", "if": {}, "then": {"flow": "{{input.proximo}}", "input": {"de": "{{data.x}}"}}}]}
    filho = {"id": "filho", "name": "Filho", "steps": [{"id": "oi", "say": "De {{input.de}}"}]}
    agent, _, _ = build([pai, filho])
    r = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1", "input": {"proximo": "filho"}})
    assert lines(r) == [("if", "ok", None), ("say", "ok", None)]
    assert r.outcomes[0].next == "flow:{{input.proximo}}"               # §11.3: the template as written
    assert [(s.run_id, s.dedupe_key) for s in r.started] == [
        ("pai#k1", "pai:s1:k1"), ("filho#pai#k1:vai:1", "filho:s1:pai#k1%3Avai%3A1")]   # docs/guide/limits.md
    assert [(e.id, e.reason) for e in r.ended] == [("pai#k1", "flow"), ("filho#pai#k1:vai:1", "end")]
    child = r.ended[1]
    assert child.trigger == {"kind": "flow", "key": "pai#k1:vai:1", "payload": {"de": "{{data.x}}"}}
    assert child.input == {"de": "{{data.x}}"} and child.hop == 1     # input as written, not rendered
    assert [m.text for m in r.messages] == ["De {{data.x}}"]


def test_a_flow_target_without_input_passes_the_parents_input():
    """runtime.md §3.6.4 Chaining rule 5: payload = the target's input, else the parent's input."""
    pai = {"id": "pai", "name": "Pai", "steps": [{"id": "vai", "if": {}, "then": {"flow": "filho"}}]}
    filho = {"id": "filho", "name": "Filho", "steps": [{"id": "oi", "say": "Oi {{input.nome}}"}]}
    agent, _, _ = build([pai, filho])
    r = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1", "input": {"nome": "Ana"}})
    assert [m.text for m in r.messages] == ["Oi Ana"]
    assert r.ended[1].input == {"nome": "Ana"}


def test_a_flow_target_naming_no_flow_is_a_flow_gone_skip():
    """runtime.md §3.6.4 Chaining rule 4: skipped {flowId: child, anchor: session id, triggerKey: step key, flow-gone}."""
    pai = {"id": "pai", "name": "Pai", "steps": [{"id": "vai", "if": {}, "then": {"flow": "{{input.proximo}}"}}]}
    agent, _, _ = build([pai])
    r = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1", "input": {"proximo": "sumiu"}})
    assert [(s.flow_id, s.anchor, s.trigger_key, s.code) for s in r.skipped] == [
        ("sumiu", "s1", "pai#k1:vai:1", "flow-gone")]
    assert [(e.id, e.reason) for e in r.ended] == [("pai#k1", "flow")]
    assert r.session.runs == []


def test_a_chained_child_applies_its_clear_on_start():
    """runtime.md §3.6.4 Chaining rule 5, flows.md §3.4: clearOnStart applies to {flow} chains."""
    pai = {"id": "pai", "name": "Pai", "steps": [{"id": "poe", "do": "poe", "then": {"flow": "filho"}}]}
    filho = {"id": "filho", "name": "Filho", "clearOnStart": ["x"],
             "steps": [{"id": "oi", "say": "x={{data.x}} y={{data.y}}"}]}
    agent, _, _ = build([pai, filho], fields={"x": {"type": "string"}, "y": {"type": "string"}},
                        actions={"poe": setter(x="1", y="2")})
    r = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1"})
    assert [m.text for m in r.messages] == ["x={{data.x}} y=2"]
    assert r.session.data == {"y": "2"}


def test_a_chain_stops_at_the_hop_limit():
    """runtime.md §5 rule 4, flows.md §5.9: a start at hop >= 5 is skipped hop-limit."""
    eco = {"id": "eco", "name": "Eco", "steps": [{"id": "s", "say": "eco", "then": {"flow": "eco"}}]}
    agent, _, _ = build([eco])
    r = agent.turn(session_id="s1", start={"flow": "eco", "key": "k1"})
    assert len(r.messages) == 5 and len(r.started) == 5
    assert [e.hop for e in r.ended] == [0, 1, 2, 3, 4]
    assert [(s.code, s.message) for s in r.skipped] == [("hop-limit", "the chain reached the hop limit")]
    assert r.skipped[0].trigger_key == r.started[-1].run_id + ":s:1"


def test_a_start_at_hop_four_chains_once_more_then_hits_the_limit():
    """runtime.md §2.2, §5 rule 4: a start carries its hop; the child is hop + 1."""
    pai = {"id": "pai", "name": "Pai", "steps": [{"id": "vai", "if": {}, "then": {"flow": "filho"}}]}
    filho = {"id": "filho", "name": "Filho", "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([pai, filho])
    r4 = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1", "hop": 3})
    assert [m.text for m in r4.messages] == ["Oi"] and r4.ended[-1].hop == 4
    r5 = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1", "hop": 4})
    assert [s.code for s in r5.skipped] == ["hop-limit"] and r5.messages == []


# onEnd ------------------------------------------------------------------------------------------------

def test_on_end_end_ends_the_run_with_reason_end():
    """runtime.md §3.6.5: onEnd "end" (default) ends the run, no line."""
    agent, _, _ = build([{"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}]}])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")]
    assert lines(r) == [("say", "ok", None)] and r.session.runs == []


def test_on_end_reset_restarts_the_flow_keeping_data_until_the_hop_limit():
    """runtime.md §3.6.5, flows.md §3.6: reset ends `reset`, restarts at step one, data and input kept, hop + 1."""
    def count(params, ctx):
        ctx.set({"n": (ctx.data.get("n") or 0) + 1})

    flow = {"id": "f", "name": "F", "onEnd": "reset", "clearOnStart": ["n"],
            "steps": [{"id": "conta", "do": "conta"}, {"id": "oi", "say": "{{input.x}} {{data.n}}"}]}
    agent, _, _ = build([flow], fields={"n": {"type": "integer"}}, actions={"conta": action(count)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"x": "X"}})
    assert [m.text for m in r.messages] == ["X 1", "X 2", "X 3", "X 4", "X 5"]
    assert [s.run_id for s in r.started][:2] == ["f#k1", "f#f#k1:oi:1"]
    assert [(e.reason, e.hop) for e in r.ended] == [("reset", h) for h in range(5)]
    assert r.ended[1].trigger == {"kind": "flow", "key": "f#k1:oi:1", "payload": {"x": "X"}}
    assert [s.code for s in r.skipped] == ["hop-limit"]
    assert r.session.data == {"n": 5}


def test_on_end_reset_keys_by_the_last_steps_visit_even_when_unvisited():
    """runtime.md §3.6.5, §8: the reset key is the step key of the flow's last step (visit 0 when never entered)."""
    flow = {"id": "f", "name": "F", "onEnd": "reset",
            "steps": [{"id": "a", "say": "A", "then": "end"}, {"id": "ultimo", "say": "nunca"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [s.run_id for s in r.started][:2] == ["f#k1", "f#f#k1:ultimo:0"]


def test_on_end_reset_of_a_flow_without_steps_ends_as_end():
    """runtime.md §3.6.5: a flow with no steps ends as "end"."""
    agent, _, _ = build([{"id": "f", "name": "F", "onEnd": "reset", "steps": []}])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")] and len(r.started) == 1


def test_on_end_stay_returns_to_the_last_talk_step_and_answers_every_message():
    """runtime.md §4.7: the run re-enters its stay step (new visit, staying) and answers each message with a new key."""
    logged = []
    flow = {"id": "faq", "name": "FAQ", "onEnd": "stay",
            "steps": [{"id": "p", "prompt": "Responda a dúvida."}, {"id": "registra", "do": "log"}]}
    agent, provider, _ = build([flow], actions={"log": action(lambda p, c: logged.append(c.key))},
                               script={"speak": [{"message": "Oi!"}, {"message": "R1"}, {"message": "R2"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "faq", "key": "k1"})
    run = t1.session.runs[0]
    assert (run.step_id, run.status, run.staying, run.visits) == ("p", "asking", True, {"p": 2, "registra": 1})
    assert t1.ended == []
    t2 = agent.turn(session_id="s1", session=t1.session, message="e o preço?", id="m1")
    assert [(m.text, m.key) for m in t2.messages] == [("R1", "faq#k1:p:2")]
    t3 = agent.turn(session_id="s1", session=t2.session, message="e o prazo?", id="m2")
    assert [(m.text, m.key) for m in t3.messages] == [("R2", "faq#k1:p:3")]
    assert logged == ["faq#k1:registra:1"] and t3.llm_calls == 1
    assert t3.session.runs[0].staying is True and t3.session.runs[0].status == "asking"


def test_on_end_stay_without_a_talk_step_ends_as_end():
    """runtime.md §3.6.5: a flow without any talk step ends as "end"."""
    agent, _, _ = build([{"id": "f", "name": "F", "onEnd": "stay", "steps": [{"id": "oi", "say": "Oi"}]}])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")] and r.session.runs == []


# The premise: while and the default -------------------------------------------------------------------

def test_a_false_while_ends_the_run_before_it_moves():
    """runtime.md §3.6.2: a failed premise ends the run skipped premise-changed (kind "if": no current step)."""
    flow = {"id": "f", "name": "F", "while": lambda ctx: (ctx.context or {}).get("aberto", False),
            "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, context={"aberto": False})
    assert lines(r) == [("if", "skipped", "premise-changed")]
    line = r.outcomes[0]
    assert (line.run_id, line.step_id, line.key, line.message) == (
        "f#k1", None, None, "the flow's while condition no longer holds")
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "skipped")] and r.messages == []
    ok = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, context={"aberto": True})
    assert [m.text for m in ok.messages] == ["Oi"]


def test_while_is_checked_again_when_a_parked_run_wakes():
    """flows.md §3.5: the premise is judged every time the run is about to move, with this turn's context."""
    flow = {"id": "f", "name": "F", "while": lambda ctx: (ctx.context or {}).get("aberto", False),
            "steps": [{"id": "espera", "wait": "1h"}, {"id": "oi", "say": "Oi"}]}
    agent, _, clock = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, context={"aberto": True})
    clock.advance("1h")
    ok = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"aberto": True})
    assert [m.text for m in ok.messages] == ["Oi"]
    closed = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"aberto": False})
    # I-W follows the wait's then in Ingest; the premise fails when Run moves the run onto "oi".
    assert lines(closed) == [("wait", "ok", "no-reply"), ("say", "skipped", "premise-changed")]
    assert closed.messages == [] and closed.ended[0].reason == "skipped"


def test_a_premise_that_turns_false_mid_turn_does_not_stop_the_move():
    """runtime.md §3.6.2: the premise is checked when a run is about to move, not between its steps."""
    flow = {"id": "f", "name": "F", "while": {"known": ["nome"]},
            "steps": [{"id": "tira", "do": "tira"}, {"id": "oi", "say": "Oi"}]}
    poe = {"id": "poe", "name": "Poe", "steps": [{"id": "a", "do": "poe"}]}
    agent, _, _ = build([poe, flow], fields={"nome": {"type": "string"}},
                        actions={"poe": setter(nome="Ana"), "tira": setter(nome=None)})
    t1 = agent.turn(session_id="s1", start={"flow": "poe", "key": "k0"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k1"})
    assert [m.text for m in t2.messages] == ["Oi"]


def test_the_default_premise_holds_while_any_trigger_of_the_runs_kind_passes():
    """runtime.md §3.6.2 rule 3: without while, any trigger of the run's kind with no if, or a holding if."""
    flow = {"id": "f", "name": "F",
            "on": [{"event": "etapa", "if": lambda ctx: (ctx.context or {}).get("etapa") == "a"},
                   {"event": "etapa", "if": lambda ctx: (ctx.context or {}).get("etapa") == "b"}],
            "steps": [{"id": "espera", "wait": "1h"}, {"id": "oi", "say": "Oi"}]}
    agent, _, clock = build([flow], events={"etapa": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="etapa", key="e1", context={"etapa": "a"})
    clock.advance("1h")
    b = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"etapa": "b"})
    assert [m.text for m in b.messages] == ["Oi"]
    c = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"etapa": "c"})
    assert lines(c)[-1] == ("say", "skipped", "premise-changed") and c.messages == []


def test_a_started_run_has_no_trigger_of_its_kind_so_its_premise_holds():
    """runtime.md §3.6.2 rule 3: a start (or chain) has no trigger of its kind: the premise holds."""
    flow = {"id": "f", "name": "F", "on": [{"event": "etapa", "if": {"silenced": True}}],
            "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([flow], events={"etapa": F.EventDef()})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["Oi"]


# clearOnStart -------------------------------------------------------------------------------------------

def test_clear_on_start_deletes_fields_when_a_run_starts():
    """runtime.md §5 rule 6, flows.md §3.4: clearOnStart fields are deleted at the start."""
    poe = {"id": "poe", "name": "Poe", "steps": [{"id": "a", "do": "poe"}]}
    flow = {"id": "f", "name": "F", "clearOnStart": ["x"], "steps": [{"id": "oi", "say": "x={{data.x}}"}]}
    agent, _, _ = build([poe, flow], fields={"x": {"type": "string"}, "y": {"type": "string"}},
                        actions={"poe": setter(x="1", y="2")})
    t1 = agent.turn(session_id="s1", start={"flow": "poe", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2"})
    assert [m.text for m in t2.messages] == ["x={{data.x}}"]
    assert t2.session.data == {"y": "2"}


def test_a_refused_start_does_not_clear():
    """runtime.md §5: clearOnStart is part of the commit (rule 6); a refused start commits nothing."""
    poe = {"id": "poe", "name": "Poe", "steps": [{"id": "a", "do": "poe"}]}
    flow = {"id": "f", "name": "F", "clearOnStart": ["x"], "steps": [{"id": "oi", "say": "x={{data.x}}"}]}
    agent, _, _ = build([poe, flow], fields={"x": {"type": "string"}}, actions={"poe": setter(x="1")})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "poe", "key": "k2"})
    t3 = agent.turn(session_id="s1", session=t2.session, start={"flow": "f", "key": "k1"})   # same key: claimed
    assert [s.code for s in t3.skipped] == ["already-claimed"]
    assert t3.session.data == {"x": "1"}


# Caps and edits -------------------------------------------------------------------------------------------

def test_fifty_steps_in_one_move_end_the_run_with_step_loop():
    """runtime.md §3.6.1 rule 8, flows.md §5.9: two if steps pointing at each other hit the 50-step cap."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "if": {}, "then": "b", "else": "b"},
                                              {"id": "b", "if": {}, "then": "a", "else": "a"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [o.kind for o in r.outcomes].count("if") == 51             # 50 if / ok lines + the step-loop line
    assert lines(r)[:50] == [("if", "ok", None)] * 50
    loop = r.outcomes[-1]
    assert (loop.kind, loop.status, loop.code, loop.key) == ("if", "failed", "step-loop", None)
    assert loop.message == "the run moved through 50 steps in one turn"
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "failed")]


def test_a_run_whose_current_step_was_removed_ends_step_gone():
    """runtime.md §3.6.1 rule 8: the current step id is not in the flow -> skipped step-gone."""
    v1 = {"id": "f", "name": "F", "steps": [{"id": "espera", "wait": "1h"}, {"id": "oi", "say": "Oi"}]}
    v2 = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, clock = build([v1])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    edited, _, _ = build([v2], clock=clock)
    clock.advance("1h")
    r = edited.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    # §4.8: the current step is missing, so the line's kind is "if"; its stepId is still the run's.
    assert [(o.kind, o.status, o.code, o.step_id, o.key) for o in r.outcomes] == [
        ("if", "skipped", "step-gone", "espera", None)]
    assert r.outcomes[0].message == "the step is no longer in the flow"
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "skipped")] and r.messages == []


def test_a_then_to_a_missing_step_ends_step_gone_on_the_step_it_was_on():
    """runtime.md §3.6.4: a step id not in the flow is not entered; the line takes the stepId and kind of the step the run was on."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "say": "A", "then": "b"}, {"id": "b", "say": "B"}]}
    agent, _, _ = build([flow])
    # Edited under a built agent, past its freeze as only a test may: construction refuses this flow.
    dict.__setitem__(agent.flow_by_id["f"]["steps"][0], "then", "sumiu")
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["A"]
    assert [(o.kind, o.status, o.code, o.step_id) for o in r.outcomes] == [
        ("say", "ok", None, "a"), ("say", "skipped", "step-gone", "a")]
    assert r.outcomes[0].next == "sumiu"
    assert [(e.id, e.reason, e.step_id) for e in r.ended] == [("f#k1", "skipped", "a")]


def test_a_run_whose_flow_was_removed_ends_flow_gone():
    """runtime.md §3.6.1 rule 3, §3.2 I-W rule 4: the wake is honoured; Run ends the run skipped flow-gone."""
    v1 = {"id": "f", "name": "F", "steps": [{"id": "espera", "wait": "1h"}, {"id": "oi", "say": "Oi"}]}
    agent, _, clock = build([v1])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    edited, _, _ = build([], clock=clock)
    clock.advance("1h")
    r = edited.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(o.status, o.code, o.run_id, o.flow_id, o.key) for o in r.outcomes] == [
        ("skipped", "flow-gone", "f#k1", "f", None)]
    # §4.8: with the flow gone the current step cannot be found, so the line's kind is "if".
    assert r.outcomes[0].kind == "if"
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "skipped")]


def test_a_start_of_an_unknown_flow_is_a_flow_gone_skip():
    """runtime.md §3.2 Start rule 1: {flowId, anchor: session id, triggerKey: start key, flow-gone}."""
    agent, _, _ = build([])
    r = agent.turn(session_id="s1", start={"flow": "sumiu", "key": "k1"})
    assert [(s.flow_id, s.anchor, s.trigger_key, s.code) for s in r.skipped] == [("sumiu", "s1", "k1", "flow-gone")]
    assert r.changed is True and r.started == [] and r.outcomes == []


# Absent keys written as None -------------------------------------------------------------------------------

def test_an_if_step_whose_else_is_none_ends_like_a_missing_else():
    """flows.md Notation and §5.8: a None value means "not set", so a false if step with else None goes to "end"."""
    agent, _, _ = build([if_flow({"silenced": True}, **{"else": None})])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.outcomes[0].next == "end"
    assert r.messages == [] and [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")]


def test_targets_written_as_none_count_as_absent():
    """flows.md Notation: then None and onFail None are "not set" (next step; then)."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "a", "do": "falha", "then": None, "onFail": None}, {"id": "b", "say": "B", "then": None},
        {"id": "c", "say": "C"}]}
    agent, _, _ = build([flow], actions={"falha": action(lambda p, c: {"failed": "x"})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["B", "C"] and r.outcomes[0].next is None


# Talk steps reached by code -----------------------------------------------------------------------------------

def test_a_collect_step_whose_fields_are_known_is_skipped_already_known():
    """runtime.md §3.6.3 talk rule 2: a fresh arrival with nothing pending -> already-known, next = then, no call."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "poe", "do": "poe"},
                                              {"id": "q", "collect": ["nome"], "then": "fim"},
                                              {"id": "x", "say": "x"}, {"id": "fim", "say": "Fim"}]}
    agent, provider, _ = build([flow], fields={"nome": {"type": "string"}}, actions={"poe": setter(nome="Ana")})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    q = r.outcomes[1]
    assert (q.kind, q.status, q.code, q.key, q.next) == ("collect", "skipped", "already-known", "f#k1:q:1", "fim")
    assert q.message == "every field this step collects is known"
    assert [m.text for m in r.messages] == ["Fim"] and provider.calls == []


def test_a_fixed_question_reached_after_speaking_goes_out_in_the_same_turn_with_the_delay():
    """runtime.md §3.6.7, §3.8 item 3.10: a talk step reached in Settle's drain sends its fixed question at once."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "Cumprimente."}, {"id": "pausa", "wait": "2s"},
                                              {"id": "q", "collect": ["nome"], "question": "Qual é o seu nome?"}]}
    agent, _, _ = build([flow], fields={"nome": {"type": "string"}}, script={"speak": [{"message": "Olá!"}]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.kind, m.key, m.after_ms) for m in r.messages] == [
        ("Olá!", "ai", "f#k1:p:1", 0), ("Qual é o seu nome?", "verbatim", "f#k1:q:1", 2000)]
    assert lines(r)[-1] == ("collect", "ok", "asked-fixed")
    run = r.session.runs[0]
    assert (run.status, run.asked) == ("asking", {"nome": 1}) and r.llm_calls == 1


def test_a_talk_step_reached_after_speaking_waits_for_the_next_message():
    """runtime.md §3.6.3 talk rule 6: after the speak phase, a talk step without a fixed question just asks."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "Cumprimente."}, {"id": "q", "prompt": "Pergunte."}]}
    agent, _, _ = build([flow], script={"speak": [{"message": "Olá!"}]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["Olá!"] and r.llm_calls == 1
    assert (r.session.runs[0].step_id, r.session.runs[0].status) == ("q", "asking")


def test_the_step_cap_counts_per_move_not_per_turn():
    """runtime.md §3.6.1 rule 8: the count is per move; Settle's drain starts again from zero."""
    steps = ([{"id": f"a{i}", "if": {}} for i in range(30)] + [{"id": "p", "prompt": "Diga oi."}]
             + [{"id": f"b{i}", "if": {}} for i in range(30)])
    agent, _, _ = build([{"id": "f", "name": "F", "steps": steps}], script={"speak": [{"message": "Oi"}]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert "step-loop" not in [o.code for o in r.outcomes]
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "end")]


def test_a_say_from_another_run_never_blocks_a_talk_step_on_an_event_turn():
    """runtime.md §3.6.6: another-reply applies on message turns only."""
    quem = {"id": "quem", "name": "Q", "on": [{"event": "e"}], "steps": [{"id": "oi", "say": "Oi"}]}
    fala = {"id": "fala", "name": "F", "on": [{"event": "e"}], "steps": [{"id": "p", "prompt": "Diga algo."}]}
    agent, _, _ = build([quem, fala], events={"e": F.EventDef()}, script={"speak": [{"message": "Algo."}]})
    r = agent.turn(session_id="s1", event="e", key="e1")
    assert [m.text for m in r.messages] == ["Oi", "Algo."]
    assert "another-reply" not in [o.code for o in r.outcomes]


# onEnd "stay" and the floor ----------------------------------------------------------------------------------

def test_a_staying_run_that_reaches_the_end_while_another_asks_is_suspended_behind_it():
    """runtime.md §4.7 rule 3: another run asking, not a message for this run: the staying run is suspended."""
    fields = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}
    triagem = {"id": "a", "name": "A", "steps": [{"id": "q", "collect": ["nome"]}]}
    faq = {"id": "b", "name": "B", "onEnd": "stay", "steps": [{"id": "p", "prompt": "Responda."},
                                                               {"id": "espera", "wait": "1h"}]}
    agent, _, clock = build([triagem, faq], fields=fields,
                            script={"speak": [{"message": "Nome?"}, {"message": "Resposta."}]})
    t1 = agent.turn(session_id="s1", start={"flow": "a", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "b", "key": "k2"})
    assert [(r.id, r.status) for r in t2.session.runs] == [("a#k1", "asking"), ("b#k2", "waiting")]
    clock.advance("1h")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t2.schedule[0].key)
    runs = {r.id: r for r in t3.session.runs}
    assert runs["a#k1"].status == "asking"
    b = runs["b#k2"]
    assert (b.status, b.step_id, b.staying, b.visits["p"], b.suspended_at) == (
        "suspended", "p", True, 2, "2026-09-20T11:00:00.000Z")


def test_a_staying_run_whose_flow_left_stay_finishes_on_its_next_move():
    """runtime.md §3.6.1 rule 5: staying, but the flow's onEnd is no longer "stay": finish the flow now."""
    v1 = {"id": "faq", "name": "FAQ", "onEnd": "stay", "steps": [{"id": "p", "prompt": "Responda."}]}
    v2 = {"id": "faq", "name": "FAQ", "steps": [{"id": "p", "prompt": "Responda."}]}
    agent, provider, clock = build([v1], script={"speak": [{"message": "Oi!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "faq", "key": "k1"})
    assert t1.session.runs[0].staying is True
    edited, provider2, _ = build([v2], clock=clock, idle="silent")
    t2 = edited.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert [(e.id, e.reason) for e in t2.ended] == [("faq#k1", "end")]
    assert t2.messages == [] and provider2.calls == []


def test_a_run_that_reaches_stay_on_an_unanswered_message_answers_it_at_once():
    """runtime.md §4.7 rule 5, flows.md §3.6 rule 4: the stay step answers the message in the same turn."""
    logged = []
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    flow = {"id": "faq", "name": "FAQ", "on": [{"message": []}], "onEnd": "stay",
            "steps": [{"id": "q", "collect": ["nome"]}, {"id": "log", "do": "log"}]}
    agent, _, _ = build([flow], fields=fields, actions={"log": action(lambda p, c: logged.append(c.key))},
                        script={"speak": [{"message": "Nome?"}, {"message": "Prazer, Ana! Mais alguma dúvida?"}],
                                "understand": [{"fields": {"nome": "Ana"}}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="Ana", id="m2")
    assert [(m.text, m.key) for m in t2.messages] == [("Prazer, Ana! Mais alguma dúvida?", "faq#m1:q:2")]
    assert logged == ["faq#m1:log:1"] and t2.llm_calls == 2
    run = t2.session.runs[0]
    assert (run.step_id, run.status, run.staying, run.visits["q"]) == ("q", "asking", True, 3)
    assert "already-known" not in [o.code for o in t2.outcomes]       # staying: no already-known skip


def test_a_staying_run_under_silence_keeps_asking_without_a_word():
    """runtime.md §4.7 rule 5, §9: silenced, the stay step does not answer; the run stays asking."""
    flow = {"id": "faq", "name": "FAQ", "onEnd": "stay", "steps": [{"id": "p", "prompt": "Responda."}]}
    agent, provider, _ = build([flow], script={"speak": [{"message": "Oi!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "faq", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="dúvida", id="m1", silenced="pausa")
    assert t2.messages == [] and t2.outcomes == [] and len(provider.calls) == 1
    assert (t2.session.runs[0].status, t2.session.runs[0].visits) == ("asking", {"p": 2})
