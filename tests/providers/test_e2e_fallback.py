"""End to end: the seed Concierge on a real FallbackProvider of a GeminiProvider and an
OpenAICompatibleProvider, each over real HTTP against its own local fake server (providers.md §7, §8.4;
runtime.md §10.2)."""
from __future__ import annotations

import json

import pytest

from falai import ProviderError
from falai_providers import FallbackProvider, GeminiProvider, OpenAICompatibleProvider
from fake_model_server import FakeModelServer, gemini_frame, openai_frame
from e2e_concierge import M1, REPLY1, SPEAK1, UNDERSTAND1, concierge, ms_of, pieces, real_now_iso

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

OVERLOADED = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}


@pytest.fixture
def servers():
    g, o = FakeModelServer(), FakeModelServer()
    yield g, o
    g.close()
    o.close()


def members(g, o):
    gemini = GeminiProvider(api_key="test-key", model="gemini-3.8-flash", base_url=g.url, sleep=lambda s: None,
                            retry_config={"timeout": 3000, "retries": 0})
    openai = OpenAICompatibleProvider(name="openrouter", api_key="test-key", model="google/gemini-3.8-flash",
                                      base_url=o.url + "/v1", sleep=lambda s: None,
                                      retry_config={"timeout": 3000, "retries": 0})
    return gemini, openai


def openai_text(server, text):
    server.sse(*[openai_frame(content=p) for p in pieces(text)], openai_frame(finish="stop"), "[DONE]")


def openai_call(server, name, args):
    server.sse(openai_frame(tool={"index": 0, "id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}),
               openai_frame(finish="tool_calls"), "[DONE]")


def test_an_overloaded_gemini_falls_through_to_openrouter_for_the_whole_turn(servers):
    """providers.md §7 rules 1-3: a 503 (overload) cools Gemini and the call goes to the next member; the
    cooling member is skipped on the turn's later calls; the turn answers normally."""
    g, o = servers
    agent = concierge(FallbackProvider(list(members(g, o))))
    g.error(503, OVERLOADED)
    openai_text(o, UNDERSTAND1)
    openai_call(o, "preco", {"cidade": "Curitiba"})
    openai_text(o, SPEAK1)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 3
    assert len(g.requests) == 1 and len(o.requests) == 3
    assert o.requests[2].json["messages"][2]["tool_calls"][0]["id"] == "call-0-0"


def test_a_round_history_with_a_gemini_signature_maps_cleanly_onto_the_backup(servers):
    """model-calls.md §6.7 / providers.md §2.4, §5.3: round 0 answered by Gemini (with a thought signature),
    round 1 falls through to the OpenAI-compatible member: its messages carry the engine's call ids and no
    Gemini-only field."""
    g, o = servers
    agent = concierge(FallbackProvider(list(members(g, o))))
    g.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    g.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), signature="sig-1", finish="STOP"))
    g.error(503, OVERLOADED)
    openai_text(o, SPEAK1)
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert r.messages[0].text == REPLY1 and r.llm_calls == 3
    body = o.requests[0].json
    assert body["messages"][1:4] == [
        {"role": "user", "content": M1},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call-0-0", "type": "function", "function": {"name": "preco", "arguments": '{"cidade":"Curitiba"}'}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "content": '{"precoNoite":420}'},
    ]
    assert "sig-1" not in o.requests[0].raw.decode() and "thoughtSignature" not in o.requests[0].raw.decode()


def test_turn_stream_falls_through_before_the_first_chunk(servers):
    """providers.md §7 rule 2-3: generate_stream falls through when nothing was yielded yet; the streamed
    turn equals turn() on the same replies (model-calls.md §8)."""
    g, o = servers
    agent = concierge(FallbackProvider(list(members(g, o))))
    g.sse(gemini_frame(text=UNDERSTAND1, finish="STOP"))
    g.sse(gemini_frame(call=("preco", {"cidade": "Curitiba"}), finish="STOP"))
    g.error(503, OVERLOADED)
    openai_text(o, SPEAK1)
    chunks = list(agent.turn_stream(session_id="demo", message=M1, id="m1"))
    assert "".join(c.delta for c in chunks[:-1]) == REPLY1
    assert chunks[-1].result.messages[0].text == REPLY1


def test_every_member_cooling_defers_the_step_to_the_earliest_reset(servers):
    """providers.md §7 rule 4: with every member cooling, NoAvailableProviderError (kind `rate`, reset_at_ms =
    the earliest retry time); runtime.md §10.2: provider-unavailable, and the later reset moves the wake."""
    g, o = servers
    now = real_now_iso()
    now_ms = ms_of(now)
    gemini, openai = members(g, o)
    pool = FallbackProvider([gemini, openai], now=lambda: now_ms)
    agent = concierge(pool, clock=now)
    # understand: Gemini throttled until +2h by its reset header, OpenRouter answers.
    g.error(429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
            headers={"x-ratelimit-reset": str(now_ms // 1000 + 7200)})
    openai_text(o, UNDERSTAND1)
    # speak: Gemini is cooling; OpenRouter throttled until +3h.
    o.error(429, {"error": {"message": "Rate limit exceeded", "code": 429}},
            headers={"x-ratelimit-reset": str(now_ms // 1000 + 3 * 3600)})
    r = agent.turn(session_id="demo", message=M1, id="m1")
    assert len(g.requests) == 1 and len(o.requests) == 2
    first_at = int(r.schedule[0].key.rsplit(":", 1)[1])
    assert abs(first_at - (now_ms + 3 * 3_600_000)) < 5_000
    # the wake fires while both still cool: nobody can be called.
    w = agent.turn(session_id="demo", session=r.session, wake=r.schedule[0].key,
                   history=[{"role": "user", "content": M1}])
    assert len(g.requests) == 1 and len(o.requests) == 2
    assert (w.outcomes[-1].status, w.outcomes[-1].code) == ("deferred", "provider-unavailable")
    second_at = int(w.schedule[0].key.rsplit(":", 1)[1])
    assert abs(second_at - (now_ms + 2 * 3_600_000)) < 5_000      # the earliest reset, later than +5m


def test_an_understand_failure_of_a_kind_without_cooldown_raises_at_once(servers):
    """providers.md §7 (no fallthrough for `invalid`), §8.4: the understand call raises out of turn()."""
    g, o = servers
    agent = concierge(FallbackProvider(list(members(g, o))))
    g.error(400, {"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}})
    with pytest.raises(ProviderError) as caught:
        agent.turn(session_id="demo", message=M1, id="m1")
    assert caught.value.kind == "invalid" and caught.value.provider == "gemini" and o.requests == []
