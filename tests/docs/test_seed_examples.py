"""The two seed pages, run as written (docs/spec/seeds: Tool and Agent)."""
import time

from e2e_concierge import concierge as seed_concierge
from falai import ScriptedProvider, Tool, ToolResult, falai
import pytest

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)


def concierge(script, **options):
    """The Tool page's Concierge (tests/e2e_concierge.py: the example's agent with the page's tools) on a script."""
    provider = ScriptedProvider(script=script)
    return seed_concierge(provider, **options), provider


def test_the_concierge_books_a_room_in_two_turns():
    """Tool page, Example: the oferta step may call preco; reservar's data lands in the session and the
    confirma step ends once reserva is known."""
    agent, provider = concierge({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}}, {}],
        "speak": [
            {"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": "Curitiba"}}]},
            {"message": "A diária em Curitiba é R$ 420. Posso reservar?"},
            {"message": "Reservando.", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": "Curitiba"}}]},
            {"message": "Pronto! Sua reserva é RES-1A2B."},
        ]})
    r1 = agent.turn(session_id="demo", message="Quero um quarto em Curitiba", id="m1")
    assert r1.messages[0].text == "A diária em Curitiba é R$ 420. Posso reservar?"
    assert r1.llm_calls == 3                      # understand + two speak rounds (one tool round)
    assert [t["name"] for t in provider.calls[1].tools] == ["preco"]   # only this step may call preco
    assert provider.calls[2].history[-1] == {"role": "tool", "tool_call_id": "call-0-0", "name": "preco",
                                             "content": '{"precoNoite":420}'}
    assert r1.session.data == {"cidade": "Curitiba"} and r1.session.runs[0].step_id == "confirma"
    r2 = agent.turn(session_id="demo", session=r1.session, message="Sim, pode reservar", id="m2")
    assert r2.session.data["reserva"].startswith("RES-")
    assert r2.messages[0].text == "Pronto! Sua reserva é RES-1A2B."
    assert [t["name"] for t in provider.calls[4].tools] == ["reservar"]
    assert r2.ended[0].reason == "end" and r2.session.runs == []
    assert r2.llm_calls == 3


def test_a_tool_the_step_does_not_allow_is_not_run_and_the_model_reads_why():
    """Tool page, Gates: an id not in this call's list reads {"error":"Tool \\"x\\" is not available."}."""
    agent, provider = concierge({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}}],
        "speak": [{"message": "", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": "Curitiba"}}]},
                  {"message": "A diária é R$ 420."}]})
    r = agent.turn(session_id="demo", message="Quero um quarto em Curitiba", id="m1")
    assert provider.calls[2].history[-1]["content"] == '{"error":"Tool \\"reservar\\" is not available."}'
    assert "reserva" not in r.session.data


def test_validation_failure_reads_the_error_and_skips_the_handler():
    """Tool page, Gates: validateInput false -> {"error":"Validation failed: <error>"}, handler not run."""
    agent, provider = concierge({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}}, {}],
        "speak": [{"message": "Preço R$ 420. Reservo?"},
                  {"message": "", "toolCalls": [{"toolName": "reservar", "arguments": {"cidade": ""}}]},
                  {"message": "Para qual cidade?"}]})
    r = agent.turn(session_id="demo", message="Quero um quarto em Curitiba", id="m1")
    r = agent.turn(session_id="demo", session=r.session, message="sim", id="m2")
    assert provider.calls[-1].history[-1]["content"] == '{"error":"Validation failed: Informe a cidade."}'
    assert "reserva" not in r.session.data and r.session.runs[0].status == "asking"


def test_after_max_tool_loops_one_wrap_up_round_runs_without_tools():
    """Tool page, Rounds: after maxToolLoops rounds with calls, one more round runs with no tools."""
    call = {"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": "Curitiba"}}]}
    agent, provider = concierge({
        "understand": [{"flows": {"hospedagem": 95}, "fields": {"cidade": "Curitiba"}}],
        "speak": [call, call, {"message": "São R$ 420."}]}, max_tool_loops=2)
    r = agent.turn(session_id="demo", message="Quero um quarto em Curitiba", id="m1")
    assert r.llm_calls == 4 and r.messages[0].text == "São R$ 420."
    assert [c.tools is None for c in provider.calls[1:]] == [False, False, True]
    assert "## Wrap up" in provider.calls[3].prompt


def test_safe_tools_of_one_round_run_together():
    """Tool page, Rounds: consecutive safe calls run together (measured loosely: two 0.2 s tools < 0.4 s)."""
    def slow(args, ctx):
        time.sleep(0.2)
        return ToolResult(value="ok")

    f = falai().fields({})
    tools = [Tool(id=name, handler=slow, is_read_only=lambda a: True) for name in ("a", "b")]
    provider = ScriptedProvider(script={"speak": [
        {"message": "", "toolCalls": [{"toolName": "a"}, {"toolName": "b"}]}, {"message": "feito"}]})
    agent = f.agent(name="X", provider=provider, tools=tools)
    started = time.perf_counter()
    r = agent.turn(session_id="s", message="vai", id="m1")
    assert time.perf_counter() - started < 0.35 and r.messages[0].text == "feito"


def test_the_agent_page_example_collects_a_name_in_two_turns():
    """Agent page, Example: the question for nome with 1 call, then 'Ana' with 2 calls and key boas-vindas#m1:ajuda:1."""
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome da pessoa, sem tom de formulário."}})
    provider = ScriptedProvider(script={"understand": [{"fields": {"nome": "Ana"}}],
                                        "speak": [{"message": "Oi! Como posso te chamar?"},
                                                  {"message": "Prazer, Ana! Como posso ajudar?"}]})
    agent = f.agent(name="Ana", provider=provider, flows=[f.flow({
        "id": "boas-vindas", "name": "Boas-vindas", "on": [{"message": []}],
        "steps": [{"id": "nome", "collect": ["nome"]},
                  {"id": "ajuda", "prompt": "Agradeça pelo nome e pergunte como pode ajudar."}]})])
    first = agent.turn(session_id="s1", message="oi", id="m1")
    assert (first.messages[0].text, first.llm_calls) == ("Oi! Como posso te chamar?", 1)
    second = agent.turn(session_id="s1", session=first.session, message="sou a Ana", id="m2")
    assert (second.session.data["nome"], second.messages[0].key, second.llm_calls) == (
        "Ana", "boas-vindas#m1:ajuda:1", 2)
    assert first.session.runs[0].asked == {"nome": 1}
