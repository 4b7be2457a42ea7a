"""The speak call: prompt, envelope, reading replies, deferral, counting, streaming (model-calls.md §5, §7, §8, §10)."""
import logging
from datetime import datetime, timezone

import pytest

import falai as F
import falai_base
import falai_protocols
import falai_calls
from conftest import sections
from falai import Generation, GenerationChunk, ProviderError, ScriptedProvider, TokenUsage

pytestmark = pytest.mark.protocols("v4")     # the v4 prompts and envelopes (model-calls.md); "lean": test_protocol.py

NOW = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
FIELDS = {"nome": {"type": "string", "description": "Nome da pessoa"},
          "empresa": {"type": "string", "description": "Empresa da pessoa",
                      "ask": "Pergunte de qual empresa {{data.nome}} fala."},
          "porte": {"type": "string", "enum": ["1-10", "11-50"], "ask": "Pergunte o porte."},
          "nome completo": {"type": "string"},
          "message": {"type": "string", "description": "Recado"},
          "idade": {"type": "integer"}}
FLOW = {"id": "triagem", "name": "Triagem", "description": "qualifica quem chega {{data.nome}}",
        "on": [{"message": []}],
        "steps": [{"id": "quem", "prompt": "Descubra quem é, {{input.origem}}.", "collect": ["empresa", "porte"],
                   "ask": {"porte": "Pergunte quantas pessoas trabalham lá, {{data.nome}}."}}]}


def make_run():
    return F.Run(id="triagem#m1", flow_id="triagem", anchor="session", dedupe_key="triagem:session:",
                 step_id="quem", status="asking", trigger={"kind": "message", "key": "m1"}, hop=0,
                 started_at="2026-09-20T10:00:00.000Z", input={"origem": "do site"})


def make_agent(script=None, provider=None, **options):
    options.setdefault("fields", FIELDS)
    return F.Agent(name="Ana", provider=provider or ScriptedProvider(script=script or {}), **options)


def talk_ask(**changes):
    ask = F.SpeakAsk(input_kind="message", text="  sou a Bia, quero saber o preço \n",
                     scope=F.Scope(data={"nome": "Bia", "outro": 1}, context={"loja": "Azul"},
                                   input={"origem": "do site"}),
                     history=[{"role": "assistant", "content": "Oi!"}], now=NOW,
                     run=make_run(), flow=FLOW, step=FLOW["steps"][0], pending=["empresa", "porte"])
    for key, value in changes.items():
        setattr(ask, key, value)
    return ask


def idle_ask(**changes):
    ask = F.SpeakAsk(input_kind="message", text="oi", scope=F.Scope(data={"nome": "Bia"}, context=None),
                     history=[], now=NOW)
    for key, value in changes.items():
        setattr(ask, key, value)
    return ask


def drive(gen):
    """Run a speak generator: (deltas, result)."""
    deltas = []
    while True:
        try:
            deltas.append(next(gen))
        except StopIteration as done:
            return deltas, done.value


def speak(agent, ask, streaming=False):
    return drive(falai_calls.speak(agent, ask, streaming))


def first_request(ask, reply=None, **options):
    agent = make_agent({"speak": [reply or {"message": "Oi!"}]}, **options)
    _, result = speak(agent, ask)
    return agent.provider.calls[0], result


# §5.3: the talk step's prompt ------------------------------------------------------------------

def test_talk_step_prompt_sections_in_order():
    """model-calls.md §5.3: Flow, Guideline, Still to collect, Already known, Instructions, Input, Response format."""
    ask = talk_ask(instructions=[{"prompt": "Responda em até três frases."}])
    request, _ = first_request(ask)
    assert list(sections(request.prompt)) == [
        "Flow", "Guideline for your reply (adapt to the conversation)", "Still to collect", "Already known",
        "Instructions", "Customer's latest message", "Response format"]
    assert request.schema_name == "speak" and request.tools is None
    assert request.history == ask.history and request.context == {"loja": "Azul"}


def test_flow_section_is_name_and_description_as_written():
    """model-calls.md §5.3 item 2: not rendered."""
    request, _ = first_request(talk_ask())
    assert sections(request.prompt)["Flow"] == "Triagem: qualifica quem chega {{data.nome}}"


def test_flow_section_prints_the_id_without_a_name():
    """flows.md §3.1: a flow without name prints its id."""
    request, _ = first_request(talk_ask(flow={"id": "triagem", "steps": []}))
    assert sections(request.prompt)["Flow"] == "triagem"


def test_guideline_is_the_step_prompt_rendered_with_input():
    """model-calls.md §2.4: speak renders step prompts with data, context and the run's input."""
    request, _ = first_request(talk_ask())
    assert sections(request.prompt)["Guideline for your reply (adapt to the conversation)"] == \
        "Descubra quem é, do site."


def test_default_guideline_asks_to_collect_when_fields_are_pending():
    """model-calls.md §5.3 item 3: the default when the step has no prompt and fields are pending."""
    request, _ = first_request(talk_ask(step={"id": "quem", "collect": ["empresa"]}, pending=["empresa"]))
    assert sections(request.prompt)["Guideline for your reply (adapt to the conversation)"] == \
        falai_protocols.DEFAULT_COLLECT_GUIDELINE


def test_default_guideline_answers_in_flow_when_nothing_is_pending():
    """model-calls.md §5.3 item 3: a staying run with nothing pending answers the message."""
    request, _ = first_request(talk_ask(step={"id": "quem", "collect": ["empresa"]}, pending=[]))
    prompt = sections(request.prompt)
    assert prompt["Guideline for your reply (adapt to the conversation)"] == falai_calls.DEFAULT_ANSWER_GUIDELINE
    assert "Still to collect" not in prompt


def test_still_to_collect_lists_pending_fields_with_how_to_ask():
    """model-calls.md §5.3 item 4: step ask wins over field ask; rendered; a slug with no definition alone."""
    request, _ = first_request(talk_ask(pending=["empresa", "porte", "sem-def"]))
    lines = sections(request.prompt)["Still to collect"].splitlines()
    assert lines[1:] == ["- empresa (string): Empresa da pessoa",
                         "  How to ask: Pergunte de qual empresa Bia fala.",
                         "- porte (string) [1-10 | 11-50]",
                         "  How to ask: Pergunte quantas pessoas trabalham lá, Bia.",
                         "- sem-def"]


def test_already_known_lists_known_agent_fields_only():
    """model-calls.md §2.6: strings quoted as JSON; data keys that are not agent fields are left out."""
    ask = talk_ask(scope=F.Scope(data={"nome": "Bia", "idade": 30, "empresa": "", "outro": 1}))
    request, _ = first_request(ask)
    assert sections(request.prompt)["Already known"].splitlines()[1:] == ['- nome: "Bia"', "- idade: 30"]


def test_no_already_known_section_when_nothing_is_known():
    """model-calls.md §2.6: present only when at least one agent field is known."""
    request, _ = first_request(talk_ask(scope=F.Scope(data={"outro": 1})))
    assert "## Already known" not in request.prompt


def test_instruction_lines_follow_the_exact_format():
    """model-calls.md §5.2: `- [kind] [Always] prompt (apply only when: a OR b)`; empty prompts dropped."""
    instructions = [
        {"kind": "never", "prompt": "Nunca prometa prazos."},
        {"kind": "must", "when": ["a pessoa reclama", "a pessoa ameaça cancelar"],
         "prompt": "Peça desculpas antes de qualquer explicação."},
        {"if": {"known": ["nome"]}, "prompt": "  Trate {{data.nome}} pelo nome.  "},
        {"prompt": "{{data.vazio}}"},
        {"kind": "should", "when": "{{data.nome}} está com pressa", "prompt": "Seja breve."},
    ]
    request, _ = first_request(talk_ask(instructions=instructions,
                                        scope=F.Scope(data={"nome": "Bia", "vazio": ""})))
    assert sections(request.prompt)["Instructions"].splitlines() == [
        "- [never] [Always] Nunca prometa prazos.",
        "- [must] [Always] Peça desculpas antes de qualquer explicação. "
        "(apply only when: a pessoa reclama OR a pessoa ameaça cancelar)",
        "- [should] [Always] Trate Bia pelo nome.",
        "- [should] [Always] Seja breve. (apply only when: {{data.nome}} está com pressa)"]


def test_no_instructions_section_without_lines():
    """model-calls.md §5.2 rule 5."""
    request, _ = first_request(talk_ask(instructions=[{"prompt": "  "}]))
    assert "## Instructions" not in request.prompt


def test_input_section_quotes_the_stripped_message():
    """model-calls.md §5.3, Input: non-blank message text, stripped, in double quotes."""
    request, _ = first_request(talk_ask())
    assert sections(request.prompt)["Customer's latest message"] == '"sou a Bia, quero saber o preço"'


def test_blank_message_has_no_input_section():
    """model-calls.md §5.3, Input: a message whose text is blank gets no section."""
    request, _ = first_request(talk_ask(text="   "))
    prompt = sections(request.prompt)
    assert "Customer's latest message" not in prompt and "Situation" not in prompt


@pytest.mark.parametrize("kind", ["wake", "event", "start"])
def test_retry_situation_when_history_ends_with_a_user_item(kind):
    """model-calls.md §5.3, §10.2: the retry wake answers the customer's unanswered message."""
    ask = talk_ask(input_kind=kind, text=None, history=[{"role": "user", "content": "e o preço?"}])
    request, _ = first_request(ask)
    situation = sections(request.prompt)["Situation"]
    assert "no answer yet" in situation and "speak first" not in situation


@pytest.mark.parametrize("kind", ["wake", "event", "start"])
def test_speak_first_situation_otherwise(kind):
    """model-calls.md §5.3: no new message, the assistant opens."""
    request, _ = first_request(talk_ask(input_kind=kind, text=None))
    situation = sections(request.prompt)["Situation"]
    assert "speak first" in situation and "no answer yet" not in situation


def test_response_format_lists_wire_names_with_field_lines_and_rules():
    """model-calls.md §5.3, Response format: one line per envelope field in pending order, then rules."""
    request, _ = first_request(talk_ask(pending=["empresa", "nome completo"]))
    lines = sections(request.prompt)["Response format"].splitlines()
    assert '- "empresa": empresa (string): Empresa da pessoa. The value the customer gave, or null.' in lines
    assert '- "field_1": nome completo (string). The value the customer gave, or null.' in lines
    assert lines.index('- "empresa": empresa (string): Empresa da pessoa. The value the customer gave, or null.') \
        < lines.index('- "field_1": nome completo (string). The value the customer gave, or null.')
    assert any("never guess" in line for line in lines)


def test_response_format_without_fields_has_no_field_rules():
    """model-calls.md §5.3: the rules follow only when there is at least one field."""
    request, _ = first_request(talk_ask(pending=[]))
    body = sections(request.prompt)["Response format"]
    assert '"message"' in body and "never guess" not in body and '- "' not in body


def test_persona_that_varies_renders_with_the_runs_input_in_the_prompt():
    """model-calls.md §2.3-§2.4: Identity first in the prompt, rendered with data, context and input."""
    request, _ = first_request(talk_ask(), persona="Veio {{input.origem}} para a {{context.loja}}.",
                               knowledge_base={"horario": "9h"})
    assert request.system == "## Knowledge base\n- horario: 9h"
    assert list(sections(request.prompt))[0] == "Identity"
    assert "Veio do site para a Azul." in sections(request.prompt)["Identity"]


# §5.3: the idle speaker ------------------------------------------------------------------------

def test_idle_prompt_sections():
    """model-calls.md §5.3: Guideline, Instructions, Input, Response format; no Flow/collect/known."""
    ask = idle_ask(instructions=[{"kind": "must", "prompt": "Fale de {{data.nome}}."}])
    request, _ = first_request(ask, idle={"prompt": "Atenda pela {{context.loja}} {{data.nome}}."})
    prompt = sections(request.prompt)
    assert list(prompt) == ["Guideline for your reply (adapt to the conversation)", "Instructions",
                            "Customer's latest message", "Response format"]
    assert prompt["Guideline for your reply (adapt to the conversation)"] == "Atenda pela {{context.loja}} Bia."
    assert prompt["Instructions"] == "- [must] [Always] Fale de Bia."
    assert request.schema == falai_base.nullable_envelope({"message": {"type": "string"}})


def test_idle_guideline_heading_is_emitted_even_when_the_prompt_is_empty():
    """model-calls.md §5.3: TypeScript parity."""
    request, _ = first_request(idle_ask())
    assert request.prompt.startswith("## Guideline for your reply (adapt to the conversation)\n\n## Customer")


# §5.4: the envelope ----------------------------------------------------------------------------

def test_envelope_has_message_and_pending_fields_nullable_with_enum_null():
    """model-calls.md §5.4, §2.7."""
    request, _ = first_request(talk_ask(pending=["empresa", "porte", "sem-def"]))
    assert request.schema == {
        "type": "object", "additionalProperties": False, "required": ["message", "empresa", "porte", "sem-def"],
        "properties": {"message": {"type": ["string", "null"]},
                       "empresa": {"type": ["string", "null"], "description": "Empresa da pessoa"},
                       "porte": {"type": ["string", "null"], "enum": ["1-10", "11-50", None]},
                       "sem-def": {"type": ["string", "null"]}}}


def test_wire_names_alias_invalid_slugs_and_message_by_index():
    """model-calls.md §5.4: field_<index> for a slug that is not a valid name or is "message"."""
    assert falai_calls.wire_names(["empresa", "nome completo", "message"]) == [
        ("empresa", "empresa"), ("nome completo", "field_1"), ("message", "field_2")]


def test_wire_names_skip_a_field_n_a_real_slug_holds():
    """model-calls.md §5.4 (inferred): skip to the next free field_<n>."""
    assert falai_calls.wire_names(["a b", "field_0", "field_1"]) == [
        ("a b", "field_2"), ("field_0", "field_0"), ("field_1", "field_1")]


def test_fields_come_back_under_their_slugs():
    """model-calls.md §5.5 rule 3: wire names mapped back; None and "" dropped."""
    ask = talk_ask(pending=["nome completo", "message", "empresa", "porte"])
    agent = make_agent({"speak": [{"message": "Obrigada!", "field_0": "Bia Souza", "field_1": "ligar depois",
                                   "empresa": "", "porte": None}]})
    _, result = speak(agent, ask)
    assert result == F.Spoken(message="Obrigada!", fields={"nome completo": "Bia Souza", "message": "ligar depois"},
                              data={}, llm_calls=1, usage=None)


# §5.5: reading one round's reply ---------------------------------------------------------------

def test_reply_from_json_in_text_when_structured_is_missing():
    """model-calls.md §5.5 rule 1: the first JSON object in the text."""
    agent = make_agent({"speak": ['Claro:\n```json\n{"message": "Oi, Bia!", "empresa": "Acme"}\n```']})
    _, result = speak(agent, talk_ask())
    assert result.message == "Oi, Bia!" and result.fields == {"empresa": "Acme"}


def test_plain_prose_passes_through_stripped():
    """model-calls.md §5.5 rule 2: no object: the raw text, stripped at the end."""
    agent = make_agent({"speak": ["  Olá! Tudo bem?\n"]})
    _, result = speak(agent, talk_ask())
    assert result.message == "Olá! Tudo bem?" and result.fields == {}


def test_structured_without_a_string_message_reads_as_blank_and_defers():
    """model-calls.md §5.5 rule 2, §10.2: parsed["message"] not a string reads as ""."""
    agent = make_agent({"speak": [{"message": None, "empresa": "Acme"}]})
    _, result = speak(agent, talk_ask())
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=1)


@pytest.mark.parametrize("text", ['{"message": "oi"', '  ```json\n{"message": ', "   ", ""])
def test_broken_envelope_or_blank_reply_defers_and_never_reaches_the_customer(text, caplog):
    """model-calls.md §5.5, §10.2: unparsable envelope-shaped text counts as empty: provider-unavailable."""
    agent = make_agent({"speak": [text]})
    with caplog.at_level(logging.WARNING, logger="falai"):
        _, result = speak(agent, talk_ask())
    assert result == F.Deferred(code="provider-unavailable", retryable=True, reset_at_ms=None, llm_calls=1)
    assert any("blank" in r.getMessage() for r in caplog.records)


def test_fields_merge_round_over_round():
    """model-calls.md §5.5: a later known value replaces an earlier one; a later null does not erase it."""
    tool = F.Tool(id="t", handler=lambda args, ctx: None)
    agent = make_agent({"speak": [
        {"message": "", "empresa": "Acme", "porte": "1-10", "toolCalls": [{"toolName": "t"}]},
        {"message": "Pronto.", "empresa": None, "porte": "11-50"}]})
    _, result = speak(agent, talk_ask(tools=[tool]))
    assert result.fields == {"empresa": "Acme", "porte": "11-50"}
    assert result.llm_calls == 2


# §10.2: deferral -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, code, retryable", [
    ("timeout", "provider-unavailable", True), ("network", "provider-unavailable", True),
    ("overload", "provider-unavailable", True), ("rate", "provider-unavailable", True),
    ("unknown", "provider-unavailable", True), ("aborted", "provider-unavailable", False),
    ("quota", "provider-quota", False), ("auth", "provider-auth", False),
    ("entitlement", "provider-auth", False), ("model", "provider-invalid", False),
    ("invalid", "provider-invalid", False), ("content", "provider-invalid", False),
    ("context", "provider-context", False), ("length", "provider-length", True)])
def test_provider_error_kinds_classify_into_deferrals(kind, code, retryable):
    """model-calls.md §10.2: the classification table."""
    agent = make_agent({"speak": [ProviderError("x", kind=kind)]})
    _, result = speak(agent, talk_ask())
    assert result == F.Deferred(code=code, retryable=retryable, reset_at_ms=None, llm_calls=1, usage=None)


def test_quota_with_a_reset_time_is_retryable_and_carries_it():
    """model-calls.md §10.2: quota is retryable only when the error carries reset_at_ms."""
    agent = make_agent({"speak": [ProviderError("x", kind="quota", reset_at_ms=1789900000000)]})
    _, result = speak(agent, talk_ask())
    assert (result.code, result.retryable, result.reset_at_ms) == ("provider-quota", True, 1789900000000)


@pytest.mark.parametrize("kind, should_retry", [("auth", True), ("overload", False), ("quota", True)])
def test_should_retry_overrides_the_computed_retryable(kind, should_retry):
    """model-calls.md §10.2: a stated should_retry replaces the default, in either direction."""
    agent = make_agent({"speak": [ProviderError("x", kind=kind, should_retry=should_retry)]})
    _, result = speak(agent, talk_ask())
    assert result.retryable is should_retry


def test_an_exception_that_is_not_a_provider_error_is_unavailable_and_retryable(caplog):
    """model-calls.md §10.2: kind unknown. A warning names the call."""
    with caplog.at_level(logging.WARNING, logger="falai"):
        _, result = speak(make_agent({"speak": [RuntimeError("boom")]}), talk_ask())
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=1)
    assert any("call 1" in r.getMessage() and "provider-unavailable" in r.getMessage() for r in caplog.records)


def test_failed_round_counts_as_a_call_and_completed_rounds_keep_their_usage():
    """model-calls.md §7, §10.2: llm_calls includes the failed round; usage the completed ones; what the tools
    that ran wrote is kept (a deliberate difference: the calls happened)."""
    tool = F.Tool(id="t", handler=lambda args, ctx: {"data": {"x": 1}})
    usage = TokenUsage(5, 3, 1)
    provider = ScriptedProvider(script={"speak": [{"message": "", "toolCalls": [{"toolName": "t"}]},
                                                  ProviderError("busy", kind="rate")]}, usage=usage)
    _, result = speak(make_agent(provider=provider), talk_ask(tools=[tool]))
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=2, usage=usage,
                                data={"x": 1})


# §7: counting ----------------------------------------------------------------------------------

def test_usage_sums_over_rounds_and_skips_rounds_that_reported_none():
    """model-calls.md §7: summed field by field; a call that reported nothing adds nothing."""
    tool = F.Tool(id="t", handler=lambda args, ctx: None)
    provider = ScriptedProvider(script={"speak": [
        Generation(message="", tool_calls=[F.ToolCallRequest(id="a", name="t", arguments={})],
                   usage=TokenUsage(10, 1, 2)),
        Generation(message="", tool_calls=[F.ToolCallRequest(id="b", name="t", arguments={})]),
        Generation(message="Feito.", usage=TokenUsage(7, 3, 0))]})
    _, result = speak(make_agent(provider=provider), talk_ask(tools=[tool]))
    assert result.llm_calls == 3 and result.usage == TokenUsage(17, 4, 2)


def test_usage_is_none_when_nobody_counted():
    """model-calls.md §7: never a zero-filled object."""
    _, result = speak(make_agent({"speak": [{"message": "Oi"}]}), talk_ask())
    assert result.usage is None and result.llm_calls == 1


# §8: streaming ---------------------------------------------------------------------------------

class ChunkedProvider:
    """A provider that streams each scripted text in fixed-size pieces (the JSON envelope, as real ones do)."""
    name = "chunked"
    capabilities = F.ProviderCapabilities()

    def __init__(self, replies, size=3, fail_after=None):
        self.replies = list(replies)
        self.size = size
        self.fail_after = fail_after
        self.calls = []
        self.streamed = 0

    def generate(self, request):
        self.calls.append(request)
        text, structured, calls, usage = self.replies.pop(0)
        return Generation(message=text, structured=structured, tool_calls=calls, usage=usage)

    def generate_stream(self, request):
        self.calls.append(request)
        self.streamed += 1
        text, structured, calls, usage = self.replies.pop(0)
        for end in range(self.size, len(text) + self.size, self.size):
            if self.fail_after is not None and end > self.fail_after:
                raise ProviderError("stream broke", kind="network")
            yield GenerationChunk(delta=text[end - self.size:end], accumulated=text[:end], done=False)
        yield GenerationChunk(delta="", accumulated=text, done=True, structured=structured, tool_calls=calls,
                              usage=usage)


ENVELOPE = '{"empresa": "Acme", "message": "Oi, Bia! \\"Acme\\" anotada \\u00e9 \\ud83d\\ude00.\\nAt\\u00e9!"}'


def replies():
    tool_call = F.ToolCallRequest(id="x", name="t", arguments={"q": 1})
    return [('{"message": "Um instante."}', None, [tool_call], TokenUsage(3, 2, 0)),
            (ENVELOPE, None, [], TokenUsage(4, 5, 1))]


def test_streaming_speak_yields_deltas_and_returns_the_same_spoken():
    """model-calls.md §8: every round streams; the result equals the non-streaming one."""
    tool = F.Tool(id="t", handler=lambda args, ctx: {"value": "ok", "data": {"x": 1}})
    plain_provider = ChunkedProvider(replies())
    _, plain = speak(make_agent(provider=plain_provider), talk_ask(tools=[tool]), streaming=False)
    provider = ChunkedProvider(replies())
    deltas, streamed = speak(make_agent(provider=provider), talk_ask(tools=[tool]), streaming=True)
    assert provider.streamed == 2 and plain_provider.streamed == 0
    assert streamed == plain
    assert streamed.message == 'Oi, Bia! "Acme" anotada é 😀.\nAté!'
    assert streamed.fields == {"empresa": "Acme"} and streamed.data == {"x": 1}
    assert streamed.usage == TokenUsage(7, 7, 1)
    assert "".join(deltas) == "Um instante." + streamed.message      # text beside the tool call streams too
    assert len(deltas) > 2 and all(deltas)


def test_streaming_a_broken_envelope_defers_like_generate():
    """model-calls.md §5.5, §8: the streamed text was shown, but the result is the same deferral."""
    provider = ChunkedProvider([('{"message": "oi', None, [], None)])
    deltas, result = speak(make_agent(provider=provider), talk_ask(), streaming=True)
    assert "".join(deltas) == "oi"
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=1)


def test_streaming_failure_keeps_yielded_deltas_and_returns_a_deferral():
    """model-calls.md §8, Failures: a speak failure never raises; deltas already yielded stay."""
    provider = ChunkedProvider([('{"message": "Olá, tudo certo por aqui?"}', None, [], None)], size=4,
                               fail_after=16)
    deltas, result = speak(make_agent(provider=provider), talk_ask(), streaming=True)
    assert "".join(deltas) == "Olá"                  # the pieces up to character 16
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=1)


def test_streaming_with_the_scripted_provider():
    """python-api.md, Providers: ScriptedProvider streams the message, then the done chunk."""
    agent = make_agent({"speak": [{"message": "Oi, Bia!", "empresa": "Acme"}]})
    deltas, result = speak(agent, talk_ask(), streaming=True)
    assert deltas == ["Oi, Bia!"]
    assert result == F.Spoken(message="Oi, Bia!", fields={"empresa": "Acme"}, llm_calls=1)


def test_non_streaming_speak_yields_nothing():
    """The interface: without streaming the generator only returns."""
    deltas, result = speak(make_agent({"speak": [{"message": "Oi"}]}), talk_ask(), streaming=False)
    assert deltas == [] and result.message == "Oi"
