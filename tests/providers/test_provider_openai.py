"""OpenAICompatibleProvider against the local fake server (providers.md §5, §9.5 "OpenAI-compatible")."""
import json

import pytest

from conftest import req
from falai import ProviderError, ToolCallRequest
from falai_providers import OpenAICompatibleProvider, schema_prompt
from fake_model_server import openai_frame

SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}
LOOSE = {"type": "object", "properties": {"message": {"type": "string"}, "nota": {"type": "string"}},
         "required": ["message"]}
PRECO = {"name": "preco", "description": "Preço da diária.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def openai(fake, **kw):
    kw.setdefault("api_key", "test-key")
    kw.setdefault("model", "gpt-4.1-mini")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    name = kw.get("name", "openai")
    fake.chat_dialect = name if name in ("openai", "openrouter", "deepseek") else "generic"   # the strict rules
    return OpenAICompatibleProvider(base_url=fake.url + "/v1", **kw)


def ok(fake, text="ok"):
    fake.sse(openai_frame(content=text), openai_frame(finish="stop"), "[DONE]")


# Request (§5.2-§5.5) ##############################################################

def test_path_headers_and_base_body(fake):
    """providers.md §5.2: POST {base_url}/chat/completions with a Bearer key, stream and stream_options."""
    ok(fake)
    openai(fake).generate(req(system="SYS"))
    sent = fake.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.query == {}
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json == {"model": "gpt-4.1-mini", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "system", "content": "SYS"}, {"role": "user", "content": "PROMPT"}],
                         "prompt_cache_key": sent.json["prompt_cache_key"],
                         "max_completion_tokens": 4096}      # the default cap of a call with no kind
    assert sent.json["prompt_cache_key"].startswith("falai-")


def test_include_usage_false_drops_stream_options(fake):
    """providers.md §5.1: include_usage=False for a server that rejects the field."""
    ok(fake)
    openai(fake, include_usage=False).generate(req())
    assert "stream_options" not in fake.requests[0].json


HISTORY = [
    {"role": "user", "content": "oi", "name": "Ana"},
    {"role": "assistant", "content": None, "reasoning": "pensei",
     "reasoningDetails": [{"type": "reasoning.text", "text": "pensei"},
                          {"type": "thinking", "thinking": "pensei", "signature": "SIG-ANTHROPIC"}],
     "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "Curitiba"}}]},
    {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "420"},
]


def test_reasoning_is_replayed_only_where_the_vendor_takes_it(fake):
    """Review O7 / issue 7 item 4: OpenAI's own endpoint refuses extra message keys, so no reasoning goes
    back to it; DeepSeek gets reasoning_content; OpenRouter gets reasoning_details; Anthropic's signed
    thinking blocks never go to another vendor."""
    for name in ("openai", "deepseek", "openrouter"):
        ok(fake)
        openai(fake, name=name).generate(req(history=HISTORY))
    assistants = [next(m for m in r.json["messages"] if m["role"] == "assistant") for r in fake.requests]
    assert "reasoning_content" not in assistants[0] and "reasoning_details" not in assistants[0]
    assert assistants[1]["reasoning_content"] == "pensei"
    assert assistants[2]["reasoning_details"] == [{"type": "reasoning.text", "text": "pensei"}]
    assert all("SIG-ANTHROPIC" not in r.raw.decode() for r in fake.requests)


def test_messages_map_history_in_place(fake):
    """providers.md §2.4 / §5.3: system items stay in place; assistant content is "" (not null) beside
    tool_calls with JSON-string arguments; reasoning is replayed (here to a gateway); tool messages carry
    tool_call_id."""
    ok(fake)
    history = [
        {"role": "user", "content": "oi", "name": "Ana"},
        {"role": "system", "content": "[Conversation Summary]\nresumo"},
        {"role": "assistant", "content": None, "reasoning": "pensei", "reasoningDetails": [{"type": "r", "t": 1}],
         "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "Curitiba"}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": {"precoNoite": 420}},
        {"role": "assistant", "content": "Custa R$ 420."},
    ]
    openai(fake, name="gateway").generate(req(system="SYS", history=history))
    assert fake.requests[0].json["messages"] == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "oi"},
        {"role": "system", "content": "[Conversation Summary]\nresumo"},
        {"role": "assistant", "content": "", "reasoning_content": "pensei",
         "reasoning_details": [{"type": "r", "t": 1}],
         "tool_calls": [{"id": "call-0-0", "type": "function",
                         "function": {"name": "preco", "arguments": '{"cidade":"Curitiba"}'}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "content": '{"precoNoite":420}'},
        {"role": "assistant", "content": "Custa R$ 420."},
        {"role": "user", "content": "PROMPT"},
    ]


def test_tools_are_declared_as_functions(fake):
    """providers.md §5.2: tools as [{"type": "function", "function": {name, description, parameters}}]."""
    ok(fake)
    openai(fake).generate(req(tools=[PRECO, {"id": "agora"}]))
    assert fake.requests[0].json["tools"] == [
        {"type": "function", "function": PRECO},
        {"type": "function", "function": {"name": "agora", "description": "", "parameters": {"type": "object"}}}]


def test_json_schema_mode_is_strict_when_the_schema_allows_it(fake):
    """providers.md §5.4 rule 2: response_format json_schema with the schema name; strict follows
    is_strict_schema; no schema text in the messages."""
    ok(fake, '{"message":"a"}')
    ok(fake, '{"message":"b"}')
    provider = openai(fake)
    provider.generate(req(schema=SPEAK, schema_name="speak"))
    provider.generate(req(schema=LOOSE))
    first, second = (r.json for r in fake.requests)
    assert first["response_format"] == {"type": "json_schema",
                                        "json_schema": {"name": "speak", "schema": SPEAK, "strict": True}}
    assert second["response_format"]["json_schema"] == {"name": "structured_output", "schema": LOOSE,
                                                        "strict": False}
    assert [m["role"] for m in first["messages"]] == ["user"]


def test_json_object_mode_appends_the_schema_prompt_last(fake):
    """providers.md §5.4 rule 3: {"type": "json_object"} plus the schema prompt as the final system
    message, after the user prompt (prefix caches)."""
    ok(fake, '{"message":"a"}')
    openai(fake, structured_output="json_object").generate(req(system="SYS", schema=SPEAK))
    body = fake.requests[0].json
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "PROMPT"},
                                {"role": "system", "content": schema_prompt(SPEAK)}]


def test_json_with_tools_prompt_sends_no_response_format(fake):
    """providers.md §5.4 rule 1: with tools and json_with_tools="prompt", no response_format at all and
    the schema prompt last; without tools the schema is enforced as usual."""
    ok(fake, '{"message":"a"}')
    ok(fake, '{"message":"b"}')
    provider = openai(fake, json_with_tools="prompt")
    provider.generate(req(schema=SPEAK, tools=[PRECO]))
    provider.generate(req(schema=SPEAK))
    with_tools, without = (r.json for r in fake.requests)
    assert "response_format" not in with_tools
    assert with_tools["messages"][-1] == {"role": "system", "content": schema_prompt(SPEAK)}
    assert without["response_format"]["type"] == "json_schema" and len(without["messages"]) == 1


def test_json_schema_with_tools_by_default_sends_both(fake):
    """providers.md §5.4: json_with_tools="response_format" (default) keeps response_format beside tools."""
    ok(fake, '{"message":"a"}')
    openai(fake).generate(req(schema=SPEAK, tools=[PRECO]))
    body = fake.requests[0].json
    assert body["response_format"]["type"] == "json_schema" and body["tools"][0]["function"]["name"] == "preco"


def test_max_completion_tokens_for_openai_and_max_tokens_elsewhere(fake):
    """providers.md §5.2: OpenAI's reasoning models refuse max_tokens on chat completions."""
    ok(fake)
    ok(fake)
    openai(fake, config={"maxTokens": 500}).generate(req())
    openai(fake, name="vllm", config={"maxTokens": 500}).generate(req(max_output_tokens=64))
    first, second = (r.json for r in fake.requests)
    assert first["max_completion_tokens"] == 500 and "max_tokens" not in first
    assert second["max_tokens"] == 64 and "max_completion_tokens" not in second


def test_sampling_options_are_renamed(fake):
    """providers.md §5.2: temperature, top_p from topP, stop from a non-empty stopSequences."""
    ok(fake)
    ok(fake)
    openai(fake, config={"temperature": 0.2, "topP": 0.5, "stopSequences": ["###"]}).generate(req())
    openai(fake, config={"stopSequences": []}).generate(req())
    first, second = (r.json for r in fake.requests)
    assert (first["temperature"], first["top_p"], first["stop"]) == (0.2, 0.5, ["###"])
    assert "stop" not in second and "temperature" not in second


@pytest.mark.parametrize("dialect, model, effort, fields", [
    ("openai", "gpt-5.5", None, {}),
    ("openai", "gpt-5.5", "none", {"reasoning_effort": "none"}),
    ("openai", "gpt-5.5", "low", {"reasoning_effort": "low"}),
    ("openai", "gpt-5.5", "medium", {"reasoning_effort": "medium"}),
    ("openai", "gpt-5.5", "high", {"reasoning_effort": "high"}),
    ("openai", "gpt-5.5", "max", {"reasoning_effort": "xhigh"}),
    ("openai", "gpt-5.1", "max", {"reasoning_effort": "high"}),
    ("openai", "gpt-5", "none", {"reasoning_effort": "minimal"}),       # gpt-5 has no "none"
    ("openai", "gpt-5-mini", "low", {"reasoning_effort": "low"}),
    ("openai", "o3", "none", {"reasoning_effort": "low"}),              # o-series start at low
    ("openai", "gpt-4.1-mini", "high", {}),                             # issue 7: not a reasoning model
    ("openai", "gpt-9", "high", {}),                                    # unknown: nothing optional
    ("openrouter", "openai/gpt-5.5", "none", {"reasoning": {"effort": "none"}}),
    ("openrouter", "openai/gpt-5.5", "medium", {"reasoning": {"effort": "medium"}}),
    ("openrouter", "openai/gpt-5.5", "max", {"reasoning": {"effort": "xhigh"}}),
    ("deepseek", "deepseek-chat", "none", {"thinking": {"type": "disabled"}}),
    ("deepseek", "deepseek-chat", "low", {"thinking": {"type": "enabled"}, "reasoning_effort": "low"}),
    ("deepseek", "deepseek-chat", "medium", {"thinking": {"type": "enabled"}, "reasoning_effort": "medium"}),
    ("deepseek", "deepseek-chat", "high", {"thinking": {"type": "enabled"}}),
    ("deepseek", "deepseek-chat", "max", {"thinking": {"type": "enabled"}}),
    ("off", "gpt-5.5", "high", {}),
])
def test_effort_fields_per_dialect(fake, dialect, model, effort, fields):
    """providers.md §5.5 and the capability table (issue 7): how effort is spelled per dialect; absent
    effort sends nothing; in the openai dialect only a level the model accepts (the strict fake refuses
    reasoning_effort on a non-reasoning model, as OpenAI does)."""
    ok(fake)
    name = dialect if dialect in ("openrouter", "deepseek") else "openai"
    openai(fake, name=name, model=model, effort_dialect=dialect).generate(req(effort=effort))
    body = fake.requests[0].json
    sent = {k: body[k] for k in ("reasoning_effort", "reasoning", "thinking") if k in body}
    assert sent == fields


def test_effort_dialect_follows_the_name(fake):
    """providers.md §5.1: effort_dialect defaults from name (openrouter, deepseek, else openai)."""
    for name, model in (("openrouter", "openai/gpt-5.5"), ("deepseek", "deepseek-chat"),
                        ("groq", "llama-3.3-70b-versatile")):
        ok(fake)
        openai(fake, name=name, model=model).generate(req(effort="none"))
    bodies = [r.json for r in fake.requests]
    assert bodies[0]["reasoning"] == {"effort": "none"}
    assert bodies[1]["thinking"] == {"type": "disabled"}
    assert bodies[2]["reasoning_effort"] == "none"


def test_openrouter_provider_order_and_ranking_headers(fake):
    """providers.md §5.1-§5.2: provider_order → "provider", site_url/site_name → HTTP-Referer/X-Title;
    organization → OpenAI-Organization."""
    ok(fake)
    openai(fake, name="openrouter", provider_order=["anthropic"], site_url="https://pousada.example",
           site_name="Pousada Sol", organization="org-1").generate(req())
    sent = fake.requests[0]
    assert sent.json["provider"] == {"order": ["anthropic"], "allow_fallbacks": True}
    assert sent.headers["http-referer"] == "https://pousada.example"
    assert sent.headers["x-title"] == "Pousada Sol"
    assert sent.headers["openai-organization"] == "org-1"


def test_deepseek_defaults_to_json_object(fake):
    """providers.md §5.1: DeepSeek answers json_schema with a 400, so its preset uses json_object."""
    ok(fake, '{"message":"oi"}')
    provider = openai(fake, name="deepseek")
    provider.generate(req(schema=SPEAK))
    assert fake.requests[0].json["response_format"] == {"type": "json_object"}
    assert provider.capabilities.supports_native_json_schema is False


def test_presets_base_urls_and_capabilities():
    """providers.md §1.5 / §5.1: preset URLs; prompt caching for openai/openrouter/deepseek; overrides merge."""
    assert OpenAICompatibleProvider(api_key="k", model="m").base_url == "https://api.openai.com/v1"
    assert OpenAICompatibleProvider(name="openrouter", api_key="k", model="m").base_url == \
        "https://openrouter.ai/api/v1"
    deepseek = OpenAICompatibleProvider(name="deepseek", api_key="k", model="m")
    assert deepseek.base_url == "https://api.deepseek.com" and deepseek.capabilities.supports_prompt_caching
    local = OpenAICompatibleProvider(name="llamacpp", base_url="http://localhost:8080/v1", model="m",
                                     capabilities={"supports_streaming_tool_calls": False})
    assert local.capabilities.supports_prompt_caching is False
    assert local.capabilities.supports_native_json_schema is True
    assert local.capabilities.supports_streaming_tool_calls is False


# Parsing (§5.6) ##################################################################

def test_streamed_text_usage_with_cached_tokens_and_done(fake):
    """providers.md §5.6: content deltas, the usage payload (empty choices), cached tokens from
    prompt_tokens_details, [DONE] skipped."""
    fake.sse(openai_frame(content='{"message":"Ol'), openai_frame(content='á"}'), openai_frame(finish="stop"),
             openai_frame(usage={"prompt_tokens": 900, "completion_tokens": 12,
                                 "prompt_tokens_details": {"cached_tokens": 768}}), "[DONE]")
    chunks = list(openai(fake).generate_stream(req(schema=SPEAK)))
    assert [c.delta for c in chunks] == ['{"message":"Ol', 'á"}', ""]
    last = chunks[-1]
    assert last.structured == {"message": "Olá"}
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.cached_input_tokens) == (900, 12, 768)
    assert last.metadata == {"provider": "openai", "model": "gpt-4.1-mini", "finishReason": "stop",
                             "vendorFinishReason": "stop", "tokensUsed": 912}


def test_deepseek_cache_hit_tokens_are_read(fake):
    """providers.md §5.6 rule 2: DeepSeek's prompt_cache_hit_tokens spelling."""
    fake.sse(openai_frame(content="ok", finish="stop",
                          usage={"prompt_tokens": 50, "completion_tokens": 2, "prompt_cache_hit_tokens": 32}))
    out = openai(fake, name="deepseek").generate(req())
    assert out.usage.cached_input_tokens == 32 and out.usage.prompt_tokens == 50


def test_tool_call_fragments_are_assembled_across_frames(fake):
    """providers.md §3.3 / §5.6: id and name once, argument fragments appended; finish tool_calls."""
    fake.sse(openai_frame(tool={"index": 0, "id": "call_abc", "type": "function",
                                "function": {"name": "preco", "arguments": ""}}),
             openai_frame(tool={"index": 0, "function": {"arguments": '{"cid'}}),
             openai_frame(tool={"index": 0, "function": {"arguments": 'ade": "Curi'}}),
             openai_frame(tool={"index": 0, "function": {"arguments": 'tiba"}'}}),
             openai_frame(finish="tool_calls"), "[DONE]")
    out = openai(fake).generate(req(tools=[PRECO]))
    assert out.tool_calls == [ToolCallRequest(id="call_abc", name="preco", arguments={"cidade": "Curitiba"})]
    assert out.metadata["finishReason"] == "tool_calls"


def test_parallel_calls_are_ordered_by_index(fake):
    """providers.md §1.4: tool_calls ordered by the vendor's index, whatever the arrival order."""
    fake.sse(openai_frame(tool={"index": 1, "id": "c2", "function": {"name": "preco", "arguments": '{"cidade":"B"}'}}),
             openai_frame(tool={"index": 0, "id": "c1", "function": {"name": "preco", "arguments": '{"cidade":"A"}'}}),
             openai_frame(finish="tool_calls"))
    out = openai(fake).generate(req(tools=[PRECO]))
    assert [(c.id, c.arguments["cidade"]) for c in out.tool_calls] == [("c1", "A"), ("c2", "B")]


def test_a_missing_index_falls_back_to_the_position(fake):
    """providers.md §5.6 rule 4: a gateway that omits `index` gets the call's position in the list."""
    fake.sse(openai_frame(tool=[{"id": "c1", "function": {"name": "preco", "arguments": '{"cidade":"A"}'}},
                                {"id": "c2", "function": {"name": "preco", "arguments": '{"cidade":"B"}'}}]),
             openai_frame(finish="tool_calls"))
    out = openai(fake).generate(req(tools=[PRECO]))
    assert [c.id for c in out.tool_calls] == ["c1", "c2"]


def test_nameless_calls_are_dropped_and_missing_ids_synthesized(fake):
    """providers.md §1.4 / §3.4: calls without a name are dropped; no id → call_<index>."""
    fake.sse(openai_frame(tool=[{"index": 0, "function": {"name": "preco", "arguments": "{}"}},
                                {"index": 1, "id": "x", "function": {"arguments": '{"a":1}'}}]),
             openai_frame(finish="tool_calls"))
    out = openai(fake).generate(req(tools=[PRECO]))
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [("call_0", "preco", {})]


def test_reasoning_content_and_reasoning_details_are_reported(fake):
    """providers.md §1.4 / §5.6 rule 4: reasoning_content (DeepSeek) or reasoning (OpenRouter) text is
    concatenated; the last reasoning_details list wins."""
    fake.sse(openai_frame(reasoning_content="Pen"), openai_frame(reasoning="sando", reasoning_details=[{"n": 1}]),
             openai_frame(reasoning_details=[{"n": 2}]), openai_frame(content="Oi"), openai_frame(finish="stop"))
    out = openai(fake).generate(req())
    assert out.reasoning == "Pensando" and out.reasoning_details == [{"n": 2}] and out.message == "Oi"


@pytest.mark.parametrize("vendor, normalized", [
    ("length", "length"), ("content_filter", "content_filter"), ("function_call", "tool_calls")])
def test_finish_reasons(fake, vendor, normalized):
    """providers.md §5.6 rule 5."""
    fake.sse(openai_frame(content="x"), openai_frame(finish=vendor))
    assert openai(fake).generate(req()).metadata["finishReason"] == normalized


def test_an_unknown_finish_reason_is_not_a_finish_event(fake):
    """providers.md §5.6 rule 5: anything else is not a finish event."""
    fake.sse(openai_frame(content="x"), openai_frame(finish="eos_token"))
    metadata = openai(fake).generate(req()).metadata
    assert "finishReason" not in metadata and "vendorFinishReason" not in metadata


def test_an_in_band_gateway_error_is_classified(fake):
    """providers.md §5.6 rule 1: a numeric code on gateways is the status; a slug becomes the code."""
    fake.sse(openai_frame(content="Ol"), json.dumps({"error": {"code": 502, "message": "Upstream error"}}))
    fake.sse(json.dumps({"error": {"code": "rate_limit_exceeded", "message": "Rate limit reached for requests"}}))
    with pytest.raises(ProviderError) as first:
        openai(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    with pytest.raises(ProviderError) as second:
        openai(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert (first.value.kind, first.value.status) == ("overload", 502)
    assert str(first.value) == "openai stream error: Upstream error"
    assert (second.value.kind, second.value.status, second.value.code) == ("rate", None, "rate_limit_exceeded")


# HTTP errors (§8.3) ###############################################################

@pytest.mark.parametrize("status, error, kind", [
    (401, {"message": "Incorrect API key provided: sk-xxx.", "type": "invalid_request_error",
           "code": "invalid_api_key"}, "auth"),
    (429, {"message": "You exceeded your current quota, please check your plan and billing details.",
           "type": "insufficient_quota", "code": "insufficient_quota"}, "quota"),
    (400, {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error",
           "code": "context_length_exceeded"}, "context"),
    (400, {"message": "Invalid schema for response_format", "type": "invalid_request_error"}, "invalid"),
    (402, {"message": "Insufficient credits", "code": 402}, "quota"),
])
def test_final_http_errors_are_classified_and_not_retried(fake, status, error, kind):
    """providers.md §8.3: body patterns outrank the status for 4xx; none of these is retried or walks."""
    fake.error(status, {"error": error})
    with pytest.raises(ProviderError) as caught:
        openai(fake, backup_models=["gpt-other"]).generate(req())
    assert caught.value.kind == kind and caught.value.status == status and len(fake.requests) == 1


def test_error_code_is_the_openai_slug(fake):
    """providers.md §8.1: `code` carries OpenAI's slug."""
    fake.error(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
    with pytest.raises(ProviderError) as caught:
        openai(fake).generate(req())
    assert caught.value.code == "invalid_api_key" and caught.value.provider == "openai"


def test_model_not_found_walks_to_the_backup_model(fake):
    """providers.md §3.8: kind model walks; each attempt sends its own model id."""
    fake.error(404, {"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.",
                               "code": "model_not_found"}})
    ok(fake)
    out = openai(fake, model="gpt-9", backup_models=["gpt-4.1-mini"]).generate(req())
    assert [r.json["model"] for r in fake.requests] == ["gpt-9", "gpt-4.1-mini"]
    assert out.metadata["model"] == "gpt-4.1-mini"


def test_a_rate_limit_retries_then_walks(fake):
    """providers.md §3.8: rate is retried on the model, then walks to the backup."""
    for _ in range(2):
        fake.error(429, {"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}})
    ok(fake)
    sleeps = []
    out = openai(fake, backup_models=["gpt-4.1-nano"], sleep=sleeps.append).generate(req())
    assert [r.json["model"] for r in fake.requests] == ["gpt-4.1-mini", "gpt-4.1-mini", "gpt-4.1-nano"]
    assert len(sleeps) == 1 and out.message == "ok"


def test_the_understand_call_thinks_as_little_as_the_model_allows(fake):
    """Issue 7 item 2: with no effort set, an understand call gets the lowest reasoning_effort the model
    accepts (gpt-5: minimal, gpt-5.x: none, o-series: low); a model that does not reason gets nothing,
    nor does a call that is not understand."""
    cases = [("gpt-5", "understand", "minimal"), ("gpt-5.5", "understand", "none"), ("o4-mini", "understand", "low"),
             ("gpt-4.1-mini", "understand", None), ("gpt-5.5", "speak", None)]
    for model, call, _ in cases:
        ok(fake, '{"flows":{}}')
        openai(fake, model=model).generate(req(schema={"type": "object", "additionalProperties": False},
                                               schema_name=call))
    assert [r.json.get("reasoning_effort") for r in fake.requests] == [effort for _, _, effort in cases]
    # A local server's unknown model, and the OpenRouter and DeepSeek dialects, get nothing by default.
    for name, model in (("ollama", "llama3.3"), ("openrouter", "openai/gpt-5.5"), ("deepseek", "deepseek-chat")):
        ok(fake, '{"flows":{}}')
        openai(fake, name=name, model=model).generate(req(schema={"type": "object", "additionalProperties": False},
                                                          schema_name="understand"))
    assert all(not {"reasoning_effort", "reasoning", "thinking"} & set(r.json) for r in fake.requests[5:])


def test_sampling_is_sent_only_where_the_model_takes_it(fake, caplog):
    """Issue 7: gpt-5.x and the o-series accept only the default temperature (400 otherwise); the value is
    left out, with one warning naming the model and the override."""
    ok(fake)
    ok(fake)
    provider = openai(fake, model="o3", config={"temperature": 0.3, "topP": 0.5})
    provider.generate(req())
    provider.generate(req())
    assert all("temperature" not in r.json and "top_p" not in r.json for r in fake.requests)
    warnings = [r.getMessage() for r in caplog.records if "temperature" in r.getMessage()]
    assert len(warnings) == 1 and "o3" in warnings[0] and 'model_caps={"o3": {"sampling": "any"}}' in warnings[0]
