"""turn_stream(): deltas while the reply is phrased, then one done chunk with the same result
(runtime.md §16, model-calls.md §8)."""
from falai import GenerationChunk, ScriptedProvider, TurnStreamChunk, falai, fake_clock
import pytest

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)


class Chunky(ScriptedProvider):
    """Streams its scripted envelope in small pieces, as a real provider streams JSON text."""

    def generate_stream(self, request):
        generation = self.generate(request)
        text, sent = generation.message, ""
        for i in range(0, len(text), 4):
            sent += text[i:i + 4]
            yield GenerationChunk(delta=text[i:i + 4], accumulated=sent, done=False)
        yield GenerationChunk(delta="", accumulated=text, done=True, structured=generation.structured,
                              tool_calls=generation.tool_calls, usage=generation.usage)


def agent_with(provider, **options):
    f = falai().fields({"nome": {"type": "string"}})
    return f.agent(name="Ana", provider=provider, clock=fake_clock("2026-09-20T10:00:00.000Z"),
                   idle={"prompt": "Atenda."}, **options)


def test_stream_yields_the_message_text_then_the_same_result_as_turn():
    script = {"speak": [{"message": "Olá! Tudo bem com você?"}]}
    chunks = list(agent_with(Chunky(script=dict(script))).turn_stream(session_id="s1", message="oi", id="m1"))
    plain = agent_with(ScriptedProvider(script=dict(script))).turn(session_id="s1", message="oi", id="m1")
    assert all(isinstance(c, TurnStreamChunk) for c in chunks)
    deltas = [c.delta for c in chunks[:-1]]
    assert len(deltas) > 2 and all(deltas) and "".join(deltas) == "Olá! Tudo bem com você?"
    last = chunks[-1]
    assert last.done and last.delta == "" and last.result == plain
    assert all(not c.done and c.result is None for c in chunks[:-1])


def test_when_nobody_speaks_only_the_done_chunk_comes():
    f = falai().fields({})
    agent = f.agent(name="Ana", provider=ScriptedProvider(), idle="silent",
                    flows=[{"id": "x", "name": "X", "steps": [{"id": "s", "say": "Oi"}]}])
    chunks = list(agent.turn_stream(session_id="s1", start={"flow": "x", "key": "k"}))
    assert len(chunks) == 1 and chunks[0].done and chunks[0].result.messages[0].text == "Oi"


def test_a_speak_failure_while_streaming_never_raises():
    """model-calls.md §8: a speak failure ends in the done chunk with the deferred outcome."""
    provider = ScriptedProvider(script={"speak": [RuntimeError("boom")]})
    chunks = list(agent_with(provider).turn_stream(session_id="s1", message="oi", id="m1"))
    result = chunks[-1].result
    assert len(chunks) == 1 and [(o.kind, o.status, o.code) for o in result.outcomes] == [
        ("idle", "deferred", "provider-unavailable")]
