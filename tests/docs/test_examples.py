"""Every example, run as a newcomer runs it: no arguments, no API key, stdin closed, offline; exit 0.

The concierge is also driven through a live-model path over real HTTP against the local fake server:
a good reply, a provider failure (one line, the chat goes on), Ctrl-C and end of input.
"""
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NO_KEYS = ("GEMINI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FALAI_MODEL",
           "FALAI_SERVER", "FALAI_STRUCTURED_OUTPUT", "FALAI_MAX_TOKENS")


def offline_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NO_KEYS}
    env.update(extra)
    return env


def run_example(name: str, *args: str, env: dict | None = None, stdin_text: str | None = None):
    out = subprocess.run([sys.executable, os.path.join("examples", name), *args], cwd=ROOT,
                         env=env or offline_env(), timeout=120, capture_output=True, text=True,
                         **({"input": stdin_text} if stdin_text is not None else {"stdin": subprocess.DEVNULL}))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_every_example_is_covered_here():
    """A new example gets a test below: this list is the examples folder."""
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "examples")) if n.endswith(".py"))
    assert names == ["concierge.py", "flows_from_json.py", "follow_up.py", "host_sqlite.py", "serverless.py",
                     "webhook.py"]


# concierge.py --------------------------------------------------------------------------------------

def test_concierge_plays_a_scripted_demo_to_a_booking_then_ends_on_closed_stdin():
    out = run_example("concierge.py")
    assert "Scripted transcript" in out.stdout and "You (scripted): Oi! Quero reservar um quarto." in out.stdout
    assert "A diária em Curitiba sai por R$ 420" in out.stdout
    assert '"reserva": "RES-' in out.stdout and "Reserva feita: RES-" in out.stdout
    assert "model calls: 3" in out.stdout
    assert "GEMINI_API_KEY" in out.stdout and "OPENAI_BASE_URL" in out.stdout      # how to get a live model
    assert out.stdout.rstrip().endswith("(end of input: goodbye)")


def test_concierge_lets_you_chat_with_the_offline_stand_in():
    out = run_example("concierge.py", "--chat", stdin_text="quero um quarto\nem Recife\nsim, pode\nsair\n")
    assert "Scripted transcript" not in out.stdout
    assert "A diária em Recife sai por R$ 360" in out.stdout
    assert "Reserva confirmada! Seu código é RES-" in out.stdout


def test_concierge_talks_to_an_openai_compatible_server_and_passes_the_history(fake):
    """With OPENAI_BASE_URL set the example chats through OpenAICompatibleProvider over real HTTP; the second
    turn's request carries the first exchange as history, as a real host's would."""
    from fake_model_server import openai_frame

    for reply in ('{"message":"Claro! Em qual cidade?","cidade":null}', '{"message":"Ótimo, anotei.","cidade":null}'):
        fake.sse(openai_frame(content='{"flows":{"hospedagem":95},"fields":{"cidade":null,"reserva":null}}',
                              finish="stop"))
        fake.sse(openai_frame(content=reply, finish="stop", usage={"prompt_tokens": 50, "completion_tokens": 9}))
    env = offline_env(OPENAI_BASE_URL=fake.url + "/v1", FALAI_MODEL="tiny")
    out = run_example("concierge.py", env=env, stdin_text="Oi! Quero reservar um quarto.\nObrigado\nsair\n")
    assert "Concierge: Claro! Em qual cidade?" in out.stdout and "model calls: 2" in out.stdout
    assert [r.path for r in fake.requests] == ["/v1/chat/completions"] * 4
    assert [r.json["model"] for r in fake.requests] == ["tiny"] * 4
    assert "authorization" not in fake.requests[0].headers          # a local server needs no key
    later = [m["content"] for m in fake.requests[2].json["messages"]]
    assert "Oi! Quero reservar um quarto." in later and "Claro! Em qual cidade?" in later


def test_concierge_reports_a_provider_failure_on_one_line_and_goes_on(fake):
    from fake_model_server import openai_frame

    fake.error(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    fake.sse(openai_frame(content='{"flows":{"hospedagem":95},"fields":{"cidade":null,"reserva":null}}',
                          finish="stop"))
    fake.sse(openai_frame(content='{"message":"Claro! Em qual cidade?","cidade":null}', finish="stop"))
    env = offline_env(OPENAI_BASE_URL=fake.url + "/v1", OPENAI_API_KEY="wrong", FALAI_MODEL="tiny")
    out = run_example("concierge.py", env=env, stdin_text="Quero um quarto\nQuero um quarto\nsair\n")
    failure = [line for line in out.stdout.splitlines() if "model call failed" in line]
    assert len(failure) == 1
    assert "auth 401" in failure[0] and "not processed" in failure[0] and "API key" in failure[0]
    assert "Concierge: Claro! Em qual cidade?" in out.stdout                        # the chat went on
    assert out.stderr == ""


def test_concierge_reports_a_failed_reply_on_one_line(fake):
    """The speak call failing does not raise: the turn is saved, and the chat says so on one line."""
    from fake_model_server import openai_frame

    fake.sse(openai_frame(content='{"flows":{"hospedagem":95},"fields":{"cidade":null,"reserva":null}}',
                          finish="stop"))
    fake.error(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    env = offline_env(OPENAI_BASE_URL=fake.url + "/v1", OPENAI_API_KEY="wrong", FALAI_MODEL="tiny")
    out = run_example("concierge.py", env=env, stdin_text="Quero um quarto\nsair\n")
    failure = [line for line in out.stdout.splitlines() if "No reply" in line]
    assert len(failure) == 1 and "provider-auth" in failure[0] and "check the API key" in failure[0]
    assert "You: sair" in out.stdout and out.stderr == ""


def test_concierge_survives_a_reply_cut_at_the_cap_with_no_retry_time(fake):
    """A local model that loops: the understand judgement finds no flow, the idle reply is cut at the cap
    (FALAI_MAX_TOKENS) and deferred with no ``until``; the chat says so on one line and goes on."""
    from fake_model_server import openai_frame

    fake.chat_dialect = "llama.cpp"
    fake.sse(openai_frame(content='{"flows":[],"fields":[]}', finish="stop"))
    fake.sse(openai_frame(content='{"message": "o que é o que está abrir em um que não', finish="length"),
             '{"choices": [], "usage": {"prompt_tokens": 192, "completion_tokens": 40}}')
    env = offline_env(OPENAI_BASE_URL=fake.url + "/v1", FALAI_MODEL="smollm2-135m-instruct",
                      FALAI_SERVER="llama.cpp", FALAI_MAX_TOKENS="40")
    out = run_example("concierge.py", env=env, stdin_text="Oi!\nsair\n")
    failure = [line for line in out.stdout.splitlines() if "No reply" in line]
    assert len(failure) == 1 and "nothing is scheduled" in failure[0] and "provider-length" in failure[0], out.stdout
    assert "output cap" in failure[0]
    assert "You: sair" in out.stdout
    assert [r.json["max_tokens"] for r in fake.requests] == [40, 40]
    assert fake.requests[0].json["response_format"]["type"] == "json_schema"


def test_concierge_reports_bad_local_settings_without_a_traceback():
    env = offline_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1", FALAI_SERVER="llamacpp")
    out = subprocess.run([sys.executable, "examples/concierge.py"], cwd=ROOT, env=env, timeout=60,
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "server is 'llamacpp'" in out.stdout and "Traceback" not in out.stderr


def test_concierge_exits_cleanly_on_ctrl_c():
    process = subprocess.Popen([sys.executable, "examples/concierge.py", "--chat"], cwd=ROOT, env=offline_env(),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        deadline = time.monotonic() + 60
        while "leave." not in seen and time.monotonic() < deadline:
            seen += process.stdout.readline()
        time.sleep(0.3)                                   # let it reach input()
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "interrupted" in rest


# the other examples -----------------------------------------------------------------------------------

def test_follow_up_prints_a_timeline_with_the_reminder_the_reply_and_the_silence_check_in():
    out = run_example("follow_up.py").stdout
    assert "time" in out and "input" in out and "sent" in out and "scheduled" in out
    story1, story2 = out.split("Story 2")
    assert "wake orcamento#m1" in story1 and "Ana, conseguiu ver a proposta?" in story1
    assert "Oi! Ainda posso ajudar" in story1                                     # the silence trigger
    assert "Que bom ter notícias suas, Ana!" in story2                            # else: replied first
    assert "(ignored: stale-wake)" in story2 and "conseguiu ver a proposta" not in story2


def test_host_sqlite_continues_the_conversation_across_three_processes():
    out = run_example("host_sqlite.py").stdout
    assert out.count("--- process") == 3
    assert "version 1" in out and "version 2" in out and "version 3" in out
    assert "Prazer, Bruno!" in out and "equipe de financeiro" in out


def test_host_sqlite_one_message_per_run_on_a_given_file(tmp_path):
    db = str(tmp_path / "chat.db")
    run_example("host_sqlite.py", "--db", db, "--id", "a", "Oi")
    second = run_example("host_sqlite.py", "--db", db, "--id", "b", "Me chamo Carla").stdout
    assert "Prazer, Carla!" in second and "version 2" in second


def test_serverless_returns_messages_and_wakes_and_ignores_a_retried_invocation():
    out = run_example("serverless.py").stdout
    assert '"wakes": [{"key": "visita#m1:espera:' in out
    assert '"ignored": "duplicate-input"' in out
    assert "Passando para confirmar a visita de quinta" in out


def test_serverless_lambda_handler_wraps_handle(tmp_path, monkeypatch):
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("serverless_example", os.path.join(ROOT, "examples", "serverless.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FALAI_SESSIONS_DB", str(tmp_path / "s.db"))
    reply = module.lambda_handler({"body": json.dumps({"session_id": "x", "message": "quero uma visita",
                                                       "id": "1"})}, None)
    assert reply["statusCode"] == 200
    assert json.loads(reply["body"])["messages"][0]["text"] == "Claro! Qual dia da semana fica bom?"


def test_webhook_plays_a_conversation_against_itself_over_http_and_stops():
    out = run_example("webhook.py").stdout
    assert "serving on http://127.0.0.1:" in out and out.rstrip().endswith("stopped")
    assert "Anotado: lasanha" in out and '"ignored": "duplicate-input"' in out
    assert '"status": 400' in out and "Sua lasanha saiu para entrega!" in out


def test_webhook_serves_on_a_given_port(tmp_path):
    import json
    import socket
    import urllib.request
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "examples/webhook.py", "--port", str(port)], cwd=ROOT,
                               env=offline_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert "serving on" in process.stdout.readline()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/message", method="POST",
                                         data=json.dumps({"session_id": "p", "text": "oi", "id": "1"}).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["messages"][0]["key"] == "pedido#1:prato:1"
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0 and "Traceback" not in err and "stopped" in rest


def test_flows_from_json_reports_every_bad_file_and_runs_the_good_ones():
    out = run_example("flows_from_json.py").stdout
    assert 'broken_bad_duration.json: rejected: [FlowConfigurationError] flow "lembrete", trigger #1: silence' in out
    assert 'broken_two_kinds.json: rejected: [FlowConfigurationError] flow "aviso", step "a": mixes' in out
    assert 'broken_unknown_field.json: rejected: [FlowConfigurationError] flow "troca", step "qual": unknown' in out
    assert "broken_not_json.json: not loaded: the file is not valid JSON" in out
    assert "warning: flow \"confirma\", step \"checa\": else jumps back" in out
    assert "Order A100 is out for delivery." in out

