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

Strict by default (issue 7 item 10): every request is checked against the rules of
its vendor's live API, picked by path (Gemini ``/v1beta/models/...``, chat
completions ``.../chat/completions``, Anthropic ``/v1/messages``). A request that
breaks one is answered with the vendor's own 400 body instead of the script, and
listed in ``fake.rejections``; ``fake.close()`` fails the test unless the test took
them with ``fake.take_rejections()``. ``fake.chat_dialect`` picks the chat rules:
``"generic"`` (the default: any OpenAI-compatible server), ``"openai"``,
``"openrouter"`` or ``"deepseek"``, or a local server as measured: ``"llama-cpp-python"``,
``"llama.cpp"`` (llama-server with ``--jinja``), ``"llama.cpp-no-jinja"``. ``FakeModelServer(strict=False)`` accepts anything.
"""

from __future__ import annotations

import base64
import fnmatch
import http.server
import json
import re
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

    def __init__(self, strict: bool = True) -> None:
        self.requests: list[RecordedRequest] = []
        self.replies: list[dict] = []
        self.strict = strict
        self.chat_dialect = "generic"
        self.rejections: list[dict] = []     # {"path", "status", "message"} of each request refused
        self.dropped = 0                     # requests left unanswered on a dead connection
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Each frame goes out when written, as a vendor's does: with Nagle's algorithm on, a small
            # write waits for the ACK of the one before (delayed up to 40 ms on the loopback).
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                if getattr(self, "dead", False):
                    # After its empty stream, llama-cpp-python (uvicorn) keeps the connection open
                    # but answers nothing on it: "Disconnected from client ... before llm invoked".
                    with server._lock:
                        server.dropped += 1
                    self.close_connection = True
                    return
                url = urllib.parse.urlsplit(self.path)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                query = dict(urllib.parse.parse_qsl(url.query))
                headers = {k.lower(): v for k, v in self.headers.items()}
                refusal = None
                if server.strict:
                    try:
                        check_request(server, url.path, query, headers, body)
                    except Rejected as rejected:
                        refusal = rejected
                with server._lock:
                    server.requests.append(RecordedRequest("POST", url.path, query, headers, raw, body))
                    if refusal is not None:
                        server.rejections.append({"path": url.path, "status": refusal.status,
                                                  "message": refusal.message})
                        reply = {"frames": []} if isinstance(refusal, EmptyStream) else \
                            {"status": refusal.status, "body": json.dumps(refusal.body()),
                             "type": "application/json"}
                    else:
                        reply = server.replies.pop(0) if server.replies else \
                            {"status": 500, "body": '{"error": "no scripted reply"}'}
                self.dead = isinstance(refusal, EmptyStream)
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

    def take_rejections(self) -> list[str]:
        """The messages of the requests refused so far (and forget them, so close() passes)."""
        with self._lock:
            taken, self.rejections = [r["message"] for r in self.rejections], []
        return taken

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.rejections:
            raise AssertionError("the strict fake refused request(s) the live API would refuse: "
                                 + "; ".join(f'{r["path"]}: {r["message"]}' for r in self.rejections))


# Strict mode: validate each request the way the live API does (issue 7 item 10) ##########
#
# Each rule below cites where the vendor states it (SDK sources: python-genai, openai-python,
# anthropic-sdk-python; vendor docs; public issues quoting the live 400). A request that breaks
# one gets the vendor's own 400 body and is listed in ``fake.rejections``; a test that does not
# take the rejections (``take_rejections()``) fails when the fake closes. Per-model rules are
# this file's own tables, written from the vendors' material and kept apart from the provider's
# capability table on purpose: a test must not check the provider against itself.

class Rejected(Exception):
    """A request the live API would refuse: ``status`` and the vendor's error ``body``."""

    def __init__(self, vendor: str, message: str, status: int = 400):
        super().__init__(message)
        self.vendor, self.message, self.status = vendor, message, status

    def body(self) -> dict:
        if self.vendor == "llama-cpp-python":    # llama_cpp/server/errors.py: any other exception is a 500
            return {"error": {"message": self.message, "type": "internal_server_error", "param": None,
                              "code": None}}
        if self.vendor == "llama.cpp":           # tools/server/server-common.cpp format_error_response
            kind = "invalid_request_error" if self.status == 400 else "server_error"
            return {"error": {"code": self.status, "message": self.message, "type": kind}}
        if self.vendor == "gemini":        # google.rpc.Status, as the Gemini API answers
            return {"error": {"code": self.status, "message": self.message, "status": "INVALID_ARGUMENT"}}
        if self.vendor == "anthropic":     # anthropic-sdk-python _exceptions / docs "Errors"
            return {"type": "error", "error": {"type": "invalid_request_error", "message": self.message},
                    "request_id": "req_fake"}
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": None,
                          "code": None}}


def _glob(model: str, table: dict, default: Any = None) -> Any:
    for pattern, value in table.items():
        if fnmatch.fnmatchcase(model, pattern):
            return value
    return default


def _require(condition: bool, vendor: str, message: str) -> None:
    if not condition:
        raise Rejected(vendor, message)


# Gemini ---------------------------------------------------------------------------------

# python-genai models.py _GenerateContentParameters_to_mldev / types.py GenerateContentConfig.
GEMINI_TOP = {"contents", "systemInstruction", "tools", "toolConfig", "safetySettings", "generationConfig",
              "cachedContent", "serviceTier", "labels"}
GEMINI_GENERATION = {"maxOutputTokens", "temperature", "topP", "topK", "stopSequences", "thinkingConfig",
                     "responseMimeType", "responseJsonSchema", "responseSchema", "candidateCount", "seed",
                     "presencePenalty", "frequencyPenalty", "responseModalities", "mediaResolution",
                     "responseLogprobs", "logprobs", "speechConfig", "imageConfig"}
GEMINI_PART = {"text", "thought", "thoughtSignature", "functionCall", "functionResponse", "inlineData",
               "fileData", "executableCode", "codeExecutionResult", "videoMetadata"}
# thinkingLevel per model (docs.cloud.google.com .../models/thinking; vellum-ai/vellum-assistant#32687;
# jenslys/opencode-gemini-auth#14; can1357/oh-my-pi#10543). 3.6 Flash: the Vertex table's MINIMAL..HIGH.
GEMINI_LEVELS = {"gemini-3.8-flash*": ("LOW", "MEDIUM", "HIGH"), "gemini-3.7-flash*": ("LOW", "MEDIUM", "HIGH"),
                 "gemini-3.6-flash*": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 "gemini-3.5-flash-lite*": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 # docs.cloud.google.com gemini-3-5-flash guide: 3.5 Flash and 3.1 Flash-Lite MINIMAL..HIGH.
                 "gemini-3.5-flash*": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 "gemini-3.1-flash-lite*": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 # The aliases serve the current Flash (3.8), Flash-Lite (3.5) and Pro (3.1).
                 "gemini-flash-latest": ("LOW", "MEDIUM", "HIGH"),
                 "gemini-flash-lite-latest": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 "gemini-pro-latest": ("LOW", "MEDIUM", "HIGH"),
                 "gemini-3-flash*": ("MINIMAL", "LOW", "MEDIUM", "HIGH"),
                 "gemini-3.1-pro*": ("LOW", "MEDIUM", "HIGH"), "gemini-3-pro*": ("LOW", "HIGH")}
# thinkingBudget per model (ai.google.dev/gemini-api/docs/thinking): (lowest, highest, 0 allowed).
GEMINI_BUDGETS = {"gemini-2.5-pro*": (128, 32768, False), "gemini-2.5-flash-lite*": (512, 24576, True),
                  "gemini-2.5-flash*": (0, 24576, True)}
GEMINI_NO_THINKING = ("gemini-2.0*", "gemini-1.*")
GEMINI_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")        # types.py FunctionDeclaration.name


def check_gemini(model: str, headers: dict, query: dict, body: Any) -> None:
    v = "gemini"
    if not headers.get("x-goog-api-key", "").strip():
        raise Rejected(v, "Method doesn't allow unregistered callers (callers without established identity). "
                          "Please use API Key or other form of API consumer identity to call this API.", 403)
    _require(headers["x-goog-api-key"] == headers["x-goog-api-key"].strip(), v, "API key not valid. Please pass "
             "a valid API key.")
    _require("key" not in query, v, "the key must travel in the x-goog-api-key header, never the URL")
    _require(query.get("alt") == "sse", v, "streamGenerateContent without alt=sse answers a JSON array")
    _require(isinstance(body, dict), v, "Invalid JSON payload received.")
    for key in body:
        _require(key in GEMINI_TOP, v, f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.')
    contents = body.get("contents")
    _require(isinstance(contents, list) and contents, v, "* GenerateContentRequest.contents: contents is not "
             "specified")
    previous = None
    for i, content in enumerate(contents):
        _require(isinstance(content, dict) and content.get("role") in ("user", "model"), v,
                 f"Please use a valid role: user, model. (contents[{i}])")
        parts = content.get("parts")
        _require(isinstance(parts, list) and parts, v, f"* GenerateContentRequest.contents[{i}].parts: contents."
                 "parts must not be empty.")
        for j, part in enumerate(parts):
            _require(isinstance(part, dict), v, f"Invalid JSON payload received. contents[{i}].parts[{j}]")
            for key in part:
                _require(key in GEMINI_PART, v, f'Invalid JSON payload received. Unknown name "{key}" at '
                         f"'contents[{i}].parts[{j}]': Cannot find field.")
            _require(any(k in part for k in ("text", "functionCall", "functionResponse", "inlineData",
                                              "fileData")), v,
                     f"* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof field 'data' must "
                     "have one initialized field")
            if "text" in part:
                _require(isinstance(part["text"], str), v, f"contents[{i}].parts[{j}].text must be a string")
        calls = [p for p in parts if "functionCall" in p]
        responses = [p for p in parts if "functionResponse" in p]
        if calls:
            # ai.google.dev function calling: a call turn follows a user turn or a function-response turn.
            _require(previous is not None and previous["role"] == "user", v, "Please ensure that function call "
                     "turn comes immediately after a user turn or after a function response turn.")
            for p in calls:
                _require(isinstance(p["functionCall"].get("args", {}), dict), v, "functionCall.args must be an "
                         "object")
        if responses:
            _require(content["role"] == "user", v, "functionResponse parts must be in a user turn")
            asked = [p for p in (previous or {}).get("parts", []) if "functionCall" in p]
            # google-gemini/gemini-cli#5443
            _require(previous is not None and previous["role"] == "model" and len(asked) == len(responses), v,
                     "Please ensure that the number of function response parts is equal to the number of function "
                     "call parts of the function call turn.")
            for p in responses:
                _require(isinstance(p["functionResponse"].get("response"), dict), v,
                         "functionResponse.response must be an object (types.py FunctionResponse)")
        previous = content
    if model.startswith("gemini-3"):
        _gemini_signatures(contents)
    system = body.get("systemInstruction")
    if system is not None:
        _require(isinstance(system, dict) and isinstance(system.get("parts"), list), v,
                 'Invalid value at \'system_instruction\' (type.googleapis.com/google.ai.generativelanguage.v1beta.'
                 'Content), a Content object {"parts": [{"text": ...}]} is expected')
    tools = body.get("tools") or []
    for tool in tools:
        for declaration in tool.get("functionDeclarations", []):
            _require(GEMINI_TOOL_NAME.fullmatch(str(declaration.get("name", ""))) is not None, v,
                     f"* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name "
                     f"{declaration.get('name')!r}.")
            _require(not ("parameters" in declaration and "parametersJsonSchema" in declaration), v,
                     "parameters and parametersJsonSchema are mutually exclusive")
            if "parameters" in declaration:
                _gemini_openapi(declaration["parameters"])
    config = body.get("generationConfig") or {}
    for key in config:
        _require(key in GEMINI_GENERATION, v, f'Invalid JSON payload received. Unknown name "{key}" at '
                 "'generation_config': Cannot find field.")
    _require(not ("responseSchema" in config and "responseJsonSchema" in config), v,
             "responseSchema and responseJsonSchema cannot both be set")
    if "responseSchema" in config:
        _gemini_openapi(config["responseSchema"])
    if config.get("responseMimeType") == "application/json" and tools and not model.startswith("gemini-3"):
        raise Rejected(v, "Function calling with a response mime type: 'application/json' is unsupported")
    thinking = config.get("thinkingConfig")
    if thinking is not None:
        _gemini_thinking(model, thinking)


def _gemini_signatures(contents: list) -> None:
    """ai.google.dev/gemini-api/docs/thought-signatures: in the current turn, the first functionCall part of
    each model step carries its signature (or Google's documented placeholder)."""
    start = 0
    for i, content in enumerate(contents):
        if content["role"] == "user" and any("text" in p for p in content["parts"]):
            start = i + 1
    for i, content in enumerate(contents[start:], start):
        calls = [p for p in content["parts"] if "functionCall" in p]
        if content["role"] == "model" and calls and not calls[0].get("thoughtSignature"):
            raise Rejected("gemini", f"Function call is missing a thought_signature in functionCall parts. This is "
                           f"required for tools to work correctly, and missing thought_signature may lead to "
                           f"degraded model performance. Additional data, function call `default_api:"
                           f"{calls[0]['functionCall'].get('name')}` , position {i + 1}.")


def _gemini_openapi(schema: Any) -> None:
    """The OpenAPI-subset Schema: `enum` only on STRING (diegosouzapw/OmniRoute#760, directus/directus#26763)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if "enum" in node and node.get("type") != "STRING":
            raise Rejected("gemini", "* GenerateContentRequest.generation_config.response_schema.properties[0]."
                           "value.enum: only allowed for STRING type")
        stack.extend((node.get("properties") or {}).values())
        if "items" in node:
            stack.append(node["items"])


def _gemini_thinking(model: str, thinking: Any) -> None:
    v = "gemini"
    _require(isinstance(thinking, dict), v, "thinkingConfig must be an object")
    for key in thinking:
        _require(key in ("thinkingBudget", "thinkingLevel", "includeThoughts"), v,
                 f'Invalid JSON payload received. Unknown name "{key}" at \'generation_config.thinking_config\': '
                 "Cannot find field.")
    _require(not ("thinkingBudget" in thinking and "thinkingLevel" in thinking), v,
             "You can only set only one of thinking budget and thinking level.")
    if any(fnmatch.fnmatchcase(model, p) for p in GEMINI_NO_THINKING):
        raise Rejected(v, "Thinking is not supported for this model.")
    if "thinkingLevel" in thinking:
        levels = _glob(model, GEMINI_LEVELS)
        _require(levels is not None, v, "Thinking level is not supported for this model.")
        _require(thinking["thinkingLevel"] in levels, v,
                 f"Thinking level {thinking['thinkingLevel']} is not supported for this model.")
    if "thinkingBudget" in thinking:
        budget = _glob(model, GEMINI_BUDGETS)
        _require(budget is not None, v, "Thinking budget is not supported for this model.")
        low, high, off = budget
        value = thinking["thinkingBudget"]
        ok = isinstance(value, int) and (low <= value <= high or (off and value == 0) or value == -1)
        _require(ok, v, f"The thinking budget {value} is invalid. Please choose a value between {low} and {high}.")


# OpenAI chat completions -----------------------------------------------------------------

# openai-python types/chat/completion_create_params.py (CompletionCreateParamsBase).
OPENAI_TOP = {"messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias",
              "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
              "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_retention",
              "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop", "store",
              "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
              "verbosity", "web_search_options"}
CHAT_EXTRA = {"openrouter": {"reasoning", "provider", "transforms", "models", "route", "usage", "plugins"},
              "deepseek": {"thinking"}, "generic": None}
# Message fields per role (chat_completion_*_message_param.py).
OPENAI_MESSAGE = {"system": {"role", "content", "name"}, "developer": {"role", "content", "name"},
                  "user": {"role", "content", "name"},
                  "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"},
                  "tool": {"role", "content", "tool_call_id"}}
# reasoning_effort per model (types/shared/reasoning_effort.py; platform.openai.com reasoning guide);
# None: not a reasoning model, the field is refused (AAswordman/Operit#1048).
OPENAI_EFFORTS = {"gpt-5*-chat*": None, "gpt-6*-chat*": None,
                  # openai/codex#6647 (an OpenAI maintainer), CherryHQ/cherry-studio#10430,
                  # ben-vargas/ai-sdk-provider-codex-cli#8
                  "gpt-5-codex*": ("low", "medium", "high"), "gpt-5.1-codex-max*": ("low", "medium", "high", "xhigh"),
                  "gpt-5.1-codex-mini*": ("medium", "high"), "gpt-5*-codex*": ("low", "medium", "high"),
                  "gpt-5-pro*": ("high",), "gpt-5": ("minimal", "low", "medium", "high"),
                  "gpt-5-*": ("minimal", "low", "medium", "high"), "gpt-5.1*": ("none", "low", "medium", "high"),
                  "gpt-5.*-pro*": ("medium", "high", "xhigh"),
                  "gpt-5.*": ("none", "low", "medium", "high", "xhigh"),
                  # BerriAI/litellm-docs#1173: gpt-6 refuses none and minimal; max only on Responses.
                  "gpt-6*": ("low", "medium", "high", "xhigh"), "o*": ("low", "medium", "high"),
                  "gpt-4*": None, "gpt-3.5*": None}
# openai-python types/shared/responses_model.py: on the Responses API only (continuedev/continue#8326).
OPENAI_RESPONSES_ONLY = ("gpt-5-pro*", "gpt-5.5-pro*", "gpt-5-codex*", "gpt-5.1-codex-max*", "o1-pro*", "o3-pro*")
# 400 "Function tools with reasoning_effort are not supported for gpt-5.4 in /v1/chat/completions"
# (pipecat-ai/pipecat#4043, livekit/agents#5088); gpt-5.6 and gpt-6 refuse their default effort there
# too (laurent22/joplin#16451, apache/flink-agents#1462).
OPENAI_NO_EFFORT_WITH_TOOLS = ("gpt-5.[2-9]*", "gpt-6*")
OPENAI_DEFAULT_EFFORT_WITH_TOOLS_REFUSED = ("gpt-5.6*", "gpt-6*")
# Models that take only the default temperature (chatboxai/chatbox#2564, johny-b/llmcomp#69).
OPENAI_DEFAULT_SAMPLING = ("gpt-5", "gpt-5-*", "gpt-5.*", "gpt-6*", "o1*", "o3*", "o4*")
OPENAI_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")                       # shared/function_definition.py


# Local servers, as the independent test of December 2026 recorded them (docs/guide/providers.md,
# "Local models"): llama-cpp-python[server] 0.3.36 and llama.cpp's llama-server, with and without --jinja.
LOCAL_SERVERS = ("llama-cpp-python", "llama.cpp", "llama.cpp-no-jinja")
LLAMA_CPP_PYTHON_FORMAT_ERROR = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': '%s', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}\n")


class EmptyStream(Rejected):
    """A request the server answers with a 200 event stream that carries nothing: llama-cpp-python raises
    "Automatic streaming tool choice is not supported" inside the SSE response, after its headers. The
    connection stays open, but the next request on it gets no answer (the server closes it)."""

    def __init__(self, vendor: str, message: str):
        super().__init__(vendor, message, 200)


def llama_cpp_python_text_in_tool_round(prompt_tokens: int = 19, completion_tokens: int = 9) -> dict:
    """llama-cpp-python 0.3.36's whole answer to an "auto" tool round the model answers in text, under
    --chat_format chatml-function-calling: after "message:" its grammar allows only a function name
    or <|im_end|>, so the text is always empty (measured on the real server, December 2026)."""
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "smollm2-135m-instruct",
            "choices": [{"index": 0, "message": {"content": "", "role": "assistant"}, "logprobs": None,
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def check_local_server(dialect: str, body: Any) -> None:
    """What the local servers refuse that any OpenAI-compatible server might take."""
    fmt = body.get("response_format") if isinstance(body, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    tools = bool(body.get("tools")) if isinstance(body, dict) else False
    if dialect == "llama-cpp-python":
        if kind is not None and kind not in ("text", "json_object"):
            raise Rejected(dialect, LLAMA_CPP_PYTHON_FORMAT_ERROR % kind, 500)
        if tools and body.get("tool_choice") == "auto" and body.get("stream") is True:
            raise EmptyStream(dialect, "Automatic streaming tool choice is not supported")
        return
    if dialect == "llama.cpp-no-jinja":
        if tools:
            raise Rejected("llama.cpp", "tools param requires --jinja flag", 500)
        if body.get("tool_choice", "auto") != "auto":
            raise Rejected("llama.cpp", "tool_choice param requires --jinja flag", 500)
    if kind not in (None, "", "text", "json_object", "json_schema"):
        raise Rejected("llama.cpp", 'response_format type must be one of "text" or "json_object", but got: '
                       + str(kind), 400)


def check_chat(dialect: str, headers: dict, body: Any) -> None:
    v = "openai"
    _require(isinstance(body, dict), v, "We could not parse the JSON body of your request.")
    if dialect in LOCAL_SERVERS:
        check_local_server(dialect, body)
        dialect = "generic"
    if dialect != "generic":
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth != auth.strip() or not auth[7:].strip():
            raise Rejected(v, "You didn't provide an API key. You need to provide your API key in an "
                              "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", 401)
        allowed = OPENAI_TOP | (CHAT_EXTRA.get(dialect) or set())
        for key in body:
            # davidmigloz/langchain_dart#712, nashsu/llm_wiki#336
            _require(key in allowed, v, f"Unrecognized request argument supplied: {key}")
    model = str(body.get("model") or "")
    messages = body.get("messages")
    _require(isinstance(messages, list) and messages, v, "[] is too short - 'messages'")
    _chat_messages(dialect, messages)
    if "stream_options" in body:
        _require(body.get("stream") is True, v, "The 'stream_options' parameter is only allowed when 'stream' "
                 "is enabled.")
    for tool in body.get("tools") or []:
        _require(tool.get("type") == "function" and isinstance(tool.get("function"), dict), v,
                 "Missing required parameter: 'tools[0].function'.")
        _require(OPENAI_TOOL_NAME.fullmatch(str(tool["function"].get("name", ""))) is not None, v,
                 "Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches "
                 "the pattern '^[a-zA-Z0-9_-]+$'.")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        text = json.dumps(messages, ensure_ascii=False).lower()
        _require("json" in text, v, "'messages' must contain the word 'json' in some form, to use "
                 "'response_format' of type 'json_object'.")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        _require(isinstance(spec.get("name"), str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", spec["name"]), v,
                 "Missing required parameter: 'response_format.json_schema.name'.")
        if spec.get("strict") is True:
            _openai_strict(spec.get("schema"), spec["name"])
    if dialect != "openai":
        return
    if any(fnmatch.fnmatchcase(model, p) for p in OPENAI_RESPONSES_ONLY):
        raise Rejected(v, "This model is only supported in v1/responses and not in v1/chat/completions.", 404)
    efforts = _glob(model, OPENAI_EFFORTS, default=())
    if body.get("tools") and any(fnmatch.fnmatchcase(model, p) for p in OPENAI_NO_EFFORT_WITH_TOOLS):
        effort = body.get("reasoning_effort")
        refused = effort not in (None, "none") or (
            effort is None and any(fnmatch.fnmatchcase(model, p) for p in OPENAI_DEFAULT_EFFORT_WITH_TOOLS_REFUSED))
        _require(not refused, v, f"Function tools with reasoning_effort are not supported for {model} in "
                 "/v1/chat/completions. To use function tools, use /v1/responses or set reasoning_effort to 'none'.")
    # "none" beside tools is how chat completions takes them on these models, whatever the levels.
    tools_none = bool(body.get("tools")) and body.get("reasoning_effort") == "none" \
        and any(fnmatch.fnmatchcase(model, p) for p in OPENAI_NO_EFFORT_WITH_TOOLS)
    if "reasoning_effort" in body and not tools_none:
        if efforts is None:
            raise Rejected(v, "Unrecognized request argument supplied: reasoning_effort")
        if efforts:
            _require(body["reasoning_effort"] in efforts, v,
                     f"Unsupported value: 'reasoning_effort' does not support '{body['reasoning_effort']}' with this "
                     f"model. Supported values are: {', '.join(repr(e) for e in efforts)}.")
    if any(fnmatch.fnmatchcase(model, p) for p in OPENAI_DEFAULT_SAMPLING) and efforts is not None:
        for key in ("temperature", "top_p"):
            if key in body and body[key] != 1:
                raise Rejected(v, f"Unsupported value: '{key}' does not support {body[key]} with this model. Only "
                                  "the default (1) value is supported.")
        _require("max_tokens" not in body, v, "Unsupported parameter: 'max_tokens' is not supported with this "
                 "model. Use 'max_completion_tokens' instead.")


def _chat_messages(dialect: str, messages: list) -> None:
    v = "openai"
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        _require(role in OPENAI_MESSAGE, v, f"Invalid value: '{role}'. Supported values are: 'system', "
                 "'assistant', 'user', 'tool', 'function', and 'developer'.")
        if dialect == "openai":
            for key in message:
                _require(key in OPENAI_MESSAGE[role], v, f"Additional properties are not allowed ('{key}' was "
                         f"unexpected) - 'messages.{i}'")
        if role == "tool":
            # RamiAwar/dataline#172
            _require(message.get("tool_call_id") in open_calls, v, "Invalid parameter: messages with role 'tool' "
                     "must be a response to a preceeding message with 'tool_calls'.")
            open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            raise Rejected(v, "An assistant message with 'tool_calls' must be followed by tool messages responding "
                              "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                              + ", ".join(open_calls))
        if role == "assistant":
            open_calls = [c.get("id") for c in message.get("tool_calls") or []]
        else:
            _require(isinstance(message.get("content"), (str, list)), v, f"Invalid type for 'messages[{i}]."
                     "content': expected one of a string or array of objects, but got null instead.")
    if open_calls:
        raise Rejected(v, "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                          "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                          + ", ".join(open_calls))


def _openai_strict(schema: Any, name: str) -> None:
    """platform.openai.com/docs/guides/structured-outputs, "Supported schemas": every object closed and
    every property required."""
    stack = [(schema, "()")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "object" in kinds or "properties" in node:
            _require(node.get("additionalProperties") is False, "openai",
                     f"Invalid schema for response_format '{name}': In context={where}, 'additionalProperties' is "
                     "required to be supplied and to be false.")
            properties = node.get("properties") or {}
            missing = [k for k in properties if k not in (node.get("required") or [])]
            _require(not missing, "openai", f"Invalid schema for response_format '{name}': In context={where}, "
                     f"'required' is required to be supplied and to be an array including every key in properties. "
                     f"Missing '{missing[0] if missing else ''}'.")
            stack.extend((sub, f"{where}.properties.{k}") for k, sub in properties.items())
        if "items" in node:
            stack.append((node["items"], f"{where}.items"))
        for union in ("anyOf", "oneOf"):
            stack.extend((sub, f"{where}.{union}") for sub in node.get(union) or [])


# OpenAI Responses -------------------------------------------------------------------------

# openai-python types/responses/response_create_params.py (ResponseCreateParamsBase).
RESPONSES_TOP = {"background", "context_management", "conversation", "include", "input", "instructions",
                 "max_output_tokens", "max_tool_calls", "metadata", "model", "moderation", "parallel_tool_calls",
                 "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options",
                 "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
                 "stream", "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs",
                 "top_p", "truncation", "user"}
# Chat-completions names the Responses API moved elsewhere, with the live API's own hint.
RESPONSES_MOVED = {"response_format": "text.format", "reasoning_effort": "reasoning.effort",
                   "max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens",
                   "messages": "input"}
# response_includable.py
RESPONSES_INCLUDABLE = {"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
                        "message.input_image.image_url", "computer_call_output.output.image_url",
                        "code_interpreter_call.outputs", "reasoning.encrypted_content",
                        "message.output_text.logprobs"}
# Input items by type, with the fields each takes (response_input_item_param.py, easy_input_message_param.py,
# response_function_tool_call_param.py, response_reasoning_item_param.py).
RESPONSES_ITEM = {"message": {"type", "role", "content", "phase", "id", "status"},
                  "function_call": {"type", "call_id", "name", "arguments", "id", "status", "namespace", "caller"},
                  "function_call_output": {"type", "call_id", "output", "id", "status", "name", "namespace",
                                           "caller"},
                  "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"}}
RESPONSES_REASONING = {"effort", "summary", "generate_summary", "context", "mode"}          # shared_params/reasoning.py
RESPONSES_FUNCTION_TOOL = {"type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers",
                           "output_schema"}                                                  # function_tool_param.py
RESPONSES_JSON_SCHEMA = {"type", "name", "schema", "description", "strict"}  # response_format_text_json_schema_...


def reasoning_item(model: str, n: int = 1, summary: str = "") -> dict:
    """A reasoning output item as the API returns it with ``include: ["reasoning.encrypted_content"]``. The
    fake seals the issuing model and id into its encrypted content, so it can tell a replay it issued to
    this model from a forged, edited or foreign one."""
    rid = f"rs_{n:04d}"
    sealed = base64.b64encode(json.dumps({"model": model, "id": rid}).encode()).decode()
    return {"type": "reasoning", "id": rid, "summary": [{"type": "summary_text", "text": summary}] if summary else [],
            "encrypted_content": f"gAAAA{sealed}"}


def _sealed_by(item: dict) -> dict | None:
    text = item.get("encrypted_content")
    if not isinstance(text, str) or not text.startswith("gAAAA"):
        return None
    try:
        return json.loads(base64.b64decode(text[5:]))
    except ValueError:
        return None


def check_responses(headers: dict, body: Any) -> None:
    v = "openai"
    auth = headers.get("authorization", "")
    if not auth.startswith("Bearer ") or auth != auth.strip() or not auth[7:].strip():
        raise Rejected(v, "You didn't provide an API key. You need to provide your API key in an Authorization "
                          "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", 401)
    _require(isinstance(body, dict), v, "We could not parse the JSON body of your request.")
    for key in body:
        if key in RESPONSES_MOVED:
            raise Rejected(v, f"Unsupported parameter: '{key}'. In the Responses API, this parameter has moved to "
                              f"'{RESPONSES_MOVED[key]}'. Try again with the new parameter.")
        _require(key in RESPONSES_TOP, v, f"Unknown parameter: '{key}'.")
    model = str(body.get("model") or "")
    _require(bool(model), v, "Missing required parameter: 'model'.")
    efforts = _glob(model, OPENAI_EFFORTS, default=())
    reasoning_model = efforts is not None and efforts != ()
    if "stream_options" in body:
        _require(body.get("stream") is True, v, "The 'stream_options' parameter is only allowed when 'stream' is "
                 "enabled.")
    for key in body.get("include") or []:
        _require(key in RESPONSES_INCLUDABLE, v, f"Invalid value: '{key}'. Supported values are: "
                 + ", ".join(f"'{k}'" for k in sorted(RESPONSES_INCLUDABLE)) + ".")
        if key == "reasoning.encrypted_content":
            _require(reasoning_model, v, "Encrypted content is not supported with this model.")
    tokens = body.get("max_output_tokens")
    if tokens is not None:
        _require(isinstance(tokens, int) and tokens >= 16, v, f"Invalid 'max_output_tokens': integer below minimum "
                 f"value. Expected a value >= 16, but got {tokens} instead.")
    reasoning = body.get("reasoning")
    if reasoning is not None:
        _require(isinstance(reasoning, dict), v, "Invalid type for 'reasoning': expected an object.")
        for key in reasoning:
            _require(key in RESPONSES_REASONING, v, f"Unknown parameter: 'reasoning.{key}'.")
        if "effort" in reasoning:
            _require(efforts is not None, v, "Unsupported parameter: 'reasoning.effort' is not supported with "
                     "this model.")
            allowed = efforts + ("max",) if efforts and model.startswith("gpt-6") else efforts
            if allowed:
                _require(reasoning["effort"] in allowed, v, f"Unsupported value: '{reasoning['effort']}' is not "
                         f"supported with the '{model}' model. Supported values are: "
                         + ", ".join(f"'{e}'" for e in allowed) + ".")
    if any(fnmatch.fnmatchcase(model, p) for p in OPENAI_DEFAULT_SAMPLING) and efforts is not None:
        for key in ("temperature", "top_p"):
            if key in body and body[key] != 1:
                raise Rejected(v, f"Unsupported parameter: '{key}' is not supported with this model.")
    tools = body.get("tools") or []
    _require(isinstance(tools, list), v, "Invalid type for 'tools': expected an array.")
    for i, tool in enumerate(tools):
        _require(isinstance(tool, dict) and tool.get("type") == "function", v, f"Invalid value for 'tools[{i}].type'.")
        # A chat-style {"type": "function", "function": {...}} tool (the Responses tools are flat).
        _require("name" in tool, v, f"Missing required parameter: 'tools[{i}].name'.")
        for key in tool:
            _require(key in RESPONSES_FUNCTION_TOOL, v, f"Unknown parameter: 'tools[{i}].{key}'.")
        _require(OPENAI_TOOL_NAME.fullmatch(str(tool["name"])) is not None, v, f"Invalid 'tools[{i}].name': string "
                 "does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")
        # The API makes a function tool strict unless it says otherwise (function_tool_param.py: strict).
        if tool.get("strict", True) is not False:
            _openai_strict(tool.get("parameters"), tool["name"])
    text = body.get("text")
    fmt = None
    if text is not None:
        _require(isinstance(text, dict), v, "Invalid type for 'text': expected an object.")
        for key in text:
            _require(key in ("format", "verbosity"), v, f"Unknown parameter: 'text.{key}'.")
        fmt = text.get("format")
    if isinstance(fmt, dict):
        _require(fmt.get("type") in ("text", "json_schema", "json_object"), v, "Invalid value: 'text.format.type'.")
        if fmt["type"] == "json_schema":
            for key in fmt:
                _require(key in RESPONSES_JSON_SCHEMA, v, f"Unknown parameter: 'text.format.{key}'.")
            _require(isinstance(fmt.get("name"), str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", fmt["name"]), v,
                     "Missing required parameter: 'text.format.name'.")
            _require(isinstance(fmt.get("schema"), dict), v, "Missing required parameter: 'text.format.schema'.")
            if fmt.get("strict") is True:
                _openai_strict(fmt["schema"], fmt["name"])
    items = body.get("input")
    _require(isinstance(items, (str, list)) and items, v, "Missing required parameter: 'input'.")
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        words = json.dumps([items, body.get("instructions")], ensure_ascii=False).lower()
        _require("json" in words, v, "Response input messages must contain the word 'json' in some form to use "
                 "'text.format' of type 'json_object'.")
    if isinstance(items, list):
        _responses_items(model, items, body.get("store", True))


def _responses_items(model: str, items: list, store: Any) -> None:
    v = "openai"
    calls: list[str] = []
    for i, item in enumerate(items):
        _require(isinstance(item, dict), v, f"Invalid type for 'input[{i}]': expected an object.")
        kind = item.get("type", "message" if "role" in item else None)
        _require(kind in RESPONSES_ITEM, v, f"Invalid value: '{kind}'. Supported values are: 'message', "
                 "'function_call', 'function_call_output', 'reasoning' and others.")
        for key in item:
            _require(key in RESPONSES_ITEM[kind], v, f"Unknown parameter: 'input[{i}].{key}'.")
        if kind == "message":
            _require(item.get("role") in ("user", "assistant", "system", "developer"), v,
                     f"Invalid value: '{item.get('role')}'. Supported values are: 'assistant', 'system', 'developer', "
                     "and 'user'.")
            _require(isinstance(item.get("content"), (str, list)), v, f"Invalid type for 'input[{i}].content'.")
        elif kind == "function_call":
            for key in ("call_id", "name"):
                _require(isinstance(item.get(key), str) and item[key], v,
                         f"Missing required parameter: 'input[{i}].{key}'.")
            _require(isinstance(item.get("arguments"), str), v, f"Invalid type for 'input[{i}].arguments': "
                     "expected a string.")
            calls.append(item["call_id"])
        elif kind == "function_call_output":
            _require(item.get("call_id") in calls, v, f"No tool call found for function call output with call_id "
                     f"{item.get('call_id')}.")
            calls.remove(item["call_id"])
            _require(isinstance(item.get("output"), (str, list)), v, f"Invalid type for 'input[{i}].output'.")
        elif kind == "reasoning":
            rid = item.get("id")
            _require(isinstance(rid, str) and isinstance(item.get("summary"), list), v,
                     f"Missing required parameter: 'input[{i}].summary'.")
            if store is False or "encrypted_content" in item:
                _require("encrypted_content" in item, v, f"Item with id '{rid}' not found. Items are not persisted "
                         "when `store` is set to false. Try again with `store` set to true, or remove this item "
                         "from your input.")
                sealed = _sealed_by(item)
                _require(sealed is not None and sealed.get("id") == rid and sealed.get("model") == model, v,
                         f"The encrypted content for item {rid} could not be verified. Reason: Encrypted content "
                         "organization_id or model did not match the request.")
            following = items[i + 1] if i + 1 < len(items) else None
            follows = isinstance(following, dict) and (following.get("type") in ("function_call", "reasoning")
                                                       or following.get("role") == "assistant")
            _require(follows, v, f"Item '{rid}' of type 'reasoning' was provided without its required following "
                     "item.")
    _require(not calls, v, f"No tool output found for function call {calls[0] if calls else ''}.")


# Anthropic Messages -----------------------------------------------------------------------

# anthropic-sdk-python types/message_create_params.py (MessageCreateParamsBase).
ANTHROPIC_TOP = {"max_tokens", "messages", "model", "cache_control", "container", "context_management",
                 "inference_geo", "mcp_servers", "metadata", "output_config", "service_tier", "stop_sequences",
                 "stream", "system", "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p"}
# thinking per model: "enabled" (budget) or "adaptive" (platform.claude.com extended-thinking; the AWS
# Bedrock adaptive-thinking page; NousResearch/hermes-agent#11137).
ANTHROPIC_THINKING = {"claude-fable-*": {"adaptive"}, "claude-mythos-*": {"adaptive"},
                      "claude-sonnet-5*": {"adaptive"}, "claude-opus-5*": {"adaptive"},
                      "claude-opus-4-8*": {"adaptive"}, "claude-opus-4-7*": {"adaptive"},
                      "claude-opus-4-6*": {"enabled", "adaptive"}, "claude-sonnet-4-6*": {"enabled", "adaptive"},
                      "claude-3-5*": set(), "claude-3-haiku*": set(), "claude-*": {"enabled"}}
# 400 "`temperature` is deprecated for this model." (Comfy-Org/ComfyUI#13923, dust-tt/dust#28308).
ANTHROPIC_NO_SAMPLING = ("claude-sonnet-5*", "claude-opus-5*", "claude-opus-4-8*", "claude-opus-4-7*",
                         "claude-fable-*", "claude-mythos-*")
# Always thinking: `{"type": "disabled"}` is a 400 (PrimeIntellect-ai/prime-agent#302).
ANTHROPIC_ALWAYS_THINKS = ("claude-fable-*", "claude-mythos-*")
# 400 "`temperature` and `top_p` cannot both be specified for this model." (BerriAI/litellm#15097).
ANTHROPIC_ONE_SAMPLING = ("claude-sonnet-4-6*", "claude-opus-4-6*", "claude-sonnet-4-5*", "claude-haiku-4-5*",
                          "claude-opus-4-5*", "claude-opus-4-1*")
# Structured outputs (output_config.format): Claude 4.5 and later (platform.claude.com structured-outputs).
ANTHROPIC_FORMAT = ("claude-sonnet-5*", "claude-opus-5*", "claude-opus-4-[5-8]*", "claude-sonnet-4-[56]*",
                    "claude-haiku-4-5*")
ANTHROPIC_NO_PREFILL = ("claude-sonnet-5*", "claude-opus-5*", "claude-opus-4-[678]*", "claude-sonnet-4-6*")
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")                 # output_config_param.py
ANTHROPIC_BLOCKS = {"user": {"text", "image", "document", "tool_result", "search_result"},
                    "assistant": {"text", "tool_use", "thinking", "redacted_thinking", "server_tool_use"}}


def check_anthropic(headers: dict, body: Any) -> None:
    v = "anthropic"
    if not headers.get("x-api-key", "").strip() or headers["x-api-key"] != headers["x-api-key"].strip():
        raise Rejected(v, "invalid x-api-key", 401)
    _require(headers.get("anthropic-version") == "2023-06-01", v, "anthropic-version: header is required")
    _require(isinstance(body, dict), v, "There was an issue with your request body")
    for key in body:
        _require(key in ANTHROPIC_TOP, v, f"{key}: Extra inputs are not permitted")   # caozhiyuan/copilot-api#145
    model = str(body.get("model") or "")
    max_tokens = body.get("max_tokens")
    _require(isinstance(max_tokens, int) and max_tokens >= 1, v, "max_tokens: Field required")
    messages = body.get("messages")
    _require(isinstance(messages, list) and messages, v, "messages: at least one message is required")
    thinking = body.get("thinking")
    thinking_on = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, dict) else None
        _require(kind in ("enabled", "adaptive", "disabled"), v, "thinking.type: Input tag does not match any "
                 "of the expected tags: 'enabled', 'disabled', 'adaptive'")
        if kind == "disabled":
            _require(not any(fnmatch.fnmatchcase(model, p) for p in ANTHROPIC_ALWAYS_THINKS), v,
                     f"thinking.type.disabled is not supported for the model '{model}'.")
        if kind in ("enabled", "adaptive"):
            accepted = _glob(model, ANTHROPIC_THINKING, default={"enabled"})
            if kind == "enabled" and "enabled" not in accepted:
                raise Rejected(v, '"thinking.type.enabled" is not supported for this model. Use '
                                  '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.')
            _require(kind in accepted, v, f"thinking.type.{kind} is not supported for this model")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            # types/thinking_config_enabled_param.py: "Must be ≥1024 and less than max_tokens"
            _require(isinstance(budget, int) and budget >= 1024, v, "thinking.enabled.budget_tokens: Input should "
                     "be greater than or equal to 1024")
            _require(budget < max_tokens, v, "`max_tokens` must be greater than `thinking.budget_tokens`. Please "
                     "consult our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                     "extended-thinking#max-tokens-and-context-window-size")
    if thinking_on:
        for key in ("temperature", "top_p", "top_k"):
            _require(key not in body, v, f"`{key}` may only be set to 1 when thinking is enabled or in "
                     "adaptive mode. Please consult our documentation at https://docs.claude.com/en/docs/"
                     "build-with-claude/extended-thinking#feature-compatibility")
    if any(fnmatch.fnmatchcase(model, p) for p in ANTHROPIC_NO_SAMPLING):
        for key in ("temperature", "top_p", "top_k"):
            _require(key not in body, v, f"`{key}` is deprecated for this model.")
    if any(fnmatch.fnmatchcase(model, p) for p in ANTHROPIC_ONE_SAMPLING):
        _require(not ("temperature" in body and "top_p" in body), v, "`temperature` and `top_p` cannot both be "
                 "specified for this model. Please use only one.")
    output = body.get("output_config")
    if output is not None:
        _require(isinstance(output, dict) and set(output) <= {"effort", "format"}, v,
                 "output_config: Extra inputs are not permitted")
        if "effort" in output:
            _require(output["effort"] in ANTHROPIC_EFFORTS, v, "output_config.effort: Input should be 'low', "
                     "'medium', 'high', 'xhigh' or 'max'")
        if "format" in output:
            fmt = output["format"]
            _require(any(fnmatch.fnmatchcase(model, p) for p in ANTHROPIC_FORMAT), v,
                     f"output_config.format: structured outputs are not supported for the model '{model}'.")
            _require(isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"),
                                                                                            dict), v,
                     "output_config.format.type: Input tag does not match the expected tag 'json_schema'")
            _anthropic_schema(fmt["schema"])
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        for block in system:
            _require(block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"], v,
                     "system: text content blocks must be non-empty")
    for tool in body.get("tools") or []:
        _require(re.fullmatch(r"[a-zA-Z0-9_-]{1,128}", str(tool.get("name", ""))) is not None, v,
                 "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'")
        schema = tool.get("input_schema")
        _require(isinstance(schema, dict) and schema.get("type") == "object", v,
                 "tools.0.custom.input_schema.type: Field required")
    _anthropic_messages(model, messages, thinking_on)


def _anthropic_schema(schema: Any) -> None:
    """Structured outputs: every object closed (platform.claude.com structured-outputs "JSON Schema limitations")."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "object" in kinds or "properties" in node:
            _require(node.get("additionalProperties") is False, "anthropic", "output_config.format.schema: For "
                     "'object' type, 'additionalProperties' must be explicitly set to false")
            # Arbitrary JSON objects are not supported (ax-llm/ax#459).
            _require(bool(node.get("properties")), "anthropic", "output_config.format.schema: an 'object' "
                     "must define its properties")
        for key in ("minimum", "maximum", "minLength", "maxLength", "maxItems", "uniqueItems"):
            _require(key not in node, "anthropic", f"output_config.format.schema: '{key}' is not supported")
        # The SDK's transform_schema (lib/_parse/_transform.py) never writes a type list, keeps minItems 0/1
        # only and its own list of string formats; a nullable property is anyOf with a null branch.
        _require(not isinstance(node.get("type"), list), "anthropic", "output_config.format.schema: 'type' must "
                 "be a single type; use anyOf for a union")
        _require(node.get("minItems", 0) in (0, 1), "anthropic", "output_config.format.schema: 'minItems' values "
                 "other than 0 or 1 are not supported")
        _require(node.get("format") in (None, "date-time", "time", "date", "duration", "email", "hostname", "uri",
                                        "ipv4", "ipv6", "uuid"), "anthropic",
                 f"output_config.format.schema: format '{node.get('format')}' is not supported")
        stack.extend((node.get("properties") or {}).values())
        for key in ("items",):
            if key in node:
                stack.append(node[key])
        for union in ("anyOf", "oneOf", "allOf"):
            stack.extend(node.get(union) or [])


def _anthropic_messages(model: str, messages: list, thinking_on: bool) -> None:
    v = "anthropic"
    last_tool_round = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        _require(role in ("user", "assistant"), v, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        blocks = message.get("content")
        if isinstance(blocks, str):
            _require(bool(blocks), v, f"messages.{i}: text content blocks must be non-empty")
            blocks = [{"type": "text", "text": blocks}]
        _require(isinstance(blocks, list) and blocks, v, f"messages.{i}: all messages must have non-empty content "
                 "except for the optional final assistant message")
        for j, block in enumerate(blocks):
            _require(block.get("type") in ANTHROPIC_BLOCKS[role], v, f"messages.{i}.content.{j}.type: Input tag "
                     f"'{block.get('type')}' is not allowed in a {role} message")
            if block["type"] == "text":
                _require(isinstance(block.get("text"), str) and block["text"], v,
                         f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
            if block["type"] == "thinking":
                _require(isinstance(block.get("signature"), str) and block["signature"], v,
                         f"messages.{i}.content.{j}.thinking.signature: Field required")
                # A signature the fake seals to its model (anthropic_signature): another model rejects the
                # block (maintainer, anthropics/anthropic-sdk-python#1598; anthropics/claude-code#10627).
                signer = block["signature"].split(":")[1] if block["signature"].startswith("SIG:") else model
                _require(signer == model, v, f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if results:
            previous = messages[i - 1] if i else {}
            asked = [b.get("id") for b in previous.get("content") or [] if isinstance(b, dict)
                     and b.get("type") == "tool_use"]
            stray = [r for r in results if r not in asked]
            # anthropics/claude-code#18947
            _require(not stray, v, f"messages.{i}.content.0: unexpected `tool_use_id` found in `tool_result` "
                     f"blocks: {stray[0] if stray else ''}. Each `tool_result` block must have a corresponding "
                     "`tool_use` block in the previous message.")
            first_other = next((k for k, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks))
            # anthropics/anthropic-sdk-typescript#653
            _require(all(b.get("type") != "tool_result" for b in blocks[first_other:]), v,
                     f"messages.{i}: tool_result blocks must come first in the user message")
            last_tool_round = i - 1
        if uses:
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered = [b.get("tool_use_id") for b in (following or {}).get("content") or [] if isinstance(b, dict)
                        and b.get("type") == "tool_result"]
            missing = [u for u in uses if u not in answered]
            # anthropics/claude-code#8210
            _require(not missing, v, f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                     f"immediately after: {missing[0] if missing else ''}. Each `tool_use` block must have a "
                     "corresponding `tool_result` block in the next message.")
    if thinking_on and last_tool_round is not None and _is_open_tool_round(messages, last_tool_round):
        first = messages[last_tool_round]["content"][0]
        # pydantic/pydantic-ai#2040, deepset-ai/haystack-core-integrations#2146
        _require(first.get("type") in ("thinking", "redacted_thinking"), v,
                 f"messages.{last_tool_round}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                 f"`{first.get('type')}`. When `thinking` is enabled, a final `assistant` message must start with a "
                 "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend "
                 "you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
                 "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                 "extended-thinking")
    if any(fnmatch.fnmatchcase(model, p) for p in ANTHROPIC_NO_PREFILL):
        # platform.claude.com migration guide: prefilling the assistant turn is a 400 on Claude 4.6 and later.
        _require(messages[-1].get("role") == "user", v, "This model does not support assistant message prefill. "
                 "The conversation must end with a user message.")


def _is_open_tool_round(messages: list, assistant_index: int) -> bool:
    """The tool round at ``assistant_index`` is the last assistant message (the one the model continues)."""
    return all(m.get("role") != "assistant" for m in messages[assistant_index + 1:])


def check_request(server: "FakeModelServer", path: str, query: dict, headers: dict, body: Any) -> None:
    """Route a request to its vendor's rules by path (raises ``Rejected``)."""
    match = re.fullmatch(r"/v1beta/models/([^/:]+):streamGenerateContent", path)
    if match:
        check_gemini(urllib.parse.unquote(match.group(1)), headers, query, body)
    elif path.endswith("/chat/completions"):
        check_chat(server.chat_dialect, headers, body)
    elif path.endswith("/responses"):
        check_responses(headers, body)
    elif path.endswith("/v1/messages"):
        check_anthropic(headers, body)


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


# Fixtures in the vendors' own shapes (issue 7 item 10) ######################################

def anthropic_refusal_events(model="claude-opus-4-7"):
    """The SDK's recorded refusal (anthropic-sdk-python tests/lib/streaming/fixtures/refusal_response.txt):
    an empty text block, then stop_reason "refusal" with stop_details; as raw SSE with event: lines."""
    events = [
        {"type": "message_start", "message": {"id": "msg_01RefusalTestMessage123456789", "type": "message",
                                              "role": "assistant", "content": [], "model": model,
                                              "stop_reason": None, "stop_sequence": None,
                                              "usage": {"input_tokens": 20, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None,
                                            "stop_details": {"type": "refusal", "category": "cyber",
                                                             "explanation": "This request was refused due to "
                                                                            "policy."}},
         "usage": {"output_tokens": 120, "output_tokens_details": {"thinking_tokens": 67}}},
        {"type": "message_stop"},
    ]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def anthropic_thinking_tool_events(thinking, signature, name, arguments, tool_id="toolu_01"):
    """A streamed reply with a signed thinking block (thinking_delta, then signature_delta, as the SDK's
    streaming types describe them) and one tool_use block."""
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 30, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": thinking}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def openai_refusal_frames(text="I'm sorry, I can't help with that."):
    """A streamed chat-completions refusal: delta.refusal fragments, content null (openai-python
    chat_completion_chunk.py ChoiceDelta.refusal; the SDK's recorded refusal stream)."""
    frames = [{"id": "chatcmpl-r", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "refusal": ""},
                            "finish_reason": None}]}]
    for piece in (text[:len(text) // 2], text[len(text) // 2:]):
        frames.append({"id": "chatcmpl-r", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06",
                       "choices": [{"index": 0, "delta": {"refusal": piece}, "finish_reason": None}]})
    frames.append({"id": "chatcmpl-r", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return [json.dumps(f) for f in frames] + ["[DONE]"]


def gemini_bare_lines(text, error_message="Resource has been exhausted (e.g. check quota).", error_code=429):
    """python-genai's bare-line framing (tests/client/test_async_stream.py): a bare candidate JSON line,
    then a bare in-band error line, each ended by a single \\n, no data: prefix."""
    candidate = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}}]}
    error = {"error": {"code": error_code, "message": error_message, "status": "RESOURCE_EXHAUSTED"}}
    return json.dumps(candidate) + "\n" + json.dumps(error) + "\n"


def responses_events(model="gpt-5.4", text=None, calls=(), reasoning=(), usage=None, refusal=None,
                     status="completed", reason=None, error=None):
    """A streamed Responses reply, event by event as response_stream_event.py types them: created, then
    each output item (reasoning items, a message with text deltas or a refusal, function calls with
    argument deltas) between output_item.added and output_item.done, then response.completed (or
    .incomplete with ``reason``, or .failed with ``error``) carrying the whole response and its usage.
    ``calls`` is a list of (call_id, name, arguments dict); ``reasoning`` of reasoning_item() dicts;
    ``usage`` is (input, output, cached, reasoning)."""
    seq = iter(range(1_000))
    events: list[dict] = []
    output: list[dict] = []

    def emit(kind, **fields):
        events.append({"type": kind, "sequence_number": next(seq), **fields})

    base = {"id": "resp_1", "object": "response", "created_at": 1, "model": model, "output": [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": "in_progress"}
    emit("response.created", response=dict(base))
    for item in reasoning:
        index = len(output)
        emit("response.output_item.added", output_index=index, item={**item, "encrypted_content": None})
        for part in item.get("summary") or []:
            emit("response.reasoning_summary_text.delta", item_id=item["id"], output_index=index, summary_index=0,
                 delta=part["text"])
        emit("response.output_item.done", output_index=index, item=item)
        output.append(item)
    if text is not None or refusal is not None:
        index = len(output)
        kind, value = ("refusal", refusal) if refusal is not None else ("output_text", text)
        done_part = {"type": kind, kind if kind == "refusal" else "text": value}
        if kind == "output_text":
            done_part["annotations"] = []
        message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [done_part]}
        emit("response.output_item.added", output_index=index, item={**message, "content": [],
                                                                     "status": "in_progress"})
        half = len(value) // 2
        for piece in (value[:half], value[half:]):
            if piece:
                emit("response.refusal.delta" if kind == "refusal" else "response.output_text.delta",
                     item_id="msg_1", output_index=index, content_index=0, delta=piece, logprobs=[])
        emit("response.output_item.done", output_index=index, item=message)
        output.append(message)
    for call_id, name, arguments in calls:
        index = len(output)
        raw = json.dumps(arguments)
        item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
                "arguments": raw, "status": "completed"}
        emit("response.output_item.added", output_index=index, item={**item, "arguments": "",
                                                                     "status": "in_progress"})
        half = len(raw) // 2
        for piece in (raw[:half], raw[half:]):
            emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
        emit("response.function_call_arguments.done", item_id=item["id"], output_index=index, name=name,
             arguments=raw)
        emit("response.output_item.done", output_index=index, item=item)
        output.append(item)
    final = {**base, "output": output, "status": status}
    if usage is not None:
        final["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": usage[0] + usage[1],
                          "input_tokens_details": {"cached_tokens": usage[2], "cache_write_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": usage[3]}}
    if error is not None:
        final.update(status="failed", error=error)
        emit("response.failed", response=final)
    elif status == "incomplete":
        final["incomplete_details"] = {"reason": reason}
        emit("response.incomplete", response=final)
    else:
        emit("response.completed", response=final)
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def anthropic_signature(model: str, n: int = 1) -> str:
    """A thinking-block signature the fake checks on replay: valid for ``model`` only."""
    return f"SIG:{model}:{n}"
