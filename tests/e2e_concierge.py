"""Shared setup of the end-to-end tests (tests/providers/test_e2e_*.py) and the seed page tests (tests/docs/test_seed_examples.py).

The seed Concierge (the Tool page's example): the agent of examples/concierge.py
with the page's own tools. The end-to-end tests build it on a real provider class
that talks over real HTTP to the local fake vendor server (tests/fake_model_server.py).
Nothing here talks to the internet: every provider gets ``base_url=fake.url``
(providers.md §9.1).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

from examples.concierge import build_agent
from falai import Tool, ToolValidationResult, fake_clock

CLOCK = "2026-09-20T10:00:00.000Z"


def ms_of(text: str) -> int:
    """Epoch milliseconds of an ISO instant ending in Z."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def iso_of(ms: int) -> str:
    """The blob's time format (UTC, milliseconds, Z) of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def at_of(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


NOW_MS = ms_of(CLOCK)
# reservar's code, read from the agent's clock (the handler below).
CODE = "RES-" + format(NOW_MS, "x").upper()

M1 = "Quero um quarto em Curitiba"
M2 = "Sim, pode reservar"
REPLY1 = "A diária em Curitiba é R$ 420. Posso reservar?"
REPLY2_BESIDE = "Reservando."
REPLY2 = f"Pronto! Sua reserva é {CODE}."

PRECO_PARAMS = {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}
PRECO_DECL = {"name": "preco", "description": "Preço da diária em uma cidade.", "parameters": PRECO_PARAMS}
RESERVAR_DECL = {"name": "reservar", "description": "Confirma a reserva e devolve o código.",
                 "parameters": PRECO_PARAMS}

# The envelopes the engine sends (model-calls.md §3.3, §5.4, §2.7).
SPEAK_SCHEMA = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
                "required": ["message"], "additionalProperties": False}
SPEAK_SCHEMA_RESERVA = {
    "type": "object",
    "properties": {"message": {"type": ["string", "null"]},
                   "reserva": {"type": ["string", "null"], "description": "Código da reserva"}},
    "required": ["message", "reserva"], "additionalProperties": False}
# The same envelopes as Anthropic's structured outputs take them: a nullable property as anyOf with a
# null branch (anthropic-sdk-python lib/_parse/_transform.py never writes a type list).
NULLABLE_STRING = {"anyOf": [{"type": "string"}, {"type": "null"}]}
SPEAK_SCHEMA_ANTHROPIC = {"type": "object", "properties": {"message": NULLABLE_STRING},
                          "required": ["message"], "additionalProperties": False}
SPEAK_SCHEMA_RESERVA_ANTHROPIC = {
    "type": "object",
    "properties": {"message": NULLABLE_STRING,
                   "reserva": {"description": "Código da reserva", **NULLABLE_STRING}},
    "required": ["message", "reserva"], "additionalProperties": False}

# The model's replies of the two-turn conversation (JSON texts of the envelopes).
UNDERSTAND1 = json.dumps({"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba", "reserva": None}},
                         ensure_ascii=False)
UNDERSTAND2 = json.dumps({"flows": {"hospedagem": 90}, "fields": {"reserva": None}}, ensure_ascii=False)
SPEAK1 = json.dumps({"message": REPLY1}, ensure_ascii=False)
SPEAK2_BESIDE = json.dumps({"message": REPLY2_BESIDE, "reserva": None}, ensure_ascii=False)
SPEAK2 = json.dumps({"message": REPLY2, "reserva": None}, ensure_ascii=False)


def pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into ``n`` consecutive pieces (one streamed frame each)."""
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


def seed_tools(handled: list) -> list:
    """The Tool page's preco and reservar as the page writes them, each call recorded in ``handled``.

    Restated rather than taken from examples/concierge.py: the demo's tools depart from the page on purpose
    (a price table, a read-only preco, a short code), and these tests check what the page says the model
    reads: ``{"precoNoite":420}`` and the code of the agent's clock in full.
    """
    def preco_handler(args, ctx):
        handled.append(("preco", dict(args)))
        return {"value": {"precoNoite": 420}}

    def reservar_handler(args, ctx):
        handled.append(("reservar", dict(args)))
        codigo = "RES-" + format(int(ctx.now.timestamp() * 1000), "x").upper()
        return {"value": {"codigo": codigo}, "data": {"reserva": codigo}}

    preco = Tool(id="preco", description=PRECO_DECL["description"], parameters=PRECO_PARAMS,
                 handler=preco_handler)
    reservar = Tool(id="reservar", description=RESERVAR_DECL["description"], parameters=PRECO_PARAMS,
                    is_destructive=lambda args: True,
                    validate_input=lambda args, ctx: ToolValidationResult(valid=True)
                    if isinstance(args.get("cidade"), str) and args["cidade"]
                    else ToolValidationResult(valid=False, error="Informe a cidade."),
                    handler=reservar_handler)
    return [preco, reservar]


def concierge(provider, *, clock: str = CLOCK, handled: list | None = None, **options):
    """The Tool page's Concierge: fields cidade and reserva, tools preco and reservar, flow hospedagem.

    The example's agent with the page's tools and, as on the page, no persona and no idle greeting.
    ``handled`` (a list) records every handler call as ``(tool id, args)``; in a test marked
    ``protocols(...)`` the agent runs under the test's protocol (conftest.py).
    """
    return build_agent(provider, tools=seed_tools(handled if handled is not None else []), persona=None,
                       greeting=None, clock=fake_clock(clock), **options)


def real_now_iso() -> str:
    """The wall clock as the agent's fake clock, for tests that compare with a provider's reset time
    (a provider reads reset headers against the wall clock)."""
    return iso_of(int(datetime.now(timezone.utc).timestamp() * 1000))


def first_turn_history() -> list[dict]:
    """What the host saves after turn 1 and passes on turn 2 (model-calls.md §2.1)."""
    return [{"role": "user", "content": M1}, {"role": "assistant", "content": REPLY1}]


def same_result(a, b) -> None:
    """Two TurnResults are the same result (model-calls.md §8: same keys, same data, same schedule)."""
    assert a.messages == b.messages
    assert a.session.to_dict() == b.session.to_dict()
    assert a.schedule == b.schedule
    assert a.outcomes == b.outcomes
    assert (a.started, a.ended, a.skipped) == (b.started, b.ended, b.skipped)
    assert (a.changed, a.llm_calls, a.usage) == (b.changed, b.llm_calls, b.usage)


def streamed_turns_match(fake, make_provider, *scripts):
    """The two Concierge turns through turn_stream() on ``fake`` scripted by ``scripts``: the deltas are the
    replies (text beside a tool call included, no envelope JSON) and each last chunk's result is turn()'s
    (model-calls.md §8, runtime.md §16)."""
    t1, t2 = plain_turns(make_provider, *scripts)
    for script in scripts:
        script(fake)
    agent = concierge(make_provider(fake))
    c1 = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    assert "".join(c.delta for c in c1[:-1]) == REPLY1 and len(c1) >= 3
    assert not any('"message"' in c.delta for c in c1[:-1])
    same_result(c1[-1].result, t1)
    c2 = list(agent.turn_stream(session_id="demo", session=c1[-1].result.session, message=M2, id="m2",
                                history=first_turn_history()))
    assert "".join(c.delta for c in c2[:-1]) == REPLY2_BESIDE + REPLY2
    same_result(c2[-1].result, t2)


def plain_turns(make_provider, *scripts):
    """The two Concierge turns through turn() on a fresh fake server scripted by ``scripts``:
    the reference a streamed run must equal (runtime.md §16)."""
    from fake_model_server import FakeModelServer
    plain = FakeModelServer()
    try:
        for script in scripts:
            script(plain)
        agent = concierge(make_provider(plain))
        t1 = agent.turn(session_id="demo", message=M1, id="m1")
        t2 = agent.turn(session_id="demo", session=t1.session, message=M2, id="m2", history=first_turn_history())
    finally:
        plain.close()
    return t1, t2
