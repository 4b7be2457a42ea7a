"""What a turn costs the model under each protocol (issue 11, docs/guide/tokens.md).

    python bench/bench_tokens.py          # prints the tables

Every figure is computed on the request bodies the real provider classes build
(GeminiProvider, OpenAICompatibleProvider, AnthropicProvider: their own body
builder, what ``generate`` would POST, without sending it), for conversations
played with ScriptedProvider replies:

- input tokens per call: characters / 4 of what the vendor reads (text as
  text, schemas, tools and tool calls as compact JSON), averaged over the calls
  of that kind (tokenizer counts when ``tiktoken`` is installed);
- the shortest valid understand reply: the smallest JSON object the call's
  schema accepts, in tokens (the largest over the conversation's calls);
- prefix share: the part of each request that is a byte-identical prefix of
  the previous request of the same kind, in the order the vendor reads it
  (OpenAI: response schema, tools, messages; Anthropic: output schema, tools,
  system, messages; Gemini: system instruction, tools, generation config with
  the response schema, contents), mean over turns 2-4. Gemini's place for the
  schema: the same contents with a new response schema miss the implicit cache,
  which Google reproduced, and a python-genai maintainer explains it as for tools
  and system instructions, a change at the start of the prompt
  (https://github.com/googleapis/python-genai/issues/1148); no Google page says
  where the schema goes. The figure with the generation config read after the
  contents (the floor, if that reading is wrong) is printed under the table;
- Anthropic cache: the first call that reads a cached prefix, i.e. the
  previous call's last cache breakpoint covered at least 1,024 tokens and is a
  prefix of this call.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from falai import ScriptedProvider, fake_clock, falai  # noqa: E402
from request_bodies import triage_conversation, wire_bodies  # noqa: E402

try:                                          # optional: real token counts (GPT-4o's tokenizer)
    import tiktoken  # type: ignore
    _ENCODING = tiktoken.get_encoding("o200k_base")
except Exception:                             # not installed, or no cached encoding: chars/4
    _ENCODING = None

ANTHROPIC_MIN_CACHE = 1024
TURNS = 4


def tokens(text: str) -> int:
    return len(_ENCODING.encode(text)) if _ENCODING is not None else round(len(text) / 4)


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _strip_cache(block: dict) -> dict:
    return {k: v for k, v in block.items() if k != "cache_control"}


def reading(vendor: str, body: dict, schema_last: bool = False) -> tuple[str, list[int]]:
    """The body as the vendor reads it, and the offsets where an Anthropic cache breakpoint ends.

    ``schema_last``: Gemini's generation config read after the contents (the floor)."""
    parts: list[str] = []
    marks: list[int] = []

    def add(text: str, marked: bool = False) -> None:
        parts.append(text)
        if marked:
            marks.append(sum(len(p) for p in parts))

    if vendor == "openai":
        if "response_format" in body:
            add(_json(body["response_format"]))
        if "tools" in body:
            add(_json(body["tools"]))
        for m in body["messages"]:
            add(f"<{m['role']}>" + (m.get("content") or "") + (_json(m["tool_calls"]) if m.get("tool_calls") else ""))
    elif vendor == "anthropic":
        if "output_config" in body:
            add(_json(body["output_config"]))
        if "tools" in body:
            add(_json(body["tools"]))
        for block in body.get("system") or []:
            add(block["text"], "cache_control" in block)
        for m in body["messages"]:
            add(f"<{m['role']}>")
            for block in m["content"]:
                add(block["text"] if block["type"] == "text" else _json(_strip_cache(block)), "cache_control" in block)
    else:
        for part in (body.get("systemInstruction") or {}).get("parts", []):
            add(part["text"])
        if "tools" in body:
            add(_json(body["tools"]))
        if not schema_last:
            add(_json(body.get("generationConfig") or {}))
        for content in body["contents"]:
            add(f"<{content['role']}>")
            for part in content["parts"]:
                add(part["text"] if "text" in part else _json(part))
        if schema_last:
            add(_json(body.get("generationConfig") or {}))
    return "".join(parts), marks


def shortest(schema: dict):
    """The smallest JSON value ``schema`` accepts."""
    kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    if "null" in kinds:
        return None
    if "object" in kinds:
        return {k: shortest(schema["properties"][k]) for k in schema.get("required") or []}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False}.get(kinds[0])


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n                     # binary search on the longest equal prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def synthetic(flows_n: int, fields_n: int, options: dict):
    """An agent of ``flows_n`` routed flows with ``fields_n`` fields each, and its 4-turn conversation."""
    fields, flows = {}, []
    for i in range(flows_n):
        slugs = [f"f{i}_{j}" for j in range(fields_n)]
        for j, slug in enumerate(slugs):
            fields[slug] = {"type": "string", "description": f"Dado {j} do assunto {i}",
                            "ask": f"Pergunte o dado {j} do assunto {i}."}
        flows.append({"id": f"assunto_{i}", "name": f"Assunto {i}", "description": f"Atende o assunto {i}.",
                      "on": [{"message": [f"quer falar do assunto {i}", f"pergunta sobre o tema {i}",
                                          f"pede ajuda com o item {i}"]}],
                      "steps": [{"id": "coleta", "collect": slugs, "prompt": f"Colete os dados do assunto {i}."}]})
    script = {"understand": [{"flows": {"assunto_0": 95}, "fields": {"f0_0": "Ana"}}]
              + [{"flows": {"assunto_0": 90}}] * (TURNS - 1),
              "speak": [{"message": "Certo! E o próximo dado?"}] * TURNS}
    provider = ScriptedProvider(script=script)
    agent = falai().fields(fields).agent(name="Ana", provider=provider, flows=flows, persona="Simpática.",
                                         clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."},
                                         **options)
    return agent, provider


def synthetic_requests(flows_n: int, fields_n: int, history_items: int, options: dict) -> list:
    agent, provider = synthetic(flows_n, fields_n, options)
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"mensagem antiga número {i}"}
               for i in range(history_items)]
    session = None
    messages = ["oi, quero falar do assunto 0, sou a Ana", "ainda não sei", "pode repetir?", "vou ver aqui"]
    for n, text in enumerate(messages):
        r = agent.turn(session_id="b", session=session, message=text, id=f"m{n}", history=list(history))
        session = r.session
        history += [{"role": "user", "content": text}] + [{"role": "assistant", "content": m.text}
                                                          for m in r.messages]
    return provider.calls


def measure(requests: list) -> dict:
    kinds = {"understand": [], "speak": []}
    for request in requests:
        kinds.setdefault(request.schema_name, []).append(request)
    row: dict = {"calls": len(requests)}
    total = 0
    for kind, calls in kinds.items():
        bodies = [wire_bodies(c) for c in calls]
        texts = {v: [reading(v, b[v]) for b in bodies] for v in ("gemini", "openai", "anthropic")}
        texts["gemini_last"] = [reading("gemini", b["gemini"], schema_last=True) for b in bodies]
        sizes = [tokens(text) for text, _ in texts["openai"]]
        total += sum(sizes)
        row[f"{kind}_in"] = statistics.mean(sizes) if sizes else 0
        for vendor, seq in texts.items():
            shares = [common_prefix(seq[i - 1][0], seq[i][0]) / len(seq[i][0]) for i in range(1, len(seq))]
            row[f"{kind}_{vendor}"] = statistics.mean(shares[:3]) if shares else None
        if kind == "understand":
            row["reply"] = max((tokens(_json(shortest(c.schema))) for c in calls), default=0)
        engaged = None
        seq = texts["anthropic"]
        for i in range(1, len(seq)):
            prev_text, prev_marks = seq[i - 1]
            if any(tokens(prev_text[:m]) >= ANTHROPIC_MIN_CACHE and seq[i][0].startswith(prev_text[:m])
                   for m in prev_marks):
                engaged = i + 1
                break
        row[f"{kind}_cache"] = engaged
    row["turn_in"] = total / TURNS
    return row


def engine_us(options: dict) -> float:
    """Median engine time per turn of the triage conversation (scripted model, no HTTP)."""
    samples = []
    for _ in range(30):
        started = time.perf_counter()
        triage_conversation(options)
        samples.append((time.perf_counter() - started) / TURNS * 1e6)
    return statistics.median(samples)


def pct(x) -> str:
    return "–" if x is None else f"{x * 100:.0f}%"


def table(header: tuple, rows: list) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main() -> None:
    import logging
    logging.getLogger("falai").setLevel(logging.ERROR)      # the synthetic agents' advice is not the point
    agents = [("triage", None, None)] + [(f"{n} flows × {k} fields", n, k) for n in (1, 10, 50, 200) for k in (2, 5)]
    modes = [("v4", {"protocol": "v4"}), ("lean", {"protocol": "lean"})]
    rows, floors = [], []
    for label, n, k in agents:
        for history in (0, 200):
            extra = [("lean, K=5", {"protocol": "lean", "max_candidates": 5})] if n in (50, 200) else []
            for mode, options in modes + extra:
                requests = (triage_conversation(options, history)[0] if n is None
                            else synthetic_requests(n, k, history, options))
                m = measure(requests)
                if mode == "lean" and history == 200:
                    floors.append((label, pct(m["understand_gemini_last"]),
                                   pct(m["speak_gemini_last"])))
                rows.append((label, history, mode, f"{m['understand_in']:,.0f}", f"{m['speak_in']:,.0f}",
                             f"{m['turn_in']:,.0f}", m["reply"],
                             " / ".join(pct(m[f"understand_{v}"]) for v in ("openai", "anthropic", "gemini")),
                             " / ".join(pct(m[f"speak_{v}"]) for v in ("openai", "anthropic", "gemini")),
                             m["understand_cache"] or "never"))
    counted = "tiktoken o200k_base" if _ENCODING is not None else "characters / 4 (tiktoken not installed)"
    print(f"falai token bench: tokens are {counted}; prefix shares OpenAI / Anthropic / Gemini\n")
    print(table(("agent", "history", "protocol", "understand in", "speak in", "input per turn", "shortest reply",
                 "understand prefix", "speak prefix", "Anthropic cache from call"), rows))
    print("\nGemini prefix share if it read the generation config after the contents (the floor), "
          "lean, 200 items:")
    for label, understand, speak in floors:
        print(f"  {label}: understand {understand}, speak {speak}")
    v4, lean = engine_us({"protocol": "v4"}), engine_us({"protocol": "lean"})
    print(f"\nengine time per triage turn (scripted model): v4 {v4:,.0f} µs, lean {lean:,.0f} µs")


if __name__ == "__main__":
    main()
