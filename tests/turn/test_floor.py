"""The turn's floor moves through one function, by the spec's floor rules (runtime.md §3.2, §3.5,
§3.6.4, §4.4).

``move_floor(turn, run, why)`` is the only writer of ``turn.floor_run`` and
``turn.floor_from_ingest``; ``FLOOR_MOVES`` names each reason with the rule that moves the floor.
These tests hold the mover to the rules and the engine to the mover; that no other function writes
the floor is read from the source in tests/repository/test_one_writer.py.
"""
import pytest

import falai
from falai import FLOOR_MOVES, Run, move_floor

NOW = "2026-09-20T10:00:00.000Z"


def a_turn():
    agent = falai.Agent(name="Ana", provider=falai.ScriptedProvider(script={}), clock=falai.fake_clock(NOW))
    return falai.Turn(agent, falai.TurnInput(session_id="s1", message="oi", id="m1"))


def a_run(turn, name, live=True):
    run = Run(id=f"{name}#k", flow_id=name, anchor="s1", dedupe_key=f"{name}:s1:", step_id="a",
              status="running", trigger={"kind": "start", "key": "k"}, hop=0, started_at=NOW)
    if live:
        turn.session.runs.append(run)
    return run


def floor(turn):
    return (turn.floor_run.id if turn.floor_run else None, turn.floor_from_ingest)


def test_the_reasons_are_the_specs_floor_rules():
    assert set(FLOOR_MOVES) == {"replied", "resolved", "woken", "silence", "routed", "asker", "chained"}
    assert all(rule.split(":")[0] in ("I-R", "I-F", "I-W", "I-S", "rule 5", "rule 6", "chaining rule 6")
               for rule in FLOOR_MOVES.values())


@pytest.mark.parametrize("why", ["replied", "woken", "silence", "routed", "asker"])
def test_a_run_takes_an_empty_floor_without_taking_it_in_ingest(why):
    """I-R step 4, I-W step 2, I-S step 4, Decide rules 5 and 6: the run is the turn's floor run."""
    turn = a_turn()
    move_floor(turn, a_run(turn, "f"), why)
    assert floor(turn) == ("f#k", False)


@pytest.mark.parametrize("why", ["woken", "silence", "routed"])
def test_these_rules_move_the_floor_whoever_holds_it(why):
    turn = a_turn()
    move_floor(turn, a_run(turn, "f"), "resolved")
    move_floor(turn, a_run(turn, "g"), why)
    assert floor(turn) == ("g#k", True)


def test_a_live_run_resolved_in_ingest_takes_the_floor_in_ingest_once_per_turn():
    """I-F: once a run took the floor in Ingest, no later resolved run, reply or asker takes it."""
    turn = a_turn()
    move_floor(turn, a_run(turn, "gone", live=False), "resolved")    # ended while following its target
    assert floor(turn) == (None, False)
    move_floor(turn, a_run(turn, "f"), "resolved")
    assert floor(turn) == ("f#k", True)
    for why in ("resolved", "replied", "asker"):
        move_floor(turn, a_run(turn, "g"), why)
        assert floor(turn) == ("f#k", True), why


def test_a_chained_child_inherits_an_empty_floor_or_its_parents():
    """runtime.md §3.6.4 Chaining rule 6."""
    turn = a_turn()
    turn.phase = "run"
    parent, other = a_run(turn, "p"), a_run(turn, "o")
    move_floor(turn, a_run(turn, "c1"), "chained", parent)
    assert floor(turn) == ("c1#k", False)                   # unset: it inherits
    move_floor(turn, parent, "routed")
    move_floor(turn, a_run(turn, "c2"), "chained", parent)
    assert floor(turn) == ("c2#k", False)                   # its parent's: it inherits
    move_floor(turn, other, "routed")
    move_floor(turn, a_run(turn, "c3"), "chained", parent)
    assert floor(turn) == ("o#k", False)                    # another run's: it does not


def test_a_child_chained_during_ingest_takes_the_floor_in_ingest():
    turn = a_turn()
    assert turn.phase == "ingest"
    parent = a_run(turn, "p")
    move_floor(turn, parent, "replied")
    move_floor(turn, a_run(turn, "c"), "chained", parent)
    assert floor(turn) == ("c#k", True)


def test_a_reason_the_table_does_not_have_raises_and_changes_nothing():
    turn = a_turn()
    with pytest.raises(RuntimeError, match='the floor cannot move to run "f#k" on "because"'):
        move_floor(turn, a_run(turn, "f"), "because")
    assert floor(turn) == (None, False)


LEMBRETE = {"id": "lembrete", "name": "Lembrete", "on": [],
            "steps": [{"id": "espera", "wait": "1d"}, {"id": "aviso", "say": "Amanhã."}]}
VENDAS = {"id": "vendas", "name": "Vendas", "on": [{"message": ["quer comprar"]}],
          "steps": [{"id": "quem", "collect": ["nome"]}, {"id": "fim", "say": "Obrigada."}]}
CHAIN = {"id": "a", "name": "A", "on": [], "steps": [{"id": "s", "say": "A.", "then": {"flow": "b"}}]}
CHILD = {"id": "b", "name": "B", "on": [], "steps": [{"id": "t", "say": "B."}]}


def test_a_turn_moves_the_floor_through_move_floor(monkeypatch):
    """A start that chains, a routed message, the asker's answer, a run wake: each floor change is a
    move_floor call, with its rule."""
    seen = []
    real = falai.move_floor

    def spy(turn, run, why, parent=None):
        real(turn, run, why, parent)
        seen.append((why, run.id, turn.floor_run.id if turn.floor_run else None))

    monkeypatch.setattr(falai, "move_floor", spy)
    clock = falai.fake_clock(NOW)
    provider = falai.ScriptedProvider(script={
        "understand": [{"flows": {"vendas": 90}}, {"flows": {"vendas": 10}}],
        "speak": [{"message": "Seu nome?"}, {"message": "E o nome?"}]})
    agent = falai.Agent(name="Ana", provider=provider, clock=clock, flows=[LEMBRETE, VENDAS, CHAIN, CHILD],
                        fields={"nome": {"type": "string", "ask": "O nome."}})
    agent.turn(session_id="c", start={"flow": "a", "key": "k1"})
    assert seen == [("chained", "b#a#k1:s:1", "b#a#k1:s:1")]
    seen.clear()
    t1 = agent.turn(session_id="s1", message="quer comprar", id="m1")
    assert seen == [("routed", "vendas#m1", "vendas#m1")]
    seen.clear()
    agent.turn(session_id="s1", session=t1.session, message="Ana", id="m2")
    assert seen == [("asker", "vendas#m1", "vendas#m1")]
    seen.clear()
    t1 = agent.turn(session_id="s2", start={"flow": "lembrete", "key": "k1"})
    clock.advance("1d")
    agent.turn(session_id="s2", session=t1.session, wake=t1.schedule[0].key)
    assert seen == [("woken", "lembrete#k1", "lembrete#k1")]
