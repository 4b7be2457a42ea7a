"""A triage bot whose conversation survives restarts: the session lives in SQLite.

    python examples/host_sqlite.py                      # the demo: three messages, three processes
    python examples/host_sqlite.py --db chat.db "Oi"    # one message, one turn, then exit

Each run of the program is one turn, as in a host that is restarted between
messages: open the store, load the session, ``agent.turn(...)``, save with
compare-and-swap, print the reply, exit. The next run picks the conversation up
from the database file. With no arguments the demo starts itself three times
in fresh Python processes on a temporary database, so nothing but the file
carries the conversation from one message to the next.

Offline: ``ScriptedProvider`` stands in for the model (a keyword router and
pattern extractor for the understand call); the replies are fixed texts.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import ScriptedProvider, SessionConflictError, falai  # noqa: E402
from falai_stores import SQLiteStore  # noqa: E402

TOPICS = {"suporte": ("erro", "problema", "não funciona"), "vendas": ("comprar", "preço", "plano"),
          "financeiro": ("boleto", "fatura", "pagamento")}
DEMO = ["Oi, preciso de ajuda", "Sou o Bruno", "Minha fatura veio errada"]


def build_agent():
    f = falai().fields({
        "nome": {"type": "string", "ask": "Pergunte o nome da pessoa."},
        "setor": {"type": "string", "enum": list(TOPICS), "description": "Qual equipe deve atender."},
    })
    triage = f.flow({
        "id": "triagem", "name": "Triagem", "on": [{"message": []}],             # []: the catch-all
        "steps": [
            {"id": "quem", "collect": ["nome"], "question": "Olá! Com quem eu falo?"},
            {"id": "assunto", "collect": ["setor"],
             "question": "Prazer, {{data.nome}}! É sobre suporte, vendas ou financeiro?"},
            {"id": "fila", "say": "Certo, {{data.nome}}: passei você para a equipe de {{data.setor}}."},
        ]})
    return f.agent(name="Triagem", flows=[triage],
                   provider=ScriptedProvider(script={"understand": [understand] * 10}))


def understand(request) -> dict:
    """The offline stand-in for the understand call: pull a name and a topic out of the message."""
    found = re.search(r'"""\n(.*?)\n"""', request.prompt, re.S)
    text = found.group(1).lower() if found else ""
    fields = request.schema["properties"].get("fields", {}).get("properties", {})
    name = re.search(r"\b(?:sou a|sou o|me chamo)\s+(\w+)", text)
    topic = next((t for t, words in TOPICS.items() if any(w in text for w in words)), None)
    values = {"nome": name.group(1).title() if name else None, "setor": topic}
    return {"fields": {alias: values.get(alias) for alias in fields}}


def one_turn(db: str, session_id: str, text: str, message_id: str) -> None:
    """Load, turn, save (retrying on a conflict), then send: the host loop for one message."""
    store = SQLiteStore(db)
    store.initialize()                             # creates the table once; harmless afterwards
    agent = build_agent()
    try:
        for _ in range(3):
            loaded = store.load(session_id)
            result = agent.turn(session_id=session_id, session=loaded, message=text, id=message_id)
            if not result.changed:
                break
            try:
                saved = store.save(result.session, loaded.version if loaded else 0)
            except SessionConflictError:           # another process saved first: turn again on its session
                continue
            print(f"[session {session_id} version {saved.version}, data {saved.data}]")
            break
        else:
            raise SystemExit("three save conflicts in a row: the message was not processed; send it again")
        for message in result.messages:            # send only after the save succeeded
            print(f"bot: {message.text}")
    finally:
        store.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the SQLite file holding the sessions")
    parser.add_argument("--session", default="cliente-1")
    parser.add_argument("--id", help="the message id (default: one per message text)")
    parser.add_argument("message", nargs="?")
    args = parser.parse_args(argv)
    if args.message is not None:
        message_id = args.id or f"m{zlib.crc32(args.message.encode())}"     # the same text, the same id
        one_turn(args.db or "sessions.db", args.session, args.message, message_id)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "sessions.db")
        for number, text in enumerate(DEMO, 1):
            print(f"--- process {number}: you: {text}", flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--db", db, "--id", f"m{number}", text],
                           check=True, stdin=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
