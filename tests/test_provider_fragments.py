"""A provider keeps the wire form of each plain text history item it sends (issue 12), keyed by content, so
a later turn's fresh copy of the history reuses it. The bytes sent never change; speed is in bench/."""
import copy

import falai as F
import falai_providers as P
from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider

HISTORY = [{"role": "user", "content": 'Oi, "Ana" \u00e9 \\ aqui'}, {"role": "assistant", "content": "Olá!"},
           {"content": "", "role": "user"}, {"role": "assistant", "content": ""},
           {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": {"a": 1}}]},
           {"role": "tool", "tool_call_id": "c1", "name": "t", "content": '{"ok":true}'},
           {"role": "system", "content": "Seja breve."}, {"content": "E o preço?", "role": "user"}]


def request(history, prompt="Responda."):
    return F.GenerateRequest(system="Você é a Ana.", prompt=prompt, history=history, context={},
                             schema={"type": "object", "properties": {"message": {"type": "string"}}},
                             schema_name="speak", tools=[{"name": "t", "description": "d",
                                                          "parameters": {"type": "object"}}])


def body_text(provider, req):
    _, _, body = provider._wire(provider.model, provider._plan(req))
    return provider._body_text(body), body


def providers():
    return (GeminiProvider(api_key="k", model="gemini-3.8-flash"),
            GeminiProvider(api_key="k", model="gemini-2.5-flash"),
            OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini"),
            OpenAICompatibleProvider(api_key="k", model="m", name="openrouter", base_url="http://x"),
            AnthropicProvider(api_key="k", model="claude-sonnet-4-5"))


def test_the_body_is_compact_json_of_the_wire_on_the_first_call_and_on_a_fresh_copy_of_the_history():
    """providers.md §3: the text sent is compact_json(body), whatever was kept before."""
    for provider in providers():
        first, body = body_text(provider, request(HISTORY))
        assert first == F.compact_json(body)
        kept = len(provider._fragments)
        again, _ = body_text(provider, request(copy.deepcopy(HISTORY)))
        assert again == first and len(provider._fragments) == kept


def test_a_fresh_copy_of_the_history_reuses_the_same_fragments_and_the_prompt_is_never_kept():
    for provider in providers()[:4]:
        _, body = body_text(provider, request(HISTORY, prompt="Primeira."))
        _, again = body_text(provider, request(copy.deepcopy(HISTORY), prompt="Segunda."))
        key = provider._history_key
        kept = [item for item in body[key] if type(item) is P._Fragment]
        assert [item for item in again[key] if type(item) is P._Fragment] == kept
        assert all(a is b for a, b in zip(kept, [i for i in again[key] if type(i) is P._Fragment]))
        assert len(kept) == 3 and len(provider._fragments) == 3      # two user texts and one reply, not blanks


def test_anthropic_keeps_no_fragments_since_its_messages_merge():
    provider = AnthropicProvider(api_key="k", model="claude-sonnet-4-5")
    body_text(provider, request(HISTORY))
    assert len(provider._fragments) == 0


def test_the_kept_fragments_are_bounded_and_start_over_when_full(monkeypatch):
    monkeypatch.setattr(P, "FRAGMENTS_KEPT", 4)
    provider = GeminiProvider(api_key="k", model="gemini-3.8-flash")
    history = [{"role": "user", "content": f"mensagem {i}"} for i in range(6)]
    text, body = body_text(provider, request(history))
    assert text == F.compact_json(body) and len(provider._fragments) == 2
