"""Issue 7: what the live vendor APIs refuse or send, run against the strict fake server.

Each test here names the wrong behaviour it pins down; every one of them fails on the
providers as they were before issue 7 (checked by running this file against that
falai_providers.py) and passes now.
"""
import json
import logging
import time

import pytest
import requests

import falai_providers
from falai import GenerateRequest, ProviderError
from falai_providers import (AnthropicProvider, FallbackProvider, GeminiProvider, OpenAICompatibleProvider,
                             _SseReader, is_strict_schema)
from fake_model_server import (FakeModelServer, Rejected, anthropic_events, anthropic_refusal_events,
                               check_anthropic, check_chat, check_gemini, gemini_bare_lines, gemini_frame,
                               openai_frame, openai_refusal_frames)

KEY = "sk-live-0123456789abcdefXYZ"


def req(**kw):
    kw.setdefault("system", None)
    kw.setdefault("prompt", "PROMPT")
    kw.setdefault("history", [])
    return GenerateRequest(**kw)


def quiet(kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 2})
    return kw


def gemini(fake, **kw):
    kw.setdefault("model", "gemini-3.8-flash")
    kw.setdefault("api_key", KEY)
    return GeminiProvider(base_url=fake.url, **quiet(kw))


def openai(fake, **kw):
    kw.setdefault("model", "gpt-4.1-mini")
    kw.setdefault("api_key", KEY)
    fake.chat_dialect = kw.get("name", "openai") if kw.get("name", "openai") in ("openai", "openrouter") \
        else "generic"
    return OpenAICompatibleProvider(base_url=fake.url + "/v1", **quiet(kw))


def claude(fake, **kw):
    kw.setdefault("model", "claude-haiku-4-5")
    kw.setdefault("api_key", KEY)
    return AnthropicProvider(base_url=fake.url, **quiet(kw))


# Refusals and moderation (issue 7 item 5) #########################################################

def test_an_openai_streamed_refusal_is_content_after_one_request(fake):
    """delta.refusal (the SDK's recorded shape, content null) was ignored: "no content", kind overload,
    retried and walked to the backup. Now kind content, one request."""
    fake.sse(*openai_refusal_frames("I'm sorry, I can't help with that."))
    with pytest.raises(ProviderError) as caught:
        openai(fake, backup_models=["gpt-4.1-nano"]).generate(req())
    assert caught.value.kind == "content" and caught.value.code == "refusal"
    assert "I'm sorry, I can't help with that." in str(caught.value)
    assert len(fake.requests) == 1


def test_an_openai_whole_message_refusal_is_content(fake):
    """message.refusal in a whole chat.completion body (providers.md §3.7 rule 8)."""
    fake.json({"id": "c", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": None, "refusal": "I can't."},
         "finish_reason": "stop"}]})
    with pytest.raises(ProviderError) as caught:
        openai(fake).generate(req())
    assert caught.value.kind == "content" and len(fake.requests) == 1


def test_an_openrouter_moderation_403_is_content_not_auth(fake):
    """OpenRouter's moderation block (403, metadata.reasons / flagged_input) was read as auth, an hour's
    cooldown in a pool. It is content: no retry, and a FallbackProvider does not fall through."""
    fake.error(403, {"error": {"code": 403, "message": "Your chosen model requires moderation and your input "
                                                       "was flagged",
                               "metadata": {"reasons": ["violence"], "flagged_input": "...",
                                            "provider_name": "OpenAI", "model_slug": "openai/gpt-5.5"}}})
    backup = FakeModelServer()
    try:
        backup.sse(*anthropic_events("never"))
        pool = FallbackProvider([openai(fake, name="openrouter", model="openai/gpt-5.5"),
                                 claude(backup)])
        with pytest.raises(ProviderError) as caught:
            pool.generate(req())
        assert caught.value.kind == "content" and caught.value.code == "moderation"
        assert len(fake.requests) == 1 and backup.requests == []
        assert pool.status()[0]["retry_at_ms"] is None
    finally:
        backup.close()
        backup.replies.clear()


def test_an_anthropic_refusal_does_not_fall_through_a_pool(fake):
    """A refusal was kind overload, so a pool fell through to the next member and cooled this one."""
    fake.sse(*anthropic_refusal_events(), raw=True)
    other = FakeModelServer()
    try:
        pool = FallbackProvider([claude(fake, model="claude-opus-4-7"), gemini(other)])
        with pytest.raises(ProviderError) as caught:
            pool.generate(req())
        assert caught.value.kind == "content" and other.requests == [] and len(fake.requests) == 1
    finally:
        other.close()


# Gemini's bare-line framing (issue 7 item 7) ######################################################

def test_a_bare_candidate_line_then_a_bare_error_line_is_read(fake):
    """python-genai accepts bare JSON lines; its fixture has a candidate line and then an in-band error,
    split by single newlines. Both were dropped ("completed with no content"); now the error is read,
    with its kind (429 RESOURCE_EXHAUSTED → rate)."""
    fake.sse(gemini_bare_lines("Olá"), raw=True)
    with pytest.raises(ProviderError) as caught:
        gemini(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert caught.value.kind == "rate" and "Resource has been exhausted" in str(caught.value)


def test_bare_candidate_lines_alone_are_an_answer(fake):
    """Bare lines without data: prefixes and without blank lines between them."""
    lines = [json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}}]}) for t in
             ("Bom ", "dia")]
    fake.sse("\n".join(lines) + "\n" + gemini_frame(finish="STOP") + "\n", raw=True)
    assert gemini(fake).generate(req()).message == "Bom dia"


@pytest.mark.parametrize("split", [1, 3, 7, 1000])
def test_the_reader_frames_every_shape_however_the_bytes_are_split(split):
    """data: events (CRLF, comments, event: lines), a pretty-printed bare error with braces inside its
    strings, and a bare line: each payload whole, in order, for any split of the bytes."""
    stream = ('event: a\r\ndata: {"n":1}\r\n\r\n: keep-alive\n\ndata: {"n":\ndata: 2}\n\n'
              '{"n": 3, "text": "a } and a {"}\n'
              '{\n  "error": {\n    "message": "quote \\" and }",\n    "code": 500\n  }\n}\n'
              'data: [DONE]\n\n').encode()
    reader = _SseReader()
    payloads = []
    for i in range(0, len(stream), split):
        payloads += reader.feed(stream[i:i + split])
    payloads += reader.finish()
    assert [json.loads(p) for p in payloads] == [
        {"n": 1}, {"n": 2}, {"n": 3, "text": "a } and a {"},
        {"error": {"message": 'quote " and }', "code": 500}}]


def test_a_long_reply_split_into_tiny_reads_is_framed_whole():
    """The reader keeps an unfinished line as pieces and joins it once (linear in the reply size); the
    speed itself is measured in bench/, this checks the result."""
    text = "x" * 200_000
    data = ("data: " + json.dumps({"t": text}) + "\n\n").encode()
    reader = _SseReader()
    payloads = []
    for i in range(0, len(data), 64):
        payloads += reader.feed(data[i:i + 64])
    assert [json.loads(p)["t"] for p in payloads + reader.finish()] == [text]


# Waits (issue 7 item 6) ###########################################################################

def test_retry_after_ms_is_read_first(fake):
    """Both Stainless SDKs read retry-after-ms before retry-after; it was ignored."""
    fake.error(429, {"error": {"message": "Rate limit reached"}}, headers={"retry-after-ms": "250",
                                                                          "retry-after": "3"})
    fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"))
    sleeps = []
    assert openai(fake, sleep=sleeps.append).generate(req()).message == "ok"
    assert sleeps == [0.25]


def test_an_openai_429_waits_for_the_bucket_that_ran_out(fake):
    """A TPM 429: the requests bucket resets in 6 ms, the tokens bucket (remaining 0) in 300 ms. The wait
    followed the requests bucket."""
    fake.error(429, {"error": {"message": "Rate limit reached for tokens", "code": "rate_limit_exceeded"}},
               headers={"x-ratelimit-reset-requests": "6ms", "x-ratelimit-remaining-requests": "499",
                        "x-ratelimit-reset-tokens": "300ms", "x-ratelimit-remaining-tokens": "0"})
    with pytest.raises(ProviderError) as caught:
        openai(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert 250 <= caught.value.retry_after_ms <= 300
    assert caught.value.reset_at_ms - int(time.time() * 1000) > 200


def test_without_remaining_counts_the_later_reset_wins(fake):
    """When no header says which bucket ran out, the later reset: waiting less only earns another 429."""
    fake.error(429, {"error": {"message": "Rate limit reached"}},
               headers={"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m0s"})
    with pytest.raises(ProviderError) as caught:
        openai(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert 59_000 <= caught.value.retry_after_ms <= 60_000


def test_anthropic_input_token_reset_is_read(fake):
    """Anthropic's anthropic-ratelimit-input-tokens-reset (RFC 3339) was not read."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 20))
    fake.error(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
               headers={"anthropic-ratelimit-input-tokens-reset": at,
                        "anthropic-ratelimit-input-tokens-remaining": "0"})
    with pytest.raises(ProviderError) as caught:
        claude(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert caught.value.kind == "rate" and 15_000 < caught.value.retry_after_ms <= 20_000


# OpenAI strict schemas (issue 7) ##################################################################

def test_a_nested_object_without_properties_is_not_strict(fake):
    """Strict mode wants every object closed; a bare nested {"type": "object"} was called strict, and
    OpenAI answers that with a 400 (the strict fake does too)."""
    schema = {"type": "object", "additionalProperties": False, "required": ["message", "extra"],
              "properties": {"message": {"type": "string"}, "extra": {"type": "object"}}}
    assert is_strict_schema(schema) is False
    assert is_strict_schema({**schema, "properties": {**schema["properties"],
                                                      "extra": {"type": "object", "properties": {},
                                                                "additionalProperties": False}}}) is True
    fake.sse(openai_frame(content='{"message":"a","extra":{}}'), openai_frame(finish="stop"))
    out = openai(fake).generate(req(schema=schema))
    assert fake.requests[0].json["response_format"]["json_schema"]["strict"] is False
    assert out.structured == {"message": "a", "extra": {}}


# Sampling and effort on OpenAI models (issue 7) ###################################################

def test_gpt_5_gets_no_temperature_and_gpt_4_1_mini_no_reasoning_effort(fake):
    """gpt-5.x take only the default temperature; reasoning_effort is refused by non-reasoning models such
    as gpt-4.1-mini (the project's own example). Both were sent as configured."""
    fake.sse(openai_frame(content="a"), openai_frame(finish="stop"))
    fake.sse(openai_frame(content="b"), openai_frame(finish="stop"))
    openai(fake, model="gpt-5.5", config={"temperature": 0.3, "effort": "low"}).generate(req())
    openai(fake, model="gpt-4.1-mini", config={"temperature": 0.3, "effort": "low"}).generate(req())
    five, four = (r.json for r in fake.requests)
    assert "temperature" not in five and five["reasoning_effort"] == "low"
    assert four["temperature"] == 0.3 and "reasoning_effort" not in four


# Secrets (issue 7 item 8) #########################################################################

def test_a_key_with_a_trailing_newline_is_stripped(fake):
    """`cat key.txt` leaves a newline; requests refused the header and copied the key, escaped, into the
    error, which was retried and logged each time. Now the key is stripped, as python-genai does."""
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    provider = gemini(fake, api_key=f"  {KEY}\n")
    assert provider.generate(req()).message == "ok"
    assert fake.requests[0].headers["x-goog-api-key"] == KEY and KEY not in repr(provider)


@pytest.mark.parametrize("bad", [f"{KEY[:10]} {KEY[10:]}", f"{KEY[:10]}\n{KEY[10:]}", f"{KEY}\u00e9",
                                 f"{KEY[:5]}\x00{KEY[5:]}"])
def test_a_malformed_key_is_a_construction_error_that_never_shows_the_key(bad):
    """A key that still holds whitespace or a control or non-ASCII character after stripping cannot travel
    in a header: ValueError at construction, never a retried request. The message leaves the key out."""
    for build in (lambda: GeminiProvider(api_key=bad, model="gemini-3.8-flash"),
                  lambda: OpenAICompatibleProvider(api_key=bad, model="gpt-4.1-mini"),
                  lambda: AnthropicProvider(api_key=bad, model="claude-haiku-4-5")):
        with pytest.raises(ValueError, match="api_key contains whitespace") as caught:
            build()
        text = f"{caught.value!s} {caught.value!r}"
        assert KEY[:10] not in text and KEY[10:] not in text


def _forms(key):
    return [key, repr(key), json.dumps(key), requests.utils.quote(key, safe="")]


def test_no_error_text_body_repr_or_log_line_carries_the_key(fake, caplog):
    """A server that echoes the key (raw, quoted, JSON-escaped, URL-quoted) in its error body: the
    ProviderError's message, body and repr and every log line carry none of those forms."""
    key = KEY + "/+=\\'"
    echo = {"error": {"code": 400, "message": f"API key not valid: {key} {key!r} {json.dumps(key)} "
                                              f"{requests.utils.quote(key, safe='')}",
                      "status": "INVALID_ARGUMENT"}}
    fake.error(503, echo)
    fake.error(400, echo)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ProviderError) as caught:
        gemini(fake, api_key=key).generate(req())
    error = caught.value
    for text in (str(error), repr(error), error.body or "", caplog.text):
        for form in _forms(key):
            assert form not in text
    assert "[redacted]" in str(error)


def test_an_exception_chain_that_carries_the_key_is_dropped():
    """A transport failure whose text quotes the key (requests copies header values into its errors):
    the ProviderError keeps no __cause__ or __context__ that carries it."""
    class Session:
        def post(self, *args, **kwargs):
            raise requests.exceptions.InvalidHeader(f"Invalid header value b'x-api-key: {KEY!r}'")

    provider = AnthropicProvider(api_key=KEY, model="claude-haiku-4-5", session=Session(), sleep=lambda s: None,
                                 retry_config={"timeout": 1000, "retries": 0})
    with pytest.raises(ProviderError) as caught:
        provider.generate(req())
    error = caught.value
    assert error.__cause__ is None and error.__context__ is None
    for form in _forms(KEY):
        assert form not in f"{error!s} {error!r}"


# Deep replies (issue 7 item 9) ####################################################################

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("streaming", [False, True])
def test_a_reply_nested_past_the_recursion_limit_is_a_provider_error(fake, streaming):
    """A payload nested deeper than Python's recursion limit escaped as RecursionError."""
    fake.sse('{"candidates": ' + DEEP + "}")
    # A generous deadline: on a loaded machine a 3 s one once ended this call as a timeout instead.
    provider = gemini(fake, retry_config={"timeout": 30000, "retries": 0})
    with pytest.raises(ProviderError) as caught:
        list(provider.generate_stream(req())) if streaming else provider.generate(req())
    assert caught.value.kind == "overload" and "nested deeper" in str(caught.value), (caught.value.kind,
                                                                                     str(caught.value))


def test_a_deep_whole_json_body_and_a_deep_error_body_are_provider_errors(fake):
    """providers.md §3.7 rule 8 (a whole JSON body) and §8.1 (an error body): too deep is a ProviderError."""
    fake.replies.append({"status": 200, "body": '{"choices": ' + DEEP + "}", "type": "application/json"})
    fake.error(400, '{"error": ' + DEEP + "}")
    provider = openai(fake, retry_config={"timeout": 3000, "retries": 0})
    for _ in range(2):
        with pytest.raises(ProviderError):
            provider.generate(req())


def test_deep_tool_arguments_are_read_as_empty(fake):
    """Arguments nested past the limit are a broken call: read as {} (parse_tool_args never raises)."""
    args = '{"a":' * 3000 + "1" + "}" * 3000
    fake.sse(openai_frame(tool={"index": 0, "id": "c1", "function": {"name": "preco", "arguments": args}}),
             openai_frame(finish="tool_calls"))
    out = openai(fake).generate(req(tools=[{"name": "preco", "parameters": {"type": "object"}}]))
    assert out.tool_calls[0].arguments == {}


# The capability table itself ######################################################################

def test_unknown_models_get_nothing_optional_and_rows_cite_a_current_line():
    """Issue 7 item 1: a model the table does not know gets the conservative row (no thinking control,
    no sampling, no JSON mode with tools, no native schema)."""
    for vendor, model in (("gemini", "gemini-9-ultra"), ("anthropic", "claude-test"), ("openai", "gpt-test")):
        caps = falai_providers.model_caps(vendor, model)
        assert (caps.thinking, caps.sampling, caps.json_with_tools, caps.native_schema) == \
            (None, "none", False, False)
    model_caps = falai_providers.model_caps
    assert model_caps("openai", "openai/gpt-5.5").thinking == "reasoning"       # an OpenRouter id
    assert model_caps("openai", "anthropic/claude-sonnet-5").sampling == "none"
    assert model_caps("gemini", "gemini-3.5-flash-lite").levels[0] == "MINIMAL"


def test_a_provider_looks_each_models_row_up_once(monkeypatch):
    """issue 12: every request reads the model's row, so a provider keeps it per model; its model_caps
    overrides still apply (docs/guide/providers.md, Overriding a row)."""
    looked_up = []
    real = falai_providers.model_caps

    def counting(vendor, model, overrides=None, unknown=falai_providers.UNKNOWN_MODEL):
        looked_up.append(model)
        return real(vendor, model, overrides, unknown)

    monkeypatch.setattr(falai_providers, "model_caps", counting)
    provider = OpenAICompatibleProvider(api_key="k", model="my-model", base_url="http://127.0.0.1:9/v1",
                                        model_caps={"my-*": {"sampling": "any"}})
    rows = [provider._caps("openai", model) for model in ("my-model", "my-model", "other", "my-model")]
    assert looked_up == ["my-model", "other"]
    assert rows[0] is rows[1] is rows[3] and rows[0].sampling == "any" and rows[2].sampling == "none"


# The strict fake refuses what the vendors refuse (issue 7 item 10) ################################

GEMINI_OK = {"contents": [{"role": "user", "parts": [{"text": "oi"}]}]}
CHAT_OK = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "oi"}], "stream": True}
CLAUDE_OK = {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "oi"}]}
GEMINI_HEADERS = {"x-goog-api-key": "k"}
CHAT_HEADERS = {"authorization": "Bearer k"}
CLAUDE_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("model, body, message", [
    ("gemini-3.8-flash", {**GEMINI_OK, "generation_config": {}}, 'Unknown name "generation_config"'),
    ("gemini-3.8-flash", {**GEMINI_OK, "generationConfig": {"thinkingConfig": {"thinkingLevel": "MINIMAL"}}},
     "Thinking level MINIMAL is not supported for this model."),
    ("gemini-2.5-pro", {**GEMINI_OK, "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}},
     "thinking budget 0 is invalid"),
    ("gemini-2.5-flash", {**GEMINI_OK, "tools": [{"functionDeclarations": [{"name": "t"}]}],
                          "generationConfig": {"responseMimeType": "application/json"}},
     "Function calling with a response mime type"),
    ("gemini-3.8-flash", {**GEMINI_OK, "generationConfig": {"responseSchema": {
        "type": "OBJECT", "properties": {"n": {"type": "INTEGER", "enum": ["1"]}}}}},
     "enum: only allowed for STRING type"),
    ("gemini-3.8-flash", {"contents": [{"role": "user", "parts": [{"text": "oi"}]},
                                       {"role": "model", "parts": [{"functionCall": {"name": "t", "args": {}}}]},
                                       {"role": "user", "parts": [{"functionResponse": {"name": "t",
                                                                                        "response": {}}}]}]},
     "missing a thought_signature"),
])
def test_the_strict_fake_refuses_gemini_requests_the_api_refuses(model, body, message):
    with pytest.raises(Rejected, match=message.replace("(", r"\(")):
        check_gemini(model, GEMINI_HEADERS, {"alt": "sse"}, body)
    check_gemini(model, GEMINI_HEADERS, {"alt": "sse"}, GEMINI_OK)


@pytest.mark.parametrize("body, message", [
    ({**CHAT_OK, "thinking": {"type": "enabled"}}, "Unrecognized request argument supplied: thinking"),
    ({**CHAT_OK, "reasoning_effort": "low"}, "Unrecognized request argument supplied: reasoning_effort"),
    ({**CHAT_OK, "model": "gpt-5.5", "temperature": 0.3}, "Only the default \\(1\\) value is supported"),
    ({**CHAT_OK, "model": "gpt-5", "reasoning_effort": "none"}, "does not support 'none'"),
    ({**CHAT_OK, "messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]}, "must be a response"),
    ({**CHAT_OK, "response_format": {"type": "json_object"}}, "must contain the word 'json'"),
    ({**CHAT_OK, "response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "object"}},
                                                "required": ["a"], "additionalProperties": False}}}},
     "'additionalProperties' is required to be supplied and to be false"),
])
def test_the_strict_fake_refuses_openai_requests_the_api_refuses(body, message):
    with pytest.raises(Rejected, match=message):
        check_chat("openai", CHAT_HEADERS, body)
    check_chat("openai", CHAT_HEADERS, CHAT_OK)


@pytest.mark.parametrize("body, message", [
    ({**CLAUDE_OK, "temperature": 0.3, "top_p": 0.9}, "cannot both be specified"),
    ({**CLAUDE_OK, "model": "claude-sonnet-5", "temperature": 0.3}, "deprecated for this model"),
    ({**CLAUDE_OK, "model": "claude-sonnet-5", "thinking": {"type": "enabled", "budget_tokens": 2048},
      "max_tokens": 4096}, "thinking.type.enabled\" is not supported"),
    ({**CLAUDE_OK, "max_tokens": 1100, "thinking": {"type": "enabled", "budget_tokens": 880}},
     "greater than or equal to 1024"),
    ({**CLAUDE_OK, "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 1024},
     "must be greater than `thinking.budget_tokens`"),
    ({**CLAUDE_OK, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}]},
     "Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
    ({**CLAUDE_OK, "reasoning": {}}, "reasoning: Extra inputs are not permitted"),
    ({**CLAUDE_OK, "model": "claude-sonnet-4-0", "output_config": {
        "format": {"type": "json_schema", "schema": {"type": "object"}}}}, "structured outputs are not supported"),
])
def test_the_strict_fake_refuses_anthropic_requests_the_api_refuses(body, message):
    with pytest.raises(Rejected, match=message):
        check_anthropic(CLAUDE_HEADERS, body)
    check_anthropic(CLAUDE_HEADERS, CLAUDE_OK)


def test_a_refused_request_gets_the_vendor_body_and_fails_the_test_unless_taken():
    """The fake answers a refused request with the vendor's own 400 body instead of the script, and its
    close() fails a test that did not take the rejections."""
    fake = FakeModelServer()
    fake.sse(gemini_frame(text="never", finish="STOP"))
    response = requests.post(fake.url + "/v1beta/models/gemini-3.8-flash:streamGenerateContent?alt=sse",
                             headers={"x-goog-api-key": "k"}, json={"contents": [], "foo": 1})
    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert len(fake.replies) == 1                       # the scripted reply was not used
    with pytest.raises(AssertionError, match="refused request"):
        fake.close()


def test_the_providers_page_lists_every_row_of_the_table():
    """docs/guide/providers.md renders the capability table; a row added in code must be added there."""
    import pathlib
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "providers.md").read_text(encoding="utf-8")
    missing = [pattern for rows in falai_providers.MODEL_TABLE.values() for pattern, _ in rows
               if f"`{pattern}`" not in page]
    assert missing == []


@pytest.mark.parametrize("vendor, payload", [
    ("gemini", {"candidates": ["not a candidate"]}),
    ("gemini", {"candidates": [{"content": {"parts": ["not a part"]}}]}),
    ("openai", {"choices": [{"delta": "not a delta"}]}),
    ("openai", {"choices": [{"delta": {"tool_calls": ["not a call"]}}]}),
    ("anthropic", {"type": "content_block_start", "content_block": "not a block"}),
    ("anthropic", {"type": "message_delta", "delta": "not a delta"}),
])
def test_a_payload_of_the_wrong_shape_is_an_overload_provider_error(fake, vendor, payload):
    """Issue 7 item 9: a malformed body is a ProviderError with its kind (an upstream fault: overload,
    retried), never an AttributeError or TypeError out of generate()."""
    for _ in range(3):
        fake.sse(json.dumps(payload))
    build = {"gemini": gemini, "openai": openai, "anthropic": claude}[vendor]
    with pytest.raises(ProviderError) as caught:
        build(fake).generate(req())
    assert caught.value.kind == "overload" and "unreadable reply payload" in str(caught.value)
    assert len(fake.requests) == 3
