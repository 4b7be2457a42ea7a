"""Every silent message explained: repeat-spent, no-route and unknown-event lines (runtime.md §11.2)."""
import io
import json
import logging

import pytest

import falai_cli
from falai import EventDef, ScriptedProvider, fake_clock, falai

pytestmark = pytest.mark.protocols("lean", "v4")     # the same lines under both

CLOCK = "2026-09-20T10:00:00.000Z"


def booking_agent(understand, idle="silent", repeat=None, debug=False):
    f = falai().fields({"nome": {"type": "string", "ask": "Ask the name."}})
    trigger = {"message": ["wants to book a table"]}
    if repeat is not None:
        trigger["repeat"] = repeat
    flows = [f.flow({"id": "reserva", "name": "Booking", "on": [trigger],
                     "steps": [{"id": "ok", "say": "Booked!"}]}),
             f.flow({"id": "horario", "name": "Hours", "on": [{"message": ["asks the opening hours"]}],
                     "steps": [{"id": "h", "say": "We open at noon."}]}),
             f.flow({"id": "menu", "name": "Menu", "on": [{"message": ["asks for the menu"]}],
                     "steps": [{"id": "m", "say": "Here is the menu."}]})]
    provider = ScriptedProvider(script={"understand": understand, "speak": [{"message": "Hello!"}] * 3})
    return f.agent(name="Ana", provider=provider, flows=flows, idle=idle, clock=fake_clock(CLOCK), debug=debug)


def lines(result):
    return [(o.kind, o.status, o.code, o.message, o.detail) for o in result.outcomes]


def test_a_second_request_after_a_once_trigger_says_the_repeat_is_spent():
    agent = booking_agent([{"flows": {"reserva": 95}}, {"flows": {"horario": 3, "menu": 0}}])
    first = agent.turn(session_id="s", message="a table for two", id="m1")
    assert [m.text for m in first.messages] == ["Booked!"]
    second = agent.turn(session_id="s", session=first.session, message="and another table tomorrow", id="m2")
    assert second.messages == []
    assert lines(second) == [("idle", "skipped", "repeat-spent",
                              "the message flow already ran as often as its trigger's repeat allows", "reserva")]


def test_a_message_nothing_routes_says_so():
    agent = booking_agent([{"flows": {"reserva": 10, "horario": 20}}])
    result = agent.turn(session_id="s", message="nice weather", id="m1")
    assert result.messages == [] and result.started == []
    assert lines(result) == [("idle", "skipped", "no-route",
                              "no flow took the message and the idle speaker is silent", None)]


def test_a_repeat_always_flow_is_never_spent():
    agent = booking_agent([{"flows": {"reserva": 95}}, {"flows": {"reserva": 95}}], repeat="always")
    first = agent.turn(session_id="s", message="a table", id="m1")
    second = agent.turn(session_id="s", session=first.session, message="another table", id="m2")
    assert [m.text for m in second.messages] == ["Booked!"] and lines(second)[-1][2] is None


def test_an_idle_speaker_that_answers_writes_no_silence_line():
    agent = booking_agent([{"flows": {"reserva": 10, "horario": 20}}], idle={"prompt": "Chat."})
    result = agent.turn(session_id="s", message="nice weather", id="m1")
    assert [m.text for m in result.messages] == ["Hello!"]
    assert [o.code for o in result.outcomes] == [None]       # the idle ok line only


def test_the_silence_line_is_logged_at_debug(caplog):
    logger = logging.getLogger("falai")
    level = logger.level
    try:
        agent = booking_agent([{"flows": {"reserva": 10, "horario": 20}}], debug=True)
        with caplog.at_level(logging.DEBUG, logger="falai"):
            agent.turn(session_id="s", message="nice weather", id="m1")
    finally:
        logger.setLevel(level)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("outcome: ")]
    assert [json.loads(m.removeprefix("outcome: "))["code"] for m in logged] == ["no-route"]


def test_an_unregistered_event_is_ignored_with_a_line_naming_it():
    f = falai()
    flow = f.flow({"id": "pago", "name": "Paid", "on": [{"event": "paid"}], "steps": [{"id": "s", "say": "Thanks"}]})
    agent = f.agent(name="Ana", provider=ScriptedProvider(), flows=[flow], events={"paid": EventDef()},
                    clock=fake_clock(CLOCK))
    result = agent.turn(session_id="s", event="payd", key="e1")
    assert result.changed is False and result.started == []
    assert [(o.kind, o.status, o.code, o.key, o.detail) for o in result.outcomes] == [
        ("wait", "skipped", "unknown-event", "e1", "payd")]
    assert agent.turn(session_id="s", event="paid", key="e2").started


@pytest.mark.protocols("v4")      # falai chat's offline stand-in reads the v4 prompts (docs/guide/cli.md)
def test_falai_chat_shows_the_silence_line(tmp_path):
    flows = [{"id": "reserva", "name": "Booking", "on": [{"message": ["wants to book a table"]}],
              "steps": [{"id": "ok", "say": "Booked!"}]},
             {"id": "horario", "name": "Hours", "on": [{"message": ["asks the opening hours"]}],
              "steps": [{"id": "h", "say": "We open at noon."}]},
             {"id": "menu", "name": "Menu", "on": [{"message": ["asks for the menu"]}],
              "steps": [{"id": "m", "say": "Here is the menu."}]}]
    (tmp_path / "flows.json").write_text(json.dumps(flows))
    (tmp_path / "registry.json").write_text(json.dumps({"agent": {"idle": "silent"}}))
    (tmp_path / "script.json").write_text(json.dumps({"understand": [{"flows": {"reserva": 95}},
                                                                     {"flows": {"horario": 5}}]}))
    out, queue = io.StringIO(), ["a table please", "another table please", "/event payd"]

    def read(prompt):
        if not queue:
            raise EOFError
        line = queue.pop(0)
        out.write(prompt + line + "\n")
        return line

    status = falai_cli.main(["chat", str(tmp_path / "flows.json"), "--registry", str(tmp_path / "registry.json"),
                             "--script", str(tmp_path / "script.json")], out=out, err=io.StringIO(), environ={},
                            read=read)
    text = out.getvalue()
    assert status == 0, text
    second = text.split("you: another table please\n")[1]
    assert ("idle skipped - repeat-spent: the message flow already ran as often as its trigger's repeat allows "
            "detail=reserva") in second
    assert "unknown-event: no event by that name is registered on the agent detail=payd" in text
