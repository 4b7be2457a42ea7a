"""A serverless function host: one turn per invocation, the session in a store, wakes handed back.

    python examples/serverless.py

``handle(event)`` is the whole host. Each invocation carries one input (a
customer message, or a wake that an external scheduler fires), loads the
session from the store, runs ``agent.turn(...)``, saves with compare-and-swap
(turning again on a conflict) and returns what the platform must do next: the
messages to send and the wakes to schedule. The function keeps nothing in
memory between invocations except the agent, which is built once per cold
start. ``lambda_handler`` shows the same for an HTTP-triggered AWS Lambda.

With no arguments the demo invokes the function the way a platform would:
two messages, then the wake the function asked for, fired by the "external
scheduler" (here: at once, instead of an hour later). The store is an SQLite
file (``FALAI_SESSIONS_DB``, default a temporary file); use
``falai_stores.PostgresStore`` or ``RedisStore`` when invocations run on
several machines. Offline: ``ScriptedProvider`` stands in for the model.
"""
from __future__ import annotations

import functools
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import ScriptedProvider, SessionConflictError, falai  # noqa: E402
from falai_stores import SQLiteStore  # noqa: E402

DAYS = ("segunda", "terça", "quarta", "quinta", "sexta", "sábado", "domingo")


@functools.cache
def agent():
    """The agent, built once per cold start and reused by every warm invocation."""
    f = falai().fields({"dia": {"type": "string", "enum": list(DAYS), "ask": "Pergunte o dia da visita."}})
    visit = f.flow({
        "id": "visita", "name": "Agendar visita", "on": [{"message": ["quer agendar uma visita"]}],
        "steps": [
            {"id": "quando", "collect": ["dia"], "question": "Claro! Qual dia da semana fica bom?"},
            {"id": "ok", "say": "Combinado: {{data.dia}}. Confirmo com você daqui a uma hora."},
            {"id": "espera", "wait": "1h"},
            {"id": "confirma", "say": "Passando para confirmar a visita de {{data.dia}}. Até lá!"},
        ]})
    return f.agent(name="Agenda", flows=[visit], idle="silent",
                   provider=ScriptedProvider(script={"understand": [understand] * 100}))


def understand(request) -> dict:
    """The offline stand-in for the understand call: keyword routing and a weekday."""
    found = re.search(r'"""\n(.*?)\n"""', request.prompt, re.S)
    text = found.group(1).lower() if found else ""
    asked = request.schema["properties"]
    reply: dict = {}
    if "flows" in asked:
        reply["flows"] = {alias: 90 if "visita" in text else 0 for alias in asked["flows"]["properties"]}
    if "fields" in asked:
        day = next((d for d in DAYS if d in text), None)
        reply["fields"] = {alias: day for alias in asked["fields"]["properties"]}
    return reply


def handle(event: dict) -> dict:
    """One invocation: {"session_id", "message", "id"} or {"session_id", "wake"} in; messages and wakes out."""
    session_id = event["session_id"]
    kind = {"message": event["message"], "id": event.get("id")} if "message" in event else {"wake": event["wake"]}
    store = SQLiteStore(os.environ.get("FALAI_SESSIONS_DB") or os.path.join(tempfile.gettempdir(), "falai-fn.db"))
    try:
        store.initialize()
        for _ in range(3):
            loaded = store.load(session_id)
            result = agent().turn(session_id=session_id, session=loaded, **kind)
            if not result.changed:                # a duplicate or stale input: nothing to do
                return {"messages": [], "wakes": [], "ignored": result.outcomes[0].code if result.outcomes else None}
            try:
                store.save(result.session, loaded.version if loaded else 0)
                break
            except SessionConflictError:          # another invocation saved first: turn on its session
                continue
        else:
            raise RuntimeError(f"session {session_id}: three save conflicts in a row; retry the invocation")
    finally:
        store.close()
    return {
        "messages": [{"text": m.text, "key": m.key, "after_ms": m.after_ms} for m in result.messages],
        "wakes": [{"key": w.key, "at": w.at.isoformat(), "replaces": w.replaces} for w in result.schedule],
    }


def lambda_handler(event: dict, context) -> dict:
    """The same function behind an HTTP trigger (API Gateway / Lambda function URL)."""
    return {"statusCode": 200, "headers": {"content-type": "application/json"},
            "body": json.dumps(handle(json.loads(event["body"])), ensure_ascii=False)}


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        os.environ["FALAI_SESSIONS_DB"] = os.path.join(folder, "sessions.db")
        invocations = [{"session_id": "c1", "message": "Oi, quero agendar uma visita", "id": "m1"},
                       {"session_id": "c1", "message": "Pode ser na quinta", "id": "m2"},
                       {"session_id": "c1", "message": "Pode ser na quinta", "id": "m2"}]   # a platform retry
        scheduled: list[dict] = []
        for event in invocations:
            print(f"invoke {json.dumps(event, ensure_ascii=False)}")
            response = handle(event)
            print(f"  -> {json.dumps(response, ensure_ascii=False)}")
            scheduled += response["wakes"]
        for wake in scheduled:                    # the external scheduler fires each wake at its time
            print(f"scheduler fires {wake['key']} (due {wake['at']}; the demo fires it now)")
            event = {"session_id": "c1", "wake": wake["key"]}
            print(f"  -> {json.dumps(handle(event), ensure_ascii=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
