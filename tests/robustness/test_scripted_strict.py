"""ScriptedProvider(strict=True) (issue 9): a scripted reply that cannot answer the request it is given, or a
script that runs dry, fails the test with an error naming the call, its kind and what did not fit
(python-api.md, Providers: strict=False, the default, keeps every reply unchecked)."""
import pytest

from falai import Generation, ScriptedProvider, ScriptError, Tool, fake_clock, falai
import falai_calls


def agent_with(script, strict=True, **options):
    f = falai().fields({"nome": {"type": "string"}, "porte": {"type": "string", "enum": ["P", "M", "G"]}})
    flows = [{"id": "triagem", "name": "Triagem", "on": [{"message": ["quer saber o preço"]}],
              "steps": [{"id": "quem", "collect": ["nome", "porte"], "prompt": "Pergunte."}]},
             {"id": "suporte", "name": "Suporte", "on": [{"message": ["tem um problema"]}],
              "steps": [{"id": "q", "prompt": "Ajude."}]}]
    provider = ScriptedProvider(script=script, strict=strict)
    return f.agent(name="Ana", provider=provider, flows=flows, clock=fake_clock("2026-09-20T10:00:00.000Z"),
                   idle={"prompt": "Atenda."}, **options), provider


@pytest.mark.parametrize("reply, words", [
    ({"flows": {"triagem": 0.95}}, 'reply.flows.triagem is 0.95, not integer or null'),
    ({"flows": {"Triagem": 95}}, 'reply.flows has the key "Triagem", which the request does not ask for '
                                 '(its keys: "triagem", "suporte")'),
    ({"flow": "triagem"}, 'reply has the key "flow", which the request does not ask for'),
    ({"flows": {"triagem": 95}, "fields": {"porte": "grande"}}, 'reply.fields.porte is "grande", not one of '
                                                               '"P","M","G",null'),
])
def test_an_understand_reply_that_does_not_fit_the_request_raises_naming_call_kind_and_misfit(reply, words):
    agent, _ = agent_with({"understand": [reply], "speak": [{"message": "Oi"}]})
    with pytest.raises(ScriptError) as caught:
        agent.turn(session_id="s1", message="quanto custa?", id="m1")
    message = str(caught.value)
    assert message.startswith('ScriptedProvider call #1 ("understand"): ')
    assert words.replace('"P","M","G",null', '"P", "M", "G", null') in message


def test_a_speak_reply_with_the_wrong_type_raises_on_call_two():
    agent, _ = agent_with({"understand": [{"flows": {"triagem": 95, "suporte": 0}}],
                           "speak": [{"message": "Qual o seu nome?", "nome": 7}]})
    with pytest.raises(ScriptError, match=r'call #2 \("speak"\): reply.nome is 7, not string or null'):
        agent.turn(session_id="s1", message="quanto custa?", id="m1")


def test_a_dry_script_raises_instead_of_deferring():
    agent, provider = agent_with({"understand": [{"flows": {"triagem": 95, "suporte": 0}}]})
    with pytest.raises(ScriptError, match=r'call #2 \("speak"\): no scripted "speak" reply left. Add a "speak" '
                                          r"entry to the script"):
        agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert [call.schema_name for call in provider.calls] == ["understand", "speak"]


def test_a_dry_script_raises_from_turn_stream_too():
    agent, _ = agent_with({"understand": [{"flows": {"triagem": 95, "suporte": 0}}]})
    with pytest.raises(ScriptError, match=r'call #2 \("speak"\)'):
        list(agent.turn_stream(session_id="s1", message="quanto custa?", id="m1"))


def test_a_tool_call_to_a_tool_not_offered_raises():
    preco = Tool(id="preco", handler=lambda args, ctx: {"value": 1},
                 parameters={"type": "object", "properties": {}})
    agent, _ = agent_with({"speak": [{"message": "", "toolCalls": [{"toolName": "precos"}]}]}, tools=[preco])
    with pytest.raises(ScriptError, match=r'call #1 \("speak"\): toolCalls\[0\] names the tool "precos", which the '
                                          r'request does not offer \(it offers "preco"\)'):
        agent.turn(session_id="s1", start={"flow": "suporte", "key": "k1"})


def test_a_fitting_reply_passes_and_missing_keys_count_as_null():
    agent, provider = agent_with({"understand": [{"flows": {"triagem": 95}, "fields": {"nome": "Ana"}}],
                                  "speak": [{"message": "E o porte?", "porte": None}]})
    r = agent.turn(session_id="s1", message="sou a Ana, quanto custa?", id="m1")
    assert r.session.data == {"nome": "Ana"} and [m.text for m in r.messages] == ["E o porte?"]
    assert provider.remaining() == {"understand": 0, "speak": 0}


def test_str_and_generation_entries_are_never_checked():
    agent, _ = agent_with({"understand": ['{"flows": {"triagem": 0.95}}'],
                           "speak": [Generation(message="Oi", structured={"message": "Oi", "extra": 1})]})
    r = agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert [m.text for m in r.messages] == ["Oi"]


def test_not_strict_is_the_default_and_keeps_the_documented_contract():
    """python-api.md, Providers: replies reach the engine as written (a malformed score is read as 0)."""
    agent, provider = agent_with({"understand": [{"flows": {"triagem": 0.95}, "flow": "x"}],
                                  "speak": [{"message": "Oi"}]}, strict=False)
    r = agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert ScriptedProvider().strict is False
    assert provider.remaining() == {"understand": 0, "speak": 0} and r.started == []


@pytest.mark.parametrize("strict", [False, True])
def test_a_dry_speak_queue_raises_out_of_the_turn_in_both_modes(strict):
    """docs/guide/testing.md: a call the test did not script is never a quiet provider-unavailable deferral."""
    agent, provider = agent_with({"understand": [{"flows": {"triagem": 95}}]}, strict=strict)
    with pytest.raises(ScriptError, match=r'call #2 \("speak"\): no scripted "speak" reply left. Add a "speak" '
                                          r'entry to the script, or script the failure itself'):
        agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert isinstance(ScriptError("x"), RuntimeError)


def test_a_dry_compaction_queue_raises_under_strict_instead_of_dropping_messages():
    """model-calls.md §9.4 treats a failed summary call as a reason to drop the oldest messages; a dry strict
    script is a wrong test, so it surfaces instead."""
    import falai as F
    provider = ScriptedProvider(script={}, strict=True)
    agent = F.Agent(name="Ana", provider=provider, compaction={"maxTokens": 50, "preserveRecentCount": 2})
    history = [{"role": "user", "content": c * 96} for c in "abcd"] + [{"role": "user", "content": "e"}] * 2
    with pytest.raises(ScriptError, match=r'call #1 \("compaction"\): no scripted "compaction" reply left'):
        falai_calls.compact_history(agent, history)


def test_a_callable_entry_is_checked_on_what_it_returns():
    agent, _ = agent_with({"understand": [lambda request: {"flows": {"triagem": "alta"}}]})
    with pytest.raises(ScriptError, match=r'reply.flows.triagem is "alta", not integer or null'):
        agent.turn(session_id="s1", message="quanto custa?", id="m1")


def test_a_list_where_a_scalar_is_asked_is_named_as_a_list():
    agent, _ = agent_with({"understand": [{"flows": {"triagem": [95]}}]})
    with pytest.raises(ScriptError, match=r"reply.flows.triagem is a list, not integer or null"):
        agent.turn(session_id="s1", message="quanto custa?", id="m1")
