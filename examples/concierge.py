"""The hotel Concierge of the seed pages, as a terminal chat.

    python examples/concierge.py          # a scripted demo, then your turn to chat offline
    python examples/concierge.py --chat   # straight to the chat

- With no API key it first plays a scripted demo: three customer lines that
  are part of the script (you type nothing), booking a room end to end with
  ``ScriptedProvider`` standing in for the model. The stand-in reads each
  request the way a model would (the customer's message, the tools offered,
  the tool results), so what you see is the real engine at work: routing,
  field extraction, the tool rounds and the session. Then it is your turn:
  type messages to the same offline stand-in.
- With ``GEMINI_API_KEY`` set, the Concierge talks to Gemini (``FALAI_MODEL``
  picks the model, default ``gemini-3.8-flash``).
- With ``OPENAI_BASE_URL`` set (plus ``OPENAI_API_KEY`` when the server needs
  one, and ``FALAI_MODEL``), it talks to any OpenAI-compatible server, such as
  a local Ollama at ``http://localhost:11434/v1``. For a local server, also:
  ``FALAI_SERVER`` names it (``llama.cpp``, ``llama-cpp-python``, ``ollama``,
  ``vllm``, ``lm-studio``: how it takes structured output and tool rounds;
  unset, the provider learns it), ``FALAI_STRUCTURED_OUTPUT`` forces a form
  (``json_schema``, ``json_object_schema``, ``json_object``, ``prompt``) and
  ``FALAI_MAX_TOKENS`` caps every reply (default: 1024 tokens to understand,
  4096 to reply). For example, with ``python tests/local_model_server.py serve``::

      OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 FALAI_MODEL=smollm2-135m-instruct \
        FALAI_SERVER=llama.cpp FALAI_MAX_TOKENS=300 python examples/concierge.py --verbose

After every turn the chat shows the reply, the collected data and how many
model calls the turn spent. A failed model call is reported on one line and
the chat goes on. Type ``sair`` (or press Ctrl-D or Ctrl-C) to leave.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import unicodedata

if __name__ == "__main__":          # run from a checkout too; imported (tests/e2e_concierge.py), it changes nothing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from falai import (MemoryStore, ProviderError, ScriptedProvider, SessionConflictError, Tool,  # noqa: E402
                   ToolValidationResult, falai)

DEMO_MESSAGES = ["Oi! Quero reservar um quarto.", "Em Curitiba, por favor.", "Pode reservar, sim!"]
PRICES = {"curitiba": 420, "são paulo": 510, "rio de janeiro": 580, "salvador": 390, "recife": 360,
          "florianópolis": 450, "porto alegre": 400, "belo horizonte": 380}


# The agent: the Tool seed page's example; its fields and flow as written -----------------

def preco(args: dict, ctx) -> dict:
    """Nightly price in a city (the model reads ``value``)."""
    city = str(args.get("cidade", "")).strip()
    return {"value": {"cidade": city, "precoNoite": PRICES.get(city.lower(), 450)}}


def reservar(args: dict, ctx) -> dict:
    """Book the room: the code lands in the session as ``reserva`` (``data``)."""
    codigo = "RES-" + format(int(ctx.now.timestamp() * 1000), "x").upper()[-6:]
    return {"value": {"codigo": codigo}, "data": {"reserva": codigo}}


PERSONA = "Você é o concierge de uma rede de hotéis: cordial, breve, em português do Brasil."
GREETING = "Apresente-se e ofereça ajuda com uma reserva de quarto."


def demo_tools() -> list:
    """The demo's preco and reservar: the seed page's, with a price table, preco read-only and a short code."""
    return [
        Tool(id="preco", description="Preço da diária em uma cidade.", handler=preco,
             parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]},
             is_read_only=lambda args: True),
        Tool(id="reservar", description="Confirma a reserva e devolve o código.", handler=reservar,
             parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]},
             is_destructive=lambda args: True,
             validate_input=lambda args, ctx: ToolValidationResult(valid=bool(str(args.get("cidade", "")).strip()),
                                                                   error="Informe a cidade.")),
    ]


SEED_FIELDS = {
    "cidade": {"type": "string", "ask": "Pergunte em qual cidade a pessoa quer ficar."},
    "reserva": {"type": "string", "description": "Código da reserva"},
}
# The chat's fields: the customer may correct the city, and only the reservar tool writes the booking
# code (docs/guide/flows.md: tool-only fields, corrections). The seed pages' wire tests keep SEED_FIELDS.
CHAT_FIELDS = {
    "cidade": {**SEED_FIELDS["cidade"], "correctable": True},
    "reserva": {**SEED_FIELDS["reserva"], "extract": "never"},
}


def build_agent(provider, *, tools: list | None = None, persona: str | None = PERSONA,
                greeting: str | None = GREETING, fields: dict | None = None, **options):
    """The Concierge on ``provider``: the seed page's fields (or ``fields``) and flow hospedagem, with the
    demo's tools, persona and idle greeting unless given; ``options`` go to ``f.agent`` (the tests pass a
    clock, max_tool_loops, ...)."""
    f = falai().fields(SEED_FIELDS if fields is None else fields)
    return f.agent(
        name="Concierge", provider=provider, tools=demo_tools() if tools is None else tools, persona=persona,
        idle={"prompt": greeting} if greeting else None,
        flows=[f.flow({
            "id": "hospedagem", "name": "Hospedagem", "on": [{"message": ["quer reservar um quarto"]}],
            "steps": [
                {"id": "onde", "collect": ["cidade"]},
                {"id": "oferta", "prompt": "Apresente o preço da diária. Pergunte se pode reservar.",
                 "tools": ["preco"]},
                {"id": "confirma", "prompt": "Se a pessoa confirmou, reserve e informe o código.",
                 "collect": ["reserva"], "tools": ["reservar"]},
            ]})], **options)


# The offline stand-in for a model ----------------------------------------------------------
#
# It reads each request as a model would: the customer's message (request.message), the
# conversation, the sections of the prompt, the tools offered and their results. It answers in
# the language it is spoken to (English or Portuguese), never asks for what is already known,
# and takes a correction of the city.

ENGLISH = {"i", "i'd", "want", "would", "like", "room", "book", "booking", "please", "yes", "the", "in",
           "stay", "need", "make", "it", "actually", "sure", "go", "ahead", "hi", "hello", "instead", "a"}
PORTUGUESE = {"quero", "quarto", "reservar", "reserva", "por", "favor", "sim", "pode", "em", "oi", "um",
              "uma", "na", "no", "olá", "ola", "gostaria", "cidade", "verdade", "melhor", "claro"}
WANTS_ROOM = ("quarto", "reserv", "hotel", "hosped", "room", "book", "stay")
YES = {"sim", "pode", "quero", "ok", "claro", "yes", "sure", "please", "yeah", "yep", "book"}
TEXTS = {
    "pt": {"price": "A diária em {cidade} sai por R$ {preco}. Posso reservar para você?",
           "booked": "Reserva confirmada! Seu código é {codigo}. Boa viagem!",
           "failed": "Não consegui concluir agora. Pode repetir a cidade?",
           "changed": "Combinado, {cidade}: a diária sai por R$ {preco}. Posso reservar?",
           "confirm": "Posso reservar o quarto em {cidade}?",
           "which_city": "Claro! Em qual cidade você quer se hospedar?",
           "hello": "Sou o Concierge. Posso ajudar com uma reserva de quarto?"},
    "en": {"price": "A night in {cidade} is R$ {preco}. Shall I book it for you?",
           "booked": "Booked! Your code is {codigo}. Have a good trip!",
           "failed": "I could not finish that now. Could you say the city again?",
           "changed": "Sure, {cidade}: a night is R$ {preco}. Shall I book it?",
           "confirm": "Shall I book the room in {cidade}?",
           "which_city": "Of course! Which city would you like to stay in?",
           "hello": "I am the Concierge. Can I help you book a room?"},
}


def plain(text: str) -> str:
    """Lower case, accents removed: "São Paulo" and "sao paulo" read the same."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))


def language(request) -> str:
    """"en" or "pt": the customer's latest words that tell, else the earlier ones; Portuguese by default."""
    said = [request.message or ""] + [item.get("content") or "" for item in reversed(request.history)
                                      if item.get("role") == "user"]
    for text in said:
        words = set(re.findall(r"[\w']+", text.lower()))
        english, portuguese = len(words & ENGLISH), len(words & PORTUGUESE)
        if english != portuguese:
            return "en" if english > portuguese else "pt"
    return "pt"


def city_in(text: str) -> str | None:
    """The city of the price table the text names, in its table spelling."""
    return next((name.title() for name in PRICES if plain(name) in plain(text)), None)


def section(prompt: str, title: str) -> str:
    """The body of one ``## <title>`` section of a prompt, "" when it has none."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", prompt, re.S | re.M)
    return found.group(1) if found else ""


def known_value(prompt: str, slug: str) -> str | None:
    found = re.search(rf'^- {slug}: "(.*)"$', section(prompt, "Already known"), re.M)
    return found.group(1) if found else None


def offline_understand(request) -> dict:
    """Score the flows and pull out a city (a new one too: the city is correctable), from the message."""
    text = request.message or ""
    wants_room = any(word in plain(text) for word in WANTS_ROOM)
    reply: dict = {}
    properties = request.schema["properties"]
    if "flows" in properties:
        reply["flows"] = {alias: 95 if wants_room else 10 for alias in properties["flows"]["properties"]}
    if "fields" in properties:
        city = city_in(text)
        reply["fields"] = {alias: city if alias == "cidade" else None for alias in properties["fields"]["properties"]}
    return reply


def offline_speak(request) -> dict:
    """Answer like a model would: call the step's tool when it needs one, then phrase the result."""
    texts = TEXTS[language(request)]
    last = request.history[-1] if request.history else {}
    tools = [tool["name"] for tool in request.tools or []]
    if last.get("role") == "tool":
        result = json.loads(last["content"])
        if last["name"] == "preco":
            return {"message": texts["price"].format(cidade=result["cidade"], preco=result["precoNoite"])}
        if "codigo" in result:
            return {"message": texts["booked"].format(codigo=result["codigo"])}
        return {"message": texts["failed"]}
    city = known_value(request.prompt, "cidade")
    said = plain(request.message or "")
    if "preco" in tools and city:
        return {"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": city}}]}
    if tools == ["reservar"] and city:
        if city_in(said):           # the customer just named a city: a correction, so quote it again
            return {"message": texts["changed"].format(cidade=city, preco=PRICES.get(city.lower(), 450))}
        if set(re.findall(r"\w+", said)) & YES:
            return {"message": "", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": city}}]}
        return {"message": texts["confirm"].format(cidade=city)}
    if re.search(r"^- cidade\b", section(request.prompt, "Still to collect"), re.M):
        return {"message": texts["which_city"], "cidade": None}
    return {"message": texts["hello"]}


def offline_provider() -> ScriptedProvider:
    """A ScriptedProvider whose every entry is the rule-based stand-in above."""
    return ScriptedProvider(script={"understand": [offline_understand] * 10_000,
                                    "speak": [offline_speak] * 10_000}, usage=True)


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
    cap = os.environ.get("FALAI_MAX_TOKENS")
    return falai_providers.OpenAICompatibleProvider(
        name="local", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY"),
        model=model or "llama3.1", server=os.environ.get("FALAI_SERVER") or None,
        structured_output=os.environ.get("FALAI_STRUCTURED_OUTPUT") or None,
        config={"maxTokens": int(cap)} if cap else None)


# The host loop: load, turn, save, then send ---------------------------------------------------

LIVE_HELP = ("For a live model: set GEMINI_API_KEY (and FALAI_MODEL to pick the model), or OPENAI_BASE_URL\n"
             "for an OpenAI-compatible server, e.g. OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama\n"
             "(plus OPENAI_API_KEY when it needs one). See docs/guide/providers.md.")

WHAT_TO_CHECK = {
    "auth": "check the API key (GEMINI_API_KEY or OPENAI_API_KEY)",
    "entitlement": "check that the key's account may use this model",
    "network": "check the network connection, or that the server at OPENAI_BASE_URL is running",
    "timeout": "check the network connection, or that the server at OPENAI_BASE_URL is running",
    "model": "check the model name (FALAI_MODEL)",
    "invalid": "check the model name (FALAI_MODEL) and the server's API",
    "quota": "the account's quota is spent: wait for it to reset or use another key",
    "rate": "the provider is limiting requests: wait a moment",
    "length": "the model filled its output cap (FALAI_MAX_TOKENS) without finishing: a small local model "
              "often loops; try a bigger model",
}

SPEAK_HINTS = {"provider-auth": WHAT_TO_CHECK["auth"], "provider-invalid": WHAT_TO_CHECK["invalid"],
               "provider-quota": WHAT_TO_CHECK["quota"],
               "provider-context": "the conversation is too long for the model: start a new one",
               "provider-length": WHAT_TO_CHECK["length"]}


class Host:
    """What a real host keeps per conversation: the store, the session id and the history it shows the model."""

    def __init__(self, agent, session_id: str):
        self.agent, self.session_id = agent, session_id
        self.store = MemoryStore()                # a durable store in production: falai_stores.SQLiteStore
        self.history: list[dict] = []             # the messages before this one (model-calls.md §2.1)
        self.number = 0

    def chat(self, text: str):
        """One customer message through the host loop of runtime.md §18: load, turn, save, then send.

        A ProviderError leaves everything as it was (nothing was processed), so the retry reuses the id."""
        message_id = f"m{self.number + 1}"
        for _ in range(3):
            loaded = self.store.load(self.session_id)
            result = self.agent.turn(session_id=self.session_id, session=loaded, message=text,
                                     id=message_id, history=self.history)
            if not result.changed:
                return result
            try:
                self.store.save(result.session, loaded.version if loaded else 0)
            except SessionConflictError:          # another writer saved first: turn again on its session
                continue
            self.number += 1
            self.history.append({"role": "user", "content": text})
            self.history += [{"role": "assistant", "content": m.text} for m in result.messages]
            return result
        raise RuntimeError("three conflicts in a row")


def show(result) -> None:
    for message in result.messages:
        print(f"  Concierge: {message.text}")
    failed = [o for o in result.outcomes if (o.code or "").startswith("provider-")]
    if failed:
        line = failed[-1]
        if line.status == "deferred" and line.until:
            then = f"falai scheduled a retry for {line.until[11:16]} UTC (this chat does not run wakes)"
        elif line.status == "deferred":
            then = "nothing is scheduled: your next message tries again"      # an idle reply has no run to retry
        else:
            then = "the step was given up"
        print(f"  ! No reply: the model failed while phrasing it ({line.code}); the message was recorded and "
              f"{then}. {SPEAK_HINTS.get(line.code, WHAT_TO_CHECK['network'])}.")
    elif not result.messages:
        print("  (no reply this turn)")
    print(f"  · data: {json.dumps(result.session.data, ensure_ascii=False)}"
          f" · model calls: {result.llm_calls}")


def provider_failure(error: ProviderError) -> str:
    """One line for a failed model call: what failed, that the message was not processed, what to check."""
    what = (str(error).strip().splitlines() or [error.kind])[0]
    what = what if len(what) <= 100 else what[:99] + "…"
    status = f" {error.status}" if error.status else ""
    hint = WHAT_TO_CHECK.get(error.kind, "the provider is failing: try again in a moment")
    return (f"  ! The model call failed ({error.provider}, {error.kind}{status}: {what}). "
            f"Your message was not processed; {hint}.")


def talk(host: Host) -> None:
    """Read messages until sair, end of input or Ctrl-C; a provider failure costs one line, not the chat."""
    while True:
        try:
            text = input("You: ").strip()
            if not sys.stdin.isatty():             # piped input: show what was read, as a terminal would
                print(text)
        except EOFError:
            print("\n(end of input: goodbye)")
            return
        if text.lower() in ("sair", "exit", "quit"):
            return
        if not text:
            continue
        try:
            show(host.chat(text))
        except ProviderError as error:
            print(provider_failure(error))


def scripted_demo() -> bool:
    print("Offline demo: no GEMINI_API_KEY or OPENAI_BASE_URL is set, so ScriptedProvider stands in for the model.")
    print("Scripted transcript: the three customer lines below are part of the script; you type nothing yet.\n")
    host = Host(build_agent(offline_provider(), fields=CHAT_FIELDS), "demo")
    for text in DEMO_MESSAGES:
        print(f"You (scripted): {text}")
        show(host.chat(text))
    booked = host.store.load("demo").data.get("reserva")
    print(f"\nReserva feita: {booked}" if booked else "\nA reserva não foi concluída.")
    return bool(booked)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="The hotel Concierge as a terminal chat.")
    parser.add_argument("--chat", action="store_true", help="skip the scripted demo and chat with the offline stand-in")
    parser.add_argument("--verbose", action="store_true", help="show falai's log: retries, warnings")
    args = parser.parse_args(argv)
    # falai logs each provider retry as a warning; the chat reports a failure once, on one line.
    logging.basicConfig(format="  (falai: %(message)s)", level=logging.WARNING if args.verbose else logging.ERROR)
    try:
        try:
            provider = live_provider()
        except ValueError as error:           # FALAI_SERVER, FALAI_STRUCTURED_OUTPUT or FALAI_MAX_TOKENS
            print(f"The model settings are not valid: {error}")
            return 2
        if provider is not None:
            print(f"Concierge on {provider.name}. Type your message (\"sair\", Ctrl-D or Ctrl-C to leave).\n")
            talk(Host(build_agent(provider, fields=CHAT_FIELDS), "live"))
            return 0
        if not args.chat and not scripted_demo():
            return 1
        print(f"\n{LIVE_HELP}\n")
        print("Your turn: chat with the offline stand-in (it knows rooms, cities and prices, in English or "
              "Portuguese, and takes a change of city). Type \"sair\", Ctrl-D or Ctrl-C to leave.")
        talk(Host(build_agent(offline_provider(), fields=CHAT_FIELDS), "you"))
        return 0
    except KeyboardInterrupt:
        print("\n(interrupted: goodbye)")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
