"""Tool rounds: loop, gates, concurrency, results, data patches, history (model-calls.md §6, Tool seed page)."""
import logging
import threading
import time
from datetime import datetime, timezone

import pytest

import falai as F
import falai_protocols
import falai_calls
from falai import (Generation, ScriptedProvider, Tool, ToolCallRequest, ToolPermissionResult, ToolResult,
                   ToolValidationResult)

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

NOW = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def make_agent(script=None, provider=None, **options):
    options.setdefault("fields", {"reserva": {"type": "string"}})
    return F.Agent(name="Concierge", provider=provider or ScriptedProvider(script=script or {}), **options)


def idle_ask(tools, **changes):
    ask = F.SpeakAsk(input_kind="message", text="Quanto custa em Curitiba?",
                     scope=F.Scope(data={"nome": "Bia"}, context={"loja": "Azul"}), history=[], now=NOW,
                     tools=tools)
    for key, value in changes.items():
        setattr(ask, key, value)
    return ask


def drive(gen):
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def calling(*names_and_args, message=""):
    """A scripted speak reply that calls tools."""
    return {"message": message, "toolCalls": [{"toolName": name, "arguments": args} for name, args in names_and_args]}


def run_speak(tools, replies, agent_options=None, **ask_changes):
    agent = make_agent({"speak": replies}, **(agent_options or {}))
    result = drive(falai_calls.speak(agent, idle_ask(tools, **ask_changes), False))
    return agent.provider, result


def tool_contents(request):
    return [item["content"] for item in request.history if item["role"] == "tool"]


# §6.10: the example ----------------------------------------------------------------------------

@pytest.mark.protocols("v4")      # v4 prompt and envelope text; tests/model_calls/test_protocol.py covers "lean"
def test_the_spec_example_round_trip():
    """model-calls.md §6.10: two speak rounds; round 1 sees the user, assistant and tool items."""
    def price(args, ctx):
        return ToolResult(value={"nightly": 420})

    def book(args, ctx):
        code = "RES-" + ctx.now.strftime("%H%M%S")
        return {"value": {"code": code}, "data": {"reserva": code}}

    tools = [
        Tool(id="price", description="Nightly price in a city.", parameters=CITY, handler=price,
             is_read_only=lambda args: True),
        Tool(id="book", description="Books the room.", parameters=CITY, handler=book,
             is_destructive=lambda args: True,
             validate_input=lambda args, ctx: ToolValidationResult(valid=bool(args.get("city")),
                                                                   error="Informe a cidade.")),
    ]
    provider, result = run_speak(tools, [
        {"message": "Deixa eu ver.", "toolCalls": [{"toolName": "price", "arguments": {"city": "Curitiba"}}]},
        {"message": "A diária em Curitiba é R$ 420."}])
    assert result.llm_calls == 2 and result.message == "A diária em Curitiba é R$ 420."
    second = provider.calls[1]
    assert second.history == [
        {"role": "user", "content": "Quanto custa em Curitiba?"},
        {"role": "assistant", "content": "Deixa eu ver.",
         "tool_calls": [{"id": "call-0-0", "name": "price", "arguments": {"city": "Curitiba"}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "price", "content": '{"nightly":420}'},
    ]
    assert provider.calls[0].tools == [
        {"name": "price", "description": "Nightly price in a city.", "parameters": CITY},
        {"name": "book", "description": "Books the room.", "parameters": CITY}]
    assert "## Tools" in provider.calls[0].prompt and "## Tools" in second.prompt


# §6.3: the gates -------------------------------------------------------------------------------

def test_gate_1_a_name_that_is_not_offered():
    """model-calls.md §6.3 gate 1: exact payload; nothing runs."""
    provider, result = run_speak([Tool(id="price", handler=lambda a, c: ToolResult("x"))],
                                 [calling(("book", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == [r'{"error":"Tool \"book\" is not available."}']


def test_gate_2_validation_failure_with_error_and_corrected_input():
    """model-calls.md §6.3 gate 2: the handler is skipped; correctedInput when the result carries one."""
    ran = []
    tools = [Tool(id="v", handler=lambda a, c: ran.append(1),
                  validate_input=lambda a, c: ToolValidationResult(valid=False, error="Informe a cidade.",
                                                                   corrected_input={"city": "São Paulo"}))]
    provider, _ = run_speak(tools, [calling(("v", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == [
        '{"error":"Validation failed: Informe a cidade.","correctedInput":{"city":"São Paulo"}}']
    assert ran == []


@pytest.mark.parametrize("verdict, payload", [
    (ToolValidationResult(valid=False), '{"error":"Validation failed: invalid input"}'),
    ({"valid": False, "error": "sem cidade", "correctedInput": {"c": 1}},
     '{"error":"Validation failed: sem cidade","correctedInput":{"c":1}}'),
    ({"valid": False}, '{"error":"Validation failed: invalid input"}'),
    (False, '{"error":"Validation failed: invalid input"}'),
])
def test_gate_2_forms_and_default_error(verdict, payload):
    """model-calls.md §6.3: dataclass or dict; `invalid input` when error is None."""
    tools = [Tool(id="v", handler=lambda a, c: ToolResult("ran"), validate_input=lambda a, c: verdict)]
    provider, _ = run_speak(tools, [calling(("v", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == [payload]


@pytest.mark.parametrize("verdict", [None, ToolValidationResult(valid=True), {"valid": True}, True])
def test_gate_2_passes_on_valid_or_none(verdict):
    """model-calls.md §6.3: a None hook result passes the gate."""
    tools = [Tool(id="v", handler=lambda a, c: ToolResult("ran"), validate_input=lambda a, c: verdict)]
    provider, _ = run_speak(tools, [calling(("v", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ["ran"]


@pytest.mark.parametrize("verdict, payload", [
    (ToolPermissionResult(allowed=False, reason="só gerentes"), '{"error":"Permission denied: só gerentes"}'),
    (ToolPermissionResult(allowed=False), '{"error":"Permission denied: not allowed"}'),
    ({"allowed": False, "reason": "fora do horário"}, '{"error":"Permission denied: fora do horário"}'),
])
def test_gate_3_permission_denied(verdict, payload):
    """model-calls.md §6.3 gate 3: runs after validation; the handler is skipped."""
    order = []
    tools = [Tool(id="p", handler=lambda a, c: order.append("handler"),
                  validate_input=lambda a, c: order.append("validate"),
                  check_permissions=lambda a, c: (order.append("permissions"), verdict)[1])]
    provider, _ = run_speak(tools, [calling(("p", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == [payload]
    assert order == ["validate", "permissions"]


def test_gate_4_handler_raises_and_the_speak_call_goes_on(caplog):
    """model-calls.md §6.3 gate 4: `{"error":"<message>"}`, a warning naming the tool, never raised."""
    def boom(args, ctx):
        raise ValueError("sem estoque")

    with caplog.at_level(logging.WARNING, logger="falai"):
        provider, result = run_speak([Tool(id="estoque", handler=boom)], [calling(("estoque", {})),
                                                                          {"message": "Sem estoque."}])
    assert tool_contents(provider.calls[1]) == ['{"error":"sem estoque"}']
    assert result.message == "Sem estoque."
    assert any("estoque" in r.getMessage() and "sem estoque" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("hook", ["validate_input", "check_permissions"])
def test_gate_4_a_raising_gate_hook_skips_the_handler(hook):
    """model-calls.md §6.3: gate 2/3 raising reads as an error; the handler is not run."""
    ran = []

    def raising(args, ctx):
        raise RuntimeError("hook quebrou")

    tools = [Tool(id="t", handler=lambda a, c: ran.append(1), **{hook: raising})]
    provider, _ = run_speak(tools, [calling(("t", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ['{"error":"hook quebrou"}'] and ran == []


@pytest.mark.parametrize("returned, text", [
    (None, '{"ok":true}'),
    (ToolResult(), '{"ok":true}'),
    ({"value": "texto puro", "other": 1}, "texto puro"),
    ({"other": 1}, '{"ok":true}'),
    (ToolResult(value={"preço": 1.5, "ok": False, "n": None}), '{"preço":1.5,"ok":false,"n":null}'),
    (ToolResult(value=[1, "a"]), '[1,"a"]'),
    (ToolResult(value=datetime(2026, 9, 20, 10, 0, 0, 123000, tzinfo=timezone.utc)),
     '"2026-09-20T10:00:00.123Z"'),
    (ToolResult(value={"at": datetime(2026, 9, 20, tzinfo=timezone.utc)}), '{"at":"2026-09-20T00:00:00.000Z"}'),
    (ToolResult(value=object()), "[result could not be serialized]"),
    (ToolResult(value={"s": {1, 2}}), "[result could not be serialized]"),
])
def test_gate_5_value_serialization(returned, text):
    """model-calls.md §6.5: None -> {"ok":true}; str as is; compact JSON; datetimes ISO; else the notice."""
    provider, _ = run_speak([Tool(id="t", handler=lambda a, c: returned)], [calling(("t", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == [text]


def test_other_return_values_read_as_empty_with_a_warning(caplog):
    """model-calls.md §6.3: neither None, a ToolResult nor a dict: {"ok":true} and a warning naming the tool."""
    with caplog.at_level(logging.WARNING, logger="falai"):
        provider, _ = run_speak([Tool(id="lista", handler=lambda a, c: [1, 2])],
                                [calling(("lista", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ['{"ok":true}']
    assert any('"lista"' in r.getMessage() for r in caplog.records)


def test_long_values_are_truncated_with_the_exact_note():
    """model-calls.md §6.5: first M characters, a newline, then the note."""
    tools = [Tool(id="t", handler=lambda a, c: ToolResult("abcdefghij" * 3), max_result_size_chars=12)]
    provider, _ = run_speak(tools, [calling(("t", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ["abcdefghijab\n[truncated: 30 chars total, showing the first 12]"]


@pytest.mark.parametrize("limit", [None, 0, -5, 30])
def test_values_within_the_limit_or_without_one_are_not_cut(limit):
    """model-calls.md §6.5: only a limit greater than 0 that the text exceeds cuts it."""
    tools = [Tool(id="t", handler=lambda a, c: ToolResult("abcdefghij" * 3), max_result_size_chars=limit)]
    provider, _ = run_speak(tools, [calling(("t", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ["abcdefghij" * 3]


def test_error_payloads_are_never_truncated():
    """model-calls.md §6.3: error payloads are never truncated."""
    def boom(args, ctx):
        raise RuntimeError("x" * 50)

    provider, _ = run_speak([Tool(id="t", handler=boom, max_result_size_chars=5)],
                            [calling(("t", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ['{"error":"' + "x" * 50 + '"}']


# §6.2: the loop --------------------------------------------------------------------------------

@pytest.mark.protocols("v4")      # v4 prompt and envelope text; tests/model_calls/test_protocol.py covers "lean"
def test_max_tool_loops_then_exactly_one_wrap_up_round_without_tools():
    """model-calls.md §6.2: rounds with tools, then one wrap-up round; calls = max_tool_loops + 1."""
    count = []
    tool = Tool(id="t", handler=lambda a, c: count.append(1))
    replies = [calling(("t", {})) for _ in range(3)] + [{"message": "Pronto.", "toolCalls": [{"toolName": "t"}]}]
    provider, result = run_speak([tool], replies, {"max_tool_loops": 3})
    assert result.llm_calls == 4 and result.message == "Pronto."
    assert [bool(c.tools) for c in provider.calls] == [True, True, True, False]
    assert all("## Tools" in c.prompt and "## Wrap up" not in c.prompt for c in provider.calls[:3])
    assert "## Wrap up" in provider.calls[3].prompt and "## Tools" not in provider.calls[3].prompt
    assert provider.calls[3].prompt.endswith(falai_protocols.WRAP_UP_SECTION)
    assert len(count) == 3                          # the wrap-up round's call was ignored


def test_the_default_is_five_tool_rounds():
    """model-calls.md §6.2: max_tool_loops defaults to 5, so six speak calls at most."""
    tool = Tool(id="t", handler=lambda a, c: None)
    provider, result = run_speak([tool], [calling(("t", {})) for _ in range(5)] + [{"message": "fim"}])
    assert result.llm_calls == 6 and provider.calls[5].tools is None


@pytest.mark.parametrize("loops", [0, -2])
def test_max_tool_loops_zero_offers_no_tools(loops):
    """model-calls.md §6.2: 0 or less offers no tools at all; calls of that round are ignored."""
    ran = []
    provider, result = run_speak([Tool(id="t", handler=lambda a, c: ran.append(1))],
                                 [{"message": "Oi!", "toolCalls": [{"toolName": "t"}]}], {"max_tool_loops": loops})
    assert result.llm_calls == 1 and result.message == "Oi!" and ran == []
    assert provider.calls[0].tools is None
    assert "## Tools" not in provider.calls[0].prompt and "## Wrap up" not in provider.calls[0].prompt


def test_no_offered_tools_means_no_tools_and_calls_are_ignored():
    """model-calls.md §6.2: tool calls in a round that offered no tools are never executed."""
    provider, result = run_speak([], [{"message": "Oi!", "toolCalls": [{"toolName": "t"}]}])
    assert result.llm_calls == 1 and provider.calls[0].tools is None
    assert "## Tools" not in provider.calls[0].prompt


def test_a_round_without_tool_calls_ends_the_loop():
    """model-calls.md §6.2: no tool calls: stop; its message is the reply."""
    provider, result = run_speak([Tool(id="t", handler=lambda a, c: None)], [{"message": " Direto. "}])
    assert result.llm_calls == 1 and result.message == "Direto." and provider.calls[0].tools is not None


def test_a_blank_final_reply_after_tool_rounds_defers():
    """model-calls.md §6.2, §10.2: after the loop a blank reply is a failure; the tool's data is kept."""
    tool = Tool(id="t", handler=lambda a, c: {"data": {"x": 1}})
    _, result = run_speak([tool], [calling(("t", {}), message="Vou ver"), {"message": "  "}])
    assert result == F.Deferred(code="provider-unavailable", retryable=True, llm_calls=2, data={"x": 1})


def test_duplicate_ids_are_both_offered_and_the_first_runs():
    """Tool seed page: ids are not checked for uniqueness; a call runs the first one."""
    tools = [Tool(id="t", description="first", handler=lambda a, c: ToolResult("first")),
             Tool(id="t", description="second", handler=lambda a, c: ToolResult("second"))]
    provider, _ = run_speak(tools, [calling(("t", {})), {"message": "ok"}])
    assert [d["description"] for d in provider.calls[0].tools] == ["first", "second"]
    assert tool_contents(provider.calls[1]) == ["first"]


# §6.6: data patches ----------------------------------------------------------------------------

def test_data_patches_merge_in_call_order_not_completion_order():
    """model-calls.md §6.4, §6.6: a slow earlier call still loses to a later one for the same key."""
    def slow(args, ctx):
        time.sleep(0.1)
        return {"data": {"k": "slow", "a": 1}}

    tools = [Tool(id="slow", handler=slow, is_read_only=lambda a: True),
             Tool(id="fast", handler=lambda a, c: {"data": {"k": "fast", "b": None}}, is_read_only=lambda a: True)]
    _, result = run_speak(tools, [calling(("slow", {}), ("fast", {})), calling(("slow", {})), {"message": "ok"}])
    assert result.data == {"k": "slow", "a": 1, "b": None}     # round 2's slow call came last; None kept


def test_later_rounds_see_earlier_patches_in_ctx_data():
    """model-calls.md §6.6, §6.8: session.data overlaid with the call's patches; a None key left out."""
    seen = []
    tools = [Tool(id="w", handler=lambda a, c: {"data": {"reserva": "R1", "nome": None}}),
             Tool(id="r", handler=lambda a, c: seen.append(dict(c.data)))]
    ask_data = {"nome": "Bia", "x": 1}
    _, result = run_speak(tools, [calling(("w", {})), calling(("r", {})), {"message": "ok"}],
                          scope=F.Scope(data=ask_data, context=None))
    assert seen == [{"x": 1, "reserva": "R1"}]
    assert ask_data == {"nome": "Bia", "x": 1}                  # the live data is not touched
    assert result.data == {"reserva": "R1", "nome": None}


def test_patches_of_a_failed_speak_call_are_dropped():
    """model-calls.md §6.6: a speak call that ends in failure returns no data."""
    tool = Tool(id="w", handler=lambda a, c: {"data": {"x": 1}})
    _, result = run_speak([tool], [calling(("w", {})), RuntimeError("down")])
    assert isinstance(result, F.Deferred) and result.llm_calls == 2


def test_a_data_value_that_is_not_a_dict_is_ignored(caplog):
    """(inferred) `data` must be a dict patch; anything else is dropped with a warning."""
    with caplog.at_level(logging.WARNING, logger="falai"):
        _, result = run_speak([Tool(id="w", handler=lambda a, c: {"value": "v", "data": ["x"]})],
                              [calling(("w", {})), {"message": "ok"}])
    assert result.data == {} and any('"w"' in r.getMessage() for r in caplog.records)


# §6.7-§6.8: history items and ToolCtx ----------------------------------------------------------

def test_history_items_carry_round_and_index_ids_signatures_and_reasoning():
    """model-calls.md §6.7: call-<round>-<index>; thoughtSignature; reasoning; content None without text."""
    tool = Tool(id="t", handler=lambda a, c: ToolResult(a.get("n")))
    provider = ScriptedProvider(script={"speak": [
        Generation(message="", tool_calls=[ToolCallRequest(id="p1", name="t", arguments={"n": "a"},
                                                           thought_signature="sig-1"),
                                           ToolCallRequest(id="p2", name="t", arguments={"n": "b"})],
                   reasoning="pensando", reasoning_details=[{"type": "r"}]),
        Generation(message="Mais um.", tool_calls=[ToolCallRequest(id="p3", name="t", arguments={"n": "c"})]),
        Generation(message="Fim.")]})
    agent = make_agent(provider=provider)
    history = [{"role": "assistant", "content": "Oi!"}]
    drive(falai_calls.speak(agent, idle_ask([tool], history=history), False))
    assert provider.calls[0].history == history and history == [{"role": "assistant", "content": "Oi!"}]
    assert provider.calls[2].history == [
        {"role": "assistant", "content": "Oi!"},
        {"role": "user", "content": "Quanto custa em Curitiba?"},
        {"role": "assistant", "content": None, "reasoning": "pensando", "reasoningDetails": [{"type": "r"}],
         "tool_calls": [{"id": "call-0-0", "name": "t", "arguments": {"n": "a"}, "thoughtSignature": "sig-1"},
                        {"id": "call-0-1", "name": "t", "arguments": {"n": "b"}}]},
        {"role": "tool", "tool_call_id": "call-0-0", "name": "t", "content": "a"},
        {"role": "tool", "tool_call_id": "call-0-1", "name": "t", "content": "b"},
        {"role": "assistant", "content": "Mais um.",
         "tool_calls": [{"id": "call-1-0", "name": "t", "arguments": {"n": "c"}}]},
        {"role": "tool", "tool_call_id": "call-1-0", "name": "t", "content": "c"},
    ]


def test_no_user_item_when_the_history_already_ends_with_one():
    """model-calls.md §6.7 rule 1: the round-0 user item only when the last item is not a user item."""
    tool = Tool(id="t", handler=lambda a, c: None)
    provider, _ = run_speak([tool], [calling(("t", {})), {"message": "ok"}],
                            history=[{"role": "user", "content": "antes"}])
    assert [item["role"] for item in provider.calls[1].history] == ["user", "assistant", "tool"]


@pytest.mark.protocols("v4")      # v4 prompt and envelope text; tests/model_calls/test_protocol.py covers "lean"
def test_user_item_is_the_speak_prompt_on_a_wake_turn():
    """model-calls.md §6.7 rule 1: the speak prompt without the round section, when there is no message."""
    tool = Tool(id="t", handler=lambda a, c: None)
    provider, _ = run_speak([tool], [calling(("t", {})), {"message": "ok"}], input_kind="wake", text=None)
    first = provider.calls[0]
    user = provider.calls[1].history[0]
    assert user["role"] == "user"
    assert first.prompt == user["content"] + "\n\n" + falai_protocols.TOOLS_SECTION


def test_tool_ctx_carries_context_run_now_and_the_rounds_history():
    """model-calls.md §6.8: one ToolCtx per round, history as the model saw it in that round: in round 0 the
    customer's message, which the model read in the prompt, is its last item, so a tool can check the
    customer's own words."""
    seen = []
    tool = Tool(id="t", handler=lambda a, c: seen.append(c))
    run = F.Run(id="r#1", flow_id="r", anchor="session", dedupe_key="r:session:", step_id="s",
                status="asking", trigger={}, hop=0, started_at="2026-09-20T10:00:00.000Z")
    provider, _ = run_speak([tool], [calling(("t", {}), ("t", {})), calling(("t", {})), {"message": "ok"}],
                            run=run)
    assert len(seen) == 3 and seen[0] is seen[1] and seen[1] is not seen[2]
    assert seen[0].context == {"loja": "Azul"} and seen[0].run is run and seen[0].now == NOW
    assert provider.calls[0].history == [] and seen[0].history == [
        {"role": "user", "content": "Quanto custa em Curitiba?"}]
    assert seen[2].history == provider.calls[1].history and len(seen[2].history) == 4


def test_string_arguments_are_parsed_and_bad_ones_become_empty():
    """model-calls.md §2.9, §5.5 rule 4: strip, unfence, lenient parse; not a dict -> {}."""
    seen = []
    tool = Tool(id="t", handler=lambda a, c: seen.append(a))
    provider = ScriptedProvider(script={"speak": [
        Generation(message="", tool_calls=[
            ToolCallRequest(id="1", name="t", arguments=' ```json\n{"city": "Rio\nde Janeiro"}\n``` '),
            ToolCallRequest(id="2", name="t", arguments="[1, 2]"),
            ToolCallRequest(id="3", name="t", arguments="not json"),
            ToolCallRequest(id="4", name="", arguments={}),
            ToolCallRequest(id="5", name="t", arguments=None)]),
        "ok"]})
    drive(falai_calls.speak(make_agent(provider=provider), idle_ask([tool]), False))
    assert seen == [{"city": "Rio\nde Janeiro"}, {}, {}, {}]          # the nameless call is dropped
    assert [c["id"] for c in provider.calls[1].history[1]["tool_calls"]] == [
        "call-0-0", "call-0-1", "call-0-2", "call-0-3"]


def test_a_handler_mutating_its_arguments_does_not_change_the_history():
    """(inferred) each call gets its own copy of the arguments."""
    tool = Tool(id="t", handler=lambda a, c: a.update(city="X"))
    provider, _ = run_speak([tool], [calling(("t", {"city": "Rio"})), {"message": "ok"}])
    assert provider.calls[1].history[1]["tool_calls"][0]["arguments"] == {"city": "Rio"}


# §6.4: concurrency -----------------------------------------------------------------------------

def sleeper(name, log_, delay=0.2, **hooks):
    def handler(args, ctx):
        log_.append((name, "start", time.perf_counter()))
        time.sleep(delay)
        log_.append((name, "end", time.perf_counter()))
        return ToolResult(name)
    return Tool(id=name, handler=handler, **hooks)


def test_safe_calls_of_a_round_run_in_parallel():
    """model-calls.md §6.4: two read-only calls that each sleep 0.2 s finish together."""
    events = []
    tools = [sleeper("a", events, is_read_only=lambda a: True),
             sleeper("b", events, is_concurrency_safe=lambda a: True)]
    agent = make_agent({"speak": [calling(("a", {}), ("b", {})), {"message": "ok"}]})
    started = time.perf_counter()
    drive(falai_calls.speak(agent, idle_ask(tools), False))
    assert time.perf_counter() - started < 0.35
    assert tool_contents(agent.provider.calls[1]) == ["a", "b"]


def test_destructive_and_unmarked_calls_run_alone_in_order():
    """model-calls.md §6.4: safe, destructive, safe, unmarked: no overlap with the destructive or unmarked call."""
    events = []
    tools = [sleeper("s1", events, 0.05, is_read_only=lambda a: True),
             sleeper("d", events, 0.05, is_read_only=lambda a: True, is_destructive=lambda a: True),
             sleeper("s2", events, 0.05, is_concurrency_safe=lambda a: True),
             sleeper("u", events, 0.05)]
    provider, _ = run_speak(tools, [calling(("s1", {}), ("d", {}), ("s2", {}), ("u", {})), {"message": "ok"}])
    spans = {name: [t for n, _, t in events if n == name] for name in ("s1", "d", "s2", "u")}
    assert spans["s1"][1] <= spans["d"][0] and spans["d"][1] <= spans["s2"][0] and spans["s2"][1] <= spans["u"][0]
    assert tool_contents(provider.calls[1]) == ["s1", "d", "s2", "u"]


def test_results_stay_in_call_order_whatever_finishes_first():
    """model-calls.md §6.4: results in call order."""
    def slow(args, ctx):
        time.sleep(0.1)
        return ToolResult("slow")

    tools = [Tool(id="slow", handler=slow, is_read_only=lambda a: True),
             Tool(id="fast", handler=lambda a, c: ToolResult("fast"), is_read_only=lambda a: True)]
    provider, _ = run_speak(tools, [calling(("slow", {}), ("fast", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ["slow", "fast"]


def test_concurrency_safe_wins_over_read_only():
    """model-calls.md §6.4: is_concurrency_safe when set, else is_read_only."""
    safe = Tool(id="t", handler=lambda a, c: None, is_concurrency_safe=lambda a: False, is_read_only=lambda a: True)
    assert falai_calls.is_safe_call(safe, {}) is False
    assert falai_calls.is_safe_call(Tool(id="t", handler=lambda a, c: None), {}) is False
    assert falai_calls.is_safe_call(Tool(id="t", handler=lambda a, c: None, is_read_only=lambda a: a.get("r")),
                          {"r": True}) is True
    assert falai_calls.is_safe_call(None, {}) is False


def test_a_raising_concurrency_hook_makes_the_call_run_alone(caplog):
    """model-calls.md §6.4 (inferred): the call is not safe, and nothing raises."""
    threads = []

    def handler(args, ctx):
        threads.append(threading.current_thread())
        return ToolResult("ok")

    def broken(args):
        raise RuntimeError("hook")

    tool = Tool(id="t", handler=handler, is_read_only=broken)
    with caplog.at_level(logging.WARNING, logger="falai"):
        provider, result = run_speak([tool], [calling(("t", {}), ("t", {})), {"message": "ok"}])
    assert threads == [threading.main_thread()] * 2 and result.message == "ok"
    assert falai_calls.is_safe_call(Tool(id="t", handler=handler, is_destructive=broken, is_read_only=lambda a: True), {}) \
        is False


def test_unavailable_calls_are_never_safe_and_do_not_break_a_batch_order():
    """model-calls.md §6.4: a call is safe only when its tool is offered."""
    tools = [Tool(id="r", handler=lambda a, c: ToolResult("r"), is_read_only=lambda a: True)]
    provider, _ = run_speak(tools, [calling(("r", {}), ("nope", {}), ("r", {})), {"message": "ok"}])
    assert tool_contents(provider.calls[1]) == ["r", r'{"error":"Tool \"nope\" is not available."}', "r"]
