"""End to end: the seed Concierge on the real AnthropicProvider over real HTTP against the local fake
Messages API server (providers.md §6, §9; model-calls.md §6-§8; runtime.md §10, §16)."""
from __future__ import annotations

import json

import pytest

from falai import ProviderError, ScheduleEntry
from falai_providers import AnthropicProvider
from fake_model_server import anthropic_thinking_tool_events, anthropic_tool_events
from e2e_concierge import streamed_turns_match
from e2e_concierge import (CODE, M1, M2, NOW_MS, PRECO_DECL, RESERVAR_DECL, REPLY1, REPLY2, REPLY2_BESIDE,
                           SPEAK1, SPEAK2, SPEAK2_BESIDE, SPEAK_SCHEMA_ANTHROPIC, SPEAK_SCHEMA_RESERVA_ANTHROPIC,
                           UNDERSTAND1, UNDERSTAND2, at_of, concierge, first_turn_history, iso_of, ms_of, pieces,
                           real_now_iso)

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

IDENTITY = '## Identity\nYou are "Concierge". Always refer to yourself by that name.'


def claude(fake, **kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    kw.setdefault("model", "claude-sonnet-5")
    return AnthropicProvider(api_key="test-key", base_url=fake.url, **kw)


def text_events(text, input_tokens=5, output_tokens=3, cache_read=0, cache_write=0, n=3):
    """A streamed text reply in ``n`` text_delta events."""
    start = {"input_tokens": input_tokens, "cache_read_input_tokens": cache_read,
             "cache_creation_input_tokens": cache_write, "output_tokens": 1}
    events = [{"type": "message_start", "message": {"usage": start}},
              {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
               for p in pieces(text, n)]
    events += [{"type": "content_block_stop", "index": 0},
               {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output_tokens}},
               {"type": "message_stop"}]
    return [json.dumps(e) for e in events]


def call_events(name, args, text=None, **kw):
    raw = json.dumps(args, ensure_ascii=False)
    return anthropic_tool_events(name, [raw[:4], raw[4:]], tool_id="toolu_01", text=text, **kw)


def script_turn1(fake):
    fake.sse(*text_events(UNDERSTAND1, 100, 20, cache_read=40, cache_write=10))
    fake.sse(*call_events("preco", {"cidade": "Curitiba"}, input_tokens=200, output_tokens=10))
    fake.sse(*text_events(SPEAK1, 300, 15, cache_read=100))


def script_turn2(fake):
    fake.sse(*text_events(UNDERSTAND2, 110, 12))
    fake.sse(*call_events("reservar", {"cidade": "Curitiba"}, text=SPEAK2_BESIDE, input_tokens=210, output_tokens=11))
    fake.sse(*text_events(SPEAK2, 310, 16, cache_read=60))


@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_two_turn_concierge_conversation_over_anthropic(fake):
    """The Tool page's Example on AnthropicProvider: the stable prefix as the cached system block, the envelope
    as native structured output (issue 7), the prompt the last user text, tools only on speak rounds
    and only the step's, the round as assistant tool_use and a user tool_result followed by the prompt in the
    same user message (providers.md §2.4, §6.3); usage reconciles cache reads and writes (§6.5)."""
    agent = concierge(claude(fake))
    script_turn1(fake)
    r1 = agent.turn(session_id="demo", message=M1, id="m1")
    assert [(m.text, m.key) for m in r1.messages] == [(REPLY1, "hospedagem#m1:oferta:1")]
    assert r1.llm_calls == 3 and r1.session.data == {"cidade": "Curitiba"}
    # prompt = input + cache read + cache write; cached = cache read (providers.md §6.5)
    assert (r1.usage.prompt_tokens, r1.usage.completion_tokens, r1.usage.cached_input_tokens) == (
        (100 + 40 + 10) + 200 + (300 + 100), 20 + 10 + 15, 40 + 100)
    assert all(q.path == "/v1/messages" for q in fake.requests)

    understand, round0, round1 = (q.json for q in fake.requests)
    assert understand["system"][0] == {"type": "text", "text": IDENTITY, "cache_control": {"type": "ephemeral"}}
    # Claude Sonnet 5 takes the envelope as native structured output (issue 7), and thinks unless told not
    # to, so the understand call turns thinking off (the lowest the model allows).
    schema = understand["output_config"]["format"]["schema"]
    assert list(schema["properties"]) == ["flows", "fields"] and len(understand["system"]) == 1
    assert understand["thinking"] == {"type": "disabled"}
    assert understand["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": understand["messages"][0]["content"][0]["text"]}]}]
    assert '"""\n' + M1 + '\n"""' in understand["messages"][0]["content"][0]["text"]
    assert "tools" not in understand

    assert round0["tools"] == [{"name": "preco", "description": PRECO_DECL["description"],
                                "input_schema": PRECO_DECL["parameters"]}]
    assert round0["output_config"] == {"format": {"type": "json_schema", "schema": SPEAK_SCHEMA_ANTHROPIC}}
    assert len(round0["system"]) == 1 and "thinking" not in round0
    prompt0 = round0["messages"][-1]["content"][-1]["text"]
    assert round1["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": M1}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call-0-0", "name": "preco", "input": {"cidade": "Curitiba"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call-0-0",
             "content": [{"type": "text", "text": '{"precoNoite":420}'}]},
            {"type": "text", "text": prompt0}]},
    ]

    script_turn2(fake)
    r2 = agent.turn(session_id="demo", session=r1.session, message=M2, id="m2", history=first_turn_history())
    assert [(m.text, m.key) for m in r2.messages] == [(REPLY2, "hospedagem#m1:confirma:1")]
    assert r2.session.data == {"cidade": "Curitiba", "reserva": CODE}
    assert [(e.id, e.reason) for e in r2.ended] == [("hospedagem#m1", "end")] and r2.llm_calls == 3
    understand2, round0b, round1b = (q.json for q in fake.requests[3:])
    history = [{"role": "user", "content": [{"type": "text", "text": M1}]},
               {"role": "assistant", "content": [{"type": "text", "text": REPLY1}]}]
    assert understand2["messages"][:2] == history and len(understand2["messages"]) == 3
    assert round0b["tools"] == [{"name": "reservar", "description": RESERVAR_DECL["description"],
                                 "input_schema": RESERVAR_DECL["parameters"]}]
    assert round0b["output_config"]["format"]["schema"] == SPEAK_SCHEMA_RESERVA_ANTHROPIC
    assert round1b["messages"][:4] == history + [
        {"role": "user", "content": [{"type": "text", "text": M2}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": REPLY2_BESIDE},
            {"type": "tool_use", "id": "call-0-0", "name": "reservar", "input": {"cidade": "Curitiba"}}]},
    ]
    assert round1b["messages"][4]["content"][0] == {
        "type": "tool_result", "tool_use_id": "call-0-0",
        "content": [{"type": "text", "text": json.dumps({"codigo": CODE}, separators=(",", ":"))}]}
    assert len(round1b["messages"]) == 5


def test_the_wrap_up_round_carries_no_tools(fake):
    """model-calls.md §6.2: the round after max_tool_loops tool rounds offers no tools."""
    agent = concierge(claude(fake), max_tool_loops=1)
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    wrap = fake.requests[2].json
    assert "tools" not in wrap
    assert wrap["messages"][-1]["content"][-1]["text"].rstrip().split("\n\n")[-1].startswith("## Wrap up")


def test_turn_stream_yields_the_message_text_and_the_same_result(fake):
    """model-calls.md §8 / runtime.md §16 over Anthropic's event stream."""
    streamed_turns_match(fake, claude, script_turn1, script_turn2)


def test_an_understand_401_raises_auth(fake):
    """model-calls.md §10.1: the understand call's ProviderError propagates, kind `auth`."""
    agent = concierge(claude(fake))
    fake.error(401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
    with pytest.raises(ProviderError) as caught:
        agent.turn(session_id="demo", message=M1, id="m1")
    assert caught.value.kind == "auth" and len(fake.requests) == 1


def test_a_529_overloaded_defers_the_speak_step(fake):
    """providers.md §6.5: 529 overloaded_error is `overload`, retried; then runtime.md §10.2: deferred, +1m."""
    agent = concierge(claude(fake))
    fake.sse(*text_events(UNDERSTAND1))
    for _ in range(2):
        fake.error(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    at = NOW_MS + 60_000
    assert r.schedule == [ScheduleEntry(key=f"hospedagem#m1:oferta:1:retry:{at}", at=at_of(at))]
    assert (r.outcomes[-1].status, r.outcomes[-1].code, r.outcomes[-1].until) == (
        "deferred", "provider-unavailable", iso_of(at))
    assert len(fake.requests) == 3


def test_an_in_band_overload_mid_stream_defers_and_keeps_the_deltas(fake):
    """providers.md §6.5 `error` event, §1.6 rule 4; model-calls.md §8 "Failures"."""
    agent = concierge(claude(fake), max_tool_loops=0)
    fake.sse(*text_events(UNDERSTAND1))
    events = text_events(SPEAK1)[:3] + [json.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                                                "message": "Overloaded"}})]
    fake.sse(*events)
    chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    assert [c.delta for c in chunks[:-1]] and REPLY1.startswith("".join(c.delta for c in chunks[:-1]))
    result = chunks[-1].result
    assert result.messages == [] and result.outcomes[-1].code == "provider-unavailable"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("retry_after", [
    pytest.param({}, id="the-reset-alone"),
    pytest.param({"retry-after": "60"}, id="retry-after-beside-the-reset-still-defers-to-the-reset"),
])
def test_a_quota_429_with_a_reset_time_defers_to_the_reset(fake, retry_after):
    """runtime.md §10.2: `quota` is retryable only when the error states a reset time, and a later
    `reset_at_ms` moves the wake (providers.md §8.1: anthropic-ratelimit-unified-reset). Anthropic sends
    `retry-after` beside its `anthropic-ratelimit-*-reset` headers: `reset_at_ms` "can be far beyond
    retry_after_ms", both are filled, and the wake still moves to the reset (providers.md §8.1)."""
    now = real_now_iso()
    reset_s = ms_of(now) // 1000 + 5 * 3600
    agent = concierge(claude(fake), clock=now)
    fake.sse(*text_events(UNDERSTAND1))
    fake.error(429, {"type": "error", "error": {"type": "rate_limit_error",
                                                "message": "You have reached your usage limit for this 5h window."}},
               headers={**retry_after, "anthropic-ratelimit-unified-reset": str(reset_s)})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-quota")
    assert r.schedule == [ScheduleEntry(key=f"hospedagem#m1:oferta:1:retry:{reset_s * 1000}",
                                        at=at_of(reset_s * 1000))]


def test_a_blank_message_with_a_tool_round_still_opens_with_a_user_message(fake):
    """providers.md §2.2 item 2 / model-calls.md §6.7 rule 1: the engine puts a user item before the first
    assistant tool call so that no conversation opens with the model's own call (Anthropic's Messages API
    requires the first message to be a user message); python-api.md, One turn: `message=""` is a message."""
    from falai import Tool, falai
    agent = falai().fields({}).agent(
        name="Concierge", provider=claude(fake), idle={"prompt": "Atenda pelo hotel."},
        tools=[Tool(id="agora", description="Hora atual.", parameters={"type": "object", "properties": {}},
                    handler=lambda args, ctx: {"value": "10h"})])
    fake.sse(*call_events("agora", {}))
    fake.sse(*text_events('{"message":"São 10h."}'))
    r = agent.turn(session_id="demo", message="", id="m1")
    assert r.messages[0].text == "São 10h."
    assert fake.requests[1].json["messages"][0]["role"] == "user"


def test_thinking_of_a_tool_round_is_never_replayed(fake):
    """providers.md §2.4 / §6.3: Anthropic's reasoning is never replayed (its thinking blocks are signed)."""
    agent = concierge(claude(fake))
    fake.sse(*text_events(UNDERSTAND1))
    events = [json.loads(e) for e in call_events("preco", {"cidade": "Curitiba"})]
    thinking = [{"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "thinking_delta", "thinking": "SECRET-THOUGHT"}},
                {"type": "content_block_stop", "index": 0}]
    for e in events[1:]:
        if "index" in e:
            e["index"] += 1
    fake.sse(*[json.dumps(e) for e in events[:1] + thinking + events[1:]])
    fake.sse(*text_events(SPEAK1))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    assert "SECRET-THOUGHT" not in fake.requests[2].raw.decode()
    assert fake.requests[2].json["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call-0-0", "name": "preco", "input": {"cidade": "Curitiba"}}]


def test_a_tool_round_with_thinking_on_replays_the_signed_block(fake):
    """Issue 7 item 4 through turn(): with an effort set, round 1 of the speak call thinks and calls preco;
    round 2 must open its assistant message with round 1's signed thinking block, which the engine carries
    as the item's reasoningDetails. The strict fake answers Anthropic's 400 when it is missing (the old
    code dropped the signature_delta, so the turn failed)."""
    agent = concierge(claude(fake, model="claude-sonnet-4-5", config={"effort": "low", "maxTokens": 4096}))
    fake.sse(*text_events(UNDERSTAND1))
    fake.sse(*anthropic_thinking_tool_events("Vejo o preço.", "SIG-1", "preco", {"cidade": "Curitiba"}), raw=True)
    fake.sse(*text_events(SPEAK1))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert [m.text for m in r.messages] == [REPLY1] and r.llm_calls == 3
    round1 = fake.requests[2].json
    assistant = next(m for m in round1["messages"] if m["role"] == "assistant")
    assert assistant["content"][0] == {"type": "thinking", "thinking": "Vejo o preço.", "signature": "SIG-1"}
    assert round1["thinking"] == {"type": "enabled", "budget_tokens": 2048}
