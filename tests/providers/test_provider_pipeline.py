"""The common HTTP pipeline of the built-in providers (providers.md §1.6, §3), run
against the local fake server for every vendor, plus the public helpers of §1.8."""
import json
import logging
import threading
import time

import pytest
import requests
from hypothesis import given, settings, strategies as st

import falai
from falai import GenerateRequest, Generation, ProviderError
from falai_providers import (AnthropicProvider, GeminiProvider, OpenAICompatibleProvider, _SseReader,
                             is_strict_schema, parse_tool_args, schema_prompt, to_gemini_openapi_schema)
from fake_model_server import (anthropic_events, anthropic_tool_events, gemini_frame,
                               openai_frame)

SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}
TOOL = {"name": "preco", "description": "Preço da diária.",
        "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def _opts(kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    return kw


def make_gemini(fake, **kw):
    return GeminiProvider(api_key="test-key", model="gemini-3.8-flash", base_url=fake.url, **_opts(kw))


def make_openai(fake, **kw):
    return OpenAICompatibleProvider(api_key="test-key", model="gpt-4.1-mini", base_url=fake.url, **_opts(kw))


def make_anthropic(fake, **kw):
    return AnthropicProvider(api_key="test-key", model="claude-haiku-4-5", base_url=fake.url, **_opts(kw))


def _anthropic_text(parts):
    head = [json.dumps({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
            json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
    deltas = [json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})
              for p in parts]
    tail = [json.dumps({"type": "content_block_stop", "index": 0}),
            json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            json.dumps({"type": "message_stop"})]
    return head + deltas + tail


VENDORS = {
    "gemini": {
        "make": make_gemini,
        "text": lambda parts: [gemini_frame(text=p) for p in parts] + [gemini_frame(finish="STOP")],
        "call": lambda name, args: [gemini_frame(call=(name, args), finish="STOP")],
        "call_with_text": lambda text, name, args: [gemini_frame(text=text), gemini_frame(call=(name, args),
                                                                                          finish="STOP")],
        "no_json_mode": lambda body: ("responseMimeType" not in body["generationConfig"]
                                      and "responseJsonSchema" not in body["generationConfig"]
                                      and "JSON Schema" not in json.dumps(body.get("systemInstruction"))),
    },
    "openai": {
        "make": make_openai,
        "text": lambda parts: [openai_frame(content=p) for p in parts] + [openai_frame(finish="stop"), "[DONE]"],
        "call": lambda name, args: [openai_frame(tool={"index": 0, "id": "c1", "type": "function",
                                                       "function": {"name": name, "arguments": json.dumps(args)}}),
                                    openai_frame(finish="tool_calls"), "[DONE]"],
        "call_with_text": lambda text, name, args: [
            openai_frame(content=text),
            openai_frame(tool={"index": 0, "id": "c1", "function": {"name": name, "arguments": json.dumps(args)}}),
            openai_frame(finish="tool_calls"), "[DONE]"],
        "no_json_mode": lambda body: ("response_format" not in body
                                      and all("JSON Schema" not in m["content"] for m in body["messages"])),
    },
    "anthropic": {
        "make": make_anthropic,
        "text": _anthropic_text,
        "call": lambda name, args: anthropic_tool_events(name, [json.dumps(args)]),
        "call_with_text": lambda text, name, args: anthropic_tool_events(name, [json.dumps(args)], text=text),
        "no_json_mode": lambda body: all("JSON Schema" not in b["text"] for b in body.get("system", [])),
    },
}


@pytest.fixture(params=sorted(VENDORS))
def vendor(request):
    return VENDORS[request.param]


def req(**kw):
    kw.setdefault("system", None)
    kw.setdefault("prompt", "PROMPT")
    kw.setdefault("history", [])
    return GenerateRequest(**kw)


# Reply rules, each vendor (providers.md §9.5 "Reply rules") ##################

@pytest.mark.parametrize("schema", [None, {}])
def test_schema_none_or_empty_sends_no_json_mode(fake, vendor, schema):
    """providers.md §1.3: a schema of None or {} means plain text; no JSON mode is requested."""
    fake.sse(*vendor["text"](["Resumo da conversa."]))
    out = vendor["make"](fake).generate(req(system="S", schema=schema, schema_name="compaction"))
    assert vendor["no_json_mode"](fake.requests[0].json)
    assert out.message == "Resumo da conversa." and out.structured is None


def test_blank_envelope_without_tool_calls_raises_overload_and_is_not_retried(fake, vendor):
    """providers.md §3.5 rule 6: an empty effective reply raises "No response from <name>" (kind overload),
    after the stream, so the provider does not retry it."""
    fake.sse(*vendor["text"](['{"message":""}']))
    provider = vendor["make"](fake)
    with pytest.raises(ProviderError) as caught:
        provider.generate(req(schema=SPEAK, schema_name="speak"))
    assert caught.value.kind == "overload"
    assert str(caught.value) == f"No response from {provider.name}"
    assert len(fake.requests) == 1


def test_tool_call_without_text_is_a_valid_reply(fake, vendor):
    """providers.md §3.5 rule 6: the empty-reply error applies only when there are no tool calls."""
    fake.sse(*vendor["call"]("preco", {"cidade": "Curitiba"}))
    out = vendor["make"](fake).generate(req(schema=SPEAK, schema_name="speak", tools=[TOOL]))
    assert out.message == "" and out.structured is None
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("preco", {"cidade": "Curitiba"})]
    assert out.metadata["finishReason"] == "tool_calls"


def test_broken_envelope_that_looks_like_json_gives_an_empty_message(fake, vendor):
    """providers.md §1.4 / §3.5 rule 4: a schema was asked, the text starts with `{` and does not parse:
    message is "" so the broken envelope never reaches a customer."""
    fake.sse(*vendor["call_with_text"]('{"message": "Vou verificar', "preco", {"cidade": "Curitiba"}))
    out = vendor["make"](fake).generate(req(schema=SPEAK, schema_name="speak", tools=[TOOL]))
    assert out.message == "" and out.structured is None and len(out.tool_calls) == 1


def test_fenced_broken_envelope_is_blanked_too(fake, vendor):
    """providers.md §3.5 rule 4: text starting with three backticks counts as envelope-shaped."""
    fake.sse(*vendor["call_with_text"]('```json\n{"message": "oi', "preco", {"cidade": "X"}))
    out = vendor["make"](fake).generate(req(schema=SPEAK, tools=[TOOL]))
    assert out.message == ""


def test_plain_prose_with_a_schema_requested_stays_in_message(fake, vendor):
    """providers.md §3.5 rule 4: prose that does not look like an envelope passes through unparsed."""
    fake.sse(*vendor["text"](["Olá! Tudo bem?"]))
    out = vendor["make"](fake).generate(req(schema=SPEAK, schema_name="speak"))
    assert out.message == "Olá! Tudo bem?" and out.structured is None


def test_structured_reply_is_parsed_leniently_from_a_code_fence(fake, vendor):
    """providers.md §3.6: a fenced envelope with a raw line break inside a string still parses."""
    fake.sse(*vendor["text"](['```json\n{"message": "linha 1\nlinha 2"}\n```']))
    out = vendor["make"](fake).generate(req(schema=SPEAK, schema_name="speak"))
    assert out.structured == {"message": "linha 1\nlinha 2"}
    assert out.message.startswith("```json")


def test_generate_equals_the_drained_stream(fake, vendor):
    """providers.md §1.6 rules 1-2: deltas are non-empty and join to `accumulated`; exactly one done
    chunk, last, with delta ""; generate returns the same final fields."""
    parts = ['{"message":', '"Olá, ', 'Ana!"}']
    fake.sse(*vendor["text"](parts))
    fake.sse(*vendor["text"](parts))
    provider = vendor["make"](fake)
    chunks = list(provider.generate_stream(req(schema=SPEAK, schema_name="speak")))
    out = provider.generate(req(schema=SPEAK, schema_name="speak"))
    body, last = chunks[:-1], chunks[-1]
    assert [c.delta for c in body] == parts
    assert all(not c.done and c.delta for c in body)
    assert [c.accumulated for c in body] == ["".join(parts[:i + 1]) for i in range(len(parts))]
    assert last.done and last.delta == "" and sum(c.done for c in chunks) == 1
    assert (out.message, out.structured, out.tool_calls, out.usage, out.metadata) == \
        (last.accumulated, last.structured, last.tool_calls, last.usage, last.metadata)
    assert out.structured == {"message": "Olá, Ana!"}


def test_user_agent_names_falai_and_its_version(fake, vendor):
    """Issue: each provider sets a User-Agent naming falai and its version."""
    fake.sse(*vendor["text"](["ok"]))
    vendor["make"](fake).generate(req())
    assert f"falai-python/{falai.__version__}" in fake.requests[0].headers["user-agent"]


def test_extra_headers_are_merged_last(fake, vendor):
    """providers.md §3.9: the `headers` option is merged last (a gateway's own auth)."""
    fake.sse(*vendor["text"](["ok"]))
    vendor["make"](fake, headers={"X-Gateway": "g1", "User-Agent": "mine"}).generate(req())
    assert fake.requests[0].headers["x-gateway"] == "g1"
    assert fake.requests[0].headers["user-agent"] == "mine"


def test_history_is_never_mutated(fake, vendor):
    """providers.md §1.3: the provider maps history but never mutates it."""
    history = [{"role": "user", "content": "oi"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}}]},
               {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": {"precoNoite": 420}}]
    snapshot = json.dumps(history)
    fake.sse(*vendor["text"](["ok"]))
    vendor["make"](fake).generate(req(history=history, tools=[TOOL]))
    assert json.dumps(history) == snapshot


def test_one_session_is_reused_across_calls(fake, vendor):
    """Issue / providers.md §3.9: one requests.Session per provider, passed in or created once."""
    class Counting(requests.Session):
        posts = 0

        def post(self, *a, **kw):
            Counting.posts += 1
            return super().post(*a, **kw)

    session = Counting()
    fake.sse(*vendor["text"](["a"]))
    fake.sse(*vendor["text"](["b"]))
    provider = vendor["make"](fake, session=session)
    provider.generate(req())
    provider.generate(req())
    assert provider.session is session and Counting.posts == 2


def test_usage_is_none_when_the_vendor_reported_nothing(fake):
    """providers.md §1.2 row 9: no usage reported means usage None, never zeros."""
    fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"), "[DONE]")
    out = make_openai(fake).generate(req())
    assert out.usage is None and "tokensUsed" not in out.metadata


def test_one_provider_serves_several_threads(fake):
    """providers.md §1.6 rule 6: no per-conversation state; one instance serves concurrent calls."""
    for _ in range(6):
        fake.sse(gemini_frame(text="ok", finish="STOP"))
    provider = make_gemini(fake)
    results, errors = [], []

    def call():
        try:
            results.append(provider.generate(req()).message)
        except Exception as exc:          # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert errors == [] and results == ["ok"] * 6


# The key (providers.md §1.6 rule 5) ##########################################

def test_the_key_never_appears_in_repr_url_or_error_message(fake):
    """providers.md §1.6 rule 5: not in the URL, an exception message, or a repr, even when the server
    echoes the key back in its error body."""
    fake.error(400, {"error": {"code": 400, "message": "API key not valid: test-key", "status": "INVALID_ARGUMENT"}})
    provider = make_gemini(fake)
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert "test-key" not in repr(provider) and "test-key" not in str(caught.value)
    assert "test-key" not in (caught.value.body or "")
    assert "test-key" not in fake.requests[0].path + json.dumps(fake.requests[0].query)
    assert caught.value.kind == "auth"


def test_warnings_never_carry_the_key(fake, caplog):
    """providers.md §1.6 rule 5: log lines do not carry the key either."""
    fake.error(503, {"error": {"message": "overloaded test-key", "status": "UNAVAILABLE"}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    with caplog.at_level(logging.WARNING, logger="falai"):
        make_gemini(fake).generate(req())
    assert caplog.records and "test-key" not in caplog.text


# Framing (providers.md §3.7) ##################################################

def test_crlf_line_ends_are_read(fake):
    """providers.md §3.7 rule 2: `\\r\\n` is normalized."""
    fake.sse(gemini_frame(text="Olá "), gemini_frame(text="mundo", finish="STOP"), crlf=True)
    assert make_gemini(fake).generate(req()).message == "Olá mundo"


def test_frames_split_mid_character_and_mid_crlf_survive(fake):
    """providers.md §3.7 rules 1-2: an incremental UTF-8 decoder and a held-back `\\r`."""
    fake.sse(gemini_frame(text="ação é útil 🙂"), gemini_frame(text=" çã", finish="STOP"), crlf=True, split=3)
    fake.sse(gemini_frame(text="ação é útil 🙂"), gemini_frame(text=" çã", finish="STOP"), crlf=True, split=1)
    provider = make_gemini(fake)
    assert provider.generate(req()).message == "ação é útil 🙂 çã"
    assert provider.generate(req()).message == "ação é útil 🙂 çã"


def test_a_stream_without_its_final_blank_line_keeps_its_last_frame(fake):
    """providers.md §3.7 rule 6: what is left at end of body is a last frame."""
    fake.sse(gemini_frame(text="a"), gemini_frame(text="b", finish="STOP", usage=(3, 1, 0)), no_final_blank=True)
    out = make_gemini(fake).generate(req())
    assert out.message == "ab" and out.usage.prompt_tokens == 3


def test_keep_alive_comments_and_event_lines_contribute_nothing(fake):
    """providers.md §3.7 rule 3: `:` comments, `event:`, `id:`, `retry:` lines are skipped; data lines
    of one frame join with a newline."""
    fake.sse(gemini_frame(text="a"), gemini_frame(text="b", finish="STOP"), comments=True)
    frame = json.dumps({"candidates": [{"content": {"parts": [{"text": "c"}]}, "finishReason": "STOP"}]})
    cut = frame.index('"finishReason"')          # two data lines, joined by a newline between tokens
    first, second = frame[:cut], frame[cut:]
    fake.sse(f"event: x\nid: 7\nretry: 10\ndata: {first}\ndata: {second}\n\n", raw=True)
    provider = make_gemini(fake)
    assert provider.generate(req()).message == "ab"
    assert provider.generate(req()).message == "c"


def test_done_marker_empty_and_non_json_payloads_are_skipped(fake):
    """providers.md §3.7 rules 5 and 7."""
    fake.sse("", "not json {", gemini_frame(text="ok"), "[DONE]", gemini_frame(finish="STOP"))
    assert make_gemini(fake).generate(req()).message == "ok"


def test_a_bare_error_tail_outside_the_framing_raises_the_classified_kind(fake):
    """providers.md §3.7 rule 4 / §4.9: Gemini appends an in-band error object outside the SSE framing."""
    tail = json.dumps({"error": {"code": 400, "message": "Request contains an invalid argument.",
                                 "status": "INVALID_ARGUMENT"}}, indent=2)
    fake.sse(gemini_frame(text="par"), raw_tail=tail)
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake).generate(req())
    assert caught.value.kind == "invalid" and caught.value.status == 400
    assert caught.value.code == "INVALID_ARGUMENT"
    assert str(caught.value) == "gemini stream error: Request contains an invalid argument."
    assert len(fake.requests) == 1


def test_an_application_json_body_is_read_whole(fake):
    """providers.md §3.7 rule 8: a JSON list is a list of payloads, a JSON object one payload."""
    fake.json([json.loads(gemini_frame(text="Ol")), json.loads(gemini_frame(text="á", finish="STOP"))])
    fake.json({"choices": [{"index": 0, "message": {"role": "assistant", "content": "oi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 4, "completion_tokens": 1}})
    assert make_gemini(fake).generate(req()).message == "Olá"
    out = make_openai(fake).generate(req())
    assert out.message == "oi" and out.usage.prompt_tokens == 4


# Empty replies (providers.md §3.5 rule 1) ######################################

def test_an_empty_stream_is_retried_then_raises_overload_no_content(fake, vendor):
    """providers.md §3.5 rule 1: a stream with no content fails the attempt (kind overload), retried."""
    fake.sse()
    fake.sse()
    provider = vendor["make"](fake)
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert caught.value.kind == "overload"
    assert str(caught.value) == f"{provider.name}: completed with no content"
    assert len(fake.requests) == 2


def test_an_empty_attempt_then_a_good_one_succeeds(fake):
    """providers.md §3.5 rule 1: the no-content guard raises before anything is yielded, so it is retried."""
    fake.sse(gemini_frame(usage=(5, 0, 0)))
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    sleeps = []
    assert make_gemini(fake, sleep=sleeps.append).generate(req()).message == "ok"
    assert len(sleeps) == 1 and 0 <= sleeps[0] < 1.0


def test_a_2xx_without_a_body_is_an_empty_response_body(fake):
    """providers.md §3.5 rule 1: a 2xx response without a body fails like an empty stream."""
    fake.empty()
    fake.empty()
    with pytest.raises(ProviderError) as caught:
        make_openai(fake).generate(req())
    assert caught.value.kind == "overload" and str(caught.value) == "openai: empty response body"
    assert len(fake.requests) == 2


def test_a_dry_script_answers_500_and_is_retried(fake):
    """providers.md §9.1 rule 5: the fake's 500 `no scripted reply` is an overload, never a hang."""
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake).generate(req())
    assert caught.value.kind == "overload" and caught.value.status == 500 and len(fake.requests) == 2


# Retries (providers.md §3.8) ###################################################

def test_retries_zero_is_honoured(fake):
    """providers.md §3.9: `retries` 0 means one attempt."""
    fake.error(503, {"error": {"message": "overloaded"}})
    with pytest.raises(ProviderError):
        make_openai(fake, retry_config={"timeout": 2000, "retries": 0}).generate(req())
    assert len(fake.requests) == 1


def test_default_retries_are_three_with_full_jitter_backoff(fake):
    """providers.md §3.8: 4 attempts by default; delays uniform in [0, 1000 × 2^(attempt-1)) ms."""
    for _ in range(4):
        fake.error(500, {"error": {"message": "boom"}})
    sleeps = []
    provider = OpenAICompatibleProvider(api_key="k", model="m", base_url=fake.url, sleep=sleeps.append)
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert caught.value.kind == "overload" and len(fake.requests) == 4
    assert len(sleeps) == 3 and all(0 <= s < cap for s, cap in zip(sleeps, (1, 2, 4)))


def test_retry_after_header_is_slept_as_given(fake):
    """providers.md §3.8 / §8.1: a server-named wait (Retry-After, seconds) is used exactly."""
    fake.error(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "2"})
    fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"))
    sleeps = []
    assert make_openai(fake, sleep=sleeps.append).generate(req()).message == "ok"
    assert sleeps == [2.0]


def test_a_server_wait_over_30_seconds_stops_the_retries(fake):
    """providers.md §3.8: a wait beyond 30 s ends the in-provider retries; retry_after_ms is kept."""
    fake.error(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "45"})
    sleeps = []
    with pytest.raises(ProviderError) as caught:
        make_openai(fake, sleep=sleeps.append).generate(req())
    assert caught.value.kind == "rate" and caught.value.retry_after_ms == 45000
    assert sleeps == [] and len(fake.requests) == 1


def test_x_should_retry_false_stops_a_retryable_error(fake):
    """providers.md §3.8: `x-should-retry` overrides the kind's default, here on a 503."""
    fake.error(503, {"error": {"message": "overloaded"}}, headers={"x-should-retry": "false"})
    with pytest.raises(ProviderError) as caught:
        make_anthropic(fake).generate(req())
    assert caught.value.should_retry is False and caught.value.kind == "overload" and len(fake.requests) == 1


def test_x_should_retry_true_retries_an_otherwise_final_error(fake):
    """providers.md §3.8: `x-should-retry: true` makes even a 400 retried."""
    fake.error(400, {"error": {"message": "bad"}}, headers={"x-should-retry": "true"})
    fake.sse(*anthropic_events("ok"))
    assert make_anthropic(fake).generate(req()).message == "ok"
    assert len(fake.requests) == 2


def test_reset_headers_give_retry_after_and_reset_at(fake):
    """providers.md §8.1: vendor reset headers, epoch seconds or a date; a past value is skipped."""
    future = int(time.time()) + 20
    fake.error(429, {"error": {"type": "rate_limit_error", "message": "slow down"}},
               headers={"anthropic-ratelimit-unified-reset": "Thu, 01 Jan 1970 00:00:00 GMT",
                        "anthropic-ratelimit-requests-reset": str(future)})
    with pytest.raises(ProviderError) as caught:
        make_anthropic(fake, retry_config={"timeout": 2000, "retries": 0}).generate(req())
    error = caught.value
    assert error.kind == "rate" and error.code == "rate_limit_error"
    assert error.reset_at_ms == future * 1000
    assert 15000 < error.retry_after_ms <= 20000


def test_openai_duration_reset_header_is_read(fake):
    """providers.md §8.1 (inferred): OpenAI's `x-ratelimit-reset-requests: 6m0s` is a span from now."""
    fake.error(429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
               headers={"x-ratelimit-reset-requests": "1m30s"})
    with pytest.raises(ProviderError) as caught:
        make_openai(fake).generate(req())
    assert caught.value.code == "rate_limit_exceeded"
    assert 89000 <= caught.value.retry_after_ms <= 90000 and len(fake.requests) == 1


def test_http_error_message_quotes_status_and_body(fake):
    """providers.md §8.1: "<provider> <status>: <first 500 chars of the body>", or the reason phrase."""
    fake.error(422, {"error": {"message": "x" * 800}})
    fake.error(418, "")
    with pytest.raises(ProviderError) as first:
        make_openai(fake).generate(req())
    with pytest.raises(ProviderError) as second:
        make_openai(fake).generate(req())
    assert str(first.value).startswith("openai 422: {") and len(str(first.value)) == len("openai 422: ") + 500
    assert first.value.kind == "invalid" and len(first.value.body) <= 2000
    assert str(second.value) == "openai 418 I'm a Teapot"


# Deadlines and cancellation (providers.md §3.7) ##############################

def test_a_stall_longer_than_the_idle_deadline_is_a_timeout_and_is_retried(fake):
    """providers.md §3.7: no byte before the headers within the idle deadline → kind timeout, retried."""
    fake.sse(gemini_frame(text="late", finish="STOP"), stall=0.6)
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    provider = make_gemini(fake, retry_config={"timeout": 200, "retries": 1})
    assert provider.generate(req()).message == "ok"
    assert len(fake.requests) == 2
    fake.sse(gemini_frame(text="late", finish="STOP"), stall=0.6)
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake, retry_config={"timeout": 200, "retries": 0}).generate(req())
    assert caught.value.kind == "timeout" and str(caught.value) == "gemini: stream went 0.2s without a byte"


def test_silence_mid_stream_is_a_timeout(fake):
    """providers.md §3.7: the idle deadline also bounds the gap between two reads."""
    fake.sse(gemini_frame(text="a"), gemini_frame(text="b", finish="STOP"), delay=0.6)
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake, retry_config={"timeout": 200, "retries": 0}).generate(req())
    assert caught.value.kind == "timeout" and str(caught.value) == "gemini: stream went 0.2s without a byte"


def test_bytes_without_events_hit_the_progress_deadline(fake):
    """providers.md §3.7: the progress deadline counts payloads, not bytes (keep-alives do not count).
    Its 300 s floor is shortened here through the private attribute, to keep the test fast."""
    fake.sse("", "", "", "", "", gemini_frame(text="late", finish="STOP"), delay=0.05, comments=True)
    provider = make_gemini(fake, retry_config={"timeout": 2000, "retries": 0})
    provider._progress_s = 0.12
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert caught.value.kind == "timeout" and "without a chunk" in str(caught.value)


def test_a_cut_stream_propagates_in_generate_stream_after_the_first_chunk(fake):
    """providers.md §1.6 rule 4: once a chunk reached the consumer, a failure is not retried."""
    fake.sse(gemini_frame(text="Olá"), gemini_frame(text=" mundo"), gemini_frame(finish="STOP"), drop_after=1)
    fake.sse(gemini_frame(text="never", finish="STOP"))
    stream = make_gemini(fake).generate_stream(req())
    assert next(stream).delta == "Olá"
    with pytest.raises(ProviderError) as caught:
        next(stream)
    assert caught.value.kind == "network" and len(fake.requests) == 1


def test_generate_stream_still_retries_failures_before_the_first_chunk(fake):
    """providers.md §1.6 rule 4 / §3.8: only a delivered chunk stops retries; an error before it is
    retried and walks to backup models in generate_stream too."""
    fake.error(503, {"error": {"message": "overloaded"}})
    fake.sse(gemini_frame(usage=(1, 0, 0)))
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    chunks = list(make_gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate_stream(req()))
    assert [c.delta for c in chunks] == ["ok", ""] and chunks[-1].metadata["model"] == "gemini-3.5-flash-lite"


def test_each_failed_attempt_and_each_backup_walk_logs_one_warning(fake, caplog):
    """providers.md §3.8: one warning per failed attempt and per fallback to a backup model."""
    fake.error(503, {"error": {"message": "overloaded"}})
    fake.error(503, {"error": {"message": "overloaded"}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    with caplog.at_level(logging.WARNING, logger="falai"):
        make_gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert sum("attempt" in m for m in messages) == 2 and sum("backup model" in m for m in messages) == 1


def test_a_cut_stream_is_retried_inside_generate(fake):
    """providers.md §3.8: inside `generate` nothing was delivered yet, so a mid-stream failure is retried."""
    fake.sse(gemini_frame(text="Olá"), gemini_frame(text=" mundo"), gemini_frame(finish="STOP"), drop_after=1)
    fake.sse(gemini_frame(text="Olá de novo", finish="STOP"))
    out = make_gemini(fake).generate(req())
    assert out.message == "Olá de novo" and len(fake.requests) == 2


def test_cancel_before_the_call_sends_nothing(fake):
    """providers.md §1.3: `cancel` is checked before each attempt; an aborted call raises kind aborted."""
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake).generate(req(cancel=cancel))
    assert caught.value.kind == "aborted" and str(caught.value) == "gemini: cancelled"
    assert fake.requests == []


def test_cancel_during_a_slow_stream_aborts_without_retry(fake, vendor):
    """providers.md §3.7: a cancel set mid-stream closes the response; aborted is never retried."""
    fake.sse(*vendor["text"]([f"p{i} " for i in range(20)]), delay=0.05)
    fake.sse(*vendor["text"](["never"]))
    cancel = threading.Event()
    threading.Timer(0.15, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        vendor["make"](fake, backup_models=["other"]).generate(req(cancel=cancel))
    assert caught.value.kind == "aborted" and len(fake.requests) == 1
    assert time.monotonic() - started < 0.8


def test_cancel_during_backoff_ends_the_wait(fake):
    """providers.md §3.8: the backoff sleep is interrupted when `cancel` is set."""
    fake.error(503, {"error": {"message": "overloaded"}}, headers={"Retry-After": "20"})
    cancel = threading.Event()
    provider = make_openai(fake, sleep=time.sleep, retry_config={"timeout": 2000, "retries": 2})
    threading.Timer(0.1, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        provider.generate(req(cancel=cancel))
    assert caught.value.kind == "aborted" and time.monotonic() - started < 2
    assert len(fake.requests) == 1


def test_abandoning_a_stream_closes_it_without_raising(fake):
    """providers.md §3.7: a consumer that stops iterating closes the response (generator finally)."""
    fake.sse(*[gemini_frame(text=f"{i} ") for i in range(50)], gemini_frame(finish="STOP"), delay=0.01)
    fake.sse(gemini_frame(text="next", finish="STOP"))
    provider = make_gemini(fake)
    stream = provider.generate_stream(req())
    next(stream)
    stream.close()
    assert provider.generate(req()).message == "next"


def test_network_failure_is_kind_network_and_retried(fake):
    """providers.md §8.3 rule 3: a refused connection is kind network, transient."""
    fake.close()
    sleeps = []
    provider = make_openai(fake, sleep=sleeps.append, retry_config={"timeout": 500, "retries": 2})
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert caught.value.kind == "network" and len(sleeps) == 2
    assert isinstance(caught.value.__cause__, requests.ConnectionError)
    fake.__init__()       # the fixture closes it again


# Construction (providers.md §3.9) ##############################################

@pytest.mark.parametrize("build, pattern", [
    (lambda: GeminiProvider(api_key="k", model=""), r"\[GeminiProvider\] model is empty: there is no default"),
    (lambda: GeminiProvider(api_key="k"),
     r'model is empty: there is no default. Pass one, e.g. model="gemini-3.8-flash"'),
    (lambda: GeminiProvider(model="gemini-3.8-flash"), r"\[GeminiProvider\] api_key is empty"),
    (lambda: AnthropicProvider(api_key="k"), r"\[AnthropicProvider\] model is empty"),
    (lambda: OpenAICompatibleProvider(api_key="k"), r"\[OpenAICompatibleProvider\] model is empty"),
    (lambda: GeminiProvider(api_key="", model="gemini-3.8-flash"),
     r'\[GeminiProvider\] api_key is empty.*GEMINI_API_KEY'),
    (lambda: GeminiProvider(api_key=None, model="gemini-3.8-flash"), r"api_key is empty"),
    (lambda: AnthropicProvider(api_key="  ", model="c"), r"\[AnthropicProvider\] api_key is empty"),
    (lambda: OpenAICompatibleProvider(model="m"), r'\[OpenAICompatibleProvider\] api_key is empty.*OPENAI_API_KEY'),
    (lambda: OpenAICompatibleProvider(name="openrouter", model="m"), r"api_key is empty"),
    (lambda: OpenAICompatibleProvider(name="ollama", api_key="", base_url="http://x", model="m"), r"api_key is empty"),
    (lambda: OpenAICompatibleProvider(name="ollama", model="m"), r'base_url is missing for name="ollama"'),
    (lambda: OpenAICompatibleProvider(api_key="k", model="m", structured_output="xml"), r"structured_output"),
    (lambda: OpenAICompatibleProvider(api_key="k", model="m", effort_dialect="x"), r"effort_dialect"),
    (lambda: OpenAICompatibleProvider(api_key="k", model="m", capabilities={"fast": True}), r"unknown flag"),
    (lambda: GeminiProvider(api_key="k", model="g", json_with_tools="maybe"), r"json_with_tools"),
    (lambda: GeminiProvider(api_key="k", model="g", schema_dialect="xml"), r"schema_dialect"),
    (lambda: GeminiProvider(api_key="k", model="g", config={"effort": "huge"}), r'config\["effort"\]'),
    (lambda: GeminiProvider(api_key="k", model="g", config={"maxTokens": 0}), r'config\["maxTokens"\]'),
    (lambda: GeminiProvider(api_key="k", model="g", retry_config={"retries": -1}), r'retry_config\["retries"\]'),
    (lambda: GeminiProvider(api_key="k", model="g", backup_models="g2"), r"backup_models must be a list"),
])
def test_bad_construction_input_raises_a_clear_value_error(build, pattern):
    """providers.md §3.9: construction errors are ValueError in the house format."""
    with pytest.raises(ValueError, match=pattern):
        build()


def test_local_servers_need_no_key_and_trailing_slashes_are_ignored(fake):
    """providers.md §5.1 / §3.9: api_key=None sends no Authorization; trailing slashes are ignored."""
    fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"))
    provider = OpenAICompatibleProvider(name="ollama", base_url=fake.url + "/v1///", api_key=None,
                                        model="llama3.3", sleep=lambda s: None)
    assert provider.generate(req()).message == "ok"
    assert fake.requests[0].path == "/v1/chat/completions"
    assert "authorization" not in fake.requests[0].headers


def test_retry_timeout_zero_means_the_default_sixty_seconds():
    """providers.md §3.9: `timeout` 0 or absent means 60000."""
    provider = GeminiProvider(api_key="k", model="g", retry_config={"timeout": 0, "retries": 0})
    assert provider.retry_config == {"timeout": 60000, "retries": 0, "deadline": 600000, "max_bytes": 33554432}
    assert provider._progress_s == 300


@pytest.mark.parametrize("bad", [
    {"history": [{"role": "assistant", "content": None, "tool_calls": [None]}]},
    {"tools": ["preco"]},
    {"schema": {"type": "object", "default": object()}},
])
def test_malformed_input_fails_as_an_invalid_provider_error(fake, vendor, bad):
    """providers.md §1.6 rule 3 (inferred): a history, tool list or schema that cannot be sent fails as
    ProviderError(kind="invalid") before any request, never as another exception."""
    with pytest.raises(ProviderError) as caught:
        vendor["make"](fake).generate(req(**bad))
    assert caught.value.kind == "invalid" and "cannot build the request" in str(caught.value)
    assert fake.requests == []


def test_an_unknown_effort_on_the_request_is_an_invalid_provider_error(fake):
    """providers.md §1.6 rule 3 (inferred): a bad per-call effort fails as ProviderError, sending nothing."""
    with pytest.raises(ProviderError) as caught:
        make_gemini(fake).generate(req(effort="extreme"))
    assert caught.value.kind == "invalid" and fake.requests == []


# Helpers (providers.md §1.8) ###################################################

def test_schema_prompt_wording():
    """providers.md §4.5: the schema-as-prompt text, schema compact with non-ASCII kept."""
    assert schema_prompt({"type": "object", "description": "ação"}) == (
        "Reply with one JSON object that matches the JSON Schema below, and nothing else: "
        "no text around it and no code fence.\n"
        "Inside a string value, write a line break as \\n; a raw line break there is invalid JSON.\n"
        '{"type":"object","description":"ação"}')


@pytest.mark.parametrize("raw, expected", [
    ("", {}),
    ("   ", {}),
    (None, {}),
    ('{"q": "x"}', {"q": "x"}),
    ("[1, 2]", {}),
    ('"text"', {}),
    ('{}{"q":"x"}', {"q": "x"}),
    ('{"a":1}{"b":2}', {"b": 2}),
    ('{"cidade": "Curitiba", "noites": 2, "obs": "vista pa', {"cidade": "Curitiba", "obs": "vista pa"}),
    ('{"a": "x", "b": {"c": "nested"}, "d": "y"', {"a": "x", "d": "y"}),
    ('{"a": "fim\\', {"a": "fim"}),
    ('{"a": "fim\\u00', {"a": "fim"}),
    ('{"a": "caf\\u00e9 ok", "b": tru', {"a": "café ok"}),
    ('{"nome": "Jos\\\\u00e9"}', {"nome": "José"}),
    ({"already": "a dict"}, {"already": "a dict"}),
])
def test_parse_tool_args_rules(raw, expected):
    """providers.md §3.4 rules 1-5: blank, JSON, suffix rescue, string salvage, literal \\uXXXX."""
    assert parse_tool_args(raw, "t") == expected


def test_parse_tool_args_warns_with_the_tool_name_and_field_count(caplog):
    """providers.md §3.4 rule 6: one warning when the raw string did not parse."""
    with caplog.at_level(logging.WARNING, logger="falai"):
        parse_tool_args('{"a": "x", "b": "y', "reservar")
        parse_tool_args('{"ok": true}', "reservar")
    assert len(caplog.records) == 1
    assert "reservar" in caplog.text and "2 field" in caplog.text


@pytest.mark.parametrize("schema, strict", [
    (SPEAK, True),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [], "additionalProperties": False},
     False),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, False),
    ({"type": "object"}, False),              # issue 7: strict mode refuses an object left open
    ({"type": "object", "additionalProperties": False}, True),
    ({"type": "array", "items": SPEAK}, True),
    ({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}, False),
    ({"anyOf": [SPEAK, {"type": "null"}]}, True),
    ({"anyOf": [SPEAK, {"type": "object", "properties": {"x": {}}}]}, False),
    ({"$defs": {"a": SPEAK}, "$ref": "#/$defs/a"}, False),
    ({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}, "required": ["a"],
      "additionalProperties": False}, False),
    ({"type": "object", "properties": {}, "additionalProperties": False,      # a $ref inside a list, too
      "x-variants": [{"type": "string"}, {"$ref": "#/$defs/a"}]}, False),
])
def test_is_strict_schema(schema, strict):
    """providers.md §5.4: strict only when OpenAI's strict mode accepts the schema as written."""
    assert is_strict_schema(schema) is strict


def test_to_gemini_openapi_schema_conversion_rules():
    """providers.md §4.5 (openapi dialect): type arrays → nullable; additionalProperties and other
    keywords dropped; enum values become strings, null dropped; an empty object becomes STRING. Issue 7
    item 7: `enum` only on STRING (Gemini's 400 "enum: only allowed for STRING type"); on another type the
    values go to the description."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object", "additionalProperties": False, "title": "Envelope",
        "properties": {
            "message": {"type": ["string", "null"], "description": "texto"},
            "porte": {"type": ["string", "null"], "enum": ["1-10", "11-50", None]},
            "quartos": {"type": "integer", "enum": [1, 2, 3], "minimum": 1, "default": 1},
            "extras": {"type": "object"},
            "tags": {"type": ["array", "null"], "items": {"type": "string", "const": "x"}, "maxItems": 3},
            "alt": {"anyOf": [{"type": "number"}, {"type": "null"}], "description": "alt"},
            "union": {"oneOf": [{"type": "boolean"}, {"type": "string"}]},
            "odd": {"type": "date"},
        },
        "required": ["message", "porte"],
    }
    assert to_gemini_openapi_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "message": {"type": "STRING", "nullable": True, "description": "texto"},
            "porte": {"type": "STRING", "nullable": True, "enum": ["1-10", "11-50"]},
            "quartos": {"type": "INTEGER", "minimum": 1, "description": "Allowed values: 1, 2, 3."},
            "extras": {"type": "STRING"},
            "tags": {"type": "ARRAY", "nullable": True, "maxItems": 3, "items": {"type": "STRING"}},
            "alt": {"type": "NUMBER", "nullable": True, "description": "alt"},
            "union": {"type": "BOOLEAN"},
            "odd": {"type": "STRING"},
        },
        "required": ["message", "porte"],
    }


def test_generation_is_the_falai_dataclass(fake):
    """providers.md §1.1: the seam's types are falai's own, not redefined."""
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    assert type(make_gemini(fake).generate(req())) is Generation


# The socket guard (providers.md §9.1 rule 3) #################################

def test_the_socket_guard_stops_a_provider_that_is_not_on_a_local_url(_block_non_loopback_sockets):
    """providers.md §9.1 rule 3: a connection to a non-loopback address fails at once (an IP literal
    from TEST-NET, so not even a DNS lookup happens)."""
    provider = GeminiProvider(api_key="k", model="gemini-3.8-flash", base_url="http://192.0.2.1",
                              sleep=lambda s: None)
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    assert "not loopback" in str(caught.value)
    assert _block_non_loopback_sockets == ["192.0.2.1:80"]
    _block_non_loopback_sockets.clear()


def test_the_socket_guard_lets_loopback_through(fake, _block_non_loopback_sockets):
    """providers.md §9.1 rule 3: 127.0.0.1 and localhost stay reachable."""
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    provider = GeminiProvider(api_key="k", model="gemini-3.8-flash",
                              base_url=fake.url.replace("127.0.0.1", "localhost"))
    assert provider.generate(req()).message == "ok" and _block_non_loopback_sockets == []


# Properties ###################################################################

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=5), crlf=st.booleans(), cuts=st.lists(st.integers(0, 400)))
def test_sse_framing_is_independent_of_how_bytes_are_cut(texts, crlf, cuts):
    """providers.md §3.7 rules 1-3, 6: whatever the read boundaries (inside a UTF-8 character or a
    \\r\\n pair), the same payloads come out, in order."""
    end = "\r\n" if crlf else "\n"
    payloads = [json.dumps({"t": t}, ensure_ascii=False) for t in texts]
    data = "".join(f"data: {p}{end}{end}" for p in payloads).encode()
    reader = _SseReader()
    out = []
    start = 0
    for cut in sorted(set(c for c in cuts if c < len(data))) + [len(data)]:
        out += reader.feed(data[start:cut])
        start = cut
    out += reader.finish()
    assert out == payloads


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(st.text(max_size=60), st.text(alphabet='{}[]":,\\u0123456789abc ', max_size=60)))
def test_parse_tool_args_never_raises_and_always_returns_a_dict(raw):
    """providers.md §3.4: the rules never raise."""
    assert isinstance(parse_tool_args(raw, "t"), dict)


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.text(alphabet="abcdefg", min_size=1, max_size=5),
                            st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\\"),
                                    max_size=12), max_size=4),
       cut=st.integers(0, 200))
def test_truncated_arguments_keep_only_true_string_prefixes(args, cut):
    """providers.md §3.4 rule 4: salvaged fields are the object's own keys, each value a prefix of the
    real value (whole when the pair was complete)."""
    text = json.dumps(args, ensure_ascii=False)[:cut]
    salvaged = parse_tool_args(text, "t")
    for key, value in salvaged.items():
        assert key in args and args[key].startswith(value)


def test_the_module_examples_run():
    """style.md: each public function documented with a short example; the examples must stay true."""
    import doctest

    import falai_providers
    result = doctest.testmod(falai_providers)
    assert result.attempted >= 8 and result.failed == 0
