"""The agent the production host runs by default (``FALAI_AGENT=demo_agent:make_agent``), and its instant model.

Three behaviours, so that every path of the host is exercised:

- any message: the idle speaker answers it (one understand call, one speak call);
- a message with "me lembre": the ``lembrete`` flow confirms, parks on a timer
  wait (``FALAI_DEMO_REMINDER``, default ``1h``) and, when its wake fires, sends
  the reminder;
- a customer who goes quiet after the assistant spoke: the ``retomar`` flow's
  silence wake (``FALAI_DEMO_SILENCE``, default ``24h``) asks once whether they
  are still there.

With ``GEMINI_API_KEY`` set the model is ``GeminiProvider`` (``FALAI_MODEL``,
default ``gemini-3.8-flash``; ``FALAI_GEMINI_BASE_URL`` points it at a proxy);
without it, ``InstantModel``, which answers at once and never runs out (the
load test needs thousands of replies).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from typing import Iterator

from falai import (Generation, GenerationChunk, GenerateRequest, ProviderCapabilities, ProviderError,
                   falai)

# model-calls.md §3.4 item 9 (understand: between triple quotes) and §5.3 (speak: one quoted line)
_MESSAGE = re.compile(r'## Customer\'s latest message\s*\n(?:"""\n(.*?)\n"""|("[^\n]*"))', re.S)


def customer_message(request: GenerateRequest) -> str:
    """The customer's latest message as the engine quotes it in a prompt (model-calls.md §3.4 item 9)."""
    match = _MESSAGE.search(request.prompt or "")
    if match is None:
        return ""
    if match.group(1) is not None:
        return match.group(1)
    try:
        return json.loads(match.group(2))
    except ValueError:
        return match.group(2).strip('"')


def understand_reply(request: GenerateRequest, reminder: bool) -> dict:
    """An understand reply that scores the ``lembrete`` flow 95 when ``reminder``, in the shape the
    request asks for: the lean protocol's list of ``{id, score}`` (the default), or the v4 object
    of scores by alias."""
    flows = (request.schema or {}).get("properties", {}).get("flows", {})
    if flows.get("type") == "array":
        return {"flows": [{"id": "lembrete", "score": 95}] if reminder else []}
    return {"flows": {alias: 95 if reminder and "lembrete" in alias else 0
                      for alias in flows.get("properties", {})}}


class InstantModel:
    """A provider that answers at once, forever: the understand call scores the ``lembrete`` flow by the
    words "me lembre", the speak call echoes the message.

    Fault injection for the load test (from the environment, so worker processes get it):
    ``FALAI_DEMO_FAIL_RATE`` is the chance that an understand call raises a
    retryable ``ProviderError``; a message containing ``[lento]`` makes the
    first speak call of that text sleep ``FALAI_DEMO_SLOW_S`` seconds after writing
    this process's pid to ``FALAI_DEMO_MARKS/<text hash>`` (so a test can SIGKILL
    the worker mid-turn); later calls for the same text are instant.
    ``FALAI_DEMO_LATENCY_MS`` (``low,high``) makes every call take a random time in
    that range, as a real model's would (the benchmark and the fault test).
    """

    name = "instant"

    def __init__(self, fail_rate: float | None = None, seed: int | None = None):
        self.capabilities = ProviderCapabilities()
        self.fail_rate = float(os.environ.get("FALAI_DEMO_FAIL_RATE", "0")) if fail_rate is None else fail_rate
        low, _, high = os.environ.get("FALAI_DEMO_LATENCY_MS", "0").partition(",")
        self.latency_s = (float(low) / 1000, float(high or low) / 1000)
        self.random = random.Random(seed)

    def generate(self, request: GenerateRequest) -> Generation:
        if self.latency_s[1] > 0:
            time.sleep(self.random.uniform(*self.latency_s))
        text = customer_message(request)
        if request.schema_name == "understand":
            if self.random.random() < self.fail_rate:
                raise ProviderError("instant model: scripted overload", provider=self.name, kind="overload",
                                    should_retry=True)
            return Generation(message="", structured=understand_reply(request, "me lembre" in text.lower()))
        if "[lento]" in text:
            self._slow_once(text)
        reply = f"Recebi: {text[:60]}" if text else "Oi! Em que posso ajudar?"
        return Generation(message=reply, structured={"message": reply})

    def generate_stream(self, request: GenerateRequest) -> Iterator[GenerationChunk]:
        generation = self.generate(request)
        if generation.message:
            yield GenerationChunk(delta=generation.message, accumulated=generation.message, done=False)
        yield GenerationChunk(delta="", accumulated=generation.message, done=True, structured=generation.structured)

    @staticmethod
    def _slow_once(text: str) -> None:
        marks = os.environ.get("FALAI_DEMO_MARKS")
        if not marks:
            return
        path = os.path.join(marks, "slow-" + hashlib.sha1(text.encode()).hexdigest()[:16])
        try:
            with open(path, "x") as mark:            # the first process to get here is the one to be killed
                mark.write(str(os.getpid()))
        except FileExistsError:
            return
        time.sleep(float(os.environ.get("FALAI_DEMO_SLOW_S", "5")))


def make_provider():
    """GeminiProvider when ``GEMINI_API_KEY`` is set (``FALAI_MODEL``, ``FALAI_GEMINI_BASE_URL``), else InstantModel."""
    key = os.environ.get("GEMINI_API_KEY")
    if key:
        from falai_providers import GeminiProvider
        base_url = os.environ.get("FALAI_GEMINI_BASE_URL")        # a proxy, or a local fake server in tests
        return GeminiProvider(api_key=key, model=os.environ.get("FALAI_MODEL", "gemini-3.8-flash"),
                              **({"base_url": base_url} if base_url else {}))
    return InstantModel()


def make_agent(provider=None):
    """The demo agent (module docstring); ``provider`` defaults to ``make_provider()``."""
    f = falai()
    return f.agent(
        name="Ana", provider=provider or make_provider(),
        persona="Você é a Ana, atendente de uma loja: cordial e breve, em português do Brasil.",
        idle={"prompt": "Responda à mensagem em uma frase."},
        actions={"anotar": f.action(parameters={}, run=lambda params, ctx: {"ok": True})},
        flows=[
            f.flow({"id": "lembrete", "name": "Lembrete", "description": "A pessoa pede para ser lembrada.",
                    "on": [{"message": ["me lembre depois"], "repeat": "always"}],
                    "steps": [{"id": "ok", "say": "Combinado, eu te lembro."},
                              {"id": "espera", "wait": os.environ.get("FALAI_DEMO_REMINDER", "1h")},
                              # a do step after the wait: even a wait of seconds parks (runtime.md §7.2)
                              {"id": "anota", "do": "anotar"},
                              {"id": "aviso", "say": "Lembrete: você pediu para eu te avisar."}]}),
            f.flow({"id": "retomar", "name": "Retomar",
                    "on": [{"silence": os.environ.get("FALAI_DEMO_SILENCE", "24h")}],
                    "steps": [{"id": "oi", "say": "Ainda está por aí?"}]}),
        ])
