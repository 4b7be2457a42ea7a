"""falai_providers: the model providers over HTTP, with ``requests`` and no vendor SDK.

Four providers implement the seam of ``falai.py`` (providers.md §1):
``GeminiProvider`` (the first and best-tested), ``OpenAICompatibleProvider``
(OpenAI, OpenRouter, DeepSeek, Ollama, vLLM, llama.cpp, gateways),
``AnthropicProvider`` and ``FallbackProvider`` (an ordered pool of the others).

    from falai_providers import GeminiProvider
    gemini = GeminiProvider(api_key=os.environ["GEMINI_API_KEY"], model="gemini-3.8-flash")

Sections, in the order a call flows through them:
   1. Helpers ................ schema_prompt, is_strict_schema, parse_tool_args,
                               to_gemini_openapi_schema, the lenient envelope parse
   2. The capability table ... what each model accepts: thinking, sampling, JSON modes
   3. Messages ............... the normalized message list (providers.md §2.3)
   4. Reading ................ SSE framing (data: and bare lines), read timeouts, depth (§3.7)
   5. HTTP errors ............ the waits and reset times a failed response names (§8.1)
   6. The pipeline ........... one call: retries, backup models, deadlines, cancellation,
                               folding, assembly, a response as a ProviderError (§3, §8)
   7. GeminiProvider ......... §4
   8. OpenAICompatibleProvider §5
   9. AnthropicProvider ...... §6
  10. FallbackProvider ....... §7

The spec lives in ``docs/spec``; comments cite it as "providers.md §3.8".

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import email.utils
import fnmatch
import hashlib
import json
import logging
import math
import random
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Literal

import requests

from falai_base import (
    __version__,
    ENVELOPE_SHAPED, decode_json_string, lenient_loads, nests_past, unfenced,
    GenerateRequest, Generation, GenerationChunk, ProviderCapabilities, ProviderError, TokenUsage,
    ToolCallRequest, classify_error, compact_json, parse_iso, reused, to_ms,
)

__all__ = [
    "GeminiProvider", "OpenAICompatibleProvider", "AnthropicProvider", "FallbackProvider",
    "NoAvailableProviderError", "schema_prompt", "is_strict_schema", "parse_tool_args",
    "to_gemini_openapi_schema", "ModelCaps", "MODEL_TABLE", "model_caps", "GEMINI_DEFAULT_MODEL",
    "GEMINI_BACKUP_MODEL", "ServerProfile", "SERVER_PROFILES", "STRUCTURED_FORMS",
    "DEFAULT_OUTPUT_CAPS",
]

log = logging.getLogger("falai")

USER_AGENT = f"falai-python/{__version__} requests/{requests.__version__}"
EFFORTS = ("none", "low", "medium", "high", "max")
BACKUP_KINDS = ("overload", "rate", "model")  # providers.md §3.8: kinds that walk to a backup model
MAX_SERVER_WAIT_MS = 30_000                      # a longer server wait ends the in-provider retries
DEFAULT_DEADLINE_MS = 600_000                       # one request, connect to last byte (§3.7)
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024          # a reply body past this is refused (§3.7)
GEMINI_DEFAULT_MODEL = "gemini-3.8-flash"      # the current Flash (Sep 2026); the examples' default
GEMINI_BACKUP_MODEL = "gemini-3.5-flash-lite"       # the current Flash-Lite; the examples' backup


# 1. Helpers ##################################################################

def schema_prompt(schema: dict) -> str:
    """The text that carries a schema in the prompt when it cannot be enforced (providers.md
    §4.5).
    """
    return (
        "Reply with one JSON object that matches the JSON Schema below, and nothing else: "
        "no text around it and no code fence.\n"
        "Inside a string value, write a line break as \\n; a raw "
        "line break there is invalid JSON.\n"
        + json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    )


def is_strict_schema(schema: Any) -> bool:
    """Whether OpenAI's strict structured-output mode accepts ``schema`` as written (providers.md
    §5.4).

    >>> is_strict_schema({"type": "object", "properties": {"a": {"type": "string"}},
    ...                   "required": ["a"], "additionalProperties": False})
    True
    """
    return not _mentions_key(schema, _NOT_STRICT_KEYS) and _strict(schema)


_NOT_STRICT_KEYS = frozenset({"$ref", "allOf"})


def _mentions_key(value: Any, keys: frozenset[str]) -> bool:
    """Whether a dict anywhere in ``value`` has one of ``keys``: a walk with a stack,
    as every speak request of an OpenAI-compatible provider walks its schema."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not keys.isdisjoint(item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _strict(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    for union in ("anyOf", "oneOf"):
        if union in schema and not all(_strict(branch) for branch in schema[union] or []):
            return False
    if "items" in schema and not _strict(schema["items"]):
        return False
    kinds = schema["type"] if isinstance(schema.get("type"), list) else [schema.get("type")]
    if "object" not in kinds and "properties" not in schema:
        return True
    # Every object closed, even one without properties: strict mode refuses a bare {"type":
    # "object"} (platform.openai.com/docs/guides/structured-outputs, "additionalProperties: false
    # must always be set").
    if schema.get("additionalProperties") is not False:
        return False
    required = set(schema.get("required") or [])
    return all(name in required and _strict(sub)
               for name, sub in (schema.get("properties") or {}).items())


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def parse_tool_args(raw: Any, tool_name: str | None = None) -> dict:
    """Turn a model's tool-call argument string into a dict; never raises (providers.md §3.4).

    Blank → ``{}``; JSON → the dict (any other JSON value → ``{}``); concatenated
    objects → the last suffix that parses; truncated text → its complete string
    fields. Literal ``\\uXXXX`` sequences left in strings are decoded.

    >>> parse_tool_args('{}{"q":"x"}')
    {'q': 'x'}
    >>> parse_tool_args('{"cidade": "Curitiba", "noites": 2, "obs": "vista pa')
    {'cidade': 'Curitiba', 'obs': 'vista pa'}
    """
    if isinstance(raw, dict):
        return _decode_unicode_escapes(raw)
    if raw is None:
        return {}
    text = raw if isinstance(raw, str) else str(raw)
    if not text.strip():
        return {}
    if nests_past(text):
        return _too_deep_arguments(tool_name)
    try:
        value = json.loads(text, strict=False)
    except ValueError:
        pass
    except RecursionError:
        return _too_deep_arguments(tool_name)
    else:
        if _too_deep(value):
            return _too_deep_arguments(tool_name)
        return _decode_unicode_escapes(value) if isinstance(value, dict) else {}
    result = _last_object_suffix(text)
    if result is None:
        result = _salvage_string_fields(text)
    result = _decode_unicode_escapes(result)
    log.warning('[falai_providers] tool "%s": arguments are not valid JSON; kept %d field(s)',
                tool_name or "?", len(result))
    return result


def _too_deep_arguments(tool_name: str | None) -> dict:
    """Arguments nested past MAX_JSON_DEPTH are a broken call: read as ``{}``."""
    log.warning('[falai_providers] tool "%s": arguments nest deeper than %d levels; read as {}',
                tool_name or "?", MAX_JSON_DEPTH)
    return {}


_MAX_SUFFIX_TRIES = 256   # each try reads to the end: more would be quadratic in a long broken text


def _last_object_suffix(text: str) -> dict | None:
    """Rule 3 of §3.4: every ``{`` from the last one backwards; the first suffix that parses to a
    dict.

    At most ``_MAX_SUFFIX_TRIES`` suffixes are tried (inferred bound), and one too
    deep to read ends the search.
    """
    position = len(text)
    for _ in range(_MAX_SUFFIX_TRIES):
        position = text.rfind("{", 0, position)
        if position < 0:
            return None
        if nests_past(text[position:]):
            return None
        try:
            value = json.loads(text[position:], strict=False)
        except RecursionError:
            return None
        except ValueError:
            continue
        if isinstance(value, dict):
            return None if _too_deep(value) else value
    return None


def _salvage_string_fields(text: str) -> dict:
    """Rule 4 of §3.4: keep the top-level ``"key": "value"`` pairs of a truncated object.

    A pair counts when its value string closed and is followed by ``,`` or ``}``,
    or when the text ends right after it (the value is whole; inferred). A value
    cut inside its string is kept up to the cut. Other values are skipped.
    """
    text = _without_dangling_escape(text)
    result: dict = {}
    i = text.find("{")
    if i < 0:
        return result
    i += 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] != '"':
            break
        key, i, closed = _read_json_string(text, i)
        if not closed:
            break
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n or text[i] != ":":
            break
        i += 1
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        if text[i] == '"':
            value, i, closed = _read_json_string(text, i)
            if not closed:
                result[key] = value
                break
            j = i
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j >= n or text[j] in ",}":
                result[key] = value
            if j < n and text[j] == "}":
                break
            i = j
        else:
            i = _skip_json_value(text, i)
    return result


def _without_dangling_escape(text: str) -> str:
    """``text`` less a final escape cut short: an odd run of backslashes at the end, or before a
    ``u`` and up to three hex digits at the end. Read from the end, so a long run of
    backslashes costs time linear in it (a regular expression searched from every start
    would be quadratic)."""
    end = len(text)
    hex_start = end
    while hex_start > 0 and end - hex_start < 3 and text[hex_start - 1] in _HEX_DIGITS:
        hex_start -= 1
    if hex_start > 0 and text[hex_start - 1] == "u":
        run_end = hex_start - 1                     # a \u escape missing some of its digits
    else:
        run_end = end
        if hex_start < end and run_end > 0 and text[run_end - 1] != "\\":
            return text
    run_start = run_end
    while run_start > 0 and text[run_start - 1] == "\\":
        run_start -= 1
    if (run_end - run_start) % 2 == 1:
        return text[:run_end - 1]
    return text


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _read_json_string(text: str, i: int) -> tuple[str, int, bool]:
    """Read the JSON string starting at ``text[i] == '"'``: (value, index after it, closed)."""
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return decode_json_string(text[i + 1:j]), j + 1, True
        j += 1
    return decode_json_string(text[i + 1:]), n, False


def _skip_json_value(text: str, i: int) -> int:
    """Skip a non-string value (number, literal, nested object or array) up to the next top-level ,
    or }.
    """
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            _, i, closed = _read_json_string(text, i)
            if not closed:
                return n
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return n


def _decode_unicode_escapes(value: Any) -> Any:
    """Rule 5 of §3.4: a literal ``\\uXXXX`` (a double escape some models emit) becomes the
    character.
    """
    if isinstance(value, str):
        return (_UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), value) if "\\u" in value
                else value)
    if isinstance(value, dict):
        return {_decode_unicode_escapes(k): _decode_unicode_escapes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_unicode_escapes(v) for v in value]
    return value


_OPENAPI_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER",
                  "boolean": "BOOLEAN", "array": "ARRAY", "object": "OBJECT"}
_OPENAPI_KEPT = ("description", "format", "minItems", "maxItems", "minimum", "maximum")


def to_gemini_openapi_schema(schema: Any) -> dict:
    """Convert a JSON Schema to Gemini's OpenAPI 3.0 subset (providers.md §4.5,
    the ``openapi`` dialect).

    >>> to_gemini_openapi_schema({"type": ["string", "null"], "enum": ["a", None]})
    {'type': 'STRING', 'nullable': True, 'enum': ['a']}
    """
    if not isinstance(schema, dict):
        return {"type": "STRING"}
    for union in ("anyOf", "oneOf"):
        branches = schema.get(union)
        if isinstance(branches, list) and branches:
            members = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            if not members:
                out: dict = {"type": "STRING", "nullable": True}
            else:
                out = to_gemini_openapi_schema(members[0])
                if len(members) == 1 and len(branches) == 2:
                    out["nullable"] = True
            if "description" in schema and "description" not in out:
                out["description"] = schema["description"]
            return out
    name = schema.get("type")
    nullable = schema.get("nullable") is True
    if isinstance(name, list):
        nullable = nullable or "null" in name
        members = [t for t in name if t != "null"]
        name = members[0] if members else "string"
    if name is None:
        # No type: infer it from the keywords present (inferred; Gemini requires a type).
        name = "object" if "properties" in schema else "array" if "items" in schema else "string"
    kind = _OPENAPI_TYPES.get(name) if isinstance(name, str) else None
    if kind is None:
        log.warning("[falai_providers] schema type %r has no OpenAPI equivalent; sent as STRING",
                    name)
        kind = "STRING"
    out = {"type": kind}
    if nullable:
        out["nullable"] = True
    for key in _OPENAPI_KEPT:
        if key in schema:
            out[key] = schema[key]
    if isinstance(schema.get("enum"), list):
        values = [v for v in schema["enum"] if v is not None]
        if kind == "STRING":
            out["enum"] = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                           for v in values]
        elif values:
            # Gemini takes `enum` on STRING only: 400 "enum: only allowed for STRING type"
            # (diegosouzapw/OmniRoute#760). The values still reach the model, as text.
            allowed = "Allowed values: " + ", ".join(json.dumps(v, ensure_ascii=False)
                                                     for v in values) + "."
            out["description"] = (f'{out["description"]} {allowed}' if out.get("description")
                                  else allowed)
    if kind == "OBJECT":
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            out["properties"] = {k: to_gemini_openapi_schema(v) for k, v in properties.items()}
            if schema.get("required"):
                out["required"] = list(schema["required"])
        else:
            out["type"] = "STRING"
    elif kind == "ARRAY" and "items" in schema:
        out["items"] = to_gemini_openapi_schema(schema["items"])
    return out


def _parse_envelope(text: str) -> Any:
    """Lenient parse of a structured reply (providers.md §3.6); ``None`` when it does not parse.

    A reply nested past MAX_JSON_DEPTH does not parse either.
    """
    try:
        value = lenient_loads(unfenced(text))
    except (ValueError, RecursionError):
        return None
    return None if _too_deep(value) else value


# 2. The capability table #####################################################
#
# What each model accepts, so a provider never sends a value the model is
# documented to refuse. One row per model-id pattern (fnmatch globs,
# matched against the id in lower case; the first row that matches wins), each
# citing its source. A model no row matches gets UNKNOWN_MODEL: nothing
# optional is sent. A provider's ``model_caps`` option overrides rows, e.g.
# ``model_caps={"my-tuned-*": {"sampling": "any"}}``.

@dataclasses.dataclass(frozen=True)
class ModelCaps:
    """What one model accepts (a row of the capability table).

    ``thinking``: how thinking is controlled, or ``None`` to send nothing:
    ``"budget"`` (Gemini 2.x ``thinkingBudget`` in ``budget``'s range),
    ``"level"`` (Gemini 3.x ``thinkingLevel``, one of ``levels``),
    ``"enabled"`` (Anthropic ``{"type": "enabled", "budget_tokens"}``),
    ``"adaptive"`` (Anthropic ``{"type": "adaptive"}`` plus ``output_config.effort``
    in ``levels``) or ``"reasoning"`` (OpenAI ``reasoning_effort`` in ``levels``).
    ``levels`` are lowest first. ``can_disable``: thinking can be turned off
    (budget 0, ``{"type": "disabled"}``, effort ``"none"``). ``thinks_by_default``:
    the model thinks when nothing is sent. ``sampling``: ``"any"``
    (``temperature`` and ``topP``), ``"one"`` (either, never both) or ``"none"``.
    ``json_with_tools``: Gemini takes JSON mode on a call with tools.
    ``native_schema``: Anthropic's ``output_config.format`` JSON schema output.
    ``endpoint`` (OpenAI): ``"chat"`` (chat completions takes the model),
    ``"tools"`` (chat completions refuses reasoning beside function tools, so a
    call with tools goes to the Responses API, or gets ``reasoning_effort:
    "none"`` on chat completions) or ``"responses"`` (a Responses-only model).
    """

    thinking: str | None = None
    levels: tuple[str, ...] = ()
    budget: tuple[int, int] | None = None
    can_disable: bool = False
    thinks_by_default: bool = False
    sampling: str = "none"
    json_with_tools: bool = False
    native_schema: bool = False
    endpoint: str = "chat"


ENDPOINTS = ("chat", "tools", "responses")
UNKNOWN_MODEL = ModelCaps()             # the conservative choice: nothing optional is sent
PASS_THROUGH = ModelCaps(thinking="reasoning", levels=("none", "low", "medium", "high"),
                         can_disable=True, sampling="any")
"""An OpenAI-compatible server that is not a vendor preset (Ollama, vLLM, a gateway),
or OpenRouter, which drops what a model does not support: what is configured is sent."""

_GEMINI_3_LEVELS = ("MINIMAL", "LOW", "MEDIUM", "HIGH")
_LOW_UP = ("LOW", "MEDIUM", "HIGH")
_GEMINI_3: dict[str, Any] = dict(thinking="level", thinks_by_default=True, sampling="any",
                                 json_with_tools=True)
_GEMINI_2: dict[str, Any] = dict(thinking="budget", sampling="any")
_ALWAYS: dict[str, Any] = dict(thinking="adaptive", thinks_by_default=True)    # Fable, Mythos
_REASONS: dict[str, Any] = dict(thinking="reasoning", thinks_by_default=True)  # OpenAI, thinking
_CODEX = ("low", "medium", "high")
_XHIGH = ("low", "medium", "high", "xhigh")

MODEL_TABLE: dict[str, tuple[tuple[str, ModelCaps], ...]] = {
    "gemini": (
        # ai.google.dev/gemini-api/docs/thinking (the budget table): 2.5 Pro 128-32768 and
        # cannot turn thinking off; Flash 0-24576; Flash-Lite 512-24576 or 0. 2.x refuses JSON
        # mode with tools: 400 "Function calling with a response mime type: 'application/json'
        # is unsupported" (symfony/ai#803).
        ("gemini-2.5-pro*", ModelCaps(**_GEMINI_2, budget=(128, 32768), thinks_by_default=True)),
        ("gemini-2.5-flash-lite*", ModelCaps(**_GEMINI_2, budget=(512, 24576), can_disable=True)),
        ("gemini-2.5-flash*", ModelCaps(**_GEMINI_2, budget=(0, 24576), can_disable=True,
                                        thinks_by_default=True)),
        ("gemini-2.0*", ModelCaps(sampling="any")),            # no thinking controls
        ("gemini-1.*", ModelCaps(sampling="any")),
        # Gemini 3.x take thinkingLevel, per model (docs.cloud.google.com/.../models/thinking,
        # the thinking-level table): 3.5 Flash-Lite MINIMAL..HIGH; 3.7 Flash LOW..HIGH,
        # "minimal: Not supported (error)" (can1357/oh-my-pi#10543 quoting ai.google.dev);
        # 3.8 Flash's row starts at LOW. Sources disagree on 3.6 Flash, so it gets the
        # levels every source accepts.
        ("gemini-3.5-flash-lite*", ModelCaps(**_GEMINI_3, levels=_GEMINI_3_LEVELS)),
        # docs.cloud.google.com gemini-3-5-flash guide: 3.5 Flash MINIMAL..HIGH (default MEDIUM;
        # now forwarded to 3.6 Flash, ai.google.dev whats-new-gemini-3.5, so it gets 3.6's levels);
        # 3.1 Flash-Lite MINIMAL..HIGH (default MINIMAL).
        ("gemini-3.5-flash*", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
        ("gemini-3.1-flash-lite*", ModelCaps(**_GEMINI_3, levels=_GEMINI_3_LEVELS)),
        ("gemini-3.6-flash*", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
        ("gemini-3.7-flash*", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
        ("gemini-3.8-flash*", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
        # ai.google.dev/gemini-api/docs/thinking: Gemini 3 Flash takes MINIMAL..HIGH.
        ("gemini-3-flash*", ModelCaps(**_GEMINI_3, levels=_GEMINI_3_LEVELS)),
        # 400 "Thinking level MINIMAL is not supported for this model." on 3.1 Pro
        # (vellum-ai/vellum-assistant#32687); MEDIUM is a 400 on 3 Pro
        # (jenslys/opencode-gemini-auth#14).
        ("gemini-3.1-pro*", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
        ("gemini-3-pro*", ModelCaps(**_GEMINI_3, levels=("LOW", "HIGH"))),
        # gemini-flash-latest, gemini-flash-lite-latest, gemini-pro-latest (python-genai
        # _gaos/types/interactions/model.py) move with each release: the levels every current
        # Flash, Flash-Lite and Pro accept.
        ("gemini-*-latest", ModelCaps(**_GEMINI_3, levels=_LOW_UP)),
    ),
    "anthropic": (
        # Claude Fable 5 and the Mythos models (anthropic-sdk-python types/model.py) think always:
        # adaptive only, `{"type": "disabled"}` and `budget_tokens` are a 400, no sampling
        # parameters, effort low..max with xhigh (code-yeongyu/oh-my-openagent#5098,
        # PrimeIntellect-ai/prime-agent#302, anomalyco/opencode#31546). Structured outputs are not
        # in their launch feature list (simstudioai/sim#4921): the schema rides in the prompt.
        ("claude-fable-*", ModelCaps(**_ALWAYS, levels=(*_XHIGH, "max"))),
        ("claude-mythos-*", ModelCaps(**_ALWAYS, levels=(*_XHIGH, "max"))),
        # Claude 4.7+ refuse thinking.type "enabled": adaptive thinking with output_config.effort
        # (platform.claude.com extended-thinking; anthropic-sdk-python
        # thinking_config_adaptive_param.py, output_config_param.py). `temperature` is a 400
        # "`temperature` is deprecated for this model." on Opus 4.7/4.8 and Sonnet 5
        # (Comfy-Org/ComfyUI#13923, dust-tt/dust#28308). Sonnet 5 and Opus 5 think when `thinking`
        # is omitted and accept {"type": "disabled"} (promptfoo/promptfoo#10631). Structured
        # outputs: output_config.format (json_output_format_param.py; platform.claude.com
        # structured-outputs, Claude 4.5 and later).
        ("claude-sonnet-5*", ModelCaps(thinking="adaptive", levels=("low", "medium", "high", "max"),
                                       can_disable=True, thinks_by_default=True,
                                       native_schema=True)),
        ("claude-opus-5*", ModelCaps(thinking="adaptive", levels=("low", "medium", "high", "max"),
                                     can_disable=True, thinks_by_default=True, native_schema=True)),
        ("claude-opus-4-8*", ModelCaps(thinking="adaptive", levels=("low", "medium", "high", "max"),
                                       can_disable=True, native_schema=True)),
        ("claude-opus-4-7*", ModelCaps(thinking="adaptive", levels=("low", "medium", "high", "max"),
                                       can_disable=True, native_schema=True)),
        # 400 "`temperature` and `top_p` cannot both be specified for this model" on Sonnet 4.5/4.6,
        # Haiku 4.5, Opus 4.1/4.5/4.6 (BerriAI/litellm#15097, skydiscover-ai/skydiscover#15).
        # budget_tokens "Must be ≥1024 and less than max_tokens" (thinking_config_enabled_param.py).
        ("claude-opus-4-6*",
         ModelCaps(thinking="enabled", can_disable=True, sampling="one", native_schema=True)),
        ("claude-sonnet-4-6*",
         ModelCaps(thinking="enabled", can_disable=True, sampling="one", native_schema=True)),
        ("claude-opus-4-5*",
         ModelCaps(thinking="enabled", can_disable=True, sampling="one", native_schema=True)),
        ("claude-sonnet-4-5*",
         ModelCaps(thinking="enabled", can_disable=True, sampling="one", native_schema=True)),
        ("claude-haiku-4-5*",
         ModelCaps(thinking="enabled", can_disable=True, sampling="one", native_schema=True)),
        ("claude-opus-4-1*", ModelCaps(thinking="enabled", can_disable=True, sampling="one")),
        # Claude 4.0 and 3.7 Sonnet: extended thinking with a budget, any sampling.
        ("claude-opus-4-0*", ModelCaps(thinking="enabled", can_disable=True, sampling="any")),
        ("claude-sonnet-4-0*", ModelCaps(thinking="enabled", can_disable=True, sampling="any")),
        ("claude-opus-4-2025*", ModelCaps(thinking="enabled", can_disable=True, sampling="any")),
        ("claude-sonnet-4-2025*", ModelCaps(thinking="enabled", can_disable=True, sampling="any")),
        ("claude-3-7-sonnet*", ModelCaps(thinking="enabled", can_disable=True, sampling="any")),
        ("claude-3-*", ModelCaps(sampling="any")),                 # no thinking
    ),
    "openai": (
        # openai-python types/shared/reasoning_effort.py: "not all models support every value".
        # A non-reasoning model answers 400 "Unrecognized request argument supplied:
        # reasoning_effort" (AAswordman/Operit#1048). gpt-5.x and the o-series take only the
        # default temperature: 400 "Only the default (1) value is supported"
        # (chatboxai/chatbox#2564). Endpoints: openai-python types/shared/responses_model.py lists
        # the Responses-only ids (gpt-5-pro, gpt-5.5-pro, gpt-5-codex, gpt-5.1-codex-max, o1-pro,
        # o3-pro): 404 "This model is only supported in v1/responses and not in
        # v1/chat/completions." (continuedev/continue#8326). gpt-5.2 and later refuse reasoning
        # beside function tools on chat completions: 400 "Function tools with reasoning_effort are
        # not supported for gpt-5.4 in /v1/chat/completions. Please use /v1/responses instead."
        # (pipecat-ai/pipecat#4043, openai/openai-openapi#541, livekit/agents#5088); gpt-5.6
        # and gpt-6 refuse their own default effort there (laurent22/joplin#16451,
        # apache/flink-agents#1462: "Chat Completions supports function calling only with
        # reasoning_effort set to none").
        ("gpt-5*-chat*", ModelCaps(sampling="any")),               # the chat variants do not reason
        ("gpt-6*-chat*", ModelCaps(sampling="any")),               # Yanyutin753/LambChat#550
        ("gpt-5-pro*", ModelCaps(**_REASONS, levels=("high",), endpoint="responses")),
        # gpt-5.2-pro: medium, high, xhigh (eyaltoledano/claude-task-master#1508).
        ("gpt-5.5-pro*", ModelCaps(**_REASONS, levels=_XHIGH[1:], endpoint="responses")),
        ("gpt-5*-pro*", ModelCaps(**_REASONS, levels=_XHIGH[1:], endpoint="tools")),
        # Codex: 400 "'none' is not supported with the 'gpt-5.1-codex' model. Supported values are:
        # 'low', 'medium', and 'high'." (openai/codex#6647, an OpenAI maintainer); 'minimal' is the
        # same 400 on gpt-5-codex (CherryHQ/cherry-studio#10430); codex-max adds xhigh and
        # codex-mini takes medium and high (ben-vargas/ai-sdk-provider-codex-cli#8).
        ("gpt-5-codex*", ModelCaps(**_REASONS, levels=_CODEX, endpoint="responses")),
        ("gpt-5.1-codex-max*", ModelCaps(**_REASONS, levels=_XHIGH, endpoint="responses")),
        ("gpt-5.1-codex-mini*", ModelCaps(**_REASONS, levels=("medium", "high"))),
        ("gpt-5.1-codex*", ModelCaps(**_REASONS, levels=_CODEX)),
        ("gpt-5*-codex*", ModelCaps(**_REASONS, levels=_CODEX, endpoint="tools")),
        ("gpt-5", ModelCaps(thinking="reasoning", levels=("minimal", "low", "medium", "high"),
                            thinks_by_default=True)),
        ("gpt-5-*", ModelCaps(thinking="reasoning", levels=("minimal", "low", "medium", "high"),
                              thinks_by_default=True)),
        ("gpt-5.1*", ModelCaps(thinking="reasoning", levels=("none", "low", "medium", "high"),
                               can_disable=True)),
        # gpt-5.6 sol/terra/luna: none..xhigh (bolna-ai/bolna#852), thinking by default.
        ("gpt-5.6*", ModelCaps(**_REASONS, levels=("none", *_XHIGH), can_disable=True,
                               endpoint="tools")),
        ("gpt-5.*",
         ModelCaps(thinking="reasoning", levels=("none", "low", "medium", "high", "xhigh"),
                   can_disable=True, endpoint="tools")),
        # gpt-6: low..xhigh, `none` and `minimal` refused (BerriAI/litellm-docs#1173,
        # langchain-ai/langchain#40330); a tool round goes to the Responses API.
        ("gpt-6*", ModelCaps(**_REASONS, levels=_XHIGH, endpoint="tools")),
        ("o1-pro*", ModelCaps(**_REASONS, levels=_CODEX, endpoint="responses")),
        ("o3-pro*", ModelCaps(**_REASONS, levels=_CODEX, endpoint="responses")),
        ("o1*",
         ModelCaps(thinking="reasoning", levels=("low", "medium", "high"), thinks_by_default=True)),
        ("o3*",
         ModelCaps(thinking="reasoning", levels=("low", "medium", "high"), thinks_by_default=True)),
        ("o4*",
         ModelCaps(thinking="reasoning", levels=("low", "medium", "high"), thinks_by_default=True)),
        ("gpt-4*", ModelCaps(sampling="any")),
        ("gpt-3.5*", ModelCaps(sampling="any")),
        ("chatgpt-*", ModelCaps(sampling="any")),
        # api-docs.deepseek.com: sampling accepted (ignored by the reasoner); thinking goes through
        # the deepseek effort dialect, not this table.
        ("deepseek-*", ModelCaps(sampling="any")),
    ),
}

_CAPS_FIELDS = {f.name for f in dataclasses.fields(ModelCaps)}


def model_caps(vendor: str, model: str, overrides: dict | None = None,
               unknown: ModelCaps = UNKNOWN_MODEL) -> ModelCaps:
    """The capability row of ``model`` for ``vendor`` ("gemini", "anthropic", "openai").

    ``overrides`` (a provider's ``model_caps``) maps patterns to field values laid
    over the row the id would otherwise get. A ``vendor/`` prefix (OpenRouter
    ids) is looked up in that vendor's table.

    >>> model_caps("gemini", "gemini-3.8-flash").levels
    ('LOW', 'MEDIUM', 'HIGH')
    >>> model_caps("anthropic", "claude-test") == UNKNOWN_MODEL
    True
    """
    model_id = model.strip().lower()
    table = vendor
    if "/" in model_id:
        prefix, model_id = model_id.split("/", 1)
        table = {"google": "gemini", "anthropic": "anthropic",
                 "openai": "openai"}.get(prefix, vendor)
    row = unknown
    for pattern, caps in MODEL_TABLE.get(table, ()):
        if fnmatch.fnmatchcase(model_id, pattern):
            row = caps
            break
    for pattern, fields in (overrides or {}).items():
        if fnmatch.fnmatchcase(model_id, pattern.lower()) \
                or fnmatch.fnmatchcase(model.strip(), pattern):
            row = dataclasses.replace(row, **fields)
    return row


def _check_model_caps(owner: str, overrides: Any) -> dict:
    """Validate a ``model_caps`` option at construction: ``{pattern: {field: value}}``."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise ValueError(f'[{owner}] model_caps must be a dict of model-id patterns to capability '
                         'fields, e.g. model_caps={"my-model-*": {"sampling": "any"}}.')
    checked = {}
    for pattern, fields in overrides.items():
        if not isinstance(pattern, str) or not pattern.strip() or not isinstance(fields, dict):
            raise ValueError(f'[{owner}] model_caps[{pattern!r}] must map a model-id pattern to a '
                             'dict of fields, e.g. {"sampling": "any"}.')
        unknown = sorted(set(fields) - _CAPS_FIELDS)
        if unknown:
            raise ValueError(f'[{owner}] model_caps[{pattern!r}] has unknown field(s) '
                             f'{", ".join(unknown)}: use {", ".join(sorted(_CAPS_FIELDS))}.')
        if "sampling" in fields and fields["sampling"] not in ("any", "one", "none"):
            raise ValueError(f'[{owner}] model_caps[{pattern!r}]["sampling"] is '
                             f'{fields["sampling"]!r}: use "any", "one" or "none".')
        if "thinking" in fields and fields["thinking"] not in (None, "budget", "level", "enabled",
                                                               "adaptive", "reasoning"):
            raise ValueError(f'[{owner}] model_caps[{pattern!r}]["thinking"] is '
                             f'{fields["thinking"]!r}: use None, "budget", "level", "enabled", '
                             '"adaptive" or "reasoning".')
        if "endpoint" in fields and fields["endpoint"] not in ENDPOINTS:
            raise ValueError(f'[{owner}] model_caps[{pattern!r}]["endpoint"] is '
                             f'{fields["endpoint"]!r}: use "chat", "tools" or "responses".')
        fields = dict(fields)
        if "levels" in fields:
            fields["levels"] = tuple(fields["levels"])
        if "budget" in fields and fields["budget"] is not None:
            fields["budget"] = tuple(fields["budget"])
        checked[pattern.strip()] = fields
    return checked


def _level_for(caps: ModelCaps, effort: str, names: dict[str, str]) -> str | None:
    """The accepted level for ``effort``: its own when accepted, else the next higher one,
    else the highest.

    ``"none"`` asks for as little as the model allows: its lowest level. ``"max"``
    is the highest. ``names`` maps the spec efforts to the vendor's spelling.
    """
    if not caps.levels:
        return None
    if effort == "none":
        return caps.levels[0]
    if effort == "max":
        return caps.levels[-1]
    order = [names[e] for e in ("low", "medium", "high")]
    wanted = names[effort]
    if wanted in caps.levels:
        return wanted
    for name in order[order.index(wanted) + 1:]:
        if name in caps.levels:
            return name
    return caps.levels[-1]


# 3. Messages #################################################################
#
# Every provider first turns the request into one list of normalized messages
# (providers.md §2.3), then maps that list to its own wire (§2.4).

def _normalize_messages(request: GenerateRequest,
                        fragments: _Fragments | None = None
                        ) -> tuple[list[dict], list[_Fragment], str]:
    """The normalized messages of §2.3, with the kept lead they open the history with and its JSON
    text.

    With ``fragments``, a plain text history item (``{"role": "user" | "assistant",
    "content": text}``, text not blank) is its fragment instead: the vendor's wire
    form of it; without, the lead is ``[]`` and its text ``""``."""
    messages: list[dict] = []
    if isinstance(request.system, str) and request.system.strip():
        messages.append({"role": "system", "content": request.system})
    start = len(messages)                  # where the history's messages begin
    kept = fragments.by_role if fragments is not None else None
    history = request.history or []
    known: list = []
    lead: list = []
    lead_text = ""
    if fragments is not None and type(history) is list:
        known, lead, lead_text = fragments.lead(history)
        messages.extend(lead)
    for item in history[len(known):] if known else history:
        if type(item) is dict and len(item) == 2:
            if kept is not None:
                try:
                    # a plain text item sent before
                    fragment = kept[item["role"]].get(item["content"])
                except (KeyError, TypeError):                         # no such key, or no role kept
                    fragment = None
                if fragment is not None:
                    messages.append(fragment)
                    continue
            # The common plain text item, taken the way the branches below take it.
            role, text = item.get("role"), item.get("content")
            if (role == "user" or role == "assistant") and type(text) is str:
                if fragments is not None and text:
                    messages.append(fragments.add(role, text))
                elif role == "user":
                    messages.append({"role": "user", "content": text})
                else:
                    messages.append({"role": "assistant", "content": text, "toolCalls": []})
                continue
        role = item.get("role") if isinstance(item, dict) else None
        if role == "system":
            text = _as_text(item.get("content"))
            if text.strip():
                messages.append({"role": "system", "content": text})
        elif role == "user":
            messages.append({"role": "user", "content": _as_text(item.get("content"))})
        elif role == "assistant":
            message: dict[str, Any] = {"role": "assistant",
                                       "content": _as_text(item.get("content")), "toolCalls": []}
            for i, call in enumerate(item.get("tool_calls") or []):
                arguments = call.get("arguments")
                normalized = {"id": str(call.get("id") or f"call_{i}"),
                              "name": call.get("name") or "",
                              "arguments": arguments if isinstance(arguments, str)
                              else compact_json(arguments if arguments is not None else {})}
                if call.get("thoughtSignature"):
                    normalized["thoughtSignature"] = call["thoughtSignature"]
                message["toolCalls"].append(normalized)
            if item.get("reasoning"):
                message["reasoning"] = item["reasoning"]
            if item.get("reasoningDetails") is not None:
                message["reasoningDetails"] = item["reasoningDetails"]
            messages.append(message)
        elif role == "tool":
            messages.append({"role": "tool", "toolCallId": str(item.get("tool_call_id") or ""),
                             "name": item.get("name") or "",
                             "content": _as_text(item.get("content"))})
        # Any other role is skipped (providers.md §2.1, inferred).
    messages.append({"role": "user", "content": request.prompt or ""})
    if fragments is not None and type(history) is list and history:
        _keep_lead(fragments, history, messages[start:], known, lead, lead_text)
    return messages, lead, lead_text


def _keep_lead(fragments: _Fragments, history: list, messages: list[dict], known: list[dict],
               lead: list[_Fragment], lead_text: str) -> None:
    """Keep the history's opening run of plain text items as its conversation's lead,
    with the JSON text of its fragments: the kept lead's text and the new ones'. Each of them became
    exactly one fragment, so up to the first other item, item i is ``messages[i]``."""
    plain = len(known)
    while plain < len(history):
        item = history[plain]
        if not (type(item) is dict and len(item) == 2 and item.get("role") in ("user", "assistant")
                and type(item.get("content")) is str and item["content"]
                and type(messages[plain]) is _Fragment):
            break
        plain += 1
    if plain > len(known):
        new = messages[len(known):plain]        # each a _Fragment (checked above)
        text = ",".join([_item_text(fragment) for fragment in new])
        fragments.keep_lead(history[0]["content"],
                            known + [{"role": item["role"], "content": item["content"]}
                                  for item in history[len(known):plain]],
                            lead + new, f"{lead_text},{text}" if lead_text else text)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else compact_json(value)


def _tool_definitions(tools: list[dict] | None) -> list[dict]:
    """providers.md §3.1: the wire name is ``name`` or ``id``; nameless tools are dropped."""
    definitions = []
    for tool in tools or []:
        name = tool.get("name") or tool.get("id")
        if name:
            definitions.append({"name": name, "description": tool.get("description") or "",
                                "parameters": tool.get("parameters") or {"type": "object"}})
    return definitions


# 4. Reading ##################################################################

class _SseReader:
    """Incremental SSE framing shared by every vendor (providers.md §3.7, rules 1-7).

    ``feed(bytes)`` returns the payload texts completed so far; ``finish()`` the rest.
    It reads line by line and touches each character once, so a reply of any size
    and any split costs time linear in its length. Besides ``data:``
    events it takes the bare framing python-genai also accepts (``_api_client.py``,
    its stream iterator): lines that are not SSE fields are gathered until their
    braces balance, then form one payload. So a bare JSON line, a bare error after
    a bare candidate line and a pretty-printed error tail each come out whole.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line: list[str] = []       # pieces of the line not ended yet
        self._after_cr = False           # the last text ended with \r: a leading \n belongs to it
        self._data: list[str] = []       # data: lines of the event being read
        self._bare: list[str] = []       # lines of a bare JSON payload being read
        self._depth = 0                  # brace depth of the bare payload, strings skipped
        self._in_string = False
        self._escaped = False

    def feed(self, data: bytes) -> list[str]:
        return self._take(self._decoder.decode(data))

    def finish(self) -> list[str]:
        payloads = self._take(self._decoder.decode(b"", final=True))
        if self._line:
            self._read_line("".join(self._line), payloads)  # rule 6: the last line may lack its end
            self._line = []
        self._dispatch(payloads)
        if self._bare:
            payloads.append("\n".join(self._bare))             # an unbalanced tail: rule 7 skips it
            self._bare = []
        return payloads

    def _take(self, text: str) -> list[str]:
        payloads: list[str] = []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]                                    # rule 2: the \n of a split \r\n
        self._after_cr = text.endswith("\r")
        start = 0
        for match in _LINE_END.finditer(text):
            self._line.append(text[start:match.start()])
            self._read_line("".join(self._line), payloads)
            self._line = []
            start = match.end()
        if start < len(text):
            self._line.append(text[start:])
        return payloads

    def _read_line(self, line: str, payloads: list[str]) -> None:
        if self._bare:
            self._gather(line, payloads)
        elif line == "":
            self._dispatch(payloads)                           # a blank line ends an event
        elif line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        elif line.startswith(":") or _SSE_FIELD.match(line):
            pass                                               # a comment, event:, id:, retry:
        elif line.lstrip().startswith("{"):
            self._dispatch(payloads)                       # a bare payload ends the event before it
            self._gather(line, payloads)
        else:
            log.debug("[falai_providers] skipped a stream line that "
                      "is neither SSE nor JSON (%d chars)",
                      len(line))

    def _gather(self, line: str, payloads: list[str]) -> None:
        """Add a line to the bare payload; emit it when its braces balance (strings are skipped)."""
        self._bare.append(line)
        depth, in_string, escaped = self._depth, self._in_string, self._escaped
        for char in line:
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
        self._depth, self._in_string, self._escaped = depth, in_string, escaped
        if depth <= 0:
            payloads.append("\n".join(self._bare))
            self._bare, self._depth, self._in_string, self._escaped = [], 0, False, False

    def _dispatch(self, payloads: list[str]) -> None:
        if not self._data:
            return
        payload = "\n".join(self._data)
        self._data = []
        if payload.strip() and payload.strip() != "[DONE]":
            payloads.append(payload)


_LINE_END = re.compile(r"\r\n|\r|\n")
_SSE_FIELD = re.compile(r"(event|id|retry)(:|$)")
MAX_JSON_DEPTH = 128   # deeper than any reply a model writes; deeper input is refused, not recursed


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than ``limit`` (an iterative walk: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class _TooDeep(ValueError):
    """A body nested deeper than MAX_JSON_DEPTH (becomes a ProviderError where it is read)."""


def _loads(text: str) -> Any:
    """json.loads that raises only ValueError: a body too deep to read is a ``_TooDeep``."""
    if nests_past(text):
        raise _TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text)
    except RecursionError:
        raise _TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    if _too_deep(value):
        raise _TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _json_payload(text: str) -> dict | None:
    try:
        value = _loads(text)
    except _TooDeep:
        raise
    except ValueError:
        log.debug("[falai_providers] skipped a payload that is not JSON (%d chars)", len(text))
        return None           # §3.7 rule 7
    return value if isinstance(value, dict) else None


def _read_timeout_in(exc: BaseException) -> bool:
    """A read timeout surfaces mid-stream as requests.ConnectionError(urllib3.ReadTimeoutError)."""
    seen: list[BaseException] = []
    pending: list[Any] = [exc]
    while pending and len(seen) < 10:
        e = pending.pop()
        if not isinstance(e, BaseException) or e in seen:
            continue
        seen.append(e)
        if isinstance(e, requests.exceptions.Timeout) \
                or type(e).__name__ in ("ReadTimeoutError", "timeout"):
            return True
        if isinstance(e, TimeoutError):
            return True
        pending.extend([e.__cause__, e.__context__, *e.args])
    return False


class _Deadline:
    """The total deadline of one request, from before its connect to the reply's last byte (§3.7).

    ``watch(response)`` starts a timer that shuts the response's socket down when
    the time is up, so a read blocked on a server that trickles its reply returns
    at once instead of at the next byte; ``passed()`` then says why it returned.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._timer: threading.Timer | None = None
        self._expired = False

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def passed(self) -> bool:
        return self._expired or time.monotonic() >= self._end

    def watch(self, response: requests.Response) -> None:
        sock = getattr(getattr(response.raw, "connection", None), "sock", None)
        if not isinstance(sock, socket.socket):
            return           # not a plain urllib3 response: passed() is still checked per read
        self._timer = threading.Timer(self.remaining(), self._expire, (sock,))
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self, sock: socket.socket) -> None:
        self._expired = True
        with contextlib.suppress(OSError):      # already closed: the read ended anyway
            socket.socket.shutdown(sock, socket.SHUT_RDWR)     # the plain socket's, under TLS


def _body_reads(response: requests.Response) -> Generator[bytes, None, None]:
    """The response body as it arrives, in reads of at most 64 KiB (decoded), so no single
    read holds more than that however the body is framed; ``iter_content`` where the
    ``urllib3`` response has no ``read1`` (versions before 2.3)."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:
        yield from response.iter_content(chunk_size=None)
        return
    while True:
        data = read1(65536, decode_content=True)
        if not data:
            return
        yield data


# 5. HTTP errors ##############################################################

# A rate-limit bucket's reset and remaining headers. OpenAI names two buckets
# (platform.openai.com/docs/guides/rate-limits: x-ratelimit-{remaining,reset}-{requests,tokens});
# Anthropic four plus its unified window (docs.claude.com/en/api/rate-limits:
# anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}).
_BUCKETS = (("anthropic-ratelimit-unified-reset", None),
            ("anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining"),
            ("anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining"),
            ("anthropic-ratelimit-input-tokens-reset",
             "anthropic-ratelimit-input-tokens-remaining"),
            ("anthropic-ratelimit-output-tokens-reset",
             "anthropic-ratelimit-output-tokens-remaining"),
            ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests"),
            ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens"),
            ("x-ratelimit-reset", "x-ratelimit-remaining"))
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")      # a number of seconds, decimals allowed
_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"([0-9]+(?:\.[0-9]+)?)s"')
_GO_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|h|m|s))+")
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")
_GO_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _header_map(headers: Any) -> dict[str, str]:
    """Response headers by lower-cased name (HTTP names are case-insensitive), values as text."""
    return {str(k).lower(): str(v) for k, v in (headers or {}).items()}


def _date_ms(text: str) -> int | None:
    """An HTTP date or an ISO-8601 date as epoch milliseconds."""
    try:
        at = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        at = None
    if at is None:
        try:
            at = parse_iso(text)
        except ValueError:
            return None
    return to_ms(at)


def _retry_after_header_ms(value: str, now_ms: int) -> int | None:
    """``retry-after``: seconds (decimals allowed) or an HTTP date, floored at 0 (providers.md
    §8.1).
    """
    value = value.strip()
    if _SECONDS.fullmatch(value):
        return round(float(value) * 1000)
    at = _date_ms(value)
    return None if at is None else max(0, at - now_ms)


def _reset_header_ms(value: str, now_ms: int) -> int | None:
    """A vendor reset header as an absolute epoch ms (providers.md §8.1).

    An integer above 10^9 is epoch seconds, a smaller number seconds from now, an
    OpenAI-style duration (``6m0s``, ``20ms``) a span from now (inferred: OpenAI
    documents that format), anything else an HTTP or ISO date.
    """
    value = value.strip()
    if _SECONDS.fullmatch(value):
        number = float(value)
        return round(number * 1000) if number > 1e9 else now_ms + round(number * 1000)
    if _GO_DURATION.fullmatch(value):
        return now_ms + round(sum(float(n) * _GO_UNIT_MS[u] for n, u in _GO_PART.findall(value)))
    return _date_ms(value)


def _server_wait(headers: Any, body: str, now_ms: int) -> tuple[int | None, int | None]:
    """(retry_after_ms, reset_at_ms) named by a failed response (providers.md §8.1).

    ``retry_after_ms`` comes from the first of ``retry-after-ms`` (read first by
    both Stainless SDKs, openai-python and anthropic-sdk-python ``_base_client.py``),
    ``retry-after``, the rate-limit reset headers and a body ``retryDelay``.
    ``reset_at_ms`` is the reset of the bucket that ran out (remaining ``0``); when
    no header says which did, or several did, the latest reset. It is read even
    when ``retry-after`` names a shorter wait: it "can be far beyond
    retry_after_ms" (inferred; ``retry-after`` and ``retryDelay`` are waits).
    """
    lowered = _header_map(headers)
    resets, exhausted = [], []
    for reset_name, remaining_name in _BUCKETS:
        if not lowered.get(reset_name):
            continue
        at = _reset_header_ms(lowered[reset_name], now_ms)
        if at is None or at <= now_ms:
            continue
        resets.append(at)
        if remaining_name and lowered.get(remaining_name, "").strip() == "0":
            exhausted.append(at)
    reset_at = max(exhausted or resets) if resets else None
    if lowered.get("retry-after-ms"):
        value = lowered["retry-after-ms"].strip()
        if _SECONDS.fullmatch(value):
            return round(float(value)), reset_at
    if lowered.get("retry-after"):
        wait = _retry_after_header_ms(lowered["retry-after"], now_ms)
        if wait is not None:
            return wait, reset_at
    if reset_at is not None:
        return reset_at - now_ms, reset_at
    delay = _RETRY_DELAY.search(body or "")
    if delay:
        return round(float(delay.group(1)) * 1000), None
    return None, None


def _should_retry_header(headers: Any) -> bool | None:
    value = _header_map(headers).get("x-should-retry")
    if value is None:
        return None
    value = value.strip().lower()
    return True if value == "true" else False if value == "false" else None


def _loads_or_none(text: str) -> Any:
    try:
        return _loads(text)
    except (ValueError, TypeError):
        return None


def _seconds(value: float) -> str:
    return f"{value:g}"


# 6. The pipeline #############################################################
#
# providers.md §3: a vendor adapter builds the HTTP request (_wire) and turns
# each payload into normalized events (_parse); everything else is common.

@dataclasses.dataclass
class _Plan:
    """What one call sends, worked out once before the first attempt (providers.md §3.1)."""
    request: GenerateRequest
    messages: list[dict]    # the normalized messages (§2.3); plain text history items as _Fragments
    tools: list[dict]
    json: dict | None            # {"name", "schema"} when a structured reply is wanted
    options: dict                # config overlaid with the request's maxTokens and effort
    # the kept lead's fragments, as in messages
    lead: list = dataclasses.field(default_factory=list)
    lead_text: str = ""          # their JSON texts joined by commas, for _body_text


@dataclasses.dataclass
class _Failure:
    """How one attempt failed."""
    error: ProviderError
    streamed: bool               # some of its text already reached the caller (§1.6 rule 4)


class _Accumulator:
    """The fold of one attempt's events (providers.md §3.3)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []        # the text deltas, joined when read: folding is linear
        self._reasoning: list[str] = []
        self.reasoning_details: Any = None
        self.calls: dict[Any, dict] = {}
        self.usage: TokenUsage | None = None
        self.cache_write_tokens: int | None = None
        self.finish: str | None = None
        self.vendor_finish: str | None = None

    def fold(self, event: dict) -> str:
        """Apply one event; return the content delta it carried ("" when none)."""
        kind = event["type"]
        if kind == "usage":
            self.usage = TokenUsage(prompt_tokens=int(event["prompt_tokens"]),
                                    completion_tokens=int(event["completion_tokens"]),
                                    cached_input_tokens=int(event["cached_input_tokens"]),
                                    reasoning_tokens=int(event.get("reasoning_tokens") or 0))
            self.cache_write_tokens = event.get("cache_write_tokens")
            return ""
        if kind == "finish":
            self.finish = event["finish_reason"]
            self.vendor_finish = event.get("vendor_finish_reason")
            return ""
        if event.get("reasoning"):
            self._reasoning.append(event["reasoning"])
        if event.get("reasoning_details") is not None:
            self.reasoning_details = event["reasoning_details"]
        for call in event.get("tool_calls") or []:
            slot = self.calls.setdefault(call["index"], {"id": None, "name": None, "arguments": [],
                                                         "thoughtSignature": None})
            if call.get("id") and not slot["id"]:
                slot["id"] = call["id"]
            if call.get("name"):
                slot["name"] = call["name"]
            if call.get("arguments"):
                slot["arguments"].append(call["arguments"])
            if call.get("thoughtSignature"):
                slot["thoughtSignature"] = call["thoughtSignature"]
        content = event.get("content") or ""
        if content:
            self.pieces.append(content)
        return content

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def has_named_call(self) -> bool:
        return any(slot["name"] for slot in self.calls.values())

    def is_empty(self) -> bool:
        return not self.pieces and not self._reasoning and not self.has_named_call()

    def tool_calls(self) -> list[ToolCallRequest]:
        def order(index: Any) -> tuple:
            return (0, index, "") if isinstance(index, int) else (1, 0, str(index))
        calls = []
        for index in sorted(self.calls, key=order):
            slot = self.calls[index]
            if slot["name"]:
                calls.append(ToolCallRequest(id=slot["id"] or f"call_{index}", name=slot["name"],
                                             arguments=parse_tool_args("".join(slot["arguments"]),
                                                                       slot["name"]),
                                             thought_signature=slot["thoughtSignature"]))
        return calls


class _StreamedChunk(GenerationChunk):
    """A ``done=False`` chunk whose ``accumulated`` text is joined from the deltas when first read.

    A stream of n deltas would copy what came so far n times if every chunk held
    its own joined text; this way only a consumer that reads ``accumulated`` pays
    for it, and the engine reads ``delta`` (model-calls.md §8).
    """

    def __init__(self, delta: str, pieces: list[str]) -> None:
        self._pieces, self._count = pieces, len(pieces)
        self._joined: str | None = None
        super().__init__(delta=delta, accumulated="", done=False)

    @property
    def accumulated(self) -> str:
        if self._joined is None:
            self._joined = "".join(self._pieces[:self._count])
        return self._joined

    @accumulated.setter
    def accumulated(self, value: str) -> None:
        pass                      # the dataclass __init__ sets it; the text comes from the pieces


def _check_options(owner: str, config: Any) -> dict:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"[{owner}] config must be a dict of request defaults "
                         '(temperature, topP, maxTokens, stopSequences, effort), e.g. '
                         'config={"temperature": 0.3}.')
    effort = config.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise ValueError(f'[{owner}] config["effort"] is {effort!r}: '
                         f'use one of {", ".join(EFFORTS)}, '
                         "or leave it out for the model's default.")
    tokens = config.get("maxTokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or tokens <= 0):
        raise ValueError(f'[{owner}] config["maxTokens"] is {tokens!r}: pass a positive integer.')
    return dict(config)


FRAGMENTS_KEPT = 10_000          # plain history items whose wire form one provider keeps
LEADS_KEPT = 256                 # conversations whose opening plain items one provider keeps
CAPS_KEPT = 64                   # models whose capability row one provider keeps


class _Fragment(dict):
    """A plain text history item in a vendor's wire form, with its JSON text worked out once.

    The same object goes into every body that holds the item, in this call and in
    later turns, so nothing may change one once built; ``_body_text`` writes its
    ``json`` instead of serializing it again.
    """
    __slots__ = ("json",)
    json: str


def _spliced(items: list[dict], lead: list[_Fragment], each: Callable[[dict], Any],
             whole: list) -> list:
    """``each(item)`` for every item, except that the kept lead's run of fragments,
    when ``items`` hold it whole (a vendor's wire keeps each fragment as it is, in order), is
    ``whole`` instead: no call per item."""
    start = _run_at(items, lead) if lead else -1
    if start < 0:
        return [each(item) for item in items]
    return [*map(each, items[:start]), *whole, *map(each, items[start + len(lead):])]


def _run_at(items: list[dict], lead: list[_Fragment]) -> int:
    """Where ``lead`` sits whole in ``items``, or -1. The same objects compare equal by identity,
    in C.
    """
    try:
        start = items.index(lead[0])
    except ValueError:
        return -1
    return start if items[start:start + len(lead)] == lead else -1


def _item_text(item: dict) -> str:
    return item.json if type(item) is _Fragment else compact_json(item)


class _Fragments:
    """A provider's fragments of the plain text items it has sent, by role and text.

    Keyed by content, not by the item: the engine hands each turn a fresh copy of
    the history, equal item by item. At most FRAGMENTS_KEPT are kept; when full,
    all are dropped and the next calls build them again. A provider may be shared
    by threads: each step is one operation on a dict with str keys (get, set,
    clear), atomic under the GIL, and two threads building the same fragment build
    equal ones, so there is no lock.
    """

    def __init__(self, wire: Callable[[str, str], dict]) -> None:
        self.by_role: dict[str, dict[str, _Fragment]] = {"user": {}, "assistant": {}}
        self._wire = wire  # (role, text) -> the vendor's wire dict of a plain text message (static)
        # Leads: for a conversation (keyed by its first text), the plain items its history last
        # opened with, as copies, their fragments and the fragments' JSON texts joined by commas. A
        # later turn's history that opens with equal items takes their fragments after one list
        # comparison, done in C, instead of one lookup per item, and its body takes their text whole
        # instead of joining it again.
        self.leads: dict[str, tuple[list[dict], list[_Fragment], str]] = {}

    def __len__(self) -> int:
        return sum(len(kept) for kept in self.by_role.values())

    def add(self, role: str, text: str) -> _Fragment:
        """The fragment of a plain ``role`` message saying ``text``, built on first sight."""
        kept = self.by_role[role]
        fragment = kept.get(text)
        if fragment is None:
            fragment = _Fragment(self._wire(role, text))
            fragment.json = compact_json(fragment)
            if len(self) >= FRAGMENTS_KEPT:
                for other in self.by_role.values():
                    other.clear()
            kept[text] = fragment
        return fragment

    def lead(self, history: list) -> tuple[list[dict], list[_Fragment], str]:
        """The kept lead of this history's conversation, when the history still opens with it;
        else none.
        """
        first = history[0].get("content") if history and type(history[0]) is dict else None
        found = self.leads.get(first) if type(first) is str else None
        if found is None or len(history) < len(found[0]) or history[:len(found[0])] != found[0]:
            return [], [], ""
        return found

    def keep_lead(self, first: str, items: list[dict], fragments: list, text: str) -> None:
        """Keep ``items`` (copies of a history's opening plain text items), their fragments and the
        fragments' JSON text as the lead of the conversation whose first text is ``first``."""
        if len(self.leads) >= LEADS_KEPT:
            self.leads.clear()
        self.leads[first] = (items, fragments, text)


class _HttpProvider:
    """The common HTTP pipeline of the vendor providers (the original's ``ProviderAdapter``,
    providers.md §3).

    Options every HTTP provider takes (§3.9): ``api_key`` (surrounding whitespace
    is stripped, as python-genai does; a key that still holds whitespace, a
    control or a non-ASCII character raises ``ValueError``: it cannot travel in a
    header), ``model`` (no default),
    ``backup_models`` (tried in order on overload, rate and model errors),
    ``base_url`` (any endpoint of the same dialect; trailing slashes ignored),
    ``config`` (``temperature``, ``topP``, ``maxTokens``, ``stopSequences``,
    ``effort``), ``retry_config`` (``{"timeout": idle ms, "retries": n, "deadline": ms,
    "max_bytes": n}``, default ``{"timeout": 60000, "retries": 3, "deadline": 600000,
    "max_bytes": 33554432}``: ``deadline`` bounds one request from connect to the reply's
    last byte, ``max_bytes`` the reply body), ``headers`` (merged last), ``session``
    (a ``requests.Session``, one per provider) and ``sleep`` (backoff; tests pass
    a no-op), ``model_caps`` (overrides of the capability table, section 2) and
    ``understand_effort`` (default ``"none"``: an ``"understand"`` call with no
    effort configured thinks as little as its model allows, the lowest level the
    table accepts, or nothing on a model the table does not know; ``None`` sends
    nothing).

    The key never appears in an error message, its ``__cause__``, a log line or
    ``repr``, raw or escaped or quoted.

    ``generate`` drains ``generate_stream`` (one code path, §1.6 rule 1). A call
    raises only ``ProviderError``, after its retries and backup models.
    """

    name: str
    capabilities: ProviderCapabilities

    def __init__(self, *, owner: str, name: str, api_key: str | None, key_required: bool,
                 model: str | None, backup_models: list[str] | None, base_url: str | None,
                 config: dict | None, retry_config: dict | None, headers: dict | None,
                 session: requests.Session | None, sleep: Callable[[float], Any],
                 example_model: str, key_variable: str, model_caps: dict | None = None,
                 understand_effort: str | None = "none"):
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f'[{owner}] model is empty: there is no default. Pass one, e.g. '
                             f'model="{example_model}".')
        if api_key is not None and not isinstance(api_key, str):
            raise ValueError(f"[{owner}] api_key must be a string.")
        if isinstance(api_key, str):
            api_key = api_key.strip()            # a key read with `cat key.txt` ends in a newline
        if api_key == "" or (api_key is None and key_required):
            raise ValueError(f"[{owner}] api_key is empty: the provider cannot authenticate. Pass "
                             f'api_key=os.environ["{key_variable}"] and check the variable is set.')
        if api_key is not None and not _KEY_CHARS.fullmatch(api_key):
            # The message leaves the key out: it must never reach a log.
            raise ValueError(f"[{owner}] api_key contains whitespace, "
                             "a control character or a non-ASCII character inside it, "
                             "so it cannot travel in an HTTP header. "
                             f"Copy the key again from the vendor's console into {key_variable}.")
        if backup_models is None:
            backup_models = []
        if isinstance(backup_models, str) or not all(isinstance(m, str) and m.strip()
                                                     for m in backup_models):
            raise ValueError(f'[{owner}] backup_models must be a list of model ids, e.g. '
                             f'["{example_model}"].')
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError(f"[{owner}] base_url is empty: pass the endpoint URL.")
        if not callable(sleep):
            raise ValueError(f"[{owner}] sleep must be a callable taking seconds, like time.sleep.")
        if understand_effort is not None and understand_effort not in EFFORTS:
            raise ValueError(f'[{owner}] understand_effort is {understand_effort!r}: use one of '
                             f'{", ".join(EFFORTS)}, or None to send nothing.')
        retry = dict(retry_config or {})
        timeout = retry.get("timeout") or 60_000
        retries = retry.get("retries", 3)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f'[{owner}] retry_config["timeout"] is {timeout!r}: '
                             'pass milliseconds of '
                             "silence allowed, e.g. 60000.")
        deadline = retry.get("deadline") or DEFAULT_DEADLINE_MS
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) \
                or not math.isfinite(deadline) or deadline < 0:
            raise ValueError(f'[{owner}] retry_config["deadline"] is {deadline!r}: pass the '
                             "milliseconds one request may take from connect to the reply's "
                             f"last byte, e.g. {DEFAULT_DEADLINE_MS}.")
        max_bytes = retry.get("max_bytes") or DEFAULT_MAX_REPLY_BYTES
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f'[{owner}] retry_config["max_bytes"] is {max_bytes!r}: pass the '
                             "largest reply body to read, in bytes, e.g. "
                             f"{DEFAULT_MAX_REPLY_BYTES}.")
        if retries is None:
            retries = 3
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f'[{owner}] retry_config["retries"] is {retries!r}: '
                             'pass a whole number, 0 or more.')
        self.name = name
        self._owner = owner
        self._api_key = api_key
        self._secret_forms = _secret_forms(api_key)
        self.model_caps = _check_model_caps(owner, model_caps)
        self._caps_kept: dict[tuple, ModelCaps] = {}     # each model's row, looked up once (_caps)
        self.understand_effort = understand_effort
        self._warned: set = set()
        self.model = model.strip()
        self.backup_models = [m.strip() for m in backup_models]
        self.base_url = base_url.strip().rstrip("/")
        self.config = _check_options(owner, config)
        self.retry_config = {"timeout": timeout, "retries": retries, "deadline": deadline,
                             "max_bytes": max_bytes}
        self.headers = dict(headers or {})
        self.session = session if session is not None else requests.Session()
        self._fragments = _Fragments(self._plain_wire)
        self._sleep = sleep
        self._retries = retries
        self._idle_s = timeout / 1000
        self._progress_s = max(300_000, timeout) / 1000      # §3.7: silence of events, not of bytes
        self._deadline_s = deadline / 1000                   # §3.7: connect to the last byte
        self._max_bytes = max_bytes

    def __repr__(self) -> str:
        # providers.md §1.6 rule 5: the key never appears here.
        return (f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
                f"base_url={self.base_url!r})")

    # -- the seam --------------------------------------------------------------

    def generate(self, request: GenerateRequest) -> Generation:
        """One model call; what draining ``generate_stream`` would end with (providers.md §1.6)."""
        final = None
        for chunk in self._run(request, streaming=False):
            final = chunk
        assert final is not None and final.done
        return Generation(message=final.accumulated, structured=final.structured,
                          tool_calls=final.tool_calls, usage=final.usage, reasoning=final.reasoning,
                          reasoning_details=final.reasoning_details, metadata=final.metadata)

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]:
        """Yield the model's raw text deltas, then one ``done=True`` chunk with the final fields."""
        return self._run(request, streaming=True)

    # -- one call (providers.md §3.1, §3.8) ------------------------------------

    def _run(self, request: GenerateRequest, streaming: bool) -> Iterator[GenerationChunk]:
        """Each model in turn, each of its attempts until one answers (the ladder of §3.8)."""
        plan = self._plan(request)
        models = [self.model, *self.backup_models]
        for position, model in enumerate(models):
            backup = models[position + 1] if position + 1 < len(models) else None
            attempt = 1
            while True:
                failure = yield from self._attempt(plan, model, streaming)
                if failure is None:
                    return
                if self._after_error(failure, request, model, attempt, backup) == "backup":
                    break
                attempt += 1

    def _attempt(self, plan: _Plan, model: str, streaming: bool) -> Generator[GenerationChunk, None,
                                                                              _Failure | None]:
        """One attempt (§3.3-§3.5): yield its text deltas when streaming, then its final chunk;
        return how it failed instead, or None when it answered."""
        self._check_cancel(plan.request)
        accumulator = _Accumulator()
        state = self._new_state()
        state["model"] = model           # whose reasoning the reply carries (tagged for replay)
        events = self._request(model, plan, state)
        try:
            for event in events:
                delta = accumulator.fold(event)
                if delta and streaming:
                    yield _StreamedChunk(delta, accumulator.pieces)
            refusal = self._refusal(state, accumulator)
            if refusal is not None:
                raise refusal                                     # one request, no retry
            if accumulator.is_empty():
                raise (self._cut_error(plan, accumulator) if accumulator.finish == "length"
                       else self._empty_error(state, accumulator))      # §3.5 rule 1, per attempt
        except Exception as exc:
            return _Failure(self._sanitized(self._wrap(exc)),
                            streamed=streaming and bool(accumulator.pieces))
        finally:
            events.close()
        # After the stream: the empty-reply rule (§3.5 rule 6) is raised from here and is
        # deliberately outside the retry loop.
        try:
            final = self._final_chunk(plan, model, accumulator)
        except ProviderError:
            raise
        except Exception as exc:            # §1.6 rule 3: a broken payload is an upstream fault
            raise self._sanitized(self._wrap(exc)) from None
        yield final
        return None

    def _after_error(self, failure: _Failure, request: GenerateRequest, model: str, attempt: int,
                     backup: str | None) -> Literal["retry", "backup"]:
        """What follows a failed attempt (§3.8): ``"retry"`` the model after a pause, go on to the
        ``"backup"`` model, or raise the error."""
        error = failure.error
        if request.cancel is not None and request.cancel.is_set() and error.kind != "aborted":
            raise self._aborted() from error
        if error.kind == "aborted" or failure.streamed:
            raise error          # §1.6 rule 4: text already reached the caller
        log.warning("[%s] attempt %d on model %s failed (%s): %s", self.name, attempt, model,
                    error.kind, error)
        if attempt <= self._retries and self._retryable(error):
            delay_ms = self._delay_ms(error, attempt)
            if delay_ms is not None:
                self._pause(delay_ms, request)
                return "retry"
        if error.kind in BACKUP_KINDS and backup is not None:
            log.warning("[%s] model %s failed (%s); falling back to backup model %s", self.name,
                        model, error.kind, backup)
            return "backup"
        raise error

    def _plan(self, request: GenerateRequest) -> _Plan:
        self._check_cancel(request)
        options = dict(self.config)
        if request.max_output_tokens is not None:
            options["maxTokens"] = request.max_output_tokens
        if request.effort is not None:
            options["effort"] = request.effort
        if options.get("effort") is None and request.schema_name == "understand" \
                and self.understand_effort is not None:
            options["effort"] = self.understand_effort      # as little thinking as the model allows
            options["quiet"] = True                 # not the user's choice: no warning when dropped
        if options.get("effort") is not None and options["effort"] not in EFFORTS:
            raise ProviderError(f'{self.name}: effort {options["effort"]!r} is not one of '
                                f'{", ".join(EFFORTS)}',
                                provider=self.name, kind="invalid")
        schema = request.schema
        json_request = ({"name": request.schema_name or "structured_output", "schema": schema}
                        if schema else None)
        try:
            messages, lead, lead_text = _normalize_messages(request, self._fragments
                                                            if self._history_key else None)
            return _Plan(request, messages, _tool_definitions(request.tools), json_request, options,
                         lead, lead_text)
        except Exception as exc:
            # §1.6 rule 3: a malformed history or tool list fails the call as a ProviderError.
            raise ProviderError(f"{self.name}: cannot build the request: {type(exc).__name__}: "
                                f"{exc}",
                                provider=self.name, kind="invalid") from exc

    def _retryable(self, error: ProviderError) -> bool:
        if error.kind in ("aborted", "content"):
            return False            # a refusal or a block is the answer: one request
        if error.should_retry is not None:
            return error.should_retry
        return error.is_transient

    @staticmethod
    def _delay_ms(error: ProviderError, attempt: int) -> float | None:
        """§3.8 delay_for: a server's wait as given (None past 30 s), else full-jitter backoff."""
        waits = []
        if error.retry_after_ms is not None:
            waits.append(error.retry_after_ms)
        if error.reset_at_ms is not None:
            waits.append(error.reset_at_ms - _now_ms())
        if waits:
            wait = max(waits)
            return None if wait > MAX_SERVER_WAIT_MS else max(0, wait)
        return random.random() * min(MAX_SERVER_WAIT_MS, 1000 * 2 ** (attempt - 1))

    def _pause(self, delay_ms: float, request: GenerateRequest) -> None:
        """Sleep between attempts; a cancel cuts it short (§3.8 "sleeping")."""
        self._check_cancel(request)
        if self._sleep is time.sleep and request.cancel is not None:
            request.cancel.wait(delay_ms / 1000)
        else:
            self._sleep(delay_ms / 1000)
        self._check_cancel(request)

    def _check_cancel(self, request: GenerateRequest) -> None:
        if request.cancel is not None and request.cancel.is_set():
            raise self._aborted()

    def _aborted(self) -> ProviderError:
        return ProviderError(f"{self.name}: cancelled", provider=self.name, kind="aborted")

    def _wrap(self, exc: BaseException) -> ProviderError:
        """§1.6 rule 3: nothing but ProviderError escapes a call."""
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, _TooDeep):
            return ProviderError(f"{self.name}: the reply is {exc}, which no model writes: "
                                 "the endpoint sent a broken body", provider=self.name,
                                 kind="overload")
        error = ProviderError(self._scrub(f"{self.name}: {type(exc).__name__}: {exc}"),
                              provider=self.name, kind=classify_error(exc))
        error.__cause__ = exc
        return error

    def _scrub(self, text: str) -> str:
        """``text`` with the key replaced in every form an error text may carry it."""
        for form in self._secret_forms:
            if form in text:
                text = text.replace(form, "[redacted]")
        return text

    def _sanitized(self, error: ProviderError) -> ProviderError:
        """Drop an exception chain that carries the key; scrub the error's own text and body."""
        if not self._secret_forms:
            return error
        error.args = tuple(self._scrub(a) if isinstance(a, str) else a for a in error.args)
        if isinstance(error.body, str):
            error.body = self._scrub(error.body)
        link: BaseException | None = error.__cause__ or error.__context__
        for _ in range(10):
            if link is None:
                break
            text = f"{link!s} {link!r} {link.args!r}"
            if any(form in text for form in self._secret_forms):
                error.__cause__ = None
                error.__context__ = None
                error.__suppress_context__ = True
                break
            link = link.__cause__ or link.__context__
        return error

    # -- one request (§3.7) -----------------------------------------------------

    def _request(self, model: str, plan: _Plan, state: dict) -> Generator[dict, None, None]:
        """One HTTP request to ``model``, read as normalized events (§3.7)."""
        request = plan.request
        try:
            url, headers, body = self._wire(model, plan)
            data = self._body_text(body, plan).encode("utf-8")
        except Exception as exc:
            raise ProviderError(f"{self.name}: cannot build the request: {type(exc).__name__}: "
                                f"{exc}",
                                provider=self.name, kind="invalid") from exc
        deadline = _Deadline(self._deadline_s)
        wait = min(self._idle_s, self._deadline_s)
        payloads: Generator[dict, None, None] | None = None
        try:
            # No redirect is followed: requests would send x-api-key / x-goog-api-key, and the whole
            # conversation, on to whatever host a 307 or 308 names.
            response = self.session.post(url, headers=headers, data=data, stream=True,
                                         allow_redirects=False, timeout=(wait, wait))
        except Exception as exc:
            raise self._transport_error(exc) from exc
        try:
            deadline.watch(response)
            self._check_cancel(request)
            if 300 <= response.status_code < 400:
                raise self._redirect_error(response)
            if not 200 <= response.status_code < 300:
                raise self._response_error(response, deadline)
            payloads = self._payloads(response, request, deadline)
            for payload in payloads:
                try:
                    events = list(self._parse(payload, state))
                except ProviderError:
                    raise
                except Exception as exc:
                    # A payload of the wrong shape: an upstream fault, like a broken stream.
                    raise ProviderError(f"{self.name}: unreadable reply payload "
                                        f"({type(exc).__name__}: {self._scrub(str(exc))[:200]})",
                                        provider=self.name, kind="overload") from None
                yield from events
        finally:
            if payloads is not None:
                payloads.close()          # now, not by the garbage collector (see _payloads)
            deadline.stop()
            response.close()

    def _payloads(self, response: requests.Response, request: GenerateRequest,
                  deadline: _Deadline) -> Generator[dict, None, None]:
        content_type = (response.headers.get("Content-Type") or "").lower()
        whole = "application/json" in content_type              # §3.7 rule 8
        reader = _SseReader()
        body = bytearray()
        received = 0
        last_payload = time.monotonic()
        # Closed here, not left to the garbage collector: a generator finalized later may run
        # inside a parse at the recursion limit (a reply nested too deep) and fail there.
        with contextlib.closing(self._bounded_reads(response, deadline)) as reads:
            for data in reads:
                self._check_cancel(request)
                received += len(data)
                if whole:
                    body.extend(data)
                    continue
                for text in reader.feed(data):
                    payload = _json_payload(text)
                    if payload is not None:
                        last_payload = time.monotonic()
                        yield payload
                if time.monotonic() - last_payload > self._progress_s:
                    raise ProviderError(f"{self.name}: stream went {_seconds(self._progress_s)}s "
                                        "without a chunk", provider=self.name, kind="timeout")
        if received == 0 and "text/event-stream" not in content_type:
            raise ProviderError(f"{self.name}: empty response body", provider=self.name,
                                kind="overload")
        if whole:
            value = _loads_or_none(body.decode("utf-8", "replace"))
            for payload in value if isinstance(value, list) else [value]:
                if isinstance(payload, dict):
                    yield payload
        else:
            for text in reader.finish():
                payload = _json_payload(text)
                if payload is not None:
                    yield payload

    def _bounded_reads(self, response: requests.Response,
                       deadline: _Deadline) -> Generator[bytes, None, None]:
        """The body's reads, ended by a ProviderError past the deadline or ``max_bytes`` (§3.7)."""
        with contextlib.closing(_body_reads(response)) as reads:
            received = 0
            while True:
                try:
                    data = next(reads, None)
                except Exception as exc:
                    if deadline.passed():
                        raise self._deadline_error(deadline) from None
                    raise self._transport_error(exc) from exc
                if deadline.passed():
                    raise self._deadline_error(deadline)   # a shut socket reads as an end
                if data is None:
                    return
                received += len(data)
                if received > self._max_bytes:
                    raise ProviderError(f"{self.name}: the reply is larger than {self._max_bytes} "
                                        'bytes (retry_config["max_bytes"]); no model reply is '
                                        "that long, so the endpoint sent a broken body. Raise the "
                                        "cap if the endpoint is right.",
                                        provider=self.name, kind="overload")
                yield data

    def _deadline_error(self, deadline: _Deadline) -> ProviderError:
        return ProviderError(f"{self.name}: the request took longer than its deadline of "
                             f'{_seconds(deadline.seconds)}s (retry_config["deadline"])',
                             provider=self.name, kind="timeout")

    def _redirect_error(self, response: requests.Response) -> ProviderError:
        """A 3xx: no redirect is followed, so the key never travels to the host it names."""
        location = self._scrub(str(response.headers.get("Location") or "no Location header"))[:500]
        return ProviderError(f"{self.name} {response.status_code}: the endpoint redirects to "
                             f"{location}; falai follows no redirect, so the key and the "
                             "conversation never go to another address. Set base_url to the "
                             "address that answers.",
                             provider=self.name, kind="invalid", status=response.status_code)

    def _transport_error(self, exc: BaseException) -> ProviderError:
        """A failure of the connection: a read timeout names the idle deadline;
        anything else is wrapped.
        """
        if _read_timeout_in(exc):
            return ProviderError(f"{self.name}: stream went "
                                 f"{_seconds(self._idle_s)}s without a byte",
                                 provider=self.name, kind="timeout")
        return self._wrap(exc)

    def _response_error(self, response: requests.Response, deadline: _Deadline) -> ProviderError:
        """A non-2xx answer as a classified ProviderError (providers.md §8.1, §8.3)."""
        body = bytearray()
        try:
            with contextlib.closing(self._bounded_reads(response, deadline)) as reads:
                for data in reads:
                    body.extend(data)
        except ProviderError:
            if deadline.passed():
                return self._deadline_error(deadline)
            # otherwise the status is the answer: the text read so far is enough to classify it
        text = body.decode("utf-8", "replace")
        text = self._scrub(text)
        status = response.status_code
        data = _loads_or_none(text)
        retry_after_ms, reset_at_ms = _server_wait(response.headers, text, _now_ms())
        kind, code, vendor_retry_ms = self._classify(status, text, data)
        if vendor_retry_ms is not None:
            retry_after_ms = vendor_retry_ms
        message = f"{self.name} {status}: {text[:500]}" if text.strip() else \
            f"{self.name} {status} {response.reason or ''}".rstrip()
        return ProviderError(message, provider=self.name, kind=kind, status=status, code=code,
                             retry_after_ms=retry_after_ms, reset_at_ms=reset_at_ms,
                             should_retry=_should_retry_header(response.headers), body=text)

    def _inband_error(self, error: Any, payload: dict, status: Any = None,
                      code: Any = None) -> ProviderError:
        """An error that arrived in the body of a 200 stream (providers.md §4.9)."""
        text = self._scrub(compact_json(payload))
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
        message = None
        if isinstance(error, dict):
            message = error.get("message") or error.get("status")
        kind, vendor_code, retry_ms = self._classify(status, text, payload)
        if kind == "unknown":
            kind = "overload"        # a stream that dies after its headers is an upstream fault
        if retry_ms is None:
            retry_ms, _ = _server_wait({}, text, _now_ms())
        return ProviderError(self._scrub(f"{self.name} stream error: "
                                         f"{message or 'no reason given'}"),
                             provider=self.name, kind=kind, status=status,
                             code=code if isinstance(code, str) else vendor_code,
                             retry_after_ms=retry_ms, body=text)

    # -- final assembly (§3.5) --------------------------------------------------

    def _refusal(self, state: dict, accumulator: _Accumulator) -> ProviderError | None:
        """A refusal or moderation block the stream carried, as kind ``content``."""
        return None

    def _empty_error(self, state: dict, accumulator: _Accumulator) -> ProviderError:
        if accumulator.finish == "content_filter":
            return ProviderError(f"{self.name}: reply blocked by the content filter "
                                 f"({accumulator.vendor_finish})", provider=self.name,
                                 kind="content", code=accumulator.vendor_finish)
        return ProviderError(f"{self.name}: completed with no content", provider=self.name,
                             kind="overload")

    _cap_setting = 'config={"maxTokens": ...}'      # where a user raises the cap, for _cut_error

    def _cut_error(self, plan: _Plan, acc: _Accumulator) -> ProviderError:
        """A reply cut at the output cap (finish reason "length") before it was usable: its own
        kind, with the numbers, not "no response" (a looping small model, or a cap set too low)."""
        cap = plan.options.get("maxTokens")
        tokens = (acc.usage.completion_tokens if acc.usage is not None else None) or cap
        at = f"at {tokens} tokens" if tokens else "at the model's output limit"
        limit = f" (the cap sent was {cap})" if cap and cap != tokens else ""
        what = "a JSON reply" if plan.json is not None else "the reply"
        return ProviderError(f"{self.name}: the reply was cut {at}{limit} before {what} was "
                             f"complete (finish reason {acc.vendor_finish or 'length'}). A model "
                             "that loops needs a bigger model; a reply that needs more room "
                             f"needs a higher cap: {self._cap_setting}.", provider=self.name,
                             kind="length", code=acc.vendor_finish)

    def _final_chunk(self, plan: _Plan, model: str, acc: _Accumulator) -> GenerationChunk:
        tool_calls = acc.tool_calls()
        structured = None
        text = message = acc.text
        if plan.json is not None and text.strip():
            parsed = _parse_envelope(text)
            if isinstance(parsed, dict):
                structured = parsed
            else:
                log.warning("[%s] the structured reply did not parse as a JSON object (%d chars)",
                            self.name, len(text))
                if ENVELOPE_SHAPED.match(text):
                    message = ""          # §1.4: a broken envelope never reaches a customer
        reply = structured["message"] if structured and isinstance(structured.get("message"),
                                                                   str) else message
        unparsed = plan.json is not None and structured is None
        if acc.finish == "length" and not tool_calls and (not reply.strip() or unparsed):
            raise self._cut_error(plan, acc)
        if not tool_calls and not reply.strip():
            # A JSON reply that is not JSON says so: a small model's broken envelope is not silence.
            text = acc.text.strip()
            broken = f": the reply is not the JSON object asked for ({len(acc.text)} chars: " \
                f"{text[:60]!r})" if unparsed and text else ""
            raise ProviderError(f"No response from {self.name}{broken}", provider=self.name,
                                kind="overload")
        metadata: dict = {"provider": self.name, "model": model}
        if acc.finish is not None:
            metadata["finishReason"] = acc.finish
        if acc.vendor_finish is not None:
            metadata["vendorFinishReason"] = acc.vendor_finish
        if acc.usage is not None:
            metadata["tokensUsed"] = acc.usage.prompt_tokens + acc.usage.completion_tokens
        if acc.cache_write_tokens is not None:
            metadata["cacheWriteTokens"] = acc.cache_write_tokens
        return GenerationChunk(delta="", accumulated=message, done=True, structured=structured,
                               tool_calls=tool_calls, usage=acc.usage,
                               reasoning=acc.reasoning or None,
                               reasoning_details=acc.reasoning_details, metadata=metadata)

    # -- vendor hooks -------------------------------------------------------------

    def _new_state(self) -> dict:
        return {}

    def _body_text(self, body: dict, plan: _Plan | None = None) -> str:
        """``compact_json(body)``, byte for byte, writing each kept fragment's text as it is,
        and the plan's kept lead as its one text."""
        name = self._history_key_of(body)
        if name is None or name not in body:
            return compact_json(body)
        keys = list(body)
        at = keys.index(name)
        head = compact_json({key: body[key] for key in keys[:at]})[:-1] if at else "{"
        tail = (compact_json({key: body[key] for key in keys[at + 1:]})[1:] if at + 1 < len(keys)
                else "}")
        lead, whole = (plan.lead, [plan.lead_text]) if plan is not None else ([], [])
        items = ",".join(_spliced(body[name], lead, _item_text, whole))
        return (f'{head}{"," if at else ""}"{name}":[{items}]'
                f'{"," if at + 1 < len(keys) else ""}{tail}')

    _history_key: str | None = None   # the body key of the history list, when it may hold fragments

    def _history_key_of(self, body: dict) -> str | None:
        """The key of ``body``'s history list (a vendor with two endpoints has one per endpoint)."""
        return self._history_key

    @staticmethod
    def _plain_wire(role: str, text: str) -> dict:
        """The wire form of a plain text message of ``role``; a vendor that has a ``_history_key``
        says.
        """
        raise NotImplementedError

    def _wire(self, model: str, plan: _Plan) -> tuple[str, dict, dict]:
        raise NotImplementedError

    def _parse(self, payload: dict, state: dict) -> Iterator[dict]:
        raise NotImplementedError

    def _classify(self, status: int | None, text: str,
                  data: Any) -> tuple[str, str | None, int | None]:
        """(kind, vendor code, vendor retry wait) of a failure; generic rules of §8.3."""
        return classify_error(status=status, body=text), None, None

    def _base_headers(self) -> dict:
        return {"User-Agent": USER_AGENT, "Content-Type": "application/json"}


    def _caps(self, vendor: str, model: str, unknown: ModelCaps = UNKNOWN_MODEL) -> ModelCaps:
        """The model's capability row, looked up once per model: every request reads it,
        and the table and the provider's ``model_caps`` (checked when it was built) do not
        change."""
        return reused(self._caps_kept, (vendor, model, unknown),
                      lambda: model_caps(vendor, model, self.model_caps, unknown), CAPS_KEPT)

    def _warn_once(self, key: tuple, message: str, *args: Any) -> None:
        """Log a configuration value dropped for a model, once per provider object and model."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def _sampling(self, options: dict, into: dict, names: dict, model: str,
                  caps: ModelCaps) -> None:
        """Copy temperature / topP / stopSequences under a vendor's own names,
        as the model's row allows.
        """
        wanted = [k for k in ("temperature", "topP") if options.get(k) is not None]
        allowed = wanted if caps.sampling == "any" else wanted[:1] if caps.sampling == "one" else []
        for key in wanted:
            if key in allowed:
                into[names[key]] = options[key]
            else:
                why = ("it takes temperature or topP, not both" if caps.sampling == "one" else
                       "the capability table does not know the model, so nothing optional is sent"
                       if caps == UNKNOWN_MODEL else "the model refuses sampling parameters")
                self._warn_once(("sampling", model, key),
                                '[%s] config["%s"] is not sent to %s: %s. To send it '
                                'anyway, override the row: model_caps={"%s": {"sampling": "any"}}.',
                                self.name, key, model, why, model)
        if options.get("stopSequences"):
            into[names["stopSequences"]] = list(options["stopSequences"])

    def _dropped_effort(self, options: dict, model: str) -> None:
        if not options.get("quiet"):
            self._warn_once(("effort", model),
                            '[%s] effort %r is not sent to %s: the capability table has no '
                            "thinking control for it. Override the row with model_caps if the "
                            "model takes one.",
                            self.name, options.get("effort"), model)


_KEY_CHARS = re.compile(r"[\x21-\x7e]+")   # printable ASCII, no whitespace: what a header can carry


def _secret_forms(key: str | None) -> tuple[str, ...]:
    """Every form a key may take in an error text: raw, repr- and JSON-escaped, URL-quoted.

    Real keys are long; a very short one (a test's "k") would mangle every message,
    so keys under 8 characters are not scrubbed.
    """
    if not key or len(key) < 8:
        return ()
    forms = {key, repr(key)[1:-1], json.dumps(key)[1:-1],
             key.encode("unicode_escape").decode("ascii"), urllib.parse.quote(key, safe=""),
             urllib.parse.quote_plus(key)}
    return tuple(sorted(forms, key=len, reverse=True))


# 7. GeminiProvider ###########################################################

_GEMINI_VERSION = re.compile(r"gemini-([0-9]+)(?:\.([0-9]+))?")
_GEMINI_LEVEL_NAMES = {"low": "LOW", "medium": "MEDIUM", "high": "HIGH"}
_GEMINI_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576, "max": 24576}
_GEMINI_FILTERED = ("SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION",
                    "IMAGE_SAFETY")
SKIP_SIGNATURE = "skip_thought_signature_validator"
# Gemini's own "prompt over the window" wording, which the generic context patterns of
# providers.md §8.3 miss ("The input token count (N) exceeds the maximum number of tokens
# allowed (M)."); §4.10 classifies it as `context` (inferred pattern).
_GEMINI_CONTEXT = re.compile(r"input token count.{0,40}exceeds the maximum number of tokens", re.I)


def _gemini_version(model: str) -> tuple[int, int] | None:
    match = _GEMINI_VERSION.match(model)
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


def _gemini_is_legacy(model: str) -> bool:
    """Gemini 1.x and 2.x (providers.md §4.5, §4.6); other ids count as Gemini 3 and later."""
    version = _gemini_version(model)
    return version is not None and version[0] <= 2


def _gemini_object(text: str, wrap: str, name: str) -> dict:
    """A JSON object for ``args`` / ``response`` (providers.md §4.4 rules 3 and 4)."""
    if wrap == "value" and not text.strip():
        return {}
    try:
        if nests_past(text):
            raise ValueError("nested too deep to read")
        value = json.loads(text)
    except ValueError:
        return parse_tool_args(text, name) if wrap == "value" else {"output": text}
    return value if isinstance(value, dict) else {wrap: value}


class GeminiProvider(_HttpProvider):
    """Google Gemini over REST ``streamGenerateContent?alt=sse`` (providers.md §4).

    >>> gemini = GeminiProvider(api_key="k", model="gemini-3.8-flash",
    ...                         backup_models=["gemini-3.5-flash-lite"])
    >>> gemini.name
    'gemini'

    Beyond the common options: ``json_with_tools`` (``"response_format"`` or
    ``"prompt"``, how a schema travels on a call that also carries tools, §4.5;
    ``"response_format"`` applies only where the capability table says the
    model takes JSON mode with tools) and ``schema_dialect`` (``"json_schema"``,
    or ``"openapi"`` for endpoints that only know ``responseSchema``). A leading
    ``models/`` on a model id is stripped. The key travels only in the
    ``x-goog-api-key`` header.

    Thinking follows the capability table: Gemini 2.x get ``thinkingBudget``
    within the model's range, Gemini 3.x the ``thinkingLevel`` the model accepts
    (``"none"`` is its lowest level, never one it refuses), a model the table
    does not know gets no ``thinkingConfig``.
    """

    DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

    def __init__(self, *, api_key: str | None = None, model: str | None = None,
                 backup_models: list[str] | None = None,
                 base_url: str = DEFAULT_BASE_URL, config: dict | None = None,
                 retry_config: dict | None = None, headers: dict | None = None,
                 session: requests.Session | None = None,
                 sleep: Callable[[float], Any] = time.sleep,
                 json_with_tools: str = "response_format", schema_dialect: str = "json_schema",
                 understand_effort: str | None = "none", model_caps: dict | None = None):
        owner = "GeminiProvider"
        strip = (lambda m: m.strip()[len("models/"):] if isinstance(m, str)
                 and m.strip().startswith("models/")
                 else m)
        super().__init__(owner=owner, name="gemini", api_key=api_key, key_required=True,
                         model=strip(model), backup_models=[strip(m) for m in backup_models]
                         if isinstance(backup_models, list)
                         else backup_models,
                         base_url=base_url, config=config, retry_config=retry_config,
                         headers=headers, session=session, sleep=sleep,
                         example_model=GEMINI_DEFAULT_MODEL, key_variable="GEMINI_API_KEY",
                         model_caps=model_caps, understand_effort=understand_effort)
        if json_with_tools not in ("response_format", "prompt"):
            raise ValueError(f'[{owner}] json_with_tools is {json_with_tools!r}: '
                             'use "response_format" or "prompt".')
        if schema_dialect not in ("json_schema", "openapi"):
            raise ValueError(f'[{owner}] schema_dialect is {schema_dialect!r}: '
                             'use "json_schema" or "openapi".')
        self.json_with_tools = json_with_tools
        self.schema_dialect = schema_dialect
        self.capabilities = ProviderCapabilities(supports_tools=True,
                                                 supports_native_json_schema=True,
                                                 supports_streaming=True,
                                                 supports_streaming_tool_calls=True,
                                                 supports_prompt_caching=True)

    # -- request (§4.2-§4.7) ----------------------------------------------------

    def _wire(self, model: str, plan: _Plan) -> tuple[str, dict, dict]:
        url = (f"{self.base_url}/v1beta/models/{urllib.parse.quote(model, safe='/.-_~')}"
               ":streamGenerateContent?alt=sse")
        headers = {**self._base_headers(), "x-goog-api-key": self._api_key, **self.headers}
        system, contents = self._contents(plan.messages, model)
        options = plan.options
        caps = self._caps("gemini", model)
        config: dict = {}
        if options.get("maxTokens") is not None:
            config["maxOutputTokens"] = options["maxTokens"]
        self._sampling(options, config, {"temperature": "temperature", "topP": "topP",
                                         "stopSequences": "stopSequences"}, model, caps)
        effort = options.get("effort")
        if effort is not None:
            thinking = self._thinking(caps, effort)
            if thinking is None:
                self._dropped_effort(options, model)
            else:
                config["thinkingConfig"] = thinking
        if plan.json is not None:
            schema = plan.json["schema"]
            if plan.tools and (self.json_with_tools == "prompt" or not caps.json_with_tools):
                system.append(schema_prompt(schema))  # after the stable text, so it stays cacheable
            else:
                config["responseMimeType"] = "application/json"
                if self.schema_dialect == "openapi":
                    config["responseSchema"] = to_gemini_openapi_schema(schema)
                else:
                    config["responseJsonSchema"] = schema
        body: dict = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if plan.tools:
            body["tools"] = [{"functionDeclarations": [self._declaration(t) for t in plan.tools]}]
        body["generationConfig"] = config
        return url, headers, body

    def _declaration(self, tool: dict) -> dict:
        declaration = {"name": tool["name"], "description": tool["description"]}
        if self.schema_dialect == "openapi":
            converted = to_gemini_openapi_schema(tool["parameters"])
            if converted.get("type") == "OBJECT" and converted.get("properties"):
                declaration["parameters"] = converted
        else:
            declaration["parametersJsonSchema"] = tool["parameters"]
        return declaration

    @staticmethod
    def _thinking(caps: ModelCaps, effort: str) -> dict | None:
        """``thinkingConfig`` for ``effort`` as the model's row allows (never both fields, §4.6)."""
        if caps.thinking == "level":
            level = _level_for(caps, effort, _GEMINI_LEVEL_NAMES)
            return {"thinkingLevel": level} if level else None
        if caps.thinking == "budget" and caps.budget is not None:
            low, high = caps.budget
            if effort == "none":
                # 2.5 Pro cannot turn it off
                return {"thinkingBudget": 0 if caps.can_disable else low}
            return {"thinkingBudget": min(high, max(low, _GEMINI_BUDGETS[effort]))}
        return None

    def _contents(self, messages: list[dict], model: str) -> tuple[list[str], list[dict]]:
        """The system texts, for ``systemInstruction``, and the ``contents`` (providers.md §4.4).

        A plain text history item arrives as this provider's fragment of it.
        """
        system: list[str] = []
        contents: list[dict] = []
        answering = False         # the last content holds functionResponse parts
        for message in messages:
            if type(message) is _Fragment:
                answering = False
                contents.append(message)
                continue
            role = message["role"]
            if role == "system":
                system.append(message["content"])
                continue
            if role == "assistant" and not message["toolCalls"] and message["content"]:
                answering = False
                contents.append(self._plain_wire(role, message["content"]))
                continue
            if role == "user":
                answering = False
                if message["content"]:
                    # An empty text part is a 400 on Gemini, so a blank user message is left out
                    # (inferred).
                    contents.append(self._plain_wire(role, message["content"]))
            elif role == "assistant":
                answering = False
                parts: list[dict] = []
                if message["content"]:
                    parts.append({"text": message["content"]})
                for call in message["toolCalls"]:
                    part: dict = {"functionCall": {"id": call["id"], "name": call["name"],
                                                   "args": _gemini_object(call["arguments"],
                                                                          "value", call["name"])}}
                    if call.get("thoughtSignature"):
                        part["thoughtSignature"] = call["thoughtSignature"]
                    parts.append(part)
                if parts:
                    contents.append({"role": "model", "parts": parts})
            elif role == "tool":
                part = {"functionResponse": {"id": message["toolCallId"], "name": message["name"],
                                             "response": _gemini_object(message["content"],
                                                                        "output", message["name"])}}
                if answering:
                    contents[-1]["parts"].append(part)
                else:
                    contents.append({"role": "user", "parts": [part]})
                    answering = True
        if not _gemini_is_legacy(model):
            self._sign_current_turn(contents)
        return system, contents

    _history_key = "contents"

    @staticmethod
    def _plain_wire(role: str, text: str) -> dict:
        return {"role": "model" if role == "assistant" else role, "parts": [{"text": text}]}

    @staticmethod
    def _sign_current_turn(contents: list[dict]) -> None:
        """§4.7 rule 4: unsigned calls after the last plain user text get Google's placeholder."""
        start = 0
        for i in range(len(contents) - 1, -1, -1):     # from the end: only the current turn is read
            if contents[i]["role"] == "user" and any("text" in p for p in contents[i]["parts"]):
                start = i + 1
                break
        for content in contents[start:]:
            if content["role"] != "model":
                continue
            calls = [p for p in content["parts"] if "functionCall" in p]
            if calls and not calls[0].get("thoughtSignature"):
                calls[0]["thoughtSignature"] = SKIP_SIGNATURE

    # -- response (§4.8-§4.10) --------------------------------------------------

    def _new_state(self) -> dict:
        return {"calls": 0, "blocked": None}

    def _parse(self, payload: dict, state: dict) -> Iterator[dict]:
        if payload.get("error"):
            error = payload["error"]
            raise self._inband_error(error, payload,
                                     status=error.get("code") if isinstance(error, dict) else None,
                                     code=error.get("status") if isinstance(error, dict) else None)
        usage = payload.get("usageMetadata")
        if isinstance(usage, dict):
            yield {"type": "usage", "prompt_tokens": usage.get("promptTokenCount") or 0,
                   "completion_tokens": (usage.get("candidatesTokenCount") or 0)
                   + (usage.get("thoughtsTokenCount") or 0),
                   "cached_input_tokens": usage.get("cachedContentTokenCount") or 0,
                   "reasoning_tokens": usage.get("thoughtsTokenCount") or 0}
        candidates = payload.get("candidates") or []
        feedback = payload.get("promptFeedback") or {}
        if feedback.get("blockReason") and not candidates:
            state["blocked"] = feedback["blockReason"]
        if not candidates:
            return
        candidate = candidates[0] or {}
        reasoning, content, calls = "", "", []
        for part in (candidate.get("content") or {}).get("parts") or []:
            if isinstance(part.get("text"), str):
                if part.get("thought") is True:
                    reasoning += part["text"]
                else:
                    content += part["text"]
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                index = state["calls"]
                state["calls"] += 1
                calls.append({"index": index, "id": call.get("id") or f"call_{index}",
                              "name": call.get("name"),
                              "arguments": compact_json(call.get("args") or {}),
                              "thoughtSignature": part.get("thoughtSignature")})
        if reasoning:
            yield {"type": "delta", "reasoning": reasoning}
        if content:
            yield {"type": "delta", "content": content}
        if calls:
            yield {"type": "delta", "tool_calls": calls}
        vendor = candidate.get("finishReason")
        if vendor:
            if state["calls"]:
                # Gemini says STOP after a call; "stop" would drop the tool round
                finish = "tool_calls"
            elif vendor == "MAX_TOKENS":
                finish = "length"
            elif vendor in _GEMINI_FILTERED:
                finish = "content_filter"
            else:
                finish = "stop"
            yield {"type": "finish", "finish_reason": finish, "vendor_finish_reason": vendor}

    def _empty_error(self, state: dict, accumulator: _Accumulator) -> ProviderError:
        if state.get("blocked"):
            return ProviderError(f"gemini: prompt blocked ({state['blocked']})", provider=self.name,
                                 kind="content", code=str(state["blocked"]))
        return super()._empty_error(state, accumulator)

    def _classify(self, status: int | None, text: str,
                  data: Any) -> tuple[str, str | None, int | None]:
        error = data.get("error") if isinstance(data, dict) else None
        error = error if isinstance(error, dict) else {}
        code = error.get("status") if isinstance(error.get("status"), str) else None
        if status == 429:
            kind, retry_ms = _gemini_429(error)
            return kind, code, retry_ms
        if (status is None or status < 500) and _GEMINI_CONTEXT.search(text):
            return "context", code, None
        return classify_error(status=status, body=text), code, None


def _gemini_429(error: dict) -> tuple[str, int | None]:
    """providers.md §4.10: a Gemini 429 is classified from its details, not its wording."""
    details = [d for d in error.get("details") or [] if isinstance(d, dict)]
    for detail in details:
        if (str(detail.get("@type", "")).endswith("google.rpc.RetryInfo")
                and detail.get("retryDelay")):
            match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)s\s*", str(detail["retryDelay"]))
            if match:
                return "rate", round(float(match.group(1)) * 1000)
    quota_ids = [str(v.get("quotaId", "")) for d in details
                 if str(d.get("@type", "")).endswith("google.rpc.QuotaFailure")
                 for v in d.get("violations") or [] if isinstance(v, dict)]
    if quota_ids and all("PerDay" in q for q in quota_ids):
        return "quota", None
    return "rate", None


# 8. OpenAICompatibleProvider #################################################

_OPENAI_PRESETS = {"openai": "https://api.openai.com/v1",
                   "openrouter": "https://openrouter.ai/api/v1",
                   "deepseek": "https://api.deepseek.com"}
_FLAGGED = re.compile(r"\bflagged\b|moderation", re.I)
_OPENAI_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls",
                  "function_call": "tool_calls", "content_filter": "content_filter"}
APIS = ("auto", "chat", "responses")
# The Responses API: openai-python types/responses/ (response_create_params.py,
# response_input_item_param.py, response_stream_event.py). A failed response's error code as
# the HTTP status it stands for (response_error.py), so it classifies like the same failure.
_RESPONSES_ERROR_STATUS = {"server_error": 500, "rate_limit_exceeded": 429,
                           "vector_store_timeout": 504}
_RESPONSES_POLICY = ("invalid_prompt", "bio_policy", "image_content_policy_violation")
# The fields of a reasoning item sent back (response_reasoning_item_param.py).
_REASONING_ITEM_KEYS = ("type", "id", "summary", "encrypted_content")
MIN_OUTPUT_TOKENS = 16         # "Invalid 'max_output_tokens': ... Expected a value >= 16"


def _is_openai_reasoning(item: Any) -> bool:
    """A Responses reasoning item kept in ``reasoning_details`` (replayed there only)."""
    return isinstance(item, dict) and item.get("type") == "reasoning" \
        and isinstance(item.get("id"), str) and isinstance(item.get("encrypted_content"), str)

# How a structured reply is asked for, most enforced first; a server that refuses one form gets the
# next (docs/guide/providers.md, "Local models"). "json_object_schema" is llama-cpp-python's
# dialect, {"type": "json_object", "schema": ...}, enforced by its grammar; the prompt has it too.
STRUCTURED_FORMS = ("json_schema", "json_object_schema", "json_object", "prompt")
_FALLBACK_FORM = {"json_schema": "json_object_schema", "json_object_schema": "prompt",
                  "json_object": "prompt"}


@dataclasses.dataclass(frozen=True)
class ServerProfile:
    """What an OpenAI-compatible server takes: its structured-output form, whether it streams tool
    calls, whether a stream carries usage (``stream_options.include_usage``), whether it takes
    ``tool_choice``, whether a tool round answered in text keeps its text."""
    structured_output: str
    streams_tool_calls: bool = True
    stream_usage: bool = True
    tool_choice: bool = True
    tool_round_text: bool = True


# Each row as measured or documented (docs/guide/providers.md, "Local models").
SERVER_PROFILES: dict[str, ServerProfile] = {
    "openai": ServerProfile("json_schema"),
    "openrouter": ServerProfile("json_schema"),
    "deepseek": ServerProfile("json_object"),
    # llama.cpp's llama-server with --jinja: json_schema becomes a grammar; usage (with cached
    # tokens) arrives in a last chunk whose choices are empty.
    "llama.cpp": ServerProfile("json_schema"),
    # llama-cpp-python[server] 0.3.36, checked against the real server: response_format.type is
    # "text" or "json_object" (json_schema is an HTTP 500); "auto" tool choice refuses to stream;
    # stream_options is ignored (no stream usage); with --chat_format chatml-function-calling, a
    # tool round the model answers in text comes back empty (its grammar allows only a call or
    # the end after "message:").
    "llama-cpp-python": ServerProfile("json_object_schema", streams_tool_calls=False,
                                      stream_usage=False, tool_round_text=False),
    "ollama": ServerProfile("json_schema"),
    "vllm": ServerProfile("json_schema"),
    "lm-studio": ServerProfile("json_schema"),
}

# The output cap of each call kind when none is configured: a judgement is short, a reply longer.
DEFAULT_OUTPUT_CAPS: dict[str, int | None] = {"understand": 1024, "speak": 4096, "default": 4096}

# A refusal of one request parameter, as servers word it: llama-cpp-python's pydantic 500
# ("literal_error", "Input should be 'text' or 'json_object'"), "extra inputs are not permitted".
_REFUSED_WORDS = re.compile(r"not (supported|permitted|allowed|implemented)|unsupported|unknown|"
                            r"unrecognized|invalid|validation error|literal_error|extra_forbidden|"
                            r"input should be|must be|requires", re.I)
_REFUSED_PARAMETERS = {"response_format": re.compile(r"response_format|json_schema", re.I),
                       "tools": re.compile(r"\btools param", re.I),    # llama-server, no --jinja
                       "tool_choice": re.compile(r"tool[_ ]choice", re.I),
                       "stream_options": re.compile(r"stream_options|include_usage", re.I)}


def _empty_tool_stream(error: ProviderError, request: GenerateRequest) -> bool:
    """Whether a call with tools came back with nothing in it (see _after_error, _attempt)."""
    return bool(request.tools) and error.kind == "overload" and error.status is None \
        and str(error).endswith(": completed with no content")


def _refused_parameter(status: int | None, text: str) -> str | None:
    """The request parameter a failed response says the server does not take, or None."""
    if status is None or status < 400 or not _REFUSED_WORDS.search(text):
        return None
    for parameter, mention in _REFUSED_PARAMETERS.items():
        if mention.search(text):
            return parameter
    return None


class OpenAICompatibleProvider(_HttpProvider):
    """Any endpoint speaking OpenAI's chat-completions dialect (providers.md §5).

    ``name`` (default ``"openai"``) picks the presets: ``openai``, ``openrouter``
    and ``deepseek`` have a default ``base_url`` and need a key; any other name
    needs ``base_url`` and may pass ``api_key=None`` (a local server). Beyond the
    common options: ``structured_output`` (``"json_schema"``, or ``"json_object"``
    with the schema in the prompt; DeepSeek's default), ``json_with_tools``,
    ``effort_dialect``, ``organization``, ``site_url`` / ``site_name`` and
    ``provider_order`` (OpenRouter), ``include_usage`` and ``capabilities``.

    ``server`` names the server behind ``base_url`` (a key of ``SERVER_PROFILES``: ``"llama.cpp"``,
    ``"llama-cpp-python"``, ``"ollama"``, ``"vllm"``, ``"lm-studio"``; the presets pick their own),
    which fixes the structured-output form, whether tool rounds stream and whether usage is asked on
    a stream. With no ``server`` the provider learns: a response that says ``response_format``,
    ``tool_choice`` or ``stream_options`` is not supported is ``kind="invalid"`` (never retried as
    overload), the provider tries once more with the next form (``json_schema``, then
    ``json_object_schema``, then ``prompt``) or without the parameter, keeps what worked, and logs
    one warning naming the setting that makes it permanent.

    ``output_caps`` (default ``DEFAULT_OUTPUT_CAPS``: understand 1024, speak 4096, any other call
    4096) bounds every reply when neither ``config["maxTokens"]`` nor the call sets a cap; a key set
    to ``None`` sends no cap for that kind. A reply cut at the cap is ``kind="length"``.

    The capability table decides what a model gets: ``reasoning_effort`` only on
    reasoning models, at a level the model accepts; ``temperature`` / ``top_p``
    not on gpt-5.x and the o-series. On OpenAI's own endpoint an unknown model
    gets nothing optional; OpenRouter and local servers get what is configured.
    A ``refusal`` (streamed or whole) and an OpenRouter moderation 403 are a
    ``ProviderError(kind="content")``.

    >>> ollama = OpenAICompatibleProvider(name="ollama", base_url="http://localhost:11434/v1",
    ...                                   api_key=None, model="llama3.3")
    >>> ollama.name, ollama.capabilities.supports_prompt_caching
    ('ollama', False)
    """

    def __init__(self, *, model: str | None = None, api_key: str | None = None,
                 name: str = "openai", base_url: str | None = None,
                 backup_models: list[str] | None = None, config: dict | None = None,
                 retry_config: dict | None = None, headers: dict | None = None,
                 session: requests.Session | None = None,
                 sleep: Callable[[float], Any] = time.sleep, structured_output: str | None = None,
                 json_with_tools: str = "response_format", effort_dialect: str | None = None,
                 organization: str | None = None, site_url: str | None = None,
                 site_name: str | None = None, provider_order: list[str] | None = None,
                 include_usage: bool = True,
                 capabilities: dict | None = None, model_caps: dict | None = None,
                 understand_effort: str | None = "none", api: str = "auto",
                 prompt_cache_key: str | None = "auto", server: str | None = None,
                 output_caps: dict | None = None):
        owner = "OpenAICompatibleProvider"
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f'[{owner}] name is empty: pass one, e.g. '
                             'name="openrouter" or name="ollama".')
        if base_url is None:
            base_url = _OPENAI_PRESETS.get(name)
            if base_url is None:
                raise ValueError(f'[{owner}] base_url is missing for name="{name}": only openai, '
                                 'openrouter and deepseek have a preset. Pass one, e.g. '
                                 'base_url="http://localhost:11434/v1".')
        super().__init__(owner=owner, name=name, api_key=api_key,
                         key_required=name in _OPENAI_PRESETS, model=model,
                         backup_models=backup_models, base_url=base_url, config=config,
                         retry_config=retry_config, headers=headers, session=session, sleep=sleep,
                         example_model="gpt-4.1-mini", key_variable=f"{name.upper()}_API_KEY",
                         model_caps=model_caps, understand_effort=understand_effort)
        if server is None and name in SERVER_PROFILES:
            server = name
        if server is not None and server not in SERVER_PROFILES:
            raise ValueError(f"[{owner}] server is {server!r}: use one of "
                             f'{", ".join(SERVER_PROFILES)}, or leave it out to learn what the '
                             "server takes.")
        profile = SERVER_PROFILES[server] if server is not None else ServerProfile("json_schema")
        # Learning is for a server nobody named: a chosen server or form is kept as given.
        self._learns = {"response_format": server is None and structured_output is None,
                        "tool_choice": server is None, "stream_options": server is None,
                        "streamed_tools": server is None}
        if structured_output is None:
            structured_output = profile.structured_output
        if structured_output not in STRUCTURED_FORMS:
            raise ValueError(f'[{owner}] structured_output is {structured_output!r}: use one of '
                             f'{", ".join(STRUCTURED_FORMS)}.')
        self.server = server
        self.profile = profile
        self.output_caps = _check_output_caps(owner, output_caps)
        if json_with_tools not in ("response_format", "prompt"):
            raise ValueError(f'[{owner}] json_with_tools is {json_with_tools!r}: '
                             'use "response_format" or "prompt".')
        if effort_dialect is None:
            effort_dialect = name if name in ("openrouter", "deepseek") else "openai"
        if effort_dialect not in ("openai", "openrouter", "deepseek", "off"):
            raise ValueError(f'[{owner}] effort_dialect is {effort_dialect!r}: use "openai", '
                             '"openrouter", "deepseek" or "off".')
        if provider_order is not None and (isinstance(provider_order, str)
                                           or not all(isinstance(p, str) for p in provider_order)):
            raise ValueError(f'[{owner}] provider_order must be a list of provider names, e.g. '
                             '["anthropic"].')
        if api not in APIS:
            raise ValueError(f'[{owner}] api is {api!r}: use "auto" (the capability table '
                             'picks, per call), "chat" (chat completions) or "responses" '
                             "(the Responses API).")
        key = prompt_cache_key
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 64):
            raise ValueError(f'[{owner}] prompt_cache_key is {key!r}: pass "auto" (a key made '
                             "from the system text), a string of at most 64 characters, or "
                             "None to send none.")
        self.api = api
        self.prompt_cache_key = prompt_cache_key
        self.structured_output = structured_output
        self.json_with_tools = json_with_tools
        self.effort_dialect = effort_dialect
        self.organization = organization
        self.site_url = site_url
        self.site_name = site_name
        self.provider_order = list(provider_order) if provider_order is not None else None
        self.include_usage = include_usage
        flags = {"supports_tools": True,
                 "supports_native_json_schema": structured_output == "json_schema",
                 "supports_streaming": True,
                 "supports_streaming_tool_calls": profile.streams_tool_calls,
                 "supports_prompt_caching": name in _OPENAI_PRESETS}
        for key, value in (capabilities or {}).items():
            if key not in flags:
                raise ValueError(f'[{owner}] capabilities has an unknown flag "{key}": '
                                 f'use {", ".join(flags)}.')
            flags[key] = bool(value)
        self.capabilities = ProviderCapabilities(**flags)
        # What this provider learned its server refuses (a response_format form, tool_choice, ...).
        self._learned: dict[str, Any] = {}

    _cap_setting = 'output_caps={"understand": ..., "speak": ...} or config={"maxTokens": ...}'

    def _plan(self, request: GenerateRequest) -> _Plan:
        plan = super()._plan(request)
        if plan.options.get("maxTokens") is None:
            kind = request.schema_name if request.schema_name in self.output_caps else "default"
            if self.output_caps[kind] is not None:
                plan.options["maxTokens"] = self.output_caps[kind]
        return plan

    def _structured_form(self) -> str:
        return self._learned.get("response_format", self.structured_output)

    def _attempt(self, plan: _Plan, model: str, streaming: bool) -> Generator[GenerationChunk, None,
                                                                              _Failure | None]:
        """One attempt; a tool round that came back empty from a server that loses a text reply
        in a tool round is asked once more for the text, without the tools."""
        failure = yield from super()._attempt(plan, model, streaming)
        if failure is not None and self._lost_tool_round_text(failure, plan):
            # The model chose to answer in text (llama-cpp-python's "auto" tool choice picked
            # "message:"), and the server dropped the text: ask for it with no tools offered,
            # which the server answers as a plain (or structured) call.
            log.info("[%s] the tool round came back empty (the server drops a text reply when "
                     "tools are offered); asking once more without the tools", self.name)
            failure = yield from super()._attempt(dataclasses.replace(plan, tools=[]), model,
                                                  streaming)
        return failure

    def _lost_tool_round_text(self, failure: _Failure, plan: _Plan) -> bool:
        """Whether a failed attempt is a whole tool round answered with nothing, from a server
        that loses a text reply there (its profile, or a learned llama-cpp-python)."""
        loses = not self.profile.tool_round_text or self._learned.get("streamed_tools") is False
        return loses and not failure.streamed and _empty_tool_stream(failure.error, plan.request)

    def _after_error(self, failure: _Failure, request: GenerateRequest, model: str, attempt: int,
                     backup: str | None) -> Literal["retry", "backup"]:
        """A refused parameter is learned once and the call tried again without it; else §3.8."""
        error = failure.error
        parameter = error.code if error.kind == "invalid" and not failure.streamed else None
        if _empty_tool_stream(error, request):
            # llama-cpp-python raises "Automatic streaming tool choice is not supported" inside a
            # 200 event stream, which then carries nothing: the round goes whole from now on.
            parameter = "streamed_tools"
        if parameter is not None and self._learns.get(parameter) and self._learn(parameter, error):
            return "retry"
        return super()._after_error(failure, request, model, attempt, backup)

    def _learn(self, parameter: str, error: ProviderError) -> bool:
        """Step past a parameter the server refused: the next structured form, or leave it out."""
        if parameter == "response_format":
            current = self._structured_form()
            following = _FALLBACK_FORM.get(current)
            if following is None:
                return False
            self._learned["response_format"] = following
            setting = f'structured_output="{following}"'
            what = f'response_format "{current}"; replies now ask for "{following}"'
        else:
            if self._learned.get(parameter) is False:
                return False
            self._learned[parameter] = False
            if parameter == "streamed_tools":
                # The error inside its event stream leaves llama-cpp-python's connection open
                # but dead: the next request on it gets no answer. Start on a new connection.
                self.session.close()
            setting = {"tool_choice": 'server="..."', "stream_options": "include_usage=False",
                       "streamed_tools": 'server="llama-cpp-python"'}[parameter]
            what = "a streamed tool round (an empty stream); tool rounds now go whole" \
                if parameter == "streamed_tools" else f"{parameter}; it is no longer sent"
        log.warning("[%s] the server at %s refused %s (%s). To make this permanent and skip the "
                    "failed request, pass %s (or the server=... of your server: "
                    'docs/guide/providers.md, "Local models").', self.name, self.base_url, what,
                    str(error)[:200], setting)
        return True

    def _wire(self, model: str, plan: _Plan) -> tuple[str, dict, dict]:
        if self._endpoint(model, plan) == "responses":
            return self._responses_wire(model, plan)
        url = f"{self.base_url}/chat/completions"
        headers = self._openai_headers()
        messages = self._wire_messages(plan)
        # A server that cannot stream tool calls gets a tool round whole, read the same way.
        stream = not (plan.tools and (not self.profile.streams_tool_calls
                                      or self._learned.get("streamed_tools") is False))
        body: dict = {"model": model, "messages": messages, "stream": stream}
        if stream and self.include_usage and self.profile.stream_usage \
                and self._learned.get("stream_options") is not False:
            body["stream_options"] = {"include_usage": True}
        options = plan.options
        # Only OpenAI's own endpoint gets the conservative row for an unknown model; OpenRouter
        # drops what a model does not support, and a local server takes what it is configured with.
        caps = self._caps("openai", model, UNKNOWN_MODEL if self.name == "openai" else PASS_THROUGH)
        if options.get("maxTokens") is not None:
            tokens_key = "max_completion_tokens" if self.name == "openai" else "max_tokens"
            body[tokens_key] = options["maxTokens"]
        self._sampling(options, body,
                       {"temperature": "temperature", "topP": "top_p", "stopSequences": "stop"},
                       model, caps)
        body.update(self._effort(options, model, caps))
        if plan.tools and caps.endpoint != "chat" and self.effort_dialect == "openai":
            self._no_effort_beside_tools(body, model)
        if plan.tools:
            body["tools"] = [{"type": "function", "function": dict(t)} for t in plan.tools]
            # OpenAI's default with tools, said aloud: llama-cpp-python drops the tools without it.
            if self.profile.tool_choice and self._learned.get("tool_choice") is not False:
                body["tool_choice"] = "auto"
        if plan.json is not None:
            schema = plan.json["schema"]
            form = self._structured_form()
            if plan.tools and self.json_with_tools == "prompt":
                messages.append({"role": "system", "content": schema_prompt(schema)})  # §5.4 rule 1
            elif form == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": plan.json["name"], "schema": schema,
                    "strict": is_strict_schema(schema)}}
            else:
                if form != "prompt":
                    body["response_format"] = {"type": "json_object"} \
                        if form == "json_object" else {"type": "json_object", "schema": schema}
                # last: prefix caches
                messages.append({"role": "system", "content": schema_prompt(schema)})
        if self.provider_order is not None:
            body["provider"] = {"order": list(self.provider_order), "allow_fallbacks": True}
        cache_key = self._cache_key(plan)
        if cache_key is not None:
            body["prompt_cache_key"] = cache_key
        return url, headers, body

    def _openai_headers(self) -> dict:
        headers = self._base_headers()
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        if self.organization:
            headers["OpenAI-Organization"] = self.organization
        if self.site_url:
            headers["HTTP-Referer"] = self.site_url
        if self.site_name:
            headers["X-Title"] = self.site_name
        headers.update(self.headers)
        return headers

    def _endpoint(self, model: str, plan: _Plan) -> str:
        """``"chat"`` or ``"responses"`` for this call: as forced by ``api``, else as the model's
        row says on OpenAI's own endpoint; every other server speaks chat completions."""
        if self.api != "auto":
            return self.api
        if self.name != "openai":
            return "chat"
        endpoint = self._caps("openai", model).endpoint
        if endpoint == "responses" or (endpoint == "tools" and plan.tools):
            return "responses"
        return "chat"

    def _no_effort_beside_tools(self, body: dict, model: str) -> None:
        """Chat completions takes function tools on these models only with effort ``"none"``."""
        if body.get("reasoning_effort") != "none":
            self._warn_once(("tools-effort", model), '[%s] %s takes function tools on chat '
                            'completions only with reasoning_effort "none", so this call thinks '
                            'not. Pass api="auto" or api="responses" to reason beside tools.',
                            self.name, model)
        body["reasoning_effort"] = "none"

    def _cache_key(self, plan: _Plan) -> str | None:
        """OpenAI's ``prompt_cache_key``: one per system text (an agent's stable prefix), so calls
        that share it reach the same cache; the key given to the provider instead, or none."""
        if self.prompt_cache_key is None or self.name != "openai":
            return None
        if self.prompt_cache_key != "auto":
            return self.prompt_cache_key
        system = plan.request.system
        if not isinstance(system, str) or not system.strip():
            return None
        return "falai-" + hashlib.sha256(system.encode("utf-8")).hexdigest()[:24]

    _history_key = "messages"

    def _history_key_of(self, body: dict) -> str | None:
        return "input" if "input" in body else "messages"

    @staticmethod
    def _plain_wire(role: str, text: str) -> dict:
        return {"role": role, "content": text}

    def _wire_messages(self, plan: _Plan) -> list[dict]:
        """The plan's messages in wire form: a fragment is wire already,
        and the kept lead's run of them is copied whole (in C) rather than looked at one by one."""
        return _spliced(plan.messages, plan.lead,
                        lambda m: m if type(m) is _Fragment else self._message(m), plan.lead)

    def _message(self, message: dict) -> dict:
        role = message["role"]
        if role == "tool":
            return {"role": "tool", "tool_call_id": message["toolCallId"],
                    "content": message["content"]}
        if role != "assistant":
            return {"role": role, "content": message["content"]}
        # "" rather than null: gateways refuse null
        out: dict = {"role": "assistant", "content": message["content"]}
        if message["toolCalls"]:
            out["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in message["toolCalls"]]
        if self.name == "openai":
            # OpenAI's own endpoint takes no reasoning replay (review O7): extra keys are refused
            return out
        if message.get("reasoning"):
            out["reasoning_content"] = message["reasoning"]
        details = message.get("reasoningDetails")
        if isinstance(details, list):
            # Anthropic's signed thinking blocks and OpenAI's encrypted reasoning items never go to
            # another vendor: only the model that wrote them can read them.
            details = [d for d in details
                       if not _is_anthropic_thinking(d) and not _is_openai_reasoning(d)]
            if details:
                out["reasoning_details"] = details
        elif details is not None:
            out["reasoning_details"] = details
        return out

    def _effort(self, options: dict, model: str, caps: ModelCaps) -> dict:
        """providers.md §5.5; in the openai dialect, only what the model's row accepts."""
        effort = options.get("effort")
        if effort is None or self.effort_dialect == "off":
            return {}
        if options.get("quiet") and (self.effort_dialect != "openai" or caps == PASS_THROUGH):
            return {}       # the understand default only goes to a model the table knows
        if self.effort_dialect == "openai":
            level = _level_for(caps, effort, {e: e for e in ("low", "medium", "high")}) \
                if caps.thinking == "reasoning" else None
            if level is None:
                self._dropped_effort(options, model)
                return {}
            return {"reasoning_effort": level}
        if self.effort_dialect == "openrouter":
            return {"reasoning": {"effort": "xhigh" if effort == "max" else effort}}
        if self.effort_dialect == "deepseek":
            if effort == "none":
                return {"thinking": {"type": "disabled"}}
            if effort in ("low", "medium"):
                return {"thinking": {"type": "enabled"}, "reasoning_effort": effort}
            return {"thinking": {"type": "enabled"}}
        return {}

    # -- the Responses API (POST {base_url}/responses) ---------------------------

    def _responses_wire(self, model: str, plan: _Plan) -> tuple[str, dict, dict]:
        """One Responses request: ``instructions`` and ``input`` items, flat function tools,
        ``text.format``, ``reasoning.effort``. Stateless (``store: false``): a reasoning model's
        encrypted reasoning comes back in the reply and is replayed in the next tool round."""
        options = plan.options
        caps = self._caps("openai", model, UNKNOWN_MODEL if self.name == "openai" else PASS_THROUGH)
        instructions, items = self._responses_input(plan, model)
        body: dict = {"model": model}
        if instructions:
            body["instructions"] = instructions
        body["input"] = items
        body["stream"] = True
        body["store"] = False
        if caps.thinking == "reasoning":
            body["include"] = ["reasoning.encrypted_content"]
        if options.get("maxTokens") is not None:
            body["max_output_tokens"] = max(MIN_OUTPUT_TOKENS, options["maxTokens"])
        self._sampling({k: v for k, v in options.items() if k != "stopSequences"}, body,
                       {"temperature": "temperature", "topP": "top_p"}, model, caps)
        if options.get("stopSequences"):
            self._warn_once(("stop", model), "[%s] stopSequences are not sent to %s: the "
                            'Responses API has no stop parameter. Pass api="chat" to send them.',
                            self.name, model)
        effort = self._effort(options, model, caps) if self.effort_dialect != "off" else {}
        level = effort.get("reasoning_effort") or (effort.get("reasoning") or {}).get("effort")
        if level is not None:
            body["reasoning"] = {"effort": level}
        if plan.tools:
            body["tools"] = [{"type": "function", "name": t["name"],
                              "description": t["description"], "parameters": t["parameters"],
                              "strict": is_strict_schema(t["parameters"])} for t in plan.tools]
        if plan.json is not None:
            schema = plan.json["schema"]
            if plan.tools and self.json_with_tools == "prompt":
                items.append({"role": "system", "content": schema_prompt(schema)})
            elif self.structured_output == "json_schema":
                body["text"] = {"format": {"type": "json_schema", "name": plan.json["name"],
                                           "schema": schema, "strict": is_strict_schema(schema)}}
            else:
                body["text"] = {"format": {"type": "json_object"}}
                items.append({"role": "system", "content": schema_prompt(schema)})
        cache_key = self._cache_key(plan)
        if cache_key is not None:
            body["prompt_cache_key"] = cache_key
        return f"{self.base_url}/responses", self._openai_headers(), body

    def _responses_input(self, plan: _Plan, model: str) -> tuple[str, list[dict]]:
        """(``instructions``, ``input``): the leading system text, then the items of each message.
        A plain text fragment is the same ``{"role", "content"}`` dict on both endpoints."""
        messages = plan.messages
        instructions = ""
        if messages and messages[0]["role"] == "system" and type(messages[0]) is not _Fragment:
            instructions, messages = messages[0]["content"], messages[1:]
        runs = _spliced(messages, plan.lead,
                        lambda m: [m] if type(m) is _Fragment else self._items(m, model),
                        [plan.lead])
        return instructions, [item for run in runs for item in run]

    @staticmethod
    def _items(message: dict, model: str) -> list[dict]:
        """One normalized message as Responses input items (response_input_item_param.py)."""
        role = message["role"]
        text = message["content"]
        if role == "tool":
            return [{"type": "function_call_output", "call_id": message["toolCallId"],
                     "output": text}]
        if role != "assistant":
            return [{"role": role, "content": text}] if text or role == "user" else []
        items: list[dict] = []
        details = message.get("reasoningDetails")
        if message["toolCalls"] and isinstance(details, list):
            # The encrypted reasoning of this tool round, to the model that wrote it only: another
            # model cannot read it (the same rule as Anthropic's signed thinking blocks).
            items.extend({k: d[k] for k in _REASONING_ITEM_KEYS if k in d} for d in details
                         if _is_openai_reasoning(d) and d.get("model") == model)
        if text:
            items.append({"role": "assistant", "content": text})
        items.extend({"type": "function_call", "call_id": call["id"], "name": call["name"],
                      "arguments": call["arguments"]} for call in message["toolCalls"])
        return items

    def _parse_responses(self, payload: dict, state: dict) -> Iterator[dict]:
        """One Responses stream event (response_stream_event.py), or a whole ``response`` object."""
        kind = payload.get("type")
        if kind == "error":
            raise self._inband_error(payload, payload, code=payload.get("code"))
        if payload.get("object") == "response":
            yield from self._whole_response(payload, state)
            return
        seen = state.setdefault("items", {})      # output_index -> what its events already carried
        index = payload.get("output_index")
        delta = payload.get("delta")
        if kind == "response.output_text.delta" and delta:
            seen.setdefault(index, set()).add("text")
            yield {"type": "delta", "content": str(delta)}
        elif kind == "response.refusal.delta" and delta:
            seen.setdefault(index, set()).add("refusal")
            state.setdefault("refusal", []).append(str(delta))     # joined once, in _refusal
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta") \
                and delta:
            seen.setdefault(index, set()).add("reasoning")
            yield {"type": "delta", "reasoning": str(delta)}
        elif kind == "response.output_item.added":
            yield from self._output_item(payload.get("item") or {}, index, state)
        elif kind == "response.function_call_arguments.delta" and delta:
            seen.setdefault(index, set()).add("arguments")
            yield {"type": "delta", "tool_calls": [{"index": index, "arguments": str(delta)}]}
        elif kind == "response.output_item.done":
            yield from self._output_item(payload.get("item") or {}, index, state, done=True)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            yield from self._whole_response(payload.get("response") or {}, state)

    def _output_item(self, item: dict, index: Any, state: dict,
                     done: bool = False) -> Iterator[dict]:
        """An output item as it opens (``added``) or once complete (``done``): only what its
        delta events did not already carry."""
        seen = state.setdefault("items", {}).setdefault(index, set())
        kind = item.get("type")
        if kind == "function_call":
            call: dict = {"index": index}
            if "call" not in seen:
                seen.add("call")
                call.update(id=item.get("call_id"), name=item.get("name"))
            if done and "arguments" not in seen and item.get("arguments"):
                seen.add("arguments")
                call["arguments"] = str(item["arguments"])
            if len(call) > 1:
                state["called"] = True
                yield {"type": "delta", "tool_calls": [call]}
        elif kind == "message" and done:
            parts = [p for p in item.get("content") or [] if isinstance(p, dict)]
            if "text" not in seen:
                seen.add("text")
                text = "".join(str(p.get("text") or "") for p in parts
                               if p.get("type") == "output_text")
                if text:
                    yield {"type": "delta", "content": text}
            if "refusal" not in seen:
                seen.add("refusal")
                refusal = "".join(str(p.get("refusal") or "") for p in parts
                                  if p.get("type") == "refusal")
                if refusal:
                    state.setdefault("refusal", []).append(refusal)
        elif kind == "reasoning" and done and "kept" not in seen:
            seen.add("kept")
            summary = [p for p in item.get("summary") or [] if isinstance(p, dict)]
            text = "".join(str(p.get("text") or "") for p in summary)
            if text and "reasoning" not in seen:
                yield {"type": "delta", "reasoning": text}
            if isinstance(item.get("encrypted_content"), str) and isinstance(item.get("id"), str):
                kept = state.setdefault("reasoning_items", [])
                kept.append({**{k: item[k] for k in _REASONING_ITEM_KEYS if k in item},
                             "model": state.get("model")})
                yield {"type": "delta", "reasoning_details": [dict(d) for d in kept]}

    def _whole_response(self, response: dict, state: dict) -> Iterator[dict]:
        """The final ``response`` object: the items the stream did not carry, usage, the finish."""
        if response.get("status") == "failed" or isinstance(response.get("error"), dict):
            raise self._failed(response)
        for index, item in enumerate(response.get("output") or []):
            if isinstance(item, dict):
                yield from self._output_item(item, index, state, done=True)
        usage = response.get("usage")
        if isinstance(usage, dict):
            inputs = usage.get("input_tokens_details") or {}
            outputs = usage.get("output_tokens_details") or {}
            event = {"type": "usage", "prompt_tokens": usage.get("input_tokens") or 0,
                     "completion_tokens": usage.get("output_tokens") or 0,
                     "cached_input_tokens": inputs.get("cached_tokens") or 0,
                     "reasoning_tokens": outputs.get("reasoning_tokens") or 0}
            if inputs.get("cache_write_tokens"):
                event["cache_write_tokens"] = inputs["cache_write_tokens"]
            yield event
        status = response.get("status")
        if status == "completed":
            finish = "tool_calls" if state.get("called") else "stop"
            yield {"type": "finish", "finish_reason": finish, "vendor_finish_reason": status}
        elif status == "incomplete":
            reason = str((response.get("incomplete_details") or {}).get("reason"))
            ended = {"max_output_tokens": "length", "content_filter": "content_filter"}.get(reason)
            if ended is not None:
                yield {"type": "finish", "finish_reason": ended, "vendor_finish_reason": reason}

    def _failed(self, response: dict) -> ProviderError:
        """A failed response's error, classified like the HTTP status its code stands for; a
        refused prompt is kind ``content``."""
        error = response.get("error") or {}
        raw = error.get("code") if isinstance(error, dict) else None
        code = raw if isinstance(raw, str) else None
        if code in _RESPONSES_POLICY:
            message = str(error.get("message") or "")[:300]
            text = f"{self.name}: the prompt was refused ({code}): {message}"
            return ProviderError(self._scrub(text), provider=self.name, kind="content", code=code)
        status = _RESPONSES_ERROR_STATUS.get(code, 400) if code is not None else None
        return self._inband_error(error, response, status=status, code=code)

    def _parse(self, payload: dict, state: dict) -> Iterator[dict]:
        """providers.md §5.6 (a whole ``chat.completion`` object is read the same way,
        §3.7 rule 8).
        """
        kind = payload.get("type")
        # A Responses event (its error event names no nested "error"), or a whole response (5.7).
        if (isinstance(kind, str) and (kind.startswith("response.")
                                       or (kind == "error" and "error" not in payload))) \
                or payload.get("object") == "response":
            yield from self._parse_responses(payload, state)
            return
        if payload.get("error"):
            error = payload["error"]
            code = error.get("code") if isinstance(error, dict) else None
            raise self._inband_error(error, payload, status=code if isinstance(code, int) else None,
                                     code=code if isinstance(code, str) else None)
        usage = payload.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if cached is None:
                cached = usage.get("prompt_cache_hit_tokens")
            thought = usage.get("completion_tokens_details")
            thought = thought if isinstance(thought, dict) else {}
            yield {"type": "usage", "prompt_tokens": usage.get("prompt_tokens") or 0,
                   "completion_tokens": usage.get("completion_tokens") or 0,
                   "cached_input_tokens": cached or 0,
                   "reasoning_tokens": thought.get("reasoning_tokens") or 0}
        choices = payload.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = choice.get("delta") or choice.get("message") or {}
        event: dict = {"type": "delta"}
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            # openai-python chat_completion_chunk.py ChoiceDelta.refusal: the model declined.
            state.setdefault("refusal", []).append(delta["refusal"])   # joined once, in _refusal
        if isinstance(delta.get("content"), str) and delta["content"]:
            event["content"] = delta["content"]
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            event["reasoning"] = reasoning
        if isinstance(delta.get("reasoning_details"), list):
            event["reasoning_details"] = delta["reasoning_details"]
        calls = []
        for position, call in enumerate(delta.get("tool_calls") or []):
            function = call.get("function") or {}
            index = call.get("index")
            calls.append({"index": index if isinstance(index, int) else position,
                          "id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments")})
        if calls:
            event["tool_calls"] = calls
        if len(event) > 1:
            yield event
        vendor = choice.get("finish_reason")
        if vendor in _OPENAI_FINISH:
            yield {"type": "finish", "finish_reason": _OPENAI_FINISH[vendor],
                   "vendor_finish_reason": vendor}

    def _refusal(self, state: dict, accumulator: _Accumulator) -> ProviderError | None:
        if not state.get("refusal"):
            return None
        refusal = "".join(state["refusal"])
        return ProviderError(self._scrub(f"{self.name}: the model refused: {refusal[:300]}"),
                             provider=self.name, kind="content", code="refusal")

    def _classify(self, status: int | None, text: str,
                  data: Any) -> tuple[str, str | None, int | None]:
        error = data.get("error") if isinstance(data, dict) else None
        code = None
        if isinstance(error, dict):
            for key in ("code", "type"):
                if isinstance(error.get(key), str):
                    code = error[key]
                    break
            # OpenRouter's moderation block: 403 with metadata.reasons / flagged_input
            # (openrouter.ai/docs/api/errors). A flagged input is content, not a bad key.
            metadata = error["metadata"] if isinstance(error.get("metadata"), dict) else {}
            if status == 403 and ("flagged_input" in metadata or "reasons" in metadata
                                  or _FLAGGED.search(str(error.get("message") or ""))):
                return "content", code or "moderation", None
        refused = _refused_parameter(status, text)
        if refused is not None:
            # Not overload, whatever the status (llama-cpp-python answers a refused parameter with
            # a 500): the same request fails the same way. The code names it for _after_error.
            return "invalid", refused, None
        return classify_error(status=status, body=text), code, None


def _check_output_caps(owner: str, caps: Any) -> dict[str, int | None]:
    table = dict(DEFAULT_OUTPUT_CAPS)
    if caps is None:
        return table
    if not isinstance(caps, dict):
        raise ValueError(f'[{owner}] output_caps must be a dict of call kind to tokens, e.g. '
                         '{"understand": 512, "speak": 2048}.')
    for kind, value in caps.items():
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"[{owner}] output_caps has a key {kind!r}: use a call kind such as "
                             '"understand", "speak" or "default".')
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            raise ValueError(f'[{owner}] output_caps["{kind}"] is {value!r}: pass a positive '
                             "integer, or None to send no cap for that kind.")
        table[kind] = value
    return table


# 9. AnthropicProvider ########################################################

_ANTHROPIC_BUDGETS = {"low": 2048, "medium": 8192, "high": 16384, "max": 32768}
_ANTHROPIC_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                     "max_tokens": "length", "refusal": "content_filter"}
# The HTTP status each Anthropic error type is documented with, so an in-band
# `error` event classifies like the same failure over HTTP (providers.md §6.5).
_ANTHROPIC_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401,
                           "billing_error": 402, "permission_error": 403, "not_found_error": 404,
                           "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                           "timeout_error": 504, "overloaded_error": 529}


def _signed_by(block: Any, model: str) -> bool:
    """A signed thinking block that ``model`` wrote; a block kept before blocks named their
    model (an older session) is taken as its own."""
    return _is_anthropic_thinking(block) and block.get("model", model) == model


def _is_anthropic_thinking(block: Any) -> bool:
    """A signed Anthropic thinking block kept in ``reasoning_details`` (replayed to Anthropic
    only).
    """
    return isinstance(block, dict) and (
        (block.get("type") == "thinking" and isinstance(block.get("signature"), str)
         and bool(block["signature"]))
        or (block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str)))


# The subset Anthropic's structured outputs take, as anthropic-sdk-python lib/_parse/_transform.py
# (transform_schema) writes it: the string formats it keeps; minItems only 0 or 1.
_ANTHROPIC_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "uri",
                                "ipv4", "ipv6", "uuid"})
_ANTHROPIC_KEPT = frozenset({"type", "enum", "description", "title", "required", "$ref",
                             "additionalProperties"})


def _anthropic_schema(node: Any) -> Any:
    """``node`` in the subset Anthropic's structured outputs take, by the SDK transform's rules:
    a type list (``["string", "null"]``) becomes ``anyOf`` with one branch per type, the null
    branch last; ``oneOf`` becomes ``anyOf``; any other keyword outside the subset (``maxItems``,
    ``minItems`` above 1, ``uniqueItems``, an unsupported string ``format``, numeric and length
    bounds...) moves into the description as ``{key: value}`` text, which the model may follow."""
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("type"), list):
        return _anthropic_type_union(node)
    out: dict = {}
    moved: dict = {}
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _anthropic_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = _anthropic_schema(value)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out["allOf" if key == "allOf" else "anyOf"] = [_anthropic_schema(sub) for sub in value]
        elif key in _ANTHROPIC_KEPT or (key == "format" and value in _ANTHROPIC_FORMATS) \
                or (key == "minItems" and value in (0, 1)):
            out[key] = value
        else:
            moved[key] = value
    if moved:
        note = "{" + ", ".join(f"{key}: {compact_json(value)}" for key, value in moved.items())
        note += "}"
        out["description"] = f"{out['description']}\n\n{note}" if out.get("description") else note
    return out


def _anthropic_type_union(node: dict) -> dict:
    """A node whose ``type`` is a list, as ``anyOf`` with one branch per type (null last, bare)."""
    kinds = [kind for kind in node["type"] if kind != "null"]
    branches = []
    for kind in kinds:
        branch = {key: value for key, value in node.items()
                  if key not in ("type", "description", "title")}
        if isinstance(branch.get("enum"), list):
            branch["enum"] = [value for value in branch["enum"] if value is not None]
        branches.append(_anthropic_schema({"type": kind, **branch}))
    if "null" in node["type"]:
        branches.append({"type": "null"})
    out: dict = {key: node[key] for key in ("title", "description") if key in node}
    if len(branches) != 1:
        return {**out, "anyOf": branches}
    merged = {**out, **branches[0]}        # a one-type list: that type, with the node's description
    if out.get("description") and branches[0].get("description"):
        merged["description"] = f"{out['description']}\n\n{branches[0]['description']}"
    return merged


def _anthropic_native_ok(schema: Any) -> bool:
    """Whether ``schema`` can go as Anthropic's structured output (after ``_anthropic_schema``).

    Every object closed with ``additionalProperties: false`` and naming its
    properties (platform.claude.com/docs/en/build-with-claude/structured-outputs,
    "JSON Schema limitations"); an open object would change meaning if closed,
    so such a schema rides in the prompt.
    """
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kinds = node["type"] if isinstance(node.get("type"), list) else [node.get("type")]
        # An object must be closed and name its properties: an open or property-less object is
        # refused ("arbitrary JSON objects" are not supported, ax-llm/ax#459).
        if ("object" in kinds or "properties" in node) \
                and (node.get("additionalProperties") is not False or not node.get("properties")):
            return False
        for key in ("properties", "$defs", "definitions"):
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())
        for key in ("items", "anyOf", "oneOf", "allOf"):
            if key in node:
                stack.append(node[key])
    return True


class AnthropicProvider(_HttpProvider):
    """Anthropic's Messages API with streaming (providers.md §6).

    The common options only. ``max_tokens`` is required by the API and defaults
    to 8192. What is sent follows the capability table: extended thinking with
    a budget (at least 1024 and below ``max_tokens``) or adaptive thinking with
    ``output_config.effort``, per model; only the sampling parameters the model
    takes; the understand and speak envelopes as native structured output
    (``output_config.format``) where the model supports it and the schema fits,
    else as a second system block after the cached one. The signed thinking
    blocks of a tool round come back in ``reasoning_details`` and are replayed
    before its ``tool_use`` in the next round. A ``stop_reason`` of
    ``"refusal"`` is a ``ProviderError(kind="content")``.

    >>> claude = AnthropicProvider(api_key="k", model="claude-sonnet-4-5",
    ...                            config={"maxTokens": 8192})
    >>> claude.name
    'anthropic'
    """

    DEFAULT_BASE_URL = "https://api.anthropic.com"
    API_VERSION = "2023-06-01"
    DEFAULT_MAX_TOKENS = 8192
    # thinking_config_enabled_param.py: "Must be ≥1024 and less than max_tokens"
    MIN_THINKING_BUDGET = 1024

    def __init__(self, *, api_key: str | None = None, model: str | None = None,
                 backup_models: list[str] | None = None,
                 base_url: str = DEFAULT_BASE_URL, config: dict | None = None,
                 retry_config: dict | None = None, headers: dict | None = None,
                 session: requests.Session | None = None,
                 sleep: Callable[[float], Any] = time.sleep, model_caps: dict | None = None,
                 understand_effort: str | None = "none"):
        super().__init__(owner="AnthropicProvider", name="anthropic", api_key=api_key,
                         key_required=True, model=model, backup_models=backup_models,
                         base_url=base_url, config=config, retry_config=retry_config,
                         headers=headers, session=session, sleep=sleep,
                         example_model="claude-sonnet-4-5", key_variable="ANTHROPIC_API_KEY",
                         model_caps=model_caps, understand_effort=understand_effort)
        self.capabilities = ProviderCapabilities(supports_tools=True,
                                                 supports_native_json_schema=False,
                                                 supports_streaming=True,
                                                 supports_streaming_tool_calls=True,
                                                 supports_prompt_caching=True)

    def _wire(self, model: str, plan: _Plan) -> tuple[str, dict, dict]:
        url = f"{self.base_url}/v1/messages"
        headers = {**self._base_headers(), "anthropic-version": self.API_VERSION,
                   "x-api-key": self._api_key, **self.headers}
        options = plan.options
        caps = self._caps("anthropic", model)
        max_tokens = options.get("maxTokens") or self.DEFAULT_MAX_TOKENS
        thinking, effort = self._thinking(caps, options, max_tokens, model)
        turned_on = (thinking["type"] != "disabled" if thinking is not None
                     else caps.thinks_by_default)
        if turned_on and self._unsigned_tool_round(plan.messages, model) \
                and (caps.can_disable or not caps.thinks_by_default):
            # The API wants the signed thinking block ahead of the last tool_use when thinking is
            # on; a round from another vendor or model (or an older session) has none, so this call
            # thinks not (a model that always thinks cannot be asked not to).
            thinking = {"type": "disabled"} if caps.thinks_by_default else None
            effort, turned_on = None, False
        body: dict = {"model": model, "max_tokens": max_tokens,
                      "messages": self._messages([m for m in plan.messages
                                                  if m["role"] != "system"],
                                                 replay=turned_on, model=model),
                      "stream": True}
        if plan.request.cache_history and len(plan.request.history or []) > 0:
            self._mark_history_end(body["messages"], bool(plan.request.prompt))
        system_text = "\n\n".join(m["content"] for m in plan.messages if m["role"] == "system")
        system: list[dict] = []
        if system_text:
            system.append({"type": "text", "text": system_text,
                           "cache_control": {"type": "ephemeral"}})
        output_config: dict = {}
        if plan.json is not None:
            if caps.native_schema and _anthropic_native_ok(plan.json["schema"]):
                output_config["format"] = {"type": "json_schema",
                                           "schema": _anthropic_schema(plan.json["schema"])}
            else:
                # After the cached block: a per-call schema never invalidates the stable prefix
                # (§6.2).
                system.append({"type": "text", "text": schema_prompt(plan.json["schema"])})
        if system:
            body["system"] = system
        # thinking on takes no temperature/top_p (§6.4)
        if thinking is None or thinking["type"] == "disabled":
            self._sampling(options, body, {"temperature": "temperature", "topP": "top_p",
                                           "stopSequences": "stop_sequences"}, model, caps)
        elif options.get("stopSequences"):
            body["stop_sequences"] = list(options["stopSequences"])
        if plan.tools:
            body["tools"] = [{"name": t["name"], "description": t["description"],
                              "input_schema": t["parameters"]}
                             for t in plan.tools]
        if thinking is not None:
            body["thinking"] = thinking
        if effort is not None:
            output_config["effort"] = effort
        if output_config:
            body["output_config"] = output_config
        return url, headers, body

    def _thinking(self, caps: ModelCaps, options: dict, max_tokens: int,
                  model: str) -> tuple[dict | None, str | None]:
        """(``thinking``, ``output_config.effort``) for the effort, as the model's row allows."""
        effort = options.get("effort")
        if effort is None:
            return None, None
        if effort == "none" and caps.thinking == "adaptive" and not caps.can_disable \
                and caps.thinks_by_default:
            # It always thinks: as little as it allows.
            return {"type": "adaptive"}, caps.levels[0] if caps.levels else None
        if effort == "none":
            # Off is the default, except on models that think when `thinking` is omitted.
            return ({"type": "disabled"} if caps.thinks_by_default and caps.can_disable
                    else None), None
        if caps.thinking == "adaptive":
            return {"type": "adaptive"}, _level_for(caps, effort,
                                                    {e: e for e in ("low", "medium", "high")})
        if caps.thinking == "enabled":
            if max_tokens <= self.MIN_THINKING_BUDGET:
                self._warn_once(("budget", model),
                                "[%s] effort %r is not sent to %s: maxTokens %d leaves no room "
                                "for the 1024-token thinking minimum. Raise maxTokens above 1024.",
                                self.name, effort, model, max_tokens)
                return None, None
            budget = max(self.MIN_THINKING_BUDGET,
                         min(_ANTHROPIC_BUDGETS[effort], math.floor(max_tokens * 0.8)))
            return {"type": "enabled", "budget_tokens": budget}, None
        self._dropped_effort(options, model)
        return None, None

    @staticmethod
    def _mark_history_end(messages: list[dict], has_prompt: bool) -> None:
        """A cache breakpoint on the history's last block, the one before the per-call prompt:
        the system block alone is often below the 1,024-token minimum, the system plus the history
        is not, and it is the same prefix on the next call of the conversation."""
        blocks = [block for message in messages for block in message["content"]]
        at = len(blocks) - (2 if has_prompt else 1)
        if at >= 0 and blocks[at].get("type") in ("text", "tool_result", "tool_use"):
            blocks[at]["cache_control"] = {"type": "ephemeral"}

    @staticmethod
    def _unsigned_tool_round(messages: list[dict], model: str) -> bool:
        """The last assistant message calls tools, is answered after it, and has no thinking
        block signed by ``model``."""
        for message in reversed(messages):
            if message["role"] == "assistant":
                details = message.get("reasoningDetails")
                signed = isinstance(details, list) and any(_signed_by(b, model) for b in details)
                return bool(message["toolCalls"]) and not signed
        return False

    @staticmethod
    def _messages(messages: list[dict], replay: bool = False,
                  model: str | None = None) -> list[dict]:
        """providers.md §6.3: blocks, with consecutive same-role messages merged.

        With ``replay``, an assistant message's signed thinking blocks (kept in its
        ``reasoningDetails``) open its blocks, ahead of its text and ``tool_use``
        (the API requires them in a tool round with thinking on),
        only those signed by ``model``: another model rejects them
        (anthropics/anthropic-sdk-python#1598).
        """
        out: list[dict] = []
        for message in messages:
            role = message["role"]
            blocks: list[dict] = []
            if role == "user":
                if message["content"]:
                    # An empty text block is a 400 on Anthropic, so it is left out (inferred).
                    blocks.append({"type": "text", "text": message["content"]})
            elif role == "tool":
                block: dict = {"type": "tool_result", "tool_use_id": message["toolCallId"]}
                if message["content"]:
                    block["content"] = [{"type": "text", "text": message["content"]}]
                blocks.append(block)
                role = "user"
            elif role == "assistant":
                details = message.get("reasoningDetails")
                if replay and isinstance(details, list) and message["toolCalls"]:
                    blocks.extend({k: v for k, v in b.items()
                                   if k in ("type", "thinking", "signature", "data")}
                                  for b in details if model is None or _signed_by(b, model))
                if message["content"]:
                    blocks.append({"type": "text", "text": message["content"]})
                for call in message["toolCalls"]:
                    blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                                   "input": parse_tool_args(call["arguments"], call["name"])})
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        return out

    def _new_state(self) -> dict:
        return {"blocks": 0, "open_tool": None, "fresh": 0, "read": 0, "write": 0, "output": 0,
                "thought": 0,
                "thinking": [], "open_thinking": None, "stop": None, "stop_details": None}

    def _parse(self, payload: dict, state: dict) -> Iterator[dict]:
        kind = payload.get("type")
        if kind == "error" or (payload.get("error") and kind != "message"):
            error = payload.get("error") or {}
            error_type = error.get("type") if isinstance(error, dict) else None
            raise self._inband_error(error, payload, code=error_type)
        if kind == "message":           # a whole, non-streamed reply (§3.7 rule 8)
            yield from self._whole_message(payload, state)
            return
        if kind == "message_start":
            self._read_usage((payload.get("message") or {}).get("usage"), state)
        elif kind == "content_block_start":
            index = state["blocks"]
            state["blocks"] += 1
            block = payload.get("content_block") or {}
            yield from self._block_start(block, index, state)
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                yield {"type": "delta", "content": delta["text"]}
            elif delta.get("type") == "thinking_delta" and delta.get("thinking"):
                if state["open_thinking"] is not None:
                    state["open_thinking"]["thinking"].append(delta["thinking"])
                yield {"type": "delta", "reasoning": delta["thinking"]}
            elif delta.get("type") == "signature_delta" and state["open_thinking"] is not None:
                # The signature the next tool round must send back.
                state["open_thinking"]["signature"].append(str(delta.get("signature") or ""))
            elif delta.get("type") == "input_json_delta" and state["open_tool"] is not None \
                    and delta.get("partial_json"):
                yield {"type": "delta", "tool_calls": [{"index": state["open_tool"],
                                                        "arguments": delta["partial_json"]}]}
        elif kind == "content_block_stop":
            state["open_tool"] = None
            yield from self._close_thinking(state)
        elif kind == "message_delta":
            self._read_usage(payload.get("usage"), state)
            stop = (payload.get("delta") or {}).get("stop_reason")
            state["stop"] = stop
            state["stop_details"] = (payload.get("delta") or {}).get("stop_details")
            if stop in _ANTHROPIC_FINISH:
                yield {"type": "finish", "finish_reason": _ANTHROPIC_FINISH[stop],
                       "vendor_finish_reason": stop}
        elif kind == "message_stop":
            yield from self._close_thinking(state)
            yield self._usage_event(state)

    @staticmethod
    def _close_thinking(state: dict) -> Iterator[dict]:
        """A finished thinking block joins the signed blocks the reply carries in
        ``reasoning_details``.
        """
        block, state["open_thinking"] = state["open_thinking"], None
        if block is not None:       # its texts came in pieces, joined once here
            block = {key: "".join(value) if isinstance(value, list) else value
                     for key, value in block.items()}
        if block is not None and _is_anthropic_thinking(block):
            state["thinking"].append({**block, "model": state.get("model")})
            yield {"type": "delta", "reasoning_details": [dict(b) for b in state["thinking"]]}

    def _refusal(self, state: dict, accumulator: _Accumulator) -> ProviderError | None:
        if state.get("stop") != "refusal":
            return None
        details = state["stop_details"] if isinstance(state.get("stop_details"), dict) else {}
        why = details.get("explanation") or details.get("category") or "no reason given"
        return ProviderError(f"anthropic: the model refused ({why})", provider=self.name,
                             kind="content", code="refusal")

    def _block_start(self, block: dict, index: int, state: dict) -> Iterator[dict]:
        if block.get("type") == "tool_use":
            state["open_tool"] = index
            arguments = compact_json(block["input"]) if block.get("input") else None
            yield {"type": "delta",
                   "tool_calls": [{"index": index, "id": block.get("id"), "name": block.get("name"),
                                   "arguments": arguments}]}
        elif block.get("type") == "text" and block.get("text"):
            yield {"type": "delta", "content": block["text"]}
        elif block.get("type") == "thinking":
            state["open_thinking"] = {"type": "thinking",
                                      "thinking": [str(block.get("thinking") or "")],
                                      "signature": [str(block.get("signature") or "")]}
            if block.get("thinking"):
                yield {"type": "delta", "reasoning": block["thinking"]}
        elif block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str):
            state["open_thinking"] = {"type": "redacted_thinking", "data": block["data"]}

    def _whole_message(self, message: dict, state: dict) -> Iterator[dict]:
        for block in message.get("content") or []:
            index = state["blocks"]
            state["blocks"] += 1
            yield from self._block_start(block, index, state)
            yield from self._close_thinking(state)
        state["open_tool"] = None
        self._read_usage(message.get("usage"), state)
        stop = message.get("stop_reason")
        state["stop"] = stop
        state["stop_details"] = message.get("stop_details")
        if stop in _ANTHROPIC_FINISH:
            yield {"type": "finish", "finish_reason": _ANTHROPIC_FINISH[stop],
                   "vendor_finish_reason": stop}
        yield self._usage_event(state)

    @staticmethod
    def _read_usage(usage: Any, state: dict) -> None:
        """Present fields replace the stored ones: Anthropic's counts are cumulative."""
        if not isinstance(usage, dict):
            return
        for key, slot in (("input_tokens", "fresh"), ("cache_read_input_tokens", "read"),
                          ("cache_creation_input_tokens", "write"), ("output_tokens", "output")):
            if isinstance(usage.get(key), int):
                state[slot] = usage[key]
        details = usage.get("output_tokens_details")              # types/output_tokens_details.py
        if isinstance(details, dict) and isinstance(details.get("thinking_tokens"), int):
            state["thought"] = details["thinking_tokens"]

    @staticmethod
    def _usage_event(state: dict) -> dict:
        # Anthropic counts cached tokens outside input_tokens; adding them back makes
        # prompt_tokens mean the same thing as on the other vendors (§6.5).
        return {"type": "usage", "prompt_tokens": state["fresh"] + state["read"] + state["write"],
                "completion_tokens": state["output"], "cached_input_tokens": state["read"],
                "cache_write_tokens": state["write"], "reasoning_tokens": state["thought"]}

    def _classify(self, status: int | None, text: str,
                  data: Any) -> tuple[str, str | None, int | None]:
        error = data.get("error") if isinstance(data, dict) else None
        error_type = (error.get("type")
                      if isinstance(error, dict) and isinstance(error.get("type"), str) else None)
        if status is None and error_type in _ANTHROPIC_ERROR_STATUS:
            status = _ANTHROPIC_ERROR_STATUS[error_type]
        return classify_error(status=status, body=text), error_type, None


# 10. FallbackProvider ########################################################

DEFAULT_COOLDOWN_MS: dict[str, int | None] = {
    "rate": 60_000, "quota": 3_600_000, "timeout": 30_000, "network": 30_000, "overload": 30_000,
    "auth": 3_600_000, "entitlement": 3_600_000, "model": 3_600_000,
    "context": None, "content": None, "invalid": None, "length": None, "unknown": None,
    "aborted": None,
}


class NoAvailableProviderError(ProviderError):
    """Every member of a ``FallbackProvider`` is cooling down (providers.md §7 rule 4)."""

    def __init__(self, reset_at_ms: int | None, retry_after_ms: int | None):
        super().__init__("All configured providers are unavailable. Retry after the cooldown.",
                         provider="fallback", kind="rate", reset_at_ms=reset_at_ms,
                         retry_after_ms=retry_after_ms)


class FallbackProvider:
    """An ordered pool of providers: each call goes to the first member not cooling down
    (providers.md §7).

    >>> pool = FallbackProvider([GeminiProvider(api_key="k", model="gemini-3.8-flash"),
    ...                          AnthropicProvider(api_key="k", model="claude-sonnet-4-5")])
    >>> pool.name
    'fallback(gemini->anthropic)'

    Cooldowns live for the life of the object; keep one instance per credential set.
    """

    def __init__(self, providers: list, *, cooldown_ms: dict | None = None,
                 on_cooldown: Callable[[dict], Any] | None = None,
                 now: Callable[[], int] | None = None):
        owner = "FallbackProvider"
        members = list(providers or [])
        if not members:
            raise ValueError(f"[{owner}] providers is empty: there is nothing to call. "
                             "Pass at least one, e.g. FallbackProvider([primary, backup]).")
        if len({id(p) for p in members}) != len(members):
            raise ValueError(f"[{owner}] the same provider object is listed twice: "
                             "each member must be a distinct instance (one cooldown each).")
        for member in members:
            if not all(hasattr(member, a)
                       for a in ("name", "capabilities", "generate", "generate_stream")):
                raise ValueError(f"[{owner}] {member!r} is not an AiProvider: it needs name, "
                                 "capabilities, generate and generate_stream.")
        table: dict[str, int | float | None] = dict(DEFAULT_COOLDOWN_MS)
        for kind, value in (cooldown_ms or {}).items():
            if kind not in DEFAULT_COOLDOWN_MS:
                raise ValueError(f'[{owner}] cooldown_ms has an unknown kind "{kind}": '
                                 'use one of the ProviderError '
                                 "kinds.")
            if kind == "aborted" and value is not None:
                raise ValueError(f'[{owner}] cooldown_ms["aborted"] cannot be set: '
                                 'a cancelled call never falls '
                                 "through.")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise ValueError(f'[{owner}] cooldown_ms["{kind}"] is {value!r}: '
                                 'pass milliseconds (0 or more), '
                                 "or None for no fallthrough.")
            table[kind] = value
        if on_cooldown is not None and not callable(on_cooldown):
            raise ValueError(f"[{owner}] on_cooldown must be a callable taking one dict.")
        self.providers = members
        self.cooldown_ms = table
        self.on_cooldown = on_cooldown
        self._now = now or _now_ms
        self._lock = threading.Lock()
        self._state: list[dict[str, Any]] = [{"retry_at_ms": None, "probing": False, "kind": None}
                                             for _ in members]
        self.name = "fallback(" + "->".join(p.name for p in members) + ")"

    @property
    def capabilities(self) -> ProviderCapabilities:
        """A flag holds for the pool when it holds for every member."""
        names = [flag.name for flag in dataclasses.fields(ProviderCapabilities)]
        return ProviderCapabilities(**{name: all(bool(getattr(p.capabilities, name, False))
                                                 for p in self.providers)
                                       for name in names})

    def __repr__(self) -> str:
        return f"FallbackProvider({self.providers!r})"

    def generate(self, request: GenerateRequest) -> Generation:
        for result in self._call(request, streaming=False):
            return result
        raise AssertionError("unreachable")

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]:
        return self._call(request, streaming=True)

    def status(self) -> list[dict]:
        """Per member, in order: ``{"provider": name, "retry_at_ms", "probing", "kind"}``."""
        with self._lock:
            return [{"provider": p.name, **dict(s)} for p, s in zip(self.providers, self._state)]

    def reset(self, provider: Any = None) -> None:
        """Clear one member's cooldown (the member or its name), or every cooldown."""
        with self._lock:
            for member, state in zip(self.providers, self._state):
                if provider is None or member is provider or member.name == provider:
                    state.update(retry_at_ms=None, probing=False, kind=None)

    def _call(self, request: GenerateRequest, streaming: bool) -> Iterator[Any]:
        last_error: BaseException | None = None
        for index, member in enumerate(self.providers):
            probe = self._claim(index)
            if probe is None:
                continue
            yielded = False
            try:
                if streaming:
                    for chunk in member.generate_stream(request):
                        yielded = True
                        yield chunk
                    self._recovered(index)
                    return
                result = member.generate(request)
            except Exception as exc:
                kind = exc.kind if isinstance(exc, ProviderError) else classify_error(exc)
                if kind == "aborted" or self.cooldown_ms.get(kind) is None:
                    raise
                self._cool(index, member, exc, kind)
                if yielded:
                    raise       # an answer already on screen is never restarted by another provider
                log.warning("[%s] %s failed (%s); trying the next provider", self.name, member.name,
                            kind)
                last_error = exc
                continue
            finally:
                if probe:
                    with self._lock:
                        self._state[index]["probing"] = False
            self._recovered(index)
            yield result
            return
        if last_error is not None:
            raise last_error
        with self._lock:
            waits = [s["retry_at_ms"] for s in self._state if s["retry_at_ms"] is not None]
        now = self._now()
        earliest = min(waits) if waits else now
        raise NoAvailableProviderError(reset_at_ms=earliest, retry_after_ms=max(0, earliest - now))

    def _claim(self, index: int) -> bool | None:
        """None: skip this member; False: call it; True: call it as the one recovery probe."""
        with self._lock:
            state = self._state[index]
            if state["retry_at_ms"] is None:
                return False
            if self._now() < state["retry_at_ms"] or state["probing"]:
                return None
            state["probing"] = True
            return True

    def _recovered(self, index: int) -> None:
        with self._lock:
            self._state[index].update(retry_at_ms=None, probing=False, kind=None)

    def _cool(self, index: int, member: Any, exc: BaseException, kind: str) -> None:
        now = self._now()
        hints = []
        reset_at_ms = getattr(exc, "reset_at_ms", None)
        retry_after_ms = getattr(exc, "retry_after_ms", None)
        if reset_at_ms is not None:
            hints.append(reset_at_ms)
        if retry_after_ms is not None:
            hints.append(now + retry_after_ms)
        cooldown = self.cooldown_ms[kind]
        assert cooldown is not None         # the caller cools only a kind that has a cooldown
        target = max(hints) if hints else now + cooldown   # a server deadline wins
        with self._lock:
            state = self._state[index]
            retry_at = int(max(now, target, state["retry_at_ms"] or 0))
            state.update(retry_at_ms=retry_at, kind=kind)
        if self.on_cooldown is not None:
            try:
                self.on_cooldown({"provider": member, "error": exc, "kind": kind,
                                  "retry_at_ms": retry_at, "window": getattr(exc, "window", None)})
            except Exception:
                log.exception("[%s] on_cooldown raised; ignored", self.name)
