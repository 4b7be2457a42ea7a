"""Claims: repeat (once, always, cooldown), dedupe keys, anchors, host claims, pruning, say once-claims.

Spec: runtime.md §5 (the start order), §6, §8, §13 (limits); flows.md §3.2, §3.3, §4.7.
"""
import copy
from datetime import datetime, timezone

import pytest

import conftest
import falai as F
from conftest import T0

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)


def iso(dt):
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def build(flows, **options):
    """conftest's build, with an event "e" registered unless the test names its own."""
    options.setdefault("events", {"e": F.EventDef()})
    return conftest.build(flows, **options)


def flow(fid="f", on=None, steps=None, **keys):
    return {"id": fid, "name": fid.upper(), **({"on": on} if on is not None else {}),
            "steps": steps or [{"id": "oi", "say": "Oi"}], **keys}


def skips(r):
    return [(s.flow_id, s.anchor, s.trigger_key, s.code) for s in r.skipped]


PARKS = [{"id": "espera", "wait": "1d"}, {"id": "oi", "say": "Oi"}]


# repeat ----------------------------------------------------------------------------------------------

def test_a_once_flow_starts_once_per_anchor():
    """runtime.md §6.1: "once" has an empty nonce: one run ever per flow and anchor; then already-claimed."""
    agent, _, _ = build([flow(on=[{"event": "e", "repeat": "once"}])])
    t1 = agent.turn(session_id="s1", event="e", key="e1")
    assert [(s.run_id, s.dedupe_key) for s in t1.started] == [("f#e1", "f:s1:")]
    assert t1.session.claims == {"f:s1:": {"at": T0}}
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e2")
    assert skips(t2) == [("f", "s1", "e2", "already-claimed")]
    assert t2.skipped[0].message == "this flow already ran here"
    assert t2.outcomes == [] and t2.messages == []


def test_always_allows_one_run_per_trigger_key():
    """runtime.md §6.1: "always" uses the trigger key as nonce; only a replay of the same key is refused."""
    agent, _, _ = build([flow()])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2"})
    assert [s.dedupe_key for s in t1.started + t2.started] == ["f:s1:k1", "f:s1:k2"]
    t3 = agent.turn(session_id="s1", session=t2.session, start={"flow": "f", "key": "k1"})
    assert skips(t3) == [("f", "s1", "k1", "already-claimed")]
    assert set(t3.session.claims) == {"f:s1:k1", "f:s1:k2"}


def test_a_cooldown_refuses_starts_until_it_has_passed_and_rewrites_the_claim():
    """runtime.md §5 rule 3, §6.1: cooldown skips when now - held < cooldown; an older claim is overwritten."""
    agent, _, clock = build([flow(on=[{"event": "e", "repeat": {"cooldown": "1h"}}])])
    t1 = agent.turn(session_id="s1", event="e", key="e1")
    assert [s.dedupe_key for s in t1.started] == ["f:s1:"]
    clock.advance("30m")
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e2")
    assert skips(t2) == [("f", "s1", "e2", "cooldown")]
    assert t2.skipped[0].message == "the flow's cooldown has not passed"
    clock.advance("30m")                                               # exactly one hour: not less than it
    t3 = agent.turn(session_id="s1", session=t2.session, event="e", key="e3")
    assert [s.run_id for s in t3.started] == ["f#e3"]
    assert t3.session.claims == {"f:s1:": {"at": "2026-09-20T11:00:00.000Z"}}


@pytest.mark.parametrize("on, start, nonce", [
    ([{"message": []}], {"message": "oi", "id": "m1"}, ""),                        # message: once
    ([{"mention": []}], {"message": "oi", "id": "m1"}, ""),                        # mention: once
    ([{"event": "e"}], {"event": "e", "key": "e1"}, "e1"),                         # event: always
    (None, {"start": {"flow": "f", "key": "k1"}}, "k1"),                           # start: always
])
def test_the_default_repeat_depends_on_the_trigger_kind(on, start, nonce):
    """runtime.md §6.1: "once" for message, mention, silence; "always" for event, start and chained runs."""
    agent, _, _ = build([flow(on=on)], idle="silent")
    r = agent.turn(session_id="s1", **start)
    assert [s.dedupe_key for s in r.started] == [f"f:s1:{nonce}"]


def test_a_chained_run_claims_with_the_parent_step_key():
    """runtime.md §3.6.4 Chaining rule 5: repeat defaults to "always", so the child's claim carries the key.

    The key's ":" are escaped in the claim (a deliberate difference, docs/guide/limits.md)."""
    pai = flow("pai", steps=[{"id": "vai", "if": {}, "then": {"flow": "filho"}}])
    agent, _, _ = build([pai, flow("filho")])
    r = agent.turn(session_id="s1", start={"flow": "pai", "key": "k1"})
    assert [s.dedupe_key for s in r.started] == ["pai:s1:k1", "filho:s1:pai#k1%3Avai%3A1"]


def test_a_claimed_catch_all_is_not_tried_again_and_logs_no_skip():
    """runtime.md §3.5.0 rule 2: a catch-all qualifies only while its repeat allows a start; else it is not tried."""
    agent, _, _ = build([flow(on=[{"message": []}])], idle="silent")
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert [s.run_id for s in t1.started] == ["f#m1"]
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi de novo", id="m2")
    assert t2.started == [] and t2.skipped == [] and t2.messages == []


def test_a_code_only_mention_logs_its_blocked_repeat_on_every_message():
    """runtime.md §3.5 rule 4: a mention: [] detector goes through the start order on every message turn."""
    agent, _, _ = build([flow("m", on=[{"mention": []}])], idle="silent")
    t1 = agent.turn(session_id="s1", message="oi", id="m1")
    assert [s.run_id for s in t1.started] == ["m#m1"]
    t2 = agent.turn(session_id="s1", session=t1.session, message="oi", id="m2")
    t3 = agent.turn(session_id="s1", session=t2.session, message="oi", id="m3")
    assert skips(t2) == [("m", "s1", "m2", "already-claimed")]
    assert skips(t3) == [("m", "s1", "m3", "already-claimed")]


def test_a_replayed_event_finds_the_claim_written_with_its_run():
    """runtime.md §6.2: a run's claim is written in the same turn; a replay is skipped already-claimed."""
    agent, _, _ = build([flow(on=[{"event": "e"}])])
    t1 = agent.turn(session_id="s1", event="e", key="e1")
    assert t1.ended[0].reason == "end" and t1.session.claims == {"f:s1:e1": {"at": T0}}
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e1")
    assert skips(t2) == [("f", "s1", "e1", "already-claimed")]


# The order of the start checks ---------------------------------------------------------------------------

def test_a_false_if_is_judged_before_the_claim_and_writes_nothing():
    """runtime.md §5 rule 2: a false if means no run, no line, no skip, even when the claim is held."""
    agent, _, _ = build([flow(on=[{"event": "e", "repeat": "once", "if": lambda ctx: ctx.input == "sim"}])])
    t1 = agent.turn(session_id="s1", event="e", key="e1", payload="sim")
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e2", payload="não")
    assert (t2.skipped, t2.started, t2.outcomes) == ([], [], [])


def test_the_claim_is_checked_before_the_hop_limit():
    """runtime.md §5 rules 3-4: a held claim refuses with already-claimed before the hop is looked at."""
    agent, _, _ = build([flow()])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k1", "hop": 5})
    assert [s.code for s in t2.skipped] == ["already-claimed"]


def test_the_hop_limit_is_checked_before_the_live_run_rule():
    """runtime.md §5 rules 4-5: hop >= 5 skips hop-limit even when a live run exists."""
    agent, _, _ = build([flow(steps=PARKS)])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2", "hop": 5})
    assert [s.code for s in t2.skipped] == ["hop-limit"]


@pytest.mark.parametrize("hop, started", [(4, True), (5, False), (6, False)])
def test_an_event_hop_of_five_or_more_is_refused(hop, started):
    """runtime.md §5 rule 4, flows.md §5.9: turn(event=..., hop=n) sets the hop; hop >= 5 -> hop-limit."""
    agent, _, _ = build([flow(on=[{"event": "e"}])])
    r = agent.turn(session_id="s1", event="e", key="e1", hop=hop)
    if started:
        assert r.ended[0].hop == hop and r.skipped == []
    else:
        assert skips(r) == [("f", "s1", "e1", "hop-limit")] and r.started == []
        assert r.session.claims == {}                                   # a refused start writes no claim


def test_one_live_run_per_flow_and_anchor():
    """runtime.md §5 rule 5: a live run of this flow with this anchor refuses the start (already-running)."""
    agent, _, _ = build([flow(steps=PARKS)])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2"})
    assert skips(t2) == [("f", "s1", "k2", "already-running")]
    assert "f:s1:k2" not in t2.session.claims


def test_the_live_run_rule_is_per_anchor():
    """runtime.md §5 rule 5, §6.3: a live run for another anchor does not refuse the start."""
    agent, _, _ = build([flow(steps=PARKS, anchor="lead")])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors={"lead": {"key": "L1"}})
    t2 = agent.turn(session_id="s1", session=t1.session, start={"flow": "f", "key": "k2"},
                    anchors={"lead": {"key": "L2"}})
    assert [(s.run_id, s.anchor) for s in t2.started] == [("f#k2", "L2")]
    assert [r.anchor for r in t2.session.runs] == ["L1", "L2"]


# Anchors ----------------------------------------------------------------------------------------------

def test_an_anchored_flow_takes_the_hosts_anchor_key():
    """runtime.md §6.3: anchors[name]["key"] is the run's anchor; it is part of the dedupe key (as it is, between
    the first and the last ":"; the nonce's ":" are escaped, docs/guide/limits.md)."""
    agent, _, _ = build([flow(on=[{"event": "e"}], anchor="lead")])
    r = agent.turn(session_id="s1", event="e", key="stage:9", anchors={"lead": {"key": "lead:456"}})
    assert [(s.run_id, s.anchor, s.dedupe_key) for s in r.started] == [
        ("f#stage:9", "lead:456", "f:lead:456:stage%3A9")]
    assert r.ended[0].anchor == "lead:456"


@pytest.mark.parametrize("anchor, anchors", [("lead", None), ("lead", {"outro": {"key": "x"}}), ("session", None),
                                             ("session", {"session": {"key": "x"}})])
def test_a_missing_anchor_or_the_session_anchor_falls_back_to_the_session_id(anchor, anchors):
    """runtime.md §6.3: anchor "session", or a name missing from anchors, is the session id."""
    agent, _, _ = build([flow(anchor=anchor)])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors=anchors)
    assert [(s.anchor, s.dedupe_key) for s in r.started] == [("s1", "f:s1:k1")]


def test_a_refused_anchored_start_names_the_anchor_in_skipped():
    """runtime.md §5: a skip appends {flow_id, anchor, trigger_key, code, message}, the anchor being the run's."""
    agent, _, _ = build([flow(on=[{"event": "e", "repeat": "once"}], anchor="lead")])
    anchors = {"lead": {"key": "lead:456"}}
    t1 = agent.turn(session_id="s1", event="e", key="e1", anchors=anchors)
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e2", anchors=anchors)
    assert skips(t2) == [("f", "lead:456", "e2", "already-claimed")]


# Host claims --------------------------------------------------------------------------------------------

def test_a_once_claim_held_in_another_session_refuses_the_start():
    """runtime.md §6.4: claims["held"] counts exactly like the session's own claims."""
    agent, _, _ = build([flow(on=[{"event": "e", "repeat": "once"}], anchor="lead")])
    r = agent.turn(session_id="s2", event="e", key="e1", anchors={"lead": {"key": "lead:456"}},
                   claims={"held": {"f:lead:456:": T0}})
    assert skips(r) == [("f", "lead:456", "e1", "already-claimed")]


def test_an_always_claim_held_elsewhere_refuses_only_that_key():
    """runtime.md §6.4: a held always-claim refuses only the same trigger key."""
    agent, _, _ = build([flow(on=[{"event": "e"}])])
    held = {"held": {"f:s1:e1": T0}}
    assert [s.code for s in agent.turn(session_id="s1", event="e", key="e1", claims=held).skipped] == [
        "already-claimed"]
    assert [s.run_id for s in agent.turn(session_id="s1", event="e", key="e2", claims=held).started] == ["f#e2"]


@pytest.mark.parametrize("held_at, refused", [
    ("2026-09-20T09:30:00.000Z", True),                  # 30 minutes ago
    ("2026-09-20T06:30:00-03:00", True),                 # the same instant with an offset (runtime.md §15)
    ("2026-09-20T08:59:59.000Z", False),                 # more than an hour ago
])
def test_a_cooldown_claim_held_elsewhere_is_timed_from_its_iso_time(held_at, refused):
    """runtime.md §5 rule 3, §6.4: a held cooldown claim refuses while now - held < cooldown."""
    agent, _, _ = build([flow(on=[{"event": "e", "repeat": {"cooldown": "1h"}}])])
    r = agent.turn(session_id="s1", event="e", key="e1", claims={"held": {"f:s1:": held_at}})
    if refused:
        assert skips(r) == [("f", "s1", "e1", "cooldown")]
    else:
        assert [s.run_id for s in r.started] == ["f#e1"]
        assert r.session.claims == {"f:s1:": {"at": T0}}


def test_an_active_pair_elsewhere_refuses_with_already_running():
    """runtime.md §5 rule 5, §6.4: "<flowId>:<anchor>" in claims["active"] -> already-running."""
    agent, _, _ = build([flow(anchor="lead")])
    anchors = {"lead": {"key": "lead:456"}}
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors=anchors,
                   claims={"active": ["f:lead:456"]})
    assert skips(r) == [("f", "lead:456", "k1", "already-running")]
    other = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, anchors=anchors,
                       claims={"active": ["f:lead:999", "g:lead:456"]})
    assert [s.run_id for s in other.started] == ["f#k1"]


def test_a_run_parked_on_its_trigger_delay_is_replaced_even_when_active_elsewhere():
    """runtime.md §5 rule 5: claims["active"] is consulted only when there is no such live run here."""
    agent, _, _ = build([flow(on=[{"event": "e", "after": "1h"}])])
    t1 = agent.turn(session_id="s1", event="e", key="e1")
    t2 = agent.turn(session_id="s1", session=t1.session, event="e", key="e2", claims={"active": ["f:s1"]})
    assert [(e.id, e.reason) for e in t2.ended] == [("f#e1", "replaced")]
    assert [s.run_id for s in t2.started] == ["f#e2"] and t2.skipped == []


def test_host_claims_are_not_copied_into_the_session():
    """runtime.md §6.4: the host's claims are read, never written into session.claims."""
    agent, _, _ = build([flow(on=[{"event": "e"}])])
    r = agent.turn(session_id="s1", event="e", key="e2", claims={"held": {"f:s1:e1": T0}, "active": ["g:s1"]})
    assert r.session.claims == {"f:s1:e2": {"at": T0}}


# say once-claims -------------------------------------------------------------------------------------------

def test_a_say_once_claim_is_keyed_by_flow_step_and_session_id_argument():
    """runtime.md §2.2, §8: the say once claim is ${flowId}:${stepId}:${sessionId}, sessionId the argument."""
    agent, _, _ = build([flow(steps=[{"id": "oi", "say": "Bem-vinda", "once": True}])])
    t1 = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    renamed = copy.deepcopy(t1.session)
    renamed.id = "outro"
    agent2 = agent.turn(session_id="s9", session=renamed, start={"flow": "f", "key": "k2"})
    assert set(t1.session.claims) == {"f:s1:k1", "f:oi:s1"}
    assert [m.text for m in agent2.messages] == ["Bem-vinda"]          # f:oi:s9 was not held
    assert "f:oi:s9" in agent2.session.claims


def test_a_say_once_claim_held_by_another_session_of_the_customer_counts():
    """runtime.md §6.4: held claims count for say once-claims too."""
    agent, _, _ = build([flow(steps=[{"id": "oi", "say": "Bem-vinda", "once": True}, {"id": "b", "say": "B"}])])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"}, claims={"held": {"f:oi:s1": T0}})
    assert [m.text for m in r.messages] == ["B"]
    assert [(o.kind, o.code) for o in r.outcomes][0] == ("say", "already-sent")


# Pruning always-claims ----------------------------------------------------------------------------------------

def start_many(agent, clock, session, keys, step=None, **kwargs):
    for key in keys:
        if step:
            clock.advance(step)
        session = agent.turn(session_id="s1", session=session, start={"flow": "f", "key": key}, **kwargs).session
    return session


def test_always_claims_keep_the_fifty_newest_per_flow_and_anchor():
    """runtime.md §6.1, §13: after writing an always-claim, keep the 50 newest of the flow and anchor."""
    f = flow(on=[{"event": "e", "repeat": "once"}], steps=[{"id": "oi", "say": "Oi", "once": True}])
    agent, _, clock = build([f, flow("g")])
    s = agent.turn(session_id="s1", event="e", key="e0").session                 # the once claim f:s1:
    s = agent.turn(session_id="s1", session=s, start={"flow": "g", "key": "g0"}).session
    keys = [f"k{i:02d}" for i in range(51)]
    s = start_many(agent, clock, s, keys, step="1s")
    always = [k for k in s.claims if k.startswith("f:s1:") and k != "f:s1:"]
    assert len(always) == 50 and "f:s1:k00" not in s.claims and "f:s1:k50" in s.claims
    assert {"f:s1:", "f:oi:s1", "g:s1:g0"} <= set(s.claims)                      # never pruned / other flow


def test_pruning_among_equal_times_drops_the_earliest_in_dict_order():
    """runtime.md §6.1: among claims with the same at, the one later in the dict's order is newer."""
    agent, _, clock = build([flow()])
    s = start_many(agent, clock, None, [f"k{i:02d}" for i in range(51)])
    assert sorted(k for k in s.claims) == [f"f:s1:k{i:02d}" for i in range(1, 51)]


def test_pruning_compares_times_as_instants_not_dict_order():
    """runtime.md §6.1 (inferred): newest means the latest at, so a store that reordered keys still prunes the oldest."""
    agent, _, clock = build([flow()])
    s = start_many(agent, clock, None, [f"k{i:02d}" for i in range(50)], step="1s")
    shuffled = copy.deepcopy(s)
    shuffled.claims = dict(reversed(list(s.claims.items())))                      # newest first, as a JSONB column might
    clock.advance("1s")
    r = agent.turn(session_id="s1", session=shuffled, start={"flow": "f", "key": "k50"})
    assert "f:s1:k00" not in r.session.claims and "f:s1:k49" in r.session.claims and "f:s1:k50" in r.session.claims
    assert len(r.session.claims) == 50


def test_pruning_counts_each_anchor_separately():
    """runtime.md §6.1: the prefix is ${flowId}:${anchor}:, so another anchor's claims are not counted."""
    agent, _, clock = build([flow(anchor="lead")])
    s = start_many(agent, clock, None, [f"a{i:02d}" for i in range(30)], step="1s", anchors={"lead": {"key": "A"}})
    s = start_many(agent, clock, s, [f"b{i:02d}" for i in range(30)], step="1s", anchors={"lead": {"key": "B"}})
    assert len(s.claims) == 60
