"""A real model on a real local server: SmolLM2-135M-Instruct on llama.cpp's llama-server.

Opt-in, like ``live``: the default run deselects them (setup.cfg), ``-m local_model`` selects them.
The fixture serves the model with tests/local_model_server.py (built once, cached in
~/.cache/falai-llama); they skip, with the reason, when the model or the build cannot be had, and
``FALAI_LOCAL_BASE_URL`` (plus ``FALAI_MODEL``) points them at a server already running, and
``FALAI_LOCAL_SERVER`` names its profile in ``SERVER_PROFILES`` (default ``llama.cpp``; the fixture
starts llama-server only, so another profile needs ``FALAI_LOCAL_BASE_URL``). Where a profile says a
server does not do something (usage on a stream), the tests hold it to that instead.

    python tests/local_model_server.py build && python -m pytest -m local_model -s

A 135M model cannot follow falai's protocol (docs/guide/providers.md, "Local models"), so these tests
hold the wire and the reporting to account, not the model's judgement: every reply either works or
fails as the kind it is (a cut at the cap, broken JSON), never as a traceback or a misleading error.
"""
import os

import pytest

from falai import GenerateRequest, ProviderError
from falai_providers import SERVER_PROFILES, OpenAICompatibleProvider
from local_model_server import MODEL_ALIAS, BuildError, model_path, server_binary, start_server

pytestmark = pytest.mark.local_model

# The profile of the server under test: what it takes and what it reports.
SERVER = os.environ.get("FALAI_LOCAL_SERVER") or "llama.cpp"
PROFILE = SERVER_PROFILES.get(SERVER)

FLOWS_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["flows"], "properties": {
    "flows": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "additionalProperties": False, "required": ["id", "score"], "properties": {
            "id": {"type": "string", "enum": ["hospedagem", "cancelar"]},
            "score": {"type": "integer", "minimum": 0, "maximum": 100}}}}}}
SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}}, "required": ["message"],
         "additionalProperties": False}
PRECO = {"name": "preco", "description": "Preço da diária em uma cidade, em reais.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}


@pytest.fixture(scope="session")
def local_server():
    """(base URL, model) of a llama-server serving SmolLM2-135M-Instruct, started for the session."""
    if PROFILE is None:
        pytest.fail(f"FALAI_LOCAL_SERVER is {SERVER!r}: use one of {', '.join(SERVER_PROFILES)}")
    if os.environ.get("FALAI_LOCAL_BASE_URL"):
        yield os.environ["FALAI_LOCAL_BASE_URL"], os.environ.get("FALAI_MODEL", MODEL_ALIAS)
        return
    if SERVER != "llama.cpp":
        pytest.skip(f"FALAI_LOCAL_SERVER={SERVER} needs FALAI_LOCAL_BASE_URL: the fixture starts "
                    "llama-server only")
    try:
        model_path()
        server_binary()
    except BuildError as error:
        pytest.skip(f"the local model cannot be had here: {error}")
    server = start_server()            # built: a server that does not start is a failure
    yield server.base_url, server.model
    server.stop()


def local(local_server, **options):
    base_url, model = local_server
    options.setdefault("server", SERVER)
    options.setdefault("config", {"temperature": 0})
    # One retry: the server closes a keep-alive connection idle for 5 s, so a call after a pause may
    # find its pooled connection gone (a network error, retried at once on a new one).
    options.setdefault("retry_config", {"timeout": 120_000, "retries": 1})
    return OpenAICompatibleProvider(name="local", base_url=base_url, api_key=None, model=model, **options)


def request(prompt, **fields):
    fields.setdefault("system", "Você é o concierge de uma rede de hotéis.")
    return GenerateRequest(prompt=prompt, history=[], **fields)


# llama-cpp-python's grammar leaves an integer's minimum and maximum out (a TODO in its
# llama_grammar.py): under it a score of -2 came back. The engine clamps scores to 0..100 anyway.
BOUNDS_ENFORCED = SERVER != "llama-cpp-python"


def matches_flows_schema(value):
    return (isinstance(value, dict) and set(value) == {"flows"} and len(value["flows"]) <= 2
            and all(set(item) == {"id", "score"} and item["id"] in ("hospedagem", "cancelar")
                    and isinstance(item["score"], int)
                    and (0 <= item["score"] <= 100 or not BOUNDS_ENFORCED) for item in value["flows"]))


# The wire ######################################################################

def test_structured_output_under_the_grammar_is_valid_and_bounded(local_server):
    out = local(local_server).generate(request(
        "Quero reservar um quarto. Quais fluxos servem?", schema=FLOWS_SCHEMA, schema_name="understand"))
    assert matches_flows_schema(out.structured), out.message
    if PROFILE.stream_usage:
        assert out.usage is not None and out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0
    else:                                   # every call without tools is streamed, and the stream has none
        assert out.usage is None
    assert out.metadata["finishReason"] == "stop"


def test_a_provider_with_no_server_named_learns_the_profiles_form(local_server):
    """Left out, ``server`` is learned: after one understand call the provider asks in the form the
    profile names (llama-cpp-python refuses json_schema with a 500 and gets json_object_schema)."""
    provider = local(local_server, server=None)
    out = provider.generate(request("Quero reservar um quarto.", schema=FLOWS_SCHEMA, schema_name="understand"))
    assert matches_flows_schema(out.structured), out.message
    assert provider._structured_form() == PROFILE.structured_output


def test_llama_cpp_pythons_json_object_form_is_enforced_too(local_server):
    """llama-server also reads {"type": "json_object", "schema": ...}: the form a learning provider falls to."""
    out = local(local_server, structured_output="json_object_schema").generate(request(
        "Quero reservar um quarto.", schema=FLOWS_SCHEMA, schema_name="understand"))
    assert matches_flows_schema(out.structured), out.message


def test_streaming_with_usage_and_cached_tokens(local_server):
    provider = local(local_server, config={"temperature": 0, "maxTokens": 24})
    ask = request("Diga olá ao cliente em uma frase curta.")
    first = list(provider.generate_stream(ask))
    second = list(provider.generate_stream(ask))
    for chunks in (first, second):
        final = chunks[-1]
        assert final.done and final.accumulated.strip()
        assert "".join(c.delta for c in chunks[:-1]) == final.accumulated
        if PROFILE.stream_usage:
            assert final.usage is not None and 0 < final.usage.completion_tokens <= 24
        else:
            assert final.usage is None
    if PROFILE.stream_usage:
        assert second[-1].usage.cached_input_tokens > 0      # the same prefix, read from the prompt cache


def test_a_tool_declaration_is_accepted(local_server):
    """tools plus tool_choice "auto" go through; SmolLM2's template has no tool section, so no call comes."""
    provider = local(local_server, output_caps={"default": 64})
    try:
        out = provider.generate(request("Quanto custa a diária em Curitiba?", tools=[PRECO]))
    except ProviderError as error:
        assert error.kind == "length", error          # only the model's own failure, never a refusal
    else:
        assert out.tool_calls or out.message.strip()


# What the small model provokes, reported as what it is ############################

def test_a_reply_cut_at_the_cap_is_a_length_error(local_server):
    provider = local(local_server, output_caps={"speak": 3})
    with pytest.raises(ProviderError) as error:
        provider.generate(request("Conte uma longa história sobre hotéis.", schema=SPEAK, schema_name="speak"))
    assert error.value.kind == "length" and "cut at 3 tokens" in str(error.value)


def test_unenforced_json_fails_only_as_a_cut_or_broken_json(local_server):
    """With the schema in the prompt alone (no grammar), the 135M model writes what it likes: each reply is
    valid JSON, or a reply cut at the cap (length), or text that is not the JSON asked for (overload)."""
    provider = local(local_server, structured_output="prompt", output_caps={"understand": 80},
                     config={"temperature": 0.8})
    seen = []
    for text in ("Quero reservar um quarto.", "Quero cancelar minha reserva.", "Oi!"):
        try:
            out = provider.generate(request(text, schema=FLOWS_SCHEMA, schema_name="understand"))
            seen.append("json" if isinstance(out.structured, dict) else "text")
        except ProviderError as error:
            assert (error.kind == "length" and "was cut at" in str(error)) or (
                error.kind == "overload" and "No response from local" in str(error)), error
            seen.append(error.kind)
    print(f"\nunenforced JSON, 3 replies: {seen}")
    assert len(seen) == 3


def test_the_concierge_for_a_few_turns_without_a_traceback(local_server, capsys):
    """examples/concierge.py's agent and host loop on the real model: whatever it says, each turn ends as a
    result or a one-line provider failure, and no understand reply names a flow the agent does not have."""
    from examples.concierge import DEMO_MESSAGES, Host, build_agent, provider_failure, show

    provider = local(local_server, output_caps={"understand": 200, "speak": 200})
    judged = []
    real_generate = provider.generate

    def generate(ask):
        out = real_generate(ask)
        if ask.schema_name == "understand" and isinstance(out.structured, dict):
            judged.append(out.structured)
        return out

    provider.generate = generate
    host = Host(build_agent(provider), "local")
    lines = []
    for text in DEMO_MESSAGES:
        try:
            show(host.chat(text))
        except ProviderError as error:
            assert error.kind in ("length", "overload"), error        # the model's failures, named
            print(provider_failure(error))
        lines.append(capsys.readouterr().out)
    with capsys.disabled():
        print("\n" + "".join(f"You: {t}\n{out}" for t, out in zip(DEMO_MESSAGES, lines)))
    for reply in judged:
        assert {item["id"] for item in reply.get("flows", [])} <= {"hospedagem"}     # no invented ids
