"""issue 14: the inspector page in a real headless browser (Debian's chromium, driven over DevTools).

The test starts `python -m falai inspect` on a free port, opens the page,
types a customer message, reads the reply and the outcome lines, fires a wake
with the page's button and watches the run move on.
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request

import pytest

from cdp_client import Browser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = next((path for path in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if path and os.path.exists(path)), None)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it with "
                                                          "apt-get install -y chromium); the browser test needs it")


@pytest.fixture
def inspector():
    process = subprocess.Popen([sys.executable, "-m", "falai", "inspect", "examples/cli/shop.json",
                                "--registry", "examples/cli/registry.json", "--port", "0",
                                "--now", "2026-12-01T10:00:00Z"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.startswith("falai inspect: http://127.0.0.1:"), line
    yield line.split()[2]
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def page(inspector, tmp_path):
    browser = Browser.launch(CHROMIUM, str(tmp_path / "profile"))
    try:
        tab = browser.open(inspector)
        tab.wait_for("document.getElementById('agent') && document.getElementById('agent').textContent === 'Shop'")
        yield tab
    finally:
        browser.close()


def texts(selector: str) -> str:
    return f"[...document.querySelectorAll({selector!r})].map((e) => e.textContent)"


CURRENT = "[...document.querySelectorAll('#flowsvg g.node.current')].map((e) => e.dataset.flow + '/' + e.dataset.step)"


def test_the_page_talks_to_the_agent_and_fires_a_wake(page):
    # The flow diagram is drawn before any turn: one node per step, none current yet.
    steps = page.evaluate(texts("#flowsvg g.node[data-step]"))
    assert any(label.startswith("numero: collect pedido") for label in steps)
    assert page.evaluate("document.querySelectorAll('#flowsvg g.node.current').length") == 0

    page.evaluate("document.getElementById('message').focus()")
    page.type("where is my order?")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Sure: what is the order number?')")
    outcomes = page.evaluate(texts("#outcomes tr"))
    assert any("asked-fixed" in row and "the step's fixed question went out word for word" in row for row in outcomes)
    assert page.evaluate(CURRENT) == ["pedido/numero"]
    assert "understand" in page.evaluate("document.getElementById('calls').textContent")

    page.evaluate("document.getElementById('message').focus()")
    page.type("A100")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Order A100 is out for delivery.')")
    assert any(row.startswith("dookpedido / consulta") for row in page.evaluate(texts("#outcomes tr")))
    pending = page.evaluate(texts("#pending tr"))
    assert len(pending) == 1 and "2026-12-01T11:00:00.000Z" in pending[0]
    assert "data.situacao" in page.evaluate("document.getElementById('diff').textContent")
    assert page.evaluate(CURRENT) == ["satisfacao/espera"]          # the chained flow's wait

    page.click("#wake")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Did your order question get sorted out?')")
    outcomes = page.evaluate(texts("#outcomes tr"))
    assert any("no-reply" in row and "the customer did not reply while the run waited" in row for row in outcomes)
    assert page.evaluate("document.getElementById('now').textContent") == "2026-12-01T11:00:00.000Z"
    assert page.evaluate(texts("#pending tr")) == ["no wake pending"]


# Who can reach the inspector (docs/guide/cli.md): another origin's page, in the same browser ---------

ATTACK = """<!doctype html><title>elsewhere</title><body>
<form id="f" method="POST" enctype="text/plain" action="{target}/api/message">
<input name='{{"text":"where is my order?","x":"' value='"}}'></form>
<script>
window.sent = Promise.all([
  fetch("{target}/api/message", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
                                 body: JSON.stringify({{text: "where is my order?"}})}}).catch(() => "refused"),
  fetch("{target}/api/message", {{method: "POST", headers: {{"Content-Type": "application/json"}},
                                 body: JSON.stringify({{text: "where is my order?"}})}}).catch(() => "refused"),
  fetch("{target}/api/state").then((r) => r.text()).catch(() => "unreadable"),
]);
</script></body>"""


@pytest.fixture
def elsewhere(inspector):
    """Another origin (another port on 127.0.0.1) serving a page that attacks the inspector."""
    page = ATTACK.format(target=inspector.rstrip("/")).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def turns_run(inspector: str) -> int:
    """How many turns the inspector ran, read as its own page does (with the page's token)."""
    page = urllib.request.urlopen(inspector, timeout=10).read().decode()
    token = page.split('name="falai-token" content="')[1].split('"')[0]
    request = urllib.request.Request(inspector + "api/state", headers={"X-Falai-Token": token})
    return len(json.loads(urllib.request.urlopen(request, timeout=10).read())["turns"])


def test_another_origins_page_cannot_drive_or_read_the_inspector(inspector, elsewhere, tmp_path):
    browser = Browser.launch(CHROMIUM, str(tmp_path / "profile"))
    try:
        tab = browser.open(elsewhere)
        tab.wait_for("document.title === 'elsewhere' && window.sent !== undefined")
        no_cors, cors, state = tab.evaluate("window.sent.then((r) => r.map((v) => typeof v === 'string' ? v : "
                                            "v.type + ':' + v.status))")
        assert no_cors == "opaque:0"                     # sent, but the inspector refused it (403)
        assert cors == "refused"                         # the preflight for a JSON POST is not answered
        assert state == "unreadable" or "where is my order" not in state
        tab.evaluate("document.getElementById('f').submit()")      # a plain cross-site form
        tab.wait_for("document.body && document.body.textContent.includes('may not use the inspector')")
    finally:
        browser.close()
    assert turns_run(inspector) == 0


def test_the_page_calls_carry_the_token(page):
    """The page's own requests pass; the same request without its token does not."""
    status = page.evaluate("fetch('/api/message', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                           " body: JSON.stringify({text: 'oi'})}).then((r) => r.status)")
    assert status == 403
    page.evaluate("document.getElementById('message').focus()")
    page.type("where is my order?")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Sure: what is the order number?')")


def test_a_dns_rebinding_page_reads_nothing(inspector, tmp_path):
    """A name the attacker controls, resolved to 127.0.0.1 (as a rebinding DNS answer would be): the
    browser sends that name in Host, and the inspector serves it nothing, not even its page."""
    port = inspector.rstrip("/").rsplit(":", 1)[1]
    browser = Browser.launch(CHROMIUM, str(tmp_path / "profile"),
                             flags=("--host-resolver-rules=MAP rebind.test 127.0.0.1",))
    try:
        tab = browser.open(f"http://rebind.test:{port}/")
        tab.wait_for("document.body && document.body.textContent.includes('not this inspector')")
        status, text = tab.evaluate("fetch('/api/state').then(async (r) => [r.status, await r.text()])")
        assert status == 403 and "where is my order" not in text and "Shop" not in text
        status = tab.evaluate("fetch('/api/message', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                              " body: JSON.stringify({text: 'where is my order?'})}).then((r) => r.status)")
        assert status == 403
    finally:
        browser.close()
    assert turns_run(inspector) == 0
