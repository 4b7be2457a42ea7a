"""End to end: a real Agent (the seed Concierge) talking to the real GeminiProvider over real
HTTP against the local fake Gemini server (providers.md §4, §9; model-calls.md §1-§10;
runtime.md §10, §16).

Each test names the rule it checks. Where the stack is believed wrong, the test is kept
with ``xfail(strict=True)`` and a one-line reason naming the module.
"""
from __future__ import annotations

import json

import pytest

from falai import ProviderError, ScheduleEntry, Tool, falai
from falai_providers import GeminiProvider
from fake_model_server import gemini_frame
from e2e_concierge import plain_turns
from e2e_concierge import (CODE, M1, PRECO_DECL, M2, NOW_MS, REPLY1, REPLY2, REPLY2_BESIDE, SPEAK1, SPEAK2,
                           SPEAK2_BESIDE, SPEAK_SCHEMA, SPEAK_SCHEMA_RESERVA, UNDERSTAND1, UNDERSTAND2,
                           at_of, concierge, first_turn_history, iso_of, ms_of, pieces, real_now_iso,
                           same_result)

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

PATH = "/v1beta/models/gemini-3.8-flash:streamGenerateContent"
IDENTITY = '## Identity\nYou are "Concierge". Always refer to yourself by that name.'
OVERLOADED = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                        "status": "UNAVAILABLE"}}


def gemini(fake, model="gemini-3.8-flash", **kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("retry_config", {"timeout": 3000, "retries": 1})
    return GeminiProvider(api_key="test-key", model=model, base_url=fake.url, **kw)


# The vendor's side of the conversation ########################################
#
# usage tuples are (promptTokenCount, candidatesTokenCount, cachedContentTokenCount, thoughtsTokenCount).

def script_turn1(fake, reply_parts=None):
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP", usage=(100, 20, 40, 5)))
    fake.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), signature="sig-preco", finish="STOP",
                          usage=(200, 10, 0, 7)))
    parts = reply_parts or pieces(SPEAK1)
    fake.sse(*[gemini_frame(text=p) for p in parts[:-1]],
             gemini_frame(text=parts[-1], finish="STOP", usage=(300, 15, 100, 0)))


def script_turn2(fake):
    fake.sse(gemini_frame(text=UNDERSTAND2, finish="STOP", usage=(110, 12, 0, 0)))
    fake.sse(gemini_frame(text=SPEAK2_BESIDE),
             gemini_frame(call=("reservar", {"cidade": "Curitiba"}), signature="sig-reservar", finish="STOP",
                          usage=(210, 11, 50, 3)))
    fake.sse(*[gemini_frame(text=p) for p in pieces(SPEAK2)[:-1]],
             gemini_frame(text=pieces(SPEAK2)[-1], finish="STOP", usage=(310, 16, 60, 2)))


def text_of(content: dict) -> str:
    return "".join(p.get("text", "") for p in content["parts"])


def system_of(body: dict) -> str:
    return text_of(body["systemInstruction"])


# The two-turn Concierge conversation ###########################################

@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_two_turn_concierge_conversation_over_gemini(fake):
    """The Tool page's Example through agent.turn() on GeminiProvider: understand + speak with a preco
    tool round on turn 1, reservar writing `data` on turn 2 (Tool seed page; model-calls.md §6, §7;
    providers.md §4.3-§4.8)."""
    handled = []
    agent = concierge(gemini(fake), handled=handled)
    script_turn1(fake)
    r1 = agent.turn(session_id="demo", message=M1, id="m1")

    assert [(m.text, m.kind, m.key) for m in r1.messages] == [(REPLY1, "ai", "hospedagem#m1:oferta:1")]
    assert r1.llm_calls == 3                              # understand + two speak rounds
    # model-calls.md §7 / providers.md §4.8 rule 2: completion = candidates + thoughts; cached as reported.
    assert (r1.usage.prompt_tokens, r1.usage.completion_tokens, r1.usage.cached_input_tokens) == (
        100 + 200 + 300, (20 + 5) + (10 + 7) + 15, 40 + 0 + 100)
    assert r1.session.data == {"cidade": "Curitiba"}
    assert [(run.step_id, run.status) for run in r1.session.runs] == [("confirma", "asking")]
    assert handled == [("preco", {"cidade": "Curitiba"})]
    assert len(fake.requests) == 3 and all(q.path == PATH and q.query == {"alt": "sse"} for q in fake.requests)

    understand, round0, round1 = (q.json for q in fake.requests)
    # Understand (model-calls.md §1, §3.3; providers.md §4.3, §4.5): the envelope enforced in
    # responseJsonSchema, the stable prefix in systemInstruction, the prompt the last user content.
    assert understand["generationConfig"]["responseMimeType"] == "application/json"
    schema = understand["generationConfig"]["responseJsonSchema"]
    assert schema["required"] == ["flows", "fields"] and schema["additionalProperties"] is False
    assert list(schema["properties"]["flows"]["properties"]) == ["hospedagem"]
    assert list(schema["properties"]["fields"]["properties"]) == ["cidade", "reserva"]
    assert system_of(understand) == IDENTITY
    assert [c["role"] for c in understand["contents"]] == ["user"]
    assert '## Customer\'s latest message\n"""\n' + M1 + '\n"""' in text_of(understand["contents"][-1])
    assert "tools" not in understand                     # model-calls.md §3.2: tools never reach understand

    # Speak round 0 (model-calls.md §6.1-§6.2): only the step's tool; Gemini 3.x takes JSON mode beside
    # tools (providers.md §4.5, the capability table), so the envelope is enforced, not in the prompt.
    assert round0["tools"] == [{"functionDeclarations": [
        {"name": "preco", "description": PRECO_DECL["description"],
         "parametersJsonSchema": PRECO_DECL["parameters"]}]}]
    assert system_of(round0) == IDENTITY
    assert round0["generationConfig"]["responseMimeType"] == "application/json"
    assert round0["generationConfig"]["responseJsonSchema"] == SPEAK_SCHEMA
    prompt0 = text_of(round0["contents"][-1])
    assert prompt0.startswith("## Flow\nHospedagem") and prompt0.rstrip().split("\n\n")[-1].startswith("## Tools")
    assert f'## Customer\'s latest message\n"{M1}"' in prompt0
    assert [c["role"] for c in round0["contents"]] == ["user"]

    # Speak round 1 (model-calls.md §6.7; providers.md §4.4, §4.7): the round's history is the inserted
    # user item, the model's functionCall (engine id call-0-0, the fake's signature replayed as its
    # sibling), the functionResponse as an object, then the prompt.
    assert round1["contents"][:3] == [
        {"role": "user", "parts": [{"text": M1}]},
        {"role": "model", "parts": [{"functionCall": {"id": "call-0-0", "name": "preco",
                                                      "args": {"cidade": "Curitiba"}},
                                     "thoughtSignature": "sig-preco"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "call-0-0", "name": "preco",
                                                         "response": {"precoNoite": 420}}}]},
    ]
    assert text_of(round1["contents"][3]) == prompt0 and len(round1["contents"]) == 4
    assert [d["name"] for d in round1["tools"][0]["functionDeclarations"]] == ["preco"]

    # Turn 2: the host passes the session and its own history (model-calls.md §2.1).
    script_turn2(fake)
    r2 = agent.turn(session_id="demo", session=r1.session, message=M2, id="m2", history=first_turn_history())
    assert [(m.text, m.key) for m in r2.messages] == [(REPLY2, "hospedagem#m1:confirma:1")]
    assert r2.session.data == {"cidade": "Curitiba", "reserva": CODE}      # Tool page: data lands in the session
    assert [(e.id, e.reason) for e in r2.ended] == [("hospedagem#m1", "end")] and r2.session.runs == []
    assert r2.llm_calls == 3
    assert (r2.usage.prompt_tokens, r2.usage.completion_tokens, r2.usage.cached_input_tokens) == (
        110 + 210 + 310, 12 + (11 + 3) + (16 + 2), 0 + 50 + 60)
    assert handled[1:] == [("reservar", {"cidade": "Curitiba"})]

    understand2, round0b, round1b = (q.json for q in fake.requests[3:])
    history = [{"role": "user", "parts": [{"text": M1}]}, {"role": "model", "parts": [{"text": REPLY1}]}]
    assert understand2["contents"][:2] == history and len(understand2["contents"]) == 3
    assert '"""\n' + M2 + '\n"""' in text_of(understand2["contents"][-1])
    assert "## Current flow" in text_of(understand2["contents"][-1])
    assert list(understand2["generationConfig"]["responseJsonSchema"]["properties"]["fields"]["properties"]) == [
        "reserva"]
    assert [d["name"] for d in round0b["tools"][0]["functionDeclarations"]] == ["reservar"]
    assert system_of(round0b) == IDENTITY
    assert round0b["generationConfig"]["responseJsonSchema"] == SPEAK_SCHEMA_RESERVA
    assert round0b["contents"][:2] == history and len(round0b["contents"]) == 3
    # Round 1: the customer's message is inserted before the model's call (model-calls.md §6.7 rule 1:
    # the history ended with an assistant item); text written beside the call is the model part's text.
    assert round1b["contents"][:5] == history + [
        {"role": "user", "parts": [{"text": M2}]},
        {"role": "model", "parts": [{"text": REPLY2_BESIDE},
                                    {"functionCall": {"id": "call-0-0", "name": "reservar",
                                                      "args": {"cidade": "Curitiba"}},
                                     "thoughtSignature": "sig-reservar"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "call-0-0", "name": "reservar",
                                                         "response": {"codigo": CODE}}}]},
    ]
    assert len(round1b["contents"]) == 6 and '"' + M2 + '"' in text_of(round1b["contents"][-1])



@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_the_wrap_up_round_carries_no_tools_and_enforces_the_schema(fake):
    """model-calls.md §6.2 / Tool page "Rounds": after max_tool_loops rounds with calls, one round runs
    with no tools and a "## Wrap up" section; without tools Gemini enforces the schema natively
    (providers.md §4.5: "Calls without tools always get the enforced schema")."""
    agent = concierge(gemini(fake), max_tool_loops=1)
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 3
    wrap = fake.requests[2].json
    assert "tools" not in wrap and "toolConfig" not in wrap
    assert wrap["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": SPEAK_SCHEMA}
    assert system_of(wrap) == IDENTITY                   # no schema prompt when it is enforced
    assert text_of(wrap["contents"][-1]).rstrip().split("\n\n")[-1].startswith("## Wrap up")
    assert "## Tools" not in text_of(wrap["contents"][-1])
    # the round's history still carries the call and its response (model-calls.md §6.7)
    assert [list(p)[0] for c in wrap["contents"][1:3] for p in c["parts"]] == ["functionCall", "functionResponse"]


@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_gemini_3_enforces_the_schema_beside_tools_and_replays_the_signature(fake):
    """providers.md §4.5: on gemini-3 the schema is enforced and the tools declared on the same call;
    §4.7: the signature returned with the call is replayed verbatim, and the engine's layout (the prompt
    last) never needs the placeholder."""
    agent = concierge(gemini(fake, model="gemini-3-flash-preview"))
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    round0, round1 = fake.requests[1].json, fake.requests[2].json
    assert round0["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": SPEAK_SCHEMA}
    assert system_of(round0) == IDENTITY and "tools" in round0
    call_part = round1["contents"][1]["parts"][0]
    assert call_part["thoughtSignature"] == "sig-preco"
    assert "skip_thought_signature_validator" not in json.dumps(round1)


def test_parallel_calls_share_one_model_content_and_one_response_content(fake):
    """providers.md §4.4 rules 3 and 5, §4.7: two calls of one round are two functionCall parts of one
    model content (only the first carries the signature Gemini returned), answered by two functionResponse
    parts of one user content, in call order; engine ids call-0-0, call-0-1 (model-calls.md §6.7)."""
    agent = concierge(gemini(fake))
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    fake.sse(gemini_frame(calls=[("preco", {"cidade": "Curitiba"}), ("preco", {"cidade": "Recife"})],
                          signature="sig-both", finish="STOP"))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    contents = fake.requests[2].json["contents"]
    assert contents[1] == {"role": "model", "parts": [
        {"functionCall": {"id": "call-0-0", "name": "preco", "args": {"cidade": "Curitiba"}},
         "thoughtSignature": "sig-both"},
        {"functionCall": {"id": "call-0-1", "name": "preco", "args": {"cidade": "Recife"}}}]}
    assert contents[2] == {"role": "user", "parts": [
        {"functionResponse": {"id": "call-0-0", "name": "preco", "response": {"precoNoite": 420}}},
        {"functionResponse": {"id": "call-0-1", "name": "preco", "response": {"precoNoite": 420}}}]}


# turn_stream() #################################################################

def test_turn_stream_yields_the_message_text_in_order_and_the_same_result(fake):
    """model-calls.md §8 / runtime.md §16: the deltas are the customer-facing text decoded from the
    streamed envelope (never raw JSON), in order; text written beside a tool call reaches the stream but
    not the final message (Tool page, Streaming); the last chunk's result equals turn()'s."""
    t1, t2 = plain_turns(gemini, script_turn1, script_turn2)

    script_turn1(fake)
    script_turn2(fake)
    agent = concierge(gemini(fake))
    chunks1 = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    deltas1 = [c.delta for c in chunks1[:-1]]
    assert all(not c.done and c.result is None and c.delta for c in chunks1[:-1])
    assert chunks1[-1].done and chunks1[-1].delta == "" and chunks1[-1].result is not None
    assert "".join(deltas1) == REPLY1 and len(deltas1) >= 2
    assert not any("{" in d or '"message"' in d for d in deltas1)
    same_result(chunks1[-1].result, t1)

    chunks2 = list(agent.turn_stream(session_id="demo", session=chunks1[-1].result.session, message=M2, id="m2",
                                     history=first_turn_history()))
    assert "".join(c.delta for c in chunks2[:-1]) == REPLY2_BESIDE + REPLY2
    assert chunks2[-1].result.messages[0].text == REPLY2
    same_result(chunks2[-1].result, t2)


def test_a_streamed_reply_split_inside_an_escape_decodes_whole_characters(fake):
    """model-calls.md §8: the decoder decodes escapes and holds back an incomplete one, so a reply whose
    frames cut a \\uXXXX escape still streams whole characters."""
    agent = concierge(gemini(fake))
    envelope = '{"message":"A di\\u00e1ria \\u00e9 R$ 420.\\nPosso reservar?"}'
    cut = envelope.index("\\u00e1") + 3
    script_turn1(fake, reply_parts=[envelope[:cut], envelope[cut:]])
    chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    assert "".join(c.delta for c in chunks[:-1]) == "A diária é R$ 420.\nPosso reservar?"
    assert chunks[-1].result.messages[0].text == "A diária é R$ 420.\nPosso reservar?"


# Understand failures raise (model-calls.md §10.1, providers.md §8.4) ###########

BAD_KEY = {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                     "status": "INVALID_ARGUMENT",
                     "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}
UNAUTHENTICATED = {"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                             "status": "UNAUTHENTICATED"}}
BAD_REQUEST = {"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}}


@pytest.mark.parametrize("status, body, kind", [(400, BAD_KEY, "auth"), (401, UNAUTHENTICATED, "auth"),
                                                (403, {"error": {"code": 403, "message": "denied",
                                                                 "status": "PERMISSION_DENIED"}}, "auth"),
                                                (400, BAD_REQUEST, "invalid")])
def test_an_understand_failure_raises_out_of_turn_with_its_kind(fake, status, body, kind):
    """model-calls.md §10.1 / providers.md §4.10, §8.4: the ProviderError propagates out of turn(), with
    the kind Gemini's answer classifies as, after one attempt (not retried); nothing was written."""
    agent = concierge(gemini(fake))
    script_turn1(fake)
    first = agent.turn(session_id="demo", message=M1, id="m1")
    fake.requests.clear()
    fake.error(status, body)
    before = first.session.to_dict()
    with pytest.raises(ProviderError) as caught:
        agent.turn(session_id="demo", session=first.session, message=M2, id="m2", history=first_turn_history())
    assert caught.value.kind == kind and caught.value.status == status and caught.value.provider == "gemini"
    assert len(fake.requests) == 1
    assert first.session.to_dict() == before               # the caller's session was never touched


def test_an_understand_failure_raises_out_of_turn_stream_before_any_delta(fake):
    """model-calls.md §8 "Failures": an understand failure raises from the iterator before any delta."""
    agent = concierge(gemini(fake))
    fake.error(400, BAD_KEY)
    stream = agent.turn_stream(session_id="demo", message=M1, id="m1")
    with pytest.raises(ProviderError) as caught:
        next(stream)
    assert caught.value.kind == "auth"


def test_a_blank_understand_reply_raises_overload(fake):
    """providers.md §3.5 rule 6, §8.4: a blank reply is ProviderError(kind="overload"), not retried in the
    provider; on the understand call it raises to the host, who replays."""
    agent = concierge(gemini(fake))
    fake.sse(gemini_frame(text="   ", finish="STOP"))
    with pytest.raises(ProviderError) as caught:
        agent.turn(session_id="demo", message=M1, id="m1")
    assert caught.value.kind == "overload" and len(fake.requests) == 1


# Speak failures defer (model-calls.md §10.2, runtime.md §10.2) ###################

def understood(fake, usage=(100, 20, 40, 5)):
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP", usage=usage))


def retry_key(at_ms: int, step="oferta") -> str:
    return f"hospedagem#m1:{step}:1:retry:{at_ms}"


def test_a_503_after_the_retries_defers_the_talk_step_on_the_first_rung(fake):
    """runtime.md §10.2 / providers.md §4.10: 503 UNAVAILABLE is overload, retried in the provider, then the
    speak call defers `provider-unavailable`: a retry wake `<runId>:<stepId>:<visit>:retry:<atMs>` at +1m,
    the line `prompt / deferred` with `until`; llm_calls counts the failed round, usage only what completed."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 3                       # understand + two attempts of the speak round
    at = NOW_MS + 60_000
    assert r.messages == [] and r.changed
    assert r.schedule == [ScheduleEntry(key=retry_key(at), at=at_of(at))]
    line = r.outcomes[-1]
    assert (line.kind, line.status, line.code, line.key, line.until) == (
        "prompt", "deferred", "provider-unavailable", "hospedagem#m1:oferta:1", iso_of(at))
    assert r.llm_calls == 2
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_input_tokens) == (100, 25, 40)
    run = r.session.runs[0]
    assert (run.step_id, run.status) == ("oferta", "waiting")


def test_the_retry_wake_speaks_again_at_the_same_visit_and_key(fake):
    """runtime.md §10.2: the wake re-runs the same step at the same visit, so the message key holds; the
    speak prompt's input section says the customer's last message has no answer yet (model-calls.md §5.3)."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    fake.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), finish="STOP"))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP", usage=(7, 3, 0, 0)))
    w = agent.turn(session_id="demo", session=r.session, wake=r.schedule[0].key,
                   history=[{"role": "user", "content": M1}])
    assert [(m.text, m.key) for m in w.messages] == [(REPLY1, "hospedagem#m1:oferta:1")]
    assert w.llm_calls == 2 and w.session.runs[0].step_id == "confirma"
    prompt = text_of(fake.requests[3].json["contents"][-1])
    assert "## Situation" in prompt and "no answer yet" in prompt
    # the history already ends with the customer's message: no second user item before the call
    assert [c["role"] for c in fake.requests[4].json["contents"]] == ["user", "model", "user", "user"]


def test_a_second_failure_in_a_row_takes_the_next_rung(fake):
    """runtime.md §10.2: attempt = trailing `deferred` lines of this step; the second wake is at +5m."""
    agent = concierge(gemini(fake, retry_config={"timeout": 3000, "retries": 0}))
    understood(fake)
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    fake.error(503, OVERLOADED)
    w = agent.turn(session_id="demo", session=r.session, wake=r.schedule[0].key,
                   history=[{"role": "user", "content": M1}])
    at = NOW_MS + 5 * 60_000
    assert w.schedule == [ScheduleEntry(key=retry_key(at), at=at_of(at))]
    assert (w.outcomes[-1].status, w.outcomes[-1].code, w.outcomes[-1].until) == (
        "deferred", "provider-unavailable", iso_of(at))


def test_a_429_with_a_long_retry_delay_is_rate_and_does_not_move_the_wake(fake):
    """providers.md §4.10: a 429 with RetryInfo is `rate`; a retryDelay over 30 s ends the in-provider
    retries; runtime.md §10.2: `retry_after_ms` never moves the wake, which stays on the +1m rung."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(429, {"error": {"code": 429, "message": "You exceeded your current quota.",
                               "status": "RESOURCE_EXHAUSTED",
                               "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                            "retryDelay": "45s"}]}})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 2                       # not retried in the provider
    at = NOW_MS + 60_000
    assert r.schedule == [ScheduleEntry(key=retry_key(at), at=at_of(at))]
    assert r.outcomes[-1].code == "provider-unavailable"


def test_a_429_with_a_short_retry_delay_sleeps_it_then_defers(fake):
    """providers.md §3.8 / §4.10: a short retryDelay is slept as given between attempts; when the retries
    run out the speak call defers on the ladder (+1m)."""
    sleeps = []
    agent = concierge(gemini(fake, sleep=sleeps.append))
    understood(fake)
    throttled = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                           "status": "RESOURCE_EXHAUSTED",
                           "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]}}
    fake.error(429, throttled)
    fake.error(429, throttled)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert sleeps == [2.0] and len(fake.requests) == 3
    assert r.schedule[0].key == retry_key(NOW_MS + 60_000)


def test_a_429_then_success_answers_in_the_same_turn(fake):
    """providers.md §3.8: the in-provider retry is invisible to the turn (one speak round, one llm call)."""
    agent = concierge(gemini(fake), max_tool_loops=0)
    understood(fake)
    fake.error(429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED",
                               "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                            "retryDelay": "1s"}]}})
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 2 and r.schedule == []


@pytest.mark.parametrize("reset_in_s, moves", [
    pytest.param(7200, True, id="a-reset-later-than-the-rung-moves-the-wake"),
    pytest.param(40, False, id="an-earlier-reset-leaves-the-wake-on-the-60s-rung"),
])
def test_only_a_reset_header_later_than_the_rung_moves_the_wake(fake, reset_in_s, moves):
    """runtime.md §10.2 step 3: a `reset_at_ms` later than the rung moves the wake to it; an earlier one leaves
    it on the rung (providers.md §8.1: vendor reset headers; §3.8: a wait over 30 s ends the in-provider
    retries)."""
    now = real_now_iso()
    reset_s = ms_of(now) // 1000 + reset_in_s
    agent = concierge(gemini(fake), clock=now)
    understood(fake)
    fake.error(429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
               headers={"x-ratelimit-reset": str(reset_s)})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 2
    at = reset_s * 1000 if moves else ms_of(now) + 60_000
    assert r.schedule == [ScheduleEntry(key=f"hospedagem#m1:oferta:1:retry:{at}", at=at_of(at))]
    assert r.outcomes[-1].until == iso_of(at) and r.outcomes[-1].code == "provider-unavailable"


def test_a_per_day_quota_429_ends_the_run_failed_with_provider_quota(fake):
    """providers.md §4.10 rule 2: only PerDay quota ids → `quota`; runtime.md §10.2: `provider-quota` is not
    retryable without a reset time: the line `prompt / failed / provider-quota`, the run ends `failed`,
    no wake."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(429, {"error": {"code": 429, "message": "You exceeded your current quota.",
                               "status": "RESOURCE_EXHAUSTED",
                               "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                            "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}]}})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 2
    assert r.schedule == [] and r.messages == []
    assert (r.outcomes[-1].kind, r.outcomes[-1].status, r.outcomes[-1].code) == ("prompt", "failed", "provider-quota")
    assert [(e.id, e.reason) for e in r.ended] == [("hospedagem#m1", "failed")] and r.session.runs == []


@pytest.mark.parametrize("status, body, code", [
    (400, BAD_KEY, "provider-auth"),
    (404, {"error": {"code": 404, "message": "models/gemini-9 is not found for API version v1beta",
                     "status": "NOT_FOUND"}}, "provider-invalid"),
    (400, {"error": {"code": 400, "message": "The input token count (1200000) exceeds the maximum number of "
                                             "tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}},
     "provider-context"),
])
def test_a_final_speak_failure_ends_the_run_with_its_code(fake, status, body, code):
    """runtime.md §10.2 table: auth → provider-auth, model → provider-invalid, context → provider-context,
    none retryable: the run ends `failed`, no wake, turn() returns."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(status, body)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("failed", code)
    assert r.schedule == [] and r.ended[0].reason == "failed" and r.llm_calls == 2


@pytest.mark.parametrize("text", ['{"message":""}', '{"message": null}', '   ', '{"message": "Olá, tudo',
                                  '```json\n{"message": "Olá'])
def test_a_blank_or_broken_envelope_defers_as_provider_unavailable(fake, text):
    """model-calls.md §5.5 / §10.2, providers.md §3.5 rules 4 and 6: a blank reply, or envelope-shaped text
    that does not parse, is never sent: the step defers `provider-unavailable` (retryable, +1m); the
    provider raises overload after the stream and does not retry it."""
    agent = concierge(gemini(fake), max_tool_loops=0)
    understood(fake)
    fake.sse(gemini_frame(text=text, finish="STOP", usage=(9, 9, 0, 0)))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 2
    assert r.messages == [] and r.schedule[0].key == retry_key(NOW_MS + 60_000)
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-unavailable")
    assert r.llm_calls == 2


def test_a_failure_after_a_tool_round_keeps_its_data_and_the_completed_usage(fake):
    """model-calls.md §10.2 / §6.6: the handlers ran, so the failed speak call's data patches are kept (a
    deliberate difference from the original: the booking code is not lost); llm_calls includes every round
    attempted; usage the rounds that completed."""
    handled = []
    agent = concierge(gemini(fake, retry_config={"timeout": 3000, "retries": 0}), handled=handled)
    script_turn1(fake)
    r1 = agent.turn(session_id="demo", message=M1, id="m1")
    fake.sse(gemini_frame(text=UNDERSTAND2, finish="STOP", usage=(110, 12, 0, 0)))
    fake.sse(gemini_frame(call=("reservar", {"cidade": "Curitiba"}), finish="STOP", usage=(210, 11, 50, 3)))
    fake.error(503, OVERLOADED)
    r2 = agent.turn(session_id="demo", session=r1.session, message=M2, id="m2", history=first_turn_history())
    assert handled[-1] == ("reservar", {"cidade": "Curitiba"})          # the side effect stands
    assert r2.session.data["reserva"] == CODE                          # the booking code stays
    assert r2.llm_calls == 3
    assert (r2.usage.prompt_tokens, r2.usage.completion_tokens, r2.usage.cached_input_tokens) == (320, 26, 50)
    assert r2.schedule[0].key == retry_key(NOW_MS + 60_000, step="confirma")


def test_a_stream_that_fails_after_deltas_defers_and_keeps_the_deltas(fake):
    """model-calls.md §8 "Failures" / providers.md §1.6 rule 4, §4.9: an in-band error after text reached
    the stream propagates (no retry); the deltas already yielded stay yielded, the last chunk carries the
    deferred outcome, and nothing of the partial text is in result.messages."""
    agent = concierge(gemini(fake), max_tool_loops=0)
    understood(fake)
    fake.sse(gemini_frame(text='{"message":"A diária'),
             json.dumps({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}))
    chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    assert [c.delta for c in chunks[:-1]] == ["A diária"]
    result = chunks[-1].result
    assert result.messages == [] and result.outcomes[-1].code == "provider-unavailable"
    assert result.schedule[0].key == retry_key(NOW_MS + 60_000)
    assert len(fake.requests) == 2                       # not retried once text was delivered


# More of the stack ###############################################################

@pytest.mark.protocols("v4")      # v4 prompt and envelope text; tests/model_calls/test_protocol.py covers "lean"
def test_a_field_the_speak_envelope_reports_is_written_and_the_flow_moves_on(fake):
    """model-calls.md §5.4-§5.6, §4: the collecting step's envelope carries its pending field (enforced beside
    the tools the step offers: model-calls.md §6.1, providers.md §4.5); a value the model reports
    is written at settle and the run moves to the next talk step, which waits for the next message."""
    agent = concierge(gemini(fake))
    fake.sse(gemini_frame(text=json.dumps({"flows": {"hospedagem": 92}, "fields": {"cidade": None, "reserva": None}}),
                          finish="STOP"))
    fake.sse(gemini_frame(text='{"message":"Ótimo, Curitiba! Já vejo o preço.","cidade":"Curitiba"}',
                          finish="STOP"))
    r = agent.turn(session_id="demo", message="Oi, quero reservar um quarto lá em Curitiba", id="m1")
    assert r.messages[0].text == "Ótimo, Curitiba! Já vejo o preço." and r.messages[0].key == "hospedagem#m1:onde:1"
    assert r.session.data == {"cidade": "Curitiba"}
    assert [(run.step_id, run.status) for run in r.session.runs] == [("oferta", "asking")]
    speak = fake.requests[1].json
    assert [d["name"] for d in speak["tools"][0]["functionDeclarations"]] == ["preco", "reservar"]
    sent_schema = speak["generationConfig"]["responseJsonSchema"]
    assert sent_schema == {"type": "object", "properties": {"message": {"type": ["string", "null"]},
                                                            "cidade": {"type": ["string", "null"]}},
                           "required": ["message", "cidade"], "additionalProperties": False}
    assert "## Still to collect" in text_of(speak["contents"][-1])


def test_a_fenced_reply_under_the_schema_prompt_is_read_and_streamed_as_text(fake):
    """providers.md §3.6 (a code fence is read leniently) and model-calls.md §8 (a leading fence is skipped
    by the decoder): a model that fences its JSON still answers, in turn() and turn_stream() alike."""
    fence = "```json\n" + SPEAK1 + "\n```"
    script_turn1(fake, reply_parts=pieces(fence, 4))
    t = concierge(gemini(fake)).turn(session_id="demo", message=M1, id="m1")
    assert t.messages[0].text == REPLY1
    script_turn1(fake, reply_parts=pieces(fence, 4))
    chunks = list(concierge(gemini(fake)).turn_stream(session_id="demo", message=M1, id="m1"))
    assert "".join(c.delta for c in chunks[:-1]) == REPLY1
    same_result(chunks[-1].result, t)


def test_thoughts_count_as_output_and_are_never_replayed(fake):
    """providers.md §4.8 (a `thought` part is reasoning; thoughtsTokenCount is output), §4.4 rule 7 (the
    reasoning of earlier rounds is not replayed to Gemini; only the signature is)."""
    agent = concierge(gemini(fake))
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    fake.sse(gemini_frame(thought="SECRET-THOUGHT", call=("preco", {"cidade": "Curitiba"}), signature="sig-t",
                          finish="STOP", usage=(10, 2, 0, 30)))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP", usage=(20, 3, 0, 0)))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (30, 35)
    raw = fake.requests[2].raw.decode()
    assert "SECRET-THOUGHT" not in raw and "sig-t" in raw


def test_usage_is_none_when_gemini_reports_none_and_partial_when_some_do(fake):
    """model-calls.md §7: usage sums what was reported; None, never zeros, when no call reported."""
    agent = concierge(gemini(fake))
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    fake.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), finish="STOP"))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"))
    assert agent.turn(session_id="demo", message=M1, id="m1").usage is None
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    fake.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), finish="STOP", usage=(7, 1, 2, 0)))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"))
    u = agent.turn(session_id="demo", message=M1, id="m1").usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_input_tokens) == (7, 1, 2)


def test_the_idle_speaker_failure_writes_an_idle_deferred_line_and_no_wake(fake):
    """runtime.md §10.1 / model-calls.md §10.2: the idle speaker's failure is `idle / deferred / <code>` with
    llm_calls, no wake; turn() returns."""
    agent = falai().fields({}).agent(name="Concierge", provider=gemini(fake), idle={"prompt": "Atenda pelo hotel."})
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", message="oi", id="m1")
    assert [(o.kind, o.status, o.code, o.llm_calls) for o in r.outcomes] == [
        ("idle", "deferred", "provider-unavailable", 1)]
    assert r.schedule == [] and r.messages == [] and r.changed and r.llm_calls == 1


@pytest.mark.protocols("v4")      # the v4 wire, byte for byte; tests/model_calls/test_protocol.py covers "lean"
def test_compaction_summarizes_over_gemini_before_the_understand_call(fake):
    """model-calls.md §9.2-§9.4: one summary call (plain text, no history, max_output_tokens 1024, never
    streamed) right before the first call; the summary reaches the next calls as system text (providers.md
    §4.4 rule 1); its call and usage count in the turn."""
    agent = concierge(gemini(fake), compaction={"maxTokens": 200})
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"mensagem antiga número {i} " * 3}
               for i in range(40)]
    fake.sse(gemini_frame(text="A pessoa quer um quarto.", finish="STOP", usage=(50, 8, 0, 0)))
    script_turn1(fake)
    chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1", history=history))
    r = chunks[-1].result
    assert r.messages[0].text == REPLY1 and r.llm_calls == 4
    assert r.usage.prompt_tokens == 50 + 600
    summary = fake.requests[0].json
    assert summary["generationConfig"] == {"maxOutputTokens": 1024}
    assert "systemInstruction" not in summary and "tools" not in summary and len(summary["contents"]) == 1
    assert "[user]: mensagem antiga número 0" in text_of(summary["contents"][0])
    understand = fake.requests[1].json
    assert system_of(understand) == IDENTITY + "\n\n[Conversation Summary]\nA pessoa quer um quarto."
    assert [c["role"] for c in understand["contents"]] == ["user", "model", "user", "model", "user"]


def test_x_should_retry_overrides_the_deferral_both_ways(fake):
    """model-calls.md §10.2 / runtime.md §10.2: the provider's explicit should_retry replaces the computed
    "retryable": a 503 with `x-should-retry: false` ends the run; a 400 with `x-should-retry: true` is
    retried in the provider (providers.md §3.8) and then deferred with its own code, provider-invalid."""
    agent = concierge(gemini(fake, retry_config={"timeout": 3000, "retries": 0}))
    understood(fake)
    fake.error(503, OVERLOADED, headers={"x-should-retry": "false"})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("failed", "provider-unavailable") and r.schedule == []
    understood(fake)
    fake.error(400, BAD_REQUEST, headers={"x-should-retry": "true"})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-invalid")
    assert r.schedule[0].key == retry_key(NOW_MS + 60_000)


def test_the_sixth_failure_in_a_row_ends_the_run(fake):
    """runtime.md §10.2: wakes at +1m, +5m, +15m, +1h, +6h; the sixth failure in a row ends the run `failed`
    with the line `collect / failed / provider-unavailable` (the confirma step collects)."""
    agent = concierge(gemini(fake, retry_config={"timeout": 3000, "retries": 0}))
    script_turn1(fake)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    fake.sse(gemini_frame(text=UNDERSTAND2, finish="STOP"))
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", session=r.session, message=M2, id="m2", history=first_turn_history())
    rungs = [60_000]
    for rung in (5 * 60_000, 15 * 60_000, 3_600_000, 6 * 3_600_000):
        assert (r.outcomes[-1].kind, r.outcomes[-1].status) == ("collect", "deferred")
        assert r.schedule[0].key == retry_key(NOW_MS + rungs[-1], step="confirma")
        fake.error(503, OVERLOADED)
        r = agent.turn(session_id="demo", session=r.session, wake=r.schedule[0].key,
                       history=first_turn_history() + [{"role": "user", "content": M2}])
        rungs.append(rung)
    assert r.schedule[0].key == retry_key(NOW_MS + rungs[-1], step="confirma")
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", session=r.session, wake=r.schedule[0].key,
                   history=first_turn_history() + [{"role": "user", "content": M2}])
    assert (r.outcomes[-1].kind, r.outcomes[-1].status, r.outcomes[-1].code) == (
        "collect", "failed", "provider-unavailable")
    assert r.schedule == [] and [(e.id, e.reason) for e in r.ended] == [("hospedagem#m1", "failed")]


def test_a_blank_message_with_a_tool_round_never_opens_the_contents_with_a_function_call(fake):
    """providers.md §2.2 item 2: on a round after the first, the item before the first assistant tool call is
    a user item, "so that no conversation opens with the model's own function call — Gemini rejects that
    order with a 400"; model-calls.md §6.7 rule 1 (the engine inserts it); python-api.md, One turn:
    `message=""` is a message whose text is blank, and the idle speaker answers it (model-calls.md §5.3)."""
    agent = falai().fields({}).agent(
        name="Concierge", provider=gemini(fake), idle={"prompt": "Atenda pelo hotel."},
        tools=[Tool(id="agora", description="Hora atual.", parameters={"type": "object", "properties": {}},
                    handler=lambda args, ctx: {"value": "10h"})])
    fake.sse(gemini_frame(call=("agora", {}), finish="STOP"))
    fake.sse(gemini_frame(text='{"message":"São 10h."}', finish="STOP"))
    r = agent.turn(session_id="demo", message="", id="m1")
    assert r.messages[0].text == "São 10h."
    contents = fake.requests[1].json["contents"]
    assert contents[0]["role"] == "user" and "text" in contents[0]["parts"][0]


@pytest.mark.parametrize("failure", ["503", "blank", "broken", "blocked"])
def test_a_failed_speak_call_gives_the_same_result_streamed_or_not(fake, failure):
    """model-calls.md §8: the last chunk's result is what turn() returns for the same provider output,
    deferrals and failures included."""
    def script():
        understood(fake)
        if failure == "503":
            fake.error(503, OVERLOADED)
            fake.error(503, OVERLOADED)
        elif failure == "blank":
            fake.sse(gemini_frame(text='{"message":"  "}', finish="STOP"))
        elif failure == "broken":
            fake.sse(gemini_frame(text='{"message":"A diária em Cur', finish="MAX_TOKENS"))
        else:
            fake.sse(json.dumps({"promptFeedback": {"blockReason": "SAFETY"}}))
    script()
    t = concierge(gemini(fake), max_tool_loops=0).turn(session_id="demo", message=M1, id="m1")
    script()
    chunks = list(concierge(gemini(fake), max_tool_loops=0).turn_stream(session_id="demo", message=M1, id="m1"))
    same_result(chunks[-1].result, t)
    assert t.messages == []
    # A JSON reply cut at the token cap is its own kind (length), deferred as provider-length.
    expected = {"blocked": ("failed", "provider-invalid"), "broken": ("deferred", "provider-length")}.get(
        failure, ("deferred", "provider-unavailable"))
    assert (t.outcomes[-1].status, t.outcomes[-1].code) == expected


def test_a_blocked_prompt_on_the_speak_call_ends_the_run_provider_invalid(fake):
    """providers.md §4.8 rule 3: promptFeedback.blockReason with no candidate is kind `content`, not retried;
    runtime.md §10.2: content → provider-invalid, not retryable: the run ends `failed`."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.sse(json.dumps({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(fake.requests) == 2
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("failed", "provider-invalid")
    assert r.ended[0].reason == "failed"


def test_a_call_to_a_tool_the_step_does_not_offer_reads_an_error_object(fake):
    """Tool page, Gates / model-calls.md §6.3 gate 1, providers.md §4.4 rule 4: the handler does not run and
    the model reads {"error": "Tool \\"reservar\\" is not available."} as the functionResponse object."""
    handled = []
    agent = concierge(gemini(fake), handled=handled)
    fake.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    fake.sse(gemini_frame(call=("reservar", {"cidade": "Curitiba"}), finish="STOP"))
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"))
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and handled == [] and "reserva" not in r.session.data
    assert fake.requests[2].json["contents"][2]["parts"][0]["functionResponse"] == {
        "id": "call-0-0", "name": "reservar", "response": {"error": 'Tool "reservar" is not available.'}}


def test_the_deferred_line_carries_no_llm_calls_and_pending_wakes_lists_the_retry(fake):
    """runtime.md §10.2 step 3 (the deferred line carries no llmCalls), §14 (pending_wakes lists each parked
    run's wake); model-calls.md §5.6 (the ok line carries the rounds spent)."""
    agent = concierge(gemini(fake))
    understood(fake)
    fake.error(503, OVERLOADED)
    fake.error(503, OVERLOADED)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.outcomes[-1].llm_calls is None
    assert [(e.key, e.at) for e in agent.pending_wakes(session=r.session)] == [(e.key, e.at) for e in r.schedule]
    script_turn1(fake)
    ok = concierge(gemini(fake)).turn(session_id="demo", message=M1, id="m1")
    assert [(o.step_id, o.status, o.llm_calls) for o in ok.outcomes if o.step_id == "oferta"] == [("oferta", "ok", 2)]


def test_a_whole_json_array_answer_is_read_like_the_stream(fake):
    """providers.md §3.7 rule 8: an application/json body (Gemini's stream method without alt=sse) is a list
    of payloads; a whole turn reads it as it reads SSE."""
    agent = concierge(gemini(fake))
    fake.json([json.loads(gemini_frame(text=UNDERSTAND1, finish="STOP"))])
    fake.json([json.loads(gemini_frame(call=("preco", {"cidade": "Curitiba"}), signature="s", finish="STOP"))])
    fake.json([json.loads(gemini_frame(text=p)) for p in pieces(SPEAK1)] + [json.loads(gemini_frame(finish="STOP"))])
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 3


def test_a_dropped_stream_is_retried_in_turn_and_deferred_in_turn_stream(fake):
    """providers.md §1.6 rule 4, §3.8 "mid-stream failure": in generate (turn()) nothing was delivered yet,
    so a broken chunked body is retried and the turn answers; in generate_stream (turn_stream()) the text
    already reached the caller, so the failure propagates and the step defers (model-calls.md §8)."""
    understood(fake)
    frames = [gemini_frame(text=p) for p in pieces(SPEAK1)] + [gemini_frame(finish="STOP")]
    fake.sse(*frames, drop_after=2)
    fake.sse(*frames)
    r = concierge(gemini(fake), max_tool_loops=0).turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 2 and len(fake.requests) == 3
    understood(fake)
    fake.sse(*frames, drop_after=2)
    chunks = list(concierge(gemini(fake), max_tool_loops=0).turn_stream(session_id="demo", message=M1, id="m1"))
    assert chunks[:-1] and REPLY1.startswith("".join(c.delta for c in chunks[:-1]))
    result = chunks[-1].result
    assert result.messages == [] and (result.outcomes[-1].status, result.outcomes[-1].code) == (
        "deferred", "provider-unavailable")
    assert len(fake.requests) == 5


def test_a_stalled_speak_call_times_out_and_defers(fake):
    """providers.md §3.7: no byte within the idle deadline is kind `timeout`, retried; runtime.md §10.2:
    timeout → provider-unavailable, +1m."""
    agent = concierge(gemini(fake, retry_config={"timeout": 200, "retries": 1}), max_tool_loops=0)
    understood(fake)
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"), stall=0.5)
    fake.sse(gemini_frame(text=SPEAK1, finish="STOP"), stall=0.5)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert (r.outcomes[-1].status, r.outcomes[-1].code) == ("deferred", "provider-unavailable")
    assert r.schedule[0].key == retry_key(NOW_MS + 60_000) and len(fake.requests) == 3


@pytest.mark.parametrize("streaming", [False, True])
def test_a_reply_nested_past_the_recursion_limit_never_escapes_turn(fake, streaming):
    """Issue 7 item 9: a speak reply whose JSON nests deeper than Python's recursion limit escaped as
    RecursionError; it is now an unreadable envelope, so the round is a provider failure the turn defers
    (and a speak reply from a payload that deep is a ProviderError before that)."""
    agent = concierge(gemini(fake))
    understood(fake)
    deep = '{"message": ' + "[" * 5000 + "]" * 5000 + "}"
    for _ in range(2):
        fake.sse(gemini_frame(text=deep, finish="STOP"))
    if streaming:
        chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
        r = chunks[-1].result
    else:
        r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages == [] and r.outcomes[-1].code == "provider-unavailable"
