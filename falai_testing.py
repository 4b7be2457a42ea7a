"""falai_testing: a scripted provider and an in-memory wake queue, for tests and offline demos.

   ScriptedProvider ... replays scripted replies (python-api.md, Providers); strict=True checks
                        each reply against the schema of the request it answers
   MemoryScheduler .... an in-memory wake queue (python-api.md, Modules)

``import falai`` is all a user needs: ``falai.ScriptedProvider`` and
``falai.MemoryScheduler`` load this module on first use. It imports falai and
the standard library only; ``ScriptError``, which a strict script raises, lives
in falai, since the engine lets it through a turn.

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from falai_base import (
    GenerateRequest, Generation, GenerationChunk, ProviderCapabilities, ScheduleEntry, ScriptError,
    TokenUsage, ToolCallRequest, compact_json, is_whole, json_copy, json_equal, json_literal,
    listed_values, show,
)

__all__ = ["ScriptedProvider", "MemoryScheduler"]


def schema_mismatch(schema: Any, value: Any, path: str = "reply") -> str | None:
    """Where ``value`` does not fit a request's JSON Schema, as text; None when it fits.

    Reads the keywords the engine's schemas use: ``type`` (one or a list),
    ``enum``, ``properties``, ``additionalProperties: false``, ``items``,
    ``anyOf``. A missing property fits: the engine reads it as null.
    """
    if not isinstance(schema, dict):
        return None
    if "anyOf" in schema:
        options = [schema_mismatch(option, value, path) for option in schema["anyOf"]]
        if all(options):
            return options[0]
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if isinstance(kinds, list) and not any(_json_type_is(kind, value) for kind in kinds):
        return f"{path} is {show(value)}, not {' or '.join(kinds)}"
    members = schema.get("enum")
    if isinstance(members, list) and not any(json_equal(value, member) for member in members):
        return f"{path} is {show(value)}, not one of {listed_values(schema['enum'])}"
    if isinstance(value, dict):
        given = schema.get("properties")
        properties: dict = given if isinstance(given, dict) else {}
        for key, item in value.items():
            if key in properties:
                problem = schema_mismatch(properties[key], item, f"{path}.{key}")
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                expected = ", ".join(f'"{name}"' for name in properties) or "none"
                return (f'{path} has the key "{key}", which the request does not ask for '
                        f"(its keys: {expected})")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = schema_mismatch(schema["items"], item, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _json_type_is(kind: Any, value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return {"null": value is None, "boolean": isinstance(value, bool),
            "string": isinstance(value, str), "integer": number and is_whole(value),
            "number": number and math.isfinite(value), "object": isinstance(value, dict),
            "array": isinstance(value, list)}.get(kind, True)


class ScriptedProvider:
    """A provider that replays scripted replies, for tests and offline demos.

    python-api.md, Providers.

    ``ScriptedProvider(script={"understand": [{...}], "speak": [{"message": "Oi!"}]})``:
    each call takes the next entry of the queue named by its ``schema_name``.
    An entry is a dict (the structured reply), a str (raw text), a Generation,
    an exception (raised), or a callable ``f(request)`` returning one of those.

    With ``strict=True`` a dict reply is checked against the schema of the
    request it answers (types, enums, keys the request does not ask for; a
    missing key fits, the engine reads it as null) and its ``toolCalls``
    against the tools offered; a reply that does not fit, or a call that finds
    its queue empty, raises ``ScriptError`` naming the call number, its kind
    and what did not fit, and the turn raises it. A str or a Generation is
    never checked. ``strict=False``, the default, keeps the documented contract
    (python-api.md, Providers): every reply reaches the engine exactly as
    written, so a test can reach the engine's own checks of a malformed reply.
    In both modes a call that finds its queue empty raises ``ScriptError`` (a
    RuntimeError) out of the turn, the speak call's too: to script a failed
    call, script the exception.
    """

    name = "scripted"

    def __init__(self, script: dict | None = None, usage: bool | TokenUsage = False,
                 strict: bool = False):
        from collections import deque   # here, not at import: only tests and demos script one
        # A deque per queue: taking the next entry costs the same however long the script is.
        self.script = {name: deque(entries) for name, entries in (script or {}).items()}
        self.usage = usage
        self.strict = strict
        self.calls: list[GenerateRequest] = []
        self.capabilities = ProviderCapabilities()
        self._lock = threading.Lock()

    def remaining(self) -> dict[str, int]:
        """Entries left per schema name."""
        return {name: len(entries) for name, entries in self.script.items()}

    def _next_entry(self, request: GenerateRequest) -> Any:
        with self._lock:
            self.calls.append(request)
            number = len(self.calls)
            queue = self.script.get(request.schema_name or "")
            if not queue:       # in both modes: never a quiet provider-unavailable deferral
                name = request.schema_name
                raise ScriptError(f'ScriptedProvider call #{number} ("{name}"): no scripted '
                                  f'"{name}" reply left. Add a "{name}" entry to the script, or '
                                  "script the failure itself (an exception entry).")
            entry = queue.popleft()
        if type(entry) is dict and not self.strict:
            return entry        # the common reply: neither a callable nor an exception, unchecked
        if callable(entry) and not isinstance(entry, type):
            # A script function reads what is asked from the schema in the documented (v4) form,
            # under either protocol; .calls keeps the request as sent (docs/guide/tokens.md).
            v4 = request.v4_schema
            entry = entry(request if v4 is None else replace(request, schema=v4))
        if isinstance(entry, BaseException) or (isinstance(entry, type)
                                                and issubclass(entry, BaseException)):
            raise entry
        if self.strict and isinstance(entry, dict):
            problem = self._misfit(request, entry)
            if problem:
                raise ScriptError(f'ScriptedProvider call #{number} ("{request.schema_name}"): '
                                  f"{problem}. Fix the scripted reply, or script a malformed reply "
                                  "on purpose as a str or with strict=False.")
        return entry

    @staticmethod
    def _misfit(request: GenerateRequest, entry: dict) -> str | None:
        """What in a dict reply cannot answer this request, or None."""
        reply = {key: value for key, value in entry.items() if key != "toolCalls"}
        schema = request.schema
        if request.v4_schema is not None and not any(isinstance(value, list)
                                                     for value in reply.values()):
            # a reply in the v4 form, under protocol "lean" (docs/guide/tokens.md)
            schema = request.v4_schema
        if schema is not None:
            problem = schema_mismatch(schema, reply)
            if problem:
                return problem
        calls = entry.get("toolCalls") or []
        if calls:
            offered = [tool.get("name") for tool in request.tools or [] if isinstance(tool, dict)]
            if not offered:
                return "the reply has toolCalls, but the request offers no tools"
            for i, call in enumerate(calls):
                name = call.get("toolName") if isinstance(call, dict) else None
                if name not in offered:
                    return (f"toolCalls[{i}] names the tool {json_literal(name)}, which the "
                            f"request does not offer (it offers {listed_values(offered)})")
        return None

    def _generation(self, request: GenerateRequest, entry: Any) -> Generation:
        if isinstance(entry, dict):
            structured = {k: json_copy(v) for k, v in entry.items() if k != "toolCalls"}
            message = entry["message"] if isinstance(entry.get("message"), str) else \
                compact_json(structured)
            listed = entry.get("toolCalls")
            calls = [ToolCallRequest(id=f"call_{i}", name=item["toolName"],
                                     arguments=item.get("arguments") or {})
                     for i, item in enumerate(listed)] if listed else []
            usage = self._usage(request, message) if self.usage is not False else None
            return Generation(message=message, structured=structured, tool_calls=calls, usage=usage)
        if isinstance(entry, Generation):
            return entry
        if isinstance(entry, str):
            return Generation(message=entry, usage=self._usage(request, entry))
        raise TypeError("a scripted entry must be a dict, a str, a Generation, an exception or a "
                        f"callable, not {type(entry).__name__}")

    def _usage(self, request: GenerateRequest, message: str) -> TokenUsage | None:
        if isinstance(self.usage, TokenUsage):
            return self.usage
        if self.usage is True:
            return TokenUsage(prompt_tokens=len(request.system or "") + len(request.prompt),
                              completion_tokens=len(message), cached_input_tokens=0)
        return None

    def generate(self, request: GenerateRequest) -> Generation:
        return self._generation(request, self._next_entry(request))

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]:
        generation = self.generate(request)
        if generation.message:
            yield GenerationChunk(delta=generation.message, accumulated=generation.message,
                                  done=False)
        yield GenerationChunk(delta="", accumulated=generation.message, done=True,
                              structured=generation.structured, tool_calls=generation.tool_calls,
                              usage=generation.usage, reasoning=generation.reasoning,
                              reasoning_details=generation.reasoning_details,
                              metadata=generation.metadata)


class MemoryScheduler:
    """An in-memory wake queue for tests and single-process hosts (python-api.md, Modules)."""

    def __init__(self):
        self._entries: list[ScheduleEntry] = []

    def add(self, entry: ScheduleEntry) -> None:
        """Queue a wake; the job its ``replaces`` names is dropped."""
        if entry.replaces is not None:
            self._entries = [e for e in self._entries if e.key != entry.replaces]
        self._entries = [e for e in self._entries if e.key != entry.key]
        self._entries.append(entry)

    def due(self, now: datetime) -> list[ScheduleEntry]:
        """Pop and return, in time order, every entry whose ``at`` is not after ``now``."""
        ready = sorted((e for e in self._entries if e.at <= now), key=lambda e: e.at)
        self._entries = [e for e in self._entries if e.at > now]
        return ready

    def __len__(self) -> int:
        return len(self._entries)
