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
