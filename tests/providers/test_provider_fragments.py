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
    """The text and the body one attempt sends (_request): the plan carries the kept lead's text."""
    plan = provider._plan(req)
    _, _, body = provider._wire(provider.model, plan)
    text = provider._body_text(body, plan)
    assert text == F.compact_json(body), "the kept fragments and lead text changed a byte"
    return text, body


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


def fresh_body(provider_factory, history):
    return body_text(provider_factory(), request(copy.deepcopy(history)))[0]


LEAD_FACTORIES = (lambda: GeminiProvider(api_key="k", model="gemini-3.8-flash"),
                  lambda: OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini"))


def test_a_conversation_lead_reused_across_turns_sends_what_a_provider_that_kept_nothing_sends():
    """The lead (a conversation's opening plain items) is only a shortcut: every body equals the body a fresh
    provider builds, as the history grows, changes in place, shrinks, or holds items of other shapes."""
    for factory in LEAD_FACTORIES:
        provider = factory()
        history = [{"role": "user", "content": "Oi"}, {"role": "assistant", "content": "Olá!"}]
        steps = [lambda h: h.append({"role": "user", "content": "Quero reservar"}),
                 lambda h: h.append({"role": "assistant", "content": "Para quando?"}),
                 lambda h: h[1].update(content="Olá, tudo bem?"),                  # changed in place
                 lambda h: h.insert(2, {"role": "system", "content": ""}),          # a blank system item
                 lambda h: h.insert(1, {"role": "narrator", "content": "x"}),       # skipped: no message
                 lambda h: h.insert(1, {"role": "system", "content": "Seja breve."}),
                 lambda h: h.append({"role": "user", "content": "Amanhã"}),
                 lambda h: h.insert(1, {"role": "assistant", "content": "", "tool_calls": [
                     {"id": "c1", "name": "t", "arguments": {}}]}),                 # not a plain item
                 lambda h: h.append({"role": "assistant", "content": "Feito."}),
                 lambda h: h.__delitem__(slice(1, None)),                           # shrunk to its first item
                 lambda h: h.extend([{"role": "user", "content": "De novo"}, {"role": "user", "content": ""}])]
        for step in steps:
            step(history)
            sent, _ = body_text(provider, request(history))
            assert sent == fresh_body(factory, history)
            again, _ = body_text(provider, request(copy.deepcopy(history)))
            assert again == sent


def test_conversations_that_open_with_the_same_text_share_no_lead_they_should_not():
    for factory in LEAD_FACTORIES:
        provider = factory()
        one = [{"role": "user", "content": "Oi"}, {"role": "assistant", "content": "Olá, Ana!"}]
        two = [{"role": "user", "content": "Oi"}, {"role": "assistant", "content": "Olá, Bia!"}]
        for history in (one, two, one, two + [{"role": "user", "content": "E aí?"}], one):
            assert body_text(provider, request(history))[0] == fresh_body(factory, history)


def test_a_history_that_opens_with_its_kept_lead_takes_the_kept_fragments_without_building_them():
    provider = LEAD_FACTORIES[1]()
    history = [{"role": "user", "content": f"mensagem {i}"} for i in range(20)]
    body_text(provider, request(history))
    first = history[0]["content"]
    items, fragments, text = provider._fragments.leads[first]
    assert len(items) == 20 and all(type(f) is P._Fragment for f in fragments)
    assert text == ",".join(f.json for f in fragments)
    later = request(copy.deepcopy(history) + [{"role": "user", "content": "nova"}])
    plan = provider._plan(later)          # the kept lead and its text ride on the plan to _body_text
    assert plan.lead == fragments and plan.lead_text == text
    _, body = body_text(provider, later)
    assert all(a is b for a, b in zip(body["messages"][1:21], fragments))
    assert len(provider._fragments.leads[first][0]) == 21
