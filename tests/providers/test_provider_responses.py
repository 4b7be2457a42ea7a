"""OpenAICompatibleProvider on OpenAI's Responses API, against the strict fake (docs/guide/providers.md,
"Which endpoint an OpenAI model uses"; openai-python types/responses/).

The fake checks every /v1/responses body the way the SDK types and the live API do: a chat-completions
field, a chat-style tool or an unknown key is a 400, so a test here cannot pass on a body OpenAI refuses.
"""
import json
import logging

import pytest
import requests

from falai import GenerateRequest, ProviderError, TokenUsage
from falai_providers import OpenAICompatibleProvider
from fake_model_server import check_responses, Rejected, openai_frame, reasoning_item, responses_events

KEY = "sk-live-0123456789abcdefXYZ"
PRECO = {"name": "preco", "description": "Preço da diária.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}
SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}


def req(**kw):
    kw.setdefault("system", "SYS")
    kw.setdefault("prompt", "Quanto custa em Curitiba?")
    kw.setdefault("history", [])
    return GenerateRequest(**kw)


def openai(fake, **kw):
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "gpt-5.4")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    name = kw.get("name", "openai")
    fake.chat_dialect = name if name in ("openai", "openrouter", "deepseek") else "generic"
    return OpenAICompatibleProvider(base_url=fake.url + "/v1", **kw)


def answer(fake, **kw):
    fake.sse(*responses_events(**kw), raw=True)


def round_two(first):
    """The history the engine builds after a tool round (model-calls.md §6.7): the assistant item with the
    round's reasoning details and call ids, then the tool result."""
    call = first.tool_calls[0]
    return [{"role": "user", "content": "Quanto custa em Curitiba?"},
            {"role": "assistant", "content": None, "reasoning": first.reasoning,
             "reasoningDetails": first.reasoning_details,
             "tool_calls": [{"id": call.id, "name": call.name, "arguments": call.arguments}]},
            {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": '{"precoNoite":420}'}]


# Which endpoint ###################################################################################

@pytest.mark.parametrize("model, tools, path", [
    ("gpt-5.4", True, "/v1/responses"),             # chat completions refuses effort beside tools (D1)
    ("gpt-5.6-luna", True, "/v1/responses"),        # ... and its own default effort (D2)
    ("gpt-6-astra", True, "/v1/responses"),
    ("gpt-5.4", False, "/v1/chat/completions"),     # no tools: chat completions takes it
    ("gpt-4.1-mini", True, "/v1/chat/completions"),
    ("gpt-5.1", True, "/v1/chat/completions"),
    ("gpt-5-pro", False, "/v1/responses"),          # Responses-only ids (D4)
    ("gpt-5.5-pro", False, "/v1/responses"),
    ("gpt-5-codex", False, "/v1/responses"),
    ("gpt-5.1-codex-max", False, "/v1/responses"),
    ("o3-pro", False, "/v1/responses"),
])
def test_the_capability_table_picks_the_endpoint_per_model_and_call(fake, model, tools, path):
    if path.endswith("responses"):
        answer(fake, model=model, text="ok")
    else:
        fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"), "[DONE]")
    openai(fake, model=model).generate(req(tools=[PRECO] if tools else None))
    assert fake.requests[0].path == path


def test_other_servers_stay_on_chat_completions_and_api_forces_either(fake, caplog):
    """OpenRouter, DeepSeek and local servers speak chat completions; api="chat" keeps a tool round of
    gpt-5.4 there (with reasoning_effort "none" and one warning); api="responses" sends any model there."""
    for _ in range(3):
        fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"), "[DONE]")
    openai(fake, name="openrouter", model="openai/gpt-5.4").generate(req(tools=[PRECO]))
    caplog.set_level(logging.WARNING, logger="falai")
    forced = openai(fake, api="chat", config={"effort": "high"})
    forced.generate(req(tools=[PRECO]))
    forced.generate(req(tools=[PRECO]))
    answer(fake, model="gpt-4.1-mini", text="ok")
    openai(fake, model="gpt-4.1-mini", api="responses").generate(req())
    paths = [r.path for r in fake.requests]
    assert paths == ["/v1/chat/completions"] * 3 + ["/v1/responses"]
    assert fake.requests[1].json["reasoning_effort"] == "none" == fake.requests[2].json["reasoning_effort"]
    assert caplog.text.count('only with reasoning_effort "none"') == 1
    plain = fake.requests[3].json
    assert "reasoning" not in plain and "include" not in plain      # not a reasoning model
    with pytest.raises(ValueError, match='api is "completions"'.replace('"', "'")):
        openai(fake, api="completions")


def test_a_tool_round_on_chat_sends_none_where_the_model_refuses_its_default_beside_tools(fake):
    """gpt-6 and gpt-5.6 refuse their own default effort beside tools on chat completions, so a forced chat
    call sends reasoning_effort "none" even with no effort configured (review D2)."""
    for _ in range(2):
        fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"), "[DONE]")
    openai(fake, model="gpt-6-astra", api="chat", understand_effort=None).generate(req(tools=[PRECO]))
    openai(fake, model="gpt-5.6-sol", api="chat", understand_effort=None).generate(req(tools=[PRECO]))
    assert [r.json["reasoning_effort"] for r in fake.requests] == ["none", "none"]


# The request ######################################################################################

def test_a_responses_body_has_instructions_input_items_flat_tools_and_reasoning(fake):
    answer(fake, text="ok")
    openai(fake, config={"effort": "high", "maxTokens": 900}).generate(req(tools=[PRECO]))
    sent = fake.requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json == {
        "model": "gpt-5.4", "instructions": "SYS",
        "input": [{"role": "user", "content": "Quanto custa em Curitiba?"}],
        "stream": True, "store": False, "include": ["reasoning.encrypted_content"], "max_output_tokens": 900,
        "reasoning": {"effort": "high"},
        "tools": [{"type": "function", "name": "preco", "description": "Preço da diária.",
                   "parameters": PRECO["parameters"], "strict": False}],
        "prompt_cache_key": sent.json["prompt_cache_key"]}
    assert sent.json["prompt_cache_key"].startswith("falai-")


def test_the_prompt_cache_key_is_stable_per_system_text_and_can_be_set_or_left_out(fake):
    for _ in range(5):
        answer(fake, text="ok")
    provider = openai(fake)
    provider.generate(req(tools=[PRECO]))
    provider.generate(req(tools=[PRECO], prompt="outra pergunta"))
    provider.generate(req(tools=[PRECO], system="OTHER AGENT"))
    openai(fake, prompt_cache_key="tenant-7").generate(req(tools=[PRECO]))
    openai(fake, prompt_cache_key=None).generate(req(tools=[PRECO]))
    keys = [r.json.get("prompt_cache_key") for r in fake.requests]
    assert keys[0] == keys[1] != keys[2] and keys[3] == "tenant-7" and keys[4] is None


def test_structured_output_goes_in_text_format_with_the_strict_subset(fake):
    answer(fake, text='{"message":"oi"}')
    answer(fake, text='{"message":"oi"}')
    out = openai(fake).generate(req(tools=[PRECO], schema=SPEAK, schema_name="speak"))
    assert out.structured == {"message": "oi"}
    assert fake.requests[0].json["text"] == {"format": {"type": "json_schema", "name": "speak", "schema": SPEAK,
                                                        "strict": True}}
    openai(fake, structured_output="json_object").generate(req(tools=[PRECO], schema=SPEAK))
    body = fake.requests[1].json
    assert body["text"] == {"format": {"type": "json_object"}}
    assert body["input"][-1]["role"] == "system" and "JSON" in body["input"][-1]["content"]


def test_sampling_and_stop_sequences_on_responses(fake, caplog):
    """gpt-5.x takes only the default temperature; stop has no Responses field (one warning each)."""
    answer(fake, model="gpt-4.1-mini", text="ok")
    answer(fake, text="ok")
    caplog.set_level(logging.WARNING, logger="falai")
    openai(fake, model="gpt-4.1-mini", api="responses",
           config={"temperature": 0.2, "stopSequences": ["FIM"]}).generate(req())
    openai(fake, config={"temperature": 0.2}).generate(req(tools=[PRECO]))
    assert fake.requests[0].json["temperature"] == 0.2 and "stop" not in fake.requests[0].json
    assert "temperature" not in fake.requests[1].json
    assert "the Responses API has no stop parameter" in caplog.text


def test_history_maps_to_input_items(fake):
    """System items stay in place, an assistant reply is an assistant message, a tool round is a
    function_call then its function_call_output; blank assistant text is left out."""
    answer(fake, text="ok")
    history = [{"role": "user", "content": "oi"}, {"role": "assistant", "content": "Olá!"},
               {"role": "system", "content": "NOTE"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}}]},
               {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "420"}]
    openai(fake).generate(req(history=history, tools=[PRECO]))
    assert fake.requests[0].json["input"] == [
        {"role": "user", "content": "oi"}, {"role": "assistant", "content": "Olá!"},
        {"role": "system", "content": "NOTE"},
        {"type": "function_call", "call_id": "call-0-0", "name": "preco", "arguments": '{"cidade":"X"}'},
        {"type": "function_call_output", "call_id": "call-0-0", "output": "420"},
        {"role": "user", "content": "Quanto custa em Curitiba?"}]


# The reply ########################################################################################

def test_streamed_text_tool_calls_usage_and_reasoning_are_read(fake):
    answer(fake, text="Um instante.", calls=[("call_a", "preco", {"cidade": "Curitiba"})],
           reasoning=[reasoning_item("gpt-5.4", summary="Preciso do preço.")], usage=(120, 40, 100, 25))
    chunks = list(openai(fake).generate_stream(req(tools=[PRECO])))
    final = chunks[-1]
    assert "".join(c.delta for c in chunks[:-1]) == "Um instante." == final.accumulated
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [("call_a", "preco", {"cidade": "Curitiba"})]
    assert final.usage == TokenUsage(120, 40, 100, 25)
    assert final.reasoning == "Preciso do preço."
    assert final.metadata["finishReason"] == "tool_calls"
    [kept] = final.reasoning_details
    assert kept["type"] == "reasoning" and kept["model"] == "gpt-5.4" and kept["encrypted_content"]


def test_a_whole_json_response_is_read(fake):
    """providers.md §3.7 rule 8: a server may answer one whole ``response`` object."""
    fake.json({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5.4",
               "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": "Olá", "annotations": []}]}],
               "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
                         "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}})
    out = openai(fake).generate(req(tools=[PRECO]))
    assert out.message == "Olá" and out.usage == TokenUsage(5, 2, 0, 0)


def test_reasoning_is_replayed_in_the_next_tool_round_to_the_same_model_only(fake):
    """store=false: the encrypted reasoning of round 1 opens round 2's items, before its function call,
    without the model tag the provider keeps; a backup model never gets it (the fake refuses a replay it
    did not issue to that model)."""
    answer(fake, calls=[("call_a", "preco", {"cidade": "Curitiba"})], reasoning=[reasoning_item("gpt-5.4")])
    answer(fake, text="A diária é R$ 420.")
    provider = openai(fake)
    first = provider.generate(req(tools=[PRECO]))
    second = provider.generate(req(history=round_two(first), prompt="Responda.", tools=[PRECO]))
    assert second.message == "A diária é R$ 420."
    items = fake.requests[1].json["input"]
    assert items[1] == {k: v for k, v in reasoning_item("gpt-5.4").items()}
    assert items[2]["type"] == "function_call" and items[3]["type"] == "function_call_output"
    answer(fake, text="ok")
    openai(fake, model="gpt-5.6-sol").generate(req(history=round_two(first), prompt="Responda.", tools=[PRECO]))
    assert all(item.get("type") != "reasoning" for item in fake.requests[2].json["input"])


def test_encrypted_reasoning_never_goes_to_chat_completions_or_another_vendor(fake):
    answer(fake, calls=[("call_a", "preco", {"cidade": "Curitiba"})], reasoning=[reasoning_item("gpt-5.4")])
    first = openai(fake).generate(req(tools=[PRECO]))
    for name in ("openai", "openrouter"):
        fake.sse(openai_frame(content="ok"), openai_frame(finish="stop"), "[DONE]")
        openai(fake, name=name, model="gpt-4.1-mini").generate(req(history=round_two(first)))
    assert all("encrypted_content" not in r.raw.decode() for r in fake.requests[1:])


# Errors, refusals, retries ########################################################################

def test_a_streamed_refusal_is_content_after_one_request(fake):
    answer(fake, refusal="I can't help with that.")
    with pytest.raises(ProviderError) as caught:
        openai(fake, backup_models=["gpt-5.6-sol"]).generate(req(tools=[PRECO]))
    assert caught.value.kind == "content" and caught.value.code == "refusal" and len(fake.requests) == 1


@pytest.mark.parametrize("error, kind", [
    ({"code": "server_error", "message": "The server had an error"}, "overload"),
    ({"code": "rate_limit_exceeded", "message": "Rate limit reached"}, "rate"),
    ({"code": "invalid_prompt", "message": "Invalid prompt: flagged as violating our usage policy"}, "content"),
])
def test_a_failed_response_is_classified(fake, error, kind):
    answer(fake, text="parcial", error=error)
    answer(fake, text="parcial", error=error)
    with pytest.raises(ProviderError) as caught:
        openai(fake, retry_config={"timeout": 3000, "retries": 1}).generate(req(tools=[PRECO]))
    assert caught.value.kind == kind
    assert len(fake.requests) == (1 if kind == "content" else 2)


def test_an_error_event_and_an_incomplete_reply(fake):
    fake.sse(json.dumps({"type": "error", "code": "server_error", "message": "boom", "sequence_number": 1}))
    answer(fake, text="ok")
    assert openai(fake).generate(req(tools=[PRECO])).message == "ok"
    answer(fake, text="cortad", status="incomplete", reason="max_output_tokens")
    out = openai(fake).generate(req(tools=[PRECO]))
    assert out.metadata["finishReason"] == "length" and out.metadata["vendorFinishReason"] == "max_output_tokens"


def test_http_errors_retry_and_walk_as_on_chat_completions_and_never_show_the_key(fake, caplog):
    echo = {"error": {"message": f"Incorrect API key provided: {KEY} {json.dumps(KEY)}", "type": "x",
                      "code": "rate_limit_exceeded"}}
    fake.error(429, echo, headers={"retry-after-ms": "5"})
    fake.error(404, {"error": {"message": "The model `gpt-5.4` does not exist", "code": "model_not_found"}})
    answer(fake, model="gpt-5.6-sol", text="ok")
    caplog.set_level(logging.DEBUG)
    out = openai(fake, backup_models=["gpt-5.6-sol"]).generate(req(tools=[PRECO]))
    assert out.message == "ok" and out.metadata["model"] == "gpt-5.6-sol"
    fake.error(401, echo)
    with pytest.raises(ProviderError) as caught:
        openai(fake).generate(req(tools=[PRECO]))
    for text in (str(caught.value), repr(caught.value), caught.value.body or "", caplog.text):
        for form in (KEY, json.dumps(KEY), requests.utils.quote(KEY, safe="")):
            assert form not in text


# Understand calls and codex levels ################################################################

@pytest.mark.parametrize("model, path, level", [
    ("gpt-5.1-codex", "/v1/chat/completions", "low"),       # refuses "none" (review D3)
    ("gpt-5-codex", "/v1/responses", "low"),                # refuses "minimal"
    ("gpt-6-astra", "/v1/chat/completions", "low"),         # refuses "none" and "minimal"
    ("gpt-5.4", "/v1/chat/completions", "none"),
])
def test_the_understand_call_thinks_as_little_as_each_model_allows(fake, model, path, level):
    if path.endswith("responses"):
        answer(fake, model=model, text='{"flows":{}}')
    else:
        fake.sse(openai_frame(content='{"flows":{}}'), openai_frame(finish="stop"), "[DONE]")
    openai(fake, model=model).generate(req(schema=SPEAK, schema_name="understand"))
    body = fake.requests[0].json
    assert fake.requests[0].path == path
    assert (body.get("reasoning_effort") or body["reasoning"]["effort"]) == level


# The strict fake refuses what the Responses API refuses ###########################################

OK = {"model": "gpt-5.4", "input": [{"role": "user", "content": "oi"}], "stream": True, "store": False}
HEADERS = {"authorization": "Bearer k"}
CALL = {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"}
RESULT = {"type": "function_call_output", "call_id": "c1", "output": "1"}


@pytest.mark.parametrize("body, message", [
    ({**OK, "messages": OK["input"]}, "moved to 'input'"),
    ({**OK, "response_format": {"type": "json_object"}}, "moved to 'text.format'"),
    ({**OK, "max_tokens": 100}, "moved to 'max_output_tokens'"),
    ({**OK, "reasoning_effort": "low"}, "moved to 'reasoning.effort'"),
    ({**OK, "foo": 1}, "Unknown parameter: 'foo'"),
    ({**OK, "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}]},
     r"Missing required parameter: 'tools\[0\].name'"),
    ({**OK, "text": {"format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}}},
     "Unknown parameter: 'text.format.json_schema'"),
    ({**OK, "input": [{"role": "tool", "tool_call_id": "c1", "content": "1"}]}, "Unknown parameter"),
    ({**OK, "max_output_tokens": 8}, "Expected a value >= 16"),
    ({**OK, "model": "gpt-4.1-mini", "include": ["reasoning.encrypted_content"]}, "Encrypted content is not"),
    ({**OK, "model": "gpt-5.1-codex", "reasoning": {"effort": "none"}}, "'none' is not supported"),
    ({**OK, "input": [reasoning_item("gpt-5.2"), CALL, RESULT]}, "could not be verified"),
    ({**OK, "input": [{**reasoning_item("gpt-5.4"), "encrypted_content": None}, CALL, RESULT]},
     "could not be verified"),
    ({**OK, "input": [{k: v for k, v in reasoning_item("gpt-5.4").items() if k != "encrypted_content"}, CALL,
                      RESULT]}, "Items are not persisted when `store` is set to false"),
    ({**OK, "input": [reasoning_item("gpt-5.4"), {"role": "user", "content": "oi"}]},
     "without its required following item"),
    ({**OK, "input": [CALL]}, "No tool output found for function call c1"),
])
def test_the_strict_fake_refuses_responses_bodies_the_api_refuses(body, message):
    with pytest.raises(Rejected, match=message):
        check_responses(HEADERS, body)
    check_responses(HEADERS, OK)
    check_responses(HEADERS, {**OK, "input": [reasoning_item("gpt-5.4"), CALL, RESULT]})


def test_an_in_band_error_that_echoes_the_key_is_scrubbed(fake, caplog):
    echo = f"Incorrect API key provided: {KEY}"
    fake.sse(json.dumps({"type": "error", "code": "invalid_api_key", "message": echo, "sequence_number": 1}))
    answer(fake, text="x", error={"code": "server_error", "message": echo})
    caplog.set_level(logging.DEBUG)
    provider = openai(fake, retry_config={"timeout": 3000, "retries": 0})
    for _ in range(2):
        with pytest.raises(ProviderError) as caught:
            provider.generate(req(tools=[PRECO]))
        for text in (str(caught.value), repr(caught.value), caught.value.body or "", caplog.text):
            assert KEY not in text and json.dumps(KEY) not in text
        assert "[redacted]" in str(caught.value)


def test_a_gateway_error_payload_with_a_type_is_still_read_as_chat(fake):
    """A chat-completions gateway may send {"type": "error", "error": {...}} in-band: that is the chat
    reader's in-band error, with the gateway's message, not a Responses event."""
    fake.sse(json.dumps({"type": "error", "error": {"code": 502, "message": "upstream went away"}}))
    with pytest.raises(ProviderError) as caught:
        openai(fake, name="gateway", model="llama3.3", api_key=None,
               retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert "upstream went away" in str(caught.value) and caught.value.kind == "overload"


def test_items_without_deltas_are_read_once_from_done_and_completed(fake):
    """A server that sends each output item only whole (output_item.done, then response.completed with the
    same output): its text and calls count once."""
    message = {"type": "message", "id": "m", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Olá", "annotations": []}]}
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "preco",
            "arguments": '{"cidade":"X"}', "status": "completed"}
    events = [{"type": "response.output_item.done", "output_index": 0, "item": message},
              {"type": "response.output_item.done", "output_index": 1, "item": call},
              {"type": "response.completed", "response": {"object": "response", "status": "completed",
                                                           "output": [message, call]}}]
    fake.sse(*[json.dumps(e) for e in events])
    out = openai(fake).generate(req(tools=[PRECO]))
    assert out.message == "Olá"
    assert [(c.id, c.arguments) for c in out.tool_calls] == [("c1", {"cidade": "X"})]
