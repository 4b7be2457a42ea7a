"""What a turn builds once and reuses (issue 12): the agent's tool pool, its flow facts, lazy imports.
Speed itself is measured in bench/bench_turn.py, never here."""
import os
import subprocess
import sys
import threading

import falai as F
import falai_calls
from falai import ScriptedProvider, Tool

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def speak_with_two_safe_calls(agent):
    ask = F.SpeakAsk(input_kind="message", text="oi", scope=F.Scope(data={}, context=None), history=[],
                     now=F.fake_clock("2026-09-20T10:00:00.000Z")(), tools=agent.tools)
    gen = falai_calls.speak(agent, ask, False)
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("speak yielded while not streaming")


def test_safe_tool_calls_run_on_one_capped_pool_per_agent_created_on_first_use():
    """model-calls.md §6.4: consecutive safe calls run together; the pool is the agent's, made once."""
    threads = []

    def handler(args, ctx):
        threads.append(threading.current_thread().name)
        return {"value": "ok"}

    calls = {"message": "", "toolCalls": [{"toolName": "a", "arguments": {}}, {"toolName": "b", "arguments": {}}]}
    provider = ScriptedProvider(script={"speak": [calls, {"message": "Pronto."}, calls, {"message": "De novo."}]})
    agent = F.Agent(name="Ana", provider=provider,
                    tools=[Tool(id=name, handler=handler, is_read_only=lambda a: True) for name in ("a", "b")])
    assert agent.compiled._tool_pool is None
    assert speak_with_two_safe_calls(agent).message == "Pronto."
    pool = agent.compiled._tool_pool
    assert pool is not None and pool._max_workers == F.TOOL_POOL_WORKERS
    assert speak_with_two_safe_calls(agent).message == "De novo."
    assert agent.compiled._tool_pool is pool
    assert len(threads) == 4 and all(name.startswith("falai-tool") for name in threads)


def test_a_call_that_is_not_safe_never_starts_the_pool():
    """model-calls.md §6.4: a call that is not safe runs alone, on the caller's thread."""
    provider = ScriptedProvider(script={"speak": [{"message": "", "toolCalls": [{"toolName": "a", "arguments": {}}]},
                                                  {"message": "Pronto."}]})
    agent = F.Agent(name="Ana", provider=provider, tools=[Tool(id="a", handler=lambda a, c: {"value": 1})])
    assert speak_with_two_safe_calls(agent).message == "Pronto."
    assert agent.compiled._tool_pool is None


def test_flow_facts_are_worked_out_once_per_flow():
    """runtime.md §3.4: the triggers and collected fields phase 3 reads come from the agent's own flows."""
    flow = {"id": "f", "name": "F", "on": [{"message": ["quer ajuda"]}, {"mention": ["ajuda"]}],
            "collect": ["nome"], "steps": [{"id": "q", "collect": ["cidade", "nome"]}]}
    agent = F.Agent(name="Ana", provider=ScriptedProvider(script={}), flows=[flow],
                    fields={"nome": {"type": "string"}, "cidade": {"type": "string"}})
    facts = F.flow_facts(agent, agent.flows[0])
    assert facts.phrased == {"message": ["quer ajuda"]} and facts.catch_all is None
    assert facts.mention == {"mention": ["ajuda"]} and facts.slugs == ("nome", "cidade")
    assert F.flow_facts(agent, agent.flows[0]) is facts


def test_import_falai_leaves_what_a_turn_may_not_need_unimported():
    """The card: `import falai` stays quick; the thread pool and decimal load when first used."""
    code = "import sys, falai; print(sorted(m for m in ('concurrent.futures', 'decimal') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_request_body_reusing_history_fragments_is_byte_for_byte_the_plain_one():
    """providers.md §3: the text sent is compact_json(body); reusing each item's text changes no byte."""
    from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider
    history = [{"role": "user", "content": 'Oi, "Ana" \u00e9 \\ aqui'}, {"role": "assistant", "content": "Olá!"},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": {"a": 1}}]},
               {"role": "tool", "tool_call_id": "c1", "name": "t", "content": '{"ok":true}'},
               {"role": "user", "content": "E o preço?"}]
    request = F.GenerateRequest(system="Você é a Ana.", prompt="Responda.", history=history, context={},
                                schema={"type": "object", "properties": {"message": {"type": "string"}}},
                                schema_name="speak", tools=[{"name": "t", "description": "d",
                                                             "parameters": {"type": "object"}}])
    for provider in (GeminiProvider(api_key="k", model="gemini-2.5-flash"),
                     OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini"),
                     AnthropicProvider(api_key="k", model="claude-sonnet-4-5")):
        _, _, body = provider._wire(provider.model, provider._plan(request))
        first = provider._body_text(body)
        assert first == F.compact_json(body) and provider._body_text(body) == first
        kept = len(provider._fragments)
        assert provider._body_text(body) == first and len(provider._fragments) == kept


def test_the_reply_schemas_are_built_once_per_agent_and_no_turn_changes_them():
    """providers.md §1.6 rule 7: every call that asks the same reply gets the same schema dict, which the
    engine never changes; each is what the call's builder gives (lean and v4 alike)."""
    import copy

    from request_bodies import triage_conversation
    from request_bodies import triage_agent
    from falai import ScriptedProvider
    from falai_protocols import lean_parts, lean_schema, lean_speak_schema

    def unbounded(node):
        """The schema without the bounds a weak model needs (ids as enums, maxItems, score range)."""
        if isinstance(node, dict):
            return {k: unbounded(v) for k, v in node.items() if k not in ("enum", "maxItems", "minimum", "maximum")}
        return node
    for protocol in ("lean", "v4"):
        requests, _ = triage_conversation({"protocol": protocol})
        speak = [r for r in requests if r.schema_name == "speak"]
        understand = [r for r in requests if r.schema_name == "understand"]
        assert len(speak) >= 4 and len(understand) >= 3
        seen: dict[int, dict] = {}
        for request in requests:
            for schema in (request.schema, request.v4_schema):
                if schema is not None:
                    assert seen.setdefault(id(schema), copy.deepcopy(schema)) == schema, protocol
        if protocol == "lean":
            assert all(r.schema is speak[0].schema for r in speak) and speak[0].schema == lean_speak_schema()
            assert all(r.schema is understand[0].schema for r in understand)
            agent = triage_agent(ScriptedProvider(), protocol="lean")
            assert understand[0].schema == lean_parts(agent).schema      # the agent's flows and fields
            assert understand[0].schema["properties"]["flows"]["items"]["properties"]["id"] == \
                {"type": "string", "enum": [f["id"] for f in agent.flows]}
            assert lean_schema(understand[0].schema["properties"]) == unbounded(understand[0].schema)
        # The same pending fields ask the same speak envelope: the last two speak rounds (a tool round
        # and its answer) share theirs.
        assert (speak[-1].schema if protocol == "v4" else speak[-1].v4_schema) is \
            (speak[-2].schema if protocol == "v4" else speak[-2].v4_schema)


def test_the_built_in_providers_never_change_a_request():
    """providers.md §1.6 rule 7: the schemas and tool declarations are shared, so building each vendor's
    body (tool rounds, protocol "v4" and "lean") leaves every request as it was."""
    import copy

    from request_bodies import triage_conversation, wire_bodies
    for protocol in ("lean", "v4"):
        requests, _ = triage_conversation({"protocol": protocol}, history_items=4)
        assert any(r.tools for r in requests)
        before = [copy.deepcopy((r.system, r.prompt, r.history, r.schema, r.tools, r.v4_schema)) for r in requests]
        for request in requests:
            wire_bodies(request)
        assert [(r.system, r.prompt, r.history, r.schema, r.tools, r.v4_schema) for r in requests] == before


def test_what_an_agent_works_out_once_is_kept_by_its_compiled_parts():
    """One object per agent keeps its flow facts, flows by trigger and silence flows; it is part of
    the agent's frozen configuration, so it cannot be swapped out."""
    flows = [{"id": "f", "name": "F", "on": [{"message": ["oi"]}, {"silence": "10m"}],
              "steps": [{"id": "a", "say": "A"}]}]
    agent = F.Agent(name="Ana", provider=ScriptedProvider(script={}), flows=flows)
    listed = F.flows_by_trigger(agent)
    assert F.flows_by_trigger(agent) is listed and [flow["id"] for flow in listed.phrased.flows] == ["f"]
    assert F.silence_flows(agent) is F.silence_flows(agent) and F.silence_flows(agent)[0][0] is agent.flows[0]
    assert agent.compiled.tool_pool() is agent.compiled.tool_pool()
    other = F.Agent(name="Ana", provider=ScriptedProvider(script={}), flows=flows)
    assert F.flows_by_trigger(other) is not listed      # per agent, never shared
    try:
        agent.compiled = other.compiled
    except AttributeError as error:
        assert "build a new Agent" in str(error)
    else:
        raise AssertionError("agent.compiled was replaced")
