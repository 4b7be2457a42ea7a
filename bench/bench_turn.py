"""Engine overhead of falai: time and memory per turn, with the model replaced by ScriptedProvider.

    python bench/bench_turn.py            # prints a table
    python bench/bench_turn.py --issue12  # only the rows of issue 12's targets

What it measures is falai's own work (routing, runs and steps, prompts,
envelopes, the session copy), not a model's latency: every model call is an
in-process scripted reply. Figures are medians over many repetitions.
The "request body" rows build a provider's HTTP body (plan, wire, JSON text)
without sending it.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from falai import GenerateRequest, MemoryStore, compact_json, ScriptedProvider, Tool, falai, fake_clock  # noqa: E402
from falai_stores import SQLiteStore  # noqa: E402
from request_bodies import TRIAGE_FIELDS, TRIAGE_FLOWS  # noqa: E402  (the triage agent bench_tokens measures too)

REPEAT = 300


def agent_for(script_factory, **options):
    f = falai().fields(TRIAGE_FIELDS)
    flows = [*TRIAGE_FLOWS,
             {"id": "lembrete", "name": "Lembrete", "steps": [{"id": "w", "wait": "1d"}, {"id": "s", "say": "Oi!"}]}]
    tools = [Tool(id="preco", handler=lambda a, c: {"value": {"preco": 420}}, is_read_only=lambda a: True,
                  parameters={"type": "object", "properties": {"cidade": {"type": "string"}}})]
    return f.agent(name="Ana", provider=ScriptedProvider(script=script_factory()), flows=flows, tools=tools,
                   clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."}, **options)


def many(entry, n=REPEAT * 4):
    return [entry] * n


SCENARIOS = {
    "idle reply (1 speak call)": (
        lambda: {"understand": many({"flows": {"triagem": 0, "suporte": 0}}), "speak": many({"message": "Oi!"})},
        lambda agent, i, state: agent.turn(session_id=f"s{i}", message="oi", id="m1")),
    "routed start + collect (understand + speak)": (
        lambda: {"understand": many({"flows": {"triagem": 95}, "fields": {"nome": "Ana"}}),
                 "speak": many({"message": "E a empresa?"})},
        lambda agent, i, state: agent.turn(session_id=f"s{i}", message="quero saber", id="m1")),
    "tool round (speak x2)": (
        lambda: {"understand": many({"flows": {"triagem": 0}}),
                 "speak": [e for _ in range(REPEAT * 2) for e in (
                     {"message": "", "toolCalls": [{"toolName": "preco", "arguments": {"cidade": "X"}}]},
                     {"message": "R$ 420"})]},
        lambda agent, i, state: agent.turn(session_id=f"s{i}", message="preço?", id="m1")),
    "start + timer wait, no model call": (
        lambda: {},
        lambda agent, i, state: agent.turn(session_id=f"s{i}", start={"flow": "lembrete", "key": "k"})),
}


def time_scenario(script_factory, call) -> tuple[float, float, int]:
    agent = agent_for(script_factory)
    for i in range(20):
        call(agent, i, None)                                   # warm up
    samples = []
    for i in range(REPEAT):
        started = time.perf_counter()
        call(agent, i, None)
        samples.append(time.perf_counter() - started)
    tracemalloc.start()
    call(agent, REPEAT + 1, None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    samples.sort()
    return statistics.median(samples) * 1e6, samples[int(len(samples) * 0.95)] * 1e6, peak


def long_conversation(turns: int = 50) -> tuple[float, int]:
    """A session that has lived through many turns: per-turn time and the blob's size."""
    agent = agent_for(lambda: {"understand": many({"flows": {"triagem": 0, "suporte": 0}}, turns),
                               "speak": many({"message": "Certo."}, turns)})
    session, started = None, time.perf_counter()
    for i in range(turns):
        session = agent.turn(session_id="long", session=session, message=f"mensagem {i}", id=f"m{i}").session
    per_turn = (time.perf_counter() - started) / turns * 1e6
    return per_turn, len(json.dumps(session.to_dict()))


def store_round_trips(store, n: int = 500) -> float:
    agent = agent_for(lambda: {"understand": many({"flows": {"triagem": 95}, "fields": {"nome": "Ana"}}, 1),
                               "speak": many({"message": "E a empresa?"}, 1)})
    session = agent.turn(session_id="st", message="quero saber", id="m1").session
    version, started = 0, time.perf_counter()
    for _ in range(n):
        session = store.save(session, version)
        version = store.load("st").version
    return (time.perf_counter() - started) / n * 1e6


def import_time_ms() -> float:
    """A fresh interpreter's ``import falai``, with its bytecode cached as an installed package has it."""
    code = "import time; t = time.perf_counter(); import falai; print((time.perf_counter() - t) * 1000)"
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as cache:
        env["PYTHONPYCACHEPREFIX"] = cache
        runs = [float(subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                                     text=True).stdout) for _ in range(6)]
    return statistics.median(runs[1:])


def median_us(call, repeat: int = REPEAT) -> float:
    for _ in range(10):
        call()                                                # warm up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def triage_turn_us() -> float:
    """The routed start of the triage flow on a fresh session: one understand and one speak call."""
    factory, call = SCENARIOS["routed start + collect (understand + speak)"]
    return time_scenario(factory, call)[0]


def many_flows_us(count: int) -> float:
    """A message turn on an agent with ``count`` phrased flows, each scored by the understand call."""
    f = falai().fields({f"campo{i}": {"type": "string", "ask": f"Pergunte o campo {i}."} for i in range(count)})
    flows = [{"id": f"fluxo{i}", "name": f"Fluxo {i}", "description": f"O assunto número {i}.",
              "on": [{"message": [f"quer falar do assunto {i}", f"pergunta sobre {i}"]}],
              "steps": [{"id": "q", "collect": [f"campo{i}"]}]} for i in range(count)]
    script = {"understand": many({"flows": {"fluxo0": 95}}, REPEAT * 2), "speak": many({"message": "Certo."},
                                                                                       REPEAT * 2)}
    agent = f.agent(name="Ana", provider=ScriptedProvider(script=script), flows=flows,
                    clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."})
    counter = iter(range(10 ** 9))
    return median_us(lambda: agent.turn(session_id=f"s{next(counter)}", message="quero falar", id="m1"),
                     REPEAT // 2)


def old_session_us(turns: int = 1000) -> float:
    """One idle turn on a session that has lived through ``turns`` turns (the saved blob passed back in)."""
    agent = agent_for(lambda: {"understand": many({"flows": {"triagem": 0, "suporte": 0}}, turns + REPEAT * 2),
                               "speak": many({"message": "Certo."}, turns + REPEAT * 2)})
    session = None
    for i in range(turns):
        session = agent.turn(session_id="old", session=session, message=f"mensagem {i}", id=f"m{i}").session
    counter = iter(range(10 ** 9))
    return median_us(lambda: agent.turn(session_id="old", session=session, message="mais uma",
                                        id=f"x{next(counter)}"), REPEAT // 2)


def request_body_us(provider, items: int) -> float:
    """Plan, wire and JSON text of one speak request over ``items`` history items (nothing is sent)."""
    history = []
    for i in range(items // 2):
        history.append({"role": "user", "content": f"Mensagem número {i} do cliente, com algum texto a mais."})
        history.append({"role": "assistant", "content": f"Resposta número {i} da assistente, também curta."})
    request = GenerateRequest(system="Você é a Ana.", prompt="Responda.", history=history, context={},
                              schema={"type": "object", "properties": {"message": {"type": "string"}}},
                              schema_name="speak", tools=None)
    def body() -> None:
        plan = provider._plan(request)
        _, _, wire = provider._wire(provider.model, plan)
        getattr(provider, "_body_text", compact_json)(wire)      # what _attempt sends (older trees: compact_json)
    return median_us(body, 100)


def issue12_rows() -> list[tuple[str, str, str, str]]:
    """The rows of issue 12's table."""
    from falai_providers import GeminiProvider, OpenAICompatibleProvider  # noqa: PLC0415
    rows = [("triage turn", f"{triage_turn_us():,.0f} µs", "", ""),
            ("50 flows", f"{many_flows_us(50):,.0f} µs", "", ""),
            ("200 flows", f"{many_flows_us(200):,.0f} µs", "", ""),
            ("a session 1,000 turns old", f"{old_session_us():,.0f} µs", "", "")]
    for provider in (GeminiProvider(api_key="k", model="gemini-2.5-flash"),
                     OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini")):
        for items in (200, 2000):
            rows.append((f"{provider.name} request body, {items:,} history items",
                         f"{request_body_us(provider, items):,.0f} µs", "", ""))
    rows.append(("import falai", f"{import_time_ms():,.1f} ms", "", ""))
    return rows


def main() -> None:
    rows = []
    if "--issue12" in sys.argv:
        print_table(issue12_rows())
        return
    for name, (script_factory, call) in SCENARIOS.items():
        median, p95, peak = time_scenario(script_factory, call)
        rows.append((name, f"{median:,.0f} µs", f"{p95:,.0f} µs", f"{peak / 1024:,.0f} KiB"))
    per_turn, blob = long_conversation()
    rows.append(("turn 50 of a long conversation", f"{per_turn:,.0f} µs (mean)", "", f"blob {blob / 1024:,.1f} KiB"))
    rows.append(("MemoryStore save + load", f"{store_round_trips(MemoryStore()):,.0f} µs", "", ""))
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SQLiteStore(os.path.join(folder, "bench.db"))
        sqlite.initialize()
        rows.append(("SQLiteStore save + load (file)", f"{store_round_trips(sqlite):,.0f} µs", "", ""))
        sqlite.close()
    rows.extend(issue12_rows())
    print_table(rows)


def print_table(rows: list) -> None:
    header = ("what", "median", "p95", "peak memory")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]
    line = lambda row: "| " + " | ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) + " |"  # noqa: E731
    print(f"falai bench, Python {sys.version.split()[0]}, {REPEAT} repetitions per scenario\n")
    print(line(header))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print(line(row))


if __name__ == "__main__":
    main()
