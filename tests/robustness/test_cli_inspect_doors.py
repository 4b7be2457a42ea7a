"""Who can reach `falai inspect` (docs/guide/cli.md, "Who can reach the inspector"): one test per
attack, at the HTTP level. tests/cli/test_cli_inspect_browser.py checks the page still works in a
real browser and that another origin's page cannot drive it."""
import http.client
import json
import os
import socket
import threading

import pytest

import falai_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOP = os.path.join(ROOT, "examples", "cli", "shop.json")
REGISTRY = os.path.join(ROOT, "examples", "cli", "registry.json")
TOKEN = "a-per-run-token"


class Inspector:
    def __init__(self, timeout: float = 30):
        self.playground = falai_cli.Playground([SHOP], falai_cli.read_registry(REGISTRY),
                                               falai_cli.scripted_provider(None), "2026-12-01T10:00:00Z")
        handler = falai_cli.inspect_handler(self.playground, falai_cli.INSPECT_PAGE.encode(), TOKEN)
        handler.timeout = timeout
        self.httpd = falai_cli.http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """As the page sends it, with ``headers`` changed (a value None drops that header)."""
        sent = {"Host": f"127.0.0.1:{self.port}", "Content-Type": "application/json",
                "X-Falai-Token": TOKEN, **(headers or {})}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in sent.items():
            if value is not None:
                connection.putheader(name, value)
        if body is not None and "Content-Length" not in (headers or {}):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
        connection.close()
        return response.status, data

    def turns(self) -> int:
        return len(self.playground.turns)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def inspector():
    server = Inspector()
    yield server
    server.close()


MESSAGE = json.dumps({"text": "where is my order?"}).encode()


def test_the_page_request_runs_a_turn(inspector):
    assert inspector.request("POST", "/api/message", MESSAGE)[0] == 200
    assert inspector.turns() == 1
    status, body = inspector.request("POST", "/api/message", MESSAGE, {"Host": f"localhost:{inspector.port}",
                                                                       "Origin": f"http://localhost:{inspector.port}"})
    assert status == 200 and inspector.turns() == 2


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                  None])
def test_a_post_that_is_not_json_runs_nothing(inspector, kind):
    """A cross-site form or no-cors fetch can only send these types: refused before any turn."""
    status, body = inspector.request("POST", "/api/message", MESSAGE, {"Content-Type": kind})
    assert status == 415 and b"application/json" in body and inspector.turns() == 0


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x"])
def test_a_post_without_the_page_token_runs_nothing(inspector, token):
    for path, body in (("/api/message", MESSAGE), ("/api/event", b'{"name": "paid"}'), ("/api/wake", b"{}")):
        status, answer = inspector.request("POST", path, body, {"X-Falai-Token": token})
        assert status == 403 and b"X-Falai-Token" in answer
    assert inspector.turns() == 0


def test_a_post_from_another_origin_runs_nothing(inspector):
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{inspector.port + 1}",
                   f"https://127.0.0.1:{inspector.port}"):
        status, body = inspector.request("POST", "/api/message", MESSAGE, {"Origin": origin})
        assert status == 403 and b"may not use the inspector" in body
    assert inspector.turns() == 0


@pytest.mark.parametrize("host", ["evil.example", f"evil.example:{0}", "attacker.test:80", "", None,
                                  "127.0.0.2:{port}", "0.0.0.0:{port}"])
def test_a_foreign_host_reads_and_drives_nothing(inspector, host):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: every path is refused."""
    host = None if host is None else host.format(port=inspector.port)
    inspector.request("POST", "/api/message", MESSAGE)             # something worth stealing
    for method, path, body in (("GET", "/api/state", None), ("GET", "/", None),
                               ("POST", "/api/message", MESSAGE)):
        status, answer = inspector.request(method, path, body, {"Host": host})
        assert status == 403 and b"not this inspector's address" in answer
        assert b"where is my order" not in answer and TOKEN.encode() not in answer
    assert inspector.turns() == 1


def test_the_page_carries_its_token_and_only_to_its_own_address(inspector):
    status, page = inspector.request("GET", "/", headers={"X-Falai-Token": None, "Content-Type": None})
    assert status == 200 and f'<meta name="falai-token" content="{TOKEN}">'.encode() in page
    assert inspector.request("GET", "/api/state", headers={"X-Falai-Token": None})[0] == 403


def test_every_run_has_its_own_token():
    page = falai_cli.INSPECT_PAGE.encode()
    playground = falai_cli.Playground([SHOP], falai_cli.read_registry(REGISTRY),
                                      falai_cli.scripted_provider(None), "2026-12-01T10:00:00Z")
    tokens = set()
    for _ in range(3):
        handler = falai_cli.inspect_handler(playground, page)
        httpd = falai_cli.http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=10)
            connection.request("GET", "/")
            text = connection.getresponse().read().decode()
            tokens.add(text.split('name="falai-token" content="')[1].split('"')[0])
        finally:
            httpd.shutdown()
            httpd.server_close()
    assert len(tokens) == 3 and all(len(t) >= 24 for t in tokens)


@pytest.mark.parametrize("length", ["-1", "abc", "", "1e3", str(falai_cli.INSPECT_MAX_BODY + 1), None])
def test_a_bad_content_length_is_refused_at_once(inspector, length):
    """Negative, missing, not a number or over the cap: 400, and no handler thread waits for a body."""
    status, body = inspector.request("POST", "/api/message", MESSAGE if length is None else b"",
                                     {"Content-Length": length})
    assert status == 400 and b"Content-Length" in body and inspector.turns() == 0
    assert inspector.request("POST", "/api/message", MESSAGE)[0] == 200     # still serving


def test_a_silent_connection_is_closed():
    """A request that stops halfway holds its thread only for the handler's timeout."""
    server = Inspector(timeout=0.5)
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(f"POST /api/message HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                     f"Content-Type: application/json\r\nX-Falai-Token: {TOKEN}\r\n"
                     "Content-Length: 100\r\n\r\n{".encode())
        while sock.recv(65536):
            pass          # the server answers or not, then closes: a wait past 10 s raises instead
        sock.close()
        assert server.turns() == 0
    finally:
        server.close()


def test_a_body_nested_past_the_recursion_limit_is_a_400(inspector):
    deep = b"[" * 200_000 + b"]" * 200_000
    status, body = inspector.request("POST", "/api/message", deep)
    assert status == 400 and b"not a JSON object" in body
