"""The registry file has one checker, falai.check_registry: `falai --registry` (exit 2) and a program's
falai.load_registry (ValueError) refuse the same files with the same message (docs/guide/cli.md)."""
import io
import json

import pytest

import falai
import falai_cli

BAD = [
    ("null", "the registry is null, not an object. Write {"),
    ("[]", "the registry is list, not an object. Write {"),
    ("{,}", "the registry is not valid JSON ("),
    ('{"feilds": {}}', 'unknown key "feilds". A registry has fields, actions, events, conditions, tools, agent.'),
    ('{"fields": []}', '"fields" must be an object, not list. Write {"pedido": {"type": "string"}}.'),
    ('{"events": 3}', '"events" must be an object {name: {"direction": ...}} or a list of names, not int.'),
    ('{"events": {"paid": "inbound"}}', 'event "paid" is str, not an object. Write {"direction": "inbound"}'),
    ('{"actions": {"go": 3}}', 'action "go" is int, not an object. Write {"parameters": {...}'),
    ('{"actions": [1]}', '"actions" must be an object {name: {"parameters": {...}}} or a list of names, not list.'),
    ('{"conditions": {"vip": "yes"}}', 'condition "vip" is str, not true or false. Write the answer its stand-in'),
    ('{"tools": [{"name": "x"}]}', '"tools" must be a list of objects with an "id". Write [{"id": "price"'),
    ('{"tools": {}}', '"tools" must be a list of objects with an "id".'),
    ('{"agent": "Shop"}', '"agent" must be an object, not str. Write {"name": "Shop", "persona": "..."}.'),
    ('{"agent": {"nome": "Shop"}}', '"agent" has no option "nome". Its options are name, persona, goal, idle, '
                                    'instructions, protocol.'),
]


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    status = falai_cli.main(list(argv), out, err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("content, message", BAD, ids=[content for content, _ in BAD])
def test_both_readers_refuse_a_bad_registry_with_the_same_message(tmp_path, content, message):
    path = tmp_path / "registry.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        falai.load_registry(str(path))
    assert str(caught.value).startswith(f"{path}: {message}")
    with pytest.raises(falai_cli.UsageError) as refused:
        falai_cli.read_registry(str(path))
    assert str(refused.value) == str(caught.value)
    status, out, err = cli("schema", "--registry", str(path))
    assert status == 2 and out == "" and err == f"falai schema: {caught.value}\n"


def test_check_registry_gives_every_section_filled_in():
    assert falai.check_registry({}, "r.json") == {
        "fields": {}, "actions": {}, "events": {}, "conditions": {}, "tools": [], "agent": {}}
    sections = falai.check_registry({
        "fields": None, "actions": ["book"], "events": {"paid": {"direction": "inbound"}, "seen": None},
        "conditions": ["vip"], "tools": [{"id": "price"}], "agent": {"name": "Shop", "goal": None}}, "r.json")
    assert sections["actions"] == {"book": {}} and sections["conditions"] == {"vip": False}
    assert sections["events"] == {"paid": falai.EventDef("inbound"), "seen": falai.EventDef(None)}
    assert sections["agent"] == {"name": "Shop"} and sections["fields"] == {}


def test_the_cli_builds_its_stand_ins_and_agent_options_from_the_checked_sections(tmp_path):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"agent": {"name": "Mesa", "idle": "silent", "persona": None},
                                "events": ["paid"], "conditions": {"vip": True}}), encoding="utf-8")
    registry = falai_cli.read_registry(str(path))
    assert registry.given and registry.agent == {"name": "Mesa", "idle": "silent"}
    agent = falai_cli.build_agent([], registry, falai.ScriptedProvider(), falai.system_clock)
    assert (agent.name, agent.idle, agent.persona, agent.protocol) == ("Mesa", "silent", None, "lean")
    assert agent.events == falai.load_registry(str(path))["events"] == {"paid": falai.EventDef(None)}
    assert agent.conditions["vip"].check(None, None) is True
    unnamed = falai_cli.Registry(given=True)
    assert falai_cli.build_agent([], unnamed, falai.ScriptedProvider(), falai.system_clock, "v4").name == "Agent"
