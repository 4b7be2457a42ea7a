"""Agent construction checks: persistence.md §1.11, flows.md §14.5, model-calls.md §6.9 and §9.1.

A flow that cannot run fails at ``falai().fields(...).agent(...)``, never in
the middle of a conversation.
"""
import logging

import pytest

import falai as F
import falai_checks
from falai import Agent, FalaiError, FlowConfigurationError, ScriptedProvider, Tool, falai
from falai_checks import check_agent

f = falai().fields({
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "cargo": {"type": "string"},
    "porte": {"type": "string", "enum": ["1-10", "11-50"]},
})
notify = f.action(parameters={"texto": {"type": "string"}}, run=lambda params, ctx: {"ok": True})
vip = f.condition(lambda ctx, arg: True)
preco = Tool(id="preco", handler=lambda args, ctx: {"value": 420},
             parameters={"type": "object", "properties": {"cidade": {"type": "string"}}, "required": ["cidade"]})


def build(**options):
    options.setdefault("name", "Ana")
    options.setdefault("provider", ScriptedProvider())
    return f.agent(**options)


def build_error(**options):
    with pytest.raises(FlowConfigurationError) as caught:
        build(**options)
    return str(caught.value)


def greeting(flow_id="boas-vindas", **keys):
    return {"id": flow_id, "name": "Boas-vindas", "on": [{"message": []}],
            "steps": [{"id": "nome", "collect": ["nome"]},
                      {"id": "ajuda", "prompt": "Agradeça e pergunte como pode ajudar."}], **keys}


def test_a_valid_agent_builds():
    """persistence.md §1.11: an agent whose flows and names all check out builds."""
    agent = build(flows=[greeting()], actions={"notify": notify}, conditions={"vip": vip}, tools=[preco],
                  instructions=[{"prompt": "Seja breve.", "if": {"vip": True}}],
                  idle={"prompt": "Responda.", "tools": ["preco"]}, compaction={"maxTokens": 8000})
    assert agent.flow_by_id["boas-vindas"]["id"] == "boas-vindas"


# What a newcomer gets wrong, caught at f.agent(...) -----------------------------------------------

def test_a_typo_in_a_field_name_fails_the_build():
    """flows.md §16: a typo such as "collect": ["nmoe"] raises at build with the fix sentence."""
    flow = greeting(steps=[{"id": "nome", "collect": ["nmoe"]}])
    assert build_error(flows=[flow]) == (
        '[FlowConfigurationError] flow "boas-vindas", step "nome": unknown field "nmoe" in collect. '
        "Add it to the agent's fields or fix the slug.")


def test_an_unknown_action_fails_the_build():
    """persistence.md §1.10 step rule 6, through f.agent."""
    flow = greeting(steps=[{"id": "avisa", "do": "notfy", "with": {"texto": "oi"}}])
    assert build_error(flows=[flow], actions={"notify": notify}) == (
        '[FlowConfigurationError] flow "boas-vindas", step "avisa": unknown action "notfy". '
        "Register it in actions or fix the name.")


def test_a_bad_duration_fails_the_build():
    """flows.md §13: "5 min" does not parse; checked at build."""
    flow = greeting(steps=[{"id": "espera", "wait": "5 min"}, {"id": "oi", "say": "Oi"}])
    assert build_error(flows=[flow]) == (
        '[FlowConfigurationError] flow "boas-vindas", step "espera": wait has duration "5 min", which does not '
        'parse. Write a number and a unit: "30s", "5m", "24h" or "3d".')


def test_a_backward_if_jump_without_else_fails_the_build():
    """flows.md §5.8: an if step whose then jumps back must have an else."""
    flow = greeting(steps=[{"id": "nome", "collect": ["nome"]},
                           {"id": "confere", "if": {"known": ["cargo"]}, "then": "nome"}])
    assert build_error(flows=[flow]) == (
        '[FlowConfigurationError] flow "boas-vindas", step "confere": "if" jumps back to "nome" with no else. '
        "Add else so the false branch has somewhere to go.")


def test_a_root_toolkit_knows_no_fields():
    """flows.md §1: falai() alone has no fields bound, so any collect fails validation."""
    with pytest.raises(FlowConfigurationError, match='unknown field "nome" in collect'):
        falai().agent(name="Ana", provider=ScriptedProvider(), flows=[greeting()])


def test_agent_without_the_toolkit_runs_the_same_checks():
    """flows.md §1: Agent(fields=..., **options) is the same without the toolkit."""
    with pytest.raises(FlowConfigurationError, match='unknown field "nome"'):
        Agent(name="Ana", provider=ScriptedProvider(), fields={}, flows=[greeting()])
    assert Agent(name="Ana", provider=ScriptedProvider(), fields=f.fields, flows=[greeting()]).flows


def test_the_agent_registries_include_its_flows_for_chains():
    """persistence.md §1.10: the agent passes its own flows, so a chain to a missing flow fails the build."""
    handoff = {"id": "humano", "name": "Humano", "steps": [{"id": "aviso", "say": "Chamando alguém."}]}
    chains = greeting(steps=[{"id": "nome", "collect": ["nome"], "then": {"flow": "humano"}}])
    build(flows=[chains, handoff])
    typo = greeting(steps=[{"id": "nome", "collect": ["nome"], "then": {"flow": "humnao"}}])
    assert build_error(flows=[typo, handoff]) == (
        '[FlowConfigurationError] flow "boas-vindas", step "nome": then names flow "humnao", which this agent '
        'does not have. Use one of "boas-vindas", "humano", or add the flow.')


def test_a_flow_spec_with_kinds_and_nones_is_accepted_by_the_agent():
    """persistence.md §1.10: validate_flow takes a spec or a flow."""
    spec = {"id": "s", "name": "S", "on": None, "steps": [{"id": "a", "kind": "say", "say": "Oi", "then": None}]}
    build(flows=[spec])


# 1. Reserved condition names -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["equals", "known", "unknown", "not", "silenced"])
def test_a_condition_may_not_shadow_a_built_in(name):
    """persistence.md §1.11 check 1; flows.md §7.3 (unknown and not: falai for Python's two more)."""
    assert build_error(conditions={"vip": vip, name: vip}) == (
        f'[FlowConfigurationError] condition "{name}" shadows a built-in: equals, known, unknown, not, silenced '
        "are reserved. Rename it.")


# 2. Agent instructions ----------------------------------------------------------------------------

def test_an_agent_instruction_if_names_registered_conditions():
    """persistence.md §1.11 check 2, the spec's example."""
    assert build_error(instructions=[{"prompt": "Ofereça o plano VIP.", "if": {"vip": True}}]) == (
        '[FlowConfigurationError] agent: unknown condition "vip" in instructions[0].if. '
        "Register it in conditions or use equals, known, silenced.")


def test_a_malformed_built_in_in_an_agent_instruction_fails():
    """flows.md §14.5: an unknown condition (or malformed built-in) in an agent instruction's if."""
    assert build_error(instructions=[{"prompt": "a"}, {"prompt": "b", "if": {"known": "nome"}}]) == (
        "[FlowConfigurationError] agent: instructions[1].if.known is not a list. Write known as [field, ...].")
    assert build_error(instructions=[{"prompt": "b", "if": {"equals": {"porte": "5"}}}]) == (
        '[FlowConfigurationError] agent: instructions[0].if.equals gives "porte" "5", which is not one of '
        '"1-10", "11-50". Use one of the listed values.')


def test_agent_instructions_get_the_shape_check_too():
    """Inferred (persistence.md §1.10 instructions check, where = agent): nothing else checks their shape."""
    assert build_error(instructions=[{"kind": "must"}]) == (
        "[FlowConfigurationError] agent: instructions[0].prompt is missing, not text. Write the rule as a sentence.")
    assert build_error(instructions=["Seja breve."]) == (
        '[FlowConfigurationError] agent: instructions[0] is "Seja breve.", not an object. '
        "Write each entry of instructions as an object.")
    assert build_error(instructions=[{"prompt": "p", "if": 5}]) == (
        "[FlowConfigurationError] agent: instructions[0].if is 5, not a condition. "
        'Write it as an object, e.g. { known: ["nome"] }.')


def test_agent_instruction_nones_mean_not_set():
    """persistence.md §1.1: None means "not set"."""
    build(instructions=[{"prompt": "Seja breve.", "kind": None, "if": None, "when": None}])


def test_function_predicates_in_agent_instructions_pass():
    """flows.md §14.3: function predicates are not checked."""
    build(instructions=[{"prompt": "Seja breve.", "if": lambda ctx: True}])


# 3. Flows ----------------------------------------------------------------------------------------

def test_two_flows_may_not_share_an_id():
    """persistence.md §1.11 check 3."""
    assert build_error(flows=[greeting("a"), greeting("b"), greeting("a")]) == (
        '[FlowConfigurationError] flow "a" is declared twice: flow ids must be unique. Rename one of them.')


def test_flows_are_validated_in_order_each_before_the_next_id_is_checked():
    """persistence.md §1.11 check 3: for each flow, an id already seen, then validate_flow."""
    broken = greeting("a", steps=[{"id": "x", "say": 1}])
    assert "say is 1" in build_error(flows=[broken, greeting("a")])
    assert "declared twice" in build_error(flows=[greeting("a"), greeting("a", steps=[{"id": "x", "say": 1}])])


def test_a_flow_that_is_not_a_dict_fails_the_build():
    """persistence.md §1.10 S1, through the agent."""
    assert build_error(flows=[None]) == (
        "[FlowConfigurationError] flow: is null, not an object. Pass the flow itself: { id, name, steps }.")


def test_flow_warnings_are_logged_with_the_agent_prefix(caplog):
    """persistence.md §1.11 check 3: each warning is logged as `[Agent] <warning>` on the "falai" logger."""
    flow = {"id": "q", "name": "Q", "steps": [{"id": "a", "collect": ["cargo"]}]}
    with caplog.at_level(logging.WARNING, logger="falai"):
        build(flows=[flow])
    assert [r.getMessage() for r in caplog.records if r.name == "falai"] == [
        '[Agent] flow "q", step "a": collects "cargo" with no prompt and no ask; the AI has nothing to go on. '
        "Add a prompt or an ask per field."]


def test_check_agent_returns_the_warnings_of_every_flow_in_order():
    """persistence.md §1.11: check_agent returns warnings; the agent logs them."""
    first = {"id": "q", "name": "Q", "steps": [{"id": "a", "collect": ["cargo"]}]}
    second = {"id": "r", "name": "R", "steps": [{"id": "b", "say": "x", "then": "b"}]}
    agent = build(flows=[first, second])
    assert [w.split(":")[0] for w in check_agent(agent)] == ['flow "q", step "a"', 'flow "r", step "b"']


# 4. Tool parameters ----------------------------------------------------------------------------

TOOL_ERROR = ('[FlowConfigurationError] tool "clima": parameters must be a JSON Schema object. '
              'Write { type: "object", properties: { ... }, required: [...] }.')


@pytest.mark.parametrize("parameters", [
    {"cidade": {"type": "string"}},            # an action's shorthand map
    {},                                        # given, but not an object schema
    {"type": "array", "items": {"type": "string"}},
    [{"name": "cidade"}],
])
def test_tool_parameters_must_be_a_json_schema_object(parameters):
    """persistence.md §1.11 check 4; model-calls.md §6.9: the shorthand map is rejected, {} counts as given."""
    tool = Tool(id="clima", handler=lambda args, ctx: None, parameters=parameters)
    assert build_error(tools=[preco, tool]) == TOOL_ERROR


def test_tool_without_parameters_or_with_an_object_schema_builds():
    """model-calls.md §6.9: parameters None is not given."""
    build(tools=[Tool(id="clima", handler=lambda args, ctx: None), preco,
                 Tool(id="x", handler=lambda args, ctx: None, parameters={"type": "object"})])


# 5. Idle -------------------------------------------------------------------------------------------

def test_idle_tools_must_be_registered():
    """persistence.md §1.11 check 5; the Agent seed page."""
    assert build_error(tools=[preco], idle={"prompt": "Responda.", "tools": ["preco", "reservar"]}) == (
        '[FlowConfigurationError] idle: unknown tool "reservar". Register it in the agent\'s tools or fix the name.')


def test_idle_instruction_ifs_name_registered_conditions():
    """persistence.md §1.11 check 5: where = idle."""
    assert build_error(idle={"prompt": "Responda.", "instructions": [{"prompt": "x", "if": {"vip": 1}}]}) == (
        '[FlowConfigurationError] idle: unknown condition "vip" in instructions[0].if. '
        "Register it in conditions or use equals, known, silenced.")


def test_idle_instructions_are_checked_before_idle_tools():
    """persistence.md §1.11 check 5 order."""
    idle = {"prompt": "p", "tools": ["nada"], "instructions": [{"prompt": "x", "if": {"vip": 1}}]}
    assert "unknown condition" in build_error(idle=idle)


def test_a_silent_idle_is_not_checked():
    """persistence.md §1.11 check 5: unless "silent"."""
    build(idle="silent")


def test_idle_tools_must_be_a_list():
    """Inferred: the list check of persistence.md §1.10 applied to idle.tools."""
    assert build_error(tools=[preco], idle={"prompt": "p", "tools": "preco"}) == (
        '[FlowConfigurationError] idle: tools is "preco", not a list. Write tools: ["preco"].')


def test_idle_that_is_neither_a_dict_nor_silent_fails():
    """Inferred: idle is { prompt, tools?, instructions? } or "silent" (the Agent seed page)."""
    assert build_error(idle="quiet") == (
        '[FlowConfigurationError] idle: is "quiet", not an object. '
        'Write idle as { prompt: "..." }, or "silent" for no idle replies.')


# Order of the checks --------------------------------------------------------------------------------

def test_construction_checks_run_in_the_order_of_section_1_11():
    """persistence.md §1.11: conditions, agent instructions, flows, tools, idle (compaction last, inferred)."""
    bad_tool = Tool(id="clima", handler=lambda args, ctx: None, parameters={"cidade": {"type": "string"}})
    options = dict(conditions={"known": vip}, instructions=[{"prompt": "p", "if": {"nada": 1}}],
                   flows=[greeting("a"), greeting("a")], tools=[bad_tool], idle={"prompt": "p", "tools": ["x"]},
                   compaction={"maxTokens": 0})
    ladder = [("conditions", "shadows a built-in"), ("instructions", "agent: unknown condition"),
              ("flows", "declared twice"), ("tools", 'tool "clima"'), ("idle", 'idle: unknown tool "x"')]
    for key, expected in ladder:
        assert expected in build_error(**options), key
        del options[key]
    with pytest.raises(ValueError, match="maxTokens"):
        build(**options)


# Compaction (model-calls.md §9.1) -------------------------------------------------------------------

def compaction_error(config):
    with pytest.raises(ValueError) as caught:
        build(compaction=config)
    assert not isinstance(caught.value, FalaiError)
    return str(caught.value)


def test_compaction_threshold_out_of_range_spec_example():
    """model-calls.md §9.1, the example message; a plain ValueError, not a FalaiError."""
    assert compaction_error({"maxTokens": 8000, "compactionThreshold": 2}) == (
        "[CompactionEngine] compactionThreshold is 2: it must be between 0.5 and 0.95. "
        "Use 0.8 unless you measured otherwise.")


@pytest.mark.parametrize("config, message", [
    ({"maxTokens": 0}, "maxTokens is 0: it must be more than 0. "
                       "Set it to how many tokens the history may take, such as 8000."),
    ({"maxTokens": -5}, "maxTokens is -5: it must be more than 0."),
    ({}, "maxTokens is missing: it must be more than 0."),
    ({"maxTokens": "8000"}, 'maxTokens is "8000": it must be more than 0.'),
    ({"maxTokens": True}, "maxTokens is true: it must be more than 0."),
    ({"maxTokens": 8000, "compactionThreshold": 0.49}, "compactionThreshold is 0.49: it must be between"),
    ({"maxTokens": 8000, "compactionThreshold": 0.96}, "compactionThreshold is 0.96: it must be between"),
    ({"maxTokens": 8000, "preserveRecentCount": 1},
     "preserveRecentCount is 1: it must be a whole number of 2 or more. "
     "Keep at least the last question and its answer; the default is 4."),
    ({"maxTokens": 8000, "preserveRecentCount": 2.5}, "preserveRecentCount is 2.5: it must be a whole number"),
    ({"maxTokens": 8000, "maxToolResultChars": 0},
     "maxToolResultChars is 0: it must be a whole number of 1 or more. "
     "Use 5000, the default, or the longest tool result the model should read."),
    ({"maxTokens": float("nan")}, "maxTokens is NaN: it must be more than 0."),
])
def test_compaction_values_out_of_range_or_not_numbers_raise(config, message):
    """model-calls.md §9.1: `[CompactionEngine] <key> is <value>: it must be <rule>. <fix>.`"""
    assert compaction_error(config).startswith(f"[CompactionEngine] {message}")


def test_compaction_keys_are_checked_in_table_order():
    """model-calls.md §9.1 table order: maxTokens, compactionThreshold, preserveRecentCount, maxToolResultChars."""
    config = {"maxTokens": 0, "compactionThreshold": 0, "preserveRecentCount": 0, "maxToolResultChars": 0}
    for key in list(config):
        assert compaction_error(config).startswith(f"[CompactionEngine] {key} is 0")
        config[key] = 8000 if key == "maxTokens" else 0.8 if key == "compactionThreshold" else 4


@pytest.mark.parametrize("config", [
    None, {"maxTokens": 8000}, {"maxTokens": 1, "compactionThreshold": 0.5, "preserveRecentCount": 2,
                                "maxToolResultChars": 1},
    {"maxTokens": 2000.5, "compactionThreshold": 0.95, "preserveRecentCount": 4.0},
    {"maxTokens": 8000, "compactionThreshold": None, "enabled": True},
    {"maxTokens": 0, "compactionThreshold": 7, "enabled": False},
])
def test_valid_or_disabled_compaction_builds(config):
    """model-calls.md §9.1: checked only when present and enabled is not False; bounds inclusive."""
    build(compaction=config)


def test_compaction_that_is_not_a_dict_raises():
    """Inferred: AgentCompactionConfig is an object."""
    assert compaction_error(8000).startswith("[CompactionEngine] compaction is 8000: it must be an object")


def test_check_agent_is_the_module_function_the_agent_calls(monkeypatch):
    """falai.py section 6: Agent.__init__ calls falai_checks.check_agent(self)."""
    seen = []
    monkeypatch.setattr(falai_checks, "check_agent", lambda agent: seen.append(agent) or [])
    agent = build(flows=[{"id": 1}])
    assert seen == [agent]


def test_compaction_accepts_huge_whole_numbers():
    """Inferred: an int too large for a float is still a whole number above the minimum."""
    build(compaction={"maxTokens": 10 ** 400, "preserveRecentCount": 10 ** 400, "maxToolResultChars": 10 ** 400})


@pytest.mark.parametrize("loops", ["5", 2.0, True, None])
def test_max_tool_loops_that_is_not_a_whole_number_fails_at_construction(loops):
    """model-calls.md §6.2 (issue 12): max_tool_loops is checked when the agent is built, never silently 5."""
    with pytest.raises(FlowConfigurationError, match=r"max_tool_loops is .*: it must be a whole number"):
        Agent(name="Ana", provider=ScriptedProvider(script={}), max_tool_loops=loops)


@pytest.mark.parametrize("loops", [0, -1, 1, 5])
def test_max_tool_loops_of_any_whole_number_is_accepted(loops):
    """model-calls.md §6.2: 0 or less offers no tools; any whole number is a valid setting."""
    assert Agent(name="Ana", provider=ScriptedProvider(script={}), max_tool_loops=loops).max_tool_loops == loops


# The configuration is frozen once the agent is built ---------------------------------------------

def never_started():
    return {"id": "nunca", "name": "Nunca", "on": [{"event": "nunca"}], "steps": [{"id": "a", "say": "A"}]}


def started_by_a_start():
    return {"id": "f", "name": "F", "on": [{"event": "abrir"}], "steps": [{"id": "a", "say": "Olá"}]}


@pytest.mark.parametrize("name, value", [("flows", []), ("fields", {}), ("provider", None),
                                         ("protocol", "v4"), ("compaction", None), ("idle", "x")])
def test_assigning_an_agent_attribute_raises_and_names_the_fix(name, value):
    agent = build(flows=[greeting()])
    with pytest.raises(AttributeError, match=rf"cannot set agent\.{name}: .*build a new Agent"):
        setattr(agent, name, value)
    with pytest.raises(AttributeError, match="build a new Agent"):
        delattr(agent, name)


def test_an_edit_of_agent_flows_after_construction_raises_and_the_agent_runs_as_built():
    """An edit of agent.flows used to be ignored by the turn's cached flow facts; now it cannot happen."""
    agent = build(flows=[started_by_a_start()], events={"abrir": f.event()})
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.flows[0]["on"] = [{"event": "nunca"}]
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.flows[0]["on"].append({"event": "nunca"})
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.flows.append(never_started())
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.flow_by_id["f"]["steps"][0]["say"] = "Tchau"
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.fields["nome"]["ask"] = "?"
    with pytest.raises(TypeError, match="build a new Agent"):
        agent.actions["x"] = notify
    r = agent.turn(session_id="s1", event="abrir", key="k1")
    assert [m.text for m in r.messages] == ["Olá"]


def test_the_agent_keeps_its_own_copies_of_what_it_was_given():
    flows = [started_by_a_start()]
    fields = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
    events = {"abrir": f.event()}
    agent = Agent(name="Ana", provider=ScriptedProvider(), fields=fields, flows=flows, events=events)
    flows[0]["on"] = [{"event": "nunca"}]          # the caller's own objects, edited in place
    flows[0]["steps"][0]["say"] = "Tchau"
    flows.append(never_started())
    fields["nome"]["ask"] = "?"
    events.clear()
    assert [flow["id"] for flow in agent.flows] == ["f"]
    assert agent.fields["nome"]["ask"] == "Pergunte o nome." and list(agent.events) == ["abrir"]
    r = agent.turn(session_id="s1", event="abrir", key="k1")
    assert [m.text for m in r.messages] == ["Olá"]


def test_a_copy_of_the_agents_configuration_is_a_plain_writable_value():
    """The way to change a flow: copy it, edit the copy, build a new Agent."""
    import copy
    agent = build(flows=[started_by_a_start()], events={"abrir": f.event()})
    for edited in (copy.deepcopy(agent.flows[0]), F.json_copy(agent.flows[0])):
        edited["steps"][0]["say"] = "Tchau"
        assert type(edited) is dict and type(edited["steps"]) is list
        again = build(flows=[edited], events={"abrir": f.event()})
        assert [m.text for m in again.turn(session_id="s1", event="abrir", key="k1").messages] == ["Tchau"]
    assert agent.flows[0]["steps"][0]["say"] == "Olá" and agent.flows == [started_by_a_start()]
