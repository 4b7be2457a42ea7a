"""Entry-point fuzzer: every door of an agent, on every session blob a host could load.

Each example builds an agent from generated flows (every step and trigger kind:
``tests/fuzz_scenarios.py``), plays real turns on it the way a host does (a start
of each flow, then the scenario's own messages, wakes, events and starts with
their hostile replies), and keeps the blob (``to_dict()``) of every session those
turns returned. It then mutates one of those blobs up to four times: a run's
status among the four of runtime.md §4.2, keeping or dropping its ``waiting``;
``waiting`` dicts set, dropped, re-keyed, re-timed, of the other kind or event;
other step, flow and run ids; ask and visit counts; ``suspendedAt``, ``staying``,
trigger, input, hop and outcome lines; runs duplicated, dropped, reordered and
made up; data values, claims, inputs, ``lastUserAt``/``lastAssistantAt``,
metadata, history and version. It keeps the mutants a host could have loaded:
``Session.from_dict`` accepts them and a ``MemoryStore`` saves them.

On each kept blob it calls every entry point: ``pending_wakes(session=...)`` (as
a Session and as a dict), ``turn(wake=...)`` for every ``waiting["key"]`` in the
blob, every key ``pending_wakes`` lists (silence wakes too) and made-up ones,
``turn(message=...)``, ``turn(event=...)`` and ``turn(start=...)``, each through
``turn()`` or now and then ``turn_stream()``, the session handed over as a
``Session`` or as its dict, under drawn ``context``, ``anchors``, ``claims`` and
``silenced``.

The property (docs/guide/limits.md: no input may "crash a turn ... or leave a
session that no longer loads"; persistence.md Part 5; python-api.md, Errors):

- a call returns, and the result's session saves in a ``MemoryStore`` and loads
  back the same; or it raises a ``FalaiError`` (a scripted understand failure is
  a ``ProviderError``). Every call here has valid arguments, so a ``TypeError``
  or ``ValueError`` is a failure too, and so is any other exception, above all a
  ``RuntimeError`` saying "This is a bug in falai";
- runtime.md §7.4 and §3.3: a run wake that no run with status ``waiting``
  carries as its ``waiting["key"]`` is ignored as ``stale-wake`` (one line,
  ``changed=False``, the session as given), and a run wake ``pending_wakes``
  lists is never ``stale-wake``; §7.5 and §14: a silence wake ``pending_wakes``
  lists is never ``silence-broken``.

Three tests hold it over three sets of blobs: the documented shapes with times
near the clock; the same with times from year 1 to year 9999 and a host clock at
either end of the supported range (limits.md, Instants); and any JSON where the
reader trusts the framework (persistence.md §2.5, "Not checked").

The model's replies during these calls are well formed (text without NUL or lone
surrogates), so that what fails is the blob or the door, not the reading of model
values (reviews: doors-2026-12-turn4.md, finding 2). A failure prints the failing
call as a program (``reproduction()``); there is no shrink phase (an example is
dozens of turns: shrinking one takes minutes). Bounded and repeatable by
default; FALAI_FUZZ=long or FALAI_FUZZ_EXAMPLES=N runs longer
(tests/fuzz_scenarios.py).
"""
from __future__ import annotations

import copy
import json
import logging
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import Phase, given, settings, strategies as st

from falai import (FalaiError, MemoryStore, ProviderError, ScriptedProvider, ScriptError, Session,
                   TurnResult)
from fuzz_scenarios import (EVENT_NAMES, SLUGS, Scenario, Turn, fuzz_settings, keyish, provider_for,
                            scenario, silenced_forms, words)

SESSION_ID = "s1"
T0 = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)       # the clock Scenario.agent() starts at
STATUSES = ["running", "asking", "waiting", "suspended"]     # runtime.md §4.2
TRIGGER_KINDS = ["message", "mention", "silence", "event", "start", "flow"]


@pytest.fixture(autouse=True)
def _quiet_engine_log():
    """Thousands of calls log thousands of expected warnings: keep only errors while fuzzing."""
    logger = logging.getLogger("falai")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def iso_text(at: datetime) -> str:
    """A time as the blob writes it (persistence.md §2.4)."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def ms_of(text: str) -> int | None:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except (TypeError, ValueError, AttributeError):
        return None


# Values a host or the framework could have written (no NUL, no lone surrogate: no store keeps them) ----

clean_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)
clean_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6),
                         st.floats(allow_nan=False, allow_infinity=False, width=32), clean_text)
clean_json = st.recursive(clean_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(clean_text, inner, max_size=3)), max_leaves=6)
# Times near the clock, and now and then at the ends of what a blob may hold: "a time already in a
# stored blob" is "read as written" (docs/guide/limits.md, Instants), year 1 and year 9999 included.
EDGE_TIMES = ["9999-12-31T23:59:59.999Z", "8999-12-31T23:59:59.999Z", "1000-01-01T00:00:00.000Z",
              "0001-01-01T00:00:00.000Z"]
EDGE_CLOCKS = ["8999-12-31T23:00:00.000Z", "1000-01-01T00:00:00.000Z"]     # inside the range (limits.md)
HOST_LIMIT = datetime(9000, 1, 1, tzinfo=timezone.utc)      # a clock past 8999 is the host's error
near_times = st.integers(-3 * 86400, 40 * 86400).map(lambda s: iso_text(T0 + timedelta(seconds=s)))
edge_times = st.one_of(near_times, st.sampled_from(EDGE_TIMES))


def clean_field_value(slug: str) -> st.SearchStrategy:
    return {"nome": clean_text, "idade": st.integers(-5, 200), "ativo": st.booleans(),
            "porte": st.sampled_from(["pequeno", "grande"]), "valor": st.floats(-1e6, 1e6)}[slug]


# The world one example works in: the agent's flows and the keys its sessions used ---------------------

@dataclass
class World:
    flow_ids: list
    steps: dict                       # flow id -> its step ids
    keys: list                        # wake keys seen: scheduled, carried in a waiting, made up
    run_ids: list
    dedupe_keys: list
    blobs: list = field(default_factory=list)
    times: st.SearchStrategy = near_times       # the times a mutation writes

    @classmethod
    def of(cls, case: Scenario, blobs: list, scheduled: list, times: st.SearchStrategy = near_times) -> World:
        runs = [run for blob in blobs for run in blob["runs"]]
        keys = sorted({entry.key for entry in scheduled}
                      | {run["waiting"]["key"] for run in runs
                         if isinstance(run.get("waiting"), dict)
                         and isinstance(run["waiting"].get("key"), str)})
        return cls(flow_ids=[flow["id"] for flow in case.flows],
                   steps={flow["id"]: [step["id"] for step in flow["steps"]] for flow in case.flows},
                   keys=keys or ["f0#k1:s0:1790000000000"],
                   run_ids=sorted({run["id"] for run in runs}) or ["f0#k1"],
                   dedupe_keys=sorted({run["dedupeKey"] for run in runs}) or [f"f0:{SESSION_ID}:"],
                   blobs=blobs, times=times)


@st.composite
def wake_key(draw, world: World) -> str:
    """A wake key: one the session used, one shaped like a run wake (runtime.md §8), or made up."""
    kind = draw(st.sampled_from(["seen", "seen", "shaped", "retry", "start", "silence", "made-up"]))
    if kind == "seen":
        return draw(st.sampled_from(world.keys))
    run_id = draw(st.sampled_from(world.run_ids))
    ms = draw(world.times.map(ms_of))
    if kind == "shaped":
        return f"{run_id}:{draw(st.sampled_from(sum(world.steps.values(), [])))}:{ms}"
    if kind == "retry":
        return f"{run_id}:{draw(st.sampled_from(sum(world.steps.values(), [])))}:1:retry:{ms}"
    if kind == "start":
        return f"{run_id}:start:{ms}"
    if kind == "silence":
        return f"silence:{draw(st.sampled_from(world.flow_ids + ['sumiu']))}:{SESSION_ID}:{ms}"
    return draw(st.one_of(keyish, st.just("")))


@st.composite
def waiting_value(draw, world: World) -> dict:
    """A ``waiting`` dict (persistence.md §2.2): the documented keys and types, any of them left out."""
    kind = draw(st.sampled_from(["timer", "event"]))
    full = {"kind": kind, "key": draw(wake_key(world)), "until": draw(world.times), "setAt": draw(world.times)}
    if kind == "event" or draw(st.integers(0, 4)) == 4:
        full["event"] = draw(st.sampled_from(EVENT_NAMES + ["nunca"]))
    if draw(st.booleans()):
        return full
    return {key: value for key, value in full.items() if draw(st.booleans())}


def step_ids_of(world: World) -> st.SearchStrategy:
    return st.sampled_from(sum(world.steps.values(), []) + ["sumiu", None])


def outcome_line(world: World) -> st.SearchStrategy:
    """An outcome line as a run keeps it (runtime.md §11.1), enough for the stay rule (§4.7) to read."""
    return st.fixed_dictionaries(
        {"kind": st.sampled_from(["prompt", "collect", "say", "do", "wait", "if"]),
         "status": st.sampled_from(["ok", "skipped", "waiting"]), "at": world.times},
        optional={"stepId": step_ids_of(world).filter(lambda s: s is not None), "key": keyish,
                  "runId": st.sampled_from(world.run_ids), "flowId": st.sampled_from(world.flow_ids)})


@st.composite
def made_up_run(draw, world: World) -> dict:
    """A run with every key persistence.md §2.2 lists, in the documented types."""
    flow_id = draw(st.sampled_from(world.flow_ids + ["sumiu"]))
    key = draw(st.sampled_from(["k1", "m1", "e1", "1790000000000"]))
    status = draw(st.sampled_from(STATUSES))
    run = {"id": f"{flow_id}#{key}", "flowId": flow_id, "anchor": draw(st.sampled_from([SESSION_ID, "lead:1"])),
           "dedupeKey": f"{flow_id}:{SESSION_ID}:" + draw(st.sampled_from(["", key])),
           "stepId": draw(st.sampled_from(world.steps.get(flow_id, ["s0"]) + [None])), "status": status,
           "trigger": {"kind": draw(st.sampled_from(TRIGGER_KINDS)), "key": key},
           "hop": draw(st.integers(0, 5)),
           "startedAt": draw(world.times), "asked": {}, "visits": {}, "outcomes": []}
    if status == "waiting" or draw(st.integers(0, 3)) == 3:
        run["waiting"] = draw(waiting_value(world))
    if status == "suspended" or draw(st.integers(0, 3)) == 3:
        run["suspendedAt"] = draw(world.times)
    return run


# Mutations: (name, run index, value). A run index picks among the blob's runs, modulo their number ------

@st.composite
def mutation(draw, world: World) -> tuple:
    name = draw(st.sampled_from([
        "status", "status", "status-drop-waiting", "status-drop-waiting", "park", "waiting", "drop-waiting",
        "waiting-key", "waiting-part", "step", "flow", "asked", "visits", "suspended-at", "staying", "trigger",
        "input", "hop", "outcomes", "ids", "duplicate", "drop-run", "reverse-runs", "add-run", "add-run",
        "data", "claims", "inputs", "last-user-at", "last-assistant-at", "metadata", "history", "version"]))
    run = draw(st.integers(0, 7))
    if name in ("status", "status-drop-waiting"):
        value = draw(st.sampled_from(STATUSES))
    elif name in ("park", "waiting"):
        value = (draw(st.sampled_from(STATUSES)), draw(waiting_value(world)))
    elif name == "waiting-key":
        value = draw(st.one_of(wake_key(world), st.none()))             # None: drop the key
    elif name == "waiting-part":
        part = draw(st.sampled_from(["kind", "until", "setAt", "event"]))
        parts = {"kind": st.sampled_from(["timer", "event"]), "until": world.times, "setAt": world.times,
                 "event": st.sampled_from(EVENT_NAMES + ["nunca"])}
        value = (part, draw(st.none() | parts[part]))
    elif name == "step":
        value = draw(step_ids_of(world))
    elif name == "flow":
        value = draw(st.sampled_from(world.flow_ids + ["sumiu"]))
    elif name == "asked":
        value = (draw(st.sampled_from(SLUGS)), draw(st.integers(0, 6)))
    elif name == "visits":
        value = (draw(step_ids_of(world).filter(lambda s: s is not None)), draw(st.integers(0, 60)))
    elif name == "suspended-at":
        value = draw(st.none() | world.times)
    elif name == "staying":
        value = draw(st.booleans())
    elif name == "trigger":
        value = {"kind": draw(st.sampled_from(TRIGGER_KINDS)), "key": draw(keyish)}
        if draw(st.booleans()):
            value["payload"] = draw(clean_json)
    elif name == "input":
        value = draw(st.none() | clean_json)
    elif name == "hop":
        value = draw(st.integers(0, 7))
    elif name == "outcomes":
        value = draw(st.one_of(st.just([]), st.lists(outcome_line(world), min_size=1, max_size=3)))
    elif name == "ids":
        value = (draw(st.sampled_from(["id", "dedupeKey", "anchor"])),
                 draw(st.sampled_from(world.run_ids + world.dedupe_keys + [SESSION_ID, "lead:1", "x"])))
    elif name == "add-run":
        value = draw(made_up_run(world))
    elif name == "data":
        value = (draw(st.sampled_from(SLUGS + ["extra"])),
                 draw(st.one_of(st.just(None), clean_field_value("nome"), clean_field_value("idade"),
                                clean_field_value("ativo"), clean_json)))        # None: delete the slug
    elif name == "claims":
        value = draw(st.one_of(st.just(None), st.tuples(
            st.sampled_from(world.dedupe_keys + [f"{fid}:{SESSION_ID}:" for fid in world.flow_ids]
                            + [f"{fid}:s0:{SESSION_ID}" for fid in world.flow_ids]), world.times)))
    elif name == "inputs":
        value = draw(st.lists(st.sampled_from(["m1", "m2", "m3", "m4"]), max_size=3))
    elif name in ("last-user-at", "last-assistant-at"):
        value = draw(st.none() | world.times)
    elif name == "metadata":
        value = draw(st.dictionaries(clean_text, clean_json, max_size=2))
    elif name == "history":
        value = draw(st.none() | st.lists(st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]),
             "content": st.sampled_from(["oi", "tudo bem?", ""])}),
            max_size=3))
    elif name == "version":
        value = draw(st.integers(0, 9))
    else:                                             # duplicate, drop-run, reverse-runs
        value = None
    return name, run, value


RUN_MUTATIONS = {"status", "status-drop-waiting", "park", "waiting", "drop-waiting", "waiting-key",
                 "waiting-part", "step", "flow", "asked", "visits", "suspended-at", "staying", "trigger",
                 "input", "hop", "outcomes", "ids", "duplicate", "drop-run"}


def mutate(blob: dict, change: tuple) -> None:
    """Apply one mutation to ``blob`` in place."""
    name, index, value = change
    runs = blob["runs"]
    if name in RUN_MUTATIONS:
        if not runs:
            return
        run = runs[index % len(runs)]
        if name == "status":
            run["status"] = value                     # its waiting, if any, stays
        elif name == "status-drop-waiting":
            run["status"] = value
            run.pop("waiting", None)
        elif name in ("park", "waiting"):
            run["status"] = value[0] if name == "park" else run["status"]
            run["waiting"] = value[1]
        elif name == "drop-waiting":
            run.pop("waiting", None)
        elif name == "waiting-key":
            waiting = run.setdefault("waiting", {})
            if value is None:
                waiting.pop("key", None)
            else:
                waiting["key"] = value
        elif name == "waiting-part":
            waiting = run.setdefault("waiting", {})
            if value[1] is None:
                waiting.pop(value[0], None)
            else:
                waiting[value[0]] = value[1]
        elif name == "step":
            run["stepId"] = value
        elif name == "flow":
            run["flowId"] = value
        elif name == "asked":
            run["asked"][value[0]] = value[1]
        elif name == "visits":
            run["visits"][value[0]] = value[1]
        elif name == "suspended-at":
            if value is None:
                run.pop("suspendedAt", None)
            else:
                run["suspendedAt"] = value
        elif name == "staying":
            if value:
                run["staying"] = True
            else:
                run.pop("staying", None)
        elif name == "trigger":
            run["trigger"] = value
        elif name == "input":
            if value is None:
                run.pop("input", None)
            else:
                run["input"] = value
        elif name == "hop":
            run["hop"] = value
        elif name == "outcomes":
            run["outcomes"] = run["outcomes"] + value if value else []
        elif name == "ids":
            run[value[0]] = value[1]
        elif name == "duplicate":
            runs.append(copy.deepcopy(run))
        elif name == "drop-run":
            runs.remove(run)
    elif name == "reverse-runs":
        runs.reverse()
    elif name == "add-run":
        runs.append(copy.deepcopy(value))
    elif name == "data":
        if value[1] is None:
            blob["data"].pop(value[0], None)
        else:
            blob["data"][value[0]] = value[1]
    elif name == "claims":
        if value is None:
            blob["claims"] = {}
        else:
            blob["claims"][value[0]] = {"at": value[1]}
    elif name == "inputs":
        blob["inputs"] = value
    elif name in ("last-user-at", "last-assistant-at"):
        key = "lastUserAt" if name == "last-user-at" else "lastAssistantAt"
        if value is None:
            blob.pop(key, None)
        else:
            blob[key] = value
    elif name == "metadata":
        blob["metadata"] = value
    elif name == "history":
        if value is None:
            blob.pop("history", None)
        else:
            blob["history"] = value
    elif name == "version":
        blob["version"] = value
    elif name == "trusted":
        put_trusted(blob, index, *value)


# Contents the reader trusts (persistence.md §2.5, "Not checked ... since only the framework writes
# them"): the content of trigger beyond kind and key, of waiting, asked, visits, each outcome line,
# the format of time text, the content of data, metadata and history. The reader accepts any JSON
# there; docs/guide/limits.md says every saved session "loads, turns ... and saves".

junk = st.sampled_from(["x", "", "amanhã", "2026-13-45T99:00:00.000Z", "2026-09-20",
                        "2026-09-20T07:00:00-03:00", 5, -1, 1.5, 10 ** 30, None, True, [], {}, ["x"],
                        {"at": "x"}])
TRUSTED_PLACES = ["asked", "visits", "waiting.key", "waiting.until", "waiting.setAt", "waiting.kind",
                  "waiting.event", "startedAt", "suspendedAt", "outcome", "outcome.stepId",
                  "outcome.status", "outcome.at", "trigger.payload", "trigger.kind", "claims.at",
                  "lastUserAt", "lastAssistantAt", "history"]


@st.composite
def trusted_content(draw, world: World) -> tuple:
    """Any JSON where the reader does not look (persistence.md §2.5, "Not checked")."""
    place = draw(st.sampled_from(TRUSTED_PLACES))
    value = draw(junk)
    if place in ("trigger.kind", "startedAt", "claims.at", "lastUserAt", "lastAssistantAt", "suspendedAt"):
        value = draw(junk.filter(lambda v: isinstance(v, str)))       # the reader checks these are text
    return "trusted", draw(st.integers(0, 7)), (place, value)


def put_trusted(blob: dict, index: int, place: str, value: Any) -> None:
    if place in ("lastUserAt", "lastAssistantAt"):
        blob[place] = value
        return
    if place == "claims.at":
        for claim in blob["claims"].values():
            claim["at"] = value
        return
    if place == "history":
        blob["history"] = [value, {"role": "user", "content": value}]
        return
    if not blob["runs"]:
        return
    run = blob["runs"][index % len(blob["runs"])]
    part = place.split(".", 1)[-1]
    if place in ("asked", "visits"):
        run[place][{"asked": "nome", "visits": run["stepId"] or "s0"}[place]] = value
    elif place.startswith("waiting."):
        run.setdefault("waiting", {"kind": "timer", "key": "k", "until": iso_text(T0), "setAt": iso_text(T0)})
        run["waiting"][part] = value
    elif place in ("startedAt", "suspendedAt"):
        run[place] = value
    elif place == "outcome":
        run["outcomes"] = [*run["outcomes"], value]
    elif place.startswith("outcome."):
        line = {"runId": run["id"], "flowId": run["flowId"], "stepId": run["stepId"] or "s0", "kind": "collect",
                "status": "ok", "at": iso_text(T0)}
        run["outcomes"] = [*run["outcomes"], {**line, part: value}]
    elif place.startswith("trigger."):
        run["trigger"][part] = value


def loadable(blob: dict) -> Session | None:
    """The session a host could load from ``blob``: the reader accepts it and a store keeps it."""
    try:
        session = Session.from_dict(copy.deepcopy(blob), session_id=SESSION_ID)
        store = MemoryStore()
        store.save(session, 0)
        store.load(SESSION_ID)
    except (FalaiError, ValueError, TypeError):
        return None
    return session


# The agent's provider during the entry-point calls: well-formed replies, swapped in per call -------

class Swappable:
    """The agent's provider, whose scripted replies are swapped call by call (an Agent's own attributes
    cannot change after it is built)."""

    def __init__(self) -> None:
        self.current = ScriptedProvider()

    def generate(self, request):
        return self.current.generate(request)

    def generate_stream(self, request):
        return self.current.generate_stream(request)

    def __getattr__(self, name):
        return getattr(self.current, name)


@st.composite
def clean_understand(draw, flow_ids: list) -> Any:
    """An understand reply in the documented shape (model-calls.md §3.5), or a provider failure."""
    if draw(st.integers(0, 7)) == 7:
        return ProviderError("sobrecarregado", provider="scripted", kind="overload", status=529)
    reply: dict = {"flows": draw(st.dictionaries(st.sampled_from(flow_ids), st.integers(0, 100), max_size=2))}
    if draw(st.booleans()):
        reply["fields"] = {slug: draw(clean_field_value(slug))
                           for slug in draw(st.lists(st.sampled_from(SLUGS), max_size=2, unique=True))}
    if draw(st.integers(0, 3)) == 3:
        reply["mentions"] = {draw(st.sampled_from(flow_ids)): draw(st.booleans())}
    if draw(st.integers(0, 3)) == 3:
        reply["branches"] = draw(st.dictionaries(st.sampled_from(["q1", "q2", "b1"]), st.booleans(),
                                                 max_size=2))
    return reply


@st.composite
def clean_speak(draw) -> Any:
    """A speak reply (model-calls.md §5.5): an envelope, a tool round, or a provider failure."""
    kind = draw(st.sampled_from(["envelope", "envelope", "envelope", "tools", "error"]))
    if kind == "error":
        return ProviderError("cota", provider="scripted", kind="quota", status=429)
    if kind == "tools":
        return {"message": "", "toolCalls": [{"toolName": draw(st.sampled_from(["preco", "salva"])),
                                              "arguments": {"cidade": "Recife"}}]}
    reply = {"message": draw(words)}
    for slug in draw(st.lists(st.sampled_from(SLUGS), max_size=2, unique=True)):
        reply[slug] = draw(clean_field_value(slug))
    return reply


# One example: set up, mutate, call every door ---------------------------------------------------------

@dataclass
class Failure:
    door: str
    kwargs: dict                      # the call's keywords, the session left out
    now: str                          # the agent's clock at the call
    what: str
    where: str = ""
    blob: dict | None = None          # the blob it was handed (as a Session or as this dict)

    @property
    def call(self) -> str:
        return f"{self.door}({', '.join(f'{key}={value!r}' for key, value in self.kwargs.items())})"


@dataclass
class Example:
    """The agent, the blobs its real turns left, and the failures the entry points showed."""
    case: Scenario
    provider: Swappable
    agent: Any
    world: World
    base: datetime
    understand: list
    speak: list
    failures: list = field(default_factory=list)
    stop: bool = True                 # stop at the first failure (the property's run); False counts them all
    calls: int = 0
    accepted: int = 0
    failing_blobs: int = 0

    def fail(self, door: str, kwargs: dict, what: str, where: str = "") -> None:
        shown = {key: value for key, value in kwargs.items() if key != "session"}
        self.failures.append(Failure(door, copy.deepcopy(shown), iso_text(self.agent.clock()), what, where))

    def script(self) -> ScriptedProvider:
        """Replies for one call: more than a turn can use, so a dry queue never stands in for a failure."""
        return ScriptedProvider(script={"understand": copy.deepcopy(self.understand) * 4,
                                        "speak": copy.deepcopy(self.speak) * 8,
                                        "compaction": [{"message": "Resumo."}] * 2})


def set_up(case: Scenario, understand: list, speak: list) -> tuple:
    """Play real turns as a host does: a start of each flow (so most sessions hold live runs), then
    the scenario's own turns with their replies. (agent, provider, blobs, scheduled entries)."""
    provider = Swappable()
    agent = case.agent(provider)
    session, blobs, scheduled, fired = None, [], [], []
    starts = [Turn({"start": {"flow": flow["id"], "key": f"k{i}"}}, understand, speak * 4, [], 0)
              for i, flow in enumerate(case.flows)]
    for turn in starts + case.turns:
        kwargs = dict(turn.kwargs)
        agent.clock.advance(turn.advance_s)
        wake = kwargs.get("wake")
        if isinstance(wake, tuple):
            which, i = wake
            pool = scheduled if which == "scheduled" else fired
            if pool:
                entry = pool[i % len(pool)]
                kwargs["wake"] = entry.key
                if which == "scheduled":
                    scheduled.remove(entry)
                    fired.append(entry)
                    if entry.at > agent.clock():
                        agent.clock.set(iso_text(entry.at))
            else:
                kwargs["wake"] = f"forjado:{which}:{i}"
        provider.current = provider_for(turn)
        try:
            result = agent.turn(session_id=SESSION_ID, session=session, **kwargs)
        except Exception:  # noqa: BLE001 - what the setup turns raise is test_properties.py's business
            continue
        session = result.session
        scheduled.extend(result.schedule)
        blobs.append(copy.deepcopy(session.to_dict()))
    if not blobs:
        blobs.append({"id": SESSION_ID, "v": 4, "version": 0, "data": {}, "runs": [], "claims": {},
                      "inputs": [], "metadata": {}})
    return agent, provider, blobs, scheduled + fired


def saves_and_loads(result: TurnResult) -> str | None:
    """Why the result's session does not go through a MemoryStore unchanged; None when it does."""
    try:
        store = MemoryStore()
        store.save(result.session, 0)
        loaded = store.load(SESSION_ID)
    except Exception as error:  # noqa: BLE001
        return f"the result's session does not save: {type(error).__name__}: {str(error)[:300]}"
    before, after = dict(result.session.to_dict()), dict(loaded.to_dict())
    before.pop("version"), after.pop("version")
    if json.dumps(before, sort_keys=True) != json.dumps(after, sort_keys=True):
        return "the result's session loads back different"
    return None


def undocumented(error: BaseException) -> bool:
    """An exception no door may raise on valid arguments (persistence.md Part 5, python-api.md)."""
    if isinstance(error, FalaiError):
        return False
    # the test double running dry is the test's own doing, never the engine's
    return not (isinstance(error, ScriptError) and "no scripted" in str(error))


def call(example: Example, door: str, kwargs: dict, blob: dict) -> TurnResult | list | None:
    """One entry-point call; records a failure when it breaks the property. Returns its result."""
    example.calls += 1
    example.provider.current = example.script()
    try:
        if door == "pending_wakes":
            return example.agent.pending_wakes(**kwargs)
        if door == "turn_stream":
            chunks = list(example.agent.turn_stream(session_id=SESSION_ID, **kwargs))
            if not chunks or not chunks[-1].done or any(chunk.done for chunk in chunks[:-1]):
                example.fail(door, kwargs, "the stream did not end in one done chunk")
                return None
            result = chunks[-1].result
        else:
            result = example.agent.turn(session_id=SESSION_ID, **kwargs)
    except Exception as error:  # noqa: BLE001 - the property decides what may escape
        if undocumented(error):
            where = "".join(traceback.format_tb(error.__traceback__)[-4:])
            example.fail(door, kwargs, f"raised {type(error).__name__}: {str(error)[:400]}", where)
        return None
    problem = saves_and_loads(result)
    if problem:
        example.fail(door, kwargs, problem)
    return result


def waiting_keys(blob: dict, only_waiting: bool = False) -> set:
    return {run["waiting"]["key"] for run in blob["runs"]
            if isinstance(run.get("waiting"), dict) and isinstance(run["waiting"].get("key"), str)
            and (run["status"] == "waiting" or not only_waiting)}


def check_wake(example: Example, key: str, kwargs: dict, result: TurnResult | None, blob: dict,
               pending: set) -> None:
    """runtime.md §7.4 and §3.3: who honours a run wake, and how an ignored one is reported; §7.5
    and §14: a silence wake pending_wakes lists still holds when it fires."""
    if result is None:
        return
    lines = [(line.kind, line.status, line.code) for line in result.outcomes]
    if key.startswith("silence:"):
        # (a run's own waiting key shaped like a silence wake is listed too, and read as one when it
        # fires: no flow id starts with "silence:", docs/guide/limits.md, so no run parks on one)
        listed = key in pending and key not in waiting_keys(blob)
        if listed and ("wait", "skipped", "silence-broken") in lines:
            example.fail("turn", kwargs,
                         "pending_wakes lists this silence wake, yet it fired as silence-broken")
        return
    stale = ("wait", "skipped", "stale-wake") in lines
    if key in pending and stale:
        example.fail("turn", kwargs, "pending_wakes lists this key, yet the wake was ignored as stale-wake")
    if key not in waiting_keys(blob, only_waiting=True):
        given = Session.from_dict(copy.deepcopy(blob), session_id=SESSION_ID).to_dict()
        if lines != [("wait", "skipped", "stale-wake")] or result.changed:
            example.fail("turn", kwargs, "no waiting run carries this key, yet the wake was not ignored "
                         f"as stale-wake: {lines}, changed={result.changed}")
        elif json.dumps(result.session.to_dict(), sort_keys=True) != json.dumps(given, sort_keys=True):
            example.fail("turn", kwargs, "a stale wake changed the session")


def common(draw, turn: bool = True) -> dict:
    """The arguments every turn takes besides the input (runtime.md §2.1), drawn; pending_wakes takes
    them too, except ``silenced`` (runtime.md §14)."""
    out: dict = {}
    silenced = draw(silenced_forms) if turn else None
    if silenced is not None:
        out["silenced"] = silenced
    if draw(st.integers(0, 3)) == 3:
        out["context"] = {"plano": draw(st.sampled_from(["ouro", "prata"]))}
    if draw(st.integers(0, 3)) == 3:
        out["anchors"] = {"lead": {"key": draw(st.sampled_from(["lead:1", "lead:2"]))}}
    if draw(st.integers(0, 5)) == 5:
        out["claims"] = {"held": {draw(st.sampled_from(["f0:s1:", "f1:s1:", "f0:lead:1:"])): draw(near_times)},
                         "active": draw(st.lists(st.sampled_from(["f0:s1", "f1:lead:1"]), max_size=1))}
    return out


def call_every_door(example: Example, blob: dict, draw) -> None:
    """pending_wakes, then every wake, a message, an event and a start, on one accepted blob."""
    world = example.world
    as_session = lambda: Session.from_dict(copy.deepcopy(blob), session_id=SESSION_ID)   # noqa: E731
    handed = lambda: as_session() if draw(st.booleans()) else copy.deepcopy(blob)       # noqa: E731
    clock = example.agent.clock
    clock.set(iso_text(example.base + timedelta(seconds=draw(st.sampled_from([0, 0, 60, 3600, 2 * 86400])))))
    if example.world.times is edge_times and draw(st.integers(0, 2)) == 2:
        clock.set(draw(st.sampled_from(EDGE_CLOCKS)))          # a host clock at an end of the range
    now = clock()
    pending: set = set()              # every key pending_wakes lists: run wakes and silence wakes
    until: dict = {}
    for form in (as_session(), copy.deepcopy(blob)):
        entries = call(example, "pending_wakes", {"session": form, **common(draw, turn=False)}, blob)
        if example.failures and example.stop:
            return
        for entry in entries or []:
            if isinstance(entry.key, str):
                pending.add(entry.key)
                until[entry.key] = entry.at
    wakes = sorted(waiting_keys(blob) | pending) + draw(st.lists(wake_key(world), min_size=1, max_size=2))
    inputs: list = [("wake", key) for key in wakes]
    message: dict = {"message": draw(words)}
    if draw(st.booleans()):
        message["id"] = draw(st.sampled_from(["m1", "m2", "m5", ""]))
    if draw(st.integers(0, 3)) == 3:
        message["at"] = draw(near_times)        # an input's instant outside 1000-8999 is a TypeError
    event: dict = {"event": draw(st.sampled_from(EVENT_NAMES + ["nunca"])),
                   "key": draw(st.sampled_from(["e1", "e9"]))}
    if draw(st.booleans()):
        event["payload"] = draw(clean_json)
    if draw(st.integers(0, 3)) == 3:
        event["hop"] = draw(st.integers(0, 6))
    start: dict = {"flow": draw(st.sampled_from(world.flow_ids + ["sumiu"])),
                   "key": draw(st.sampled_from(["k1", "k9"]))}
    if draw(st.booleans()):
        start["input"] = draw(clean_json)
    if draw(st.integers(0, 3)) == 3:
        start["hop"] = draw(st.integers(0, 6))
    inputs += [("message", message), ("event", event), ("start", {"start": start})]
    for kind, value in inputs:
        clock.set(iso_text(now))
        kwargs = {"session": handed(), **common(draw)}
        if kind == "wake":
            kwargs["wake"] = value
            # a host fires a wake when it is due: sometimes jump the clock there first
            at = until.get(value)
            if at is not None and now < at < HOST_LIMIT and draw(st.booleans()):
                clock.set(iso_text(at))
        else:
            kwargs.update(value)
        door = "turn_stream" if draw(st.integers(0, 3)) == 3 else "turn"
        result = call(example, door, kwargs, blob)
        if kind == "wake":
            check_wake(example, value, kwargs, result, blob, pending)
        if example.failures and example.stop:
            return


def script_text(entries: list) -> str:
    return "[" + ", ".join(f'ProviderError("x", provider="scripted", kind="{entry.kind}", status={entry.status})'
                           if isinstance(entry, ProviderError) else repr(entry) for entry in entries) + "]"


def reproduction(example: Example, failure: Failure) -> str:
    """The failing call as a program: the agent, its replies, its clock, the blob, the call."""
    case = example.case
    arguments = ([] if failure.door == "pending_wakes" else [f"session_id={SESSION_ID!r}"]) + ["session=blob"]
    arguments += [f"{key}={value!r}" for key, value in failure.kwargs.items()]
    call = f"agent.{failure.door}({', '.join(arguments)})"
    if failure.door == "turn_stream":
        call = f"list({call})"
    return "\n".join([
        "from falai import ProviderError, ScriptedProvider",
        "from fuzz_scenarios import Scenario      # tests/ on sys.path",
        f"case = Scenario(flows={case.flows!r}, idle={case.idle!r}, compaction={case.compaction!r}, "
        f"business_hours={case.business_hours!r})",
        f'agent = case.agent(ScriptedProvider(script={{"understand": {script_text(example.understand)} * 4, '
        f'"speak": {script_text(example.speak)} * 8}}))',
        f"agent.clock.set({failure.now!r})",
        f"blob = {failure.blob!r}",
        call])


def report(example: Example) -> str:
    first = example.failures[0]
    return (f"an entry-point call broke the property (call {example.calls} of the example):\n"
            f"  {first.call}\n  {first.what}\n{first.where}\nTo reproduce:\n\n{reproduction(example, first)}\n")


def run_example(case: Scenario, data, mutations: int = 4, tries: int = 4, stop: bool = True,
                edges: bool = False, trusted: bool = False) -> Example:
    """Set up, then up to ``tries`` mutants of the blobs; every accepted one goes through every door
    (until one fails, unless ``stop`` is False). ``edges``: the times mutations write include the
    ends of the datetime range (EDGE_TIMES); ``trusted``: mutations also put any JSON where the
    reader trusts the framework (trusted_content)."""
    flow_ids = [flow["id"] for flow in case.flows]
    understand = data.draw(st.lists(clean_understand(flow_ids), min_size=1, max_size=3))
    speak = data.draw(st.lists(clean_speak(), min_size=1, max_size=3))
    agent, provider, blobs, scheduled = set_up(case, understand, speak)
    world = World.of(case, blobs, scheduled, edge_times if edges else near_times)
    example = Example(case=case, provider=provider, agent=agent, world=world, base=agent.clock(),
                      understand=understand, speak=speak, stop=stop)
    for _ in range(tries):
        blob = copy.deepcopy(blobs[data.draw(st.integers(0, len(blobs) - 1))])
        changes = st.one_of(mutation(world), trusted_content(world)) if trusted else mutation(world)
        for change in data.draw(st.lists(changes, min_size=1, max_size=mutations)):
            mutate(blob, change)
        if loadable(blob) is None:
            continue
        example.accepted += 1
        before = len(example.failures)
        call_every_door(example, blob, data.draw)
        if len(example.failures) > before:
            example.failing_blobs += 1
            for failure in example.failures[before:]:
                failure.blob = blob
            if stop:
                break
    return example


def fuzz_settings_without_shrink(default_examples: int) -> settings:
    """fuzz_settings() without the shrink phase: an example replays real turns and dozens of calls,
    so shrinking one takes minutes (and mostly overruns). A failure prints the failing call as a
    program instead (reproduction())."""
    return settings(fuzz_settings(default_examples), phases=[Phase.explicit, Phase.reuse, Phase.generate])


@fuzz_settings_without_shrink(150)
@given(case=scenario(max_turns=4), data=st.data())
def test_every_entry_point_on_every_loadable_blob_returns_a_savable_session_or_a_documented_error(case, data):
    """limits.md, persistence.md Part 5, runtime.md §3.3, §7.4, §14, §16: on any blob the reader
    accepts and a store keeps, turn(), turn_stream() and pending_wakes() return a session that
    saves, or raise a FalaiError; a wake no waiting run carries is stale-wake."""
    example = run_example(case, data)
    if example.failures:
        raise AssertionError(report(example))


@fuzz_settings_without_shrink(60)
@given(case=scenario(max_turns=4), data=st.data())
def test_every_entry_point_on_a_blob_with_times_at_the_ends_of_the_range(case, data):
    """The same property, with blob times from year 1 to year 9999 now and then: "a time already in a
    stored blob" is "read as written" (docs/guide/limits.md, Instants), so a turn or pending_wakes on
    such a blob still returns, whatever business hours and durations add to it."""
    example = run_example(case, data, edges=True)
    if example.failures:
        raise AssertionError(report(example))


@fuzz_settings_without_shrink(40)
@given(case=scenario(max_turns=4), data=st.data())
def test_every_entry_point_on_a_blob_with_any_json_where_the_reader_trusts_the_framework(case, data):
    """The same property, with any JSON where the reader does not look (persistence.md §2.5, "Not
    checked"): an ask count, a wait's key or time, an outcome line, a time's format. The reader
    accepts such a blob, so docs/guide/limits.md's promise ("loads, turns ... and saves") covers it:
    a turn refuses it with InvalidSessionError, or reads past it, never a TypeError or a crash."""
    example = run_example(case, data, trusted=True)
    if example.failures:
        raise AssertionError(report(example))
