"""Vendoring (docs/guide/deploying.md, "Installing, or copying the files in"; issue 30): the sets of
files to copy, each copied alone into an empty folder and run there with no site-packages, and the
numbers the deploying guide's table and the README's vendoring sentence give for them.

SETS below is the one source of truth: the guide and the README are checked against it, exactly,
so a file that grows fails this test until the numbers are rewritten (the failure says which
number to write where). A new falai*.py module must join a set
(test_every_file_is_in_a_set_and_each_set_holds_the_one_above_it).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import falai
from fake_model_server import FakeModelServer, gemini_frame

ROOT = Path(falai.__file__).resolve().parent

ENGINE = ("falai.py", "falai_base.py", "falai_checks.py", "falai_calls.py", "falai_spec.py",
          "falai_protocols.py")

# The sets, smallest first, each holding the one above it, named as the guide's table names them.
SETS = {
    "The engine": ENGINE,                                           # your own provider object
    "+ Gemini": ENGINE + ("falai_providers.py",),                   # needs requests
    "+ every provider": ENGINE + ("falai_providers.py",),           # the same file holds all four
    "+ the CLI": ENGINE + ("falai_providers.py", "falai_cli.py",
                           "falai_testing.py"),                     # the CLI imports ScriptedProvider
    "+ the host": ENGINE + ("falai_providers.py", "falai_cli.py", "falai_testing.py",
                            "falai_host.py", "falai_stores.py"),    # `falai host ROLE`; the host extra
}

# Files any set may take besides (the guide says so under its table): each needs only the engine.
ADD_ONS = ("falai_stores.py", "falai_testing.py")

# What requests needs on sys.path in a folder with no site-packages: itself and its dependencies.
REQUESTS_DISTRIBUTIONS = ("requests", "urllib3", "idna", "certifi", "charset-normalizer")

DOC = ROOT / "docs" / "guide" / "deploying.md"
README = ROOT / "README.md"
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine",
         10: "ten", 11: "eleven", 12: "twelve"}


def lines_of(files) -> int:
    """What ``wc -l`` adds up for ``files``: their newline characters."""
    return sum((ROOT / name).read_bytes().count(b"\n") for name in files)


def added(name: str) -> tuple[str, ...]:
    """The files a set adds to the set above it."""
    names = list(SETS)
    above = set(SETS[names[names.index(name) - 1]]) if names.index(name) else set()
    return tuple(file for file in SETS[name] if file not in above)


def modules(files) -> set[str]:
    return {file[:-3] for file in files}


# The sets themselves ##########################################################################

def test_every_file_is_in_a_set_and_each_set_holds_the_one_above_it():
    every = sorted(path.name for path in ROOT.glob("falai*.py"))
    assert sorted(SETS["+ the host"]) == every, "a new falai*.py module: put it in a set (SETS)"
    names = list(SETS)
    for smaller, larger in zip(names, names[1:]):
        assert set(SETS[smaller]) <= set(SETS[larger]), f"{larger!r} lacks files of {smaller!r}"
    for name, files in SETS.items():
        assert len(set(files)) == len(files), name
    assert set(ADD_ONS) <= set(SETS["+ the host"])


def test_no_smaller_set_needs_the_cli_or_the_host():
    """The CLI and the host sit on top: the engine and the provider sets run without them (the runs
    below copy only a set's files, so a smaller set that imported either would fail there)."""
    for name, files in SETS.items():
        if name not in ("+ the CLI", "+ the host"):
            assert not {"falai_cli.py", "falai_host.py"} & set(files), name
    assert "falai_host.py" not in SETS["+ the CLI"]


# The guide's table and the README's sentence say the same #####################################

def table_rows() -> dict[str, list[str]]:
    """The rows of deploying.md's table of sets: first cell -> cells."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] in SETS:
            assert cells[0] not in rows, f"docs/guide/deploying.md: two rows named {cells[0]!r}"
            rows[cells[0]] = cells
    return rows


def test_the_deploying_guides_table_lists_each_sets_files_and_lines():
    rows = table_rows()
    assert list(rows) == list(SETS), (
        f"docs/guide/deploying.md: the table of sets needs one row per set, in this order: "
        f"{list(SETS)} (it has {list(rows)})")
    fixes = []          # every wrong cell at once, so one edit fixes the table
    for name, cells in rows.items():
        assert len(cells) == 4, f"docs/guide/deploying.md, the row {name!r}: Set | Copy | Lines | When"
        listed = re.findall(r"`(falai\w*\.py)`", cells[1])
        if sorted(listed) != sorted(added(name)):
            fixes.append(f"the row {name!r}: the Copy column names the files this set adds to the row "
                         f"above: {', '.join(f'`{f}`' for f in added(name)) or 'no file'} "
                         f"(it names {', '.join(listed) or 'none'})")
        want = f"{lines_of(SETS[name]):,} in {len(SETS[name])} files"
        if cells[2] != want:
            fixes.append(f"the row {name!r}: write {want!r} in the Lines column (it says {cells[2]!r})")
    if fixes:
        pytest.fail("docs/guide/deploying.md, the table of sets:\n  " + "\n  ".join(fixes), pytrace=False)


README_SENTENCE = re.compile(r"To vendor falai, copy (\w+) files \(([\d,]+) lines\) for the engine"
                             r".*? or (\w+) \(([\d,]+) lines\) for Gemini")


def test_the_readme_states_the_engines_and_geminis_lines():
    text = " ".join(README.read_text(encoding="utf-8").split())
    found = README_SENTENCE.search(text)
    assert found, ("README.md: the vendoring sentence is missing; it reads \"To vendor falai, copy six "
                   "files (N lines) for the engine ..., or seven (M lines) for Gemini ...\"")
    said, fixes = found.groups(), []
    for (count_said, lines_said), name in zip((said[:2], said[2:]), ("The engine", "+ Gemini")):
        count, lines = WORDS.get(len(SETS[name]), str(len(SETS[name]))), f"{lines_of(SETS[name]):,}"
        if (count_said, lines_said) != (count, lines):
            fixes.append(f"for {name!r} write {count!r} files and {lines!r} lines "
                         f"(it says {count_said!r} and {lines_said!r})")
    if fixes:
        pytest.fail("README.md, the vendoring sentence:\n  " + "\n  ".join(fixes), pytrace=False)


# Each set runs a turn from an empty folder ####################################################

@pytest.fixture(scope="module")
def requests_path(tmp_path_factory) -> Path:
    """A folder holding requests and its dependencies alone (links into the environment's
    site-packages): the Gemini and larger sets get it on sys.path, never the site-packages, which
    would bring this checkout's own installed copy of falai."""
    folder = tmp_path_factory.mktemp("requests")
    for name in REQUESTS_DISTRIBUTIONS:
        distribution = importlib.metadata.distribution(name)
        tops = {file.parts[0] for file in distribution.files or ()}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or top.endswith(".dist-info") or top.endswith(".pth"):
                continue
            source = Path(distribution.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def run_set(tmp_path: Path, name: str, body: str, extra: tuple[str, ...] = (),
            path: tuple[Path, ...] = (), stdin: str = "") -> dict:
    """Copy exactly the set's files (and ``extra``) into an empty folder, run ``body`` there with
    ``python -S -I`` (no site-packages, no PYTHON* variables) and return what it printed last, as
    JSON, after checking every falai module it loaded came from that folder."""
    folder = tmp_path / "vendored"
    folder.mkdir()
    for file in SETS[name] + extra:
        shutil.copy(ROOT / file, folder)
    # The folder goes on sys.path by its full name: from ".", Python 3.10 names the module
    # "..././falai.py".
    entries = [str(folder), *map(str, path)]
    code = (f"import json, sys\nsys.path[:0] = {entries!r}\n{body}\n"
            "print(json.dumps({'out': OUT, 'loaded': {m: getattr(sys.modules[m], '__file__', None) "
            "for m in sorted(sys.modules) if m.startswith('falai')}}))\n")
    # No proxy variables: requests would send the calls to the loopback fake server through one.
    environ = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    done = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=environ, input=stdin, timeout=60)
    assert done.returncode == 0, f"the set {name!r} failed from an empty folder:\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for module, file in result["loaded"].items():
        assert file == str(folder / f"{module}.py"), f"{module} came from {file}, not the copied set"
    result["stdout"] = done.stdout
    return result


# A provider object of one's own: the four members of falai's provider seam (AiProvider).
OWN_PROVIDER_TURN = """
import falai

class Mine:
    name = "mine"
    capabilities = falai.ProviderCapabilities()

    def generate(self, request):
        if request.schema_name == "understand":
            return falai.Generation(message="", structured={"flows": [{"id": "hello", "score": 90}]})
        return falai.Generation(message="", structured={"message": "Hello from mine!", "fields": []})

    def generate_stream(self, request):
        whole = self.generate(request)
        yield falai.GenerationChunk(delta="", accumulated="", done=True, structured=whole.structured)

flow = {"id": "hello", "on": [{"message": ["hello"]}], "steps": [{"id": "hi", "prompt": "Greet them."}]}
# the flow as stored JSON (a FlowSpec) and back: falai_spec, which the engine set carries, loads on use
agent = falai.falai().agent(name="Bot", provider=Mine(), protocol="lean",
                            flows=[falai.from_spec(falai.to_spec(flow))])
result = agent.turn(session_id="s1", message="hello", id="m1")
OUT = [[m.text for m in result.messages], result.llm_calls]
"""

FLOWS = [{"id": "hello", "on": [{"message": ["hello"]}], "steps": [{"id": "hi", "prompt": "Greet them."}]}]
GEMINI_PATH = "/v1beta/models/gemini-3.8-flash:streamGenerateContent"


def script_gemini(fake: FakeModelServer) -> None:
    """The vendor's side of one turn: the understand reply, then the speak reply in two frames."""
    fake.sse(gemini_frame(text=json.dumps({"flows": [{"id": "hello", "score": 90}]}), finish="STOP",
                          usage=(40, 8, 0, 0)))
    fake.sse(gemini_frame(text='{"message": "Hello from'),
             gemini_frame(text=' Gemini!", "fields": []}', finish="STOP", usage=(50, 9, 0, 0)))


def check_gemini_requests(fake: FakeModelServer, agent: str = "Bot") -> None:
    """The fake received the understand call, then the speak call, as Gemini's live API takes them
    (the strict fake refuses any other; fake.close() fails the test on a refusal)."""
    assert [(r.path, r.query, r.headers["x-goog-api-key"]) for r in fake.requests] == [
        (GEMINI_PATH, {"alt": "sse"}, "test-key")] * 2
    understand, speak = (r.json for r in fake.requests)
    assert "flows" in understand["generationConfig"]["responseJsonSchema"]["properties"]
    assert "hello" in json.dumps(understand["contents"])
    assert "message" in speak["generationConfig"]["responseJsonSchema"]["properties"]
    assert f'You are "{agent}"' in speak["systemInstruction"]["parts"][0]["text"]


def test_the_engine_runs_a_turn_with_a_provider_of_ones_own(tmp_path):
    """No falai_testing, no providers, no stores, no CLI, no host: the six files, all of them loaded."""
    result = run_set(tmp_path, "The engine", OWN_PROVIDER_TURN)
    assert result["out"] == [["Hello from mine!"], 2]
    assert set(result["loaded"]) == modules(SETS["The engine"])      # none of the six is spare


def test_the_engine_with_the_add_ons_keeps_sessions_and_scripts_replies(tmp_path):
    """falai_stores and falai_testing each need only the engine (the guide says so under its table)."""
    body = """
import falai
agent = falai.falai().agent(
    name="Bot", provider=falai.ScriptedProvider(script={"understand": [{"flows": {"hello": 90}}]}),
    flows=[{"id": "hello", "on": [{"message": ["hello"]}], "steps": [{"id": "hi", "say": "Hello!"}]}])
from falai_stores import SQLiteStore
store = SQLiteStore(":memory:")
result = agent.turn(session_id="s1", message="hello", id="m1")
store.save(result.session, 0)
OUT = [[m.text for m in result.messages], store.load("s1").version]
"""
    result = run_set(tmp_path, "The engine", body, extra=ADD_ONS)
    assert result["out"] == [["Hello!"], 1]
    assert modules(ADD_ONS) <= set(result["loaded"])


def test_the_provider_sets_run_a_turn_on_gemini_against_the_fake_server(tmp_path, fake, requests_path):
    """GeminiProvider over real HTTP to the local fake Gemini server, requests from its own folder.
    Every provider lives in the same file, so "+ every provider" is this set, and the run imports
    all four."""
    assert SETS["+ every provider"] == SETS["+ Gemini"]
    name = "+ Gemini"
    script_gemini(fake)
    body = f"""
import falai
from falai_providers import AnthropicProvider, FallbackProvider, GeminiProvider, OpenAICompatibleProvider
provider = GeminiProvider(api_key="test-key", model="gemini-3.8-flash", base_url={fake.url!r},
                          retry_config={{"timeout": 5000, "retries": 0}})
agent = falai.falai().agent(name="Bot", provider=provider, protocol="lean",
                            flows=[falai.from_spec(falai.to_spec(flow)) for flow in {FLOWS!r}])
result = agent.turn(session_id="s1", message="hello", id="m1")
OUT = [[m.text for m in result.messages], result.llm_calls]
"""
    result = run_set(tmp_path, name, body, path=(requests_path,))
    assert result["out"] == [["Hello from Gemini!"], 2]
    assert set(result["loaded"]) == modules(SETS[name])
    check_gemini_requests(fake)


def test_the_cli_set_chats_on_gemini_against_the_fake_server(tmp_path, fake, requests_path):
    """`falai chat --provider gemini`: the CLI, its ScriptedProvider import and the providers."""
    script_gemini(fake)
    (tmp_path / "flows.json").write_text(json.dumps(FLOWS), encoding="utf-8")
    body = f"""
import falai_cli
status = falai_cli.main(["chat", "flows.json", "--provider", "gemini", "--model", "gemini-3.8-flash",
                         "--base-url", {fake.url!r}, "--now", "2026-01-01T09:00:00Z"],
                        environ={{"GEMINI_API_KEY": "test-key"}})
OUT = status
"""
    result = run_set(tmp_path, "+ the CLI", body, path=(requests_path,), stdin="hello\n/quit\n")
    assert result["out"] == 0
    assert "bot: Hello from Gemini!" in result["stdout"]
    assert set(result["loaded"]) == modules(SETS["+ the CLI"])
    check_gemini_requests(fake, agent="Agent")          # the name the CLI gives its agent


def test_the_host_set_runs_a_turn_and_starts_the_host_from_the_cli(tmp_path):
    """`falai host --help` through the CLI loads the host and its store; the roles themselves need
    Postgres and Redis (tests/host/), which a copied folder does not bring."""
    body = OWN_PROVIDER_TURN + """
import falai_cli
status = falai_cli.main(["host", "--help"])
OUT = OUT + [status]
"""
    result = run_set(tmp_path, "+ the host", body)
    assert result["out"] == [["Hello from mine!"], 2, 0]
    assert "worker" in result["stdout"]
    assert set(added("+ the host")) <= {f"{module}.py" for module in result["loaded"]}

