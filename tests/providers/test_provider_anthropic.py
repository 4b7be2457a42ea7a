"""AnthropicProvider against the local fake server (providers.md §6, §9.5 "Anthropic")."""
import json

import pytest

from conftest import req
from falai import ProviderError, ToolCallRequest
from falai_providers import AnthropicProvider, schema_prompt
from fake_model_server import (anthropic_events, anthropic_refusal_events, anthropic_thinking_tool_events,
                               anthropic_tool_events)

SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}
# SPEAK as Anthropic's structured outputs take it: the nullable type list as anyOf with a null branch,
# as anthropic-sdk-python's transform_schema writes it.
SPEAK_NATIVE = {"type": "object", "properties": {"message": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "required": ["message"], "additionalProperties": False}
# A schema Anthropic's structured outputs do not take (an open object): it rides in the prompt.
LOOSE = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
PRECO = {"name": "preco", "description": "Preço da diária.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def claude(fake, **kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    kw.setdefault("model", "claude-haiku-4-5")
    return AnthropicProvider(api_key="test-key", base_url=fake.url, **kw)


def ok(fake, text="ok", **kw):
    fake.sse(*anthropic_events(text, **kw))


# Request (§6.1-§6.4) ###############################################################

def test_path_headers_and_base_body(fake):
    """providers.md §6.1-§6.2: /v1/messages, anthropic-version, x-api-key, max_tokens default 8192."""
    ok(fake)
    claude(fake).generate(req())
    sent = fake.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["x-api-key"] == "test-key" and "authorization" not in sent.headers
    assert sent.headers["content-type"] == "application/json"
    assert sent.json == {"model": "claude-haiku-4-5", "max_tokens": 8192, "stream": True,
                         "messages": [{"role": "user", "content": [{"type": "text", "text": "PROMPT"}]}]}


def test_system_block_is_cached_and_the_schema_block_follows_it(fake):
    """providers.md §6.2: system texts joined into one block with cache_control; the schema prompt is a
    second block after it, unmarked."""
    ok(fake, '{"message":"oi"}')
    claude(fake).generate(req(system="Você é Ana.", history=[{"role": "system", "content": "Resumo."}],
                              schema=LOOSE, schema_name="speak"))
    assert fake.requests[0].json["system"] == [
        {"type": "text", "text": "Você é Ana.\n\nResumo.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": schema_prompt(LOOSE)}]
    assert "output_config" not in fake.requests[0].json


def test_schema_without_system_text_is_the_only_block_and_no_system_is_omitted(fake):
    """providers.md §6.2: `system` is omitted when empty; the schema block alone carries no cache mark."""
    ok(fake, '{"message":"oi"}')
    ok(fake)
    claude(fake).generate(req(schema=LOOSE))
    claude(fake).generate(req())
    assert fake.requests[0].json["system"] == [{"type": "text", "text": schema_prompt(LOOSE)}]
    assert "system" not in fake.requests[1].json


def test_messages_alternate_with_tool_use_and_tool_result(fake):
    """providers.md §6.3: consecutive same-role messages merge their blocks; tool_use input is a dict;
    tool_result rides in a user message; reasoning is never replayed."""
    ok(fake)
    history = [
        {"role": "user", "content": "oi"},
        {"role": "user", "content": "tudo bem?"},
        {"role": "assistant", "content": "Vou ver.", "reasoning": "SECRET",
         "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "Curitiba"}},
                        {"id": "call-0-1", "name": "preco", "arguments": {"cidade": "Lapa"}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "{\"precoNoite\":420}"},
        {"role": "tool", "tool_call_id": "call-0-1", "name": "preco", "content": {"precoNoite": 300}},
        {"role": "assistant", "content": None},
    ]
    claude(fake).generate(req(history=history))
    body = fake.requests[0].json
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "oi"}, {"type": "text", "text": "tudo bem?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Vou ver."},
            {"type": "tool_use", "id": "call-0-0", "name": "preco", "input": {"cidade": "Curitiba"}},
            {"type": "tool_use", "id": "call-0-1", "name": "preco", "input": {"cidade": "Lapa"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call-0-0",
             "content": [{"type": "text", "text": "{\"precoNoite\":420}"}]},
            {"type": "tool_result", "tool_use_id": "call-0-1",
             "content": [{"type": "text", "text": "{\"precoNoite\":300}"}]},
            {"type": "text", "text": "PROMPT"}]},
    ]
    assert "SECRET" not in fake.requests[0].raw.decode()


def test_tools_and_sampling_options(fake):
    """providers.md §6.2: tools with input_schema; temperature, top_p, stop_sequences from config, on a
    model that takes both (Claude Sonnet 4.0)."""
    ok(fake)
    claude(fake, model="claude-sonnet-4-0", config={"temperature": 0.4, "topP": 0.8, "stopSequences": ["FIM"],
                                                    "maxTokens": 2000}).generate(req(tools=[PRECO]))
    body = fake.requests[0].json
    assert body["tools"] == [{"name": "preco", "description": "Preço da diária.",
                              "input_schema": PRECO["parameters"]}]
    assert (body["temperature"], body["top_p"], body["stop_sequences"], body["max_tokens"]) == \
        (0.4, 0.8, ["FIM"], 2000)
    assert "thinking" not in body


@pytest.mark.parametrize("model, sent", [
    ("claude-haiku-4-5", {"temperature": 0.4}), ("claude-sonnet-4-6", {"temperature": 0.4}),
    ("claude-sonnet-5", {}), ("claude-opus-4-7", {}), ("claude-unknown-9", {})])
def test_sampling_follows_the_model(fake, model, sent):
    """Issue 7: Sonnet/Haiku 4.5 and Sonnet 4.6 refuse temperature with top_p (400 "cannot both be
    specified"), Sonnet 5 and Opus 4.7+ refuse temperature at all ("deprecated for this model"); an unknown
    model gets nothing optional. The strict fake answers Anthropic's 400 to what the old code sent."""
    ok(fake)
    claude(fake, model=model, config={"temperature": 0.4, "topP": 0.8, "stopSequences": ["FIM"]}).generate(req())
    body = fake.requests[0].json
    assert {k: body[k] for k in ("temperature", "top_p") if k in body} == sent
    assert body["stop_sequences"] == ["FIM"]


@pytest.mark.parametrize("effort, max_tokens, budget", [
    ("low", 8192, 2048), ("medium", 8192, 6553), ("high", 30000, 16384), ("max", 50000, 32768),
    ("max", 8192, 6553), ("low", 1100, 1024), ("high", 1279, 1024)])
def test_thinking_budget_and_removed_sampling_fields(fake, effort, max_tokens, budget):
    """providers.md §6.4: budget = min(B, floor(max_tokens × 0.8)), but never below Anthropic's 1024
    floor (issue 7: it dropped below it when maxTokens < 1280); temperature and top_p removed."""
    ok(fake)
    claude(fake, config={"temperature": 0.4, "topP": 0.8, "maxTokens": max_tokens}).generate(req(effort=effort))
    body = fake.requests[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert "temperature" not in body and "top_p" not in body


def test_no_thinking_when_max_tokens_leaves_no_room_for_the_minimum_budget(fake):
    """Issue 7: budget_tokens must be ≥ 1024 and < max_tokens; with maxTokens ≤ 1024 there is no valid
    budget, so no thinking is sent (and the sampling the model takes is)."""
    ok(fake)
    claude(fake, config={"maxTokens": 1000, "temperature": 0.3}).generate(req(effort="high"))
    body = fake.requests[0].json
    assert "thinking" not in body and body["temperature"] == 0.3


@pytest.mark.parametrize("model, effort, thinking, output", [
    ("claude-sonnet-5", "low", {"type": "adaptive"}, {"effort": "low"}),
    ("claude-sonnet-5", "max", {"type": "adaptive"}, {"effort": "max"}),
    ("claude-opus-4-7", "medium", {"type": "adaptive"}, {"effort": "medium"}),
    ("claude-opus-4-8", "high", {"type": "adaptive"}, {"effort": "high"}),
    ("claude-sonnet-5", "none", {"type": "disabled"}, None),       # Sonnet 5 thinks unless told not to
    ("claude-opus-4-7", "none", None, None),
])
def test_adaptive_thinking_on_claude_4_7_and_later(fake, model, effort, thinking, output):
    """Issue 7 item 4: Opus 4.7+ and Sonnet 5 refuse thinking.type "enabled"; they take
    {"type": "adaptive"} with output_config.effort. The strict fake refuses "enabled" there."""
    ok(fake)
    claude(fake, model=model, config={"temperature": 0.4}).generate(req(effort=effort))
    body = fake.requests[0].json
    assert body.get("thinking") == thinking and body.get("output_config") == output
    assert "temperature" not in body


def test_effort_none_sends_no_thinking(fake):
    """providers.md §6.4: absent or "none" → no thinking field (the default is off on this model)."""
    ok(fake)
    claude(fake, config={"effort": "none", "temperature": 0.1}).generate(req())
    body = fake.requests[0].json
    assert "thinking" not in body and body["temperature"] == 0.1


# Parsing (§6.5) ####################################################################

def test_usage_is_reconciled_with_cache_reads_and_writes(fake):
    """providers.md §6.5: prompt = fresh + read + write; cached = read; cacheWriteTokens in metadata."""
    ok(fake, "Olá", input_tokens=20, output_tokens=7, cache_read=1000, cache_write=300)
    out = claude(fake).generate(req())
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_input_tokens) == (1320, 7, 1000)
    assert out.metadata == {"provider": "anthropic", "model": "claude-haiku-4-5", "finishReason": "stop",
                            "vendorFinishReason": "end_turn", "tokensUsed": 1327, "cacheWriteTokens": 300}


def test_message_delta_usage_overrides_message_start(fake):
    """providers.md §6.5: message_delta usage fields, when present, replace the stored ones."""
    events = [json.loads(e) for e in anthropic_events("x", input_tokens=5, output_tokens=3)]
    events[4]["usage"] = {"input_tokens": 9, "cache_read_input_tokens": 4, "output_tokens": 11}
    fake.sse(*[json.dumps(e) for e in events])
    out = claude(fake).generate(req())
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_input_tokens) == (13, 11, 4)


def test_text_deltas_stream_in_order_and_thinking_goes_to_reasoning(fake):
    """providers.md §6.5: text_delta → content; thinking_delta → reasoning."""
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Bom "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "dia"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    fake.sse(*[f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events], raw=True)
    chunks = list(claude(fake).generate_stream(req()))
    assert [c.delta for c in chunks] == ["Bom ", "dia", ""]
    assert chunks[-1].reasoning == "Hmm" and chunks[-1].metadata["finishReason"] == "length"


def test_a_tool_use_block_is_assembled_from_json_fragments(fake):
    """providers.md §6.5: a tool_use block gives id and name; input_json_delta fragments are appended;
    its position among blocks is the call index; stop_reason tool_use → tool_calls."""
    fake.sse(*anthropic_tool_events("preco", ['{"cid', 'ade": "Curi', 'tiba"}'], tool_id="toolu_01", text="Vou ver."))
    out = claude(fake).generate(req(tools=[PRECO], schema=SPEAK))
    assert out.tool_calls == [ToolCallRequest(id="toolu_01", name="preco", arguments={"cidade": "Curitiba"})]
    assert out.message == "Vou ver." and out.structured is None
    assert out.metadata["finishReason"] == "tool_calls"


def test_two_tool_use_blocks_keep_their_order(fake):
    """providers.md §6.5: each content block counts; tool calls follow block positions."""
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t1", "name": "preco", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"cidade":"A"}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "t2", "name": "preco", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    fake.sse(*[json.dumps(e) for e in events])
    out = claude(fake).generate(req(tools=[PRECO]))
    assert [(c.id, c.arguments) for c in out.tool_calls] == [("t1", {"cidade": "A"}), ("t2", {})]


@pytest.mark.parametrize("stop, normalized", [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length")])
def test_stop_reasons(fake, stop, normalized):
    """providers.md §6.5: stop_reason normalization."""
    ok(fake, "x", stop=stop)
    out = claude(fake).generate(req())
    assert out.metadata["finishReason"] == normalized and out.metadata["vendorFinishReason"] == stop


def test_an_in_band_overloaded_error_is_an_overload_and_retried(fake):
    """providers.md §6.5: an `error` event classifies from its type (overloaded_error → overload); the
    type fills `code`."""
    error_event = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    fake.sse(*anthropic_events("x")[:2], error_event)
    ok(fake, "depois")
    assert claude(fake).generate(req()).message == "depois"
    fake.sse(error_event)
    with pytest.raises(ProviderError) as caught:
        claude(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    e = caught.value
    assert (e.kind, e.code, e.status) == ("overload", "overloaded_error", None)
    assert str(e) == "anthropic stream error: Overloaded"


@pytest.mark.parametrize("error_type, message, kind", [
    ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", "rate"),
    ("api_error", "Internal server error", "overload"),
    ("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", "context"),
    ("authentication_error", "invalid x-api-key", "auth"),
])
def test_in_band_error_types_classify_like_their_http_status(fake, error_type, message, kind):
    """providers.md §6.5 (inferred): an error event's type maps to its documented HTTP status, then §8.3."""
    fake.sse(json.dumps({"type": "error", "error": {"type": error_type, "message": message}}))
    with pytest.raises(ProviderError) as caught:
        claude(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert caught.value.kind == kind and caught.value.code == error_type


def test_a_whole_message_object_is_read(fake):
    """providers.md §3.7 rule 8: an application/json Messages reply (non-streamed) parses the same way."""
    fake.json({"type": "message", "role": "assistant", "stop_reason": "tool_use",
               "content": [{"type": "text", "text": "Vou ver."},
                           {"type": "tool_use", "id": "t1", "name": "preco", "input": {"cidade": "X"}}],
               "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 2}})
    out = claude(fake).generate(req(tools=[PRECO]))
    assert out.message == "Vou ver." and out.tool_calls[0].arguments == {"cidade": "X"}
    assert (out.usage.prompt_tokens, out.usage.cached_input_tokens) == (12, 2)


# HTTP errors ######################################################################

def test_529_overloaded_is_retried(fake):
    """providers.md §6.5 / §8.3: Anthropic's 529 classifies as overload, retried."""
    fake.error(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    ok(fake)
    assert claude(fake).generate(req()).message == "ok" and len(fake.requests) == 2


@pytest.mark.parametrize("status, error_type, message, kind", [
    (401, "authentication_error", "invalid x-api-key", "auth"),
    (400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API.", "quota"),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context"),
    (404, "not_found_error", "model: claude-9", "model"),
])
def test_final_http_errors(fake, status, error_type, message, kind):
    """providers.md §8.3: classification of Anthropic's documented error answers; code = error type."""
    fake.error(status, {"type": "error", "error": {"type": error_type, "message": message}})
    with pytest.raises(ProviderError) as caught:
        claude(fake).generate(req())
    assert caught.value.kind == kind and caught.value.code == error_type and len(fake.requests) == 1


def test_capabilities_and_name():
    """providers.md §1.5 / §6.1."""
    provider = AnthropicProvider(api_key="k", model="claude-sonnet-4-5")
    caps = provider.capabilities
    assert provider.name == "anthropic" and provider.base_url == "https://api.anthropic.com"
    assert caps.supports_native_json_schema is False and caps.supports_prompt_caching is True
    assert caps.supports_tools and caps.supports_streaming and caps.supports_streaming_tool_calls


# Issue 7: refusals, signed thinking in tool rounds, native structured output ######################

def test_a_refusal_is_kind_content_after_one_request(fake):
    """Issue 7 item 5: stop_reason "refusal" (the SDK's recorded stream, empty text) is a
    ProviderError(kind="content") after one request: no retry and no backup model (it was "no content",
    kind overload, retried and walked)."""
    fake.sse(*anthropic_refusal_events(), raw=True)
    with pytest.raises(ProviderError) as caught:
        claude(fake, model="claude-opus-4-7", backup_models=["claude-sonnet-4-6"],
               retry_config={"timeout": 3000, "retries": 3}).generate(req())
    assert caught.value.kind == "content" and caught.value.code == "refusal"
    assert "refused due to policy" in str(caught.value)
    assert len(fake.requests) == 1


def test_a_refusal_after_some_text_is_still_content(fake):
    """Issue 7 item 5: a refusal that streamed some text first is not an answer either."""
    ok(fake, "Posso aj", stop="refusal")
    with pytest.raises(ProviderError) as caught:
        claude(fake).generate(req())
    assert caught.value.kind == "content" and len(fake.requests) == 1


def _engine_round_two(first):
    """The history the engine builds after a tool round (model-calls.md §6.7): the assistant item with the
    round's reasoning details, engine call ids, then the tool result."""
    return [{"role": "user", "content": "Quanto custa em Curitiba?"},
            {"role": "assistant", "content": None, "reasoning": first.reasoning,
             "reasoningDetails": first.reasoning_details,
             "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": first.tool_calls[0].arguments}]},
            {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": '{"precoNoite":420}'}]


@pytest.mark.parametrize("model, effort", [("claude-sonnet-4-5", "low"), ("claude-sonnet-5", "medium")])
def test_signed_thinking_is_kept_and_replayed_before_the_tool_use(fake, model, effort):
    """Issue 7 item 4: with thinking on, round 2 of a tool loop must start its assistant message with the
    signed thinking block of round 1 (else Anthropic's 400 "Expected `thinking` or `redacted_thinking`,
    but found `tool_use`"). The signature_delta is kept in reasoning_details and replayed first."""
    fake.sse(*anthropic_thinking_tool_events("Preciso do preço.", "EqQBCkYIARgCIkD", "preco",
                                             {"cidade": "Curitiba"}), raw=True)
    ok(fake, "A diária é R$ 420.")
    provider = claude(fake, model=model, config={"effort": effort, "maxTokens": 4096})
    first = provider.generate(req(prompt="Quanto custa em Curitiba?", tools=[PRECO]))
    assert first.reasoning_details == [{"type": "thinking", "thinking": "Preciso do preço.",
                                        "signature": "EqQBCkYIARgCIkD", "model": model}]
    second = provider.generate(req(history=_engine_round_two(first), prompt="Responda.", tools=[PRECO]))
    assert second.message == "A diária é R$ 420."
    assistant = fake.requests[1].json["messages"][1]
    assert assistant["content"][0] == {"type": "thinking", "thinking": "Preciso do preço.",
                                       "signature": "EqQBCkYIARgCIkD"}
    assert assistant["content"][1]["type"] == "tool_use"


def test_a_tool_round_without_a_signed_block_turns_thinking_off_for_that_call(fake):
    """Issue 7 item 4: a tool round that came from another vendor (no signed block) cannot be replayed
    with thinking on; that call is sent without thinking instead of getting a 400."""
    ok(fake, "ok")
    history = [{"role": "user", "content": "oi"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}}],
                "reasoningDetails": [{"type": "reasoning.text", "text": "from openrouter"}]},
               {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "1"}]
    claude(fake, model="claude-sonnet-4-5", config={"effort": "high"}).generate(req(history=history, tools=[PRECO]))
    body = fake.requests[0].json
    assert "thinking" not in body and "from openrouter" not in fake.requests[0].raw.decode()


def test_native_structured_output_where_the_model_takes_it(fake):
    """Issue 7 item 4: the speak and understand envelopes travel as output_config.format (JSON schema) on
    models with structured outputs; the schema prompt block is then left out. An older model, or a schema
    the feature does not take, keeps the prompt form."""
    for _ in range(3):
        ok(fake, '{"message":"oi"}')
    claude(fake, model="claude-sonnet-4-5").generate(req(system="S", schema=SPEAK, schema_name="speak"))
    claude(fake, model="claude-sonnet-4-0").generate(req(system="S", schema=SPEAK, schema_name="speak"))
    claude(fake, model="claude-sonnet-4-5").generate(req(system="S", schema=LOOSE, schema_name="speak"))
    ok(fake, '{"a":{}}')
    nested = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": False}},
              "required": ["a"], "additionalProperties": False}
    claude(fake, model="claude-sonnet-4-5").generate(req(system="S", schema=nested))
    native, older, loose, property_less = (r.json for r in fake.requests)
    assert "output_config" not in property_less                 # an object without properties is refused
    assert native["output_config"] == {"format": {"type": "json_schema", "schema": SPEAK_NATIVE}}
    assert native["system"] == [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    assert "output_config" not in older and older["system"][1] == {"type": "text", "text": schema_prompt(SPEAK)}
    assert "output_config" not in loose and loose["system"][1] == {"type": "text", "text": schema_prompt(LOOSE)}


def test_native_format_and_adaptive_effort_share_output_config(fake):
    """output_config carries both the effort (adaptive thinking) and the format."""
    ok(fake, '{"message":"oi"}')
    claude(fake, model="claude-sonnet-5", config={"effort": "low"}).generate(req(schema=SPEAK))
    assert fake.requests[0].json["output_config"] == {"effort": "low",
                                                      "format": {"type": "json_schema", "schema": SPEAK_NATIVE}}
    assert fake.requests[0].json["thinking"] == {"type": "adaptive"}


def test_the_understand_call_turns_sonnet_5_thinking_off(fake):
    """Issue 7 item 2: Sonnet 5 thinks when `thinking` is omitted, so an understand call with no effort
    set sends {"type": "disabled"}; a model whose default is off gets nothing."""
    ok(fake, '{"flows":{}}')
    ok(fake, '{"flows":{}}')
    claude(fake, model="claude-sonnet-5").generate(req(schema={"type": "object"}, schema_name="understand"))
    claude(fake, model="claude-haiku-4-5").generate(req(schema={"type": "object"}, schema_name="understand"))
    assert fake.requests[0].json["thinking"] == {"type": "disabled"}
    assert "thinking" not in fake.requests[1].json


def test_strict_fake_refuses_the_old_enabled_thinking_on_sonnet_5(fake):
    """Issue 7 item 10: what the old code sent to Sonnet 5 (thinking.type "enabled") gets Anthropic's 400
    body from the strict fake, read as kind invalid."""
    provider = claude(fake, model="claude-sonnet-5", model_caps={"claude-sonnet-5": {"thinking": "enabled"}})
    with pytest.raises(ProviderError) as caught:
        provider.generate(req(effort="low"))
    assert fake.take_rejections() and caught.value.kind == "invalid"
    assert json.loads(caught.value.body)["error"]["type"] == "invalid_request_error"


def test_sonnet_5_default_thinking_with_an_unsigned_tool_round_is_turned_off(fake):
    """Sonnet 5 thinks when `thinking` is omitted; a tool round with no signed block (from another vendor)
    then gets {"type": "disabled"} rather than risking the missing-thinking 400 (review §1.10)."""
    ok(fake, "ok")
    history = [{"role": "user", "content": "oi"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}}]},
               {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "1"}]
    claude(fake, model="claude-sonnet-5").generate(req(history=history, tools=[PRECO]))
    assert fake.requests[0].json["thinking"] == {"type": "disabled"}
