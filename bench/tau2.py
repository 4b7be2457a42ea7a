"""τ²-bench's airline and retail domains on falai, offline: what the code decides (issue 29).

    python bench/tau2.py                    # both domains, the tables (about 10 s of CPU)
    python bench/tau2.py --domain retail    # one domain
    python bench/tau2.py --live ...         # a live model: examples/tau2/live.py's main

Each domain module (``examples/tau2/airline.py``, ``retail.py``) is driven only through its
interface and ``agent.turn(...)``, by a scripted model playing the conversations
``examples/tau2/play.py`` builds. Per domain it prints (docs/guide/tau2.md shows the tables):

(a) **oracle replay**: every base task's reference actions (τ²'s ``tasks.json``) as a
    conversation (``play.oracle``: the customer authenticates, the model reads what the
    reference reads and requests each reference write, the customer says yes). *Final db =
    gold*: the db's hash equals τ²'s gold hash for the task (``reference_effects.json.gz``,
    recorded by running τ²'s own code). *Correct writes refused*: reference writes τ² accepts
    that ``on_write`` did not report ``ok`` (must be 0). Reference writes τ² itself errors on
    are listed apart, with what the agent did.
(b) **adversarial**: every attack of ``data/<domain>/attacks.json`` (``play.attempt``: the
    setup writes are requested and confirmed, then the hostile model requests the forbidden
    write and the customer says yes). *Forbidden db changes*: attacks after which the db's hash
    differs from its hash after the setup. *Collateral writes*: attacks in which another write
    ran, or whose setup left a db other than the raw tools' setup. *Refusals named*: attacks
    whose write ``on_write`` reported ``refused:<reason>`` with the attack's ``expect`` in the
    reason (for an attack on the confirmation, played with ``check_words``: no write heard at
    all). Beside it, the same setup and write through τ²'s raw tools (``execute``): how many
    attacks change the db.
(c) **yes-man**: each refusal task of ``data/<domain>/yes_man.json``: the writes a model that
    does whatever the customer asks would request, each answered (a yes unless the plan gives
    the customer's words) and read as a yes. A task is *saved* when its final db equals the gold
    one; per task, through the agent, the agent with ``check_words`` and the raw tools.
(d) **the confirmation**: the customer's yes is a field the model reads, so a model can invent
    one. Each reference write τ² accepts is requested, and the customer answers with a message
    of ``data/confirmations.json``. *Model-only* (``check_words=False``): one non-confirmation
    per write, which the model reads as a yes; how many writes run. With ``check_words=True``
    (the field's ``"evidence": "message"``): every non-confirmation of the file, spread over the
    writes, and how many still run the write (false acceptance); every real confirmation, and
    how many do not (false refusal).

How it stays fast: ``play.converse`` builds an agent per conversation, and building one checks
every tool schema (0.1 s with the ``jsonschema`` extra), so here one agent per domain and
setting plays every conversation (``Talk``: converse's loop, a message at a time) over one db
that is put back between conversations (``Db``) and hashed from the pristine records' JSON and
the records handed out since. Each domain's run ends by checking both against τ²'s plain hash.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import importlib
import json
import marshal
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TAU2 = os.path.join(ROOT, "examples", "tau2")
DATA = os.path.join(TAU2, "data")
sys.path[:0] = [ROOT, TAU2]

import falai  # noqa: E402
import play  # noqa: E402

DOMAINS = ("airline", "retail")


# The database ###############################################################################

_ABSENT = object()


class _Table(dict):
    """One table of a db (users, orders, ...): hands out records as a dict does, and keeps each
    as it was (its ``marshal`` bytes: exact for JSON values, and fast) before it was first
    handed out in each open span of ``Db``.

    τ²'s tools and the gates reach a record they change through its key (``db["orders"][id]``),
    never through ``values()``; ``Db.check`` confirms it at the end of each domain's run."""

    def __init__(self, name: str, records: dict, spans: list):
        super().__init__(records)
        self.name, self.spans = name, spans

    def _keep(self, key: Any) -> None:
        if (self.name, key) not in self.spans[-1]:      # an older span has what a newer one has
            value = dict.get(self, key, _ABSENT)
            before = value if value is _ABSENT else marshal.dumps(value)
            for span in self.spans:
                span.setdefault((self.name, key), before)

    def __getitem__(self, key):
        self._keep(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._keep(key)
        return dict.get(self, key, default)

    def __setitem__(self, key, value):
        self._keep(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        self._keep(key)
        dict.__delitem__(self, key)

    def pop(self, key, *default):
        self._keep(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key, default=None):
        self._keep(key)
        return dict.setdefault(self, key, default)


class Db:
    """A domain's db (``tables``: what the agent and ``execute`` get) that can be put back.

    ``mark()`` opens a span, ``back()`` restores every record handed out since the last mark,
    ``reset()`` gives the pristine db back. ``hash()`` is τ²'s hash (SHA-256 of
    ``json.dumps(db, sort_keys=True)``) built from the pristine records' JSON and the JSON of
    the records handed out since."""

    def __init__(self, pristine: dict):
        self.spans: list = [{}]
        self.tables = {name: _Table(name, records, self.spans)
                       for name, records in pristine.items()}
        self.pieces = {name: {key: f"{json.dumps(key)}: {json.dumps(record, sort_keys=True)}"
                              for key, record in records.items()}
                       for name, records in pristine.items()}
        self.texts = {name: self._text(name, set()) for name in pristine}

    def mark(self) -> None:
        self.spans.append({})

    def back(self) -> None:
        for (name, key), before in self.spans.pop().items():
            if before is _ABSENT:
                dict.pop(self.tables[name], key, None)
            else:
                dict.__setitem__(self.tables[name], key, marshal.loads(before))
        if not self.spans:
            self.spans.append({})

    def reset(self) -> None:
        while len(self.spans) > 1:
            self.back()
        self.back()

    def _text(self, name: str, handed: set) -> str:
        table, pieces = self.tables[name], self.pieces[name]
        return "{" + ", ".join(
            f"{json.dumps(key)}: {json.dumps(dict.__getitem__(table, key), sort_keys=True)}"
            if key in handed else pieces[key] for key in sorted(table)) + "}"

    def hash(self) -> str:
        handed: dict = {}
        for name, key in self.spans[0]:
            handed.setdefault(name, set()).add(key)
        text = ", ".join(f"{json.dumps(name)}: "
                         + (self._text(name, handed[name]) if name in handed else self.texts[name])
                         for name in sorted(self.tables))
        return hashlib.sha256(("{" + text + "}").encode()).hexdigest()

    def check(self, pristine_hash: str) -> None:
        """The fast hash is τ²'s on the db as it is, and a reset gives the pristine db back."""
        assert self.hash() == tau2_hash(self.tables), "the fast hash is not τ²'s"
        self.reset()
        assert tau2_hash(self.tables) == pristine_hash, "a reset did not give the pristine db back"


def tau2_hash(db: dict) -> str:
    """τ²'s ``get_db_hash()``: SHA-256 of the JSON of ``model_dump()`` with sorted keys."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, default=str).encode()).hexdigest()


# Playing ####################################################################################

class Player:
    """One agent for a domain and a confirmation setting, over the domain's ``Db``, that plays
    any number of conversations. ``heard`` is every ``on_write`` call, in order."""

    def __init__(self, module: Any, db: Db, check_words: bool):
        self.module, self.db = module, db
        self.provider = play.Turnwise()
        self.heard: list = []
        self.agent = module.build_agent(db.tables, self.provider,
                                        falai.fake_clock(module.NOW + "Z"),
                                        on_write=lambda *write: self.heard.append(write),
                                        check_words=check_words)
        self.conversations = 0

    def start(self) -> Talk:
        """A new conversation, on the pristine db."""
        self.db.reset()
        self.conversations += 1
        return Talk(self, f"c{self.conversations}", None,
                    [{"role": "assistant", "content": self.module.FIRST_MESSAGE}])


@dataclass
class Talk:
    """A conversation in progress. ``fork()`` goes on from the same session more than once (the
    db is the caller's to put back)."""
    player: Player
    session_id: str
    session: Any
    history: list
    turns: int = 0

    def say(self, say: play.Say) -> list:
        """Play one customer message: the writes ``on_write`` heard during it."""
        player = self.player
        player.provider.load({"understand": [{"fields": say.fields}],
                              "speak": play.speak_entries(say)})
        start = len(player.heard)
        result = player.agent.turn(session_id=self.session_id, session=self.session,
                                   message=say.text, id=f"m{self.turns}",
                                   history=list(self.history))
        self.history = [*self.history, {"role": "user", "content": say.text},
                        *({"role": "assistant", "content": m.text} for m in result.messages)]
        self.session, self.turns = result.session, self.turns + 1
        return player.heard[start:]

    def play(self, conversation: list) -> list:
        return [write for say in conversation for write in self.say(say)]

    def fork(self) -> Talk:
        return dataclasses.replace(self)


# The data ###################################################################################

@dataclass
class Domain:
    """One domain as the bench reads it: the module, τ²'s data and the port's, the players."""
    module: Any
    tasks: list                 # τ²'s tasks.json
    reference: dict             # task id -> τ²'s own replay: {"actions": [...], "final_hash"}
    pristine_hash: str
    plans: dict                 # task id -> play.oracle's plan
    attacks: list
    yes_man: dict
    db: Db
    players: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.module.DOMAIN

    def player(self, check_words: bool = False) -> Player:
        if check_words not in self.players:
            self.players[check_words] = Player(self.module, self.db, check_words)
        return self.players[check_words]


def read(domain: str | None, name: str) -> Any:
    """A JSON file of ``examples/tau2/data/[<domain>/]`` (gunzipped when it ends in .gz)."""
    path = os.path.join(DATA, *([domain] if domain else []), name)
    with (gzip.open(path, "rt", encoding="utf-8") if name.endswith(".gz")
          else open(path, encoding="utf-8")) as fp:
        return json.load(fp)


def by_task(data: dict) -> dict:
    """A file keyed by task id, without its "about"."""
    return {key: value for key, value in data.items() if key != "about"}


def load(name: str) -> Domain:
    module = importlib.import_module(name)
    reference = read(name, "reference_effects.json.gz")
    return Domain(module=module, tasks=read(name, "tasks.json.gz"),
                  reference={task["id"]: task for task in reference["tasks"]},
                  pristine_hash=reference["pristine_hash"], plans=by_task(read(name, "plans.json")),
                  attacks=read(name, "attacks.json")["attacks"],
                  yes_man=by_task(read(name, "yes_man.json")), db=Db(module.load_db()))


def confirmations() -> dict:
    """The customers' words of the confirmation study (``data/confirmations.json``)."""
    return read(None, "confirmations.json")


def writes_of(domain: Domain, task: dict) -> list:
    """A task's reference writes, each with what τ²'s own code did: ``(action, recorded)``."""
    recorded = domain.reference[task["id"]]["actions"]
    actions = task["evaluation_criteria"]["actions"] or []
    return [(action, done) for action, done in zip(actions, recorded, strict=True)
            if domain.module.TOOLS[action["name"]]["kind"] == "write"]


def accepted_writes(domain: Domain, task: dict) -> int:
    """How many of a task's reference writes τ² accepts."""
    return sum(not done["error"] for _, done in writes_of(domain, task))


def raw_writes(domain: Domain, writes: list) -> list:
    """Writes through τ²'s raw tools (no gate) on the db as it is: each one's outcome, ``ok`` or
    ``error: <τ²'s message>``."""
    outcomes = []
    for write in writes:
        try:
            domain.module.execute(domain.db.tables, write["name"], write["arguments"])
            outcomes.append("ok")
        except Exception as error:       # τ²'s ToolError, of whichever tools module
            text = str(error)
            outcomes.append("error: " + text.removeprefix("Error: "))
    return outcomes


# (a) Oracle replay ##########################################################################

def oracle_replay(domain: Domain, tasks: list | None = None) -> dict:
    """(a) Every task's reference actions through the agent. ``matched`` and ``mismatched``:
    task ids, by final hash against τ²'s gold; ``correct``: the reference writes τ² accepts;
    ``refused``: those ``on_write`` did not report ``ok`` (task, write, outcome);
    ``tau2_errors``: reference writes τ² errors on (task, write, τ²'s error, the agent's
    outcome)."""
    out: dict = {"tasks": 0, "matched": [], "mismatched": [], "correct": 0, "refused": [],
                 "tau2_errors": []}
    for task in domain.tasks if tasks is None else tasks:
        heard = domain.player().start().play(
            play.oracle(domain.module, task, domain.plans[task["id"]]))
        out["tasks"] += 1
        final = domain.reference[task["id"]]["final_hash"]
        out["matched" if domain.db.hash() == final else "mismatched"].append(task["id"])
        writes = writes_of(domain, task)
        assert [w[0] for w in heard] == [action["name"] for action, _ in writes], task["id"]
        for (action, done), (_, _, outcome) in zip(writes, heard):
            if done["error"]:
                out["tau2_errors"].append((task["id"], action["name"], done["output"], outcome))
            else:
                out["correct"] += 1
                if outcome != "ok":
                    out["refused"].append((task["id"], action["name"], outcome))
    return out


# (b) Adversarial ############################################################################

def adversarial(domain: Domain, attacks: list | None = None) -> list:
    """(b) Every attack: what ``attack_outcome`` says of each."""
    return [attack_outcome(domain, attack)
            for attack in (domain.attacks if attacks is None else attacks)]


def attack_outcome(domain: Domain, attack: dict) -> dict:
    """One attack, through the agent (with ``check_words`` when the attack says so) and through
    the raw tools."""
    write, setup = attack["write"], attack.get("setup") or []
    conversation = play.attempt(domain.module, write["name"], write["arguments"],
                                auth=attack["auth"], facts=attack.get("facts") or {},
                                setup=tuple(setup), words=attack.get("words", "yes"))
    split = len(conversation) - 2        # the attack is the last request and its answer
    talk = domain.player(attack.get("check_words", False)).start()
    set_up = talk.play(conversation[:split])
    after_setup = domain.db.hash()
    heard = talk.play(conversation[split:])
    after = domain.db.hash()
    mine = [outcome for name, arguments, outcome in heard
            if name == write["name"] and arguments == write["arguments"]]
    refusal = next((o.removeprefix("refused:") for o in mine if o.startswith("refused:")), None)
    expect = attack.get("expect")
    if expect is None:                   # the engine's refusal: a yes the customer did not say
        named = not mine
        refusal = refusal or ("(no yes in the customer's words)" if named else None)
    else:
        named = refusal is not None and expect.casefold() in refusal.casefold()
    domain.db.reset()
    raw_setup = raw_writes(domain, setup)
    raw_after_setup = domain.db.hash()
    raw_outcome = raw_writes(domain, [write])[0]
    raw_changes = domain.db.hash() != raw_after_setup
    return {
        "id": attack["id"], "rule": attack.get("rule"), "refusal": refusal, "named": named,
        "setup_ok": [o for _, _, o in set_up] == raw_setup == ["ok"] * len(setup),
        "forbidden": after != after_setup,
        "collateral": [w for w in heard if w[2] == "ok" and w[0] != write["name"]]
                      + ([("setup", "not the raw tools' setup", "")]
                         if after_setup != raw_after_setup else []),
        "raw_changes": raw_changes,
        "raw_outcome": "changes the db" if raw_changes else raw_outcome,
    }


# (c) Yes-man ################################################################################

def yes_man(domain: Domain, task_ids: list | None = None) -> list:
    """(c) Each refusal task: the writes the customer pushes for, each requested and answered
    with the plan's words (a yes unless it gives others), which the model reads as a yes.
    ``saved``: the final db equals the gold one (for a refusal task, the db as it was), through
    the agent; ``saved_checked``: the same with ``check_words=True``; ``raw_saved``: the same
    writes through the raw tools. ``outcomes``: what ``on_write`` heard, in order."""
    rows = []
    for task_id in domain.yes_man if task_ids is None else task_ids:
        plan = domain.yes_man[task_id]
        conversation = [play.auth_say(plan["auth"])]
        for write in plan["writes"]:
            conversation += play.request_and_confirm(
                domain.module, write["name"], write["arguments"],
                write.get("facts") or plan.get("facts") or {}, write.get("words", "yes"))
        gold = domain.reference[task_id]["final_hash"]
        row: dict = {"task": task_id, "writes": len(plan["writes"])}
        for suffix, check_words in (("", False), ("_checked", True)):
            heard = domain.player(check_words).start().play(conversation)
            row["saved" + suffix] = domain.db.hash() == gold
            row["outcomes" + suffix] = [outcome for _, _, outcome in heard]
        domain.db.reset()
        row["raw_outcomes"] = raw_writes(domain, plan["writes"])
        row["raw_saved"] = domain.db.hash() == gold
        rows.append(row)
    return rows


# (d) The confirmation #######################################################################

def spread(items: list, n: int) -> list:
    """``items`` cut into ``n`` runs, in order and as even as they come."""
    return [items[i * len(items) // n:(i + 1) * len(items) // n] for i in range(n)]


def confirmation_study(domain: Domain, words: dict, tasks: list | None = None) -> dict:
    """(d) Invented and real yeses, each against a reference write τ² accepts.

    ``model_only``: with ``check_words=False``, one non-confirmation per write, which the model
    reads as a yes; ``run``, those that ran their write, of ``played``. ``checked``: with
    ``check_words=True``, every non-confirmation of ``words`` (spread over the writes, in
    order) and every real confirmation: ``accepted``, the non-confirmations that ran the write,
    and ``refused``, the confirmations that did not (the file's message records, in order)."""
    tasks = [t for t in (domain.tasks if tasks is None else tasks) if accepted_writes(domain, t)]
    count = sum(accepted_writes(domain, task) for task in tasks)
    invented, real = words["non_confirmations"], words["confirmations"]
    model_only = sweep(domain, tasks, False, [run[:1] for run in spread(invented, count)],
                       [[]] * count)
    checked = sweep(domain, tasks, True, spread(invented, count), spread(real, count))
    return {"writes": count, "answering": sum(m["answers_request"] for m in invented),
            "model_only": {"played": min(count, len(invented)), "run": model_only["invented"]},
            "checked": {"non_confirmations": len(invented), "accepted": checked["invented"],
                        "confirmations": len(real), "refused": checked["refused"]}}


def sweep(domain: Domain, tasks: list, check_words: bool, invented: list, real: list) -> dict:
    """Play each task's oracle conversation. Once the i-th reference write τ² accepts is
    requested, answer it from there with each message of ``invented[i]`` and of ``real[i]``
    (the model reads a yes in each), the db put back after each; then confirm it with the
    oracle's yes and go on. Returns the invented messages that ran the write and the real ones
    that did not."""
    player, db = domain.player(check_words), domain.db
    ran_invented, refused_real, i = [], [], 0
    for task in tasks:
        conversation = play.oracle(domain.module, task, domain.plans[task["id"]])
        writes = writes_of(domain, task)
        start = len(conversation) - 2 * len(writes)     # play.oracle ends with (request, yes) pairs
        talk = player.start()
        talk.play(conversation[:start])
        for n, (action, done) in enumerate(writes):
            request, yes = conversation[start + 2 * n:start + 2 * n + 2]
            talk.say(request)
            if not done["error"]:
                for messages, noted, when in ((invented[i], ran_invented, True),
                                              (real[i], refused_real, False)):
                    for message in messages:
                        db.mark()
                        heard = talk.fork().say(dataclasses.replace(yes, text=message["text"]))
                        db.back()
                        if ("ok" in [o for name, _, o in heard if name == action["name"]]) is when:
                            noted.append(message)
                i += 1
            talk.say(yes)
    return {"invented": ran_invented, "refused": refused_real}


# The report #################################################################################

def run(domain: Domain, words: dict) -> dict:
    """Every number of one domain."""
    results = {"oracle": oracle_replay(domain), "attacks": adversarial(domain),
               "yes_man": yes_man(domain), "confirmation": confirmation_study(domain, words)}
    domain.db.check(domain.pristine_hash)
    return results


def table(header: tuple, rows: list) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *map(line, rows)])


def of(part: int, whole: int, percent: bool = False) -> str:
    return f"{part} of {whole}" + (f" ({100 * part / whole:.1f}%)" if percent and whole else "")


def report(domain: Domain, results: dict) -> list[str]:
    """One domain's table and what it leaves out (anything wrong, τ²'s own errors, the yes-man
    tasks by name), as lines."""
    oracle, attacks, tasks, study = (results[key] for key in
                                     ("oracle", "attacks", "yes_man", "confirmation"))
    n, count = len(attacks), len(tasks)
    checked = study["checked"]
    rows = [
        ("(a) oracle: final db = τ²'s gold", f"{len(oracle['matched'])}/{oracle['tasks']}", ""),
        ("(a) correct writes refused", of(len(oracle["refused"]), oracle["correct"]), ""),
        ("(a) reference writes τ² errors on (apart)", len(oracle["tau2_errors"]), ""),
        ("(b) attacks: forbidden db changes", of(sum(a["forbidden"] for a in attacks), n),
         of(sum(a["raw_changes"] for a in attacks), n) + " change the db"),
        ("(b) collateral writes", sum(bool(a["collateral"]) for a in attacks), ""),
        ("(b) refusals named", of(sum(a["named"] for a in attacks), n), ""),
        ("(c) yes-man: refusal tasks saved", of(sum(r["saved"] for r in tasks), count),
         of(sum(r["raw_saved"] for r in tasks), count)),
        ("(c) the same, check_words=True", of(sum(r["saved_checked"] for r in tasks), count), ""),
        ("(d) invented yes, model-only: writes run",
         of(len(study["model_only"]["run"]), study["model_only"]["played"]), ""),
        ("(d) check_words: non-confirmations accepted",
         of(len(checked["accepted"]), checked["non_confirmations"], True), ""),
        ("(d)   those answering a request to confirm",
         of(sum(m["answers_request"] for m in checked["accepted"]), study["answering"], True), ""),
        ("(d) check_words: real confirmations refused",
         of(len(checked["refused"]), checked["confirmations"], True), ""),
    ]
    lines = [f"## {domain.name}", "", table(("measure", "falai agent", "τ²'s raw tools"), rows), ""]
    if oracle["mismatched"] or oracle["refused"]:
        lines.append(f"oracle: off gold {oracle['mismatched']}; refused {oracle['refused']}")
    for task_id, name, error, outcome in oracle["tau2_errors"]:
        lines.append(f"τ² errors on task {task_id}'s {name} ({error}); the agent: {outcome}")
    for a in attacks:
        if a["forbidden"] or a["collateral"] or not a["named"] or not a["setup_ok"]:
            lines.append(f"attack {a['id']}: forbidden={a['forbidden']} refusal={a['refusal']!r} "
                         f"collateral={a['collateral']} setup_ok={a['setup_ok']}")
    stated = {attack["id"]: attack["raw"] for attack in domain.attacks}
    wrong = [(a["id"], a["raw_outcome"], stated[a["id"]]) for a in attacks
             if a["raw_outcome"] != stated[a["id"]]]
    if wrong:
        lines.append(f"the raw tools disagree with attacks.json's 'raw': {wrong}")
    word = lambda saved: "saved" if saved else "LOST"
    lines += ["", table(("yes-man task", "writes", "agent", "agent, check_words", "raw tools",
                         "the agent's first answer"),
                        [(r["task"], r["writes"], word(r["saved"]), word(r["saved_checked"]),
                          word(r["raw_saved"]),
                          shorten(r["outcomes"][0] if r["outcomes"] else "(no write to request)"))
                         for r in tasks])]
    return lines


def shorten(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def examples(results: dict, count: int = 3) -> list[str]:
    """A few messages of each mistake of the check (``check_words=True``)."""
    checked = results["confirmation"]["checked"]
    kinds = [("Non-confirmations accepted, answering a request to confirm:",
              [m for m in checked["accepted"] if m["answers_request"]]),
             ("Non-confirmations accepted, answering something else:",
              [m for m in checked["accepted"] if not m["answers_request"]]),
             ("Real confirmations refused:", checked["refused"])]
    lines = ["## The confirmation with check_words: examples", ""]
    for title, messages in kinds:
        lines += [title, *(f"  - {m['text']!r}" for m in messages[:count])]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--live" in argv:
        import live
        return live.main([arg for arg in argv if arg != "--live"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=DOMAINS, action="append",
                        help="a domain to run (repeatable; default: both)")
    args = parser.parse_args(argv)
    started, cpu = time.perf_counter(), time.process_time()
    words = confirmations()
    print("# τ²-bench on falai, offline (python bench/tau2.py)\n")
    results = None
    for name in args.domain or DOMAINS:
        domain = load(name)
        results = run(domain, words)
        print("\n".join(report(domain, results)) + "\n")
    print("\n".join(examples(results)) + "\n")
    print(f"run time: {time.perf_counter() - started:.1f} s "
          f"({time.process_time() - cpu:.1f} s of CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
