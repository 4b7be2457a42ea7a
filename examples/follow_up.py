"""A follow-up flow that waits, and a silence trigger, driven by a wake queue.

    python examples/follow_up.py

A customer asks for a quote. The flow asks their name, promises the proposal,
then waits an hour (a timer ``wait``): if the customer writes first, ``else``
thanks them; if the hour passes, the wake fires and the flow sends a reminder.
A second flow has a ``silence`` trigger: a day after the assistant last spoke
with no answer, it checks in once.

The host here is a loop over a ``MemoryScheduler`` and a ``fake_clock``: it
turns every message and every due wake, saves the session, queues
``result.schedule``, and prints a timeline of time / input / sent / scheduled.
Two stories play: one where the customer never answers, one where they answer
during the wait (the reminder's wake then fires but is ignored as stale).
Everything runs offline: ``ScriptedProvider`` stands in for the model's
understand call, and every reply is a fixed ``say`` or ``question``, so no
speak call is made.
"""
from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import MemoryScheduler, MemoryStore, ScriptedProvider, falai, fake_clock  # noqa: E402


def build_agent(clock):
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome da pessoa."}})
    quote = f.flow({
        "id": "orcamento", "name": "Orçamento", "on": [{"message": ["pede um orçamento"]}],
        "steps": [
            {"id": "nome", "collect": ["nome"], "question": "Claro! Qual é o seu nome?"},
            {"id": "envio", "say": "Obrigada, {{data.nome}}! Mando a proposta por e-mail."},
            {"id": "espera", "wait": "1h", "else": "respondeu"},         # then: the hour passed
            {"id": "lembrete", "say": "{{data.nome}}, conseguiu ver a proposta?", "then": "end"},
            {"id": "respondeu", "say": "Que bom ter notícias suas, {{data.nome}}!"},
        ]})
    check_in = f.flow({
        "id": "retomar", "name": "Retomar contato", "on": [{"silence": "1d"}],
        "steps": [{"id": "oi", "say": "Oi! Ainda posso ajudar com o orçamento?"}]})
    # idle "silent": with no flow to answer, the assistant says nothing (no speak call).
    return f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [understand] * 20}),
                   flows=[quote, check_in], clock=clock, idle="silent")


def understand(request) -> dict:
    """The offline stand-in for the understand call: keyword routing and a name pattern."""
    message = re.search(r'"""\n(.*?)\n"""', request.prompt, re.S)
    text = message.group(1) if message else ""
    asked = request.schema["properties"]
    reply: dict = {}
    if "flows" in asked:
        reply["flows"] = {alias: 90 if "orçamento" in text.lower() else 0 for alias in asked["flows"]["properties"]}
    if "fields" in asked:
        name = re.search(r"\b(?:sou a|sou o|me chamo)\s+(\w+)", text, re.I)
        reply["fields"] = {alias: None for alias in asked["fields"]["properties"]}
        if name and "nome" in reply["fields"]:
            reply["fields"]["nome"] = name.group(1)
    return reply


def play(title: str, script: list[tuple[str, str]]) -> None:
    """Run one story: each line is (clock advance, message or "" to just let time pass)."""
    clock = fake_clock("2026-09-21T10:00:00.000Z")
    agent, store, queue = build_agent(clock), MemoryStore(), MemoryScheduler()
    print(f"\n{title}\n{'time':<10}| {'input':<26}| {'sent':<48}| scheduled")
    number = 0
    for advance, text in script:
        clock.advance(advance)
        inputs = [("wake", entry.key) for entry in queue.due(clock())]
        if text:
            number += 1
            inputs.append(("message", text))
        for kind, value in inputs:
            loaded = store.load("s1")
            if kind == "message":
                result = agent.turn(session_id="s1", session=loaded, message=value, id=f"m{number}")
            else:
                result = agent.turn(session_id="s1", session=loaded, wake=value)
            if result.changed:
                store.save(result.session, loaded.version if loaded else 0)
            for entry in result.schedule:
                queue.add(entry)
            shown = f'"{value}"' if kind == "message" else f"wake {value.split(':')[0]}"
            sent = " / ".join(m.text for m in result.messages) or (
                f"(ignored: {result.outcomes[0].code})" if result.skipped or not result.changed else "-")
            planned = ", ".join(f"{e.key.split(':')[0]} at {e.at:%a %H:%M}" for e in result.schedule) or "-"
            print(f"{clock():%a %H:%M} | {shown[:25]:<26}| {sent[:47]:<48}| {planned}")
    print(f"still queued: {len(queue)}")


def main() -> int:
    play("Story 1: the customer goes quiet", [
        ("0s", "Oi, quero um orçamento"), ("2m", "Sou a Ana"), ("1h", ""), ("1d", "")])
    play("Story 2: the customer answers during the wait", [
        ("0s", "Oi, quero um orçamento"), ("2m", "Sou a Ana"), ("30m", "Recebi, obrigada!"), ("1h", ""), ("1d", "")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
