"""The hotel Concierge of the seed pages, as a terminal chat.

    python examples/concierge.py

- With ``GEMINI_API_KEY`` set, the Concierge talks to Gemini (``FALAI_MODEL``
  picks the model, default ``gemini-3.8-flash``).
- With ``OPENAI_BASE_URL`` set (plus ``OPENAI_API_KEY`` when the server needs
  one, and ``FALAI_MODEL``), it talks to any OpenAI-compatible server, such as
  a local Ollama at ``http://localhost:11434/v1``.
- With neither, it plays an offline demo: a scripted conversation that books a
  room end to end, with ``ScriptedProvider`` standing in for the model. The
  stand-in reads each request the way a model would (the customer's message,
  the tools offered, the tool results), so what you see is the real engine at
  work: routing, field extraction, the tool rounds and the session.

After every turn the chat shows the reply, the collected data and how many
model calls the turn spent. Type ``sair`` (or end the input) to leave.
"""
from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import (MemoryStore, ScriptedProvider, SessionConflictError, Tool,  # noqa: E402
                   ToolValidationResult, falai)

DEMO_MESSAGES = ["Oi! Quero reservar um quarto.", "Em Curitiba, por favor.", "Pode reservar, sim!"]
PRICES = {"curitiba": 420, "são paulo": 510, "rio de janeiro": 580, "salvador": 390, "recife": 360,
          "florianópolis": 450, "porto alegre": 400, "belo horizonte": 380}


# The agent: the Tool seed page's example, as written ----------------------------------------

def preco(args: dict, ctx) -> dict:
    """Nightly price in a city (the model reads ``value``)."""
    city = str(args.get("cidade", "")).strip()
    return {"value": {"cidade": city, "precoNoite": PRICES.get(city.lower(), 450)}}


def reservar(args: dict, ctx) -> dict:
    """Book the room: the code lands in the session as ``reserva`` (``data``)."""
    codigo = "RES-" + format(int(ctx.now.timestamp() * 1000), "x").upper()[-6:]
    return {"value": {"codigo": codigo}, "data": {"reserva": codigo}}


def build_agent(provider):
    f = falai().fields({
        "cidade": {"type": "string", "ask": "Pergunte em qual cidade a pessoa quer ficar."},
        "reserva": {"type": "string", "description": "Código da reserva"},
    })
    tools = [
        Tool(id="preco", description="Preço da diária em uma cidade.", handler=preco,
             parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]},
             is_read_only=lambda args: True),
        Tool(id="reservar", description="Confirma a reserva e devolve o código.", handler=reservar,
             parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]},
             is_destructive=lambda args: True,
             validate_input=lambda args, ctx: ToolValidationResult(valid=bool(str(args.get("cidade", "")).strip()),
                                                                   error="Informe a cidade.")),
    ]
    return f.agent(
        name="Concierge", provider=provider, tools=tools,
        persona="Você é o concierge de uma rede de hotéis: cordial, breve, em português do Brasil.",
        idle={"prompt": "Apresente-se e ofereça ajuda com uma reserva de quarto."},
        flows=[f.flow({
            "id": "hospedagem", "name": "Hospedagem", "on": [{"message": ["quer reservar um quarto"]}],
            "steps": [
                {"id": "onde", "collect": ["cidade"]},
                {"id": "oferta", "prompt": "Apresente o preço da diária. Pergunte se pode reservar.",
                 "tools": ["preco"]},
                {"id": "confirma", "prompt": "Se a pessoa confirmou, reserve e informe o código.",
                 "collect": ["reserva"], "tools": ["reservar"]},
            ]})])


# The offline stand-in for a model ----------------------------------------------------------

def quoted_message(prompt: str) -> str:
    """The customer's message as the understand prompt quotes it (between triple quotes)."""
    found = re.search(r'"""\n(.*?)\n"""', prompt, re.S)
    return found.group(1) if found else ""


def known_value(prompt: str, slug: str) -> str | None:
    found = re.search(rf'^- {slug}: "(.*)"$', prompt, re.M)
    return found.group(1) if found else None


def offline_understand(request) -> dict:
    """Score the flows and pull out a city, reading only the customer's words."""
    text = quoted_message(request.prompt).lower()
    wants_room = any(word in text for word in ("quarto", "reserv", "hotel", "hosped"))
    reply: dict = {}
    properties = request.schema["properties"]
    if "flows" in properties:
        reply["flows"] = {alias: 95 if wants_room else 10 for alias in properties["flows"]["properties"]}
    if "fields" in properties:
        city = next((name.title() for name in PRICES if name in text), None)
        reply["fields"] = {alias: city if alias == "cidade" else None for alias in properties["fields"]["properties"]}
    return reply


def offline_speak(request) -> dict:
    """Answer like a model would: call the step's tool when it needs one, then phrase the result."""
    last = request.history[-1] if request.history else {}
    tools = [tool["name"] for tool in request.tools or []]
    if last.get("role") == "tool":
        result = json.loads(last["content"])
        if last["name"] == "preco":
            return {"message": f"A diária em {result['cidade']} sai por R$ {result['precoNoite']}. "
                               "Posso reservar para você?"}
        if "codigo" in result:
            return {"message": f"Reserva confirmada! Seu código é {result['codigo']}. Boa viagem!"}
        return {"message": "Não consegui concluir agora. Pode repetir a cidade?"}
    city = known_value(request.prompt, "cidade")
    customer = re.search(r"## Customer's latest message\n\"(.*)\"", request.prompt)
    said = customer.group(1).lower() if customer else ""
    if "preco" in tools and city and "preço" in request.prompt:
        return {"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": city}}]}
    if tools == ["reservar"] and city and any(word in said for word in ("sim", "pode", "quero", "ok")):
        return {"message": "", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": city}}]}
    if "## Still to collect" in request.prompt and "cidade" in request.prompt.split("## Still to collect")[1]:
        return {"message": "Claro! Em qual cidade você quer se hospedar?", "cidade": None}
    return {"message": "Sou o Concierge. Posso ajudar com uma reserva de quarto?"}


def offline_provider() -> ScriptedProvider:
    """A ScriptedProvider whose every entry is the rule-based stand-in above."""
    return ScriptedProvider(script={"understand": [offline_understand] * 100, "speak": [offline_speak] * 100},
                            usage=True)


def live_provider():
    """Gemini when GEMINI_API_KEY is set, an OpenAI-compatible server when OPENAI_BASE_URL is; else None."""
    model = os.environ.get("FALAI_MODEL")
    if not (os.environ.get("GEMINI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        return None
    try:
        import falai_providers
    except ImportError as error:  # the providers need requests: pip install -e .
        print(f"(falai_providers could not be imported: {error}; running the offline demo)")
        return None
    if os.environ.get("GEMINI_API_KEY"):
        return falai_providers.GeminiProvider(api_key=os.environ["GEMINI_API_KEY"], model=model or "gemini-3.8-flash")
    return falai_providers.OpenAICompatibleProvider(
        name="local", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY"),
        model=model or "llama3.1")


# The host loop: load, turn, save, then send ---------------------------------------------------

def chat(agent, store: MemoryStore, session_id: str, text: str, message_id: str):
    """One customer message through the host loop of runtime.md §18."""
    for _ in range(3):
        loaded = store.load(session_id)
        result = agent.turn(session_id=session_id, session=loaded, message=text, id=message_id)
        if not result.changed:
            return result
        try:
            store.save(result.session, loaded.version if loaded else 0)
        except SessionConflictError:
            continue
        return result
    raise RuntimeError("three conflicts in a row")


def show(result) -> None:
    for message in result.messages:
        print(f"  Concierge: {message.text}")
    if not result.messages:
        print("  (no reply this turn)")
    print(f"  · dados: {json.dumps(result.session.data, ensure_ascii=False)}"
          f" · chamadas ao modelo: {result.llm_calls}")


def main() -> int:
    provider = live_provider()
    store = MemoryStore()
    if provider is None:
        print("No GEMINI_API_KEY (or OPENAI_BASE_URL): running the offline demo with ScriptedProvider.\n")
        agent = build_agent(offline_provider())
        for number, text in enumerate(DEMO_MESSAGES, 1):
            print(f"Você: {text}")
            show(chat(agent, store, "demo", text, f"m{number}"))
        session = store.load("demo")
        booked = session.data.get("reserva")
        print(f"\nReserva feita: {booked}" if booked else "\nA reserva não foi concluída.")
        return 0 if booked else 1
    agent = build_agent(provider)
    print(f"Concierge on {provider.name}. Type your message (\"sair\" to leave).\n")
    number = 0
    while True:
        try:
            text = input("Você: ").strip()
        except EOFError:
            break
        if text.lower() in ("sair", "exit", "quit"):
            break
        if text:
            number += 1
            show(chat(agent, store, "live", text, f"m{number}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
