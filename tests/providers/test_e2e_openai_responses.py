"""End to end: the seed Concierge on gpt-5.4 over real HTTP: the understand call on chat completions, the
speak rounds (they carry tools) on the Responses API, the tool round's encrypted reasoning replayed in the
next round (docs/guide/providers.md, "Which endpoint an OpenAI model uses"; providers.md §5.7)."""
from __future__ import annotations

import pytest

from falai_providers import OpenAICompatibleProvider
from fake_model_server import openai_frame, reasoning_item, responses_events
from e2e_concierge import M1, REPLY1, SPEAK1, UNDERSTAND1, concierge, pieces

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both


def provider(fake):
    fake.chat_dialect = "openai"
    return OpenAICompatibleProvider(base_url=fake.url + "/v1", api_key="sk-test-0123456789", model="gpt-5.4",
                                    config={"effort": "medium"}, sleep=lambda s: None,
                                    retry_config={"timeout": 3000, "retries": 0})


def test_a_tool_turn_on_gpt_5_4_uses_responses_and_carries_its_reasoning(fake):
    fake.sse(*[openai_frame(content=p) for p in pieces(UNDERSTAND1)], openai_frame(finish="stop"), "[DONE]")
    fake.sse(*responses_events(calls=[("call_abc", "preco", {"cidade": "Curitiba"})],
                               reasoning=[reasoning_item("gpt-5.4", summary="Preciso do preço.")],
                               usage=(200, 30, 0, 20)), raw=True)
    fake.sse(*responses_events(text=SPEAK1, usage=(300, 15, 100, 5)), raw=True)
    result = concierge(provider(fake)).turn(session_id="demo", message=M1, id="m1")
    assert [m.text for m in result.messages] == [REPLY1]
    assert result.llm_calls == 3 and result.session.data == {"cidade": "Curitiba"}
    understand, round0, round1 = fake.requests
    assert understand.path == "/v1/chat/completions" and understand.json["reasoning_effort"] == "medium"
    assert round0.path == round1.path == "/v1/responses"
    assert round0.json["reasoning"] == {"effort": "medium"} and round0.json["store"] is False
    items = round1.json["input"]
    kinds = [item.get("type", "message") for item in items]
    at = kinds.index("reasoning")
    assert items[at] == reasoning_item("gpt-5.4", summary="Preciso do preço.")
    assert kinds[at + 1:at + 3] == ["function_call", "function_call_output"]
    assert result.usage.reasoning_tokens == 25 and result.usage.cached_input_tokens == 100
