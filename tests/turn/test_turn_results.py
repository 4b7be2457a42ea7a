"""What a turn returns: changed, ignored inputs, the untouched input, determinism, TurnResult, outcome lines.

Spec: runtime.md §0, §2, §3.1-§3.3, §3.9, §8, §11, §12, §13; python-api.md (One turn, The session).
"""
import copy
import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

import conftest
import falai as F
from conftest import T0, lines
from falai import (OUTCOME_MESSAGES, EndedRun, OutboundMessage, Run, ScheduleEntry, ScriptedProvider, Session,
                   SkippedTrigger, StartedRun, StepOutcome, TokenUsage, TurnResult, falai)

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
MS0 = 1789898400000

# runtime.md §11.4, copied from the spec by hand: 38 codes and their exact text.
SPEC_MESSAGES = {
    "no-session": "a wake arrived for a session that does not exist",
    "duplicate-input": "this input was already applied",
    "stale-wake": "no run is waiting on this wake",
    "silence-broken": "someone wrote after this silence wake was set",
    "already-claimed": "this flow already ran here",
    "cooldown": "the flow's cooldown has not passed",
    "hop-limit": "the chain reached the hop limit",
    "already-running": "a run of this flow is already live here",
    "flow-gone": "the flow is no longer registered on the agent",
    "step-loop": "the run moved through 50 steps in one turn",
    "step-gone": "the step is no longer in the flow",
    "customer-replied": "the customer wrote before the wake fired",
    "premise-changed": "the flow's while condition no longer holds",
    "silenced": "the host cannot speak right now",
    "already-known": "every field this step collects is known",
    "asked-fixed": "the step's fixed question went out word for word",
    "another-reply": "another run already answered this turn",
    "already-sent": "this message was already sent once",
    "branch": "a branch of this step fired",
    "max-asks": "the field was asked the most times allowed",
    "inline-delay": "a short wait rides on the next message",
    "awaiting-trigger": "the trigger's delay has not passed",
    "awaiting-event": "the run is waiting for an event",
    "event-arrived": "the event was reported",
    "no-event": "the event did not arrive in time",
    "replied": "the customer replied while the run waited",
    "no-reply": "the customer did not reply while the run waited",
    "action-skipped": "the action decided not to run",
    "action-failed": "the action failed",
    "action-deferred": "the action asked to run again later",
    "unknown-field": "no field by that name is declared on the agent",
    "bad-value": "the value did not fit the field's type",
    "not-in-enum": "the value is not one of the field's options",
    "provider-quota": "the provider's usage limit is spent",
    "provider-context": "the conversation outgrew the model's context window",
    "provider-auth": "the provider rejected the credentials",
    "provider-invalid": "the provider rejected the request",
    "provider-unavailable": "the model call failed or came back empty",
}


def build(flows, **options):
    """conftest's build, with an event "e" registered unless the test names its own."""
    options.setdefault("events", {"e": F.EventDef()})
    return conftest.build(flows, **options)


def fields_of(outcome):
    return {k: v for k, v in dataclasses.asdict(outcome).items() if v is not None}


LEMBRETE = {"id": "lembrete", "name": "Lembrete",
            "steps": [{"id": "espera", "wait": "1d"}, {"id": "aviso", "say": "Amanhã tem reunião."}]}


# OUTCOME_MESSAGES ---------------------------------------------------------------------------------------

# The codes falai for Python adds (runtime.md §11.4, docs/guide/conformance.md), copied by hand too.
ADDED_MESSAGES = {
    "tool-only": "only a tool, an action or the host writes this field",
    "repeat-spent": "the message flow already ran as often as its trigger's repeat allows",
    "no-route": "no flow took the message and the idle speaker is silent",
    "unknown-event": "no event by that name is registered on the agent",
    "bad-format": "the value is not in the field's format",
    "refused": "the field's validator refused the value",
    "corrected": "the customer corrected a known value",
    "provider-length": "the model's reply was cut at its output cap",
    "not-asked": "the model was not asked for this field in this call",
    "unsaid": "the customer's own message does not say this value",
}


def test_outcome_messages_hold_the_38_codes_with_their_exact_text():
    """runtime.md §11.4: OUTCOME_MESSAGES maps every code to its exact message."""
    assert len(SPEC_MESSAGES) == 38
    assert {code: OUTCOME_MESSAGES[code] for code in SPEC_MESSAGES} == SPEC_MESSAGES
    assert {code: OUTCOME_MESSAGES[code] for code in ADDED_MESSAGES} == ADDED_MESSAGES
    assert set(OUTCOME_MESSAGES) <= set(SPEC_MESSAGES) | set(ADDED_MESSAGES)


# Ignored inputs -----------------------------------------------------------------------------------------

def assert_ignored(r, code, key, at=T0):
    """runtime.md §3.3: exactly one line {kind wait, status skipped, code, message, key, at: now}, nothing else."""
    assert r.changed is False
    assert len(r.outcomes) == 1
    assert fields_of(r.outcomes[0]) == {"kind": "wait", "status": "skipped", "code": code,
                                        "message": SPEC_MESSAGES[code], "key": key, "at": at}
    assert (r.messages, r.schedule, r.started, r.ended, r.skipped) == ([], [], [], [], [])
    assert r.llm_calls == 0 and r.usage is None


def test_a_wake_with_no_session_is_ignored_with_no_session_and_a_fresh_session():
    """runtime.md §3.1 rule 3, §3.3: no-session; the result's session is the fresh one."""
    agent, provider, _ = build([LEMBRETE])
    r = agent.turn(session_id="s1", wake="lembrete#k1:espera:1789984800000")
    assert_ignored(r, "no-session", "lembrete#k1:espera:1789984800000")
    s = r.session
    assert (s.id, s.v, s.version, s.data, s.runs, s.claims, s.inputs, s.metadata) == ("s1", 4, 0, {}, [], {}, [], {})
    assert (s.last_user_at, s.last_assistant_at, s.history) == (None, None, None)
    assert provider.calls == []


def test_a_silence_wake_with_no_session_is_no_session_too():
    """runtime.md §3.1 rule 3: any wake without a session is ignored in Load."""
    agent, _, _ = build([])
    assert_ignored(agent.turn(session_id="s1", wake=f"silence:x:s1:{MS0}"), "no-session", f"silence:x:s1:{MS0}")


def test_a_repeated_message_id_is_ignored_with_duplicate_input():
    """runtime.md §3.2 Message rule 1, §3.3: a message id in session.inputs -> duplicate-input, key = the id."""
    agent, provider, clock = build([], idle="silent")
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    clock.advance("1m")
    r = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert_ignored(r, "duplicate-input", "m1", at="2026-09-20T10:01:00.000Z")
    assert r.session == t1.session and r.session is not t1.session


def test_only_the_last_fifty_input_ids_are_remembered():
    """runtime.md §3.2 Message rule 2, §13: inputs keeps the last 50 ids."""
    agent, _, _ = build([], idle="silent")
    s = None
    for i in range(51):
        s = agent.turn(session_id="s1", session=s, message="oi", id=f"m{i}").session
    assert s.inputs == [f"m{i}" for i in range(1, 51)]
    again = agent.turn(session_id="s1", session=s, message="oi", id="m0")
    assert again.changed is True and [o.code for o in again.outcomes] == ["no-route"]   # applied, not a replay
    assert again.session.inputs == [f"m{i}" for i in range(2, 51)] + ["m0"]
    assert agent.turn(session_id="s1", session=again.session, message="oi", id="m50").changed is False


def test_a_wake_no_run_waits_on_is_stale():
    """runtime.md §3.3: stale-wake, key = the wake key, the session unchanged."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    r = agent.turn(session_id="s1", session=t1.session, wake="nada:aqui")
    assert_ignored(r, "stale-wake", "nada:aqui")
    assert r.session == t1.session


def test_a_broken_silence_wake_is_ignored_with_silence_broken():
    """runtime.md §3.3: silence-broken, key = the wake key."""
    retomar = {"id": "retomar", "name": "R", "on": [{"silence": "1h"}], "steps": [{"id": "p", "say": "Oi?"}]}
    ola = {"id": "ola", "name": "O", "steps": [{"id": "oi", "say": "Olá"}]}
    agent, _, clock = build([ola, retomar], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    r = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert_ignored(r, "silence-broken", t1.schedule[0].key, at="2026-09-20T10:01:00.000Z")


def test_only_messages_are_recorded_in_inputs():
    """runtime.md §13: wakes, events and starts are never recorded in inputs."""
    agent, _, clock = build([LEMBRETE], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e1")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert t3.session.inputs == []
    t4 = agent.turn(session_id="s1", session=t3.session, message="oi")
    assert t4.session.inputs == []                                    # no id: nothing recorded


# The message's id and at ----------------------------------------------------------------------------------

CATCH = {"id": "f", "name": "F", "on": [{"message": []}], "steps": [{"id": "oi", "say": "Oi"}]}


def test_the_message_at_is_the_trigger_key_verbatim_and_last_user_at_normalised():
    """runtime.md §2.3, §3.2 Message rule 3: the key uses the at text as given; lastUserAt is UTC with ms and Z."""
    agent, _, _ = build([CATCH])
    r = agent.turn(session_id="s1", message="oi", at="2026-09-20T07:00:00-03:00")
    assert [s.run_id for s in r.started] == ["f#2026-09-20T07:00:00-03:00"]
    assert r.session.last_user_at == "2026-09-20T10:00:00.000Z"
    assert r.messages[0].key == "f#2026-09-20T07:00:00-03:00:oi:1"


def test_a_message_with_neither_id_nor_at_is_keyed_by_now():
    """runtime.md §8: without id and at, the trigger key is now as ISO text."""
    agent, _, _ = build([CATCH])
    r = agent.turn(session_id="s1", message="oi")
    assert [s.run_id for s in r.started] == [f"f#{T0}"] and r.session.last_user_at == T0


def test_an_empty_id_counts_as_absent():
    """python-api.md, One turn: id="" is not recorded and the trigger key falls back to the at."""
    agent, _, _ = build([CATCH], idle="silent")
    r = agent.turn(session_id="s1", message="oi", id="", at="2026-09-20T09:59:00.000Z")
    assert r.session.inputs == []
    assert [s.run_id for s in r.started] == ["f#2026-09-20T09:59:00.000Z"]
    replay = agent.turn(session_id="s1", session=r.session, message="oi", id="", at="2026-09-20T09:59:00.000Z")
    assert [o.code for o in replay.outcomes] == ["repeat-spent"]     # not detected as a replay


def test_the_clock_is_read_once_and_truncated_to_milliseconds():
    """runtime.md §0: now is read exactly once per turn and truncated to whole milliseconds."""
    reads = []

    def clock():
        reads.append(1)
        return datetime(2026, 9, 20, 10, 0, 0, 123987, tzinfo=timezone.utc)

    retomar = {"id": "retomar", "name": "R", "on": [{"silence": "1h"}], "steps": [{"id": "p", "say": "Oi?"}]}
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}, {"id": "espera", "wait": "1h"}]}
    agent = falai().agent(name="Ana", provider=ScriptedProvider(), clock=clock, flows=[flow, retomar])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert len(reads) == 1
    assert r.session.runs[0].started_at == "2026-09-20T10:00:00.123Z"
    assert r.session.last_assistant_at == "2026-09-20T10:00:00.123Z"
    assert [e.key for e in r.schedule] == [f"f#k1:espera:{MS0 + 123 + 3_600_000}", f"silence:retomar:s1:{MS0 + 123}"]
    assert all(o.at == "2026-09-20T10:00:00.123Z" for o in r.outcomes)


# changed ---------------------------------------------------------------------------------------------

def test_a_first_turn_is_changed_even_when_it_produced_nothing():
    """runtime.md §3.9: input session None -> changed, unless ignored."""
    agent, _, _ = build([])
    r = agent.turn(session_id="s1", event="e", key="e1")
    assert r.changed is True and (r.messages, r.outcomes, r.schedule, r.skipped) == ([], [], [], [])


def test_a_turn_that_changed_nothing_and_produced_nothing_is_not_changed():
    """runtime.md §3.9: an event that matched no trigger and no wait is changed=False."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    r = agent.turn(session_id="s1", session=t1.session, event="e", key="e1")
    assert r.changed is False and r.session == t1.session


def test_a_skip_alone_makes_a_turn_changed():
    """runtime.md §3.9: anything in skipped makes changed True, even with the session unchanged."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    r = agent.turn(session_id="s1", session=t1.session, start={"flow": "lembrete", "key": "k1"})
    assert [s.code for s in r.skipped] == ["already-claimed"]
    assert r.session == t1.session and r.changed is True


def test_a_session_change_alone_makes_a_turn_changed():
    """runtime.md §3.9: a session that differs by value makes changed True (an inbound event's lastUserAt)."""
    agent, _, clock = build([LEMBRETE], events={"e": F.EventDef(direction="inbound")})
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1m")
    r = agent.turn(session_id="s1", session=t1.session, event="e", key="e1")
    assert (r.messages, r.outcomes, r.schedule, r.skipped) == ([], [], [], [])
    assert r.changed is True and r.session.last_user_at == "2026-09-20T10:01:00.000Z"


# The input is never mutated ---------------------------------------------------------------------------------

def test_the_input_session_and_arguments_are_never_mutated():
    """runtime.md §2.2, python-api.md: turn() works on a deep copy; result.session is that copy."""
    def act(params, ctx):
        ctx.set({"x": "1"})

    flow = {"id": "f", "name": "F", "on": [{"event": "e"}],
            "steps": [{"id": "a", "do": "a", "with": {"t": "{{input.v}}"}}, {"id": "oi", "say": "Oi"},
                      {"id": "espera", "wait": "1h", "else": "fim"}, {"id": "fim", "say": "Fim"}]}
    agent, _, clock = build([flow, LEMBRETE], fields={"x": {"type": "string"}},
                            actions={"a": F.Action(parameters={"t": {"type": "string"}}, run=act)})
    t1 = agent.turn(session_id="s1", event="e", key="e1", payload={"v": "p"})
    session, context = t1.session, {"c": [1, 2]}
    anchors, claims, history = {"lead": {"key": "L"}}, {"held": {"z:s1:": T0}, "active": ["q:s1"]}, [
        {"role": "user", "content": "oi"}]
    payload, start = {"v": "q"}, {"flow": "lembrete", "key": "k9", "input": {"a": [1]}}
    before = [copy.deepcopy(x) for x in (session, context, anchors, claims, history, payload, start)]
    clock.advance("1m")
    results = [
        agent.turn(session_id="s1", session=session, message="oi", id="m1", context=context, anchors=anchors,
                   claims=claims, history=history),
        agent.turn(session_id="s1", session=session, event="e", key="e2", payload=payload, context=context),
        agent.turn(session_id="s1", session=session, start=start, context=context),
        agent.turn(session_id="s1", session=session, wake=session.runs[0].waiting["key"]),
    ]
    assert [session, context, anchors, claims, history, payload, start] == before
    assert all(r.session is not session for r in results)
    assert results[0].session.runs != session.runs                       # the reply wait did resolve on the copy


# Determinism ---------------------------------------------------------------------------------------------------

def summary(r):
    return ([(m.text, m.key, m.kind, m.after_ms, m.run_id, m.step_id, m.media) for m in r.messages],
            [(e.key, e.at, e.replaces) for e in r.schedule],
            [dataclasses.asdict(o) for o in r.outcomes],
            [dataclasses.asdict(s) for s in r.started],
            [(e.id, e.reason) for e in r.ended],
            [dataclasses.asdict(s) for s in r.skipped],
            r.changed, r.llm_calls)


def test_replaying_an_input_against_the_same_session_gives_the_same_result():
    """runtime.md §8, seed Agent page: the same input against the same session mints the same keys and session."""
    retomar = {"id": "retomar", "name": "R", "on": [{"silence": "1h"}], "steps": [{"id": "p", "say": "Oi?"}]}
    flow = {"id": "f", "name": "F", "on": [{"event": "e"}],
            "steps": [{"id": "a", "do": "a"}, {"id": "pausa", "wait": "2s"}, {"id": "oi", "say": "Oi {{input.n}}"},
                      {"id": "espera", "wait": "1d"}, {"id": "tchau", "say": "Tchau"}]}
    agent, _, clock = build([flow, retomar],
                            actions={"a": F.Action(parameters={}, run=lambda p, c: c.set({"visto": c.key}))})
    t1 = agent.turn(session_id="s1", event="e", key="e1", payload={"n": 1})
    clock.advance("1d")
    a = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    b = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert summary(a) == summary(b) and a.session == b.session
    c = agent.turn(session_id="s1", session=None, event="e", key="e1", payload={"n": 1})
    clock.set(T0)
    d = agent.turn(session_id="s1", session=None, event="e", key="e1", payload={"n": 1})
    assert summary(d) == summary(t1) and d.session == t1.session
    assert summary(c) != summary(t1)                                       # the clock moved: wake keys differ


def test_replaying_a_message_turn_gives_the_same_keys_messages_and_session():
    """runtime.md §8: a replayed message (after a failed save) mints the same keys."""
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    flow = {"id": "boas-vindas", "name": "B", "on": [{"message": []}], "steps": [{"id": "nome", "collect": ["nome"]}]}

    def one():
        agent, _, _ = build([flow], fields=fields, script={"speak": [{"message": "Como se chama?"}]})
        return agent.turn(session_id="s1", message="oi", id="m1")

    a, b = one(), one()
    assert summary(a) == summary(b) and a.session == b.session
    assert a.messages[0].key == "boas-vindas#m1:nome:1"


# TurnResult, its companions and the session -----------------------------------------------------------------

def test_turn_result_carries_typed_companions():
    """runtime.md §12, python-api.md: the result's attributes and their dataclasses."""
    retomar = {"id": "retomar", "name": "R", "on": [{"silence": "1h"}], "steps": [{"id": "p", "say": "Oi?"}]}
    flow = {"id": "f", "name": "F", "on": [{"event": "e"}], "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([flow, retomar])
    r = agent.turn(session_id="s1", event="e", key="e1")
    assert isinstance(r, TurnResult) and isinstance(r.session, Session)
    assert all(isinstance(m, OutboundMessage) for m in r.messages) and len(r.messages) == 1
    assert all(isinstance(e, ScheduleEntry) for e in r.schedule) and len(r.schedule) == 1
    assert r.schedule[0].at.tzinfo is not None and r.schedule[0].at.utcoffset() == timedelta(0)
    assert all(isinstance(o, StepOutcome) for o in r.outcomes)
    assert r.started == [StartedRun(run_id="f#e1", flow_id="f", anchor="s1", dedupe_key="f:s1:e1")]
    ended = r.ended[0]
    assert isinstance(ended, EndedRun) and isinstance(ended, Run) and ended.reason == "end"
    again = agent.turn(session_id="s1", session=r.session, event="e", key="e1")
    assert again.skipped == [SkippedTrigger(flow_id="f", anchor="s1", trigger_key="e1", code="already-claimed",
                                            message="this flow already ran here")]
    assert (r.llm_calls, r.usage) == (0, None)


def test_an_ended_run_is_a_snapshot_of_its_last_state():
    """runtime.md §4.8, §12: ended holds the run as it ended (step, visits, outcome lines) plus its reason."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}, {"id": "c", "if": {"silenced": True}}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"a": 1}})
    e = r.ended[0]
    assert (e.id, e.flow_id, e.anchor, e.dedupe_key, e.step_id, e.hop, e.started_at, e.input, e.reason) == (
        "f#k1", "f", "s1", "f:s1:k1", "c", 0, T0, {"a": 1}, "end")
    assert e.trigger == {"kind": "start", "key": "k1", "payload": {"a": 1}}
    assert e.visits == {"oi": 1, "c": 1} and e.asked == {}
    assert [line["kind"] for line in e.outcomes] == ["say", "if"]


def test_the_version_is_never_changed_by_a_turn():
    """runtime.md §13: turn() never changes version; v is always 4."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    assert (t1.session.version, t1.session.v) == (0, 4)
    stored = copy.deepcopy(t1.session)
    stored.version = 7
    t2 = agent.turn(session_id="s1", session=stored, wake=t1.schedule[0].key)
    assert t2.session.version == 7 and t2.changed is True


def test_keys_that_name_the_session_use_the_session_id_argument():
    """runtime.md §2.2: the default anchor and every session-naming key use session_id, not the session's id."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi", "once": True}]}
    agent, _, _ = build([flow, LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    other = copy.deepcopy(t1.session)
    other.id = "outro"
    r = agent.turn(session_id="s9", session=other, start={"flow": "f", "key": "k1"})
    assert [(s.anchor, s.dedupe_key) for s in r.started] == [("s9", "f:s9:k1")]
    assert "f:oi:s9" in r.session.claims


def test_no_run_is_left_running_at_the_end_of_a_turn():
    """runtime.md §4.2: every live run ends a turn asking, waiting or suspended."""
    fields = {"nome": {"type": "string", "extract": "asked", "ask": "Pergunte o nome."}}
    flows = [{"id": "a", "name": "A", "steps": [{"id": "q", "collect": ["nome"]}]},
             {"id": "b", "name": "B", "steps": [{"id": "espera", "wait": "1h"}]},
             {"id": "c", "name": "C", "on": [{"event": "e", "after": "1h"}], "steps": [{"id": "oi", "say": "Oi"}]}]
    agent, _, _ = build(flows, fields=fields, script={"speak": [{"message": "Nome?"}]})
    s = agent.turn(session_id="s1", start={"flow": "a", "key": "k1"}).session
    s = agent.turn(session_id="s1", session=s, start={"flow": "b", "key": "k2"}).session
    s = agent.turn(session_id="s1", session=s, event="e", key="e1").session
    assert sorted((r.flow_id, r.status) for r in s.runs) == [("a", "asking"), ("b", "waiting"), ("c", "waiting")]


# Outcome lines ---------------------------------------------------------------------------------------------------

def test_every_line_has_a_message_exactly_when_it_has_a_code():
    """runtime.md §11.1: message is present exactly when code is, and is the code's text."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "pausa", "wait": "3s"}, {"id": "oi", "say": "Oi", "once": True}, {"id": "oi2", "say": "Oi"},
        {"id": "a", "do": "a"}, {"id": "b", "do": "b"}, {"id": "c", "if": {}}, {"id": "espera", "wait": "1h"}]}
    agent, _, _ = build([flow], actions={"a": F.Action(parameters={}, run=lambda p, c: {"skipped": "não"}),
                                         "b": F.Action(parameters={}, run=lambda p, c: {"ok": True, "detail": "d"})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, claims={"held": {"f:oi:s1": T0}})
    assert lines(r) == [("wait", "ok", "inline-delay"), ("say", "skipped", "already-sent"), ("say", "ok", None),
                        ("do", "skipped", "action-skipped"), ("do", "ok", None), ("if", "ok", None),
                        ("wait", "waiting", None)]
    for o in r.outcomes:
        assert (o.message is None) == (o.code is None)
        assert o.code is None or o.message == SPEC_MESSAGES[o.code]
        assert (o.run_id, o.flow_id, o.at) == ("f#k1", "f", T0)
        assert o.key == f"f#k1:{o.step_id}:1" and o.llm_calls is None


def test_a_run_keeps_its_lines_as_camel_case_dicts_without_absent_keys():
    """runtime.md §11.1, §13: run.outcomes holds the blob's camelCase dicts, absent keys omitted."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "pausa", "wait": "3s", "then": "oi"}, {"id": "oi", "say": "Oi"},
                                              {"id": "espera", "wait": "1h"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.session.runs[0].outcomes == [
        {"runId": "f#k1", "flowId": "f", "stepId": "pausa", "key": "f#k1:pausa:1", "kind": "wait", "status": "ok",
         "code": "inline-delay", "message": SPEC_MESSAGES["inline-delay"], "detail": "3000ms", "next": "oi", "at": T0},
        {"runId": "f#k1", "flowId": "f", "stepId": "oi", "key": "f#k1:oi:1", "kind": "say", "status": "ok", "at": T0},
        {"runId": "f#k1", "flowId": "f", "stepId": "espera", "key": "f#k1:espera:1", "kind": "wait",
         "status": "waiting", "until": "2026-09-20T11:00:00.000Z", "at": T0}]
    assert [o.to_dict() if hasattr(o, "to_dict") else None for o in r.outcomes] == r.session.runs[0].outcomes


def test_a_run_keeps_its_last_fifty_lines_while_the_turn_reports_all():
    """runtime.md §11.1, §13: run.outcomes keeps the last 50; TurnResult.outcomes is never trimmed."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "if": {}, "then": "b", "else": "b"},
                                              {"id": "b", "if": {}, "then": "a", "else": "a"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert len(r.outcomes) == 51
    kept = r.ended[0].outcomes
    assert len(kept) == 50 and kept[-1]["code"] == "step-loop"
    assert kept == [o.to_dict() for o in r.outcomes[1:]]


def test_lines_of_the_idle_speaker_and_dropped_values_belong_to_no_run():
    """runtime.md §11.2: idle / ok with key idle:<triggerKey> and llmCalls; dropped values have no run and no key."""
    fields = {"porte": {"type": "string", "enum": ["1-10", "11-50"]}, "n": {"type": "number"}}
    flow = {"id": "triagem", "name": "T", "steps": [{"id": "q", "collect": ["porte", "n"]}]}
    agent, _, _ = build([flow], fields=fields, script={
        "speak": [{"message": "Quantas pessoas?"}, {"message": "Entendi."}],
        "understand": [{"fields": {"porte": "500", "n": "muitos", "cor": "azul"}}]})
    t1 = agent.turn(session_id="s1", start={"flow": "triagem", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="somos muitos", id="m1")
    dropped = [o for o in t2.outcomes if o.code in ("unknown-field", "bad-value", "not-in-enum")]
    assert sorted((o.code, o.detail) for o in dropped) == [("bad-value", "n"), ("not-in-enum", "porte"),
                                                           ("unknown-field", "cor")]
    assert all((o.kind, o.status, o.run_id, o.flow_id, o.step_id, o.key) == ("collect", "skipped", None, None, None,
                                                                              None) for o in dropped)
    assert all(o.message == SPEC_MESSAGES[o.code] for o in dropped)
    assert t2.session.data == {}
    idle_agent, _, _ = build([], script={"speak": [{"message": "Olá!"}]})
    r = idle_agent.turn(session_id="s1", message="oi", id="m7")
    assert [fields_of(o) for o in r.outcomes] == [{"kind": "idle", "status": "ok", "key": "idle:m7", "llm_calls": 1,
                                                   "at": T0}]
    assert [(m.text, m.kind, m.key, m.run_id, m.step_id) for m in r.messages] == [("Olá!", "ai", "idle:m7", None, None)]
    assert r.session.last_assistant_at == T0


def test_a_talk_ok_line_carries_llm_calls_and_no_next():
    """runtime.md §3.8 item 3.4, §11.2: <k> / ok after a speak call carries key and llmCalls, never next."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "Diga oi.", "then": "fim"}, {"id": "x", "say": "x"},
                                              {"id": "fim", "say": "Fim"}]}
    agent, _, _ = build([flow], script={"speak": [{"message": "Oi!"}]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    talk = r.outcomes[0]
    assert fields_of(talk) == {"kind": "prompt", "status": "ok", "run_id": "f#k1", "flow_id": "f", "step_id": "p",
                               "key": "f#k1:p:1", "llm_calls": 1, "at": T0}
    assert [m.text for m in r.messages] == ["Oi!", "Fim"]


# llm_calls and usage ----------------------------------------------------------------------------------------------

def test_usage_is_none_when_no_call_reported_counts():
    """runtime.md §12: usage is None when no call reported counts, never a zero object."""
    agent, _, _ = build([], script={"speak": [{"message": "Olá!"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert r.llm_calls == 1 and r.usage is None


def test_usage_sums_every_call_of_the_turn():
    """runtime.md §12, model-calls.md §7: usage is summed field by field over the turn's calls."""
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    flow = {"id": "t", "name": "T", "steps": [{"id": "q", "collect": ["nome"]}, {"id": "p", "prompt": "Agradeça."}]}
    agent, _, _ = build([flow], fields=fields, usage=TokenUsage(10, 3, 2), script={
        "speak": [{"message": "Nome?"}, {"message": "Obrigada, Ana!"}], "understand": [{"fields": {"nome": "Ana"}}]})
    t1 = agent.turn(session_id="s1", start={"flow": "t", "key": "k1"})
    assert (t1.llm_calls, t1.usage) == (1, TokenUsage(10, 3, 2))
    t2 = agent.turn(session_id="s1", session=t1.session, message="Ana", id="m1")
    assert (t2.llm_calls, t2.usage) == (2, TokenUsage(20, 6, 4))
    assert [(m.text, m.key) for m in t2.messages] == [("Obrigada, Ana!", "t#k1:p:1")]


def test_a_resumed_asker_whose_fields_came_in_writes_collect_ok_with_next():
    """runtime.md §11.2: collect / ok with key and next, for a resumed asker whose fields are all known now."""
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    flow = {"id": "t", "name": "T", "steps": [{"id": "q", "collect": ["nome"], "then": "fim"}, {"id": "x", "say": "x"},
                                              {"id": "fim", "say": "Obrigada, {{data.nome}}!"}]}
    agent, provider, _ = build([flow], fields=fields, script={
        "speak": [{"message": "Nome?"}], "understand": [{"fields": {"nome": "Ana"}}]})
    t1 = agent.turn(session_id="s1", start={"flow": "t", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="Ana", id="m1")
    assert fields_of(t2.outcomes[0]) == {"kind": "collect", "status": "ok", "run_id": "t#k1", "flow_id": "t",
                                         "step_id": "q", "key": "t#k1:q:1", "next": "fim", "at": T0}
    assert [m.text for m in t2.messages] == ["Obrigada, Ana!"]
    assert t2.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["speak", "understand"]


# A failed understand call --------------------------------------------------------------------------------------

def test_an_understand_failure_propagates_unchanged_and_touches_nothing():
    """runtime.md §3.4 Failure, §10.1: the provider's exception leaves turn() unchanged; nothing ran."""
    ran = []
    error = F.ProviderError("down", kind="overload")
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    flow = {"id": "t", "name": "T", "steps": [{"id": "q", "collect": ["nome"]}, {"id": "a", "do": "a"}]}
    detector = {"id": "d", "name": "D", "on": [{"mention": []}], "steps": [{"id": "a", "do": "a"}]}
    agent, _, _ = build([flow, detector], fields=fields, script={"speak": [{"message": "Nome?"}], "understand": [error]},
                        actions={"a": F.Action(parameters={}, run=lambda p, c: ran.append(c.key))})
    t1 = agent.turn(session_id="s1", start={"flow": "t", "key": "k1"})
    before = copy.deepcopy(t1.session)
    with pytest.raises(F.ProviderError) as raised:
        agent.turn(session_id="s1", session=t1.session, message="sou a Ana", id="m1")
    assert raised.value is error
    assert t1.session == before and ran == []


def test_a_none_input_is_no_payload():
    """runtime.md §5 rule 1, §13 (inferred): payload and input are present only when not None."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": None})
    assert r.ended[0].trigger == {"kind": "start", "key": "k1"} and r.ended[0].input is None
    r2 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {}})
    assert r2.ended[0].trigger == {"kind": "start", "key": "k1", "payload": {}} and r2.ended[0].input == {}


def test_the_engine_never_writes_history_and_never_touches_metadata():
    """runtime.md §13: history is the host's (never written by the engine); metadata is never read or touched."""
    agent, _, _ = build([LEMBRETE], idle="silent")
    t1 = agent.turn(session_id="s1", message="oi", id="m1", history=[{"role": "user", "content": "antes"}])
    assert t1.session.history is None and t1.session.metadata == {}
    stored = copy.deepcopy(t1.session)
    stored.metadata = {"canal": "whatsapp", "n": [1]}
    stored.history = [{"role": "user", "content": "antes"}]
    t2 = agent.turn(session_id="s1", session=stored, start={"flow": "lembrete", "key": "k1"})
    assert t2.session.metadata == {"canal": "whatsapp", "n": [1]}
    assert t2.session.history == [{"role": "user", "content": "antes"}]
