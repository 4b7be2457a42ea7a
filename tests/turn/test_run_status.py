"""A run's status moves through one function, by one table (runtime.md §4.2-§4.3).

``move_status()`` is the only writer of ``Run.status``; ``RUN_MOVES`` says, for each status and
event, the status it moves to. These tests hold the table to the spec's statuses, the mover to the
table, and the engine to the mover; that no other function writes a status is read from the source
in tests/repository/test_one_writer.py.
"""
from types import SimpleNamespace

import pytest

import falai
from falai import RUN_MOVES, Run, move_status
from falai_base import RUN_STATUSES

NOW = "2026-09-20T10:00:00.000Z"
A_TURN = SimpleNamespace(given=SimpleNamespace(now_text=NOW))     # all move_status reads of a turn


def a_run(status, **values):
    return Run(id="f#k", flow_id="f", anchor="s1", dedupe_key="f:s1:", step_id="a", status=status,
               trigger={"kind": "start", "key": "k"}, hop=0, started_at="2026-09-20T09:00:00.000Z", **values)


def test_every_move_goes_between_the_specs_statuses_and_every_status_has_a_way_out():
    assert set(RUN_STATUSES) == {"running", "asking", "waiting", "suspended"}
    for (status, event), to in RUN_MOVES.items():
        assert status in RUN_STATUSES and to in RUN_STATUSES, (status, event, to)
    assert {status for status, _ in RUN_MOVES} == set(RUN_STATUSES)
    assert {to for to in RUN_MOVES.values()} == set(RUN_STATUSES)


@pytest.mark.parametrize("move", sorted(RUN_MOVES), ids=lambda move: f"{move[0]}-{move[1]}")
def test_each_move_sets_the_status_the_table_says(move):
    status, event = move
    waiting = {"kind": "timer", "key": "w", "until": NOW, "setAt": NOW} if status == "waiting" else None
    run = a_run(status, waiting=waiting, suspended_at=NOW if status == "suspended" else None)
    wait = {"kind": "timer", "key": "w2", "until": NOW, "setAt": NOW}
    move_status(A_TURN, run, event, wait if RUN_MOVES[move] == "waiting" else None)
    assert run.status == RUN_MOVES[move]
    assert (run.waiting is None) is (run.status != "waiting")         # a wait only while waiting
    assert (run.suspended_at == NOW) is (run.status == "suspended")   # suspendedAt only while suspended


@pytest.mark.parametrize("status, event", [("waiting", "ask"), ("suspended", "wake"), ("asking", "replied"),
                                           ("running", "resume"), ("running", "no-such-event")])
def test_a_move_the_table_does_not_have_raises_and_changes_nothing(status, event):
    run = a_run(status)
    with pytest.raises(RuntimeError, match=rf'run "f#k" cannot move from "{status}" on "{event}"'):
        move_status(A_TURN, run, event)
    assert run == a_run(status)


def test_a_turn_moves_runs_through_the_table(monkeypatch):
    """A collect step asks, then the answer moves the run on: each change is a move_status call."""
    seen = []
    real = falai.move_status

    def spy(turn, run, event, waiting=None):
        before = run.status
        real(turn, run, event, waiting)
        seen.append((before, event, run.status))

    monkeypatch.setattr(falai, "move_status", spy)
    f = falai.falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome."}})
    provider = falai.ScriptedProvider(script={"speak": [{"message": "Qual é o seu nome?"}]})
    agent = f.agent(name="Ana", provider=provider, flows=[
        {"id": "f", "name": "F", "on": [], "steps": [{"id": "nome", "collect": ["nome"]},
                                                     {"id": "fim", "say": "Obrigada, {{data.nome}}."}]}])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.session.runs[0].status == "asking"
    assert seen == [("running", "move", "running"), ("running", "enter", "running"),
                    ("running", "ask", "asking"),       # the collect step asks (runtime.md §3.6.3)
                    ("asking", "ask", "asking")]        # it spoke, the name still pending (§3.8 item 3)


def test_what_a_turn_is_given_is_read_only():
    """A turn splits what it was given (``turn.given``, frozen) from what it changes."""
    agent = falai.Agent(name="Ana", provider=falai.ScriptedProvider(script={}),
                        clock=falai.fake_clock(NOW))
    turn = falai.Turn(agent, falai.TurnInput(session_id="s1", message="oi", id="m1"))
    assert (turn.given.agent, turn.given.now_text, turn.given.trigger_key) == (agent, NOW, "m1")
    for name in ("now_text", "silenced", "trigger_key", "agent"):
        with pytest.raises(AttributeError):
            setattr(turn.given, name, None)
    assert turn.session.runs == [] and turn.phase == "ingest"     # the state it changes starts here
