"""bench/tau2.py (issue 29): the offline numbers of the τ²-bench port mean what they say.

The bench's functions run here on a slice of each domain (three tasks, three attacks, three
yes-man tasks, a slice of the confirmation texts); the printing is left out. Each number is
checked against what it claims: the oracle slice ends on τ²'s gold hash with no correct write
refused, the attacks are refused by name and change nothing where τ²'s raw tools change the db,
and the confirmation counts are the ones the vendored customers' words imply under the engine's
own check (``falai.says_value``, what ``"evidence": "message"`` runs).
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "examples", "tau2")]

import falai  # noqa: E402
import play  # noqa: E402
import tau2  # noqa: E402

WORDS = tau2.confirmations()
CONFIRM = {"type": "boolean"}


def says_yes(text: str) -> bool:
    return falai.says_value(CONFIRM, True, text)


# The default run benches airline; the slow tier both domains.
@pytest.fixture(scope="module", params=[name if name == "airline" else pytest.param(name, marks=pytest.mark.slow)
                                        for name in tau2.DOMAINS])
def domain(request):
    return tau2.load(request.param)


# The database the bench plays on ###########################################################

def test_db_hash_is_tau2s_and_reset_gives_the_pristine_db_back(domain):
    db = domain.db
    db.reset()
    assert db.hash() == tau2.tau2_hash(db.tables) == domain.pristine_hash
    task = domain.tasks[0]
    domain.player().start().play(play.oracle(domain.module, task, domain.plans[task["id"]]))
    assert db.hash() == tau2.tau2_hash(db.tables) == domain.reference[task["id"]]["final_hash"]
    db.check(domain.pristine_hash)


def test_a_span_takes_back_only_what_changed_since_its_mark(domain):
    db = domain.db
    db.reset()
    name = next(iter(db.tables))
    first, second = list(dict.keys(db.tables[name]))[:2]
    text = lambda key: json.dumps(dict.get(db.tables[name], key), sort_keys=True)
    pristine = text(first), text(second)
    db.tables[name][first] = {"changed": "before the mark"}
    db.mark()
    db.tables[name][second] = {"changed": "after the mark"}
    db.tables[name]["a key that was not there"] = {}
    assert db.hash() == tau2.tau2_hash(db.tables) != domain.pristine_hash
    db.back()
    assert text(second) == pristine[1] and "a key that was not there" not in db.tables[name]
    assert json.loads(text(first)) == {"changed": "before the mark"}
    assert db.hash() == tau2.tau2_hash(db.tables) != domain.pristine_hash
    db.reset()
    assert (text(first), text(second)) == pristine and db.hash() == domain.pristine_hash


def test_talk_plays_as_play_converse_does(domain):
    """The bench's one agent per domain plays a conversation to the db play.converse gives."""
    task = domain.tasks[1]
    conversation = play.oracle(domain.module, task, domain.plans[task["id"]])
    fresh = domain.module.load_db()
    played = play.converse(domain.module, fresh, conversation)
    heard = domain.player().start().play(conversation)
    assert heard == played.writes
    assert domain.db.hash() == tau2.tau2_hash(fresh)


# (a) Oracle replay ##########################################################################

def test_oracle_slice_ends_on_gold_with_no_correct_write_refused(domain):
    tasks = [t for t in domain.tasks if tau2.writes_of(domain, t)][:3]
    out = tau2.oracle_replay(domain, tasks)
    assert out["tasks"] == 3
    assert out["matched"] == [t["id"] for t in tasks] and out["mismatched"] == []
    assert out["correct"] == sum(tau2.accepted_writes(domain, t) for t in tasks)
    assert out["correct"] > 0 and out["refused"] == []


def test_writes_tau2_errors_on_are_listed_apart(domain):
    """τ² errors on two retail reference writes (none in airline): listed apart, not refused."""
    tasks = [t for t in domain.tasks if any(d["error"] for _, d in tau2.writes_of(domain, t))]
    assert len(tasks) == {"airline": 0, "retail": 2}[domain.name]
    out = tau2.oracle_replay(domain, tasks)
    assert [e[:2] for e in out["tau2_errors"]] == [
        (t["id"], a["name"]) for t in tasks for a, d in tau2.writes_of(domain, t) if d["error"]]
    assert out["refused"] == [] and out["mismatched"] == []
    assert all(outcome != "ok" for *_, outcome in out["tau2_errors"])


# (b) Adversarial ############################################################################

def test_attacks_are_refused_by_name_and_the_raw_column_counts_changes(domain):
    changing = [a for a in domain.attacks if a["raw"] == "changes the db"][:2]
    erroring = [a for a in domain.attacks if a["raw"].startswith("error")][:1]
    rows = tau2.adversarial(domain, changing + erroring)
    assert len(rows) == 3
    for row in rows:
        assert row["setup_ok"]
        assert not row["forbidden"] and row["collateral"] == []
        assert row["named"] and row["refusal"]
    assert [row["raw_changes"] for row in rows] == [True, True, False]
    assert rows[2]["raw_outcome"].startswith("error:")


# (c) Yes-man ################################################################################

def test_yes_man_rows_name_each_task_and_hold_their_meaning(domain):
    with_writes = [k for k, v in domain.yes_man.items() if v["writes"]][:3]
    rows = tau2.yes_man(domain, with_writes)
    assert [row["task"] for row in rows] == with_writes
    for row, task_id in zip(rows, with_writes):
        assert row["writes"] == len(domain.yes_man[task_id]["writes"])
        # a task is lost only when one of its writes ran
        assert row["saved"] or "ok" in row["outcomes"]
        assert row["raw_saved"] or "ok" in row["raw_outcomes"]
        assert row["saved_checked"] or "ok" in row["outcomes_checked"]


# (d) The confirmation #######################################################################

def test_confirmations_file_is_what_it_says():
    source = WORDS["source"]
    assert source["license"] == "MIT" and "Sierra" in source["copyright"]
    assert len(source["commit"]) == 40 and len(source["sha256"]) == 64
    counts = WORDS["counts"]
    assert counts["confirmations"] == len(WORDS["confirmations"]) > 0
    assert counts["non_confirmations"] == len(WORDS["non_confirmations"]) > 0
    assert counts["non_confirmations_answering_a_request"] == sum(
        m["answers_request"] for m in WORDS["non_confirmations"])
    assert all(m["text"].strip() and "###STOP###" not in m["text"]
               for m in WORDS["confirmations"] + WORDS["non_confirmations"])


def test_source_sha256_matches_the_mirrored_file_when_present():
    repo = "/work/.mirror/sierra-research+tau-bench/repo"
    source = WORDS["source"]
    if not os.path.isdir(repo):
        pytest.skip("τ-bench's repository is not on this machine")
    raw = subprocess.run(["git", "-C", repo, "show", f"{source['commit']}:{source['path']}"],
                         capture_output=True, check=True).stdout
    assert hashlib.sha256(raw).hexdigest() == source["sha256"]


def test_confirmation_rates_are_the_engine_check_on_the_vendored_words(domain):
    words = {"non_confirmations": WORDS["non_confirmations"][:60],
             "confirmations": WORDS["confirmations"][:30]}
    tasks = [t for t in domain.tasks if tau2.accepted_writes(domain, t)][:3]
    out = tau2.confirmation_study(domain, words, tasks)
    count = out["writes"]
    assert count == sum(tau2.accepted_writes(domain, t) for t in tasks) > 0
    # model-only: every invented yes runs its write
    assert out["model_only"]["played"] == min(count, 60) == len(out["model_only"]["run"])
    assert out["answering"] == sum(m["answers_request"] for m in words["non_confirmations"])
    checked = out["checked"]
    assert checked["non_confirmations"] == 60 and checked["confirmations"] == 30
    assert checked["accepted"] == [m for m in words["non_confirmations"] if says_yes(m["text"])]
    assert checked["refused"] == [m for m in words["confirmations"] if not says_yes(m["text"])]
    for part, whole in ((len(checked["accepted"]), 60), (len(checked["refused"]), 30)):
        assert 0 < part / whole < 1


def test_whole_file_rates_under_the_engine_check():
    """The figures docs/guide/tau2.md quotes, from the file alone."""
    accepted = [m for m in WORDS["non_confirmations"] if says_yes(m["text"])]
    refused = [m for m in WORDS["confirmations"] if not says_yes(m["text"])]
    assert 0 < len(accepted) / len(WORDS["non_confirmations"]) < 1
    assert 0 < len(refused) / len(WORDS["confirmations"]) < 1
    assert len(refused) < len(accepted)


def test_the_top_level_sources_pin_every_file_beside_them():
    """data/SOURCES.json: each file at the data folder's top hashes as recorded, under a license file that is
    there; the domain folders have their own SOURCES.json."""
    data = Path(__file__).resolve().parents[2] / "examples" / "tau2" / "data"
    index = json.loads((data / "SOURCES.json").read_text("utf-8"))
    assert all((data / name).exists() for name in [*index["domains"], *index["licenses"]])
    for entry in index["files"]:
        assert hashlib.sha256((data / entry["file"]).read_bytes()).hexdigest() == entry["vendored_sha256"]
        assert entry["license"] == "MIT" and (data / entry["license_file"]).exists()
    tops = {p.name for p in data.iterdir() if p.is_file()} - {"SOURCES.json", *index["licenses"]}
    assert tops == {entry["file"] for entry in index["files"]}
