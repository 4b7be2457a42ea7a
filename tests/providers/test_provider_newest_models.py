"""The providers on the vendors' newest models (review providers-wire-2026-12-turn3): capability rows for
today's ids, Anthropic's structured-output subset and thinking replay per model, reasoning tokens.

Each test names the finding it pins down (D1-D4, S1-S3, S6 of the review); the strict fake refuses what
the live API refuses, so each fails on the providers as they were before.
"""
import json
import logging

import pytest

import falai_providers
from falai import GenerateRequest, TokenUsage, add_usage
from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider, model_caps
from fake_model_server import (Rejected, anthropic_events, anthropic_signature, anthropic_thinking_tool_events,
                               check_chat, gemini_frame, openai_frame)

PRECO = {"name": "preco", "description": "Preço da diária.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def req(**kw):
    kw.setdefault("system", "SYS")
    kw.setdefault("prompt", "PROMPT")
    kw.setdefault("history", [])
    return GenerateRequest(**kw)


def quiet(kw):
    kw.setdefault("api_key", "sk-test-0123456789")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 0})
    return kw


def claude(fake, **kw):
    return AnthropicProvider(base_url=fake.url, **quiet(kw))


def gemini(fake, **kw):
    return GeminiProvider(base_url=fake.url, **quiet(kw))


# The capability table (D3, D4, S1) ################################################################

@pytest.mark.parametrize("vendor, model, thinking, levels, endpoint", [
    ("openai", "gpt-5.1-codex", "reasoning", ("low", "medium", "high"), "chat"),
    ("openai", "gpt-5-codex", "reasoning", ("low", "medium", "high"), "responses"),
    ("openai", "gpt-5.1-codex-max", "reasoning", ("low", "medium", "high", "xhigh"), "responses"),
    ("openai", "gpt-5-pro", "reasoning", ("high",), "responses"),
    ("openai", "gpt-5.5-pro", "reasoning", ("medium", "high", "xhigh"), "responses"),
    ("openai", "o1-pro", "reasoning", ("low", "medium", "high"), "responses"),
    ("openai", "o3-pro-2025-06-10", "reasoning", ("low", "medium", "high"), "responses"),
    ("openai", "gpt-5.4", "reasoning", ("none", "low", "medium", "high", "xhigh"), "tools"),
    ("openai", "gpt-5.6-luna", "reasoning", ("none", "low", "medium", "high", "xhigh"), "tools"),
    ("openai", "gpt-6-astra", "reasoning", ("low", "medium", "high", "xhigh"), "tools"),
    ("openai", "gpt-6-chat-latest", None, (), "chat"),
    ("openai", "gpt-5.1", "reasoning", ("none", "low", "medium", "high"), "chat"),
    ("gemini", "gemini-3.5-flash", "level", ("LOW", "MEDIUM", "HIGH"), "chat"),
    ("gemini", "gemini-3.1-flash-lite", "level", ("MINIMAL", "LOW", "MEDIUM", "HIGH"), "chat"),
    ("gemini", "gemini-flash-latest", "level", ("LOW", "MEDIUM", "HIGH"), "chat"),
    ("gemini", "gemini-pro-latest", "level", ("LOW", "MEDIUM", "HIGH"), "chat"),
    ("anthropic", "claude-fable-5", "adaptive", ("low", "medium", "high", "xhigh", "max"), "chat"),
    ("anthropic", "claude-mythos-5", "adaptive", ("low", "medium", "high", "xhigh", "max"), "chat"),
])
def test_todays_ids_have_rows(vendor, model, thinking, levels, endpoint):
    caps = model_caps(vendor, model)
    assert (caps.thinking, caps.levels, caps.endpoint) == (thinking, levels, endpoint)


def test_the_endpoint_of_a_row_can_be_overridden_and_is_checked():
    provider = OpenAICompatibleProvider(api_key="k" * 10, model="my-reasoner", base_url="http://127.0.0.1:9/v1",
                                        model_caps={"my-*": {"thinking": "reasoning", "endpoint": "responses"}})
    assert provider._caps("openai", "my-reasoner").endpoint == "responses"
    with pytest.raises(ValueError, match='"chat", "tools" or "responses"'):
        OpenAICompatibleProvider(api_key="k" * 10, model="m", model_caps={"m": {"endpoint": "completions"}})


@pytest.mark.parametrize("model, level", [("gemini-3.5-flash", "LOW"), ("gemini-3.1-flash-lite", "MINIMAL"),
                                          ("gemini-flash-latest", "LOW")])
def test_new_gemini_ids_get_thinking_control(fake, model, level):
    """S1: the understand call on a new id thinks as little as the model allows, not at its default."""
    fake.sse(gemini_frame(text='{"flows":{}}', finish="STOP"))
    gemini(fake, model=model).generate(req(schema_name="understand"))
    assert fake.requests[0].json["generationConfig"]["thinkingConfig"] == {"thinkingLevel": level}


# Anthropic: the models that always think (S1) #####################################################

def test_fable_always_thinks_adaptively_and_takes_no_sampling(fake, caplog):
    for _ in range(3):
        fake.sse(*anthropic_events("ok"))
    caplog.set_level(logging.WARNING, logger="falai")
    claude(fake, model="claude-fable-5").generate(req(schema_name="understand"))
    claude(fake, model="claude-fable-5", config={"effort": "max", "temperature": 0.2}).generate(req())
    claude(fake, model="claude-mythos-5", config={"effort": "none"}).generate(req())
    understand, speak, none = (r.json for r in fake.requests)
    assert understand["thinking"] == {"type": "adaptive"} and understand["output_config"] == {"effort": "low"}
    assert speak["thinking"] == {"type": "adaptive"} and speak["output_config"] == {"effort": "max"}
    assert "temperature" not in speak and none["output_config"] == {"effort": "low"}


def test_fable_structured_output_rides_in_the_prompt(fake):
    schema = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"],
              "additionalProperties": False}
    fake.sse(*anthropic_events('{"message":"oi"}'))
    claude(fake, model="claude-fable-5").generate(req(schema=schema))
    body = fake.requests[0].json
    assert "format" not in body.get("output_config", {}) and len(body["system"]) == 2


# Anthropic: structured outputs as the SDK transform writes them (S2, S3) ##########################

def test_nullable_properties_go_as_any_of_with_a_null_branch(fake):
    """S3: the SDK's transform_schema never writes a type list; the strict fake refuses one."""
    schema = {"type": "object", "additionalProperties": False, "required": ["message", "tags", "mood"],
              "properties": {"message": {"type": ["string", "null"], "description": "the reply"},
                             "tags": {"type": ["array", "null"], "items": {"type": "string", "enum": ["a", "b"]}},
                             "mood": {"type": ["string", "null"], "enum": ["ok", "bad", None]}}}
    fake.sse(*anthropic_events('{"message":"oi","tags":null,"mood":null}'))
    out = claude(fake, model="claude-sonnet-4-5").generate(req(schema=schema))
    assert out.structured == {"message": "oi", "tags": None, "mood": None}
    sent = fake.requests[0].json["output_config"]["format"]["schema"]["properties"]
    assert sent["message"] == {"description": "the reply", "anyOf": [{"type": "string"}, {"type": "null"}]}
    assert sent["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                                      {"type": "null"}]}
    assert sent["mood"] == {"anyOf": [{"type": "string", "enum": ["ok", "bad"]}, {"type": "null"}]}
    assert schema["properties"]["message"]["type"] == ["string", "null"]       # the request is left as it was


def test_constraints_outside_the_subset_move_into_the_description(fake):
    """S2: maxItems, minItems above 1, uniqueItems, an unsupported format and length bounds go into the
    description (the SDK transform's rule) instead of a 400; minItems 0/1 and supported formats stay."""
    schema = {"type": "object", "additionalProperties": False, "required": ["xs", "when", "code", "one"],
              "properties": {"xs": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "minItems": 2,
                                    "uniqueItems": True, "description": "list"},
                             "when": {"type": "string", "format": "date"},
                             "code": {"type": "string", "format": "iban", "maxLength": 34},
                             "one": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}}
    fake.sse(*anthropic_events('{"xs":["a","b"],"when":"2026-12-02","code":"X","one":[1]}'))
    claude(fake, model="claude-opus-4-7").generate(req(schema=schema))
    sent = fake.requests[0].json["output_config"]["format"]["schema"]["properties"]
    assert sent["xs"] == {"type": "array", "items": {"type": "string"},
                          "description": "list\n\n{maxItems: 3, minItems: 2, uniqueItems: true}"}
    assert sent["when"] == {"type": "string", "format": "date"}
    assert sent["code"] == {"type": "string", "description": '{format: "iban", maxLength: 34}'}
    assert sent["one"] == {"type": "array", "items": {"type": "integer"}, "minItems": 1}


# Anthropic: thinking blocks go back only to the model that signed them (S6) #######################

def _round_two(first):
    return [{"role": "user", "content": "Quanto custa?"},
            {"role": "assistant", "content": None, "reasoningDetails": first.reasoning_details,
             "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}}]},
            {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "420"}]


def test_a_thinking_block_is_replayed_to_its_own_model_and_never_to_a_backup(fake):
    signature = anthropic_signature("claude-sonnet-4-5")
    fake.sse(*anthropic_thinking_tool_events("Preciso do preço.", signature, "preco", {"cidade": "X"}), raw=True)
    provider = claude(fake, model="claude-sonnet-4-5", config={"effort": "low", "maxTokens": 4096})
    first = provider.generate(req(prompt="Quanto custa?", tools=[PRECO]))
    assert first.reasoning_details[0]["model"] == "claude-sonnet-4-5"
    fake.sse(*anthropic_events("A diária é R$ 420."))
    provider.generate(req(history=_round_two(first), tools=[PRECO]))
    same = fake.requests[1].json
    assert same["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Preciso do preço.",
                                                 "signature": signature}
    # The same history on another model (a backup): the block is not sent and that call thinks not.
    fake.sse(*anthropic_events("A diária é R$ 420."))
    claude(fake, model="claude-haiku-4-5", config={"effort": "low", "maxTokens": 4096}).generate(
        req(history=_round_two(first), tools=[PRECO]))
    other = fake.requests[2].json
    assert "thinking" not in other and signature not in fake.requests[2].raw.decode()


def test_a_backup_model_inside_one_provider_gets_no_foreign_block(fake):
    """The backup walk of one provider: round 2 fails on the primary with an overload and goes to the
    backup, which must not receive the primary's signed block."""
    signature = anthropic_signature("claude-sonnet-4-5")
    fake.sse(*anthropic_thinking_tool_events("Hm.", signature, "preco", {"cidade": "X"}), raw=True)
    provider = claude(fake, model="claude-sonnet-4-5", backup_models=["claude-haiku-4-5"],
                      config={"effort": "low", "maxTokens": 4096})
    first = provider.generate(req(prompt="Quanto custa?", tools=[PRECO]))
    fake.error(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    fake.sse(*anthropic_events("ok"))
    assert provider.generate(req(history=_round_two(first), tools=[PRECO])).message == "ok"
    backup = fake.requests[2]
    assert backup.json["model"] == "claude-haiku-4-5" and signature not in backup.raw.decode()


# Reasoning tokens, counted apart ##################################################################

def test_reasoning_tokens_are_read_from_every_vendor(fake):
    fake.sse(gemini_frame(text="oi", finish="STOP", usage=(10, 4, 2, 6)))
    assert gemini(fake, model="gemini-3.8-flash").generate(req()).usage == TokenUsage(10, 10, 2, 6)
    fake.chat_dialect = "openai"
    fake.sse(openai_frame(content="oi"), openai_frame(finish="stop"),
             openai_frame(usage={"prompt_tokens": 9, "completion_tokens": 30, "prompt_tokens_details":
                                 {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 24}}),
             "[DONE]")
    openai = OpenAICompatibleProvider(base_url=fake.url + "/v1", model="gpt-5-mini", **quiet({}))
    assert openai.generate(req()).usage == TokenUsage(9, 30, 0, 24)
    events = [json.loads(e) for e in anthropic_events("oi", output_tokens=50)]
    events[-2]["usage"]["output_tokens_details"] = {"thinking_tokens": 41}
    fake.sse(*[json.dumps(e) for e in events])
    assert claude(fake, model="claude-sonnet-4-5").generate(req()).usage == TokenUsage(5, 50, 0, 41)
    assert add_usage(TokenUsage(1, 2, 0, 1), TokenUsage(1, 2, 0, 2)) == TokenUsage(2, 4, 0, 3)


def test_every_openai_row_names_a_known_endpoint():
    assert {caps.endpoint for rows in falai_providers.MODEL_TABLE.values() for _, caps in rows} \
        <= set(falai_providers.ENDPOINTS)


# The strict fake's chat-completions rules for these models (D1-D4) ################################

CHAT = {"model": "gpt-5.4", "messages": [{"role": "user", "content": "oi"}], "stream": True}
TOOLS = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("body, message", [
    ({**CHAT, "tools": TOOLS, "reasoning_effort": "low"}, "Function tools with reasoning_effort"),       # D1
    ({**CHAT, "model": "gpt-5.6-luna", "tools": TOOLS}, "Function tools with reasoning_effort"),        # D2
    ({**CHAT, "model": "gpt-6-astra", "tools": TOOLS}, "Function tools with reasoning_effort"),
    ({**CHAT, "model": "gpt-5.1-codex", "reasoning_effort": "none"}, "does not support 'none'"),        # D3
    ({**CHAT, "model": "gpt-5-codex"}, "only supported in v1/responses"),                               # D4
    ({**CHAT, "model": "o3-pro"}, "only supported in v1/responses"),
])
def test_the_strict_fake_refuses_these_chat_bodies(body, message):
    with pytest.raises(Rejected, match=message):
        check_chat("openai", {"authorization": "Bearer k"}, body)
    check_chat("openai", {"authorization": "Bearer k"}, {**CHAT, "tools": TOOLS, "reasoning_effort": "none"})
    check_chat("openai", {"authorization": "Bearer k"}, {**CHAT, "model": "gpt-6-astra", "tools": TOOLS,
                                                         "reasoning_effort": "none"})
