"""The README's main job: python examples/concierge.py books a room offline, with no API key."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_concierge_runs_the_offline_demo_to_a_booking():
    env = {k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    out = subprocess.run([sys.executable, "examples/concierge.py"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "offline demo" in out.stdout
    assert "A diária em Curitiba sai por R$ 420" in out.stdout
    assert '"reserva": "RES-' in out.stdout and "Reserva feita: RES-" in out.stdout
    assert "chamadas ao modelo: 3" in out.stdout


def test_concierge_talks_to_an_openai_compatible_server_over_http():
    """With OPENAI_BASE_URL set the example chats through OpenAICompatibleProvider: a real HTTP round trip
    (understand, then speak) against a local fake server speaking the chat-completions wire format."""
    from fake_model_server import FakeModelServer, openai_frame

    fake = FakeModelServer()
    try:
        fake.sse(openai_frame(content='{"flows":{"hospedagem":95},"fields":{"cidade":null,"reserva":null}}',
                              finish="stop"))
        fake.sse(openai_frame(content='{"message":"Claro! Em qual cidade?",'), openai_frame(
            content='"cidade":null}', finish="stop", usage={"prompt_tokens": 50, "completion_tokens": 9}))
        env = {k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "OPENAI_API_KEY")}
        env.update(OPENAI_BASE_URL=fake.url + "/v1", FALAI_MODEL="tiny")
        out = subprocess.run([sys.executable, "examples/concierge.py"], cwd=ROOT, env=env, timeout=60,
                             input="Oi! Quero reservar um quarto.\nsair\n", capture_output=True, text=True)
    finally:
        fake.close()
    assert out.returncode == 0, out.stderr
    assert "Concierge: Claro! Em qual cidade?" in out.stdout and "chamadas ao modelo: 2" in out.stdout
    assert [r.path for r in fake.requests] == ["/v1/chat/completions"] * 2
    assert [r.json["model"] for r in fake.requests] == ["tiny", "tiny"]
    assert "authorization" not in fake.requests[0].headers          # a local server needs no key
