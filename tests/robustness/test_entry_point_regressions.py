"""Regressions the entry-point fuzzer found (tests/robustness/test_properties_entry_points.py), each
as the plain reproduction that first showed it, in the fast tier.

1. A wake on a blob the reader accepts (reviews: doors-2026-12-turn4.md, finding 3): a run that is
``asking``, ``running`` or ``suspended`` but still carries ``waiting: {"key": ...}`` passes
``Session.from_dict`` (persistence.md §2.5, rule R9 asks only that ``waiting`` be a dict), and
``turn(wake=<that key>)`` raised ``RuntimeError`` from ``move_status`` ("This is a bug in falai").
runtime.md §7.4: "A run wake is honoured only by the live run whose ``waiting["key"]`` equals it
exactly. Everything else is ``stale-wake``", and a run with status ``waiting`` is the one that
waits (§4.2); §3.3: an ignored input writes exactly one ``wait / skipped`` line, keyed by the
input, and returns ``changed=False`` with the session unchanged and no model call.

2. The same blob through the event door (found by the fuzzer at 6fe6a62, beside finding 3): a run
that is not ``waiting`` but carries an event wait raised the same ``RuntimeError`` ("cannot move
from ... on event-arrived") when that event came. §3.2 Event rule 2 releases the runs waiting on
the event, and only a ``waiting`` run waits (§4.2): the event turn goes on without releasing it.
"""
from __future__ import annotations

import pytest

from falai import MemoryStore, OUTCOME_MESSAGES, ScriptedProvider, Session, fake_clock, falai


def review_blob(events: tuple = ()) -> tuple:
    """The reproduction of finding 3, as the review wrote it: (agent, blob of an asking run); the
    agent registers ``events``."""
    f = falai().fields({"nome": {"type": "string", "ask": "Ask the name."}})
    flow = f.flow({"id": "b", "name": "B", "on": [{"message": ["book"]}], "steps": [
        {"id": "quem", "collect": ["nome"]}, {"id": "ok", "say": "Hi {{data.nome}}"}]})
    agent = f.agent(name="A", flows=[flow], provider=ScriptedProvider(script={
        "understand": [{"flows": {"b": 95}}], "speak": [{"message": "Name?"}] * 3}),
        events={name: f.event() for name in events})
    blob = agent.turn(session_id="s", message="book", id="m1").session.to_dict()
    assert blob["runs"][0]["status"] == "asking"
    return agent, blob


@pytest.mark.parametrize("status", ["asking", "running", "suspended"])
def test_a_wake_for_a_run_that_is_not_waiting_but_carries_its_key_is_a_stale_wake(status):
    agent, blob = review_blob()
    blob["runs"][0]["status"] = status
    blob["runs"][0]["waiting"] = {"key": "k"}
    session = Session.from_dict(blob)                       # the reader accepts it
    given = session.to_dict()
    assert agent.pending_wakes(session=session) == []        # runtime.md §14: only waiting runs

    for handed in (session, blob):                          # a Session, and the blob dict
        result = agent.turn(session_id="s", session=handed, wake="k")

        assert [(o.kind, o.status, o.code, o.key, o.message) for o in result.outcomes] == [
            ("wait", "skipped", "stale-wake", "k", OUTCOME_MESSAGES["stale-wake"])]
        assert result.changed is False
        assert (result.messages, result.schedule, result.started, result.ended, result.skipped) == (
            [], [], [], [], [])
        assert result.llm_calls == 0
        assert result.session.to_dict() == given             # the session as it was given
        store = MemoryStore()
        store.save(result.session, 0)                        # and it saves, and loads back the same
        assert store.load("s").to_dict() == {**given, "version": 1}


@pytest.mark.parametrize("status", ["asking", "running", "suspended"])
def test_an_event_does_not_release_a_run_that_is_not_waiting_but_carries_its_event_wait(status):
    agent, blob = review_blob(events=("pago",))
    blob["runs"][0]["status"] = status
    blob["runs"][0]["waiting"] = {"kind": "event", "key": "k", "event": "pago",
                                  "until": "2026-10-20T10:00:00.000Z",
                                  "setAt": "2026-09-20T10:00:00.000Z"}
    session = Session.from_dict(blob)                       # the reader accepts it

    result = agent.turn(session_id="s", session=session, event="pago", key="e1")

    lines = [(o.kind, o.status, o.code) for o in result.outcomes]
    assert ("wait", "ok", "event-arrived") not in lines
    store = MemoryStore()
    store.save(result.session, 0)
    assert store.load("s").to_dict() == {**result.session.to_dict(), "version": 1}


def test_a_business_hours_wait_from_the_end_of_the_range_parks_without_asking_the_calendar():
    """limits.md, Instants (found by the entry-point fuzzer): a wait set in the last hours of year 8999 ends past
    the supported range; business_hours is not asked about such an instant, so the turn does not raise."""
    asked = []
    f = falai()
    flow = f.flow({"id": "ola", "name": "Ola", "steps": [
        {"id": "oi", "say": "Olá"}, {"id": "w", "wait": "2h", "businessHours": True}, {"id": "tchau", "say": "Tchau"}]})
    agent = f.agent(name="A", flows=[flow], provider=ScriptedProvider(), clock=fake_clock("8999-12-31T23:30:00.000Z"),
                    business_hours=lambda at, ctx: asked.append(at) or at, protocol="lean")
    r = agent.turn(session_id="s1", start={"flow": "ola", "key": "k1"})
    assert [m.text for m in r.messages] == ["Olá"] and asked == []
    assert r.schedule[0].at.year == 9000 and MemoryStore().save(r.session, 0).version == 1
