"""End to end: the seed Concierge on the real OpenAICompatibleProvider over real HTTP against the
local fake chat-completions server (providers.md §5, §9; model-calls.md §6-§8; runtime.md §10, §16)."""
from __future__ import annotations

import json

import pytest

from falai import ProviderError, ScheduleEntry
from falai_providers import OpenAICompatibleProvider, is_strict_schema, schema_prompt
from fake_model_server import openai_frame, openai_refusal_frames
from e2e_concierge import streamed_turns_match
from e2e_concierge import (CODE, M1, M2, NOW_MS, PRECO_DECL, RESERVAR_DECL, REPLY1, REPLY2, REPLY2_BESIDE,
                           SPEAK1, SPEAK2, SPEAK2_BESIDE, SPEAK_SCHEMA, SPEAK_SCHEMA_RESERVA, UNDERSTAND1,
                           UNDERSTAND2, at_of, concierge, first_turn_history, iso_of, ms_of, pieces,
                           real_now_iso)

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

IDENTITY = '## Identity\nYou are "Concierge". Always refer to yourself by that name.'


def openai(fake, **kw):
    kw.setdefault("api_key", "test-key")
    kw.setdefault("model", "gpt-4.1-mini")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    return OpenAICompatibleProvider(base_url=fake.url + "/v1", **kw)


def usage(prompt, completion, cached=0):
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def text_reply(fake, text, use=None, n=3):
    frames = [openai_frame(content=p) for p in pieces(text, n)] + [openai_frame(finish="stop")]
    if use:
        frames.append(openai_frame(usage=use))
    fake.sse(*frames, "[DONE]")


def call_reply(fake, name, args, call_id="call_abc", text=None, use=None):
    raw = json.dumps(args, ensure_ascii=False)
    frames = [openai_frame(content=p) for p in pieces(text, 2)] if text else []
    frames += [openai_frame(tool={"index": 0, "id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": ""}}),
               openai_frame(tool={"index": 0, "function": {"arguments": raw[:5]}}),
               openai_frame(tool={"index": 0, "function": {"arguments": raw[5:]}}),
               openai_frame(finish="tool_calls")]
    if use:
        frames.append(openai_frame(usage=use))
    fake.sse(*frames, "[DONE]")


def script_turn1(fake):
    text_reply(fake, UNDERSTAND1, usage(100, 20, 40))
    call_reply(fake, "preco", {"cidade": "Curitiba"}, use=usage(200, 10))
    text_reply(fake, SPEAK1, usage(300, 15, 100))


def script_turn2(fake):
    text_reply(fake, UNDERSTAND2, usage(110, 12))
    call_reply(fake, "reservar", {"cidade": "Curitiba"}, call_id="call_xyz", text=SPEAK2_BESIDE,
               use=usage(210, 11, 50))
    text_reply(fake, SPEAK2, usage(310, 16, 60))


@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_two_turn_concierge_conversation_over_openai(fake):
    """The Tool page's Example on OpenAICompatibleProvider: json_schema response_format named after the call
    (providers.md §5.4, §3.1), the stable prefix as the leading system message, the prompt the last user
    message, tools only on speak rounds and only the step's, and the round history as assistant tool_calls
    (content "", engine ids) plus tool messages (providers.md §2.4, §5.3; model-calls.md §6.7)."""
    agent = concierge(openai(fake))
    script_turn1(fake)
    r1 = agent.turn(session_id="demo", message=M1, id="m1")
    assert [(m.text, m.key) for m in r1.messages] == [(REPLY1, "hospedagem#m1:oferta:1")]
    assert r1.llm_calls == 3 and r1.session.data == {"cidade": "Curitiba"}
    assert (r1.usage.prompt_tokens, r1.usage.completion_tokens, r1.usage.cached_input_tokens) == (600, 45, 140)
    assert all(q.path == "/v1/chat/completions" for q in fake.requests)

    understand, round0, round1 = (q.json for q in fake.requests)
    fmt = understand["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "understand"
    assert fmt["json_schema"]["strict"] is True and is_strict_schema(fmt["json_schema"]["schema"])
    assert list(fmt["json_schema"]["schema"]["properties"]) == ["flows", "fields"]
    assert understand["messages"][0] == {"role": "system", "content": IDENTITY}
    assert [m["role"] for m in understand["messages"]] == ["system", "user"]
    assert '"""\n' + M1 + '\n"""' in understand["messages"][-1]["content"]
    assert "tools" not in understand

    assert round0["tools"] == [{"type": "function", "function": PRECO_DECL}]
    assert round0["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "speak", "schema": SPEAK_SCHEMA, "strict": True}}
    assert round0["messages"][-1]["content"].rstrip().split("\n\n")[-1].startswith("## Tools")
    assert round1["messages"][:4] == [
        {"role": "system", "content": IDENTITY},
        {"role": "user", "content": M1},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call-0-0", "type": "function",
             "function": {"name": "preco", "arguments": '{"cidade":"Curitiba"}'}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "content": '{"precoNoite":420}'},
    ]
    assert round1["messages"][4] == round0["messages"][-1] and len(round1["messages"]) == 5

    script_turn2(fake)
    r2 = agent.turn(session_id="demo", session=r1.session, message=M2, id="m2", history=first_turn_history())
    assert [(m.text, m.key) for m in r2.messages] == [(REPLY2, "hospedagem#m1:confirma:1")]
    assert r2.session.data == {"cidade": "Curitiba", "reserva": CODE}
    assert [(e.id, e.reason) for e in r2.ended] == [("hospedagem#m1", "end")]
    assert r2.llm_calls == 3
    assert (r2.usage.prompt_tokens, r2.usage.completion_tokens, r2.usage.cached_input_tokens) == (630, 39, 110)
    understand2, round0b, round1b = (q.json for q in fake.requests[3:])
    history = [{"role": "system", "content": IDENTITY}, {"role": "user", "content": M1},
               {"role": "assistant", "content": REPLY1}]
    assert understand2["messages"][:3] == history and len(understand2["messages"]) == 4
    assert round0b["tools"] == [{"type": "function", "function": RESERVAR_DECL}]
    assert round0b["response_format"]["json_schema"]["schema"] == SPEAK_SCHEMA_RESERVA
    assert round1b["messages"][:6] == history + [
        {"role": "user", "content": M2},
        {"role": "assistant", "content": REPLY2_BESIDE, "tool_calls": [
            {"id": "call-0-0", "type": "function",
             "function": {"name": "reservar", "arguments": '{"cidade":"Curitiba"}'}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "content": json.dumps({"codigo": CODE},
                                                                          separators=(",", ":"))},
    ]


def test_the_wrap_up_round_carries_no_tools(fake):
    """model-calls.md §6.2: the round after max_tool_loops tool rounds offers no tools."""
    agent = concierge(openai(fake), max_tool_loops=1)
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    wrap = fake.requests[2].json
    assert "tools" not in wrap and wrap["response_format"]["json_schema"]["name"] == "speak"
    assert wrap["messages"][-1]["content"].rstrip().split("\n\n")[-1].startswith("## Wrap up")


@pytest.mark.protocols("v4")      # v4 prompt and envelope text; tests/model_calls/test_protocol.py covers "lean"
def test_json_object_mode_carries_the_envelope_as_the_last_system_message(fake):
    """providers.md §5.4 rule 3 (DeepSeek's preset): json_object plus the schema prompt appended after the
    user prompt, for the understand call and each speak round."""
    agent = concierge(openai(fake, name="deepseek"))
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    for q in fake.requests:
        assert q.json["response_format"] == {"type": "json_object"}
        assert q.json["messages"][-1]["role"] == "system"
        assert q.json["messages"][-1]["content"].startswith("Reply with one JSON object")
        assert q.json["messages"][-2]["role"] == "user"
    assert fake.requests[1].json["messages"][-1]["content"] == schema_prompt(SPEAK_SCHEMA)


def test_turn_stream_yields_the_message_text_and_the_same_result(fake):
    """model-calls.md §8 / runtime.md §16 over OpenAI's SSE: deltas are the decoded message text (text
    beside a call included), the final chunk's result equals turn()'s."""
    streamed_turns_match(fake, openai, script_turn1, script_turn2)


def test_an_understand_401_raises_auth(fake):
    """model-calls.md §10.1, providers.md §8.3 rule 9: a 401 is `auth`, raised out of turn()."""
    agent = concierge(openai(fake))
    fake.error(401, {"error": {"message": "Incorrect API key provided: test-key.", "type": "invalid_request_error",
                               "code": "invalid_api_key"}})
    with pytest.raises(ProviderError) as caught:
        agent.turn(session_id="demo", message=M1, id="m1")
    assert caught.value.kind == "auth" and caught.value.code == "invalid_api_key" and len(fake.requests) == 1


def test_a_speak_rate_limit_defers_on_the_ladder(fake):
    """runtime.md §10.2: a 429 after the provider's retries is `rate` → provider-unavailable, +1m."""
    agent = concierge(openai(fake))
    text_reply(fake, UNDERSTAND1)
    for _ in range(2):
        fake.error(429, {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                   "code": "rate_limit_exceeded"}}, headers={"retry-after": "1"})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    at = NOW_MS + 60_000
    assert r.schedule == [ScheduleEntry(key=f"hospedagem#m1:oferta:1:retry:{at}", at=at_of(at))]
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-unavailable")


def test_a_reset_header_later_than_the_rung_moves_the_wake(fake):
    """runtime.md §10.2 step 3 with OpenAI's reset header (providers.md §8.1: x-ratelimit-reset-requests)."""
    now = real_now_iso()
    agent = concierge(openai(fake), clock=now)
    text_reply(fake, UNDERSTAND1)
    fake.error(429, {"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}},
               headers={"x-ratelimit-reset-requests": "2h"})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    at_ms = int(r.schedule[0].key.rsplit(":", 1)[1])
    assert abs(at_ms - (ms_of(now) + 7_200_000)) < 5_000          # the wake moved to the reset time
    assert r.outcomes[-1].until == iso_of(at_ms)


def test_a_reset_header_beside_retry_after_still_moves_the_wake(fake):
    """providers.md §8.1: `retry_after_ms` comes from Retry-After first, while `reset_at_ms` is when the
    binding limit resets and "can be far beyond retry_after_ms" — so both are filled when both headers come;
    runtime.md §10.2 step 3: a `reset_at_ms` later than the rung moves the wake."""
    now = real_now_iso()
    agent = concierge(openai(fake), clock=now)
    text_reply(fake, UNDERSTAND1)
    fake.error(429, {"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}},
               headers={"retry-after": "45", "x-ratelimit-reset-requests": "2h"})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    at_ms = int(r.schedule[0].key.rsplit(":", 1)[1])
    assert abs(at_ms - (ms_of(now) + 7_200_000)) < 5_000


def test_an_insufficient_quota_429_ends_the_run_provider_quota(fake):
    """providers.md §8.3 rule 7: OpenAI's insufficient_quota 429 is `quota`; runtime.md §10.2: without a
    reset time it is not retryable: `prompt / failed / provider-quota`, run ended `failed`."""
    agent = concierge(openai(fake))
    text_reply(fake, UNDERSTAND1)
    fake.error(429, {"error": {"message": "You exceeded your current quota, please check your plan and billing "
                                          "details.", "type": "insufficient_quota", "code": "insufficient_quota"}})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("failed", "provider-quota")
    assert r.schedule == [] and r.ended[0].reason == "failed" and len(fake.requests) == 2


def test_a_speak_refusal_is_not_retried_and_ends_provider_invalid(fake):
    """Issue 7 item 5 through turn(): a refusal (delta.refusal) is kind content after one request; the
    engine gives it outcome provider-invalid (model-calls.md §10.2), not the retry ladder of an overload."""
    agent = concierge(openai(fake, backup_models=["gpt-4.1-nano"]))
    text_reply(fake, UNDERSTAND1)
    fake.sse(*openai_refusal_frames())
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages == [] and r.outcomes[-1].code == "provider-invalid"
    assert len(fake.requests) == 2 and r.schedule == []


def test_a_blank_envelope_defers_as_provider_unavailable(fake):
    """model-calls.md §10.2 / providers.md §3.5 rule 6: `{"message":""}` is an empty reply."""
    agent = concierge(openai(fake), max_tool_loops=0)
    text_reply(fake, UNDERSTAND1)
    text_reply(fake, '{"message":""}')
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages == [] and (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-unavailable")
    assert len(fake.requests) == 2


@pytest.mark.parametrize("name, delta, replayed", [
    ("deepseek", {"reasoning_content": "Preciso do preço."}, {"reasoning_content": "Preciso do preço."}),
    ("openrouter", {"reasoning": "hmm", "reasoning_details": [{"type": "reasoning.encrypted", "data": "xyz"}]},
     {"reasoning_content": "hmm", "reasoning_details": [{"type": "reasoning.encrypted", "data": "xyz"}]}),
])
def test_reasoning_of_a_tool_round_is_replayed_on_the_next_round(fake, name, delta, replayed):
    """model-calls.md §5.5 rule 5 / §6.7 (the round's reasoning rides on its assistant item), providers.md
    §5.3 (replayed as reasoning_content / reasoning_details: thinking endpoints reject a tool round without
    it), through turn() and turn_stream() alike."""
    for stream in (False, True):
        fake.requests.clear()
        agent = concierge(openai(fake, name=name))
        text_reply(fake, UNDERSTAND1)
        fake.sse(openai_frame(**delta),
                 openai_frame(tool={"index": 0, "id": "c1", "type": "function",
                                    "function": {"name": "preco", "arguments": '{"cidade":"Curitiba"}'}}),
                 openai_frame(finish="tool_calls"), "[DONE]")
        text_reply(fake, SPEAK1)
        if stream:
            result = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))[-1].result
        else:
            result = agent.turn(session_id="demo", message=M1, id="m1")
        assert result.messages[0].text == REPLY1
        assistant = fake.requests[2].json["messages"][2]
        assert {k: assistant[k] for k in replayed} == replayed and assistant["tool_calls"][0]["id"] == "call-0-0"
