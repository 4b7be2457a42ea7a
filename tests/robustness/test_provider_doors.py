"""What a provider's HTTP call lets through (providers.md §3.7): no redirect is followed, one
request has a total deadline, a reply body has a size cap, and a streamed reply and its tool
arguments are read in time linear in their length. Over real HTTP on 127.0.0.1."""
import json
import socket
import threading
import time

import pytest

import falai
from falai import GenerateRequest, ProviderError
from falai_providers import AnthropicProvider, GeminiProvider, OpenAICompatibleProvider, parse_tool_args
from fake_model_server import FakeModelServer, gemini_frame, openai_frame

KEY = "sk-door-test-0123456789"


def _make(vendor: str, url: str, **retry) -> object:
    retry_config = {"timeout": 3000, "retries": 0, **retry}
    common = dict(api_key=KEY, base_url=url, sleep=lambda s: None, retry_config=retry_config)
    if vendor == "gemini":
        return GeminiProvider(model="gemini-3.8-flash", **common)
    if vendor == "anthropic":
        return AnthropicProvider(model="claude-haiku-4-5", **common)
    return OpenAICompatibleProvider(model="gpt-4.1-mini", **common)


def _request() -> GenerateRequest:
    return GenerateRequest(system=None, prompt="PROMPT", history=[])


@pytest.fixture
def other():
    server = FakeModelServer()
    yield server
    server.close()


# Redirects ##################################################################

@pytest.mark.parametrize("vendor", ["gemini", "anthropic", "openai"])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_error_naming_its_location_and_the_key_never_travels(fake, other, vendor, status):
    """A 3xx is a ProviderError naming the Location; the host it names receives nothing."""
    target = f"{other.url}/stolen"
    fake.error(status, "", headers={"Location": target})
    provider = _make(vendor, fake.url)
    with pytest.raises(ProviderError) as caught:
        provider.generate(_request())
    assert caught.value.kind == "invalid" and caught.value.status == status
    assert target in str(caught.value) and "base_url" in str(caught.value)
    assert other.requests == []                       # not one byte went to the other port
    assert len(fake.requests) == 1                    # and the redirect was not retried either


def test_a_redirect_location_carrying_the_key_is_scrubbed(fake):
    fake.error(307, "", headers={"Location": f"http://127.0.0.1:9/?key={KEY}"})
    with pytest.raises(ProviderError) as caught:
        _make("gemini", fake.url).generate(_request())
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


# The total deadline #########################################################

class _TrickleServer:
    """Answers every connection with headers, then one body byte every ``every`` seconds, forever
    (until closed): a server that would hold a call as long as it likes."""

    def __init__(self, chunked: bool, every: float = 0.05):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.chunked, self.every = chunked, every
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            framing = b"Transfer-Encoding: chunked\r\n" if self.chunked else b"Content-Length: 100000000\r\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + framing + b"\r\n")
            ends = time.monotonic() + 20        # a bound of its own, so a broken deadline fails, not hangs
            while not self.stop.is_set() and time.monotonic() < ends:
                conn.sendall(b"1\r\n:\r\n" if self.chunked else b":")
                time.sleep(self.every)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("chunked, every", [(True, 0.05), (False, 0.05), (True, 30)])
def test_a_trickling_reply_ends_at_the_deadline(chunked, every):
    """Bytes keep coming, so the idle timeout never fires; the deadline ends the call, also while a
    read is blocked waiting for the next byte."""
    server = _TrickleServer(chunked, every)
    try:
        provider = _make("openai", server.url, deadline=600, timeout=5000)
        with pytest.raises(ProviderError) as caught:
            provider.generate(_request())
    finally:
        server.close()
    # Cut by the deadline: not by the 5 s idle timeout ("without a byte"), nor by the server's end.
    assert caught.value.kind == "timeout"
    assert "deadline of 0.6s" in str(caught.value) and 'retry_config["deadline"]' in str(caught.value)


def test_a_reply_within_the_deadline_is_read_whole(fake):
    fake.sse(openai_frame(content="Olá"), openai_frame(finish="stop"), "[DONE]")
    out = _make("openai", fake.url, deadline=30_000).generate(_request())
    assert out.message == "Olá"


def test_the_deadline_and_size_cap_are_checked_at_construction():
    for bad in ({"deadline": -1}, {"deadline": float("inf")}, {"deadline": True}, {"max_bytes": 1.5},
                {"max_bytes": -3}):
        with pytest.raises(ValueError, match="retry_config"):
            _make("gemini", "http://127.0.0.1:9", **bad)


# The size cap ###############################################################

def test_an_oversize_streamed_reply_is_refused(fake):
    fake.sse(*[gemini_frame(text="x" * 500) for _ in range(20)], gemini_frame(finish="STOP"))
    with pytest.raises(ProviderError) as caught:
        _make("gemini", fake.url, max_bytes=4000).generate(_request())
    assert caught.value.kind == "overload"
    assert "larger than 4000 bytes" in str(caught.value) and "max_bytes" in str(caught.value)


def test_an_oversize_whole_reply_is_refused(fake):
    fake.json({"choices": [{"message": {"content": "y" * 10_000}, "finish_reason": "stop"}]})
    with pytest.raises(ProviderError, match="larger than 2000 bytes"):
        _make("openai", fake.url, max_bytes=2000).generate(_request())


def test_an_oversize_error_body_still_reports_the_status(fake):
    fake.error(400, {"error": {"message": "bad " * 5000}})
    with pytest.raises(ProviderError) as caught:
        _make("openai", fake.url, max_bytes=1000).generate(_request())
    assert caught.value.status == 400


def test_a_reply_under_the_cap_is_read(fake):
    fake.sse(*[gemini_frame(text="x" * 500) for _ in range(4)], gemini_frame(finish="STOP"))
    assert _make("gemini", fake.url, max_bytes=100_000).generate(_request()).message == "x" * 2000


# Linear readers #############################################################

def test_streamed_chunks_keep_every_accumulated_text(fake):
    """Each chunk's accumulated text is all deltas so far, read at any time (providers.md §1.6 rule 2)."""
    parts = [f"p{i} " for i in range(50)]
    fake.sse(*[openai_frame(content=p) for p in parts], openai_frame(finish="stop"), "[DONE]")
    chunks = list(_make("openai", fake.url).generate_stream(_request()))
    deltas = [c for c in chunks if not c.done]
    assert [c.delta for c in deltas] == parts
    assert [c.accumulated for c in deltas] == ["".join(parts[:i + 1]) for i in range(len(parts))]
    assert chunks[-1].accumulated == "".join(parts)


def test_a_streamed_turn_reads_the_same_reply(fake):
    """The engine reads deltas, so a long stream of small chunks comes out whole."""
    text = "".join(f"palavra{i} " for i in range(400)).strip()
    envelope = json.dumps({"message": text})
    fake.sse(*[openai_frame(content=envelope[i:i + 7]) for i in range(0, len(envelope), 7)],
             openai_frame(finish="stop"), "[DONE]")
    agent = falai.falai().fields({}).agent(name="A", provider=_make("openai", fake.url),
                                           idle={"prompt": "Atenda."})
    chunks = list(agent.turn_stream(session_id="s", message="oi", id="m1", at="2026-09-20T10:00:00.000Z"))
    assert "".join(c.delta for c in chunks if c.delta) == text
    assert chunks[-1].result.messages[0].text == text


@pytest.mark.parametrize("n", [5_000, 20_000])
def test_tool_arguments_of_a_long_run_of_backslashes_parse(n):
    """A run of backslashes is read in one pass: an odd run's last one is a cut escape."""
    assert parse_tool_args("\\" * n) == {}
    assert parse_tool_args('{"a": "x' + "\\" * n) == {"a": "x" + "\\" * (n // 2)}
    assert parse_tool_args('{"a": "x' + "\\" * (n + 1)) == {"a": "x" + "\\" * (n // 2)}
    assert parse_tool_args('{"a": "x' + "\\" * (n + 1) + "u00") == {"a": "x" + "\\" * (n // 2)}
