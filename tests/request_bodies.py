"""The request bodies the three HTTP providers would send for a set of scripted conversations (issue 11).

Shared by tests/model_calls/test_protocol.py (the "v4" golden bodies) and bench/bench_tokens.py. A
``RecordingProvider`` answers like a ``ScriptedProvider`` and keeps each ``GenerateRequest``;
``wire_bodies`` builds each vendor's body with the provider's own body builder
(``_plan`` then ``_wire``), exactly what ``generate`` would POST, without sending it.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from falai import GenerateRequest, ScriptedProvider, Tool, fake_clock, falai  # noqa: E402
from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider  # noqa: E402

VENDORS = {
    "gemini": (GeminiProvider, "gemini-3.8-flash"),
    "openai": (OpenAICompatibleProvider, "gpt-4o"),
    "anthropic": (AnthropicProvider, "claude-sonnet-4-5"),
}


def wire_bodies(request: GenerateRequest) -> dict:
    """{vendor: body} for one request, built by each provider's own body builder."""
    bodies = {}
    for vendor, (cls, model) in VENDORS.items():
        provider = cls(api_key="k", model=model)
        _, _, body = provider._wire(model, provider._plan(request))
        bodies[vendor] = body
    return bodies


TRIAGE_FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "empresa": {"type": "string", "ask": "Pergunte a empresa."},
    "porte": {"type": "string", "enum": ["1-10", "11-50", "51+"], "ask": "Pergunte o porte da empresa."},
    "cidade": {"type": "string"},
}
TRIAGE_FLOWS = [
    {"id": "triagem", "name": "Triagem", "description": "Quer conhecer o produto.",
     "on": [{"message": ["quer saber como funciona", "pede orçamento"]}],
     "steps": [{"id": "quem", "collect": ["nome", "empresa"]}, {"id": "porte", "collect": ["porte"]},
               {"id": "fim", "say": "Obrigado, {{data.nome}}!"}]},
    {"id": "suporte", "name": "Suporte", "on": [{"message": ["tem um problema"]}],
     "steps": [{"id": "q", "prompt": "Ajude."}]},
]


def triage_agent(provider, **options):
    """The triage agent of bench/bench_turn.py: one routed flow that collects three fields."""
    tools = [Tool(id="preco", description="Preço por cidade", handler=lambda a, c: {"value": {"preco": 420}},
                  is_read_only=lambda a: True,
                  parameters={"type": "object", "properties": {"cidade": {"type": "string"}}})]
    return falai().fields(TRIAGE_FIELDS).agent(
        name="Ana", provider=provider, flows=TRIAGE_FLOWS, tools=tools, persona="Simpática e direta.",
        knowledge_base={"horario": "9h às 18h", "planos": ["basico", "pro"]},
        clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."}, **options)


TRIAGE_TURNS = [  # (message, understand reply or None, speak reply)
    ("oi, quero saber como funciona, sou a Ana", {"flows": {"triagem": 95, "suporte": 0}, "fields": {"nome": "Ana"}},
     {"message": "Oi Ana! De qual empresa você fala?"}),
    ("da Acme", {"flows": {"triagem": 90, "suporte": 0}, "fields": {"empresa": "Acme"}},
     {"message": "Quantas pessoas trabalham na Acme?"}),
    ("umas 30", {"flows": {"triagem": 90, "suporte": 0}, "fields": {"porte": "11-50"}}, None),
    ("quanto custa em Recife?", {"flows": {"suporte": 0}},
     [{"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": "Recife"}}]},
      {"message": "Em Recife sai R$ 420."}]),
]


def triage_requests(agent_options: dict | None = None, history_items: int = 0) -> list[GenerateRequest]:
    """Every request of the triage conversation, in call order."""
    return triage_conversation(agent_options, history_items)[0]


def triage_conversation(agent_options: dict | None = None, history_items: int = 0,
                        script: dict | None = None) -> tuple[list[GenerateRequest], list]:
    """(requests, turn results) of the triage conversation."""
    understand, speak = [], []
    for _, u, s in TRIAGE_TURNS:
        if u is not None:
            understand.append(u)
        if s is not None:
            speak.extend(s if isinstance(s, list) else [s])
    provider = ScriptedProvider(script=script or {"understand": understand, "speak": speak}, strict=True)
    agent = triage_agent(provider, **(agent_options or {}))
    results = []
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"mensagem antiga número {i}"}
               for i in range(history_items)]
    session = None
    for n, (message, _, _) in enumerate(TRIAGE_TURNS):
        result = agent.turn(session_id="t", session=session, message=message, id=f"m{n}", history=list(history))
        results.append(result)
        session = result.session
        history.append({"role": "user", "content": message})
        for out in result.messages:
            history.append({"role": "assistant", "content": out.text})
    return provider.calls, results


def rich_requests(agent_options: dict | None = None) -> list[GenerateRequest]:
    """Every request of the rich conversation, in call order."""
    return rich_conversation(agent_options)[0]


RICH_SCRIPT = {
    "understand": [
        {"flows": {"vendas": 92, "f1": 0}, "mentions": {"concorrente": True},
         "extract": {"concorrente": {"empresa": "Beta", "produtos": None}},
         "fields": {"nome": "Bia", "idade": 30, "plano": None, "d2": None}},
        {"flows": {"vendas": 80, "f1": 0},
         "branches": {"q2": False}, "fields": {"plano": "pro"}},
        {"flows": {"vendas": 0, "f1": 0}},
    ],
    "speak": [{"message": "Oi Bia! Qual plano?", "plano": None},
              {"message": "Oi, lembra de voltar?", "aceita": None},
              {"message": "Como posso ajudar?"}],
}


def rich_conversation(agent_options: dict | None = None, script: dict | None = None) -> tuple[list, list]:
    """A templated persona, mentions with extract, a `when` branch, an enum field, ids that need aliases,
    instructions, a wake-time speak and the idle speaker: every section of both prompts."""
    fields = {"nome": {"type": "string", "description": "Nome da pessoa"},
              "idade": {"type": "integer"}, "plano": {"type": "string", "enum": ["basico", "pro"]},
              "aceita": {"type": "boolean", "extract": "anywhere"}, "cidade natal": {"type": "string"}}
    flows = [
        {"id": "vendas", "name": "Vendas", "description": "Quer comprar {{data.plano}}",
         "on": [{"message": ["quer comprar", "! só olhando"]}],
         "steps": [{"id": "quem", "collect": ["nome", "idade", "plano"], "prompt": "Descubra quem é, {{data.nome}}.",
                    "branches": [{"when": "a pessoa quer falar com um humano", "then": "humano"}]},
                   {"id": "humano", "say": "Vou chamar alguém."}]},
        {"id": "suporte tecnico", "on": [{"message": ["tem um problema"]}],
         "steps": [{"id": "q", "collect": ["cidade natal"]}]},
        {"id": "concorrente", "name": "Concorrente",
         "on": [{"mention": ["cita outra empresa", "!elogio"],
                 "extract": {"empresa": {"type": "string", "description": "qual"},
                             "produtos": {"type": "array", "items": {"type": "string"}}}}],
         "steps": [{"id": "n", "do": "anotar"}]},
        {"id": "lembrete", "name": "Lembrete", "on": [{"event": "lembrar"}],
         "steps": [{"id": "w", "prompt": "Lembre a pessoa de voltar.", "collect": ["aceita"]}]},
    ]
    provider = ScriptedProvider(script=script or RICH_SCRIPT, strict=True)
    agent = falai().fields(fields).agent(
        name="Lia", provider=provider, flows=flows, persona="Atende {{context.loja}}.", goal="Vender bem.",
        knowledge_base={"loja": {"nome": "Azul", "aberta": True}, "precos": [{"plano": "pro", "mes": 99}]},
        actions={"anotar": lambda ctx: None}, events={"lembrar": {}},
        instructions=[{"kind": "never", "prompt": "Nunca prometa prazos."},
                      {"kind": "must", "when": "a pessoa reclama", "prompt": "Peça desculpas."}],
        clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Responda pela loja."},
        **(agent_options or {}))
    context = {"loja": "Loja Azul"}
    history = [{"role": "user", "content": "bom dia"}, {"role": "assistant", "content": "Bom dia!"}]
    r1 = agent.turn(session_id="r", message="quero comprar, sou a Bia, 30 anos, a Beta é cara", id="m1",
                    context=context, history=history)
    r2 = agent.turn(session_id="r", session=r1.session, message="quero o plano pro", id="m2", context=context,
                    history=history)
    r3 = agent.turn(session_id="r2", event="lembrar", key="k1", context=context, history=history)
    r4 = agent.turn(session_id="r3", message="qual o horário?", id="m3", context=context, history=[])
    return provider.calls, [r1, r2, r3, r4]


def request_record(request: GenerateRequest) -> dict:
    """A request as JSON: what the engine handed the provider."""
    return {"system": request.system, "prompt": request.prompt, "history": request.history,
            "schema": request.schema, "schema_name": request.schema_name, "tools": request.tools,
            "max_output_tokens": request.max_output_tokens}


def capture(agent_options: dict | None = None) -> dict:
    """{scenario: [{"request": ..., "bodies": {vendor: body}}, ...]} for the golden file."""
    out = {}
    for name, requests in (("triage", triage_requests(agent_options)), ("rich", rich_requests(agent_options))):
        out[name] = [{"request": request_record(r), "bodies": wire_bodies(r)} for r in requests]
    return out


GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "v4_request_bodies.json")

if __name__ == "__main__":      # python tests/request_bodies.py --write  (re-captures the golden file)
    captured = capture({"protocol": "v4"})      # the golden file holds the v4 bodies
    text = json.dumps(captured, ensure_ascii=False, indent=1, sort_keys=True)
    if "--write" in sys.argv:
        with open(GOLDEN, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(f"{sum(len(v) for v in captured.values())} requests")
