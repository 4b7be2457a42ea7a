"""The offline Concierge of examples/concierge.py: answers in the language it is spoken to, never asks
for what it knows, takes a correction of the city, and only its tool writes the booking code."""
import json

import pytest

from examples.concierge import CHAT_FIELDS, build_agent, offline_provider
from falai import fake_clock

pytestmark = pytest.mark.protocols("lean", "v4")


def converse(*lines):
    provider = offline_provider()
    agent = build_agent(provider, fields=CHAT_FIELDS, clock=fake_clock("2026-12-01T10:00:00.000Z"))
    history, result, turns = [], None, []
    for n, text in enumerate(lines, 1):
        result = agent.turn(session_id="c", session=result.session if result else None, message=text, id=f"m{n}",
                            history=list(history))
        history += [{"role": "user", "content": text}] + [{"role": "assistant", "content": m.text}
                                                           for m in result.messages]
        turns.append(result)
    return turns, provider


def texts(turns):
    return [[m.text for m in r.messages] for r in turns]


def test_an_english_customer_is_answered_in_english_to_a_booking():
    turns, _ = converse("Hi! I want to book a room.", "In Curitiba, please.", "Yes, please book it.")
    assert texts(turns)[:2] == [["Of course! Which city would you like to stay in?"],
                                ["A night in Curitiba is R$ 420. Shall I book it for you?"]]
    assert texts(turns)[2][0].startswith("Booked! Your code is RES-") and turns[2].session.data["reserva"]


def test_a_portuguese_customer_is_answered_in_portuguese():
    turns, _ = converse("Oi! Quero reservar um quarto.", "Em Curitiba, por favor.", "Pode reservar, sim!")
    assert texts(turns)[:2] == [["Claro! Em qual cidade você quer se hospedar?"],
                                ["A diária em Curitiba sai por R$ 420. Posso reservar para você?"]]
    assert texts(turns)[2][0].startswith("Reserva confirmada! Seu código é RES-")


def test_a_city_given_up_front_is_never_asked_for():
    turns, _ = converse("I'd like a room in Sao Paulo")
    assert texts(turns) == [["A night in São Paulo is R$ 510. Shall I book it for you?"]]


def test_a_change_of_city_is_taken_and_booked():
    turns, provider = converse("Hi! I want to book a room.", "In Curitiba, please.", "Actually, make it Recife.",
                               "Yes, please book it.")
    assert [o.code for o in turns[2].outcomes if o.code] == ["corrected"]
    assert texts(turns)[2] == ["Sure, Recife: a night is R$ 360. Shall I book it?"]
    quoted = [call.message for call in provider.calls if call.schema_name == "speak" and call.tools
              and call.tools[0]["name"] == "reservar"]
    assert quoted[-1] == "Yes, please book it."
    assert turns[3].session.data["cidade"] == "Recife" and turns[3].session.data["reserva"].startswith("RES-")


def test_the_booking_code_is_in_no_model_call():
    _, provider = converse("Oi! Quero reservar um quarto.", "Em Curitiba, por favor.", "Pode reservar, sim!")
    assert not any('"reserva"' in json.dumps([call.schema, call.v4_schema]) for call in provider.calls)
