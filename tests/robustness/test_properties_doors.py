"""Fuzz targets for the doors hostile input comes through: templates, the provider reply readers
and the inspector's endpoints. Bounded by default; FALAI_FUZZ=long or FALAI_FUZZ_EXAMPLES=N runs
longer (tests/fuzz_scenarios.py)."""
from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import threading
from typing import Any, NamedTuple

import pytest
import requests
from hypothesis import given, strategies as st

import falai_cli
from falai import GenerateRequest, Generation, ProviderError, Scope, render
from falai_base import value_text
from falai_providers import OpenAICompatibleProvider, _parse_envelope, _SseReader, parse_tool_args
from fake_model_server import FakeModelServer, openai_frame
from fuzz_scenarios import fuzz_settings

SECRET = "sk-live-secret-0123456789"


# Templates: data only ###########################################################################

class Point(NamedTuple):
    x: int
    label: str


@dataclasses.dataclass
class Lead:
    name: str
    tags: list
    client: Any                       # a host object: not data
    _token: str = SECRET


class Client:
    def __init__(self):
        self.token = SECRET
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {SECRET}"
        self.items = [SECRET]

    @property
    def secret(self):
        return SECRET


def context() -> dict:
    client = Client()
    return {"lead": Lead("Ana", ["vip", {"k": "v"}], client), "client": client, "point": Point(3, "p"),
            "rows": [{"name": "a"}, (1, 2)], "n": 7, "none": None, "http": client.http,
            "fn": lambda: SECRET}


def reference(path: str, scope: dict) -> Any:
    """The rule of docs/guide/limits.md written plainly: mappings by key, lists and tuples by index,
    named-tuple and dataclass fields by name, nothing else; (value or None for unknown, blank)."""
    root, *keys = path.split(".")
    if root not in scope or scope[root] is None:
        return None, False
    value = scope[root]
    for key in keys:
        if value is None:
            return None, True
        if isinstance(value, dict):
            value = value.get(key, KeyError)
        elif isinstance(value, (list, tuple)) and key.isascii() and key.isdigit():
            value = value[int(key)] if int(key) < len(value) else KeyError
        elif isinstance(value, tuple) and key in getattr(type(value), "_fields", ()) and not key.startswith("_"):
            value = getattr(value, key)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type) and not key.startswith("_") \
                and key in {f.name for f in dataclasses.fields(value)}:
            value = getattr(value, key)
        else:
            return None, False
        if value is KeyError or callable(value):
            return None, False
    return value, False


SEGMENTS = ["lead", "client", "point", "rows", "n", "none", "http", "fn", "name", "tags", "token", "_token",
            "headers", "Authorization", "items", "secret", "x", "label", "_fields", "0", "1", "2", "k",
            "__class__", "__init__", "__globals__", "__dict__", "get", "keys", "auth", "cookies", "count"]
paths = st.builds(lambda root, rest: ".".join([root, *rest]),
                  st.sampled_from(["context", "data", "input", "nope"]),
                  st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=5))


@fuzz_settings(300)
@given(paths)
def test_a_template_reads_exactly_the_data_a_plain_walk_reads(path):
    ctx = context()
    scope = Scope(data={"lead": {"name": "Bia"}, "n": 1}, context=ctx, input={"point": Point(1, "q")})
    logging.disable(logging.WARNING)
    try:
        text = render("{{" + path + "}}", scope)
    finally:
        logging.disable(logging.NOTSET)
    assert SECRET not in text
    value, blank = reference(path, {"data": scope.data, "context": ctx, "input": scope.input})
    if blank:
        expected = ""
    elif value is None:
        expected = "{{" + path + "}}"
    else:
        try:
            expected = value_text(value)
        except Exception:                        # a value that cannot be printed is unknown
            expected = "{{" + path + "}}"
    assert text == expected


# Provider reply readers #########################################################################

hostile = st.lists(st.sampled_from(['\\', '"', "{", "}", "[", "]", ":", ",", "u", "0", "a", " ", "\n", "é",
                                    "\x00", "data: ", "```", "[DONE]", "\r", '"message":', "\\" * 50]),
                   max_size=150).map("".join)


@fuzz_settings(300)
@given(hostile)
def test_tool_arguments_and_envelopes_never_raise(text):
    logging.disable(logging.WARNING)
    try:
        arguments = parse_tool_args(text, "t")
        _parse_envelope(text)
    finally:
        logging.disable(logging.NOTSET)
    assert isinstance(arguments, dict)
    try:
        whole = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict) and "\\u" not in text:
        assert arguments == whole


@fuzz_settings(200)
@given(hostile, st.lists(st.integers(1, 9), min_size=1, max_size=30))
def test_the_stream_reader_reads_the_same_payloads_however_the_bytes_are_split(text, cuts):
    data = text.encode("utf-8")
    whole = _SseReader()
    expected = whole.feed(data) + whole.finish()
    pieces, at, reader = [], 0, _SseReader()
    for size in cuts * (len(data) // max(1, sum(cuts)) + 1):
        if at >= len(data):
            break
        pieces += reader.feed(data[at:at + size])
        at += size
    assert pieces + reader.finish() == expected


@pytest.fixture(scope="module")
def reply_server():
    server = FakeModelServer(strict=False)
    yield server
    server.close()


@fuzz_settings(40)
@given(st.lists(hostile, min_size=1, max_size=6), st.booleans())
def test_a_reply_of_any_shape_is_a_generation_or_a_provider_error(reply_server, frames, raw):
    """Over real HTTP: whatever the endpoint streams, only a Generation or a ProviderError comes out."""
    reply_server.sse(*[openai_frame(content=f) if not raw else f for f in frames], raw=raw)
    provider = OpenAICompatibleProvider(name="local", base_url=reply_server.url, api_key=None, model="m",
                                        sleep=lambda s: None, retry_config={"timeout": 3000, "retries": 0})
    logging.disable(logging.WARNING)
    try:
        out = provider.generate(GenerateRequest(system=None, prompt="p", history=[]))
    except ProviderError:
        return
    finally:
        logging.disable(logging.NOTSET)
    assert isinstance(out, Generation)


# The inspector's endpoints ######################################################################

TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def inspector():
    playground = falai_cli.Playground([falai_cli_example("shop.json")],
                                      falai_cli.read_registry(falai_cli_example("registry.json")),
                                      falai_cli.scripted_provider(None), "2026-12-01T10:00:00Z")
    httpd = falai_cli.http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), falai_cli.inspect_handler(playground, falai_cli.INSPECT_PAGE.encode(), TOKEN))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield playground, httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def falai_cli_example(name: str) -> str:
    import os
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "cli", name)


@fuzz_settings(150)
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS"]),
       path=st.sampled_from(["/", "/api/state", "/api/message", "/api/event", "/api/wake", "/x", "/api/",
                             "//api/message", "/api/message?x=1"]),
       host=st.sampled_from(["good", "localhost", "evil.example", "", None, "127.0.0.1:1"]),
       origin=st.sampled_from([None, "good", "http://evil.example", "null"]),
       token=st.sampled_from([TOKEN, None, "", "x"]),
       kind=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", None,
                             "APPLICATION/JSON"]),
       length=st.sampled_from(["exact", None, "-1", "abc", "99999999", "0"]),
       body=st.sampled_from([b'{"text": "where is my order?"}', b'{"name": "paid"}', b"{}", b"[]", b"\xff",
                             b"[" * 5000 + b"]" * 5000, b'{"text": "' + b"x" * 3000 + b'"}']))
def test_only_the_page_request_runs_a_turn(inspector, method, path, host, origin, token, kind, length, body):
    playground, port = inspector
    before = len(playground.turns)
    headers = {"Host": f"127.0.0.1:{port}" if host == "good" else f"localhost:{port}" if host == "localhost"
               else host,
               "Origin": f"http://127.0.0.1:{port}" if origin == "good" else origin,
               "X-Falai-Token": token, "Content-Type": kind,
               "Content-Length": str(len(body)) if length == "exact" else length}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in headers.items():
        if value is not None:
            connection.putheader(name, value)
    connection.endheaders(body if method == "POST" and length == "exact" else None)
    status = connection.getresponse().status
    connection.close()
    from_page = host in ("good", "localhost") and origin in (None, "good")
    allowed = (from_page and token == TOKEN and method == "POST" and kind is not None
               and kind.lower().startswith("application/json") and length == "exact")
    if len(playground.turns) > before:
        assert allowed and status == 200
    if not allowed:
        assert len(playground.turns) == before
    if not from_page:
        assert status in (403, 501)               # 501: a method the server has no handler for
    assert status < 500 or status == 501
    check = http.client.HTTPConnection("127.0.0.1", port, timeout=10)          # still serving
    check.request("GET", "/api/state", headers={"X-Falai-Token": TOKEN})
    assert check.getresponse().status == 200
    check.close()
