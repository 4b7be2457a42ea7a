"""τ²-bench retail (issue 29): examples/tau2/retail_tools.py does what τ²'s own retail tools do.

``data/retail/reference_effects.json.gz`` was recorded by running τ²'s code (SOURCES.json says
how): every reference action of the 114 tasks, replayed in order as τ²'s evaluator builds the gold
db, and probes of each tool's odd paths, each on a fresh db. Here the same calls go through
``retail_tools.execute`` on a pristine ``load_db()``: each gives the agent the same text (or the
same error text), and leaves the db with the same hash, as τ²'s did. The vendored files are the
pinned bytes.
"""
import copy
import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fast_slice

TAU2 = Path(__file__).resolve().parents[2] / "examples" / "tau2"
DATA = TAU2 / "data" / "retail"
sys.path.insert(0, str(TAU2))

import retail_tools as rt  # noqa: E402

REFERENCE = json.loads(gzip.decompress((DATA / "reference_effects.json.gz").read_bytes()))
SOURCES = json.loads((DATA / "SOURCES.json").read_text(encoding="utf-8"))
PRISTINE = REFERENCE["pristine_hash"]
WRITES = {"cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
          "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
          "return_delivered_order_items"}


class _Dbs:
    """Pristine dbs for the scenarios, and τ²'s db hash taken fast on them.

    A call can change only the records it names (its order, that order's user, its user). So
    ``hash`` writes the JSON of the records named so far into the pristine db's JSON, cut at each
    record, and checks in one comparison that every other record still equals its pristine copy
    (when one does not, it takes the full ``rt.db_hash``). A scenario's db is then put back (its
    named records copied from the pristine db) for the next, or dropped if anything else differs.
    Every task ends on the full ``rt.db_hash``; ``test_load_db_is_pristine_each_call`` checks the
    db the scenarios start from.
    """

    def __init__(self):
        self.pristine = rt.load_db()
        self.spare = None
        self.pieces = ["{"]  # "".join(pieces) is json.dumps(pristine, sort_keys=True)
        self.at = {}         # (section, key) -> the index of that record's JSON in pieces
        for i, section in enumerate(sorted(self.pristine)):
            self.pieces.append((", " if i else "") + json.dumps(section) + ": {")
            records = self.pristine[section]
            for j, key in enumerate(sorted(records)):
                self.pieces.append((", " if j else "") + json.dumps(key) + ": ")
                self.at[(section, key)] = len(self.pieces)
                self.pieces.append(json.dumps(records[key], sort_keys=True))
            self.pieces.append("}")
        self.pieces.append("}")
        assert hashlib.sha256("".join(self.pieces).encode()).hexdigest() == PRISTINE

    def take(self) -> dict:
        db, self.spare = self.spare, None
        return db if db is not None else rt.load_db()

    def put_back(self, db: dict, named: set) -> None:
        for section, key in named:
            if key in self.pristine[section]:
                db[section][key] = copy.deepcopy(self.pristine[section][key])
        if db == self.pristine:
            self.spare = db

    @staticmethod
    def named(db: dict, args: dict) -> set:
        named = set()
        order_id, user_id = args.get("order_id"), args.get("user_id")
        if isinstance(order_id, str) and order_id in db["orders"]:
            named |= {("orders", order_id), ("users", db["orders"][order_id]["user_id"])}
        if isinstance(user_id, str):
            named.add(("users", user_id))
        return named

    def hash(self, db: dict, named: set) -> str:
        if db.keys() != self.pristine.keys():
            return rt.db_hash(db)
        for section, pristine in self.pristine.items():
            expected = dict(pristine)
            expected.update({key: db[section][key] for s, key in named
                             if s == section and key in db[section]})
            if db[section] != expected:  # a record changed that no call named
                return rt.db_hash(db)
        pieces = list(self.pieces)
        for section, key in named:
            if (section, key) in self.at:
                pieces[self.at[(section, key)]] = json.dumps(db[section][key], sort_keys=True)
        return hashlib.sha256("".join(pieces).encode()).hexdigest()


_dbs = _Dbs()


def _play(calls, final_hash: str, *, exact_end: bool) -> None:
    """Play recorded calls on a pristine db, comparing each answer with τ²'s, and the db hash
    after each call that changed τ²'s db and after the last; a call that should have changed
    nothing and did is caught at the next hash."""
    db = _dbs.take()
    named = set()
    previous = PRISTINE
    for n, call in enumerate(calls):
        named |= _dbs.named(db, call["arguments"])
        try:
            text, error = rt.output_text(rt.execute(db, call["name"], call["arguments"])), False
        except rt.ToolError as exc:
            text, error = str(exc), True
        where = f"call {n} {call['name']}({json.dumps(call['arguments'])[:200]})"
        assert (text, error) == (call["output"], call["error"]), where
        if call["hash_after"] != previous or n == len(calls) - 1:
            assert _dbs.hash(db, named) == call["hash_after"], f"db after {where}"
        previous = call["hash_after"]
    assert previous == final_hash
    if exact_end:
        assert rt.db_hash(db) == final_hash
    _dbs.put_back(db, named)


@pytest.mark.parametrize("task", fast_slice(REFERENCE["tasks"], 15, ids=lambda t: f"task{t['id']}"))
def test_reference_actions_match_tau2(task):
    """Every task's reference actions, in order: τ²'s outputs and db hashes, then its gold hash."""
    _play(task["actions"], task["final_hash"], exact_end=True)


@pytest.mark.parametrize("probe", fast_slice(REFERENCE["probes"], 15, ids=lambda p: p["id"]))
def test_probe_matches_tau2(probe):
    """A call on one of τ²'s odd paths (an error, a status, a duplicate, a balance, an argument)."""
    _play(probe["calls"], probe["calls"][-1]["hash_after"], exact_end=False)


def test_the_reference_covers_every_write_and_every_tool():
    tasks = REFERENCE["tasks"]
    writes = [a for t in tasks for a in t["actions"] if a["name"] in WRITES]
    assert (len(tasks), sum(len(t["actions"]) for t in tasks), len(writes)) == (114, 550, 176)
    probed = [c["name"] for p in REFERENCE["probes"] for c in p["calls"]]
    assert all(probed.count(name) >= 10 for name in WRITES)
    assert set(rt.TOOLS) <= {a["name"] for t in tasks for a in t["actions"]} | set(probed)


def test_tools_are_tau2s_toolkit():
    assert len(rt.TOOLS) == 16
    assert {name for name, tool in rt.TOOLS.items() if tool["kind"] == "write"} == WRITES
    assert {name for name, tool in rt.TOOLS.items() if tool["kind"] == "generic"} == {
        "calculate", "transfer_to_human_agents"}
    for name, tool in rt.TOOLS.items():
        assert set(tool) == {"kind", "description", "parameters"}, name
        assert tool["parameters"]["type"] == "object", name


def test_load_db_is_pristine_each_call():
    first = rt.load_db()
    assert rt.db_hash(first) == PRISTINE
    first["orders"].clear()
    first["users"]["nobody"] = {}
    second = rt.load_db()
    assert rt.db_hash(second) == PRISTINE
    assert second is not first and second["products"] is not first["products"]


def test_tasks_are_tau2s():
    tasks = rt.load_tasks()
    assert [t["id"] for t in tasks] == [t["id"] for t in REFERENCE["tasks"]]
    tasks[0]["id"] = "changed"
    assert rt.load_tasks()[0]["id"] == REFERENCE["tasks"][0]["id"]


def test_policy_is_verbatim():
    entry = next(e for e in SOURCES if e["file"] == "retail/policy.md")
    assert hashlib.sha256(rt.policy().encode("utf-8")).hexdigest() == entry["source_sha256"]
    assert rt.policy().startswith("# Retail agent policy")
    assert rt.policy() == rt.POLICY


def test_vendored_files_match_sources():
    """Each file is the bytes SOURCES.json pins; a gzip holds the pinned content (tasks.json
    verbatim) and is deterministic (mtime 0)."""
    assert {e["file"] for e in SOURCES} == {
        "retail/db.json.gz", "retail/policy.md", "retail/tasks.json.gz", "retail/split_tasks.json",
        "retail/tools.json", "retail/reference_effects.json.gz"}
    for entry in SOURCES:
        raw = (DATA.parent / entry["file"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == entry["vendored_sha256"], entry["file"]
        assert entry["repo"] == "sierra-research/tau2-bench" and entry["license"] == "MIT"
        assert entry["commit"] == REFERENCE["tau2_commit"]
        assert entry["copyright"] == "Copyright (c) 2025 Sierra Research"
        if entry["file"].endswith(".gz"):
            assert raw[4:8] == b"\0\0\0\0", f"{entry['file']}: gzip mtime is not 0"
            content = hashlib.sha256(gzip.decompress(raw)).hexdigest()
            assert content == entry["content_sha256"], entry["file"]
    for name in ("retail/policy.md", "retail/split_tasks.json", "retail/tasks.json.gz"):
        entry = next(e for e in SOURCES if e["file"] == name)
        unpacked = entry.get("content_sha256", entry["vendored_sha256"])
        assert unpacked == entry["source_sha256"], name
    license_text = (DATA.parent / "LICENSE-tau2-bench.txt").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License")
    assert "Copyright (c) 2025 Sierra Research" in license_text


def test_split_tasks_name_the_tasks():
    splits = json.loads((DATA / "split_tasks.json").read_text(encoding="utf-8"))
    ids = {t["id"] for t in REFERENCE["tasks"]}
    assert set(splits["base"]) == ids and set(splits["train"]) | set(splits["test"]) == ids


def test_import_reads_no_data():
    """Importing the module reads nothing: TOOLS, the policy and the db are read on first use."""
    code = "\n".join([
        "import sys",
        "opened = []",
        "sys.addaudithook(lambda event, args: event == 'open' and opened.append(str(args[0])))",
        "sys.path.insert(0, sys.argv[1])",
        "import retail_tools as rt",
        "assert not [f for f in opened if '/data/' in f], opened",
        "assert 'TOOLS' not in vars(rt) and 'POLICY' not in vars(rt)",
        "assert len(rt.TOOLS) == 16 and 'TOOLS' in vars(rt)",
    ])
    subprocess.run([sys.executable, "-c", code, str(TAU2)], check=True)


def test_execute_returns_copies_and_errors_say_what_the_agent_sees():
    db = rt.load_db()
    order_id = next(iter(db["orders"]))
    order = rt.execute(db, "get_order_details", {"order_id": order_id})
    order["status"] = "changed"
    assert db["orders"][order_id]["status"] != "changed"
    with pytest.raises(rt.ToolError) as caught:
        rt.execute(db, "get_order_details", {"order_id": "W" + order_id})
    assert str(caught.value) == "Error: Order not found"
    assert rt.output_text("Transfer successful") == "Transfer successful"
    assert rt.DOMAIN == "retail"
