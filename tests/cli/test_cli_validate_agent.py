"""falai validate refuses what chat and a program would refuse: it builds the agent too (docs/guide/cli.md)."""
import io
import json

import falai_cli


def validate(tmp_path, flows, registry, *extra):
    (tmp_path / "flows.json").write_text(json.dumps(flows))
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    out = io.StringIO()
    status = falai_cli.main(["validate", str(tmp_path / "flows.json"), "--registry", str(tmp_path / "registry.json"),
                             *extra], out=out, err=io.StringIO(), environ={})
    return status, out.getvalue()


FLOW = [{"id": "a", "name": "A", "on": [{"message": ["x"]}],
         "steps": [{"id": "s1", "kind": "collect", "collect": ["nome"], "prompt": "Ask the name."}]}]


def test_a_registry_field_the_program_rejects_fails_validate(tmp_path):
    status, out = validate(tmp_path, FLOW, {"fields": {"nome": {"type": "text"}}})
    assert status == 1
    assert (f'{tmp_path / "registry.json"}: error: (agent): field "nome": type "text" is not a field type. '
            'Did you mean "string"?') in out
    assert out.endswith("1 flow(s) in 1 file(s): 1 error(s), 0 warning(s)\n")


def test_a_registry_the_program_accepts_passes(tmp_path):
    status, out = validate(tmp_path, FLOW, {"fields": {"nome": {"type": "string", "format": "email"}}})
    assert (status, out) == (0, "1 flow(s) in 1 file(s): 0 error(s), 0 warning(s)\n")


def test_the_agent_problem_is_in_the_json_report(tmp_path):
    status, out = validate(tmp_path, FLOW, {"fields": {"nome": {"type": "string", "extract": "sometimes"}}}, "--json")
    report = json.loads(out)
    assert status == 1 and report["ok"] is False
    assert report["problems"] == [{"file": str(tmp_path / "registry.json"), "flow": None, "severity": "error",
                                   "path": ["(agent)"], "message": 'field "nome": extract is "sometimes", which '
                                   'is not one of "anywhere", "asked", "never". Use one of them.'}]


def test_a_with_typo_is_named_with_the_parameter_it_meant(tmp_path):
    flows = [{"id": "a", "name": "A", "steps": [{"id": "s", "kind": "do", "do": "book",
                                                  "with": {"quandoo": "amanhã"}}]}]
    status, out = validate(tmp_path, flows, {"actions": {"book": {"parameters": {"quando": {"type": "string"}}}}})
    assert status == 1 and 'action "book" has no parameter "quandoo". Did you mean "quando"?' in out
