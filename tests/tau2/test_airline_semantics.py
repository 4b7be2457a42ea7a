"""τ²-bench airline (issue 29): examples/tau2/airline_tools.py does what τ²'s own code does.

data/airline/reference_effects.json.gz was made by running τ²'s code (the pinned commit, its
airline toolkit and Environment; SOURCES.json says how): every task's reference actions replayed
in order as τ²'s evaluator builds the gold database, and 141 probe cases (errors, changes made
before an error, odd arguments, quirks), each case from the pristine database. For each call it
holds the text τ²'s agent reads and τ²'s database hash after it. Here each case runs through
``execute`` from the pristine database, and each call must give the same text and hash.

The hash after each call is ``air.db_hash``, computed from the pieces of the pristine database
that did not change (``_Hasher``, itself checked against ``air.db_hash``), and the database is
made pristine again by replacing what changed: that keeps the file near 15 s.
"""
import gzip
import hashlib
import json
import marshal
import os
import pickle
import sys

import pytest

from conftest import fast_slice

HERE = os.path.dirname(os.path.abspath(__file__))
TAU2 = os.path.join(HERE, "..", "..", "examples", "tau2")
sys.path.insert(0, TAU2)

import airline_tools as air  # noqa: E402

DATA = os.path.join(TAU2, "data", "airline")
with gzip.open(os.path.join(DATA, "reference_effects.json.gz"), "rb") as _fp:
    REF = json.load(_fp)
with open(os.path.join(DATA, "SOURCES.json"), encoding="utf-8") as _fp:
    SOURCES = json.load(_fp)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class _Hasher:
    """``air.db_hash`` for a database that started pristine, re-encoding only what changed.

    ``json.dumps(db, sort_keys=True)`` is '{"flights": {...}, "reservations": {...}, "users":
    {...}}', every level in key order, so it is made of each entity's own text: an entity equal
    to its pristine self reuses the pristine text. Equal means ``==`` (fast, but it takes 1, 1.0
    and True as equal) or, with ``strict``, equal marshal bytes (format 2: exact about types).
    """

    def __init__(self, pristine: dict):
        self.pristine = pristine
        self.keys = {name: sorted(section) for name, section in pristine.items()}
        self.prefix = {name: {key: json.dumps(key) + ": " for key in section}
                       for name, section in pristine.items()}
        self.texts = {name: {key: _text(value) for key, value in section.items()}
                      for name, section in pristine.items()}
        self.bytes = {name: {key: marshal.dumps(value, 2) for key, value in section.items()}
                      for name, section in pristine.items()}
        self.whole = {name: (marshal.dumps(section, 2), self._section(name, section, set()))
                      for name, section in pristine.items()}
        first = min(pristine)                  # the digest of '{' + its text + ', ', kept
        self.first = (first, hashlib.sha256(("{" + self.whole[first][1] + ", ").encode()))

    def _section(self, name: str, section: dict, changed: set) -> str:
        keys = self.keys[name] if section.keys() == self.pristine[name].keys() else sorted(section)
        prefix, texts = self.prefix[name], self.texts[name]
        return json.dumps(name) + ": {" + ", ".join(
            (prefix.get(key) or json.dumps(key) + ": ")
            + (_text(section[key]) if key in changed else texts[key]) for key in keys) + "}"

    def changed(self, db: dict, name: str, strict: bool) -> set:
        """The keys of section ``name`` whose entity differs from the pristine one, or is new."""
        section, pristine, known = db[name], self.pristine[name], self.bytes[name]
        if (marshal.dumps(section, 2) == self.whole[name][0]) if strict else section == pristine:
            return set()
        differs = set(section.keys() ^ pristine.keys())
        for key in section.keys() & pristine.keys():
            if (marshal.dumps(section[key], 2) != known[key]) if strict \
                    else section[key] != pristine[key]:
                differs.add(key)
        return differs

    def __call__(self, db: dict, strict: bool = False, changes: dict | None = None) -> str:
        """The hash; ``changes``, when given, receives each section's changed keys."""
        if db.keys() != self.pristine.keys():
            return air.db_hash(db)
        parts, digest = [], None
        for name in sorted(db):
            changed = self.changed(db, name, strict)
            if changes is not None:
                changes[name] = changed
            if not changed and name == self.first[0]:
                digest = self.first[1].copy()
            elif not changed:
                parts.append(self.whole[name][1])
            else:
                parts.append(self._section(name, db[name], changed))
        text = ", ".join(parts) + "}"
        if digest is None:
            return _sha256(("{" + text).encode())
        digest.update(text.encode())
        return digest.hexdigest()


class _Runner:
    """Plays reference cases, each from the pristine database.

    After each call the hash is taken with ==; at the end of a case strictly, so a change of
    type alone (2 to 2.0) cannot hide. Then each entity that differs from its pristine self is
    replaced by a fresh copy of it, which leaves the database as ``air.load_db()`` gives it.
    """

    def __init__(self):
        pristine = air.load_db()
        self.copies = {name: {key: pickle.dumps(value) for key, value in section.items()}
                       for name, section in pristine.items()}
        self.hasher = _Hasher(pristine)
        self.db = air.load_db()

    def play(self, calls: list[dict]) -> str:
        """Runs the calls, checking each text and hash; returns the final hash."""
        try:
            for i, call in enumerate(calls):
                try:
                    text = air.output_text(air.execute(self.db, call["name"], call["arguments"]))
                except air.ToolError as e:
                    text = str(e)
                where = f"call {i} {call['name']}({json.dumps(call['arguments'])[:200]})"
                assert text == call["output"], where
                assert self.hasher(self.db) == call["hash_after"], where
            changes: dict = {}
            final = self.hasher(self.db, strict=True, changes=changes)
        except BaseException:
            self.db = air.load_db()                  # a failed case leaves the next one pristine
            raise
        self._restore(changes)
        return final

    def _restore(self, changes: dict):
        if self.db.keys() != self.copies.keys():
            self.db = air.load_db()
            return
        for name, copies in self.copies.items():
            section = self.db[name]
            for key in changes[name]:
                if key in copies:
                    section[key] = pickle.loads(copies[key])
                else:
                    del section[key]
            if changes[name] and list(section) != list(copies):     # the pristine key order
                self.db[name] = {key: section[key] for key in copies}


@pytest.fixture(scope="module")
def runner():
    return _Runner()


# The data #######################################################################################

def test_pristine_db_hash_is_tau2s():
    """load_db() hashes as τ²'s Environment.get_db_hash() on its pristine airline database."""
    assert air.db_hash(air.load_db()) == REF["pristine_hash"]


def test_load_db_is_a_fresh_copy_each_call():
    first = air.load_db()
    first["reservations"]["4OG6T3"]["status"] = "cancelled"
    first["users"].clear()
    assert air.db_hash(air.load_db()) == REF["pristine_hash"]


def test_vendored_files_match_sources():
    """Each vendored file hashes as SOURCES.json says, and the verbatim ones as their source."""
    verbatim = {"airline/policy.md", "airline/split_tasks.json", "airline/tasks.json.gz"}
    assert verbatim | {"airline/db.json.gz", "airline/tools.json",
                       "airline/reference_effects.json.gz"} <= {entry["file"] for entry in SOURCES}
    for entry in SOURCES:
        with open(os.path.join(TAU2, "data", entry["file"]), "rb") as fp:
            data = fp.read()
        assert _sha256(data) == entry["vendored_sha256"], entry["file"]
        content = gzip.decompress(data) if entry["file"].endswith(".gz") else data
        if "content_sha256" in entry:
            assert _sha256(content) == entry["content_sha256"], entry["file"]
        if entry["file"] in verbatim:
            assert _sha256(content) == entry["source_sha256"], entry["file"]


def test_policy_is_tau2s_verbatim():
    entry = next(e for e in SOURCES if e["file"] == "airline/policy.md")
    with open(os.path.join(DATA, "policy.md"), "rb") as fp:
        data = fp.read()
    assert _sha256(data) == entry["source_sha256"]
    assert data.decode("utf-8") == air.POLICY


def test_tasks_load_as_vendored():
    tasks = air.load_tasks()
    assert len(tasks) == 50
    assert [t["id"] for t in tasks] == [t["id"] for t in REF["tasks"]]


def test_tools_are_tau2s_fourteen_and_execute_takes_their_parameters():
    """TOOLS is τ²'s airline toolkit; execute knows each tool and asks for its arguments."""
    assert {name for name, tool in air.TOOLS.items() if tool["kind"] == "write"} == {
        "book_reservation", "cancel_reservation", "send_certificate", "update_reservation_baggages",
        "update_reservation_flights", "update_reservation_passengers"}
    assert len(air.TOOLS) == 14
    db = air.load_db()
    for name, tool in air.TOOLS.items():
        required = tool["parameters"].get("required", [])
        if not required:
            air.execute(db, name, {})
            continue
        with pytest.raises(air.ToolError) as err:
            air.execute(db, name, {})
        missing = f"Error: AirlineTools.{name}() missing {len(required)} required"
        assert str(err.value).startswith(missing), name
    with pytest.raises(air.ToolError, match=r"^Error: Tool 'think' not found\.$"):
        air.execute(db, "think", {"thought": "..."})


def test_the_fast_hash_is_db_hash():
    """_Hasher gives air.db_hash's value on changed databases; strictly, on a change of type too."""
    hasher = _Hasher(air.load_db())
    db = air.load_db()
    assert hasher(db) == hasher(db, strict=True) == REF["pristine_hash"]
    booking = next(p for p in REF["probes"] if p["id"] == "book_ok_mei")["calls"][0]
    air.execute(db, "book_reservation", booking["arguments"])
    air.execute(db, "cancel_reservation", {"reservation_id": "R9QDGB"})
    assert hasher(db) == hasher(db, strict=True) == air.db_hash(db)
    db["flights"]["HAT001"]["dates"]["2024-05-16"]["prices"]["economy"] = 122.0   # was 122
    assert hasher(db, strict=True) == air.db_hash(db) != hasher(db)


# τ²'s behaviour, call for call ##################################################################

@pytest.mark.parametrize("task", fast_slice(REF["tasks"], 15, ids=lambda t: f"task-{t['id']}"))
def test_task_reference_actions_match_tau2(runner, task):
    """Every task's reference actions, as τ²'s evaluator replays them to build the gold db."""
    assert runner.play(task["actions"]) == task["final_hash"]


@pytest.mark.parametrize("probe", fast_slice(REF["probes"], 15, ids=lambda p: p["id"]))
def test_probe_matches_tau2(runner, probe):
    """Errors, changes made before an error, odd arguments τ² accepts, and τ²'s quirks."""
    assert runner.play(probe["calls"]) == probe["calls"][-1]["hash_after"]
