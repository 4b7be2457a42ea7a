"""A webhook host on the standard library's WSGI: a message endpoint and a wake endpoint.

    python examples/webhook.py               # start on a free port, play a conversation over HTTP, stop
    python examples/webhook.py --port 8080   # serve until Ctrl-C

Endpoints (JSON in, JSON out):

    POST /message  {"session_id": "c1", "text": "Oi", "id": "wamid-1"}
    POST /wake     {"session_id": "c1", "key": "<a wake key this host returned>"}

Both answer ``{"messages": [...], "wakes": [...]}``: the messages for the
channel to deliver, and the wakes for a scheduler to POST back to ``/wake`` at
their time. A repeated message id is answered with no messages (``ignored``),
so a channel that redelivers a webhook is harmless. When the model provider
fails, the answer is ``503`` with ``"retry": true``: the message was not
processed and nothing was saved, so the channel should deliver it again.

Offline: ``ScriptedProvider`` stands in for the model; the sessions live in a
``MemoryStore`` (use ``falai_stores.SQLiteStore`` or ``PostgresStore`` in a
real deployment; the code is the same).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import MemoryStore, ProviderError, ScriptedProvider, SessionConflictError, falai  # noqa: E402

DISHES = ("pizza", "lasanha", "salada", "risoto")


def build_agent():
    f = falai().fields({"pedido": {"type": "string", "enum": list(DISHES), "ask": "Pergunte o prato."}})
    order = f.flow({
        "id": "pedido", "name": "Pedido", "on": [{"message": []}],
        "steps": [
            {"id": "prato", "collect": ["pedido"], "question": "Olá! Hoje temos pizza, lasanha, salada e risoto."},
            {"id": "anotado", "say": "Anotado: {{data.pedido}}. Aviso quando sair para entrega."},
            {"id": "preparo", "wait": "20m"},
            {"id": "saiu", "say": "Sua {{data.pedido}} saiu para entrega!"},
        ]})
    return f.agent(name="Cantina", flows=[order],
                   provider=ScriptedProvider(script={"understand": [understand] * 1000}))


def understand(request) -> dict:
    """The offline stand-in for the understand call: find a dish in the message."""
    found = re.search(r'"""\n(.*?)\n"""', request.prompt, re.S)
    text = found.group(1).lower() if found else ""
    fields = request.schema["properties"].get("fields", {}).get("properties", {})
    return {"fields": {alias: next((d for d in DISHES if d in text), None) for alias in fields}}


def turn_and_save(agent, store, session_id: str, **input_kind) -> dict:
    """Load, turn, save with compare-and-swap (turning again on a conflict); what to send and schedule."""
    for _ in range(3):
        loaded = store.load(session_id)
        result = agent.turn(session_id=session_id, session=loaded, **input_kind)
        if not result.changed:
            return {"messages": [], "wakes": [], "ignored": result.outcomes[0].code if result.outcomes else None}
        try:
            store.save(result.session, loaded.version if loaded else 0)
        except SessionConflictError:
            continue
        return {"messages": [{"text": m.text, "key": m.key, "after_ms": m.after_ms} for m in result.messages],
                "wakes": [{"key": w.key, "at": w.at.isoformat(), "replaces": w.replaces} for w in result.schedule]}
    raise SessionConflictError(f"session {session_id}: three save conflicts in a row")


def make_app(agent, store):
    """The WSGI application: routes, JSON parsing and the error answers around turn_and_save."""
    routes = {"/message": (("session_id", "text"), lambda b: {"message": b["text"], "id": b.get("id")}),
              "/wake": (("session_id", "key"), lambda b: {"wake": b["key"]})}

    def app(environ, start_response):
        def answer(status: str, body: dict):
            data = json.dumps(body, ensure_ascii=False).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]

        path = environ.get("PATH_INFO", "")
        if path not in routes:
            return answer("404 Not Found", {"error": f"{path}: no such endpoint. Use POST /message or POST /wake"})
        if environ["REQUEST_METHOD"] != "POST":
            return answer("405 Method Not Allowed", {"error": f"{path}: only POST is served"})
        try:
            size = int(environ.get("CONTENT_LENGTH") or 0)
            body = json.loads(environ["wsgi.input"].read(size) or b"null")
        except ValueError as error:
            return answer("400 Bad Request", {"error": f"{path}: the body is not JSON ({error})"})
        required, to_input = routes[path]
        missing = [k for k in required if not isinstance(body, dict) or not isinstance(body.get(k), str)]
        if missing:
            return answer("400 Bad Request", {"error": f"{path}: {', '.join(missing)} missing or not text. "
                                                       f"Send a JSON object with {', '.join(required)}"})
        try:
            return answer("200 OK", turn_and_save(agent, store, body["session_id"], **to_input(body)))
        except ProviderError as error:             # nothing was saved: the sender should deliver it again
            return answer("503 Service Unavailable", {"error": f"model provider failed ({error.kind}): {error}",
                                                      "retry": True})
        except SessionConflictError as error:
            return answer("409 Conflict", {"error": str(error), "retry": True})
    return app


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):           # the demo prints its own transcript
        pass


def serve_in_background(server) -> threading.Thread:
    """Serve on a thread, so Ctrl-C reaches the main thread and not wsgiref's request handler (which would
    swallow it as a failed request)."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return {"status": error.code, **json.loads(error.read())}


def demo() -> int:
    server = make_server("127.0.0.1", 0, make_app(build_agent(), MemoryStore()), handler_class=QuietHandler)
    base = f"http://127.0.0.1:{server.server_port}"
    serve_in_background(server)
    print(f"serving on {base} (offline demo: ScriptedProvider stands in for the model)")
    try:
        wakes: list[dict] = []
        for endpoint, body in [("/message", {"session_id": "c1", "text": "Boa noite!", "id": "w1"}),
                               ("/message", {"session_id": "c1", "text": "Quero uma lasanha", "id": "w2"}),
                               ("/message", {"session_id": "c1", "text": "Quero uma lasanha", "id": "w2"}),
                               ("/message", {"session_id": "c1"})]:
            print(f"POST {endpoint} {json.dumps(body, ensure_ascii=False)}")
            reply = post(base + endpoint, body)
            print(f"  <- {json.dumps(reply, ensure_ascii=False)}")
            wakes += reply.get("wakes", [])
        for wake in wakes:                            # a scheduler would POST these at their time
            print(f"POST /wake {wake['key']} (due {wake['at']}; the demo sends it now)")
            reply = post(base + "/wake", {"session_id": "c1", "key": wake["key"]})
            print(f"  <- {json.dumps(reply, ensure_ascii=False)}")
    finally:
        server.shutdown()
        server.server_close()
    print("stopped")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="serve on this port until Ctrl-C (default: the self-playing demo)")
    args = parser.parse_args(argv)
    if args.port is None:
        return demo()
    server = make_server("127.0.0.1", args.port, make_app(build_agent(), MemoryStore()))
    thread = None
    try:
        thread = serve_in_background(server)
        print(f"serving on http://127.0.0.1:{server.server_port} (POST /message, POST /wake); Ctrl-C stops",
              flush=True)
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:                      # caught here, never inside a request being answered
        print("\nstopped")
    finally:
        if thread is not None:                     # shutdown() waits for a serve_forever that has started
            server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
