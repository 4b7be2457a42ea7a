"""OpenAI-compatible local servers (docs/guide/providers.md "Local models"): server profiles, what a
provider learns when a server refuses a parameter, output caps, and a reply cut at the cap.

The fakes answer as the servers were measured: llama-cpp-python[server] 0.3.36 answers a json_schema
response_format with a pydantic 500 and an "auto" tool choice on a stream with an empty event stream;
llama.cpp's llama-server takes json_schema, and without --jinja refuses tools with a 500.
"""
import json
import logging

import pytest

from conftest import req
from falai import ProviderError
from fake_model_server import llama_cpp_python_text_in_tool_round, openai_frame
from falai_providers import DEFAULT_OUTPUT_CAPS, SERVER_PROFILES, OpenAICompatibleProvider

SCHEMA = {"type": "object", "properties": {"reservar": {"type": "boolean"}}, "required": ["reservar"],
          "additionalProperties": False}
PRECO = {"name": "preco", "description": "Preço da diária.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


def local(fake, dialect, **kw):
    fake.chat_dialect = dialect
    kw.setdefault("model", "smollm2-135m-instruct")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 3})
    return OpenAICompatibleProvider(name="local", base_url=fake.url + "/v1", api_key=None, **kw)


def answer(fake, text='{"reservar": true}', finish="stop", usage=None):
    fake.sse(openai_frame(content=text), openai_frame(finish=finish),
             *([json.dumps({"choices": [], "usage": usage})] if usage else []), "[DONE]")


def understand():
    return req(schema=SCHEMA, schema_name="understand")


def warnings_about(caplog, text):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


# Learning the structured-output form ###########################################

def test_llama_cpp_python_500_is_invalid_and_the_provider_falls_back_once(fake, caplog):
    """The 500 that refuses json_schema is not overload: one request, then the next form, kept."""
    provider = local(fake, "llama-cpp-python")
    answer(fake)
    answer(fake)
    out = provider.generate(understand())
    assert out.structured == {"reservar": True}
    assert len(fake.requests) == 2               # no overload retries of the refused form
    assert fake.take_rejections() == [
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
        "'ctx': {'expected': \"'text' or 'json_object'\"}}\n"]
    first, second = (r.json for r in fake.requests)
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert SCHEMA == json.loads(second["messages"][-1]["content"].rsplit("\n", 1)[1])   # and in the prompt
    told = warnings_about(caplog, "refused")
    assert len(told) == 1 and 'structured_output="json_object_schema"' in told[0] and fake.url in told[0]
    provider.generate(understand())              # remembered: the next call asks the kept form at once
    assert fake.requests[2].json["response_format"]["type"] == "json_object"
    assert len(warnings_about(caplog, "refused")) == 1


def test_learning_is_per_provider_object(fake):
    first = local(fake, "llama-cpp-python")
    answer(fake)
    answer(fake)
    first.generate(understand())
    fake.take_rejections()
    second = local(fake, "llama-cpp-python")
    answer(fake)
    second.generate(req(schema=SCHEMA, schema_name="speak"))
    fake.take_rejections()
    assert fake.requests[-1].json["response_format"]["type"] == "json_object"   # it learned on its own
    assert [r.json["response_format"]["type"] for r in fake.requests] == \
        ["json_schema", "json_object", "json_schema", "json_object"]


def test_a_server_that_refuses_every_form_ends_with_the_schema_in_the_prompt(fake, caplog):
    """json_schema, then json_object with the schema, then the prompt alone; then it stops."""
    provider = local(fake, "generic")
    refusal = {"error": {"message": "response_format is not supported", "type": "invalid_request_error"}}
    fake.error(400, refusal)
    fake.error(400, refusal)
    answer(fake)
    assert provider.generate(understand()).structured == {"reservar": True}
    assert [r.json.get("response_format", {}).get("type") for r in fake.requests] == \
        ["json_schema", "json_object", None]
    assert "JSON Schema" in fake.requests[2].json["messages"][-1]["content"]
    assert len(warnings_about(caplog, "refused")) == 2
    fake.error(400, refusal)                     # the prompt form refused too: nothing left to learn
    with pytest.raises(ProviderError) as error:
        provider.generate(understand())
    assert error.value.kind == "invalid" and len(fake.requests) == 4


def test_a_chosen_form_or_server_is_kept_and_the_refusal_is_invalid(fake):
    for options in ({"structured_output": "json_schema"}, {"server": "llama.cpp"}):
        provider = local(fake, "llama-cpp-python", **options)
        before = len(fake.requests)
        with pytest.raises(ProviderError) as error:
            provider.generate(understand())
        assert error.value.kind == "invalid" and error.value.status == 500
        assert error.value.code == "response_format" and "Input should be 'text' or 'json_object'" in str(error.value)
        assert len(fake.requests) == before + 1          # one request: never retried as overload
        fake.take_rejections()


def test_an_unrelated_500_is_still_overload(fake):
    provider = local(fake, "llama.cpp", retry_config={"timeout": 3000, "retries": 1})
    fake.error(500, {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}})
    answer(fake)
    assert provider.generate(understand()).structured == {"reservar": True}
    assert len(fake.requests) == 2 and fake.requests[1].json["response_format"]["type"] == "json_schema"


# Tool rounds on local servers ################################################

def test_tool_choice_auto_rides_with_the_tools(fake):
    provider = local(fake, "llama.cpp")
    answer(fake, "olá")
    provider.generate(req(tools=[PRECO]))
    sent = fake.requests[0].json
    assert sent["tool_choice"] == "auto" and sent["tools"][0]["function"]["name"] == "preco"
    assert sent["stream"] is True
    answer(fake, "olá")
    provider.generate(req())
    assert "tool_choice" not in fake.requests[1].json


def test_tool_choice_auto_is_accepted_by_openai(fake):
    fake.chat_dialect = "openai"
    provider = OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini", base_url=fake.url + "/v1",
                                        sleep=lambda s: None)
    answer(fake, "olá")
    provider.generate(req(tools=[PRECO]))
    assert fake.requests[0].json["tool_choice"] == "auto"


def test_llama_cpp_python_profile_runs_a_tool_round_whole(fake):
    """It cannot stream an "auto" tool choice, so a round with tools is one non-streaming request."""
    provider = local(fake, "llama-cpp-python", server="llama-cpp-python")
    assert provider.capabilities.supports_streaming_tool_calls is False
    fake.json({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
               "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                           "function": {"name": "preco", "arguments": "{\"cidade\": \"Curitiba\"}"}}]}}],
               "usage": {"prompt_tokens": 216, "completion_tokens": 20, "total_tokens": 236}})
    chunks = list(provider.generate_stream(req(tools=[PRECO], schema=SCHEMA, schema_name="speak")))
    final = chunks[-1]
    assert final.done and final.tool_calls[0].name == "preco"
    assert final.tool_calls[0].arguments == {"cidade": "Curitiba"} and final.usage.prompt_tokens == 216
    sent = fake.requests[0].json
    assert sent["stream"] is False and "stream_options" not in sent and sent["tool_choice"] == "auto"
    assert sent["response_format"] == {"type": "json_object", "schema": SCHEMA}
    answer(fake)
    provider.generate(understand())                 # no tools: it streams, with no stream_options (ignored)
    assert fake.requests[1].json["stream"] is True and "stream_options" not in fake.requests[1].json


def tool_call_reply(fake):
    fake.json({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
               "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                           "function": {"name": "preco", "arguments": "{\"cidade\": \"Curitiba\"}"}}]}}]})


def test_an_unknown_server_that_cannot_stream_a_tool_round_gets_it_whole(fake, caplog):
    """llama-cpp-python without its profile answers a streamed "auto" tool round with an empty stream:
    the provider tries the round once more whole, on a new connection (the server answers nothing
    more on that one), and keeps sending tool rounds whole."""
    provider = local(fake, "llama-cpp-python", structured_output="json_object_schema",
                     retry_config={"timeout": 3000, "retries": 1})
    tool_call_reply(fake)
    out = provider.generate(req(tools=[PRECO]))
    assert out.tool_calls[0].arguments == {"cidade": "Curitiba"}
    assert fake.take_rejections() == ["Automatic streaming tool choice is not supported"]
    assert [r.json["stream"] for r in fake.requests] == [True, False] and fake.dropped == 0
    told = warnings_about(caplog, "streamed tool round")
    assert len(told) == 1 and 'server="llama-cpp-python"' in told[0]
    tool_call_reply(fake)
    provider.generate(req(tools=[PRECO]))
    answer(fake, "olá")
    provider.generate(req())
    assert [r.json["stream"] for r in fake.requests] == [True, False, False, True]


def test_llama_cpp_python_tool_round_answered_in_text_is_asked_again_without_the_tools(fake, caplog):
    """Its chatml-function-calling format loses the text of a tool round the model answers in text
    (an empty reply, finish "stop"): one more request, with no tools, brings the text; no overload."""
    provider = local(fake, "llama-cpp-python", server="llama-cpp-python")
    fake.json(llama_cpp_python_text_in_tool_round())
    answer(fake, "A diária em Curitiba custa R$ 200.")
    out = provider.generate(req(tools=[PRECO]))
    assert out.message == "A diária em Curitiba custa R$ 200." and not out.tool_calls
    first, second = (r.json for r in fake.requests)
    assert first["stream"] is False and first["tool_choice"] == "auto" and first["tools"]
    assert second["stream"] is True and "tools" not in second and "tool_choice" not in second
    assert second["messages"] == first["messages"] and "stream_options" not in second
    assert not warnings_about(caplog, "failed")


def test_the_text_asked_again_streams_and_keeps_the_speak_schema(fake):
    provider = local(fake, "llama-cpp-python", server="llama-cpp-python")
    fake.json(llama_cpp_python_text_in_tool_round())
    answer(fake, '{"reservar": false}')
    chunks = list(provider.generate_stream(req(tools=[PRECO], schema=SCHEMA, schema_name="speak")))
    assert chunks[-1].structured == {"reservar": False} and chunks[0].delta == '{"reservar": false}'
    assert [r.json["response_format"] for r in fake.requests] == [{"type": "json_object", "schema": SCHEMA}] * 2
    assert "tools" not in fake.requests[1].json


def test_a_text_that_stays_empty_is_still_overload_and_retried(fake):
    provider = local(fake, "llama-cpp-python", server="llama-cpp-python",
                     retry_config={"timeout": 3000, "retries": 0})
    fake.json(llama_cpp_python_text_in_tool_round())
    fake.sse(openai_frame(finish="stop"), "[DONE]")
    with pytest.raises(ProviderError) as error:
        provider.generate(req(tools=[PRECO]))
    assert error.value.kind == "overload" and len(fake.requests) == 2


def test_a_server_that_keeps_the_text_gets_no_second_request(fake):
    provider = local(fake, "llama.cpp", server="llama.cpp", retry_config={"timeout": 3000, "retries": 0})
    fake.sse(openai_frame(finish="stop"), "[DONE]")
    with pytest.raises(ProviderError) as error:
        provider.generate(req(tools=[PRECO]))
    assert error.value.kind == "overload" and len(fake.requests) == 1


def test_a_learned_llama_cpp_python_asks_again_for_the_lost_text_too(fake):
    provider = local(fake, "llama-cpp-python", structured_output="json_object_schema")
    fake.json(llama_cpp_python_text_in_tool_round())
    answer(fake, "olá")
    out = provider.generate(req(tools=[PRECO]))      # an empty stream, then whole, then without tools
    assert out.message == "olá"
    assert fake.take_rejections() == ["Automatic streaming tool choice is not supported"]
    assert [(r.json["stream"], "tools" in r.json) for r in fake.requests] == [
        (True, True), (False, True), (True, False)]


def test_an_empty_stream_without_tools_is_still_overload(fake):
    provider = local(fake, "generic", retry_config={"timeout": 3000, "retries": 0})
    fake.sse("[DONE]")
    with pytest.raises(ProviderError) as error:
        provider.generate(req())
    assert error.value.kind == "overload" and len(fake.requests) == 1


def test_a_refused_tool_choice_is_dropped_once_and_remembered(fake, caplog):
    provider = local(fake, "generic")
    fake.error(400, {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                          "--tool-call-parser to be set", "type": "BadRequestError", "code": 400}})
    answer(fake, "olá")
    answer(fake, "olá")
    assert provider.generate(req(tools=[PRECO])).message == "olá"
    provider.generate(req(tools=[PRECO]))
    assert [("tool_choice" in r.json) for r in fake.requests] == [True, False, False]
    assert len(warnings_about(caplog, "tool_choice")) == 1


def test_refused_stream_options_are_dropped(fake, caplog):
    provider = local(fake, "generic")
    fake.error(400, {"error": {"message": "stream_options: Extra inputs are not permitted"}})
    answer(fake, "olá")
    assert provider.generate(req()).message == "olá"
    assert "stream_options" in fake.requests[0].json and "stream_options" not in fake.requests[1].json
    assert "include_usage=False" in warnings_about(caplog, "stream_options")[0]


def test_llama_server_without_jinja_refuses_tools_as_invalid(fake):
    provider = local(fake, "llama.cpp-no-jinja")
    with pytest.raises(ProviderError) as error:
        provider.generate(req(tools=[PRECO]))
    assert error.value.kind == "invalid" and "--jinja" in str(error.value) and len(fake.requests) == 1
    fake.take_rejections()


def test_every_profile_is_a_valid_choice(fake):
    for server, profile in SERVER_PROFILES.items():
        provider = local(fake, "generic", server=server)
        assert provider.structured_output == profile.structured_output
    with pytest.raises(ValueError, match="server is 'llamacpp'"):
        local(fake, "generic", server="llamacpp")


# Output caps ##################################################################

def test_default_output_cap_per_call_kind(fake):
    provider = local(fake, "llama.cpp")
    for kind in ("understand", "speak", None):
        answer(fake)
        provider.generate(req(schema=SCHEMA, schema_name=kind))
    assert [r.json["max_tokens"] for r in fake.requests] == [1024, 4096, 4096]
    assert DEFAULT_OUTPUT_CAPS == {"understand": 1024, "speak": 4096, "default": 4096}


def test_output_caps_are_settable_and_yield_to_config_and_the_call(fake):
    answer(fake)
    local(fake, "llama.cpp", output_caps={"understand": 200, "speak": None}).generate(understand())
    answer(fake)
    local(fake, "llama.cpp", output_caps={"speak": None}).generate(req(schema=SCHEMA, schema_name="speak"))
    answer(fake)
    local(fake, "llama.cpp", config={"maxTokens": 77}).generate(understand())
    answer(fake)
    local(fake, "llama.cpp").generate(req(schema=SCHEMA, schema_name="understand", max_output_tokens=33))
    assert [r.json.get("max_tokens") for r in fake.requests] == [200, None, 77, 33]
    with pytest.raises(ValueError, match='output_caps\\["speak"\\] is 0'):
        local(fake, "llama.cpp", output_caps={"speak": 0})


# A reply cut at the cap #######################################################

def test_a_json_reply_cut_at_the_cap_is_a_length_error_with_the_numbers(fake):
    provider = local(fake, "llama.cpp", output_caps={"understand": 300})
    answer(fake, '{"flows":[{"id": "c_2140072458706104909', finish="length",
           usage={"prompt_tokens": 191, "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 0}})
    with pytest.raises(ProviderError) as error:
        provider.generate(understand())
    assert error.value.kind == "length" and error.value.code == "length"
    assert "the reply was cut at 300 tokens" in str(error.value) and "output_caps" in str(error.value)
    assert len(fake.requests) == 1                      # not retried: the same request loops the same way


def test_an_empty_reply_cut_at_the_cap_is_a_length_error(fake):
    provider = local(fake, "llama.cpp", config={"maxTokens": 50})
    fake.sse(openai_frame(finish="length"), "[DONE]")
    with pytest.raises(ProviderError) as error:
        provider.generate(req())
    assert error.value.kind == "length" and "cut at 50 tokens" in str(error.value)


def test_plain_text_cut_at_the_cap_is_still_the_reply(fake):
    provider = local(fake, "llama.cpp")
    answer(fake, "Em uma frase", finish="length")
    out = provider.generate(req())
    assert out.message == "Em uma frase" and out.metadata["finishReason"] == "length"


def test_a_broken_json_reply_says_so(fake):
    """A complete reply (finish "stop") that is not the JSON asked for: no response, and the message says why."""
    provider = local(fake, "llama.cpp", retry_config={"timeout": 3000, "retries": 0})
    answer(fake, '{"type":"object","properties":{\n    "types":[')
    with pytest.raises(ProviderError) as error:
        provider.generate(understand())
    assert error.value.kind == "overload" and "not the JSON object asked for (45 chars" in str(error.value)
