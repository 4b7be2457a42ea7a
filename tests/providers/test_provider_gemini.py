"""GeminiProvider against the local fake server (providers.md §4, §9.5 "Gemini")."""
import json

import pytest

from conftest import req
from falai import ProviderError, ToolCallRequest
from falai_providers import GeminiProvider, schema_prompt
from fake_model_server import gemini_frame

SPEAK = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
         "required": ["message"], "additionalProperties": False}
PRECO = {"name": "preco", "description": "Preço da diária em uma cidade.",
         "parameters": {"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]}}
OVERLOADED = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}


def gemini(fake, model="models/gemini-3.8-flash", **kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    return GeminiProvider(api_key="test-key", model=model, base_url=fake.url, **kw)


def ok(fake, text="ok"):
    fake.sse(gemini_frame(text=text, finish="STOP"))


# Request shape (§4.2-§4.4) #####################################################

def test_text_reply_wire_and_usage(fake):
    """providers.md §4.2-§4.3, §4.8: path, alt=sse, key header, models/ stripped, system instruction,
    prompt last, JSON mode, structured reply and usage with cached tokens."""
    fake.sse(gemini_frame(text='{"message":"Ol'),
             gemini_frame(text='á!"}', finish="STOP", usage=(812, 9, 512)))
    out = gemini(fake).generate(req(system="SYSTEM", history=[{"role": "user", "content": "oi"}],
                                    schema=SPEAK, schema_name="speak"))
    sent = fake.requests[0]
    assert sent.method == "POST"
    assert sent.path == "/v1beta/models/gemini-3.8-flash:streamGenerateContent"
    assert sent.query == {"alt": "sse"}
    assert sent.headers["x-goog-api-key"] == "test-key"
    assert sent.headers["content-type"] == "application/json"
    assert "test-key" not in sent.path and "key" not in sent.query and b"test-key" not in sent.raw
    assert sent.json["systemInstruction"] == {"parts": [{"text": "SYSTEM"}]}
    assert sent.json["contents"] == [{"role": "user", "parts": [{"text": "oi"}]},
                                     {"role": "user", "parts": [{"text": "PROMPT"}]}]
    assert sent.json["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": SPEAK}
    assert "tools" not in sent.json and "toolConfig" not in sent.json and "safetySettings" not in sent.json
    assert out.structured == {"message": "Olá!"} and out.message == '{"message":"Olá!"}'
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_input_tokens) == (812, 9, 512)
    assert out.metadata == {"provider": "gemini", "model": "gemini-3.8-flash", "finishReason": "stop",
                            "vendorFinishReason": "STOP", "tokensUsed": 821}


def test_full_speak_round_body_matches_the_spec_example(fake):
    """providers.md §4.3: the worked example of a speak round with one earlier tool round, field by field
    (a Gemini 3 id, since the example carries a schema and tools together, §4.5)."""
    ok(fake, '{"message":"A diária é R$ 420."}')
    history = [
        {"role": "user", "content": "Quero um quarto em Curitiba"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "Curitiba"},
                         "thoughtSignature": "CiQB...opaque..."}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "{\"precoNoite\":420}"},
    ]
    gemini(fake, model="gemini-3-flash-preview", config={"maxTokens": 1024}).generate(req(
        system="Você é Ana, atendente da Pousada Sol. ...",
        prompt="## Flow\nHospedagem\n## Guideline for your reply ...",
        history=history, schema=SPEAK, schema_name="speak", tools=[PRECO]))
    assert fake.requests[0].json == {
        "systemInstruction": {"parts": [{"text": "Você é Ana, atendente da Pousada Sol. ..."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Quero um quarto em Curitiba"}]},
            {"role": "model", "parts": [
                {"functionCall": {"id": "call-0-0", "name": "preco", "args": {"cidade": "Curitiba"}},
                 "thoughtSignature": "CiQB...opaque..."}]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "call-0-0", "name": "preco", "response": {"precoNoite": 420}}}]},
            {"role": "user", "parts": [{"text": "## Flow\nHospedagem\n## Guideline for your reply ..."}]},
        ],
        "tools": [{"functionDeclarations": [{
            "name": "preco", "description": "Preço da diária em uma cidade.",
            "parametersJsonSchema": {"type": "object", "properties": {"cidade": {"type": "string"}},
                                     "required": ["cidade"]}}]}],
        "generationConfig": {"maxOutputTokens": 1024, "responseMimeType": "application/json",
                             "responseJsonSchema": SPEAK},
    }


def test_system_instruction_joins_system_and_system_items(fake):
    """providers.md §2.4 / §4.4 rule 1: every system text, in order, joined with a blank line."""
    ok(fake)
    gemini(fake).generate(req(system="A", history=[{"role": "system", "content": "B"},
                                                   {"role": "user", "content": "oi"},
                                                   {"role": "system", "content": "C"}]))
    body = fake.requests[0].json
    assert body["systemInstruction"] == {"parts": [{"text": "A\n\nB\n\nC"}]}
    assert [c["role"] for c in body["contents"]] == ["user", "user"]


def test_blank_system_is_absent_and_generation_config_is_always_sent(fake):
    """providers.md §1.3: whitespace-only system counts as absent; §4.3: generationConfig is always sent."""
    ok(fake)
    gemini(fake).generate(req(system="  \n"))
    body = fake.requests[0].json
    assert "systemInstruction" not in body and body["generationConfig"] == {}


def test_roles_and_assistant_text_with_calls(fake):
    """providers.md §4.4 rules 2-3: user → user, assistant → model with a text part first; an empty
    assistant message is omitted; unknown roles are skipped (§2.1)."""
    ok(fake)
    history = [
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": "Olá!"},
        {"role": "assistant", "content": ""},
        {"role": "narrator", "content": "ignored"},
        {"role": "user", "content": "preço?"},
        {"role": "assistant", "content": "Vou ver.",
         "tool_calls": [{"id": "call-0-0", "name": "preco", "arguments": {"cidade": "X"}},
                        {"id": "call-0-1", "name": "preco", "arguments": {"cidade": "Y"}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "preco", "content": "R$ 420"},
        {"role": "tool", "tool_call_id": "call-0-1", "name": "preco", "content": [1, 2]},
    ]
    gemini(fake).generate(req(history=history))
    contents = fake.requests[0].json["contents"]
    assert contents == [
        {"role": "user", "parts": [{"text": "oi"}]},
        {"role": "model", "parts": [{"text": "Olá!"}]},
        {"role": "user", "parts": [{"text": "preço?"}]},
        {"role": "model", "parts": [
            {"text": "Vou ver."},
            {"functionCall": {"id": "call-0-0", "name": "preco", "args": {"cidade": "X"}}},
            {"functionCall": {"id": "call-0-1", "name": "preco", "args": {"cidade": "Y"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call-0-0", "name": "preco", "response": {"output": "R$ 420"}}},
            {"functionResponse": {"id": "call-0-1", "name": "preco", "response": {"output": [1, 2]}}}]},
        {"role": "user", "parts": [{"text": "PROMPT"}]},
    ]


def test_function_call_args_and_response_are_always_objects(fake):
    """providers.md §4.4 rules 3-4: non-object args are wrapped as {"value": v}; unparseable args are
    salvaged; a dict tool content is sent as is; a JSON scalar becomes {"output": v}."""
    ok(fake)
    history = [
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "name": "t", "arguments": "[1]"},
            {"id": "b", "name": "t", "arguments": '{"q": "trunc'},
            {"id": "c", "name": "t", "arguments": ""}]},
        {"role": "tool", "tool_call_id": "a", "name": "t", "content": {"ok": True}},
        {"role": "tool", "tool_call_id": "b", "name": "t", "content": "42"},
        {"role": "tool", "tool_call_id": "c", "name": "t", "content": "{broken"},
    ]
    gemini(fake).generate(req(history=history))
    model, answers = fake.requests[0].json["contents"][1:3]
    assert [p["functionCall"]["args"] for p in model["parts"]] == [{"value": [1]}, {"q": "trunc"}, {}]
    assert [p["functionResponse"]["response"] for p in answers["parts"]] == \
        [{"ok": True}, {"output": 42}, {"output": "{broken"}]


def test_the_final_prompt_stays_its_own_content_after_tool_responses(fake):
    """providers.md §4.4 rule 6: nothing else is merged; the prompt is its own user content."""
    ok(fake)
    gemini(fake).generate(req(history=[
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "name": "t", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "a", "name": "t", "content": "x"}]))
    contents = fake.requests[0].json["contents"]
    assert len(contents) == 4 and contents[-1] == {"role": "user", "parts": [{"text": "PROMPT"}]}
    assert "functionResponse" in contents[-2]["parts"][0]


def test_reasoning_of_earlier_rounds_is_not_replayed(fake):
    """providers.md §4.4 rule 7: only thought signatures travel back, never reasoning text."""
    ok(fake)
    gemini(fake).generate(req(history=[
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": None, "reasoning": "SECRET THOUGHTS", "reasoningDetails": [{"x": 1}],
         "tool_calls": [{"id": "a", "name": "t", "arguments": {}, "thoughtSignature": "sig"}]},
        {"role": "tool", "tool_call_id": "a", "name": "t", "content": "x"}]))
    raw = fake.requests[0].raw.decode()
    assert "SECRET THOUGHTS" not in raw and '"thoughtSignature":"sig"' in raw


def test_unsigned_calls_in_the_current_turn_get_the_placeholder_on_gemini_3(fake):
    """providers.md §4.7 rule 4 (inferred): when contents end with calls after the last plain user text
    (here an empty prompt, which is left out), the first call of each model content gets Google's
    documented placeholder; signed calls and earlier turns are untouched."""
    ok(fake)
    ok(fake)
    history = [
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "name": "t", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "a", "name": "t", "content": "x"},
        {"role": "user", "content": "e agora?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "b", "name": "t", "arguments": {}},
                                                             {"id": "c", "name": "t", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "b", "name": "t", "content": "x"},
        {"role": "tool", "tool_call_id": "c", "name": "t", "content": "y"},
    ]
    gemini(fake, model="gemini-3-pro-preview").generate(req(history=history, prompt=""))
    contents = fake.requests[0].json["contents"]
    assert contents[-1]["parts"][0]["functionResponse"]["id"] == "b"
    assert "thoughtSignature" not in contents[1]["parts"][0]
    current = contents[4]["parts"]
    assert current[0]["thoughtSignature"] == "skip_thought_signature_validator"
    assert "thoughtSignature" not in current[1]
    gemini(fake, model="gemini-2.5-flash").generate(req(history=history, prompt=""))
    assert "thoughtSignature" not in json.dumps(fake.requests[1].json)


def test_tool_declarations_use_parameters_json_schema_and_default_object(fake):
    """providers.md §3.1 / §4.3: wire name is name or id; a missing description is ""; missing
    parameters become {"type": "object"}; schemas are sent as written."""
    ok(fake)
    gemini(fake).generate(req(tools=[PRECO, {"id": "agora"}, {"description": "nameless"}]))
    assert fake.requests[0].json["tools"] == [{"functionDeclarations": [
        {"name": "preco", "description": "Preço da diária em uma cidade.",
         "parametersJsonSchema": PRECO["parameters"]},
        {"name": "agora", "description": "", "parametersJsonSchema": {"type": "object"}}]}]


def test_generation_config_from_config_and_per_call_max_tokens(fake):
    """providers.md §3.1 step 2 / §4.3: config defaults, max_output_tokens overrides maxTokens; empty
    stopSequences are not sent."""
    ok(fake)
    ok(fake)
    provider = gemini(fake, config={"temperature": 0.3, "topP": 0.9, "maxTokens": 1000, "stopSequences": ["FIM"]})
    provider.generate(req(max_output_tokens=77))
    assert fake.requests[0].json["generationConfig"] == {"maxOutputTokens": 77, "temperature": 0.3, "topP": 0.9,
                                                         "stopSequences": ["FIM"]}
    gemini(fake, config={"stopSequences": []}).generate(req())
    assert fake.requests[1].json["generationConfig"] == {}


@pytest.mark.parametrize("model, effort, expected", [
    ("gemini-3-flash-preview", "none", {"thinkingLevel": "MINIMAL"}),
    ("gemini-3-flash-preview", "low", {"thinkingLevel": "LOW"}),
    ("gemini-3-flash-preview", "medium", {"thinkingLevel": "MEDIUM"}),
    ("gemini-3-flash-preview", "high", {"thinkingLevel": "HIGH"}),
    ("gemini-3-flash-preview", "max", {"thinkingLevel": "HIGH"}),
    # issue 7: 3.7+ Flash and the 3.x Pro models refuse MINIMAL; "none" is their lowest level.
    ("gemini-3.8-flash", "none", {"thinkingLevel": "LOW"}),
    ("gemini-3.7-flash", "none", {"thinkingLevel": "LOW"}),
    ("gemini-3.6-flash", "none", {"thinkingLevel": "LOW"}),
    ("gemini-3.1-pro-preview", "none", {"thinkingLevel": "LOW"}),
    ("gemini-3.5-flash-lite", "none", {"thinkingLevel": "MINIMAL"}),
    ("gemini-3-pro-preview", "medium", {"thinkingLevel": "HIGH"}),     # 3 Pro takes LOW and HIGH only
    ("gemini-3.8-flash", "max", {"thinkingLevel": "HIGH"}),
    ("gemini-2.5-flash", "none", {"thinkingBudget": 0}),
    ("gemini-2.5-pro", "none", {"thinkingBudget": 128}),
    ("gemini-2.5-flash-lite", "none", {"thinkingBudget": 0}),
    ("gemini-2.5-flash", "low", {"thinkingBudget": 1024}),
    ("gemini-2.5-flash", "medium", {"thinkingBudget": 8192}),
    ("gemini-2.5-flash", "high", {"thinkingBudget": 24576}),
    ("gemini-2.5-pro", "max", {"thinkingBudget": 24576}),
])
def test_thinking_config_for_each_effort(fake, model, effort, expected):
    """providers.md §4.6 and the capability table (issue 7): thinkingLevel on Gemini 3.x, one the model
    accepts; thinkingBudget on 2.x, within the model's range; never both. The strict fake refuses a level or
    budget the model does not take, as the live API does."""
    ok(fake)
    gemini(fake, model=model).generate(req(effort=effort))
    assert fake.requests[0].json["generationConfig"]["thinkingConfig"] == expected


@pytest.mark.parametrize("model", ["gemini-3.8-flash", "gemini-3.7-flash", "gemini-3.1-pro-preview"])
def test_the_default_understand_call_is_accepted_by_current_models(fake, model):
    """Issue 7 (the worst one): the understand call sent thinkingLevel MINIMAL by default, which 3.7+ Flash
    and 3.x Pro answer with a 400; now it sends the lowest level the model takes and the call succeeds."""
    ok(fake, '{"flows":{}}')
    out = gemini(fake, model=model).generate(req(schema={"type": "object"}, schema_name="understand"))
    assert out.structured == {"flows": {}}
    assert fake.requests[0].json["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "LOW"}


def test_the_strict_fake_answers_minimal_on_3_8_flash_with_googles_400(fake):
    """Issue 7 item 10: the strict fake refuses what the vendor refuses, with the vendor's own body; the
    provider reads that 400 as kind invalid (not retried), which is why the table must get it right."""
    provider = gemini(fake, model="gemini-3.8-flash", model_caps={"gemini-3.8-flash": {"levels": ("MINIMAL",)}})
    with pytest.raises(ProviderError) as caught:
        provider.generate(req(effort="none"))
    assert fake.take_rejections() == ["Thinking level MINIMAL is not supported for this model."]
    assert caught.value.kind == "invalid" and caught.value.status == 400 and len(fake.requests) == 1
    assert json.loads(caught.value.body)["error"]["status"] == "INVALID_ARGUMENT"


def test_an_unknown_gemini_model_gets_no_thinking_config_and_the_schema_in_the_prompt(fake, caplog):
    """Issue 7 item 1: a model the capability table does not know gets the conservative choice: no
    thinkingConfig even with an effort set, no sampling, and no JSON mode beside tools."""
    ok(fake, '{"message":"ok"}')
    gemini(fake, model="gemini-9-flash", config={"temperature": 0.2, "effort": "high"}).generate(
        req(schema=SPEAK, tools=[PRECO]))
    config = fake.requests[0].json["generationConfig"]
    assert config == {}
    assert fake.requests[0].json["systemInstruction"] == {"parts": [{"text": schema_prompt(SPEAK)}]}
    assert "gemini-9-flash" in caplog.text and "model_caps" in caplog.text


def test_model_caps_overrides_a_row(fake):
    """Issue 7 item 1: a user can override a row through the provider's options."""
    ok(fake)
    gemini(fake, model="gemini-3.8-flash", model_caps={"gemini-3.8-*": {"levels": ["HIGH"]}}).generate(
        req(effort="low"))
    assert fake.requests[0].json["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "HIGH"}


@pytest.mark.parametrize("caps, fix", [("x", "must be a dict"), ({"g*": {"speed": 1}}, "unknown field(s) speed"),
                                       ({"g*": {"sampling": "some"}}, '"any", "one" or "none"')])
def test_bad_model_caps_raise_at_construction(fake, caps, fix):
    with pytest.raises(ValueError, match="model_caps") as caught:
        gemini(fake, model_caps=caps)
    assert fix in str(caught.value)


def test_no_thinking_config_without_effort(fake):
    """providers.md §4.6 / §3.10: absent effort sends nothing (the model's default)."""
    ok(fake)
    gemini(fake).generate(req(schema=SPEAK, schema_name="speak"))
    assert "thinkingConfig" not in fake.requests[0].json["generationConfig"]


def test_config_effort_applies_and_the_call_effort_overrides_it(fake):
    """providers.md §3.1 step 2: config["effort"], then the request's effort."""
    ok(fake)
    ok(fake)
    provider = gemini(fake, model="gemini-2.5-flash", config={"effort": "none"})
    provider.generate(req(schema_name="speak"))
    provider.generate(req(schema_name="speak", effort="high"))
    assert fake.requests[0].json["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 0}
    assert fake.requests[1].json["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 24576}


def test_the_understand_call_thinks_as_little_as_the_model_allows(fake):
    """Issue 7 item 2: an understand call with no effort set gets the lowest thinking the model accepts
    (budget 0 on 2.5 Flash, MINIMAL on 3 Flash, LOW on 3.8 Flash); a configured effort wins;
    understand_effort=None sends nothing; models with no thinking control, or unknown, get nothing."""
    for _ in range(7):
        ok(fake)
    gemini(fake, model="gemini-2.5-flash").generate(req(schema_name="understand"))
    gemini(fake, model="gemini-3-flash-preview").generate(req(schema_name="understand"))
    gemini(fake).generate(req(schema_name="understand"))
    gemini(fake, config={"effort": "medium"}).generate(req(schema_name="understand"))
    gemini(fake, understand_effort=None).generate(req(schema_name="understand"))
    gemini(fake, model="gemini-2.0-flash").generate(req(schema_name="understand"))
    gemini(fake, model="gemini-9-flash").generate(req(schema_name="understand"))
    configs = [r.json["generationConfig"].get("thinkingConfig") for r in fake.requests]
    assert configs == [{"thinkingBudget": 0}, {"thinkingLevel": "MINIMAL"}, {"thinkingLevel": "LOW"},
                       {"thinkingLevel": "MEDIUM"}, None, None, None]


# Structured output (§4.5) ######################################################

def test_a_lean_conversation_keeps_everything_but_the_new_turn_byte_identical_on_the_wire(fake):
    """docs/guide/tokens.md "Measured": a lean agent's calls of one kind send the same
    systemInstruction, tools and generationConfig (its response schema) every time, and contents
    that only grow: the history is appended to and only the last content, the turn's prompt, is
    new. So whether Gemini reads the schema before the contents (a changed schema defeats the
    implicit cache of the same contents, googleapis/python-genai#1148) or after them, nothing but
    the new turn and, at worst, the schema is left out of the cached prefix."""
    from request_bodies import triage_agent
    replies = [('{"flows":[{"id":"triagem","score":95}],"fields":["nome: Ana"]}',
                '{"message":"Oi Ana! De qual empresa você fala?","fields":[]}'),
               ('{"flows":[{"id":"triagem","score":90}],"fields":["empresa: Acme"]}',
                '{"message":"Quantas pessoas trabalham na Acme?","fields":[]}'),
               ('{"flows":[{"id":"triagem","score":90}],"fields":["porte: 11-50"]}', None)]
    agent = triage_agent(gemini(fake), protocol="lean")
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"mensagem antiga {i}"}
               for i in range(6)]
    session = None
    messages = ["oi, quero saber como funciona, sou a Ana", "da Acme", "umas 30"]
    for n, (message, (understand, speak)) in enumerate(zip(messages, replies, strict=True)):
        ok(fake, understand)
        if speak is not None:
            ok(fake, speak)
        result = agent.turn(session_id="t", session=session, message=message, id=f"m{n}",
                            history=list(history))
        session = result.session
        history += [{"role": "user", "content": message}] + [
            {"role": "assistant", "content": m.text} for m in result.messages]
    assert session.data == {"nome": "Ana", "empresa": "Acme", "porte": "11-50"}
    bodies = [r.json for r in fake.requests]
    kinds = {"understand": [b for b in bodies if "flows" in json.dumps(b["generationConfig"])],
             "speak": [b for b in bodies if '"message"' in json.dumps(b["generationConfig"])]}
    assert (len(kinds["understand"]), len(kinds["speak"])) == (3, 2)
    for kind, calls in kinds.items():
        for key in ("systemInstruction", "tools", "generationConfig"):
            assert len({json.dumps(b.get(key), sort_keys=True) for b in calls}) == 1, (kind, key)
        assert calls[0]["generationConfig"]["responseMimeType"] == "application/json"
        for before, after in zip(calls, calls[1:]):
            assert after["contents"][:len(before["contents"]) - 1] == before["contents"][:-1]
            assert after["contents"][-1] != before["contents"][-1]
    assert "tools" not in kinds["understand"][0] and "tools" in kinds["speak"][0]


def test_schema_with_tools_on_gemini_3_is_enforced_and_tools_declared(fake):
    """providers.md §4.5, the capability table: Gemini 3.x takes a schema and tools together."""
    ok(fake, '{"message":"ok"}')
    ok(fake, '{"message":"ok"}')
    for model in ("gemini-3-pro-preview", "gemini-3.8-flash"):
        gemini(fake, model=model).generate(req(system="S", schema=SPEAK, tools=[PRECO]))
    for sent in fake.requests:
        assert sent.json["generationConfig"]["responseMimeType"] == "application/json"
        assert sent.json["generationConfig"]["responseJsonSchema"] == SPEAK
        assert sent.json["tools"][0]["functionDeclarations"][0]["name"] == "preco"
        assert sent.json["systemInstruction"] == {"parts": [{"text": "S"}]}


def test_schema_with_tools_on_gemini_2_rides_in_the_system_instruction(fake):
    """providers.md §4.5: Gemini 1.x/2.x refuse JSON mode with tools: no responseMimeType, the schema
    prompt appended to systemInstruction after all other system text."""
    ok(fake, '{"message":"ok"}')
    gemini(fake, model="gemini-2.5-flash").generate(req(system="S", history=[{"role": "system", "content": "K"}],
                                                        schema=SPEAK, tools=[PRECO]))
    body = fake.requests[0].json
    assert "responseMimeType" not in body["generationConfig"]
    assert "responseJsonSchema" not in body["generationConfig"]
    assert body["systemInstruction"] == {"parts": [{"text": "S\n\nK\n\n" + schema_prompt(SPEAK)}]}
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "preco"


def test_schema_as_prompt_on_gemini_3_with_json_with_tools_prompt(fake):
    """providers.md §4.5: json_with_tools="prompt" carries the schema in the prompt even on Gemini 3,
    but only on calls that carry tools."""
    ok(fake, '{"message":"ok"}')
    ok(fake, '{"message":"ok"}')
    provider = gemini(fake, model="gemini-3-flash-preview", json_with_tools="prompt")
    provider.generate(req(schema=SPEAK, tools=[PRECO]))
    provider.generate(req(schema=SPEAK))
    with_tools, without = (r.json for r in fake.requests)
    assert "responseMimeType" not in with_tools["generationConfig"]
    assert with_tools["systemInstruction"] == {"parts": [{"text": schema_prompt(SPEAK)}]}
    assert without["generationConfig"]["responseJsonSchema"] == SPEAK and "systemInstruction" not in without


def test_openapi_dialect_sends_converted_response_schema_and_parameters(fake):
    """providers.md §4.5: schema_dialect="openapi" sends responseSchema / parameters, converted; a tool
    whose converted parameters have no properties omits `parameters`. Issue 7 item 7: an enum on a
    non-string type is a 400 ("enum: only allowed for STRING type"), so its values go to the description."""
    ok(fake, '{"message":"ok"}')
    envelope = {"type": "object", "additionalProperties": False,
                "properties": {"message": {"type": ["string", "null"]},
                               "quartos": {"type": ["integer", "null"], "enum": [1, 2, None]}},
                "required": ["message", "quartos"]}
    gemini(fake, model="gemini-3-pro-preview", schema_dialect="openapi").generate(
        req(schema=envelope, tools=[PRECO, {"name": "agora", "parameters": {"type": "object", "properties": {}}}]))
    body = fake.requests[0].json
    assert "responseJsonSchema" not in body["generationConfig"]
    assert body["generationConfig"]["responseSchema"] == {
        "type": "OBJECT", "required": ["message", "quartos"],
        "properties": {"message": {"type": "STRING", "nullable": True},
                       "quartos": {"type": "INTEGER", "nullable": True, "description": "Allowed values: 1, 2."}}}
    declarations = body["tools"][0]["functionDeclarations"]
    assert declarations[0]["parameters"] == {"type": "OBJECT", "properties": {"cidade": {"type": "STRING"}},
                                             "required": ["cidade"]}
    assert declarations[1] == {"name": "agora", "description": ""}
    assert "parametersJsonSchema" not in json.dumps(declarations)


# Parsing (§4.8) ##################################################################

def test_text_split_across_frames_streams_in_order(fake):
    """providers.md §4.8: each payload's text is one delta, in order."""
    fake.sse(gemini_frame(text="Bom "), gemini_frame(text="dia, "), gemini_frame(text="Ana!", finish="STOP"))
    chunks = list(gemini(fake).generate_stream(req()))
    assert [c.delta for c in chunks] == ["Bom ", "dia, ", "Ana!", ""]
    assert chunks[-1].accumulated == "Bom dia, Ana!"


def test_a_function_call_gets_a_synthesized_id_and_its_signature(fake):
    """providers.md §3.4 / §4.7 rule 1 / §4.8: Gemini omits ids on single calls (call_0); the part's
    thoughtSignature becomes ToolCallRequest.thought_signature; STOP after a call is "tool_calls"."""
    fake.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), signature="CiQB-sig"),
             gemini_frame(finish="STOP", usage=(100, 5, 0)))
    out = gemini(fake).generate(req(tools=[PRECO]))
    assert out.tool_calls == [ToolCallRequest(id="call_0", name="preco", arguments={"cidade": "Curitiba"},
                                              thought_signature="CiQB-sig")]
    assert out.metadata["finishReason"] == "tool_calls" and out.metadata["vendorFinishReason"] == "STOP"


def test_two_calls_in_one_payload_keep_order_and_vendor_ids(fake):
    """providers.md §4.8: calls are indexed across the stream; a vendor id is kept."""
    payload = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"id": "v1", "name": "preco", "args": {"cidade": "A"}}, "thoughtSignature": "s1"},
        {"functionCall": {"name": "preco", "args": {"cidade": "B"}}}]}, "finishReason": "STOP"}]}
    fake.sse(json.dumps(payload))
    out = gemini(fake).generate(req(tools=[PRECO]))
    assert [(c.id, c.arguments["cidade"], c.thought_signature) for c in out.tool_calls] == \
        [("v1", "A", "s1"), ("call_1", "B", None)]


def test_a_thought_part_goes_to_reasoning_not_to_the_message(fake):
    """providers.md §4.8 rule 5: `thought: true` text is reasoning."""
    fake.sse(gemini_frame(thought="Pensando...", text="Resposta"), gemini_frame(thought=" mais", finish="STOP"))
    chunks = list(gemini(fake).generate_stream(req()))
    assert [c.delta for c in chunks if not c.done] == ["Resposta"]
    assert chunks[-1].reasoning == "Pensando... mais" and chunks[-1].accumulated == "Resposta"


def test_usage_adds_thought_tokens_to_completion_and_the_last_usage_wins(fake):
    """providers.md §4.8 rule 2 / §3.3: completion = candidates + thoughts; the last usage replaces."""
    fake.sse(gemini_frame(text="a", usage=(10, 1, 0)), gemini_frame(text="b", finish="STOP", usage=(10, 2, 4, 40)))
    out = gemini(fake).generate(req())
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_input_tokens) == (10, 42, 4)
    assert out.metadata["tokensUsed"] == 52


@pytest.mark.parametrize("vendor, normalized", [
    ("MAX_TOKENS", "length"), ("STOP", "stop"), ("OTHER", "stop"), ("MALFORMED_FUNCTION_CALL", "stop"),
    ("SAFETY", "content_filter"), ("RECITATION", "content_filter"), ("SPII", "content_filter"),
])
def test_finish_reasons_are_normalized(fake, vendor, normalized):
    """providers.md §4.8 rule 6: MAX_TOKENS → length; filter reasons → content_filter; else stop."""
    fake.sse(gemini_frame(text="parcial", finish=vendor))
    out = gemini(fake).generate(req())
    assert out.metadata["finishReason"] == normalized and out.metadata["vendorFinishReason"] == vendor


def test_only_the_first_candidate_is_read(fake):
    """providers.md §4.8 rule 4."""
    payload = {"candidates": [{"content": {"parts": [{"text": "one"}]}, "finishReason": "STOP"},
                              {"content": {"parts": [{"text": "two"}]}}]}
    fake.sse(json.dumps(payload))
    assert gemini(fake).generate(req()).message == "one"


def test_backup_metadata_names_the_model_that_answered(fake):
    """providers.md §4.8: metadata["model"] is the requested id after the backup walk."""
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    out = gemini(fake, backup_models=["models/gemini-3.5-flash-lite"]).generate(req())
    assert [r.path.split("/")[-1] for r in fake.requests] == \
        ["gemini-3.8-flash:streamGenerateContent"] * 2 + ["gemini-3.5-flash-lite:streamGenerateContent"]
    assert out.message == "ok" and out.metadata["model"] == "gemini-3.5-flash-lite"


# Empty, blocked and in-band failures (§4.8, §4.9) ###############################

def test_a_usage_only_stream_is_retried_then_fails_as_no_content(fake):
    """providers.md §3.5 rule 1 / §9.5: a stream with only a usage frame has no content."""
    fake.sse(gemini_frame(usage=(5, 0, 0)))
    fake.sse(gemini_frame(usage=(5, 0, 0)))
    with pytest.raises(ProviderError) as caught:
        gemini(fake).generate(req())
    assert caught.value.kind == "overload" and str(caught.value) == "gemini: completed with no content"
    assert len(fake.requests) == 2


def test_a_blocked_prompt_is_kind_content_and_not_retried(fake):
    """providers.md §4.8 rule 3: promptFeedback.blockReason with no candidate → kind content, one request."""
    fake.sse(json.dumps({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                         "usageMetadata": {"promptTokenCount": 9}}))
    with pytest.raises(ProviderError) as caught:
        gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    assert caught.value.kind == "content" and str(caught.value) == "gemini: prompt blocked (PROHIBITED_CONTENT)"
    assert len(fake.requests) == 1


def test_a_reply_blocked_by_the_filter_is_kind_content(fake):
    """providers.md §4.8 rule 7: no content and a content_filter finish → kind content, not retried."""
    fake.sse(gemini_frame(finish="SAFETY"))
    with pytest.raises(ProviderError) as caught:
        gemini(fake).generate(req())
    assert caught.value.kind == "content" and str(caught.value) == \
        "gemini: reply blocked by the content filter (SAFETY)"
    assert len(fake.requests) == 1


def test_an_in_band_error_with_unknown_wording_is_an_overload(fake):
    """providers.md §4.9: a stream that dies after its headers with an unclassifiable error is an
    overload (retried), never `unknown`."""
    fake.sse(gemini_frame(text="Ol"), json.dumps({"error": {"message": "something odd happened"}}))
    fake.sse(gemini_frame(text="Olá", finish="STOP"))
    assert gemini(fake).generate(req()).message == "Olá"
    fake.sse(json.dumps({"error": {"message": "something odd happened"}}))
    with pytest.raises(ProviderError) as caught:
        gemini(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    assert caught.value.kind == "overload" and str(caught.value) == "gemini stream error: something odd happened"


def test_an_in_band_429_reads_its_retry_info(fake):
    """providers.md §4.9-§4.10: a throttle arriving in the body keeps its code, status name and delay."""
    error = {"error": {"code": 429, "message": "You exceeded your current quota", "status": "RESOURCE_EXHAUSTED",
                       "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}
    fake.sse(json.dumps(error))
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    sleeps = []
    assert gemini(fake, sleep=sleeps.append).generate(req()).message == "ok"
    assert sleeps == [1.5]
    fake.sse(json.dumps(error))
    with pytest.raises(ProviderError) as caught:
        gemini(fake, retry_config={"timeout": 3000, "retries": 0}).generate(req())
    e = caught.value
    assert (e.kind, e.status, e.code, e.retry_after_ms) == ("rate", 429, "RESOURCE_EXHAUSTED", 1500)
    assert json.loads(e.body) == error


# HTTP errors (§4.10) ##############################################################

def test_bad_key_fails_fast(fake):
    """providers.md §4.10: 400 "API key not valid" → kind auth, one attempt, no backup walk."""
    fake.error(400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                               "status": "INVALID_ARGUMENT"}})
    with pytest.raises(ProviderError) as caught:
        gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    assert caught.value.kind == "auth" and caught.value.status == 400 and caught.value.code == "INVALID_ARGUMENT"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("status, body, kind", [
    (400, {"error": {"code": 400, "message": "Function call is missing a thought_signature in functionCall parts.",
                     "status": "INVALID_ARGUMENT"}}, "invalid"),
    (400, {"error": {"code": 400, "message": "User location is not supported for the API use.",
                     "status": "FAILED_PRECONDITION"}}, "invalid"),
    (400, {"error": {"code": 400, "message": "The input token count (1200000) exceeds the maximum number of "
                     "tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}, "context"),
    (403, {"error": {"code": 403, "message": "Method doesn't allow unregistered callers.",
                     "status": "PERMISSION_DENIED"}}, "auth"),
    (499, {"error": {"code": 499, "message": "The operation was cancelled.", "status": "CANCELLED"}}, "invalid"),
])
def test_final_http_errors_are_classified_and_not_retried(fake, status, body, kind):
    """providers.md §4.10: the table's non-retried rows."""
    fake.error(status, body)
    with pytest.raises(ProviderError) as caught:
        gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    assert caught.value.kind == kind and caught.value.status == status and len(fake.requests) == 1


def test_a_404_is_kind_model_and_walks_to_the_backup_without_retrying(fake):
    """providers.md §4.10 / §3.8: NOT_FOUND → model: not retried on that model, but walks to the next."""
    fake.error(404, {"error": {"code": 404, "message": "models/gemini-9-flash is not found for API version v1beta, "
                               "or is not supported for generateContent.", "status": "NOT_FOUND"}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    out = gemini(fake, model="gemini-9-flash", backup_models=["gemini-3.8-flash"]).generate(req())
    assert [r.path for r in fake.requests] == ["/v1beta/models/gemini-9-flash:streamGenerateContent",
                                               "/v1beta/models/gemini-3.8-flash:streamGenerateContent"]
    assert out.metadata["model"] == "gemini-3.8-flash"


def test_a_404_without_backup_raises_model(fake):
    """providers.md §4.10."""
    fake.error(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})
    with pytest.raises(ProviderError) as caught:
        gemini(fake).generate(req())
    assert caught.value.kind == "model" and len(fake.requests) == 1


def test_a_429_with_retry_info_is_rate_and_sleeps_the_given_delay(fake):
    """providers.md §4.10: a 429 with RetryInfo.retryDelay "2s" → rate; the recorded sleep is 2 s,
    even though the body says "exceeded your current quota"."""
    fake.error(429, {"error": {"code": 429, "message": "You exceeded your current quota, please check your plan.",
                               "status": "RESOURCE_EXHAUSTED", "details": [
                                   {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                    "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
                                   {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    sleeps = []
    assert gemini(fake, sleep=sleeps.append).generate(req()).message == "ok"
    assert sleeps == [2.0] and len(fake.requests) == 2


def test_a_429_with_only_per_day_quota_ids_is_quota_with_one_attempt(fake):
    """providers.md §4.10 rule 2: every quotaId contains PerDay → quota (not transient), one attempt."""
    fake.error(429, {"error": {"code": 429, "message": "You exceeded your current quota.",
                               "status": "RESOURCE_EXHAUSTED", "details": [
                                   {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                                       {"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"},
                                       {"quotaId": "GenerateContentInputTokensPerDayPerModel"}]}]}})
    with pytest.raises(ProviderError) as caught:
        gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    assert caught.value.kind == "quota" and len(fake.requests) == 1


def test_a_429_without_details_is_rate(fake):
    """providers.md §4.10 rule 3."""
    fake.error(429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                               "status": "RESOURCE_EXHAUSTED"}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    assert gemini(fake).generate(req()).message == "ok"


def test_a_429_with_a_45_second_delay_is_not_retried_in_the_provider(fake):
    """providers.md §4.10 / §3.8: a retryDelay over 30 s ends the in-provider retries; the error keeps
    retry_after_ms == 45000 for the runtime."""
    fake.error(429, {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED",
                               "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                            "retryDelay": "45s"}]}})
    sleeps = []
    with pytest.raises(ProviderError) as caught:
        gemini(fake, sleep=sleeps.append).generate(req())
    assert caught.value.kind == "rate" and caught.value.retry_after_ms == 45000
    assert sleeps == [] and len(fake.requests) == 1


@pytest.mark.parametrize("status", [500, 503, 504])
def test_server_errors_are_overload_and_retried(fake, status):
    """providers.md §4.10: INTERNAL / UNAVAILABLE / DEADLINE_EXCEEDED are retried."""
    fake.error(status, {"error": {"code": status, "message": "x", "status": "INTERNAL"}})
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    assert gemini(fake).generate(req()).message == "ok" and len(fake.requests) == 2


def test_overload_retries_then_walks_to_backup(fake):
    """providers.md §9.4: two 503s exhaust retries=1 on the primary, then the backup answers."""
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    fake.sse(gemini_frame(text="ok", finish="STOP"))
    out = gemini(fake, backup_models=["gemini-3.5-flash-lite"]).generate(req())
    assert [r.json is not None for r in fake.requests] == [True] * 3
    assert out.message == "ok" and out.metadata["model"] == "gemini-3.5-flash-lite"


def test_x_should_retry_false_on_a_503_makes_one_attempt(fake):
    """providers.md §9.5: the server's explicit answer stops the retry."""
    fake.error(503, OVERLOADED, headers={"x-should-retry": "false"})
    with pytest.raises(ProviderError) as caught:
        gemini(fake).generate(req())
    assert caught.value.kind == "overload" and caught.value.should_retry is False and len(fake.requests) == 1


def test_the_last_error_keeps_its_kind_after_the_whole_walk(fake):
    """providers.md §3.8: after retries and backups, the last error is raised with its own kind."""
    for _ in range(4):
        fake.error(503, OVERLOADED)
    with pytest.raises(ProviderError) as caught:
        gemini(fake, backup_models=["b"]).generate(req())
    assert caught.value.kind == "overload" and caught.value.status == 503 and len(fake.requests) == 4
    assert fake.requests[-1].path.endswith("/b:streamGenerateContent")


def test_capabilities_and_name():
    """providers.md §1.5 / §4.1."""
    provider = GeminiProvider(api_key="k", model="gemini-3.8-flash")
    assert provider.name == "gemini" and provider.base_url == "https://generativelanguage.googleapis.com"
    caps = provider.capabilities
    assert (caps.supports_tools, caps.supports_native_json_schema, caps.supports_streaming,
            caps.supports_streaming_tool_calls, caps.supports_prompt_caching) == (True,) * 5
