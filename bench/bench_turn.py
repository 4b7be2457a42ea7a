"""Engine overhead of falai: time and memory per turn, with the model replaced by ScriptedProvider.

    python bench/bench_turn.py                            # prints a table
    python bench/bench_turn.py --issue12                  # only the rows of issue 12's targets
    python bench/bench_turn.py --issue12 --baseline       # those rows for e397a6a and for this tree, side by side
    python bench/bench_turn.py --issue12 --baseline REV --rounds 20 --pairs 10
    python bench/bench_turn.py --issue12 --cpu            # CPU time rather than wall time
    python bench/bench_turn.py --issue12 --instructions   # valgrind's instruction counts, e397a6a and this tree
    python bench/bench_turn.py --issue12 --instructions REV --rows triage,old1000,import   # only those rows

What it measures is falai's own work (routing, runs and steps, prompts,
envelopes, the session copy), not a model's latency: every model call is an
in-process scripted reply. Figures are medians over many repetitions.
The "request body" rows build a provider's HTTP body (plan, wire, JSON text)
without sending it.

``--baseline REV`` compares against an older tree rather than printing bare
figures, because a bare figure says little here: the development machine has
2 cores shared with other work, so its speed drifts by 10-30% over minutes,
and the absolute figures of issue 12's table ("today") came from another
machine. So the issue's targets are read as ratios (target / today: triage
0.10 / 0.17 ms), and each row is measured for REV (default ``e397a6a``, the
commit whose figures the issue calls "today", exported with ``git archive``
into a temporary folder) and for this tree; against another REV the table
shows the ratios only, since the targets are ratios to ``e397a6a``. Each round starts one server
process per tree (this file with ``--issue12-serve``); for each row both
prepare it (the agent, the scripts, the old session), then they time batches
of BATCH repetitions in turn, one tree right after the other, ``--pairs``
times (default 10), the order swapped every pair, so that drift falls on
both alike. ``--rounds`` (default 20) starts fresh servers each round,
because a process has a speed of its own too (where its memory landed, its
hash seed): one long-lived pair of servers gave a triage ratio of 0.39 in one
run and 0.62 in the next. An import is one fresh interpreter per tree, in
pairs the same way. The table gives each tree's median over every batch, their
ratio (now / REV), which decides "meets", and the range of the rounds' ratios.
The servers time with the process's CPU clock (as ``--cpu`` does), not the wall
clock: on a busy machine a turn that lasts longer than a scheduler slice is
preempted, and its wall time grows with the load (a 15 ms loop measured 63 ms
at a load of 12 on 2 cores) while a short one's does not, which would bend the
ratios.
A server runs this file's scenario code (REV's bench lacks the newer
rows) against REV's falai: ``--tree PATH`` puts PATH first on ``sys.path``
before falai is imported.

``--issue12 --instructions [REV]`` counts instructions instead, with valgrind
(callgrind), which no other work on the machine moves: for each row and tree,
one process prepares the row and runs it COUNTED times with the garbage
collector paused, another runs it none, and the difference over COUNTED is
the figure (a collection would land wherever the allocations add up and blur
it); the hash seed is fixed and the bytecode cached, and an import is
``python -S -c "import falai"`` minus ``pass``. About 3 minutes on 2 cores.
Instructions are not time (a cache miss costs more than an add), so the CPU
time of ``--baseline`` stays the verdict; the count says which way a change
moved a row when the timing's noise is as large as the change.

``--rows KEY,KEY`` (with ``--issue12``, alone or with ``--baseline`` or
``--instructions``) measures only those of ISSUE12's rows: while a change is
being tried, the triage row's count takes under a minute where every row takes
three.
"""
from __future__ import annotations

import functools
import gc
import inspect
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
# --tree PATH: measure the falai of another source tree with this file's scenarios (see --baseline)
TREE = os.path.abspath(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else ROOT
sys.path[:0] = [TREE, os.path.join(ROOT, "tests")]

import falai as _falai_module, falai_providers as _providers_module, falai_stores as _stores_module  # noqa: E402,E401
if not all(module.__file__.startswith(TREE + os.sep)
           for module in (_falai_module, _providers_module, _stores_module)):
    sys.exit(f"bench_turn: falai was imported from {_falai_module.__file__}, not from {TREE}")

from falai import GenerateRequest, MemoryStore, compact_json, ScriptedProvider, Tool, falai, fake_clock  # noqa: E402
from falai_stores import SQLiteStore  # noqa: E402
from request_bodies import TRIAGE_FIELDS, TRIAGE_FLOWS  # noqa: E402  (the triage agent bench_tokens measures too)

REPEAT = 300
BATCH = 15             # --baseline: repetitions a server times per batch, a median (so a GC pause counts once)
# --cpu: time with the process's CPU clock, which other work on a busy machine does not inflate (see --baseline)
CLOCK = time.process_time if "--cpu" in sys.argv else time.perf_counter
BASELINE = "e397a6a"   # the commit whose figures issue 12 calls "today"


def agent_for(script_factory, **options):
    f = falai().fields(TRIAGE_FIELDS)
    flows = [*TRIAGE_FLOWS,
             {"id": "lembrete", "name": "Lembrete", "steps": [{"id": "w", "wait": "1d"}, {"id": "s", "say": "Oi!"}]}]
    tools = [Tool(id="preco", handler=lambda a, c: {"value": {"preco": 420}}, is_read_only=lambda a: True,
                  parameters={"type": "object", "properties": {"cidade": {"type": "string"}}})]
    return f.agent(name="Ana", provider=ScriptedProvider(script=script_factory()), flows=flows, tools=tools,
                   clock=fake_clock("2026-09-20T10:00:00.000Z"), idle={"prompt": "Atenda."}, **options)


def many(entry, n: int | None = None) -> list:
    return [entry] * (REPEAT * 4 if n is None else n)


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
        started = CLOCK()
        call(agent, i, None)
        samples.append(CLOCK() - started)
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
    session, started = None, CLOCK()
    for i in range(turns):
        session = agent.turn(session_id="long", session=session, message=f"mensagem {i}", id=f"m{i}").session
    per_turn = (CLOCK() - started) / turns * 1e6
    return per_turn, len(json.dumps(session.to_dict()))


def store_round_trips(store, n: int = 500) -> float:
    agent = agent_for(lambda: {"understand": many({"flows": {"triagem": 95}, "fields": {"nome": "Ana"}}, 1),
                               "speak": many({"message": "E a empresa?"}, 1)})
    session = agent.turn(session_id="st", message="quero saber", id="m1").session
    version, started = 0, CLOCK()
    for _ in range(n):
        session = store.save(session, version)
        version = store.load("st").version
    return (CLOCK() - started) / n * 1e6


def import_time_ms() -> float:
    """A fresh interpreter's ``import falai``, with its bytecode cached as an installed package has it."""
    with tempfile.TemporaryDirectory() as cache:
        runs = [one_import_ms(TREE, cache, CLOCK.__name__) for _ in range(6)]
    return statistics.median(runs[1:])      # the first one writes the bytecode


def median_us(call, repeat: int = REPEAT, warm_up: int = 10) -> float:
    for _ in range(warm_up):
        call()
    samples = []
    for _ in range(repeat):
        started = CLOCK()
        call()
        samples.append(CLOCK() - started)
    return statistics.median(samples) * 1e6


def triage_turn() -> Callable[[], object]:
    """The routed start of the triage flow on a fresh session: one understand and one speak call."""
    factory, call = SCENARIOS["routed start + collect (understand + speak)"]
    agent, counter = agent_for(factory), iter(range(10 ** 9))
    return lambda: call(agent, next(counter), None)


def many_flows(count: int) -> Callable[[], object]:
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
    return lambda: agent.turn(session_id=f"s{next(counter)}", message="quero falar", id="m1")


def old_session(turns: int = 1000) -> Callable[[], object]:
    """One idle turn on a session that has lived through ``turns`` turns (the saved blob passed back in)."""
    agent = agent_for(lambda: {"understand": many({"flows": {"triagem": 0, "suporte": 0}}, turns + REPEAT * 2),
                               "speak": many({"message": "Certo."}, turns + REPEAT * 2)})
    session = None
    for i in range(turns):
        session = agent.turn(session_id="old", session=session, message=f"mensagem {i}", id=f"m{i}").session
    counter = iter(range(10 ** 9))
    return lambda: agent.turn(session_id="old", session=session, message="mais uma", id=f"x{next(counter)}")


def request_body(vendor: str, items: int) -> Callable[[], Callable[[], object]]:
    """The request-body row of one vendor: plan, wire and JSON text of one speak request over ``items``
    history items (nothing is sent)."""
    def prepare() -> Callable[[], object]:
        from falai_providers import GeminiProvider, OpenAICompatibleProvider  # noqa: PLC0415
        provider = (GeminiProvider(api_key="k", model="gemini-2.5-flash") if vendor == "gemini"
                    else OpenAICompatibleProvider(api_key="k", model="gpt-4.1-mini"))
        history = []
        for i in range(items // 2):
            history.append({"role": "user", "content": f"Mensagem número {i} do cliente, com algum texto a mais."})
            history.append({"role": "assistant", "content": f"Resposta número {i} da assistente, também curta."})
        request = GenerateRequest(system="Você é a Ana.", prompt="Responda.", history=history, context={},
                                  schema={"type": "object", "properties": {"message": {"type": "string"}}},
                                  schema_name="speak", tools=None)
        # What _request sends: _body_text(body, plan) now, _body_text(body) or compact_json(body) in older trees.
        text = getattr(provider, "_body_text", None)
        takes_plan = text is not None and "plan" in inspect.signature(text).parameters

        def body() -> object:
            plan = provider._plan(request)
            _, _, wire = provider._wire(provider.model, plan)
            if text is None:
                return compact_json(wire)
            return text(wire, plan) if takes_plan else text(wire)
        return body
    return prepare


# Issue 12's rows: key -> (what, prepare, the issue's "today", the issue's target), today and target in ms
# as the issue's table gives them. ``prepare()`` builds what the row needs and returns one repetition of it
# (a turn, a request body) for median_us or the paired loop of --baseline; "import" is a fresh interpreter.
ISSUE12: dict[str, tuple[str, Callable[[], Callable[[], object]] | None, float, float]] = {
    "triage": ("triage turn", triage_turn, 0.17, 0.10),
    "flows50": ("50 flows", lambda: many_flows(50), 0.66, 0.25),
    "flows200": ("200 flows", lambda: many_flows(200), 2.2, 0.5),
    "old1000": ("a session 1,000 turns old", old_session, 0.21, 0.10),
    "gemini200": ("gemini request body, 200 history items", request_body("gemini", 200), 0.25, 0.05),
    "gemini2000": ("gemini request body, 2,000 history items", request_body("gemini", 2000), 3.0, 0.5),
    "openai200": ("openai request body, 200 history items", request_body("openai", 200), 0.25, 0.05),
    "openai2000": ("openai request body, 2,000 history items", request_body("openai", 2000), 3.0, 0.5),
    "import": ("import falai", None, 26, 20),
}


def chosen_rows() -> dict:
    """ISSUE12, or the rows ``--rows KEY,KEY`` names, in ISSUE12's order."""
    if "--rows" not in sys.argv:
        return ISSUE12
    keys = sys.argv[sys.argv.index("--rows") + 1].split(",")
    unknown = [key for key in keys if key not in ISSUE12]
    if unknown:
        sys.exit(f"bench_turn --rows: no row {', '.join(unknown)}; the rows are {', '.join(ISSUE12)}")
    return {key: row for key, row in ISSUE12.items() if key in keys}


def issue12_rows() -> list[tuple[str, str, str, str]]:
    """The rows of issue 12's table, measured in this process (the import in fresh interpreters)."""
    return [(what, f"{import_time_ms():,.1f} ms" if prepare is None else f"{median_us(prepare(), REPEAT // 2):,.0f} µs",
             "", "") for what, prepare, _, _ in chosen_rows().values()]


def export_tree(rev: str, folder: str) -> None:
    """Write the files of commit ``rev`` of this repository into ``folder``."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"bench_turn --baseline {rev}: git archive failed: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):                   # Python 3.12 warns without a filter
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)


class Server:
    """A subprocess running this file against the falai of one tree: it prepares a row, then times batches."""

    def __init__(self, tree: str):
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--issue12-serve", "--tree", tree,
                                         "--cpu"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            sys.exit(f"bench_turn: the server for {line!r} stopped (its error is above)")
        return float(answer)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def serve() -> None:
    """--issue12-serve: ``prepare KEY`` builds a row; ``batch`` times BATCH repetitions of it and prints their
    median in µs (CPU time: the parent starts it with --cpu). The parent alternates two of these servers."""
    global REPEAT
    REPEAT = 1000                              # the scripts' length: room for 130 batches of 15 a row
    call: Callable[[], object] = lambda: None  # noqa: E731
    for line in sys.stdin:
        command, *args = line.split()
        if command == "prepare":
            prepare = ISSUE12[args[0]][1]
            assert prepare is not None         # never "import": the parent times that one itself
            call = prepare()
            for _ in range(10):
                call()                         # warm up
            print(0.0, flush=True)
        else:
            print(median_us(call, BATCH, warm_up=0), flush=True)


def cached_env(cache: str, **extra: str) -> dict:
    """This process's environment for a child whose bytecode is written to and read from ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": cache, **extra}


def one_import_ms(tree: str, cache: str, clock: str = "process_time") -> float:
    """One fresh interpreter's ``import falai`` from ``tree`` (CPU time by default), bytecode cached in ``cache``."""
    code = f"import time; t = time.{clock}(); import falai; print((time.{clock}() - t) * 1000)"
    return float(subprocess.run([sys.executable, "-c", code], cwd=tree, env=cached_env(cache), capture_output=True,
                                text=True).stdout)


def commit_of(rev: str) -> str:
    """The full hash ``rev`` names in this repository ("" when it names none)."""
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                          capture_output=True, text=True)
    return done.stdout.strip()


def paired(measure_base: Callable[[], float], measure_now: Callable[[], float], pairs: int) -> tuple[list, list]:
    """``pairs`` measurements of each, one right after the other, the order swapped every pair."""
    base, now = [], []
    for n in range(pairs):
        if n % 2:
            now.append(measure_now())
            base.append(measure_base())
        else:
            base.append(measure_base())
            now.append(measure_now())
    return base, now


def issue12_side_by_side(rev: str, rounds: int, pairs: int) -> None:
    """Each row for commit ``rev`` and for this tree: ``rounds`` fresh pairs of servers, each timing ``pairs``
    pairs of batches, one tree right after the other."""
    rows_asked = chosen_rows()
    samples: dict[tuple[str, str], list[list[float]]] = {(key, name): [] for key in rows_asked
                                                         for name in ("base", "now")}
    with tempfile.TemporaryDirectory() as folder:
        export_tree(rev, os.path.join(folder, "tree"))
        trees = {"base": os.path.join(folder, "tree"), "now": ROOT}
        caches = {name: os.path.join(folder, f"pycache-{name}") for name in trees}
        for name in trees:
            one_import_ms(trees[name], caches[name])     # writes the bytecode the later imports read
        for round_number in range(rounds):
            servers = {name: Server(tree) for name, tree in trees.items()}
            for key, (_, prepare, _, _) in rows_asked.items():
                if prepare is None:
                    measures = [functools.partial(one_import_ms, trees[name], caches[name]) for name in trees]
                else:
                    for server in servers.values():
                        server.ask(f"prepare {key}")
                    measures = [lambda server=server: server.ask("batch") / 1000 for server in servers.values()]
                base, now = paired(*measures, pairs)
                samples[key, "base"].append(base)
                samples[key, "now"].append(now)
            for server in servers.values():
                server.close()
            print(f"round {round_number + 1} of {rounds} done", file=sys.stderr)
    rows = []
    for key, (what, _, today, target) in rows_asked.items():
        base, now = ([value for batch in samples[key, name] for value in batch] for name in ("base", "now"))
        ratio, wanted = statistics.median(now) / statistics.median(base), target / today
        per_round = [statistics.median(n) / statistics.median(b)
                     for b, n in zip(samples[key, "base"], samples[key, "now"])]
        rows.append((what, f"{statistics.median(base):.3g} ms", f"{statistics.median(now):.3g} ms", f"{ratio:.2f}",
                     f"{min(per_round):.2f}-{max(per_round):.2f}", f"{issue(today)} -> {issue(target)} ms",
                     f"{wanted:.2f}", "yes" if ratio <= wanted else "no"))
    head = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    header = ("measure (instant provider, median)", rev, f"now ({head.stdout.strip()})", "ratio",
              "rounds' ratios", "issue: today -> target", "target ratio", "meets")
    if commit_of(rev) != commit_of(BASELINE):     # the targets are ratios to BASELINE only
        rows, header = [row[:5] for row in rows], header[:5]
    print(f"falai bench, issue 12 side by side, Python {sys.version.split()[0]}, CPU time: {rounds} rounds of fresh "
          f"processes, {pairs} pairs a row each (a turn or body row's figure is a median of {BATCH} repetitions; "
          "an import is one fresh interpreter)\n")
    print_table(rows, header)


COUNTED = 40    # --instructions: a row's count is the difference between this many repetitions and none


def count_row() -> None:
    """--issue12-count KEY N: prepare row KEY, warm it up, pause the garbage collector and run it N times
    (a subprocess of --instructions, under valgrind)."""
    key, repeat = sys.argv[sys.argv.index("--issue12-count") + 1], int(sys.argv[sys.argv.index("--issue12-count") + 2])
    prepare = ISSUE12[key][1]
    assert prepare is not None
    call = prepare()
    for _ in range(10):
        call()
    gc.collect()
    gc.disable()        # a collection lands wherever the allocations add up: it would blur the difference
    for _ in range(repeat):
        call()


def run_counted(tree: str, cache: str, arguments: list[str],
                under: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """This file (or, for ``-S``, a bare interpreter) run for ``tree``, hash seed fixed, bytecode kept in ``cache``."""
    command = [sys.executable, *arguments] if arguments[0] == "-S" else \
        [sys.executable, os.path.abspath(__file__), "--tree", tree, *arguments]
    return subprocess.run([*under, *command], cwd=tree, env=cached_env(cache, PYTHONHASHSEED="0"),
                          capture_output=True, text=True)


def instructions(tree: str, cache: str, key: str, repeat: int) -> int:
    """What valgrind counts for one process of ``tree``: row ``key`` prepared and run ``repeat`` times
    (``import``: ``python -S -c "import falai"``, or ``pass`` for 0)."""
    arguments = ["-S", "-c", "import falai" if repeat else "pass"] if key == "import" else \
        ["--issue12-count", key, str(repeat)]
    done = run_counted(tree, cache, arguments, ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"))
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"bench_turn --instructions: valgrind failed on {key} of {tree}:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def issue12_instructions(rev: str) -> None:
    """Each row's instructions per repetition for commit ``rev`` and for this tree, and their ratio: a count
    no other work on the machine moves (docs/guide/development.md)."""
    if shutil.which("valgrind") is None:
        sys.exit("bench_turn --instructions needs valgrind (apt-get install valgrind)")
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415
    with tempfile.TemporaryDirectory() as folder:
        export_tree(rev, os.path.join(folder, "tree"))
        trees = {"base": os.path.join(folder, "tree"), "now": ROOT}
        caches = {name: os.path.join(folder, f"pycache-{name}") for name in trees}
        for name in trees:      # writes the bytecode the counted runs read: compiling would be counted too
            run_counted(trees[name], caches[name], ["--issue12-count", "triage", "0"])
        jobs = [(name, key, repeat) for key in chosen_rows() for name in trees
                for repeat in ((0, 1) if key == "import" else (0, COUNTED))]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            counts = dict(zip(jobs, pool.map(lambda job: instructions(trees[job[0]], caches[job[0]], job[1], job[2]),
                                             jobs)))
    rows = []
    for key, (what, _, today, target) in chosen_rows().items():
        top = 1 if key == "import" else COUNTED
        base, now = ((counts[name, key, top] - counts[name, key, 0]) / top for name in ("base", "now"))
        wanted = target / today
        rows.append((what, f"{base / 1e6:,.3f}M", f"{now / 1e6:,.3f}M", f"{now / base:.2f}", f"{wanted:.2f}",
                     "yes" if now / base <= wanted else "no"))
    head = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    print(f"falai bench, issue 12 in instructions (valgrind), Python {sys.version.split()[0]}: a turn or body "
          f"row is one repetition, the difference of {COUNTED} and none with the garbage collector paused; "
          "an import is `python -S -c \"import falai\"` minus `pass`\n")
    print_table(rows, ("measure (instant provider)", rev, f"now ({head.stdout.strip()})", "ratio", "target ratio",
                       "meets"))


def issue(ms: float) -> str:
    """A figure of the issue's table, written as the issue writes it."""
    return f"{ms:.2f}" if ms < 1 else f"{ms:g}"


def main() -> None:
    rows = []
    if "--issue12-serve" in sys.argv:                         # a subprocess of --baseline: one tree's rows
        serve()
        return
    if "--issue12-count" in sys.argv:                         # a subprocess of --instructions
        count_row()
        return
    if "--issue12" in sys.argv and "--instructions" in sys.argv:
        following = sys.argv[sys.argv.index("--instructions") + 1:]
        issue12_instructions(following[0] if following and not following[0].startswith("--") else BASELINE)
        return
    if "--issue12" in sys.argv and "--baseline" in sys.argv:
        following = sys.argv[sys.argv.index("--baseline") + 1:]
        rev = following[0] if following and not following[0].startswith("--") else BASELINE
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 20
        pairs = int(sys.argv[sys.argv.index("--pairs") + 1]) if "--pairs" in sys.argv else 10
        issue12_side_by_side(rev, rounds, pairs)
        return
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


def print_table(rows: list, header: tuple | None = None) -> None:
    if header is None:
        header = ("what", "median", "p95", "peak memory")
        print(f"falai bench, Python {sys.version.split()[0]}, {REPEAT} repetitions per scenario\n")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "| " + " | ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) + " |"  # noqa: E731
    print(line(header))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print(line(row))


if __name__ == "__main__":
    main()
