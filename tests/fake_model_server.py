"""A local fake model server for the provider tests (providers.md §9.2-§9.4).

``FakeModelServer()`` listens on 127.0.0.1 (a free port) in a thread, records
every request and replays scripted replies, one per request, in order::

    fake = FakeModelServer()
    fake.sse(gemini_frame(text="Olá"), gemini_frame(finish="STOP"))
    fake.error(503, {"error": {"code": 503, "status": "UNAVAILABLE"}})
    provider = GeminiProvider(api_key="test-key", model="gemini-2.5-flash", base_url=fake.url)
    ...
    fake.requests[0].headers["x-goog-api-key"]
    fake.close()

A request that finds the script dry gets a 500 ``{"error": "no scripted reply"}``.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any


@dataclass
class RecordedRequest:
    method: str
    path: str            # without the query
    query: dict          # the parsed query
    headers: dict        # every header, names lower-cased
    raw: bytes           # the body bytes
    json: Any            # the parsed body (None when empty or not JSON)


class FakeModelServer:
    """Scripted replies: ``sse``, ``error``, ``json``, ``empty`` (providers.md §9.3)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.replies: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                url = urllib.parse.urlsplit(self.path)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                with server._lock:
                    server.requests.append(RecordedRequest(
                        "POST", url.path, dict(urllib.parse.parse_qsl(url.query)),
                        {k.lower(): v for k, v in self.headers.items()}, raw, body))
                    reply = server.replies.pop(0) if server.replies else \
                        {"status": 500, "body": '{"error": "no scripted reply"}'}
                try:
                    if "frames" in reply:
                        self._stream(reply)
                    else:
                        self._whole(reply)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True          # the client gave up (a timeout or cancel test)

            def _whole(self, reply: dict) -> None:
                time.sleep(reply.get("stall", 0))
                body = reply.get("body", "").encode()
                self.send_response(reply["status"])
                for k, v in reply.get("headers", {}).items():
                    self.send_header(k, v)
                if reply.get("type"):
                    self.send_header("Content-Type", reply["type"])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _stream(self, reply: dict) -> None:
                time.sleep(reply.get("stall", 0))
                self.send_response(200)
                self.send_header("Content-Type", reply.get("type", "text/event-stream"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                end = "\r\n" if reply.get("crlf") else "\n"
                frames = reply["frames"]
                for i, frame in enumerate(frames):
                    if i == reply.get("drop_after"):
                        self.close_connection = True      # a truncated chunked body
                        return
                    time.sleep(reply.get("delay", 0))
                    if reply.get("comments"):
                        self._chunk(f": keep-alive{end}{end}".encode())
                    if reply.get("raw"):
                        text = frame
                    else:
                        last = i == len(frames) - 1 and reply.get("no_final_blank")
                        text = f"data: {frame}" + ("" if last else end + end)
                    data = text.encode()
                    split = reply.get("split")
                    pieces = [data[k:k + split] for k in range(0, len(data), split)] if split else [data]
                    for piece in pieces:
                        self._chunk(piece)             # one HTTP chunk = one read on the client
                if reply.get("drop_after") is not None and reply["drop_after"] >= len(frames):
                    self.close_connection = True
                    return
                if reply.get("comments"):
                    self._chunk(f": keep-alive{end}{end}".encode())
                if reply.get("raw_tail"):
                    self._chunk(reply["raw_tail"].encode())
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)
        self._thread.start()

    # -- scripting ------------------------------------------------------------

    def sse(self, *frames: str, **options: Any) -> None:
        """A 200 event stream, one ``data:`` frame per item.

        Options: ``crlf``, ``split=n``, ``no_final_blank``, ``raw_tail="{...}"``,
        ``comments``, ``delay=s`` (before each frame), ``stall=s`` (before the
        first byte), ``drop_after=n`` (close after n frames, chunked body
        unfinished), ``raw`` (frames written verbatim, for ``event:`` lines),
        ``type`` (another Content-Type).
        """
        self.replies.append({"frames": list(frames), **options})

    def error(self, status: int, body: Any, headers: dict | None = None, **options: Any) -> None:
        """A non-2xx answer with a JSON body (a str is sent as is) and headers."""
        text = body if isinstance(body, str) else json.dumps(body)
        self.replies.append({"status": status, "body": text, "headers": headers or {},
                             "type": "application/json", **options})

    def json(self, obj: Any) -> None:
        """A 200 ``application/json`` answer with one whole body (providers.md §3.7 rule 8)."""
        self.replies.append({"status": 200, "body": json.dumps(obj), "type": "application/json"})

    def empty(self) -> None:
        """A 200 with no body bytes."""
        self.replies.append({"status": 200, "body": "", "type": "application/json"})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# Frame builders (providers.md §9.3) ##########################################

def gemini_frame(text=None, call=None, finish=None, usage=None, thought=None, signature=None, calls=None):
    """One ``GenerateContentResponse`` payload; ``calls`` is a list of (name, args) for parallel calls."""
    parts = []
    if thought:
        parts.append({"text": thought, "thought": True})
    if text:
        parts.append({"text": text})
    for i, one in enumerate([call] if call else calls or []):
        part = {"functionCall": {"name": one[0], "args": one[1]}}
        if signature and i == 0:
            part["thoughtSignature"] = signature
        parts.append(part)
    out: dict = {}
    if parts or finish:
        cand: dict = {"content": {"role": "model", "parts": parts}}
        if finish:
            cand["finishReason"] = finish
        out["candidates"] = [cand]
    if usage:
        out["usageMetadata"] = dict(zip(
            ("promptTokenCount", "candidatesTokenCount", "cachedContentTokenCount", "thoughtsTokenCount"), usage))
    return json.dumps(out)


def openai_frame(content=None, tool=None, finish=None, usage=None, **delta_extra):
    delta = dict(delta_extra)
    if content:
        delta["content"] = content
    if tool:
        delta["tool_calls"] = [tool] if isinstance(tool, dict) else list(tool)
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if (delta or finish) else []
    out: dict = {"id": "x", "model": "m", "choices": choices}
    if usage:
        out["usage"] = usage
    return json.dumps(out)


def anthropic_events(text, input_tokens=5, output_tokens=3, cache_read=0, cache_write=0, stop="end_turn"):
    start_usage = {"input_tokens": input_tokens, "cache_read_input_tokens": cache_read, "output_tokens": 1}
    if cache_write:
        start_usage["cache_creation_input_tokens"] = cache_write
    return [json.dumps(e) for e in (
        {"type": "message_start", "message": {"usage": start_usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    )]


def anthropic_tool_events(name, fragments, tool_id="toolu_1", text=None, input_tokens=5, output_tokens=3):
    """A streamed Anthropic reply with (optional) text then one tool_use block whose JSON arrives in fragments."""
    events = [{"type": "message_start", "message": {"usage": {"input_tokens": input_tokens, "output_tokens": 1}}}]
    index = 0
    if text:
        events += [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                   {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
                   {"type": "content_block_stop", "index": 0}]
        index = 1
    events.append({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}})
    events += [{"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": f}} for f in fragments]
    events += [{"type": "content_block_stop", "index": index},
               {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": output_tokens}},
               {"type": "message_stop"}]
    return [json.dumps(e) for e in events]
