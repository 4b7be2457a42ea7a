"""Waits and wakes: timer waits, reply waits, event waits, trigger delays, silence, pending_wakes, retries.

Spec: runtime.md §3.2 (Ingest: I-R, I-W, I-S), §3.6.3 (wait steps), §5 rule 7, §7, §10.2, §14;
flows.md §4.4, §4.5, §5.6, §5.7, §10.

These tests assert engine behaviour only (lines, codes, keys, wakes, the session), never prompts.
"""
import copy
from datetime import datetime, timedelta, timezone

import pytest

import falai as F
import falai_calls
from falai import ProviderError, fake_clock

from conftest import T0, build, lines  # the shared builders

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
MS0 = 1789898400000
SEC, MIN, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000

# A speak call failing through the shim or the real section 10 alike: a plain exception is kind
# "unknown", hence provider-unavailable and retryable (model-calls.md §10.2).
DOWN = RuntimeError("provider down")

real_speak = pytest.mark.skipif(getattr(falai_calls.speak, "__module__", "") == "shim",
                                reason="needs section 10's real speak (model-calls.md §10.2 classification)")


def iso(dt):
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def at_ms(ms):
    return NOW0 + timedelta(milliseconds=ms - MS0)


def only_line(r, code):
    found = [o for o in r.outcomes if o.code == code]
    assert len(found) == 1, lines(r)
    return found[0]


def nine_to_six(at, ctx):
    """Business hours 09:00-18:00 UTC every day: outside them, the next 09:00."""
    if 9 <= at.hour < 18:
        return at
    day = at if at.hour >= 18 else at - timedelta(days=1)
    return datetime(day.year, day.month, day.day, 9, tzinfo=timezone.utc) + timedelta(days=1)


LEMBRETE = {"id": "lembrete", "name": "Lembrete",
            "steps": [{"id": "espera", "wait": "1d"},
                      {"id": "aviso", "say": "Amanhã tem reunião às 10h."}]}


# Timer waits that park ----------------------------------------------------------------------

def test_long_timer_wait_parks_under_run_step_and_fire_time():
    """runtime.md §3.6.3, §7.1: a long timer wait parks under ${runId}:${stepId}:${atMs} with a waiting line."""
    agent, _, _ = build([LEMBRETE])
    r = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    key = "lembrete#k1:espera:1789984800000"
    assert r.llm_calls == 0
    assert [(e.key, e.at, e.replaces) for e in r.schedule] == [(key, NOW0 + timedelta(days=1), None)]
    run = r.session.runs[0]
    assert run.status == "waiting" and run.step_id == "espera"
    assert run.waiting == {"kind": "timer", "key": key, "until": "2026-09-21T10:00:00.000Z", "setAt": T0}
    assert lines(r) == [("wait", "waiting", None)]
    line = r.outcomes[0]
    assert (line.run_id, line.flow_id, line.step_id, line.key, line.until, line.next, line.message) == (
        "lembrete#k1", "lembrete", "espera", "lembrete#k1:espera:1", "2026-09-21T10:00:00.000Z", None, None)


def test_timer_wake_with_no_reply_takes_then():
    """runtime.md §3.2 I-W rule 5: the wake of a timer wait with no reply writes wait / ok / no-reply and follows then."""
    agent, _, clock = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert lines(t2) == [("wait", "ok", "no-reply"), ("say", "ok", None)]
    wait_line = t2.outcomes[0]
    # §11.1: Ingest wait lines carry no key; `then` is absent so there is no `next` (§11.3).
    assert (wait_line.key, wait_line.next, wait_line.step_id, wait_line.run_id) == (None, None, "espera", "lembrete#k1")
    assert wait_line.message == "the customer did not reply while the run waited"
    assert [(m.text, m.kind, m.key, m.after_ms) for m in t2.messages] == [
        ("Amanhã tem reunião às 10h.", "verbatim", "lembrete#k1:aviso:1", 0)]
    assert [(e.id, e.reason) for e in t2.ended] == [("lembrete#k1", "end")]
    assert t2.session.runs == [] and t2.llm_calls == 0


def test_no_reply_line_names_an_explicit_then():
    """runtime.md §11.2: wait / ok / no-reply carries next = label of then."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "espera", "wait": "1h", "then": "b"},
                                              {"id": "a", "say": "A", "then": "end"},
                                              {"id": "b", "say": "B"}]}
    agent, _, clock = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert only_line(t2, "no-reply").next == "b"
    assert [m.text for m in t2.messages] == ["B"]


def test_the_same_wake_fired_twice_is_stale():
    """runtime.md §7.4: only the live run whose waiting key equals the wake honours it; a second firing is stale-wake."""
    agent, _, clock = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert t3.changed is False
    assert [(o.kind, o.status, o.code, o.key) for o in t3.outcomes] == [
        ("wait", "skipped", "stale-wake", t1.schedule[0].key)]


def test_a_wake_key_must_match_exactly():
    """runtime.md §7.4: a wake key that is a prefix or variant of the waiting key is stale."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    r = agent.turn(session_id="s1", session=t1.session, wake="lembrete#k1:espera:1789984800001")
    assert r.changed is False and lines(r) == [("wait", "skipped", "stale-wake")]
    assert r.session.runs[0].status == "waiting"


def test_an_early_wake_is_honoured_when_its_key_matches():
    """runtime.md §7.4: the engine keys wakes, not times: an exact key is honoured whenever it fires."""
    agent, _, _ = build([LEMBRETE])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert lines(t2) == [("wait", "ok", "no-reply"), ("say", "ok", None)]


# Short waits --------------------------------------------------------------------------------

def short_flow(wait, nxt, **wait_keys):
    return {"id": "f", "name": "F", "steps": [{"id": "pausa", "wait": wait, **wait_keys}] + nxt}


def test_short_wait_before_a_say_rides_as_after_ms():
    """runtime.md §7.2: a short wait followed by a say rides as after_ms, with an inline-delay line and no wake."""
    agent, _, _ = build([short_flow("3s", [{"id": "oi", "say": "Oi"}])])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.after_ms) for m in r.messages] == [("Oi", 3000)]
    assert lines(r) == [("wait", "ok", "inline-delay"), ("say", "ok", None)]
    line = r.outcomes[0]
    assert (line.detail, line.key, line.next, line.until) == ("3000ms", "f#k1:pausa:1", None, None)
    assert line.message == "a short wait rides on the next message"
    assert r.schedule == [] and r.session.runs == []


def test_ten_seconds_is_still_a_short_wait():
    """runtime.md §3.6.3: ms <= 10 000 rides inline."""
    agent, _, _ = build([short_flow("10s", [{"id": "oi", "say": "Oi"}])])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.after_ms for m in r.messages] == [10_000] and r.schedule == []


def test_short_wait_before_a_talk_step_rides_on_the_speak_reply():
    """runtime.md §3.6.3: the inline delay rides on the next message the turn emits, the speak reply included."""
    agent, _, _ = build([short_flow("2s", [{"id": "p", "prompt": "Diga oi."}])],
                        script={"speak": [{"message": "Oi!"}]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.kind, m.after_ms, m.key) for m in r.messages] == [("Oi!", "ai", 2000, "f#k1:p:1")]
    assert r.llm_calls == 1


@pytest.mark.parametrize("then", ["oi", {"step": "oi"}])
def test_short_wait_whose_then_names_a_say_rides_inline(then):
    """runtime.md §3.6.3: `then` as a step id or {step} leading to a say counts as followed by a say."""
    flow = short_flow("3s", [{"id": "x", "do": "nada"}, {"id": "oi", "say": "Oi"}], then=then)
    agent, _, _ = build([flow], actions={"nada": F.Action(parameters={}, run=lambda p, c: None)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.after_ms) for m in r.messages] == [("Oi", 3000)]
    assert only_line(r, "inline-delay").next == "oi"


@pytest.mark.parametrize("duration, ms, nxt, then", [
    pytest.param("10.001s", 10_001, [{"id": "oi", "say": "Oi"}], None, id="over-ten-seconds-even-before-a-say"),
    pytest.param("3s", 3000, [{"id": "x", "do": "nada"}, {"id": "oi", "say": "Oi"}], None, id="short-then-a-do"),
    pytest.param("3s", 3000, [{"id": "c", "if": {}, "then": "oi"}, {"id": "oi", "say": "Oi"}], None,
                 id="short-through-an-if-step"),
    pytest.param("3s", 3000, [{"id": "w", "wait": "2s"}, {"id": "oi", "say": "Oi"}], None,
                 id="short-then-another-wait"),
    pytest.param("3s", 3000, [{"id": "oi", "say": "Oi"}], "end", id="short-then-end"),
    pytest.param("3s", 3000, [], None, id="short-as-the-last-step"),
])
def test_a_long_wait_or_a_short_one_not_followed_by_say_or_talk_parks(duration, ms, nxt, then):
    """runtime.md §3.6.3: over 10 000 ms a wait parks even before a say; §7.2: a short wait followed by do, if,
    another wait or "end" parks like a long one."""
    keys = {"then": then} if then else {}
    flow = short_flow(duration, nxt, **keys)
    agent, _, _ = build([flow], actions={"nada": F.Action(parameters={}, run=lambda p, c: None)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.messages == []
    assert [e.key for e in r.schedule] == [f"f#k1:pausa:{MS0 + ms}"]
    assert lines(r) == [("wait", "waiting", None)]


def test_short_wait_before_a_flow_chain_parks():
    """runtime.md §3.6.3: a {flow} target is not a say or talk step, so a short wait before it parks."""
    child = {"id": "g", "name": "G", "steps": [{"id": "oi", "say": "Oi"}]}
    agent, _, _ = build([short_flow("3s", [], then={"flow": "g"}), child])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.messages == [] and [e.key for e in r.schedule] == [f"f#k1:pausa:{MS0 + 3000}"]


def test_a_delay_not_consumed_adds_to_the_next_short_wait():
    """runtime.md §7.2: a short wait's delay is added to any delay not yet consumed."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "w1", "wait": "3s"},
        {"id": "uma", "say": "Uma vez só", "once": True},       # already sent: emits nothing
        {"id": "w2", "wait": "2s"},
        {"id": "oi", "say": "Oi"},
        {"id": "tchau", "say": "Tchau"}]}
    agent, _, _ = build([flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"},
                   claims={"held": {"f:uma:s1": T0}})
    assert [(m.text, m.after_ms) for m in r.messages] == [("Oi", 5000), ("Tchau", 0)]


def test_short_wait_with_business_hours_rides_inline_unsnapped():
    """runtime.md §3.6.3, §7.7: a short wait with businessHours rides inline and is not snapped."""
    clock = fake_clock("2026-09-20T20:00:00.000Z")                     # outside business hours
    agent, _, _ = build([short_flow("3s", [{"id": "oi", "say": "Oi"}], businessHours=True)],
                        clock=clock, business_hours=nine_to_six)
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(m.text, m.after_ms) for m in r.messages] == [("Oi", 3000)] and r.schedule == []


# Business hours on a parking wait ------------------------------------------------------------

def test_long_wait_with_business_hours_is_snapped_and_keyed_by_the_snapped_time():
    """runtime.md §7.1, §7.7: a parking wait with businessHours is snapped; atMs is the snapped time's."""
    seen = []

    def hours(at, ctx):
        seen.append(ctx.context)
        return nine_to_six(at, ctx)

    flow = short_flow("10h", [{"id": "oi", "say": "Oi"}], businessHours=True)
    agent, _, _ = build([flow], business_hours=hours)
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, context={"tz": "UTC"})
    snapped = datetime(2026, 9, 21, 9, tzinfo=timezone.utc)
    ms = MS0 + 23 * HOUR
    assert [(e.key, e.at) for e in r.schedule] == [(f"f#k1:pausa:{ms}", snapped)]
    assert r.session.runs[0].waiting["until"] == "2026-09-21T09:00:00.000Z"
    assert r.outcomes[0].until == "2026-09-21T09:00:00.000Z"
    assert {"tz": "UTC"} in seen


def test_long_wait_without_business_hours_is_not_snapped():
    """runtime.md §7.7: snapping applies only where the step sets businessHours."""
    agent, _, _ = build([short_flow("10h", [{"id": "oi", "say": "Oi"}])], business_hours=nine_to_six)
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.at for e in r.schedule] == [NOW0 + timedelta(hours=10)]


def test_business_hours_flag_without_an_agent_function_is_not_snapped():
    """runtime.md §7.7: applied only where the step sets businessHours and the agent has the function."""
    agent, _, _ = build([short_flow("10h", [{"id": "oi", "say": "Oi"}], businessHours=True)])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.at for e in r.schedule] == [NOW0 + timedelta(hours=10)]


# Reply waits (a timer wait with else) ---------------------------------------------------------

def reply_flow(**wait_keys):
    return {"id": "f", "name": "F", "steps": [
        {"id": "espera", "wait": "1d", **wait_keys},
        {"id": "lembra", "say": "Lembrete", "then": "end"},
        {"id": "resp", "say": "Que bom que respondeu", "then": "end"},
        {"id": "vip", "say": "Olá, cliente VIP"}]}


def test_message_resolves_a_timer_wait_with_else_as_replied():
    """runtime.md §3.2 I-R: a message resumes a timer wait with else: wait / ok / replied, next = else."""
    agent, _, _ = build([reply_flow(**{"else": "resp"})])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert lines(t2) == [("wait", "ok", "replied"), ("say", "ok", None)]
    replied = t2.outcomes[0]
    assert (replied.next, replied.key, replied.step_id) == ("resp", None, "espera")
    assert replied.message == "the customer replied while the run waited"
    assert [(m.text, m.key) for m in t2.messages] == [("Que bom que respondeu", "f#k1:resp:1")]
    # The say answered the message: no idle speaker, nothing to judge.
    assert t2.llm_calls == 0 and t2.schedule == []
    assert [(e.id, e.reason) for e in t2.ended] == [("f#k1", "end")]


def test_reply_takes_the_first_if_branch_that_holds():
    """runtime.md §3.2 I-R rule 2: the first holding if branch of the wait step wins over else."""
    flow = reply_flow(**{"else": "resp",
                         "branches": [{"if": lambda ctx: bool((ctx.context or {}).get("vip")), "then": "vip"}]})
    agent, _, _ = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    vip = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1", context={"vip": True})
    assert only_line(vip, "replied").next == "vip"
    assert [m.text for m in vip.messages] == ["Olá, cliente VIP"]
    plain = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1", context={"vip": False})
    assert only_line(plain, "replied").next == "resp"


def test_message_does_not_touch_a_timer_wait_without_else():
    """runtime.md §3.2 I-R: timer waits without else are not touched by a reply."""
    agent, _, _ = build([reply_flow()], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert [o.code for o in t2.outcomes] == ["no-route"] and t2.messages == []
    assert t2.session.runs[0].status == "waiting"
    assert t2.session.runs[0].waiting == t1.session.runs[0].waiting


def test_wake_after_a_message_without_else_is_no_reply():
    """runtime.md §3.2 I-W rule 5: without else, the wake always takes then with no-reply, reply or not."""
    agent, _, clock = build([reply_flow()], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    clock.advance("23h")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert lines(t3)[0] == ("wait", "ok", "no-reply")
    assert [m.text for m in t3.messages] == ["Lembrete"]


def test_wake_after_a_reply_on_another_channel_takes_else_and_skips_branches():
    """runtime.md §3.2 I-W rule 5, §7.6, §6.3: an anchored flow reads lastInboundAt; at a wake, branches are not consulted."""
    flow = reply_flow(**{"else": "resp", "branches": [{"if": {}, "then": "vip"}]})
    flow["anchor"] = "lead"
    agent, _, clock = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors={"lead": {"key": "L1"}})
    clock.advance("1d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key,
                    anchors={"lead": {"key": "L1", "lastInboundAt": "2026-09-20T11:00:00.000Z"}})
    assert only_line(t2, "replied").next == "resp"
    assert [m.text for m in t2.messages] == ["Que bom que respondeu"]


def test_wake_with_else_and_no_reply_takes_then():
    """runtime.md §3.2 I-W rule 5: with else but no reply since setAt, the wake takes then (no-reply)."""
    flow = reply_flow(**{"else": "resp"})
    flow["anchor"] = "lead"
    agent, _, clock = build([flow])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors={"lead": {"key": "L1"}})
    clock.advance("1d")
    # A reply on another channel *before* the wait was set does not count (strictly later).
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key,
                    anchors={"lead": {"key": "L1", "lastInboundAt": T0}})
    assert lines(t2)[0] == ("wait", "ok", "no-reply")
    assert [m.text for m in t2.messages] == ["Lembrete"]


def event_on_a_reply_wait(direction):
    """A run waiting a day for a reply (else: resp), then 5 minutes later an event with ``direction``: its turn."""
    agent, _, clock = build([reply_flow(**{"else": "resp"})], events={"evento": F.EventDef(direction=direction)})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("5m")
    return agent.turn(session_id="s1", session=t1.session, event="evento", key="e1")


def test_inbound_event_stamps_last_user_at_and_resolves_reply_waits():
    """runtime.md §3.2 Event rule 1, flows.md §10: an inbound event counts as the customer speaking."""
    t2 = event_on_a_reply_wait("inbound")
    assert t2.session.last_user_at == "2026-09-20T10:05:00.000Z"
    assert only_line(t2, "replied").next == "resp"
    assert [m.text for m in t2.messages] == ["Que bom que respondeu"]


def test_outbound_event_stamps_last_assistant_at_and_leaves_reply_waits():
    """runtime.md §3.2 Event rule 1: an outbound event stamps lastAssistantAt and resolves nothing."""
    t2 = event_on_a_reply_wait("outbound")
    assert t2.session.last_assistant_at == "2026-09-20T10:05:00.000Z"
    assert t2.session.last_user_at is None
    assert t2.outcomes == [] and t2.session.runs[0].status == "waiting"


def test_event_without_direction_stamps_nothing():
    """runtime.md §3.2 Event rule 1: an event with no direction stamps neither side."""
    t2 = event_on_a_reply_wait(None)
    assert t2.session.last_user_at is None and t2.session.last_assistant_at is None
    assert t2.outcomes == [] and t2.changed is False


# Event waits ---------------------------------------------------------------------------------

def pedido(wait=None, **keys):
    return {"id": "pedido", "name": "Pedido", "steps": [
        {"id": "espera", "wait": wait or {"event": "pago"}, **keys},
        {"id": "ok", "say": "Pagamento de {{input.valor}} recebido", "then": "end"},
        {"id": "lembra", "say": "Ainda aguardamos o pagamento"}]}


def test_event_wait_parks_with_awaiting_event_for_thirty_days_by_default():
    """runtime.md §3.6.3 (event wait), §7.1: at = now + 30d, waiting.kind event, line awaiting-event."""
    agent, _, _ = build([pedido()], events={"pago": F.EventDef()})
    r = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1", "input": {"valor": 10}})
    key = f"pedido#k1:espera:{MS0 + 30 * DAY}"
    assert [(e.key, e.at) for e in r.schedule] == [(key, NOW0 + timedelta(days=30))]
    assert r.session.runs[0].waiting == {"kind": "event", "key": key, "until": "2026-10-20T10:00:00.000Z",
                                         "setAt": T0, "event": "pago"}
    line = only_line(r, "awaiting-event")
    assert (line.kind, line.status, line.detail, line.key, line.until) == (
        "wait", "waiting", "pago", "pedido#k1:espera:1", "2026-10-20T10:00:00.000Z")
    assert line.message == "the run is waiting for an event"


def test_event_wait_up_to_sets_the_deadline():
    """flows.md §5.7: upTo sets the timeout."""
    agent, _, _ = build([pedido({"event": "pago", "upTo": "2h"})], events={"pago": F.EventDef()})
    r = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    assert [e.key for e in r.schedule] == [f"pedido#k1:espera:{MS0 + 2 * HOUR}"]


def test_event_wait_is_never_snapped_by_business_hours():
    """runtime.md §7.1: an event wait's deadline is never snapped."""
    clock = fake_clock("2026-09-20T17:00:00.000Z")
    agent, _, _ = build([pedido({"event": "pago", "upTo": "2h"}, businessHours=True)], clock=clock,
                        events={"pago": F.EventDef()}, business_hours=nine_to_six)
    r = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    assert [e.at for e in r.schedule] == [datetime(2026, 9, 20, 19, tzinfo=timezone.utc)]


def test_event_arrival_releases_the_wait_with_event_arrived_and_then():
    """runtime.md §3.2 Event rule 2, §7.3: event-arrived, next = then; the payload does not replace the input."""
    agent, _, clock = build([pedido(then="ok")], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1", "input": {"valor": 10}})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, event="pago", key="e1", payload={"valor": 99})
    assert lines(t2) == [("wait", "ok", "event-arrived"), ("say", "ok", None)]
    arrived = t2.outcomes[0]
    assert (arrived.next, arrived.key, arrived.step_id) == ("ok", None, "espera")
    assert arrived.message == "the event was reported"
    assert [m.text for m in t2.messages] == ["Pagamento de 10 recebido"]
    assert t2.llm_calls == 0


def test_event_arrival_releases_every_run_waiting_on_that_name():
    """runtime.md §7.3: every run of the session waiting on the event is released, whatever its anchor."""
    other = copy.deepcopy(pedido())
    other["id"], other["anchor"] = "outro", "lead"
    agent, _, _ = build([pedido(), other], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1", "input": {"valor": 1}})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "outro", "key": "k2", "input": {"valor": 2}},
                    anchors={"lead": {"key": "L1"}})
    t3 = agent.turn(session_id="s1", session=t2.session, event="pago", key="e1")
    arrived = [o.run_id for o in t3.outcomes if o.code == "event-arrived"]
    assert arrived == ["pedido#k1", "outro#k2"]
    assert sorted(m.text for m in t3.messages) == ["Pagamento de 1 recebido", "Pagamento de 2 recebido"]
    assert t3.session.runs == []


def test_event_arrival_that_reaches_a_talk_step_speaks_with_one_call():
    """flows.md §10: an event carries no text; a run that reaches a talk step speaks first (one speak call)."""
    flow = {"id": "pedido", "name": "Pedido", "steps": [{"id": "espera", "wait": {"event": "pago"}},
                                                        {"id": "p", "prompt": "Agradeça o pagamento."}]}
    agent, provider, _ = build([flow], events={"pago": F.EventDef()}, script={"speak": [{"message": "Obrigada!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, event="pago", key="e1")
    assert t2.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["speak"]
    assert [(m.text, m.kind, m.key) for m in t2.messages] == [("Obrigada!", "ai", "pedido#k1:p:1")]


def test_event_wait_timeout_takes_else_with_no_event():
    """runtime.md §3.2 I-W rule 6: the wake of an event wait writes no-event and follows else."""
    agent, _, clock = build([pedido(**{"else": "lembra"})], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    clock.advance("30d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert lines(t2) == [("wait", "ok", "no-event"), ("say", "ok", None)]
    assert (t2.outcomes[0].next, t2.outcomes[0].key) == ("lembra", None)
    assert t2.outcomes[0].message == "the event did not arrive in time"
    assert [m.text for m in t2.messages] == ["Ainda aguardamos o pagamento"]


def test_event_wait_timeout_without_else_ends_the_run():
    """runtime.md §3.2 I-W rule 6, §11.3: with no else the target is "end", labelled next="end"."""
    agent, _, clock = build([pedido()], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    clock.advance("30d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert lines(t2) == [("wait", "ok", "no-event")]
    assert t2.outcomes[0].next == "end"
    assert [(e.id, e.reason) for e in t2.ended] == [("pedido#k1", "end")]
    assert t2.messages == [] and t2.session.runs == []


def test_a_message_does_not_end_an_event_wait():
    """flows.md §5.7: a customer message does not end an event wait, even with else."""
    agent, _, _ = build([pedido(**{"else": "lembra"})], events={"pago": F.EventDef()}, idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="já paguei", id="m1")
    assert [o.code for o in t2.outcomes] == ["no-route"]
    assert t2.session.runs[0].waiting == t1.session.runs[0].waiting


def test_an_event_wait_woken_after_arrival_is_stale():
    """runtime.md §7.4: after arrival the timeout wake no longer matches a live run."""
    agent, _, _ = build([pedido()], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, event="pago", key="e1")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert t3.changed is False and lines(t3) == [("wait", "skipped", "stale-wake")]


# Event triggers --------------------------------------------------------------------------------

def interesse(trigger=None, steps=None, **flow_keys):
    return {"id": "interesse", "name": "Interesse", "on": [trigger or {"event": "stage"}],
            "steps": steps or [{"id": "fala", "say": "Oi {{input.nome}}"}], **flow_keys}


def test_event_trigger_starts_a_run_with_the_payload_as_input():
    """runtime.md §3.2 Event rule 3, §5, flows.md §4.5: run id flow#key, payload as input, always-claim on the key."""
    agent, _, _ = build([interesse()], events={"stage": F.EventDef()})
    r = agent.turn(session_id="s1", event="stage", key="stage:7", payload={"nome": "Ana"})
    assert [(s.run_id, s.flow_id, s.anchor, s.dedupe_key) for s in r.started] == [
        ("interesse#stage:7", "interesse", "s1", "interesse:s1:stage%3A7")]    # the nonce escaped: limits.md
    assert [m.text for m in r.messages] == ["Oi Ana"]
    ended = r.ended[0]
    assert ended.trigger == {"kind": "event", "key": "stage:7", "payload": {"nome": "Ana"}}
    assert ended.input == {"nome": "Ana"} and ended.hop == 0
    assert r.session.claims == {"interesse:s1:stage%3A7": {"at": T0}}


def test_event_trigger_with_after_parks_with_awaiting_trigger():
    """runtime.md §5 rule 7: after parks the run under ${runId}:start:${atMs}; the line has until, no step, no key."""
    agent, _, _ = build([interesse({"event": "stage", "after": "1h"})], events={"stage": F.EventDef()})
    r = agent.turn(session_id="s1", event="stage", key="stage:7", payload={"nome": "Ana"})
    key = f"interesse#stage:7:start:{MS0 + HOUR}"
    assert [(e.key, e.at) for e in r.schedule] == [(key, NOW0 + timedelta(hours=1))]
    assert r.messages == []
    run = r.session.runs[0]
    assert (run.step_id, run.status) == (None, "waiting")
    assert run.waiting == {"kind": "timer", "key": key, "until": "2026-09-20T11:00:00.000Z", "setAt": T0}
    line = only_line(r, "awaiting-trigger")
    assert (line.kind, line.status, line.key, line.step_id, line.run_id, line.until) == (
        "wait", "waiting", None, None, "interesse#stage:7", "2026-09-20T11:00:00.000Z")
    assert line.message == "the trigger's delay has not passed"


def test_trigger_delay_wake_enters_the_first_step():
    """runtime.md §3.2 I-W rule 3: a run parked on its trigger delay enters its first step in phase 5, no wait line."""
    agent, _, clock = build([interesse({"event": "stage", "after": "1h"})], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7", payload={"nome": "Ana"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert lines(t2) == [("say", "ok", None)]
    assert [(m.text, m.key) for m in t2.messages] == [("Oi Ana", "interesse#stage:7:fala:1")]


def test_trigger_delay_wake_rechecks_the_premise():
    """flows.md §4.5, runtime.md §3.6.2: the trigger's if is re-checked when the parked run wakes."""
    trigger = {"event": "stage", "after": "1h", "if": lambda ctx: (ctx.context or {}).get("stage") == "proposta"}
    agent, _, clock = build([interesse(trigger)], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7", context={"stage": "proposta"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"stage": "fechado"})
    assert lines(t2) == [("if", "skipped", "premise-changed")]         # no current step: kind "if"
    assert t2.outcomes[0].key is None and t2.outcomes[0].step_id is None
    assert [(e.id, e.reason) for e in t2.ended] == [("interesse#stage:7", "skipped")]
    assert t2.messages == []


def test_a_second_start_replaces_a_run_parked_on_its_trigger_delay():
    """runtime.md §5 rule 5, §4.8: a run still parked on its trigger delay ends `replaced` (no line)."""
    agent, _, clock = build([interesse({"event": "stage", "after": "1h"})], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7")
    clock.advance("10m")
    t2 = agent.turn(session_id="s1", session=t1.session, event="stage", key="stage:8")
    assert [(e.id, e.reason) for e in t2.ended] == [("interesse#stage:7", "replaced")]
    assert [s.run_id for s in t2.started] == ["interesse#stage:8"]
    assert lines(t2) == [("wait", "waiting", "awaiting-trigger")]
    assert [r.id for r in t2.session.runs] == ["interesse#stage:8"]
    assert t2.skipped == []


def test_a_second_start_while_the_first_run_moves_is_already_running():
    """runtime.md §5 rule 5: a live run that is not parked on its trigger delay refuses the start."""
    steps = [{"id": "espera", "wait": "1d"}, {"id": "fala", "say": "Oi"}]
    agent, _, _ = build([interesse(steps=steps)], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7")
    t2 = agent.turn(session_id="s1", session=t1.session, event="stage", key="stage:8")
    assert [(s.flow_id, s.anchor, s.trigger_key, s.code, s.message) for s in t2.skipped] == [
        ("interesse", "s1", "stage:8", "already-running", "a run of this flow is already live here")]
    assert t2.started == [] and t2.ended == []


def test_the_same_event_key_twice_is_already_claimed():
    """flows.md §4.5: re-publishing the same event key is skipped already-claimed."""
    agent, _, _ = build([interesse()], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7")
    t2 = agent.turn(session_id="s1", session=t1.session, event="stage", key="stage:7")
    assert [(s.code, s.trigger_key) for s in t2.skipped] == [("already-claimed", "stage:7")]
    assert t2.messages == [] and t2.started == []


def test_event_trigger_whose_if_fails_writes_nothing():
    """runtime.md §5 rule 2: a false trigger if starts nothing and writes no line and no skip."""
    trigger = {"event": "stage", "if": lambda ctx: ctx.input == {"ok": True}}
    agent, _, _ = build([interesse(trigger)], events={"stage": F.EventDef()})
    t0 = agent.turn(session_id="s1", event="stage", key="x", payload={"ok": True})
    r = agent.turn(session_id="s1", session=t0.session, event="stage", key="y", payload={"ok": False})
    assert (r.started, r.skipped, r.outcomes, r.messages) == ([], [], [], [])
    assert r.changed is False


def test_a_failing_trigger_lets_the_next_trigger_of_the_same_flow_try():
    """runtime.md §3.2 Event rule 3: a trigger that fails lets the next one of the same flow try."""
    flow = interesse()
    flow["on"] = [{"event": "stage", "if": {"silenced": True}}, {"event": "stage", "after": "1h"}]
    agent, _, _ = build([flow], events={"stage": F.EventDef()})
    r = agent.turn(session_id="s1", event="stage", key="stage:7")
    assert [s.run_id for s in r.started] == ["interesse#stage:7"]
    assert lines(r) == [("wait", "waiting", "awaiting-trigger")]


def test_only_the_first_trigger_that_starts_a_run_is_used():
    """runtime.md §3.2 Event rule 3: stop at the first trigger of the flow that starts a run (no second try, no skip)."""
    flow = interesse()
    flow["on"] = [{"event": "stage"}, {"event": "stage", "after": "1h"}]
    agent, _, _ = build([flow], events={"stage": F.EventDef()})
    r = agent.turn(session_id="s1", event="stage", key="stage:7", payload={"nome": "Ana"})
    assert [s.run_id for s in r.started] == ["interesse#stage:7"]
    assert r.skipped == [] and r.schedule == [] and [m.text for m in r.messages] == ["Oi Ana"]


def test_event_trigger_with_business_hours_starts_at_once_inside_hours():
    """runtime.md §7.7: with no after, an event trigger with businessHours starts at once inside working hours."""
    agent, _, _ = build([interesse({"event": "stage", "businessHours": True})], events={"stage": F.EventDef()},
                        business_hours=nine_to_six)
    r = agent.turn(session_id="s1", event="stage", key="stage:7", payload={"nome": "Ana"})
    assert [m.text for m in r.messages] == ["Oi Ana"] and r.schedule == []
    assert "awaiting-trigger" not in [o.code for o in r.outcomes]


def test_event_trigger_with_business_hours_parks_outside_hours():
    """runtime.md §5 rule 7, §7.7: outside working hours the start parks with awaiting-trigger until the snapped time."""
    clock = fake_clock("2026-09-20T20:00:00.000Z")
    agent, _, _ = build([interesse({"event": "stage", "businessHours": True})], events={"stage": F.EventDef()},
                        business_hours=nine_to_six, clock=clock)
    r = agent.turn(session_id="s1", event="stage", key="stage:7")
    nine = datetime(2026, 9, 21, 9, tzinfo=timezone.utc)
    nine_ms = MS0 + 23 * HOUR
    assert [(e.key, e.at) for e in r.schedule] == [(f"interesse#stage:7:start:{nine_ms}", nine)]
    assert only_line(r, "awaiting-trigger").until == "2026-09-21T09:00:00.000Z"
    assert r.messages == []


def test_event_trigger_after_is_snapped_with_business_hours():
    """runtime.md §5 rule 7: at = now + after, snapped when the trigger sets businessHours."""
    agent, _, _ = build([interesse({"event": "stage", "after": "10h", "businessHours": True})],
                        events={"stage": F.EventDef()}, business_hours=nine_to_six)
    r = agent.turn(session_id="s1", event="stage", key="stage:7")
    assert [e.at for e in r.schedule] == [datetime(2026, 9, 21, 9, tzinfo=timezone.utc)]


def test_unregistered_event_name_matches_nothing():
    """runtime.md §2.2: an event name that is not registered simply matches nothing."""
    agent, _, _ = build([interesse()], events={"stage": F.EventDef()})
    r = agent.turn(session_id="s1", event="outro", key="k")
    assert (r.started, r.skipped, r.changed) == ([], [], False)
    assert [(o.kind, o.status, o.code, o.key, o.detail) for o in r.outcomes] == [
        ("wait", "skipped", "unknown-event", "k", "outro")]


# Silence triggers ----------------------------------------------------------------------------

OLA = {"id": "ola", "name": "Olá", "steps": [{"id": "oi", "say": "Olá!"}]}


def retomar(silence="24h", steps=None, **trigger_keys):
    return {"id": "retomar", "name": "Retomar", "on": [{"silence": silence, **trigger_keys}],
            "steps": steps or [{"id": "p1", "say": "Ainda está aí?"}]}


def test_the_assistant_speaking_arms_a_silence_wake():
    """runtime.md §7.5: a turn in which the assistant spoke arms silence:<flowId>:<sessionId>:<ms>."""
    agent, _, _ = build([OLA, retomar()])
    r = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    assert r.session.last_assistant_at == T0
    assert [(e.key, e.at, e.replaces) for e in r.schedule] == [
        (f"silence:retomar:s1:{MS0}", NOW0 + timedelta(hours=24), None)]


def test_rearming_names_the_superseded_silence_wake_in_replaces():
    """runtime.md §7.5 arming rule 3: replaces = the wake of the input session's lastAssistantAt."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "ola", "key": "k2"})
    assert [(e.key, e.replaces) for e in t2.schedule] == [
        (f"silence:retomar:s1:{MS0 + HOUR}", f"silence:retomar:s1:{MS0}")]


def test_a_turn_in_which_nobody_spoke_arms_nothing():
    """runtime.md §7.5 arming rule 2: unchanged lastAssistantAt arms nothing."""
    flow = {"id": "quieto", "name": "Quieto", "steps": [{"id": "c", "if": {}}]}
    agent, _, _ = build([OLA, retomar(), flow])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "quieto", "key": "k2"})
    assert t2.schedule == []


def test_schedule_lists_parks_before_silence_wakes():
    """runtime.md §12: schedule holds the parks in the order they happened, then silence wakes."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Oi"}, {"id": "espera", "wait": "1d"}]}
    agent, _, _ = build([retomar(), flow])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.key for e in r.schedule] == [f"f#k1:espera:{MS0 + DAY}", f"silence:retomar:s1:{MS0}"]


def test_the_silence_wake_starts_the_flow_keyed_by_the_silence_ms():
    """runtime.md §3.2 I-S, §7.5 Firing: the run's trigger key is str(ms); its id is <flowId>#<ms>."""
    agent, provider, clock = build([OLA, retomar(steps=[{"id": "p1", "prompt": "Retome a conversa."}])],
                                   script={"speak": [{"message": "Ainda por aí?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(s.run_id, s.dedupe_key) for s in t2.started] == [(f"retomar#{MS0}", "retomar:s1:")]
    assert t2.ended[0].trigger == {"kind": "silence", "key": str(MS0)}
    assert [(m.text, m.key) for m in t2.messages] == [("Ainda por aí?", f"retomar#{MS0}:p1:1")]
    assert t2.llm_calls == 1 and [c.schema_name for c in provider.calls] == ["speak"]


def test_a_fired_once_silence_flow_is_not_armed_again():
    """runtime.md §7.5: arming skips a flow whose repeat does not allow a start under the new ms."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [m.text for m in t2.messages] == ["Ainda está aí?"]
    assert t2.schedule == []                                            # the "once" claim is held now


def test_an_always_silence_flow_is_armed_again_after_firing():
    """runtime.md §6.1: with repeat always the nonce is the ms, so the next silence arms a new wake."""
    agent, _, clock = build([OLA, retomar(repeat="always")])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(e.key, e.replaces) for e in t2.schedule] == [
        (f"silence:retomar:s1:{MS0 + DAY}", f"silence:retomar:s1:{MS0}")]
    assert t2.started[0].dedupe_key == f"retomar:s1:{MS0}"


def test_silence_wake_after_the_assistant_spoke_again_is_silence_broken():
    """runtime.md §3.2 I-S rule 3: a lastAssistantAt with another ms ignores the wake with silence-broken."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "ola", "key": "k2"})
    late = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert late.changed is False
    assert [(o.kind, o.status, o.code, o.key) for o in late.outcomes] == [
        ("wait", "skipped", "silence-broken", t1.schedule[0].key)]
    assert late.outcomes[0].message == "someone wrote after this silence wake was set"


def test_silence_wake_after_the_customer_wrote_is_silence_broken():
    """runtime.md §3.2 I-S rule 3, §7.6: the customer writing after lastAssistantAt breaks the silence."""
    agent, _, clock = build([OLA, retomar()], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert t2.session.last_assistant_at == T0                         # nobody answered
    clock.advance("23h")
    late = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert late.changed is False and lines(late) == [("wait", "skipped", "silence-broken")]


def test_silence_wake_with_no_last_assistant_at_is_silence_broken():
    """runtime.md §3.2 I-S rule 3: a missing lastAssistantAt ignores the wake."""
    flow = {"id": "q", "name": "Q", "steps": [{"id": "espera", "wait": "1d"}]}
    agent, _, _ = build([flow, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "q", "key": "k1"})
    r = agent.turn(session_id="s1", session=t1.session, wake=f"silence:retomar:s1:{MS0}")
    assert r.changed is False and lines(r) == [("wait", "skipped", "silence-broken")]


def test_silence_wake_for_a_removed_flow_is_a_flow_gone_skip():
    """runtime.md §3.2 I-S rule 2: no flow with that id: a skipped entry; the input is not ignored."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    edited, _, _ = build([OLA], clock=clock)
    clock.advance("24h")
    r = edited.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(s.flow_id, s.anchor, s.trigger_key, s.code) for s in r.skipped] == [
        ("retomar", "s1", str(MS0), "flow-gone")]
    assert r.skipped[0].message == "the flow is no longer registered on the agent"
    assert r.changed is True and r.outcomes == []


def test_silence_wake_for_a_flow_that_lost_its_silence_trigger_starts_nothing():
    """runtime.md §3.2 I-S rule 4: nothing starts, no line and no skip; the input is not ignored."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    edited_flow = retomar()
    del edited_flow["on"]
    edited, _, _ = build([OLA, edited_flow], clock=clock)
    clock.advance("24h")
    r = edited.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert (r.started, r.skipped, r.outcomes, r.messages) == ([], [], [], [])
    assert r.changed is False


def test_a_silence_trigger_whose_if_fails_is_not_armed():
    """runtime.md §7.5: a flow whose trigger if does not hold for a draft run gets no wake."""
    flow = retomar(**{"if": lambda ctx: (ctx.context or {}).get("followup", True)})
    agent, _, _ = build([OLA, flow])
    r = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"}, context={"followup": False})
    assert r.schedule == []
    r2 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"}, context={"followup": True})
    assert [e.key for e in r2.schedule] == [f"silence:retomar:s1:{MS0}"]


def test_a_silence_trigger_if_is_judged_again_when_it_fires_and_a_false_one_changes_nothing():
    """flows.md §4.4: the if is judged when armed and again when the wake fires; false starts nothing.
    runtime.md §3.9: such a wake produces nothing, so changed is False."""
    flow = retomar(**{"if": lambda ctx: (ctx.context or {}).get("followup", True)})
    agent, _, clock = build([OLA, flow])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    r = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key, context={"followup": False})
    assert (r.started, r.skipped, r.outcomes) == ([], [], []) and r.changed is False


def test_silence_wake_is_snapped_by_business_hours():
    """runtime.md §7.5: at = lastAssistantAt + silence, snapped when the trigger sets businessHours."""
    agent, _, _ = build([OLA, retomar("10h", businessHours=True)], business_hours=nine_to_six)
    r = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    assert [(e.key, e.at) for e in r.schedule] == [
        (f"silence:retomar:s1:{MS0}", datetime(2026, 9, 21, 9, tzinfo=timezone.utc))]


def test_a_flow_id_with_colons_round_trips_through_its_silence_wake():
    """runtime.md §3.2 I-S rule 1: a flow id with ":" round-trips; its ":" are escaped in the key, so the flow id
    is the text up to the first ":" (a deliberate difference, docs/guide/limits.md)."""
    flow = retomar()
    flow["id"] = "re:to:mar"
    agent, _, clock = build([OLA, flow])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    assert [e.key for e in t1.schedule] == [f"silence:re%3Ato%3Amar:s1:{MS0}"]
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [s.run_id for s in t2.started] == [f"re:to:mar#{MS0}"]


def test_silence_run_woken_after_the_customer_wrote_ends_customer_replied():
    """runtime.md §3.6.2 rule 1: a silence run on a wake turn, after the customer wrote since it started, ends."""
    steps = [{"id": "espera", "wait": "1h"}, {"id": "p1", "say": "Ainda está aí?"}]
    agent, _, clock = build([OLA, retomar(steps=steps)], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    parked = t2.schedule[0]
    clock.advance("10m")
    t3 = agent.turn(session_id="s1", session=t2.session, message="voltei", id="m1")
    clock.advance("50m")
    t4 = agent.turn(session_id="s1", session=t3.session, wake=parked.key)
    # Ingest follows the wait's then (I-W rule 5) before Run checks the premise, so the run-ending
    # line takes the kind of the step the run now sits on (§4.8).
    assert lines(t4) == [("wait", "ok", "no-reply"), ("say", "skipped", "customer-replied")]
    line = t4.outcomes[-1]
    assert (line.step_id, line.key, line.message) == ("p1", None, "the customer wrote before the wake fired")
    assert [(e.id, e.reason) for e in t4.ended] == [(f"retomar#{MS0}", "skipped")]
    assert t4.messages == []


def test_silence_run_woken_with_no_reply_since_it_started_goes_on():
    """runtime.md §3.6.2 rule 1: no reply since startedAt, the silence run moves on."""
    steps = [{"id": "espera", "wait": "1h"}, {"id": "p1", "say": "Ainda está aí?"}]
    agent, _, clock = build([OLA, retomar(steps=steps)])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("24h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    clock.advance("1h")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t2.schedule[0].key)
    assert [m.text for m in t3.messages] == ["Ainda está aí?"]


def test_an_anchored_silence_is_broken_by_the_anchors_last_inbound_at():
    """runtime.md §3.2 I-S rule 3, §6.3: the firing test reads the anchor's lastInboundAt for anchored flows."""
    flow = retomar()
    flow["anchor"] = "lead"
    agent, _, clock = build([OLA, flow])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"}, anchors={"lead": {"key": "L1"}})
    clock.advance("24h")
    r = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key,
                   anchors={"lead": {"key": "L1", "lastInboundAt": "2026-09-20T12:00:00.000Z"}})
    assert r.changed is False and lines(r) == [("wait", "skipped", "silence-broken")]
    ok = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key,
                    anchors={"lead": {"key": "L1", "lastInboundAt": "2026-09-20T09:00:00.000Z"}})
    assert [s.run_id for s in ok.started] == [f"retomar#{MS0}"]
    assert ok.started[0].anchor == "L1"


def test_arming_ignores_the_anchors_last_inbound_at():
    """runtime.md §7.5 Note: arming tests only the session's own lastUserAt."""
    flow = retomar()
    flow["anchor"] = "lead"
    agent, _, _ = build([OLA, flow])
    r = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"},
                   anchors={"lead": {"key": "L1", "lastInboundAt": "2026-09-20T12:00:00.000Z"}})
    assert [e.key for e in r.schedule] == [f"silence:retomar:s1:{MS0}"]


def test_silence_wake_uses_the_session_id_argument():
    """runtime.md §2.2: keys that name the session use session_id, not the passed session's id."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    renamed = copy.deepcopy(t1.session)
    renamed.id = "outro"
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=renamed, start={"flow": "ola", "key": "k2"})
    assert [(e.key, e.replaces) for e in t2.schedule] == [
        (f"silence:retomar:s1:{MS0 + HOUR}", f"silence:retomar:s1:{MS0}")]
    clock.advance("24h")
    fired = agent.turn(session_id="s1", session=t2.session, wake=t2.schedule[0].key)
    assert [s.run_id for s in fired.started] == [f"retomar#{MS0 + HOUR}"]


# pending_wakes() --------------------------------------------------------------------------------

PARKED = {"id": "lembrete", "name": "Lembrete", "steps": [{"id": "oi", "say": "Oi"}, {"id": "espera", "wait": "1d"}]}


def test_pending_wakes_lists_parked_runs_then_silence_wakes_without_replaces():
    """runtime.md §14: each parked run's wake, then the silence wakes; entries carry no replaces."""
    agent, _, clock = build([PARKED, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1h")
    wakes = agent.pending_wakes(session=t1.session)
    assert [(e.key, e.at, e.replaces) for e in wakes] == [
        (f"lembrete#k1:espera:{MS0 + DAY}", NOW0 + timedelta(days=1), None),
        (f"silence:retomar:s1:{MS0}", NOW0 + timedelta(hours=24), None)]
    assert [(e.key, e.at) for e in wakes] == [(e.key, e.at) for e in t1.schedule]


def test_pending_wakes_never_carries_replaces_even_after_rearming():
    """runtime.md §14 rule 3: pending_wakes entries carry no replaces."""
    agent, _, clock = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "ola", "key": "k2"})
    assert t2.schedule[0].replaces is not None
    assert [(e.key, e.replaces) for e in agent.pending_wakes(session=t2.session)] == [
        (f"silence:retomar:s1:{MS0 + HOUR}", None)]


def test_pending_wakes_changes_nothing_and_calls_no_model():
    """runtime.md §14: pending_wakes reads the clock but changes nothing and makes no model call."""
    agent, provider, _ = build([PARKED, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    before = copy.deepcopy(t1.session)
    agent.pending_wakes(session=t1.session)
    assert t1.session == before and provider.calls == []


def test_pending_wakes_lists_no_silence_wake_once_the_customer_wrote():
    """runtime.md §7.5, §14: lastUserAt later than lastAssistantAt yields no silence wake."""
    agent, _, clock = build([PARKED, retomar()], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")
    assert [e.key for e in agent.pending_wakes(session=t2.session)] == [f"lembrete#k1:espera:{MS0 + DAY}"]


def test_pending_wakes_uses_the_sessions_own_id():
    """runtime.md §14: with no session_id argument, keys that name the session use its own id."""
    agent, _, _ = build([OLA, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    renamed = copy.deepcopy(t1.session)
    renamed.id = "outro"
    assert [e.key for e in agent.pending_wakes(session=renamed)] == [f"silence:retomar:outro:{MS0}"]


def test_pending_wakes_judges_if_and_repeat_on_what_it_is_given():
    """runtime.md §14 rule 2: the trigger if and repeat are judged on the given context and claims."""
    flow = retomar(**{"if": lambda ctx: (ctx.context or {}).get("followup", True)})
    agent, _, _ = build([OLA, flow])
    t1 = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    assert len(agent.pending_wakes(session=t1.session)) == 1
    assert agent.pending_wakes(session=t1.session, context={"followup": False}) == []
    assert agent.pending_wakes(session=t1.session, claims={"held": {"retomar:s1:": T0}}) == []


def test_pending_wakes_is_empty_for_a_session_with_nothing_pending():
    """runtime.md §14: no parked run and no lastAssistantAt: nothing."""
    flow = {"id": "q", "name": "Q", "steps": [{"id": "c", "if": {}}]}
    agent, _, _ = build([flow, retomar()])
    t1 = agent.turn(session_id="s1", start={"flow": "q", "key": "k1"})
    assert agent.pending_wakes(session=t1.session) == []


# Speak failures and the retry ladder ---------------------------------------------------------------

def talk_flow(step=None):
    return {"id": "f", "name": "F", "steps": [step or {"id": "p", "prompt": "Diga oi."}]}


def test_a_speak_failure_parks_the_talk_step_on_the_first_rung():
    """runtime.md §10.2 rule 3: +1m, key ${runId}:${stepId}:${visit}:retry:${atMs}, a deferred line with until."""
    agent, _, _ = build([talk_flow()], script={"speak": [DOWN]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    key = f"f#k1:p:1:retry:{MS0 + MIN}"
    assert [(e.key, e.at) for e in r.schedule] == [(key, NOW0 + timedelta(minutes=1))]
    assert lines(r) == [("prompt", "deferred", "provider-unavailable")]
    line = r.outcomes[0]
    assert (line.key, line.until, line.llm_calls) == ("f#k1:p:1", "2026-09-20T10:01:00.000Z", None)
    assert line.message == "the model call failed or came back empty"
    run = r.session.runs[0]
    assert run.status == "waiting"                                     # not asking while parked
    assert run.waiting == {"kind": "timer", "key": key, "until": "2026-09-20T10:01:00.000Z", "setAt": T0}
    assert r.llm_calls == 1 and r.messages == [] and r.changed is True


def test_a_blank_reply_defers_like_a_failure():
    """runtime.md §3.7, §10.2: an empty final message is deferred as provider-unavailable, retryable."""
    agent, _, _ = build([talk_flow()], script={"speak": [""]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("prompt", "deferred", "provider-unavailable")]
    assert r.messages == [] and len(r.schedule) == 1


def test_the_retry_ladder_is_1m_5m_15m_1h_6h_then_the_run_fails():
    """runtime.md §10.2: five retry wakes, then the sixth failure in a row ends the run failed, no wake."""
    agent, _, clock = build([talk_flow({"id": "q", "collect": ["nome"]})],
                            fields={"nome": {"type": "string", "ask": "Pergunte o nome."}},
                            script={"speak": [DOWN] * 6})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    gaps = []
    for rung in range(5):
        assert lines(r) == [("collect", "deferred", "provider-unavailable")], rung
        entry = r.schedule[0]
        now = clock()
        gaps.append(entry.at - now)
        assert entry.key == f"f#k1:q:1:retry:{int((entry.at - NOW0).total_seconds() * 1000) + MS0}"
        clock.set(iso(entry.at))
        r = agent.turn(session_id="s1", session=r.session, wake=entry.key)
    assert gaps == [timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15),
                    timedelta(hours=1), timedelta(hours=6)]
    assert lines(r) == [("collect", "failed", "provider-unavailable")]
    assert r.outcomes[0].key == "f#k1:q:1" and r.outcomes[0].until is None
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "failed")]
    assert r.schedule == [] and r.session.runs == [] and r.llm_calls == 1


def test_a_retry_wake_reruns_the_step_at_the_same_visit():
    """runtime.md §10.2, §8: the retry wake re-runs the same step without entering it again: same key."""
    agent, _, clock = build([talk_flow()], script={"speak": [DOWN, {"message": "Oi!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(m.text, m.key) for m in t2.messages] == [("Oi!", "f#k1:p:1")]
    assert lines(t2) == [("prompt", "ok", None)]
    assert t2.outcomes[0].llm_calls == 1 and t2.outcomes[0].next is None
    assert t2.ended[0].visits == {"p": 1}


def test_a_success_restarts_the_ladder_count():
    """runtime.md §10.2 rule 1: the attempt counts only consecutive trailing deferred lines of this step."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "Diga oi."}, {"id": "q", "prompt": "Pergunte."}]}
    agent, _, clock = build([flow], script={"speak": [DOWN, {"message": "Oi!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    # p spoke, q was reached after speaking: it waits for the next message (asking).
    assert t2.session.runs[0].step_id == "q" and t2.session.runs[0].status == "asking"


def test_what_ran_before_a_failed_speak_call_stands():
    """runtime.md §10.2: everything Run did before the speak call stands (a say's message is in messages)."""
    flow = {"id": "f", "name": "F", "steps": [{"id": "oi", "say": "Um momento"}, {"id": "p", "prompt": "Diga oi."}]}
    agent, _, _ = build([flow], script={"speak": [DOWN]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["Um momento"]
    assert lines(r) == [("say", "ok", None), ("prompt", "deferred", "provider-unavailable")]
    assert r.session.last_assistant_at == T0


def test_the_idle_speaker_failure_writes_idle_deferred_and_no_wake():
    """runtime.md §3.8 item 2, §10.1: idle / deferred with a provider code and llmCalls, no key, no wake."""
    agent, _, _ = build([], script={"speak": [DOWN, {"message": "Oi!"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1")
    assert lines(r) == [("idle", "deferred", "provider-unavailable")]
    line = r.outcomes[0]
    assert (line.key, line.llm_calls, line.run_id) == (None, 1, None)
    assert r.schedule == [] and r.messages == [] and r.changed is True
    again = agent.turn(session_id="s1", session=r.session, message="oi?", id="m2")
    assert [(m.text, m.key, m.kind) for m in again.messages] == [("Oi!", "idle:m2", "ai")]


def _speak_returning(result):
    def speak(agent, ask, streaming):
        return result
        yield ""  # pragma: no cover - makes this a generator like section 10's speak
    return speak


def test_a_reset_time_later_than_the_rung_moves_the_wake(monkeypatch):
    """runtime.md §10.2 rule 3: a reset time later than the rung moves the wake to it."""
    reset = MS0 + 10 * MIN
    monkeypatch.setattr(falai_calls, "speak", _speak_returning(
        F.Deferred(code="provider-unavailable", retryable=True, reset_at_ms=reset, llm_calls=1)))
    agent, _, _ = build([talk_flow()])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(e.key, e.at) for e in r.schedule] == [(f"f#k1:p:1:retry:{reset}", at_ms(reset))]
    assert r.outcomes[0].until == "2026-09-20T10:10:00.000Z"


def test_a_reset_time_earlier_than_the_rung_is_ignored(monkeypatch):
    """runtime.md §10.2 rule 3: only a later reset time moves the wake."""
    monkeypatch.setattr(falai_calls, "speak", _speak_returning(
        F.Deferred(code="provider-unavailable", retryable=True, reset_at_ms=MS0 + 10 * SEC, llm_calls=1)))
    agent, _, _ = build([talk_flow()])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.key for e in r.schedule] == [f"f#k1:p:1:retry:{MS0 + MIN}"]


def test_a_failure_no_wait_can_fix_ends_the_run_failed_at_once(monkeypatch):
    """runtime.md §10.2 rule 2: not retryable: <talk kind> / failed / <code>, the run ends failed, no wake."""
    monkeypatch.setattr(falai_calls, "speak", _speak_returning(
        F.Deferred(code="provider-auth", retryable=False, llm_calls=1)))
    agent, _, _ = build([talk_flow()])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("prompt", "failed", "provider-auth")]
    assert r.outcomes[0].message == "the provider rejected the credentials"
    assert r.outcomes[0].key == "f#k1:p:1"
    assert [(e.id, e.reason) for e in r.ended] == [("f#k1", "failed")]
    assert r.schedule == [] and r.llm_calls == 1


@real_speak
def test_a_provider_reset_at_ms_moves_the_retry_wake():
    """runtime.md §10.2 rule 3 with a scripted ProviderError: reset_at_ms later than the rung moves the wake."""
    reset = MS0 + 30 * MIN
    agent, _, _ = build([talk_flow()], script={"speak": [ProviderError("slow down", kind="rate", reset_at_ms=reset,
                                                                      retry_after_ms=2 * HOUR)]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [e.key for e in r.schedule] == [f"f#k1:p:1:retry:{reset}"]     # retry_after_ms never moves it


@real_speak
def test_should_retry_false_fails_the_run_at_once():
    """runtime.md §10.2: an explicit should_retry overrides the default; False ends the run failed."""
    agent, _, _ = build([talk_flow()], script={"speak": [ProviderError("no", kind="rate", should_retry=False)]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("prompt", "failed", "provider-unavailable")]
    assert r.ended[0].reason == "failed" and r.schedule == []


@real_speak
def test_a_quota_error_with_a_reset_time_defers_as_provider_quota():
    """runtime.md §10.2: quota is retryable only when the error states a reset time."""
    reset = MS0 + 2 * HOUR
    agent, _, _ = build([talk_flow()], script={"speak": [ProviderError("quota", kind="quota", reset_at_ms=reset)]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("prompt", "deferred", "provider-quota")]
    assert [e.key for e in r.schedule] == [f"f#k1:p:1:retry:{reset}"]


# More on waits and silence ---------------------------------------------------------------------------

def test_an_event_wait_whose_else_is_none_ends_on_timeout():
    """flows.md Notation and §5.7: else None means "not set", so the timeout target is "end"."""
    agent, _, clock = build([pedido(**{"else": None})], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    clock.advance("30d")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert t2.outcomes[0].next == "end"
    assert t2.messages == [] and [(e.id, e.reason) for e in t2.ended] == [("pedido#k1", "end")]


def test_a_wait_without_set_at_reads_the_runs_started_at():
    """runtime.md §3.2 I-W rule 2: setAt, or the run's startedAt when it is missing."""
    flow = {"id": "f", "name": "F", "steps": [
        {"id": "w1", "wait": "1h"}, {"id": "w2", "wait": "1h", "else": "resp"},
        {"id": "lembra", "say": "Lembrete", "then": "end"}, {"id": "resp", "say": "Resposta"}]}
    agent, _, clock = build([flow], idle="silent")
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    clock.advance("30m")
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m1")     # w1 has no else: untouched
    clock.advance("30m")
    t3 = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert t3.session.runs[0].waiting["setAt"] == "2026-09-20T11:00:00.000Z"
    clock.advance("1h")
    kept = agent.turn(session_id="s1", session=t3.session, wake=t3.schedule[0].key)
    assert kept.outcomes[0].code == "no-reply"                          # the reply came before setAt
    legacy = copy.deepcopy(t3.session)
    del legacy.runs[0].waiting["setAt"]
    fallback = agent.turn(session_id="s1", session=legacy, wake=t3.schedule[0].key)
    assert fallback.outcomes[0].code == "replied"                       # but after startedAt
    assert [m.text for m in fallback.messages] == ["Resposta"]


def test_the_wake_of_a_replaced_run_is_stale():
    """runtime.md §7.4: a replaced run is gone, so its trigger-delay wake no longer matches."""
    agent, _, clock = build([interesse({"event": "stage", "after": "1h"})], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7")
    t2 = agent.turn(session_id="s1", session=t1.session, event="stage", key="stage:8")
    clock.advance("1h")
    r = agent.turn(session_id="s1", session=t2.session, wake=t1.schedule[0].key)
    assert r.changed is False and lines(r) == [("wait", "skipped", "stale-wake")]


def test_republishing_the_same_event_key_does_not_replace_the_parked_run():
    """runtime.md §5 rules 3 and 5: the claim is checked before the replacement, so the same key is already-claimed."""
    agent, _, _ = build([interesse({"event": "stage", "after": "1h"})], events={"stage": F.EventDef()})
    t1 = agent.turn(session_id="s1", event="stage", key="stage:7")
    t2 = agent.turn(session_id="s1", session=t1.session, event="stage", key="stage:7")
    assert [s.code for s in t2.skipped] == ["already-claimed"]
    assert t2.ended == [] and t2.session.runs == t1.session.runs


def test_an_idle_reply_arms_a_silence_wake_that_fires():
    """runtime.md §7.5: lastUserAt equal to lastAssistantAt is not "later", so the wake is armed and honoured."""
    agent, _, clock = build([retomar("1h")], script={"speak": [{"message": "Olá!"}]})
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert t1.session.last_user_at == t1.session.last_assistant_at == T0
    assert [e.key for e in t1.schedule] == [f"silence:retomar:s1:{MS0}"]
    clock.advance("1h")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [s.run_id for s in t2.started] == [f"retomar#{MS0}"]
    assert [m.text for m in t2.messages] == ["Ainda está aí?"]


def test_a_message_at_after_the_agents_clock_arms_no_silence_wake():
    """runtime.md §7.5 Note: a host at later than the clock makes lastUserAt later than lastAssistantAt: no wake."""
    agent, _, _ = build([retomar("1h")], script={"speak": [{"message": "Olá!"}]})
    r = agent.turn(session_id="s1", message="oi", id="m1", at="2026-09-20T10:05:00.000Z")
    assert r.session.last_assistant_at == T0 and r.schedule == []
    assert agent.pending_wakes(session=r.session) == []


def test_event_arrival_for_a_removed_flow_ends_the_run_flow_gone():
    """runtime.md §3.2 Event rule 2: flow gone -> no arrival line; Run reports flow-gone."""
    agent, _, clock = build([pedido()], events={"pago": F.EventDef()})
    t1 = agent.turn(session_id="s1", start={"flow": "pedido", "key": "k1"})
    edited, _, _ = build([], events={"pago": F.EventDef()}, clock=clock)
    r = edited.turn(session_id="s1", session=t1.session, event="pago", key="e1")
    assert [(o.status, o.code) for o in r.outcomes] == [("skipped", "flow-gone")]
    assert [(e.id, e.reason) for e in r.ended] == [("pedido#k1", "skipped")]


def test_a_naive_business_hours_result_is_read_as_utc():
    """runtime.md §7.7 (inferred): a naive datetime returned by business_hours is read as UTC."""
    def naive_nine(at, ctx):
        return datetime(2026, 9, 21, 9, 0)

    agent, _, _ = build([short_flow("10h", [{"id": "oi", "say": "Oi"}], businessHours=True)], business_hours=naive_nine)
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [(e.key, e.at) for e in r.schedule] == [
        (f"f#k1:pausa:{MS0 + 23 * HOUR}", datetime(2026, 9, 21, 9, tzinfo=timezone.utc))]
    assert r.session.runs[0].waiting["until"] == "2026-09-21T09:00:00.000Z"


def test_an_inline_delay_with_no_message_after_it_is_dropped():
    """runtime.md §3.6.3 (inferred): if no message follows in this turn, the pending delay is dropped."""
    agent, _, clock = build([short_flow("3s", [{"id": "p", "prompt": "Diga oi."}])],
                            script={"speak": [DOWN, {"message": "Oi!"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert t1.messages == [] and lines(t1)[0] == ("wait", "ok", "inline-delay")
    clock.advance("1m")
    t2 = agent.turn(session_id="s1", session=t1.session, wake=t1.schedule[0].key)
    assert [(m.text, m.after_ms) for m in t2.messages] == [("Oi!", 0)]


@real_speak
@pytest.mark.parametrize("error, status, code", [
    (ProviderError("x", kind="auth"), "failed", "provider-auth"),
    (ProviderError("x", kind="entitlement"), "failed", "provider-auth"),
    (ProviderError("x", kind="invalid"), "failed", "provider-invalid"),
    (ProviderError("x", kind="content"), "failed", "provider-invalid"),
    (ProviderError("x", kind="context"), "failed", "provider-context"),
    (ProviderError("x", kind="aborted"), "failed", "provider-unavailable"),
    (ProviderError("x", kind="quota"), "failed", "provider-quota"),
    (ProviderError("x", kind="overload"), "deferred", "provider-unavailable"),
    (ProviderError("x", kind="auth", should_retry=True), "deferred", "provider-auth"),
])
def test_speak_failures_are_classified_by_kind(error, status, code):
    """runtime.md §10.2: the kind gives the code and whether a wait can fix it; should_retry overrides."""
    agent, _, _ = build([talk_flow()], script={"speak": [error]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert lines(r) == [("prompt", status, code)]
    assert (len(r.schedule), [e.reason for e in r.ended]) == ((1, []) if status == "deferred" else (0, ["failed"]))


def test_a_reply_wait_that_chains_hands_the_floor_to_the_child_and_routing_is_skipped():
    """runtime.md §3.2 I-F, §3.6.4 rule 6, §4.4 rule 4: a child chained in Ingest takes the floor; no routing."""
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    espera = {"id": "w", "name": "W", "steps": [{"id": "e", "wait": "1d", "else": {"flow": "c"}}]}
    child = {"id": "c", "name": "C", "steps": [{"id": "q", "collect": ["nome"]}]}
    vendas = {"id": "v", "name": "V", "on": [{"message": ["quer comprar"]}], "steps": [{"id": "p", "prompt": "Venda."}]}
    agent, _, _ = build([espera, child, vendas], fields=fields,
                        script={"understand": [{"flows": {"v": 95}}], "speak": [{"message": "Qual o seu nome?"}]})
    t1 = agent.turn(session_id="s1", start={"flow": "w", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, message="quero comprar", id="m1")
    assert only_line(t2, "replied").next == "flow:c"
    assert [s.run_id for s in t2.started] == ["c#w#k1:e:1"]             # v scored 95 but was not routed to
    assert [(m.text, m.key) for m in t2.messages] == [("Qual o seu nome?", "c#w#k1:e:1:q:1")]
    assert [(r.id, r.status, r.hop) for r in t2.session.runs] == [("c#w#k1:e:1", "asking", 1)]
