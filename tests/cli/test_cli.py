"""issue 14: the command line, `python -m falai` / `falai` (falai_cli.py), command by command."""
import configparser
import glob
import http.client
import io
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import threading

import pytest

import falai
import falai_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOP = os.path.join(ROOT, "examples", "cli", "shop.json")
REGISTRY = os.path.join(ROOT, "examples", "cli", "registry.json")
FLOWS = os.path.join(ROOT, "examples", "flows")


def run(*argv, lines=(), environ=None):
    """main(argv) with captured output: (status, stdout, stderr). ``lines`` feed the chat's prompt."""
    out, err, queue = io.StringIO(), io.StringIO(), list(lines)

    def read(prompt):
        out.write(prompt)
        if not queue:
            raise EOFError
        item = queue.pop(0)
        if isinstance(item, BaseException):
            raise item
        out.write(item + "\n")
        return item

    status = falai_cli.main(list(argv), out=out, err=err, environ=environ or {}, read=read)
    return status, out.getvalue(), err.getvalue()


def write(tmp_path, name, value):
    path = tmp_path / name
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return str(path)


# validate ------------------------------------------------------------------------------------------

def test_validate_a_good_flows_file_exits_0():
    status, out, _ = run("validate", SHOP, "--registry", REGISTRY)
    assert status == 0
    assert out == "3 flow(s) in 1 file(s): 0 error(s), 0 warning(s)\n"


def test_validate_reports_every_error_with_its_file_and_path_and_exits_1():
    broken = os.path.join(FLOWS, "broken_unknown_field.json")
    status, out, _ = run("validate", broken, os.path.join(FLOWS, "broken_two_kinds.json"), "--registry", REGISTRY)
    assert status == 1
    assert (f'{broken}: error: steps[0]: flow "troca", step "qual": unknown field "produto" in collect. '
            "Add it to the agent's fields or fix the slug.") in out.splitlines()
    assert 'error: steps[0]: flow "aviso", step "a": mixes "say" and "do"' in out
    assert out.splitlines()[-1] == "2 flow(s) in 2 file(s): 2 error(s), 0 warning(s)"


def test_validate_warnings_pass_unless_strict():
    warns = os.path.join(FLOWS, "warns_backward_jump.json")
    status, out, _ = run("validate", warns, "--registry", REGISTRY)
    assert status == 0 and f"{warns}: warning: steps[2]: " in out
    status, out, _ = run("validate", warns, "--registry", REGISTRY, "--strict")
    assert status == 1 and f"{warns}: error: steps[2]: " in out


def test_validate_paths_in_a_list_file_start_with_the_flow_index(tmp_path):
    bad = json.loads(pathlib_root().joinpath(SHOP).read_text("utf-8"))
    bad[1]["steps"][0]["wait"] = "an hour"
    status, out, _ = run("validate", write(tmp_path, "list.json", bad), "--registry", REGISTRY)
    assert status == 1
    assert 'error: [1].steps[0]: flow "satisfacao", step "espera": wait has duration "an hour"' in out


def test_validate_checks_chains_and_duplicate_ids_across_files(tmp_path):
    chained = {"id": "a", "name": "A", "steps": [{"id": "s", "kind": "say", "say": "oi", "then": {"flow": "nope"}}]}
    copy = write(tmp_path, "copy.json", json.loads(pathlib_root().joinpath(SHOP).read_text("utf-8"))[0])
    status, out, _ = run("validate", SHOP, copy, write(tmp_path, "a.json", chained), "--registry", REGISTRY)
    assert status == 1
    assert f'{copy}: error: id: flow "pedido" is declared twice (first in {SHOP})' in out
    assert '"nope"' in out.split("a.json: error: steps[0]: ")[1]


def test_validate_without_a_registry_checks_the_shape_only(tmp_path):
    status, out, _ = run("validate", os.path.join(FLOWS, "welcome.json"))
    assert status == 0, out
    status, out, _ = run("validate", os.path.join(FLOWS, "broken_two_kinds.json"))
    assert status == 1 and 'mixes "say" and "do"' in out


def test_validate_unusable_input_exits_2_and_still_checks_the_other_files(tmp_path):
    not_json = os.path.join(FLOWS, "broken_not_json.json")
    status, out, _ = run("validate", not_json, str(tmp_path / "missing.json"),
                         os.path.join(FLOWS, "broken_two_kinds.json"), "--registry", REGISTRY)
    assert status == 2
    assert f"{not_json}: the flows file is not valid JSON (" in out
    missing = tmp_path / "missing.json"
    assert f"{missing}: cannot read the flows file (No such file or directory). Check the path." in out
    assert 'mixes "say" and "do"' in out                      # the usable file was still checked
    assert out.splitlines()[-1].endswith("2 file(s) unusable")
    status, out, _ = run("validate", write(tmp_path, "n.json", "42"))
    assert status == 2 and "holds int, not a flow or a list of flows" in out


@pytest.mark.parametrize("registry, message", [
    ("[]", "the registry is list, not an object"),
    ('{"feilds": {}}', 'unknown key "feilds". A registry has fields, actions, events, conditions, tools, agent.'),
    ('{"tools": [{"name": "x"}]}', '"tools" must be a list of objects with an "id"'),
    ('{"actions": {"go": 3}}', 'action "go" is int, not an object'),
])
def test_a_bad_registry_is_unusable_input(tmp_path, registry, message):
    status, out, err = run("validate", SHOP, "--registry", write(tmp_path, "reg.json", registry))
    assert status == 2 and out == ""
    assert err.startswith("falai validate: ") and message in err


def test_validate_json_output_is_for_editors():
    status, out, _ = run("validate", os.path.join(FLOWS, "broken_unknown_field.json"), "--registry", REGISTRY,
                         "--json")
    report = json.loads(out)
    assert status == 1 and report["ok"] is False and report["unusable"] == []
    [problem] = report["problems"]
    assert problem["severity"] == "error" and problem["path"] == ["steps", 0] and problem["flow"] == "troca"
    assert problem["message"].startswith('flow "troca", step "qual": unknown field "produto"')


# schema --------------------------------------------------------------------------------------------

def test_schema_is_flow_spec_schema_for_the_registry():
    status, out, _ = run("schema", "--registry", REGISTRY)
    registry = falai_cli.read_registry(REGISTRY)
    assert status == 0
    assert json.loads(out) == falai.flow_spec_schema(registry.names())
    assert "lookup_order" in out and "paid" in out
    status, bare, _ = run("schema")
    assert json.loads(bare) == falai.flow_spec_schema(None) and "lookup_order" not in bare


# graph ---------------------------------------------------------------------------------------------

def test_graph_draws_triggers_steps_and_every_edge_as_mermaid():
    status, out, _ = run("graph", SHOP)
    lines = out.splitlines()
    assert status == 0 and lines[0] == "flowchart TD"
    assert '  subgraph flow0["Order status (pedido)"]' in lines
    assert '    f0t0(["message: asks where an order is; !only says thanks, repeat …"])' in lines
    assert '    f0s1[["consulta: do lookup_order"]]' in lines
    assert '    f1s0{{"espera: wait 1h"}}' in lines
    assert '  f0s1 -->|"ok"| f0s2' in lines and '  f0s1 -.->|"failed"| f0s3' in lines
    assert '  f0s2 -->|"chain to satisfacao"| f1s0' in lines             # a chain to the other flow
    assert '  f1s0 -->|"after 1h"| f1s1' in lines and '  f1s0 -.->|"replied"| f1s2' in lines
    assert '  f2s2 -->|"event paid"| f2s3' in lines and '  f2s2 -.->|"no event in 2d"| f2s4' in lines
    assert '  f2s0 -->|"yes"| f2s1' in lines and '  f2s0 -.->|"no"| f2s1' in lines


def test_graph_shows_branches_on_end_and_flows_outside_the_file(tmp_path):
    flow = {"id": "q", "name": "Quiz", "onEnd": "reset", "on": [{"silence": "2h"}, {"event": "ping"}], "steps": [
        {"id": "ask", "kind": "prompt", "prompt": "Ask a question.",
         "branches": [{"when": "the answer is right", "then": "yay"},
                      {"if": {"known": ["x"]}, "then": {"flow": "other"}}]},
        {"id": "yay", "kind": "say", "say": "Right!"}]}
    status, out, _ = run("graph", write(tmp_path, "q.json", flow))
    lines = out.splitlines()
    assert '    f0t0(["silence 2h"])' in lines and '    f0t1(["event ping"])' in lines
    assert '  f0s0 -->|"branch: the answer is right"| f0s1' in lines
    assert '  ext_other[["flow other"]]' in lines
    assert '  f0s0 -->|"branch: {#quot;known#quot;: [#quot;x#quot;]} chain to other"| ext_other' in lines
    assert '  f0s1 -->|"onEnd reset"| f0s0' in lines


def test_graph_as_graphviz_dot():
    status, out, _ = run("graph", SHOP, "--format", "dot")
    lines = out.splitlines()
    assert status == 0 and lines[0] == "digraph flows {" and lines[-1] == "}"
    assert '    label="Order status (pedido)";' in lines
    assert '    f0s1 [label="consulta: do lookup_order", shape=component];' in lines
    assert '  f0s1 -> f0s3 [label="failed", style=dashed];' in lines
    assert '  f1s0 -> f1s1 [label="after 1h"];' in lines


def test_graph_of_a_flow_of_the_wrong_shape_says_what_to_fix():
    status, out, err = run("graph", os.path.join(FLOWS, "broken_two_kinds.json"))
    assert status == 1 and out == ""
    assert err.endswith('broken_two_kinds.json: error: steps[0]: flow "aviso", step "a": mixes "say" and "do". '
                        "A step does one thing. Split it into one step per kind.\n")


def test_graph_of_an_unreadable_file_exits_2(tmp_path):
    status, _, err = run("graph", str(tmp_path / "none.json"))
    assert status == 2 and "cannot read the flows file" in err


# chat ----------------------------------------------------------------------------------------------

CHAT = ("chat", SHOP, "--registry", REGISTRY, "--now", "2026-12-01T10:00:00Z")


def test_chat_shows_the_reply_and_the_state_after_each_turn():
    status, out, _ = run(*CHAT, lines=["where is my order?", "A100"])
    assert status == 0
    first, second = out.split("you: where is my order?\n")[1].split("you: A100\n")
    assert first.splitlines()[:3] == ["bot: Sure: what is the order number?", "  data:     {}",
                                      "  runs:     pedido#m1 at numero (asking) [floor]"]
    assert "  floor:    pedido#m1" in first
    assert ("    collect ok pedido/numero asked-fixed: the step's fixed question went out word for word"
            in first.splitlines())
    assert "  llm_calls: 1  usage: prompt " in first
    assert second.startswith("bot: Order A100 is out for delivery.\n")
    assert '"situacao": "out for delivery"' in second
    assert ("  schedule: satisfacao#pedido#m1:pronto:1:espera:1796122800000 at 2026-12-01T11:00:00.000Z"
            in second.splitlines())
    assert "    wait waiting satisfacao/espera until=2026-12-01T11:00:00.000Z" in second.splitlines()
    assert out.endswith("you: \n(bye)\n")                              # end of input leaves cleanly


def test_chat_wake_fires_the_next_due_wake_under_the_fake_clock():
    status, out, _ = run(*CHAT, lines=["/wake", "where is my order?", "A100", "/wake"])
    assert status == 0
    assert "you: /wake\n  (no wake is pending)\n" in out
    fired = out.split("you: /wake\n")[2]
    assert fired.startswith("  (clock at 2026-12-01T11:00:00.000Z: firing satisfacao#pedido#m1:pronto:1:espera:")
    assert "bot: Did your order question get sorted out?" in fired
    assert ("    wait ok satisfacao/espera no-reply: the customer did not reply while the run waited"
            in fired.splitlines())


def test_chat_event_releases_an_event_wait():
    status, out, _ = run(*CHAT, lines=["I want to pay", "/event paid", "/event", "/event paid {bad"])
    assert status == 0
    assert "code" not in out.split("you: /event paid\n")[0].split("awaiting-event")[0][-5:]
    assert "awaiting-event: the run is waiting for an event detail=paid" in out
    released = out.split("you: /event paid\n")[1]
    assert released.startswith("bot: Payment received, thank you!\n")
    assert "    wait ok pagamento/aguarda event-arrived: the event was reported" in released.splitlines()
    assert "you: /event\n  usage: /event NAME [JSON payload]\n" in out
    assert "the payload is not JSON" in out


def test_chat_session_help_unknown_commands_and_ctrl_c():
    status, out, _ = run(*CHAT, lines=["where is my order?", "/session", "/nope", KeyboardInterrupt()])
    assert status == 0
    blob = out.split("you: /session\n")[1].split("you: /nope")[0]
    assert json.loads(blob)["runs"][0]["stepId"] == "numero"
    assert "  unknown command /nope. Type a message, or: /wake" in out
    assert out.endswith("\n(bye)\n")


def test_chat_script_file_replies_come_first(tmp_path):
    script = write(tmp_path, "script.json", {"understand": [{"flows": {"pedido": 90}, "fields": {}}],
                                             "speak": [{"message": "scripted hello"}]})
    flow = {"id": "oi", "name": "Oi", "on": [{"message": ["greets"]}],
            "steps": [{"id": "a", "kind": "prompt", "prompt": "Greet."}]}
    status, out, _ = run("chat", write(tmp_path, "f.json", flow), "--script", script, lines=["hey"])
    assert status == 0 and "bot: scripted hello" in out


def test_the_offline_stand_in_asks_extracts_and_calls_tools(tmp_path):
    """The scripted stand-in: asks for a field, takes a number for it, calls the step's tool once."""
    registry = {"fields": {"noites": {"type": "integer"}, "vip": {"type": "boolean"}},
                "tools": [{"id": "preco", "description": "Price for some nights.", "result": {"total": 840},
                           "parameters": {"type": "object", "properties": {"noites": {"type": "integer"}}}}]}
    flow = {"id": "reserva", "name": "Booking", "description": "Books hotel nights.",
            "on": [{"message": ["wants to book hotel nights"]}],
            "steps": [{"id": "quantas", "kind": "collect", "collect": ["noites", "vip"]},
                      {"id": "oferta", "kind": "prompt", "prompt": "Give the price.", "tools": ["preco"]}]}
    status, out, err = run("chat", write(tmp_path, "f.json", flow), "--registry",
                           write(tmp_path, "r.json", registry), lines=["I want to book a hotel", "3 nights, yes"])
    assert status == 0, err
    first, second = out.split("you: 3 nights, yes\n")
    assert "bot: (stand-in) Could you tell me your noites?" in first
    assert '  data:     {"noites": 3, "vip": true}' in second
    assert 'bot: (stand-in) preco answered: {"total":840}' in second          # the tool's stand-in result
    assert "  runs:     reserva#m1 at oferta (asking) [floor]" in second
    assert "llm_calls: 3" in second                      # understand, the tool call, the reply


def test_the_offline_stand_in_plays_under_v4_and_says_so_when_the_registry_asks_lean(tmp_path):
    """The stand-in reads only v4 prompts: a registry's "lean" cannot change that, and chat says so."""
    registry = json.load(open(REGISTRY, encoding="utf-8"))
    registry.setdefault("agent", {})["protocol"] = "lean"
    status, out, _ = run("chat", SHOP, "--registry", write(tmp_path, "r.json", registry), "--now",
                         "2026-12-01T10:00:00Z", lines=["where is my order?"])
    header = out.splitlines()[:2]
    assert status == 0 and "provider scripted (protocol v4)" in header[0]
    assert header[1] == ('(the offline stand-in reads only "v4" prompts, so it plays under "v4"; '
                         'the registry\'s protocol "lean" applies with a real --provider)')
    assert "bot: Sure: what is the order number?" in out      # it routed: the stand-in read v4


def test_chat_with_a_real_provider_takes_the_registrys_protocol(tmp_path):
    from fake_model_server import FakeModelServer, openai_frame

    registry = json.load(open(REGISTRY, encoding="utf-8"))
    registry.setdefault("agent", {})["protocol"] = "v4"
    fake = FakeModelServer()
    fake.sse(openai_frame(content='{"message": "Olá"}'), openai_frame(finish="stop"), "[DONE]")
    flow = {"id": "oi", "name": "Oi", "on": [{"message": []}], "steps": [{"id": "a", "kind": "prompt",
                                                                           "prompt": "Greet."}]}
    try:
        status, out, err = run("chat", write(tmp_path, "f.json", flow), "--registry",
                               write(tmp_path, "r.json", registry), "--provider", "openai", "--model",
                               "gpt-4.1-mini", "--base-url", fake.url + "/v1", lines=["oi"],
                               environ={"OPENAI_API_KEY": "test-key"})
    finally:
        fake.close()
    assert status == 0, err
    assert "provider openai (protocol v4)" in out.splitlines()[0] and "stand-in" not in out
    status, out, _ = run(*CHAT)
    assert "provider scripted (protocol v4)" in out.splitlines()[0] and "stand-in reads" not in out


def test_chat_with_a_vendor_provider_talks_to_it_over_http(tmp_path):
    """--provider openai with --base-url and OPENAI_API_KEY: a real request to a local fake server."""
    from fake_model_server import FakeModelServer, openai_frame

    fake = FakeModelServer()
    fake.sse(openai_frame(content='{"message": "Olá do modelo"}'), openai_frame(finish="stop"), "[DONE]")
    flow = {"id": "oi", "name": "Oi", "on": [{"message": []}], "steps": [{"id": "a", "kind": "prompt",
                                                                           "prompt": "Greet."}]}
    try:
        status, out, err = run("chat", write(tmp_path, "f.json", flow), "--provider", "openai", "--model",
                               "gpt-4.1-mini", "--base-url", fake.url + "/v1", lines=["oi"],
                               environ={"OPENAI_API_KEY": "test-key"})
    finally:
        fake.close()
    assert status == 0, err
    assert "bot: Olá do modelo" in out and "  llm_calls: 1" in out
    [sent] = fake.requests
    assert sent.json["model"] == "gpt-4.1-mini" and sent.headers["authorization"] == "Bearer test-key"


def test_chat_shows_a_failed_model_call_as_its_outcome_line(tmp_path):
    from fake_model_server import FakeModelServer

    fake = FakeModelServer()
    fake.error(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    flow = {"id": "oi", "name": "Oi", "on": [{"message": []}], "steps": [{"id": "a", "kind": "prompt",
                                                                           "prompt": "Greet."}]}
    try:
        status, out, _ = run("chat", write(tmp_path, "f.json", flow), "--provider", "openai", "--model",
                             "gpt-4.1-mini", "--base-url", fake.url + "/v1", lines=["oi", "/session"],
                             environ={"OPENAI_API_KEY": "wrong"})
    finally:
        fake.close()
    assert status == 0
    assert "bot: (no reply this turn)" in out
    assert "    prompt failed oi/a provider-auth: the provider rejected the credentials" in out.splitlines()
    assert json.loads(out.split("you: /session\n")[1].split("you: ")[0])["inputs"] == ["m1"]   # recorded


def test_chat_with_a_vendor_provider_needs_its_key():
    status, _, err = run(*CHAT, "--provider", "anthropic", "--model", "claude-sonnet-4-5", environ={})
    assert status == 2
    assert err.startswith("falai chat: --provider anthropic: ") and "ANTHROPIC_API_KEY" in err


def test_chat_with_flows_that_cannot_run_exits_1(tmp_path):
    broken = os.path.join(FLOWS, "broken_two_kinds.json")
    status, out, err = run("chat", broken, lines=[])
    assert status == 1 and out == ""
    assert err.startswith('falai chat: [FlowConfigurationError] flow "aviso", step "a": mixes "say" and "do"')


def test_python_m_falai_chat_reads_piped_input():
    done = subprocess.run([sys.executable, "-m", "falai", *CHAT], cwd=ROOT, input="where is my order?\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "you: where is my order?\nbot: Sure: what is the order number?\n" in done.stdout
    assert done.stdout.endswith("(bye)\n")


# replay and migrate --------------------------------------------------------------------------------

def test_replay_lists_runs_claims_and_pending_wakes(tmp_path):
    playground = falai_cli.Playground([SHOP], falai_cli.read_registry(REGISTRY), falai_cli.scripted_provider(None),
                                      "2026-12-01T10:00:00Z")
    playground.message("where is my order?")
    playground.message("A100")
    saved = write(tmp_path, "session.json", playground.session.to_dict())
    status, out, _ = run("replay", saved, "--flows", SHOP, "--registry", REGISTRY)
    lines = out.splitlines()
    assert status == 0 and lines[0] == "session playground (version 0)"
    run_id = "satisfacao#pedido#m1:pronto:1"
    assert any(line.startswith(f"    {run_id}: flow satisfacao at espera (waiting), hop 1") for line in lines)
    assert "  claims (2):" in lines
    assert "  pending wakes (1):" in lines
    assert f"    {run_id}:espera:1796122800000 at 2026-12-01T11:00:00.000Z" in lines


def test_replay_of_a_3x_blob_points_to_migrate(tmp_path):
    old = write(tmp_path, "old.json", {"id": "x", "data": {}, "currentFlow": {"id": "f"}, "currentStep": "q"})
    status, _, err = run("replay", old)
    assert status == 2 and f"falai migrate {old}" in err


def test_migrate_converts_a_3x_blob_to_v4(tmp_path):
    old = write(tmp_path, "old.json", {"id": "x", "data": {"nome": "Rita"}, "currentFlow": {"id": "f"},
                                       "currentStep": "q"})
    status, out, _ = run("migrate", old, "--session-id", "s1", "--now", "2026-09-21T12:00:00Z")
    blob = json.loads(out)
    assert status == 0 and blob["v"] == 4 and blob["data"] == {"nome": "Rita"}
    assert [(r["id"], r["stepId"], r["status"]) for r in blob["runs"]] == [("f#legacy", "q", "asking")]
    target = tmp_path / "v4.json"
    status, out, _ = run("migrate", old, "-o", str(target))
    assert status == 0 and out == f"wrote {target}: session x, 1 run(s), 1 claim(s)\n"
    assert falai.Session.from_dict(json.loads(target.read_text())).id == "x"


def test_migrate_renames_flows(tmp_path):
    fixture = os.path.join(ROOT, "tests", "fixtures", "prospectar-midflow.json")
    status, out, _ = run("migrate", fixture, "--rename", "qualificacao=qualify")
    blob = json.loads(out)
    assert status == 0 and [r["id"] for r in blob["runs"]] == ["qualify#legacy"]
    assert any(key.startswith("boas_vindas:") for key in blob["claims"])
    status, _, err = run("migrate", fixture, "--rename", "qualificacao")
    assert status == 2 and "write OLD=NEW" in err


def test_migrate_bad_input_exits_2(tmp_path):
    status, _, err = run("migrate", write(tmp_path, "o.json", {"data": {}}))
    assert status == 2 and "has no string id. Pass one: --session-id ID" in err
    status, _, err = run("migrate", write(tmp_path, "o.json", "[1]"), "--session-id", "s")
    assert status == 2 and "expected an object" in err


# inspect (the HTTP side; tests/cli/test_cli_inspect_browser.py drives the page) ------------------------

TOKEN = "per-run-token-for-tests"


@pytest.fixture
def server():
    playground = falai_cli.Playground([SHOP], falai_cli.read_registry(REGISTRY), falai_cli.scripted_provider(None),
                                      "2026-12-01T10:00:00Z")
    httpd = falai_cli.http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), falai_cli.inspect_handler(playground, falai_cli.INSPECT_PAGE.encode(), TOKEN))
    # shutdown() waits for serve_forever's next poll: every 0.01 s, not the default 0.5 s.
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def request(port, method, path, body=None, headers=None):
    """A request as the page sends it: JSON, with the page's token; ``headers`` change or drop
    (value None) any of them."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent = {"Content-Type": "application/json", "X-Falai-Token": TOKEN, **(headers or {})}
    connection.request(method, path, body=None if body is None else json.dumps(body),
                       headers={k: v for k, v in sent.items() if v is not None})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def test_inspect_serves_one_self_contained_page(server):
    status, page = request(server, "GET", "/")
    text = page.decode()
    assert status == 200 and text.startswith("<!doctype html>")
    assert "src=" not in text and "href=" not in text and "@import" not in text and "cdn" not in text.lower()


def test_inspect_api_turns_record_phases_calls_diff_and_wakes(server):
    status, body = request(server, "POST", "/api/wake", {})
    assert status == 409 and json.loads(body) == {"error": "no wake is pending"}
    status, body = request(server, "POST", "/api/message", {"text": "where is my order?"})
    turn = json.loads(body)["turn"]
    assert status == 200 and [p["phase"] for p in turn["phases"]] == ["ingest", "understand", "decide", "run",
                                                                       "speak", "settle"]
    assert turn["phases"][2]["detail"] == "started pedido"
    [call] = turn["modelCalls"]
    assert call["schemaName"] == "understand" and "where is my order?" in call["prompt"]
    assert call["reply"]["structured"]["flows"]["pedido"] > 40 and call["schema"]["type"] == "object"
    assert turn["before"] is None and {"path": "runs", "op": "added", "after": turn["after"]["runs"]} in turn["diff"]
    status, body = request(server, "POST", "/api/message", {"text": "A100"})
    turn, state = json.loads(body)["turn"], json.loads(body)["state"]
    assert {"path": "data.pedido", "op": "added", "after": "A100"} in turn["diff"]
    assert {"path": "runs[0].id", "op": "changed", "before": "pedido#m1",
            "after": "satisfacao#pedido#m1:pronto:1"} in turn["diff"]
    [wake] = state["pending"]
    status, body = request(server, "POST", "/api/wake", {"key": wake["key"]})
    turn = json.loads(body)["turn"]
    assert status == 200 and turn["kind"] == "wake" and turn["at"] == "2026-12-01T11:00:00.000Z"
    assert [o.get("code") for o in turn["outcomes"]][0] == "no-reply"
    assert turn["outcomes"][0]["meaning"] == falai.OUTCOME_MESSAGES["no-reply"]
    status, body = request(server, "GET", "/api/state")
    assert status == 200 and len(json.loads(body)["turns"]) == 3
    assert request(server, "POST", "/api/message", {"text": " "})[0] == 400
    assert request(server, "POST", "/api/message", ["oi"]) == (
        400, b'{"error": "the request body is not a JSON object"}')
    assert request(server, "GET", "/nowhere")[0] == 404


def test_inspect_api_sends_an_event(server):
    request(server, "POST", "/api/message", {"text": "I want to pay"})
    status, body = request(server, "POST", "/api/event", {"name": "paid"})
    turn = json.loads(body)["turn"]
    assert status == 200 and turn["kind"] == "event" and turn["messages"][0]["text"] == "Payment received, thank you!"
    assert turn["outcomes"][0]["code"] == "event-arrived"
    assert turn["phases"][0] == {"phase": "ingest", "detail": "event"}
    assert request(server, "POST", "/api/event", {})[0] == 400


# packaging -----------------------------------------------------------------------------------------

def test_the_console_script_and_the_module_are_declared():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    assert "falai = falai_cli:main" in config["options.entry_points"]["console_scripts"]
    assert "falai_cli" in config["options"]["py_modules"]


def test_import_falai_does_not_load_the_cli():
    done = subprocess.run([sys.executable, "-c", "import sys, falai; print('falai_cli' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False"


def test_the_engine_copied_without_the_cli_says_the_cli_is_missing(tmp_path):
    for name in ("falai_base", "falai_checks", "falai_calls", "falai_spec", "falai_protocols", "falai"):
        shutil.copy(os.path.join(ROOT, f"{name}.py"), tmp_path)
    # -S: no site-packages, so an installed falai_cli (pip install -e .) is out of reach, as in a bare copy.
    done = subprocess.run([sys.executable, "-S", "-m", "falai", "validate", "x.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 1
    assert done.stderr.startswith("falai: the command line needs falai_cli.py next to falai.py")


def test_version_and_usage_errors():
    status, out, _ = run("--version")
    assert status == 0
    assert run("frobnicate")[0] == 2


# the guide -----------------------------------------------------------------------------------------

CONSOLE = re.compile(r"^```console\n\$ (.*?)\n(.*?)^```", re.S | re.M)


def tokens_hidden(text):
    """The stand-in's token counts follow the prompts' length, which other work changes: not compared."""
    return re.sub(r"usage: prompt \d+, completion \d+", "usage: prompt N, completion N", text)


@pytest.mark.slow          # every `$ falai` block of the guide, each run as a process
def test_the_guide_shows_what_the_commands_print():
    """docs/guide/cli.md: every `$ falai ...` block whose files exist is the command's real output."""
    checked = 0
    for command, shown in CONSOLE.findall((pathlib_root() / "docs" / "guide" / "cli.md").read_text("utf-8")):
        piped = re.match(r"printf '(.*)' \| (falai .*)", command)
        stdin = piped.group(1).encode().decode("unicode_escape") if piped else None
        argv = [expanded for word in shlex.split(piped.group(2) if piped else command)   # the shell's glob
                for expanded in (sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, word)))
                                 if "*" in word else [word])]
        if argv[0] != "falai" or not all(os.path.exists(os.path.join(ROOT, a)) for a in argv
                                         if a.endswith(".json") and not a.startswith("/tmp/")):
            continue                                    # replay reads a session.json the reader has
        done = subprocess.run([sys.executable, "-m", "falai", *argv[1:]], cwd=ROOT, input=stdin,
                              capture_output=True, text=True, timeout=60)
        assert tokens_hidden(done.stdout + done.stderr) == tokens_hidden(shown), command
        checked += 1
    assert checked >= 6


def pathlib_root():
    return pathlib.Path(ROOT)


# unusable input files, every command (cli.md, Notes: one line and exit 2) --------------------------

def file_commands(bad):
    """Every place a command reads a file, with ``bad`` as that file."""
    session = os.path.join(os.path.dirname(bad), "good-session.json")
    with open(session, "w", encoding="utf-8") as file:
        json.dump(falai.Session(id="s").to_dict(), file)
    return [("graph", bad), ("replay", bad), ("migrate", bad, "--session-id", "s"),
            ("validate", SHOP, "--registry", bad), ("schema", "--registry", bad), ("chat", bad),
            ("chat", SHOP, "--registry", bad), ("chat", SHOP, "--registry", REGISTRY, "--script", bad),
            ("replay", bad, "--flows", SHOP), ("replay", session, "--flows", bad),
            ("inspect", bad, "--port", "0")]


UNUSABLE_FILES = {
    "deep": "[" * 200_000 + "]" * 200_000,                  # past Python's recursion limit
    "deep-object": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested-300": "[" * 300 + "]" * 300,                      # parses, but deeper than any real file
    "binary": b"\xff\xfe\x00\x01 not text",
    "broken": '{"id": "f", ',
}


@pytest.mark.parametrize("kind", sorted(UNUSABLE_FILES))
def test_every_command_refuses_an_unusable_file_in_one_line_with_exit_2(tmp_path, kind):
    content = UNUSABLE_FILES[kind]
    path = tmp_path / f"{kind}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for argv in file_commands(str(path)):
        status, out, err = run(*argv)
        assert status == 2, (argv, out, err)
        assert len(err.strip().splitlines()) == 1 and str(path) in err and "Traceback" not in err, (argv, err)
    status, out, err = run("validate", str(path))                   # validate reports on stdout
    assert status == 2 and str(path) in out and err == ""


def test_a_file_over_the_size_cap_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setattr(falai_cli, "MAX_INPUT_BYTES", 1000)
    path = write(tmp_path, "big.json", {"id": "f", "name": "F", "steps": [{"id": "s", "say": "x" * 2000}]})
    for argv in file_commands(path):
        status, _, err = run(*argv)
        assert status == 2 and len(err.strip().splitlines()) == 1 and "is larger than" in err, (argv, err)


def test_a_deep_event_payload_in_chat_is_a_line_not_a_traceback():
    # How deep json.loads reads depends on the interpreter (3.13 reads 5,000 levels, 3.10-3.12 raise
    # RecursionError; 100,000 is past every one): every depth gets the same line, never "not JSON".
    lines = [f"/event paid {'[' * depth}{']' * depth}" for depth in (100_000, 5000, 100)]
    status, out, err = run("chat", SHOP, "--registry", REGISTRY, lines=lines)
    assert status == 0 and err == ""
    assert "not JSON" not in out and out.count("deeper than 64 levels") == 3, out
