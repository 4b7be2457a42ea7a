"""Live smoke tests against the real vendors: one structured reply and one tool round per provider.

Opt-in (providers.md §9.1 rule 4): the default run deselects them (setup.cfg: -m "not live"), so it
never reaches the internet even when a key happens to be set; `-m live` selects them, and each runs only
when its key is set, skipped with the reason otherwise. The `live` mark also lets these tests past the
loopback-only socket guard of conftest.py.

    GEMINI_API_KEY=...    [FALAI_GEMINI_MODEL=gemini-3.8-flash]     python -m pytest -m live
    OPENAI_API_KEY=...    [OPENAI_BASE_URL=...] [FALAI_MODEL=...]   python -m pytest -m live
    OPENAI_API_KEY=...    [FALAI_RESPONSES_MODEL=gpt-5.4]           (the Responses API tool loop)
    ANTHROPIC_API_KEY=... [FALAI_ANTHROPIC_MODEL=claude-haiku-4-5]  python -m pytest -m live
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 FALAI_MODEL=... [FALAI_SERVER=llama.cpp] python -m pytest -m live -k openai

With OPENAI_BASE_URL set the key is optional (a local server needs none), and FALAI_SERVER names the
server's profile (docs/guide/providers.md, "Local models").
"""
import os

import pytest

from falai import GenerateRequest
from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider

pytestmark = pytest.mark.live

SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}
PRECO = {"name": "preco", "description": "Preço da diária em uma cidade, em reais.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def need(variable):
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set: live {variable.split('_')[0].lower()} smoke test skipped")
    return value


def gemini():
    return GeminiProvider(api_key=need("GEMINI_API_KEY"),
                          model=os.environ.get("FALAI_GEMINI_MODEL", "gemini-3.8-flash"),
                          backup_models=["gemini-3.5-flash-lite"], config={"maxTokens": 512, "effort": "none"})


def openai():
    base_url = os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        return OpenAICompatibleProvider(api_key=need("OPENAI_API_KEY"),
                                        model=os.environ.get("FALAI_MODEL", "gpt-4.1-mini"), config={"maxTokens": 512})
    return OpenAICompatibleProvider(api_key=os.environ.get("OPENAI_API_KEY") or None,    # a local server: keyless
                                    model=os.environ.get("FALAI_MODEL", "gpt-4.1-mini"), name="live",
                                    base_url=base_url, server=os.environ.get("FALAI_SERVER") or None,
                                    config={"maxTokens": 512})


def anthropic():
    return AnthropicProvider(api_key=need("ANTHROPIC_API_KEY"),
                             model=os.environ.get("FALAI_ANTHROPIC_MODEL", "claude-haiku-4-5"),
                             config={"maxTokens": 512})


@pytest.mark.parametrize("build", [gemini, openai, anthropic], ids=["gemini", "openai", "anthropic"])
def test_live_structured_reply_and_tool_round(build):
    """providers.md §1.6: a real vendor answers the speak envelope, streams it, and calls a tool; then an
    understand call with the default thinking (issue 7: the lowest level the model accepts) is accepted."""
    provider = build()
    understand = provider.generate(GenerateRequest(
        system="Classifique a mensagem.", prompt="Quero reservar um quarto.", history=[],
        schema={"type": "object", "properties": {"reservar": {"type": "boolean"}}, "required": ["reservar"],
                "additionalProperties": False}, schema_name="understand"))
    assert isinstance(understand.structured, dict)
    stream = list(provider.generate_stream(GenerateRequest(
        system="Você é Ana, atendente de uma pousada. Responda em uma frase curta.",
        prompt="Diga olá ao cliente.", history=[], schema=SPEAK, schema_name="speak")))
    final = stream[-1]
    assert final.done and isinstance(final.structured, dict) and final.structured.get("message")
    assert "".join(c.delta for c in stream[:-1]) == final.accumulated

    out = provider.generate(GenerateRequest(
        system="Use a ferramenta preco para saber o preço antes de responder.",
        prompt="Quanto custa a diária em Curitiba?", history=[], tools=[PRECO]))
    assert out.tool_calls and out.tool_calls[0].name == "preco"
    assert "curitiba" in str(out.tool_calls[0].arguments.get("cidade", "")).lower()


def test_live_openai_tool_loop_on_the_responses_api():
    """A reasoning model's tool round with effort goes to the Responses API (chat completions refuses it);
    its encrypted reasoning comes back and is replayed in round 2, which the API accepts."""
    if os.environ.get("OPENAI_BASE_URL"):
        pytest.skip("OPENAI_BASE_URL is set: the Responses API test runs against OpenAI itself")
    model = os.environ.get("FALAI_RESPONSES_MODEL", "gpt-5.4")
    provider = OpenAICompatibleProvider(api_key=need("OPENAI_API_KEY"), model=model,
                                        config={"maxTokens": 2048, "effort": "low"})
    system = "Use a ferramenta preco para saber o preço antes de responder."
    first = provider.generate(GenerateRequest(system=system, prompt="Quanto custa a diária em Curitiba?",
                                              history=[], tools=[PRECO]))
    assert first.tool_calls and first.tool_calls[0].name == "preco"
    call = first.tool_calls[0]
    history = [{"role": "user", "content": "Quanto custa a diária em Curitiba?"},
               {"role": "assistant", "content": first.message or None, "reasoningDetails": first.reasoning_details,
                "tool_calls": [{"id": call.id, "name": call.name, "arguments": call.arguments}]},
               {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": '{"precoNoite": 420}'}]
    second = provider.generate(GenerateRequest(system=system, prompt="Responda ao cliente.", history=history,
                                               tools=[PRECO]))
    assert "420" in second.message
