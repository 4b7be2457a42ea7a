"""The testing helpers: ScriptedProvider's contract and MemoryScheduler (python-api.md, Providers and Modules)."""
from datetime import datetime, timedelta, timezone

import pytest

from falai import (Generation, GenerateRequest, MemoryScheduler, ProviderError, ScheduleEntry, ScriptedProvider,
                   TokenUsage, ToolCallRequest)

NOW = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)


def request(name="speak", system="SYS", prompt="PROMPT"):
    return GenerateRequest(system=system, prompt=prompt, history=[], schema_name=name)


def test_a_dict_entry_is_the_structured_reply_and_its_tool_calls():
    entry = {"message": "Oi", "nome": None, "toolCalls": [{"toolName": "preco", "arguments": {"c": 1}},
                                                          {"toolName": "agenda"}]}
    provider = ScriptedProvider(script={"speak": [entry]})
    out = provider.generate(request())
    assert out.message == "Oi" and out.structured == {"message": "Oi", "nome": None}
    assert out.tool_calls == [ToolCallRequest(id="call_0", name="preco", arguments={"c": 1}),
                              ToolCallRequest(id="call_1", name="agenda", arguments={})]
    out.structured["nome"] = "x"
    assert entry["nome"] is None                       # a deep copy: the script is not touched
    assert out.usage is None


def test_a_dict_without_a_text_message_reads_as_its_compact_json():
    out = ScriptedProvider(script={"understand": [{"flows": {"f": 90}, "fields": {"cidade": "São Paulo"}}]}) \
        .generate(request("understand"))
    assert out.message == '{"flows":{"f":90},"fields":{"cidade":"São Paulo"}}'


def test_str_generation_exception_and_callable_entries():
    scripted = Generation(message="as given", usage=TokenUsage(1, 2, 3))
    seen = []
    provider = ScriptedProvider(script={"speak": [
        "prosa", "", '{"message": "oi"', scripted, ProviderError("sem cota", kind="quota"), TimeoutError,
        lambda req: seen.append(req.prompt) or {"message": "de uma função"},
        lambda req: ValueError("devolvida"),
    ]})
    assert (provider.generate(request()).message, provider.generate(request()).message) == ("prosa", "")
    assert provider.generate(request()).structured is None          # a broken envelope reaches the engine as is
    assert provider.generate(request()) is scripted
    with pytest.raises(ProviderError) as failure:
        provider.generate(request())
    assert failure.value.kind == "quota"
    with pytest.raises(TimeoutError):
        provider.generate(request())
    assert provider.generate(request(prompt="P7")).message == "de uma função" and seen == ["P7"]
    with pytest.raises(ValueError, match="devolvida"):
        provider.generate(request())


def test_every_request_is_recorded_even_one_that_raises_and_remaining_counts_queues():
    provider = ScriptedProvider(script={"speak": [RuntimeError("x"), "ok"], "understand": [{}]})
    with pytest.raises(RuntimeError):
        provider.generate(request())
    provider.generate(request())
    assert [c.schema_name for c in provider.calls] == ["speak", "speak"]
    assert provider.remaining() == {"speak": 0, "understand": 1}


def test_a_dry_or_missing_queue_raises_runtime_error_naming_the_schema():
    provider = ScriptedProvider(script={"speak": []})
    with pytest.raises(RuntimeError, match='no scripted "speak" reply left'):
        provider.generate(request())
    with pytest.raises(RuntimeError, match='no scripted "compaction" reply left'):
        provider.generate(request("compaction"))
    assert len(provider.calls) == 2


def test_usage_true_counts_characters_and_a_token_usage_is_reported_as_given():
    provider = ScriptedProvider(script={"speak": [{"message": "abc"}, "abcd"]}, usage=True)
    first = provider.generate(request(system="12345", prompt="123"))
    assert first.usage == TokenUsage(prompt_tokens=8, completion_tokens=3, cached_input_tokens=0)
    assert provider.generate(request(system=None, prompt="12")).usage == TokenUsage(2, 4, 0)
    fixed = TokenUsage(10, 20, 5)
    assert ScriptedProvider(script={"speak": ["x"]}, usage=fixed).generate(request()).usage is fixed


def test_streaming_a_scripted_reply_equals_generate():
    entry = {"message": "Olá", "toolCalls": [{"toolName": "t"}]}
    chunks = list(ScriptedProvider(script={"speak": [entry]}, usage=True).generate_stream(request()))
    plain = ScriptedProvider(script={"speak": [entry]}, usage=True).generate(request())
    assert [(c.delta, c.accumulated, c.done) for c in chunks] == [("Olá", "Olá", False), ("", "Olá", True)]
    last = chunks[-1]
    assert (last.structured, last.tool_calls, last.usage) == (plain.structured, plain.tool_calls, plain.usage)
    blank = list(ScriptedProvider(script={"speak": [""]}).generate_stream(request()))
    assert [(c.delta, c.done) for c in blank] == [("", True)]


def test_a_scripted_exception_is_raised_when_the_stream_is_first_iterated():
    stream = ScriptedProvider(script={"speak": [ProviderError("x", kind="rate")]}).generate_stream(request())
    with pytest.raises(ProviderError):
        next(stream)


def test_scripted_provider_identity():
    provider = ScriptedProvider()
    assert provider.name == "scripted" and provider.capabilities.supports_tools
    assert provider.capabilities.supports_prompt_caching is False


def test_memory_scheduler_pops_due_entries_in_time_order_and_honours_replaces():
    scheduler = MemoryScheduler()
    scheduler.add(ScheduleEntry(key="b", at=NOW + timedelta(hours=2)))
    scheduler.add(ScheduleEntry(key="a", at=NOW + timedelta(hours=1)))
    scheduler.add(ScheduleEntry(key="silence:f:s1:1", at=NOW + timedelta(days=1)))
    scheduler.add(ScheduleEntry(key="silence:f:s1:2", at=NOW + timedelta(days=2), replaces="silence:f:s1:1"))
    assert len(scheduler) == 3
    assert scheduler.due(NOW) == []
    assert [e.key for e in scheduler.due(NOW + timedelta(hours=2))] == ["a", "b"]
    assert len(scheduler) == 1
    assert [e.key for e in scheduler.due(NOW + timedelta(days=3))] == ["silence:f:s1:2"]
    assert len(scheduler) == 0


def test_memory_scheduler_drives_a_wake_through_the_host_loop():
    """runtime.md §18: each due entry goes back in as turn(wake=entry.key)."""
    from falai import falai, fake_clock
    clock = fake_clock("2026-09-20T10:00:00.000Z")
    agent = falai().fields({}).agent(name="Ana", provider=ScriptedProvider(), clock=clock, flows=[
        {"id": "lembrete", "name": "Lembrete", "steps": [{"id": "w", "wait": "1h"}, {"id": "s", "say": "Oi!"}]}])
    scheduler = MemoryScheduler()
    result = agent.turn(session_id="s1", start={"flow": "lembrete", "key": "k1"})
    for entry in result.schedule:
        scheduler.add(entry)
    assert scheduler.due(clock()) == []
    clock.advance("1h")
    (entry,) = scheduler.due(clock())
    woken = agent.turn(session_id="s1", session=result.session, wake=entry.key)
    assert [m.text for m in woken.messages] == ["Oi!"]
