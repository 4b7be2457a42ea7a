"""What a test and a program share with the CLI: GenerateRequest.message, load_registry, registry tools
that write data, and the stand-in that reads dates as dates (docs/guide/testing.md, docs/guide/cli.md)."""
import io
import json

import pytest

import falai
import falai_cli
from falai import Agent, GenerateRequest, ScriptedProvider, falai as toolkit

pytestmark = pytest.mark.protocols("lean", "v4")


def test_every_call_carries_the_customers_message_without_parsing_the_prompt():
    seen = []

    def understand(request):
        seen.append(("understand", request.message))
        return {"flows": {"oi": 95}}

    def speak(request):
        seen.append(("speak", request.message))
        return {"message": f"You said: {request.message}"}

    f = toolkit().fields({"nome": {"type": "string", "ask": "Ask the name."}})
    flow = f.flow({"id": "oi", "name": "Hi", "on": [{"message": ["says hello"]}],
                   "steps": [{"id": "n", "collect": ["nome"]}]})
    agent = f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [understand], "speak": [speak]}),
                    flows=[flow])
    r = agent.turn(session_id="s", message="  hello there ", id="m1")
    assert seen == [("understand", "  hello there "), ("speak", "  hello there ")]
    assert r.messages[0].text == "You said:   hello there"        # the reply is trimmed, not the message


def test_a_call_with_no_customer_message_has_none():
    provider = ScriptedProvider(script={"speak": [{"message": "Hi!"}]})
    f = toolkit().fields({"nome": {"type": "string", "ask": "Ask the name."}})
    flow = f.flow({"id": "oi", "name": "Hi", "steps": [{"id": "n", "collect": ["nome"]}]})
    agent = f.agent(name="Ana", provider=provider, flows=[flow])
    agent.turn(session_id="s", start={"flow": "oi", "key": "k"})
    assert provider.calls[0].message is None and GenerateRequest(system=None, prompt="", history=[]).message is None


def test_load_registry_gives_the_agent_the_clis_fields_events_and_options(tmp_path):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({
        "agent": {"name": "Shop", "persona": "Kind.", "idle": "silent"},
        "fields": {"data": {"type": "string", "format": "date"}, "codigo": {"type": "string", "extract": "never"}},
        "events": {"paid": {"direction": "inbound"}, "shipped": {}},
        "actions": {"book": {"parameters": {}}}, "conditions": ["vip"], "tools": [{"id": "t"}]}))
    options = falai.load_registry(str(path))
    assert sorted(options) == ["events", "fields", "idle", "name", "persona"]
    assert options["events"]["paid"].direction == "inbound" and options["events"]["shipped"].direction is None
    agent = Agent(provider=ScriptedProvider(), **options)
    assert (agent.name, agent.idle, list(agent.fields)) == ("Shop", "silent", ["data", "codigo"])
    assert falai.load_registry(falai_cli.__file__.replace("falai_cli.py", "examples/cli/registry.json"))["name"] \
        == "Shop"


@pytest.mark.parametrize("content, message", [
    ([], "the registry is list, not an object"),
    ({"fieldz": {}}, 'unknown key "fieldz". A registry has fields, actions, events, conditions, tools, agent.'),
    ({"fields": []}, '"fields" must be an object, not list. Write {"pedido": {"type": "string"}}.'),
    ({"events": 3}, '"events" must be an object'),
])
def test_load_registry_names_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError) as caught:
        falai.load_registry(str(path))
    assert str(caught.value).startswith(f"{path}: {message}")


def chat(tmp_path, flows, registry, lines, script=None):
    """``falai chat`` over the flows and registry (its offline stand-in plays under "v4")."""
    (tmp_path / "flows.json").write_text(json.dumps(flows))
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    argv = ["chat", str(tmp_path / "flows.json"), "--registry", str(tmp_path / "registry.json"),
            "--now", "2026-12-01T10:00:00Z"]
    if script is not None:
        (tmp_path / "script.json").write_text(json.dumps(script))
        argv += ["--script", str(tmp_path / "script.json")]
    out, queue = io.StringIO(), list(lines)

    def read(prompt):
        if not queue:
            raise EOFError
        line = queue.pop(0)
        out.write(prompt + line + "\n")
        return line

    assert falai_cli.main(argv, out=out, err=io.StringIO(), environ={}, read=read) == 0
    return out.getvalue()


@pytest.mark.protocols("v4")      # falai chat's offline stand-in reads the v4 prompts (docs/guide/cli.md)
def test_a_registry_tool_writes_its_data_into_the_session(tmp_path):
    flows = [{"id": "mesa", "name": "Table", "on": [{"message": ["wants to book a table"]}], "steps": [
        {"id": "confirma", "kind": "collect", "prompt": "Book it.", "collect": ["codigo"], "tools": ["reservar"]},
        {"id": "ok", "kind": "say", "say": "Booked: {{data.codigo}}"}]}]
    registry = {"fields": {"codigo": {"type": "string", "extract": "never"}},
                "tools": [{"id": "reservar", "description": "Book.", "result": {"ok": True},
                           "data": {"codigo": "RES-7"}}]}
    text = chat(tmp_path, flows, registry, ["I want to book a table"])
    assert '"codigo": "RES-7"' in text and "bot: Booked: RES-7" in text


@pytest.mark.protocols("v4")      # falai chat's offline stand-in reads the v4 prompts (docs/guide/cli.md)
def test_the_stand_in_reads_no_party_size_from_a_date(tmp_path):
    flows = [{"id": "mesa", "name": "Table", "on": [{"message": ["wants to book a table"]}], "steps": [
        {"id": "quando", "kind": "collect", "collect": ["data", "pessoas"]},
        {"id": "ok", "kind": "say", "say": "Done"}]}]
    registry = {"fields": {"data": {"type": "string", "format": "date", "ask": "Ask the date."},
                           "pessoas": {"type": "integer", "ask": "Ask how many people."}}}
    text = chat(tmp_path, flows, registry, ["I want to book a table", "2026-12-20"])
    after = text.split("you: 2026-12-20\n")[1]
    assert '"pessoas"' not in after.split("  runs:")[0]
