"""Conformance review, Run phase: what the judged message does once Decide is over.

Adversarial tests of runtime.md §3.5 ("The displaced asker"), §3.6 (resume, queue, hand-back loop, choosing the
speaker, fixed question), §4.4-§4.7 (floor, stack, hand-back, staying), §9 (silenced with `understand: True`);
flows.md §3.6, §5.3, §6. Helpers are shared with tests/turn/test_conformance_routing.py.
"""
from test_conformance_routing import (SUPORTE, T0, VENDAS, build, flow, noop, section, status,
                                      understand_calls)
import pytest

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)


# §3.5 "The displaced asker": routing never suspends the asker -----------------------------------------------------


def test_a_displaced_asker_later_routed_run_moves_first_and_may_leave_its_step():
    """runtime.md §3.5 "The displaced asker": routing never suspends the asker; when the routed run comes later
    in `session.runs`, the asker moves first as a resuming asker (its step completed by this message's value:
    `ok`, next step entered and asking), then the routed run's talk step suspends it and speaks."""
    vendas = flow("vendas", on=[{"message": ["quer comprar"]}], steps=[
        {"id": "q", "collect": ["nome"]}, {"id": "fim", "prompt": "Agradeça."}])
    agent, _, _ = build([vendas, SUPORTE], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 0, "suporte": 90}, "fields": {"nome": "Bia"}}],
        "speak": [{"message": "Nome?"}, {"message": "Qual o pedido?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="sou a Bia e meu pedido sumiu", id="m2")
    assert [(o.run_id, o.kind, o.status, o.code, o.next) for o in t2.outcomes] == [
        ("vendas#m1", "collect", "ok", None, None), ("suporte#m2", "collect", "ok", None, None)]
    assert [m.key for m in t2.messages] == ["suporte#m2:q:1"]
    vendas_run = t2.session.runs[0]
    assert (vendas_run.status, vendas_run.step_id, vendas_run.visits) == ("suspended", "fim", {"q": 1, "fim": 1})


def test_a_routed_say_only_flow_answers_so_the_kept_asker_writes_another_reply():
    """runtime.md §3.5 "The displaced asker" ("it keeps the floor and answers the message, unless another run's
    `say` already did"), §3.6.6 rule 2."""
    aviso = flow("aviso", on=[{"message": ["pergunta o horário"]}], steps=[{"id": "s", "say": "Abrimos às 9h."}])
    agent, _, _ = build([VENDAS, aviso], {"understand": [{"flows": {"vendas": 90}},
                                                         {"flows": {"vendas": 0, "aviso": 90}}],
                                          "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="que horas abrem?", id="m2")
    assert [m.text for m in t2.messages] == ["Abrimos às 9h."] and t2.llm_calls == 1
    assert [(o.run_id, o.code) for o in t2.outcomes] == [("aviso#m2", None), ("vendas#m1", "another-reply")]
    assert status(t2) == [("vendas#m1", "asking")]


# §3.6 steps 1 and 3, §4.5-§4.6: resuming the stack and the hand-back ----------------------------------------------


def b_suspends_a(a_steps, b_steps, understand3, speak3=(), **options):
    """Flow a starts on "quero A" (m1) and asks "CPF?"; a second later "quero B" (m2) starts b, whose talk step
    asks "x?" and suspends a (runtime.md §4.4). ``understand3`` and ``speak3`` script the turn the test takes
    next. Returns (agent, provider, clock, the m2 result)."""
    a = flow("a", on=[{"message": ["quer A"]}], steps=a_steps)
    b = flow("b", on=[{"message": ["quer B"]}], steps=b_steps)
    agent, provider, clock = build([a, b], {
        "understand": [{"flows": {"a": 90}}, {"flows": {"b": 90}}, understand3],
        "speak": [{"message": "CPF?"}, {"message": "x?"}, *speak3]}, **options)
    r = agent.turn(session_id="s1", message="quero A", id="m1")
    clock.advance("1s")
    r = agent.turn(session_id="s1", session=r.session, message="quero B", id="m2")
    return agent, provider, clock, r


# b collects x, then runs `anotar`: the tests of a's `if` branch on x read its log.
B_ASKS_X_THEN_ANOTAR = [{"id": "q", "collect": ["x"]}, {"id": "d", "do": "anotar"}]


def test_an_asker_that_leaves_in_decide_lets_the_start_of_run_resume_the_stack_with_its_if_branches():
    """runtime.md §3.6 step 1, §4.5: the asker's branch ends it in Decide, so nobody asks when Run begins: the
    most recently suspended run returns to asking and, on this message turn, its `if` branches are judged."""
    agent, _, _, r = b_suspends_a(
        [{"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["plano"]}, "then": "pro"}]},
         {"id": "x", "say": "Nunca."}, {"id": "pro", "say": "A: plano pro!"}],
        [{"id": "q", "collect": ["x", "plano"], "branches": [{"if": {"known": ["plano"]}, "then": "end"}]}],
        {"fields": {"plano": "pro"}})
    r = agent.turn(session_id="s1", session=r.session, message="sou do plano pro", id="m3")
    assert [(o.run_id, o.code, o.next) for o in r.outcomes if o.code == "branch"] == [
        ("b#m2", "branch", "end"), ("a#m1", "branch", "pro")]
    assert [m.text for m in r.messages] == ["A: plano pro!"] and r.session.runs == []


def test_a_run_resumed_at_the_start_of_run_has_no_when_branch_judged_even_if_the_reply_names_it():
    """runtime.md §3.6 step 1 ("`when` branches cannot fire: there is no judgement for it"), flows.md §6 rule 5:
    the suspended run's `when` branch is not in the call (it was not the floor run), and a reply that still
    answers it true under its real key does not move it; it asks again instead."""
    agent, provider, _, r = b_suspends_a(
        [{"id": "q", "collect": ["cpf"], "branches": [{"when": "a pessoa desiste", "then": "fim"}]},
         {"id": "fim", "say": "Tchau."}],
        [{"id": "q", "collect": ["x"], "branches": [{"if": {"known": ["plano"]}, "then": "end"}]}],
        {"branches": {"a#m1/q/0": True}}, [{"message": "Voltando: CPF?"}])
    r.session.data["plano"] = "pro"
    r = agent.turn(session_id="s1", session=r.session, message="desisto", id="m3")
    assert section(understand_calls(provider)[2], "branches") is None
    assert [(o.run_id, o.code) for o in r.outcomes if o.code == "branch"] == [("b#m2", "branch")]
    assert [m.key for m in r.messages] == ["a#m1:q:1:re:m3"] and status(r) == [("a#m1", "asking")]


def test_hand_back_walks_down_the_whole_stack_until_a_run_answers():
    """runtime.md §3.6 step 3, §4.6: the asker ends silently; the most recently suspended run resumes, moves and
    ends silently too; the next one down does the same; the bottom one answers the same message. Each resumed
    run moves as a resuming asker (`ok`, not `already-known`, when the understand call completed its step)."""
    steps = lambda slug: [{"id": "q", "collect": [slug]}, {"id": "d", "do": "anotar"}]    # noqa: E731
    a = flow("a", on=[{"message": ["quer A"]}], steps=[{"id": "q", "collect": ["cpf"]}])
    b = flow("b", on=[{"message": ["quer B"]}], steps=steps("x"))
    c = flow("c", on=[{"message": ["quer C"]}], steps=steps("y"))
    # d's flow collects x and y too, so the understand call is asked for them (model-calls.md §3.5)
    d = flow("d", on=[{"message": ["quer D"]}], collect=["x", "y", "pedido"], steps=steps("pedido"))
    anotar, log = noop()
    agent, provider, clock = build([a, b, c, d], {
        "understand": [{"flows": {"a": 90}}, {"flows": {"b": 90}}, {"flows": {"c": 90}}, {"flows": {"d": 90}},
                       {"fields": {"x": "1", "y": "2", "pedido": "3"}}],
        "speak": [{"message": "CPF?"}, {"message": "x?"}, {"message": "y?"}, {"message": "pedido?"},
                  {"message": "Anotei tudo. E o CPF?"}]}, actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="quero A", id="m1")
    for n, fid in enumerate("bcd", start=2):
        clock.advance("1s")
        r = agent.turn(session_id="s1", session=r.session, message=f"quero {fid.upper()}", id=f"m{n}")
    assert status(r) == [("a#m1", "suspended"), ("b#m2", "suspended"), ("c#m3", "suspended"), ("d#m4", "asking")]
    clock.advance("1s")
    r = agent.turn(session_id="s1", session=r.session, message="x 1, y 2, pedido 3", id="m5")
    assert log == ["d#m4:d:1", "c#m3:d:1", "b#m2:d:1"]
    assert [(o.run_id, o.status, o.code) for o in r.outcomes if o.kind == "collect"] == [
        ("d#m4", "ok", None), ("c#m3", "ok", None), ("b#m2", "ok", None), ("a#m1", "ok", None)]
    assert [(m.text, m.key) for m in r.messages] == [("Anotei tudo. E o CPF?", "a#m1:q:1:re:m5")]
    assert status(r) == [("a#m1", "asking")] and r.llm_calls == 2


def test_the_hand_back_judges_a_resumed_runs_if_branches_first():
    """runtime.md §3.6 step 3 ("resume ..., branches included"), §4.5: the run handed the message has its talk
    step's `if` branches judged before it moves."""
    anotar, log = noop()
    agent, _, clock, r = b_suspends_a(
        [{"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["x"]}, "then": "pronto"}]},
         {"id": "pronto", "say": "Com x, seguimos."}],
        B_ASKS_X_THEN_ANOTAR, {"fields": {"x": "1"}}, actions={"anotar": anotar})
    clock.advance("1s")
    r = agent.turn(session_id="s1", session=r.session, message="x é 1", id="m3")
    assert [(o.run_id, o.code, o.next) for o in r.outcomes if o.code == "branch"] == [("a#m1", "branch", "pronto")]
    assert [m.text for m in r.messages] == ["Com x, seguimos."] and r.session.runs == []


def test_no_hand_back_after_a_say_answered_the_message():
    """runtime.md §3.6 step 3: the loop runs only "while ... nobody has spoken yet": a `say` counts, so the
    suspended run stays suspended until Settle's resume (§3.8 item 5), which judges no branch and speaks not."""
    agent, _, _, r = b_suspends_a([{"id": "q", "collect": ["cpf"]}],
                                  [{"id": "q", "collect": ["x"]}, {"id": "s", "say": "Ok!"}], {"fields": {"x": "1"}})
    r = agent.turn(session_id="s1", session=r.session, message="x é 1", id="m3")
    assert [m.text for m in r.messages] == ["Ok!"] and r.llm_calls == 1
    assert status(r) == [("a#m1", "asking")] and [o.run_id for o in r.outcomes].count("a#m1") == 0


# §3.6 steps 4-5, §3.6.6-§3.6.7: another-reply and the fixed question ----------------------------------------------


def test_another_reply_is_checked_before_the_fixed_question():
    """runtime.md §3.6 step 5, §3.6.6 rule 2, §3.6.7 ("after the another-reply check"): a mention run's `say`
    answered the message, so the routed run's step writes `another-reply`, sends no fixed question and counts no
    ask; on the next message the fixed question goes out."""
    fields = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}
    geral = flow("geral", on=[{"message": []}], steps=[{"id": "q", "collect": ["nome"], "question": "Seu nome?"}])
    oi = flow("oi", on=[{"mention": []}], steps=[{"id": "s", "say": "Bem-vindo!"}])
    agent, provider, _ = build([oi, geral], {}, fields=fields)
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert [m.text for m in t1.messages] == ["Bem-vindo!"]
    assert [(o.run_id, o.kind, o.status, o.code, o.key) for o in t1.outcomes if o.run_id == "geral#m1"] == [
        ("geral#m1", "collect", "skipped", "another-reply", "geral#m1:q:1")]
    run = t1.session.runs[0]
    assert (run.id, run.status, run.asked) == ("geral#m1", "asking", {})
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi?", id="m2")
    assert [(m.text, m.kind, m.key) for m in t2.messages] == [("Seu nome?", "verbatim", "geral#m1:q:1")]
    assert t2.llm_calls == 0 and provider.calls == [] and t2.session.runs[0].asked == {"nome": 1}


def test_a_runs_own_say_does_not_block_its_talk_step():
    """runtime.md §3.6.6 rule 2: only a run *other than* the talk's run blocks it with `another-reply`."""
    f = flow("f", on=[{"message": []}], steps=[{"id": "s", "say": "Olá!"}, {"id": "q", "collect": ["cpf"]}])
    agent, _, _ = build([f], {"speak": [{"message": "Qual o CPF?"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert [m.text for m in r.messages] == ["Olá!", "Qual o CPF?"]
    assert "another-reply" not in [o.code for o in r.outcomes]


# §9: silenced with `understand: True` -----------------------------------------------------------------------------


QUIET = {"reason": "humano assumiu", "understand": True}
# a asks the CPF; its `if` branch on x, once x is known, leads to `anotar`.
A_IF_X_THEN_ANOTAR = [{"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["x"]}, "then": "d"}]},
                      {"id": "d", "do": "anotar"}]


def test_understand_true_fires_the_askers_when_branch_and_a_fresh_talk_step_then_ends_silenced():
    """runtime.md §9 (`understand: True`: "routing, mentions, branches and field extraction happen"), §3.5.2,
    §3.6.3 talk rule 3: the `when` branch fires; its `do` target runs; the next talk step, reached fresh, ends
    the run `silenced`. Only the understand call is spent."""
    f = flow("f", on=[{"message": []}], steps=[
        {"id": "q", "collect": ["cpf"], "branches": [{"when": "a pessoa desiste", "then": "d"}]},
        {"id": "d", "do": "anotar"}, {"id": "p", "prompt": "Despeça-se."}])
    anotar, log = noop()
    agent, provider, _ = build([f], {"understand": [{"branches": {"q1": True}}], "speak": [{"message": "CPF?"}]},
                               actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="desisto", id="m2", silenced=QUIET)
    assert t2.llm_calls == 1 and t2.messages == [] and log == ["f#m1:d:1"]
    assert [(o.kind, o.status, o.code) for o in t2.outcomes] == [
        ("collect", "ok", "branch"), ("do", "ok", None), ("prompt", "skipped", "silenced")]
    assert [(e.id, e.reason) for e in t2.ended] == [("f#m1", "skipped")]


def test_understand_true_routes_away_but_the_asker_keeps_asking_and_the_routed_run_ends_silenced():
    """runtime.md §9 and its Note, §3.6.3 talk rule 3: the routed run starts (claim written) and ends `silenced`
    at its talk step; the displaced asker moves as a resuming asker and stays `asking` with no line."""
    agent, provider, _ = build([VENDAS, SUPORTE], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 0, "suporte": 90}}],
        "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="meu pedido!", id="m2", silenced=QUIET)
    assert [s.run_id for s in t2.started] == ["suporte#m2"] and "suporte:s1:" in t2.session.claims
    assert [(o.run_id, o.code) for o in t2.outcomes] == [("suporte#m2", "silenced")]
    assert status(t2) == [("vendas#m1", "asking")] and t2.messages == [] and t2.llm_calls == 1


def test_understand_true_starts_a_mention_judged_true_and_writes_judged_fields():
    """runtime.md §9: mentions and field extraction happen under `understand: True`; a mention run's `say`
    ends it `silenced`; the asker stays asking; no speak call."""
    m = flow("conc", on=[{"mention": ["cita um concorrente"]}], steps=[{"id": "s", "say": "Somos melhores."}])
    vendas = {**VENDAS, "collect": ["cpf", "nome"]}         # so the understand call is asked for nome
    agent, _, _ = build([vendas, m], {
        "understand": [{"flows": {"vendas": 90}}, {"mentions": {"conc": True}, "fields": {"nome": "Bia"}}],
        "speak": [{"message": "CPF?"}]})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="Bia; a ACME é melhor", id="m2", silenced=QUIET)
    assert [s.run_id for s in t2.started] == ["conc#m2"] and t2.session.data == {"nome": "Bia"}
    assert [(o.run_id, o.kind, o.code) for o in t2.outcomes] == [("conc#m2", "say", "silenced")]
    assert status(t2) == [("vendas#m1", "asking")] and t2.llm_calls == 1


def test_understand_true_makes_no_hand_back():
    """runtime.md §3.6 step 3: the hand-back loop runs only on a message turn "that is not silenced": the asker
    finishes silently and the suspended run comes back only through Settle's resume (§3.8 item 5), which judges
    no branch, so its `if` branch that now holds does not fire (a hand-back would have fired it, §4.5)."""
    anotar, log = noop()
    agent, _, _, r = b_suspends_a(A_IF_X_THEN_ANOTAR, B_ASKS_X_THEN_ANOTAR, {"fields": {"x": "1"}},
                                  actions={"anotar": anotar})
    r = agent.turn(session_id="s1", session=r.session, message="x é 1", id="m3", silenced=QUIET)
    assert log == ["b#m2:d:1"] and r.messages == [] and status(r) == [("a#m1", "asking")]
    assert [o.run_id for o in r.outcomes if o.run_id == "a#m1"] == []


def test_without_silence_the_same_message_is_handed_back_and_fires_the_resumed_runs_if_branch():
    """The control case of the test above (runtime.md §3.6 step 3, §4.5-§4.6): unsilenced, the hand-back resumes
    the suspended run with its `if` branches judged, so the branch fires and its `do` runs."""
    anotar, log = noop()
    agent, _, _, r = b_suspends_a(A_IF_X_THEN_ANOTAR, B_ASKS_X_THEN_ANOTAR, {"fields": {"x": "1"}},
                                  actions={"anotar": anotar}, idle="silent")
    r = agent.turn(session_id="s1", session=r.session, message="x é 1", id="m3")
    assert log == ["b#m2:d:1", "a#m1:d:1"] and r.session.runs == []


def test_a_plain_reason_judges_no_when_branch_but_the_lone_unscored_flow_is_routed():
    """runtime.md §9 (plain reason: "no `when` branch fires"; "The lone eligible flow of the unscored-start rule
    ... starts the same way"), §3.5 rule 3: zero calls, the unscored flow starts and its `do` runs."""
    f = flow("f", on=[{"message": ["quer um orçamento"]}], steps=[{"id": "d", "do": "anotar"}])
    anotar, log = noop()
    agent, provider, _ = build([f], {}, idle="silent", actions={"anotar": anotar})
    r = agent.turn(session_id="s1", message="oi", id="m1", silenced="pausa")
    assert provider.calls == [] and [s.run_id for s in r.started] == ["f#m1"] and log == ["f#m1:d:1"]


# §4.7: staying (`onEnd: "stay"`) and the floor --------------------------------------------------------------------


def stay_flow(fid, on=None, first=None):
    """A stay flow whose only talk step `p` sits after the step that ends it, so it is reached only by the stay."""
    return flow(fid, on=on, onEnd="stay", steps=[first or {"id": "d", "do": "anotar", "then": "end"},
                                                 {"id": "p", "prompt": "Responda dúvidas."}])


def test_a_routed_run_that_reaches_stay_takes_the_conversation_from_the_asker_and_answers():
    """runtime.md §4.7 rules 2-5, flows.md §3.6 rule 5: the message was routed to this flow, so when it reaches
    its end the other asker is suspended (its queued talk request dropped) and the stay step answers now."""
    anotar, log = noop()
    agent, provider, _ = build([VENDAS, stay_flow("faq", on=[{"message": ["tem uma dúvida"]}])], {
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 0, "faq": 90}}],
        "speak": [{"message": "CPF?"}, {"message": "Abrimos às 9h."}]}, actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="que horas abrem?", id="m2")
    assert log == ["faq#m2:d:1"] and [(m.text, m.key) for m in t2.messages] == [("Abrimos às 9h.", "faq#m2:p:1")]
    assert status(t2) == [("vendas#m1", "suspended"), ("faq#m2", "asking")]
    faq = t2.session.runs[1]
    assert (faq.staying, faq.visits) == (True, {"d": 1, "p": 2})
    assert "another-reply" not in [o.code for o in t2.outcomes]


def test_a_routed_run_reaching_stay_after_another_runs_say_takes_the_floor_but_does_not_answer():
    """runtime.md §4.7 rules 4-5 (the stay step answers only when "nobody spoke yet"), flows.md §3.6 rule 4:
    a mention run's `say` answered the message; the routed run reaching `stay` still takes the conversation
    (the asker is suspended and its queued talk request dropped, so no `another-reply` line) but waits for the
    next message. No speak call."""
    anotar, log = noop()
    oi = flow("oi", on=[{"mention": []}], steps=[{"id": "s", "say": "Bem-vindo!"}])
    agent, provider, _ = build([oi, VENDAS, stay_flow("faq", on=[{"message": ["tem uma dúvida"]}])], {
        "understand": [{"flows": {"vendas": 0, "faq": 90}}], "speak": [{"message": "CPF?"}]},
        actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "vendas", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="que horas abrem?", id="m2")
    assert [m.text for m in t2.messages] == ["Bem-vindo!"] and t2.llm_calls == 1
    assert status(t2) == [("vendas#k1", "suspended"), ("faq#m2", "asking")]
    assert [(o.run_id, o.code) for o in t2.outcomes] == [("oi#m2", None), ("faq#m2", None)]
    faq = t2.session.runs[1]
    assert (faq.step_id, faq.staying, faq.visits) == ("p", True, {"d": 1, "p": 1})


def test_under_understand_true_a_routed_run_reaching_stay_takes_the_floor_but_does_not_speak():
    """runtime.md §9 (`understand: True` keeps routing), §4.7 rules 4-5 (the stay step answers only when "not
    silenced"): the routed run reaches its end, suspends the asker and stays `asking` without a word."""
    anotar, log = noop()
    agent, _, _ = build([VENDAS, stay_flow("faq", on=[{"message": ["tem uma dúvida"]}])], {
        "understand": [{"flows": {"vendas": 0, "faq": 90}}], "speak": [{"message": "CPF?"}]},
        actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "vendas", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="que horas abrem?", id="m2", silenced=QUIET)
    assert log == ["faq#m2:d:1"] and t2.messages == [] and t2.llm_calls == 1
    assert status(t2) == [("vendas#k1", "suspended"), ("faq#m2", "asking")]
    assert t2.session.runs[1].staying is True


def test_a_run_beside_the_conversation_that_reaches_stay_waits_behind_the_asker():
    """runtime.md §4.7 rule 3: a code-only mention run (not the turn's floor run) reaches its end while the
    asker keeps the floor: it is suspended, staying, on its stay step (a new visit); the asker answers."""
    anotar, log = noop()
    agent, _, _ = build([VENDAS, stay_flow("det", on=[{"mention": []}])], {
        "speak": [{"message": "CPF?"}, {"message": "E o CPF?"}]}, actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", start={"flow": "vendas", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="hm", id="m1")
    assert [s.flow_id for s in t2.started] == ["det"] and log == ["det#m1:d:1"]
    assert status(t2) == [("vendas#k1", "asking"), ("det#m1", "suspended")]
    det = t2.session.runs[1]
    assert (det.step_id, det.staying, det.visits, det.suspended_at) == ("p", True, {"d": 1, "p": 1}, T0)
    assert [m.key for m in t2.messages] == ["vendas#k1:q:1:re:m1"]


def test_with_nobody_asking_a_side_run_that_stays_asks_but_a_later_talk_step_takes_the_floor():
    """runtime.md §4.7 rules 4-5 then §3.6.3 talk rule 4: with no asker the mention run (started before the
    routed run, §3.5) reaches `stay` first and starts answering; the routed run's talk step, later in the
    queue, then suspends it and becomes the speaker."""
    anotar, log = noop()
    agent, _, _ = build([VENDAS, stay_flow("det", on=[{"mention": []}])], {
        "understand": [{"flows": {"vendas": 90}}], "speak": [{"message": "CPF?"}]}, actions={"anotar": anotar})
    t1 = agent.turn(session_id="s1", message="quero comprar", id="m1")
    assert [s.flow_id for s in t1.started] == ["det", "vendas"]
    assert status(t1) == [("det#m1", "suspended"), ("vendas#m1", "asking")]
    assert [m.key for m in t1.messages] == ["vendas#m1:q:1"]
    assert t1.session.runs[0].visits == {"d": 1, "p": 1}


def test_a_stay_reached_on_a_message_the_runs_own_say_answered_waits_for_the_next_message():
    """runtime.md §4.7 rule 5, flows.md §3.6 rules 4-5: the run's own `say` already answered, so the stay step
    is entered and asks, but does not speak now; the next message gets it (a resuming, staying asker)."""
    f = stay_flow("faq", on=[{"message": []}], first={"id": "s", "say": "Pronto.", "then": "end"})
    agent, provider, _ = build([f], {"speak": [{"message": "Posso ajudar em mais algo?"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert [m.text for m in t1.messages] == ["Pronto."] and t1.llm_calls == 0
    run = t1.session.runs[0]
    assert (run.status, run.step_id, run.staying, run.visits) == ("asking", "p", True, {"s": 1, "p": 1})
    t2 = agent.turn(session_id="s1", session=t1.session, message="sim", id="m2")
    assert [m.key for m in t2.messages] == ["faq#m1:p:1"] and t2.session.runs[0].visits == {"s": 1, "p": 2}


def test_a_reply_wait_resolved_into_stay_during_ingest_takes_the_conversation_and_answers():
    """runtime.md §3.2 I-R rule 4 ("so a `stay` it reaches answers this message"), §4.7 rules 3-5, flows.md §3.6
    rule 5 ("it resolved this run's `wait`"): reaching `stay` in Ingest, the run is the floor run, so the asker
    is suspended; it stays `asking` through Ingest (rule 5: "If Ingest is over ..."), so Run does not resume
    the suspended asker (whose `if` branch would now hold), and it answers in Run. No route is made (I-F)."""
    espera = flow("espera", onEnd="stay", steps=[{"id": "w", "wait": "1h", "else": "end"},
                                                 {"id": "x", "say": "Sem resposta."},
                                                 {"id": "p", "prompt": "Retome a conversa."}])
    vendas = flow("vendas", on=[{"message": ["quer comprar"]}], steps=[
        {"id": "q", "collect": ["cpf"], "branches": [{"if": {"known": ["plano"]}, "then": "fim"}]},
        {"id": "fim", "say": "Vendas encerrou."}])
    agent, provider, _ = build([espera, vendas, SUPORTE], {
        "understand": [{"flows": {"espera": 0, "vendas": 0, "suporte": 99}}],
        "speak": [{"message": "CPF?"}, {"message": "Que bom que voltou!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "espera", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "vendas", "key": "k2"})
    assert status(t2) == [("espera#k1", "waiting"), ("vendas#k2", "asking")]
    t2.session.data["plano"] = "pro"
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltei, e meu pedido?", id="m2")
    call = understand_calls(provider)[0]
    assert section(call, "flows") == ["espera", "vendas", "suporte"] and section(call, "branches") is None
    assert t3.started == [] and [(m.text, m.key) for m in t3.messages] == [("Que bom que voltou!", "espera#k1:p:1")]
    assert status(t3) == [("espera#k1", "asking"), ("vendas#k2", "suspended")]
    assert "branch" not in [o.code for o in t3.outcomes]


def test_a_staying_run_skips_if_branches_back_onto_its_path_but_takes_a_flow_branch():
    """runtime.md §3.5.2, §4.7, flows.md §3.6 rule 6: on a staying run an `if` branch whose target is `"end"` or
    an already visited step is never taken; an `if` branch to a `{flow}` still fires."""
    humano = flow("humano", steps=[{"id": "s", "say": "Chamando um humano."}])
    f = flow("faq", on=[{"message": []}], onEnd="stay", steps=[
        {"id": "p", "prompt": "Responda.", "branches": [
            {"if": {"known": ["plano"]}, "then": "p"}, {"if": {"known": ["plano"]}, "then": "end"},
            {"if": {"known": ["plano"]}, "then": {"step": "p", "clear": ["cpf"]}},
            {"if": {"known": ["cidade"]}, "then": {"flow": "humano"}}]}])
    agent, _, _ = build([f, humano], {"speak": [{"message": "Oi!"}, {"message": "Mais uma resposta."}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert t1.session.runs[0].staying is True
    t1.session.data["plano"] = "pro"
    t2 = agent.turn(session_id="s1", session=t1.session, message="e aí?", id="m2")
    assert "branch" not in [o.code for o in t2.outcomes] and [m.key for m in t2.messages] == ["faq#m1:p:2"]
    t2.session.data["cidade"] = "Recife"
    t3 = agent.turn(session_id="s1", session=t2.session, message="quero gente", id="m3")
    assert [(o.code, o.next) for o in t3.outcomes][0] == ("branch", "flow:humano")
    assert [m.text for m in t3.messages] == ["Chamando um humano."]


def test_a_staying_runs_when_branch_may_lead_back_onto_its_path_unlike_an_if_branch():
    """runtime.md §3.5.2, §4.7: the "already been through" exclusion is for `if` branches only; a `when` branch
    to the visited stay step fires (a new visit: `staying` is removed by the entry, and the step answers)."""
    f = flow("faq", on=[{"message": []}], onEnd="stay", steps=[
        {"id": "p", "prompt": "Responda.", "branches": [{"when": "a pessoa recomeça", "then": "p"}]}])
    agent, _, _ = build([f], {"understand": [{"branches": {"q1": True}}],
                              "speak": [{"message": "Oi!"}, {"message": "Recomeçando."}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="vamos recomeçar", id="m2")
    assert [(o.code, o.next, o.key) for o in t2.outcomes][0] == ("branch", "p", "faq#m1:p:2")
    assert [m.key for m in t2.messages] == ["faq#m1:p:3"]


def test_a_staying_askers_when_branch_is_sent_and_a_branch_to_end_stays_and_answers_the_same_message():
    """flows.md §3.6 rule 6, runtime.md §3.4 item 6, §3.5.2, §4.7 rules 2 and 5: the stay step's `when` branch
    is asked on every message and still moves the run; `then: "end"` finishes the flow, which stays again
    (a new visit) and, being the floor run with nobody having spoken, answers this message."""
    f = flow("faq", on=[{"message": []}], onEnd="stay", steps=[
        {"id": "p", "prompt": "Responda.", "branches": [{"when": "a pessoa agradece", "then": "end"}]}])
    agent, provider, _ = build([f], {"understand": [{"branches": {"q1": True}}],
                                     "speak": [{"message": "Oi!"}, {"message": "Por nada!"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    t2 = agent.turn(session_id="s1", session=t1.session, message="obrigada", id="m2")
    assert section(understand_calls(provider)[0], "branches") == ["q1"]
    assert [(o.code, o.next, o.key) for o in t2.outcomes][0] == ("branch", "end", "faq#m1:p:2")
    assert [m.key for m in t2.messages] == ["faq#m1:p:3"] and t2.session.runs[0].visits == {"p": 4}


def test_the_stay_step_is_the_talk_step_the_run_last_took_not_the_last_in_list_order():
    """runtime.md §4.7 rule 1, flows.md §3.6 rule 1: the newest `prompt`/`collect` line of the run names the stay
    step (here the branch line written on `q1`), so the run stays on `q1` although `q2` comes later."""
    f = flow("faq", on=[{"message": []}], onEnd="stay", steps=[
        {"id": "q1", "collect": ["cpf"], "branches": [{"when": "a pessoa encerra", "then": "end"}]},
        {"id": "q2", "prompt": "Nunca alcançado."}])
    agent, _, _ = build([f], {"understand": [{"branches": {"q1": True}}],
                              "speak": [{"message": "Oi!"}, {"message": "Até mais, estou por aqui."}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert t1.session.runs[0].step_id == "q1" and t1.session.runs[0].status == "asking"
    t2 = agent.turn(session_id="s1", session=t1.session, message="é só isso", id="m2")
    assert [(o.code, o.next) for o in t2.outcomes][0] == ("branch", "end")
    run = t2.session.runs[0]
    assert [m.key for m in t2.messages] == ["faq#m1:q1:2"]
    assert (run.step_id, run.staying, run.visits) == ("q1", True, {"q1": 3})
