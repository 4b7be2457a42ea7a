"""Properties of turn() over generated agents, input sequences and provider replies (issue 8).

Each example builds an agent from valid generated flows (every step and trigger kind),
then plays a sequence of turns the way the README's host loop does: save the result's
session, schedule its wakes, fire some of them (and stale and forged ones), send
messages with repeated ids, events with payloads, manual starts, every ``silenced``
form; the provider is a ScriptedProvider scripted per turn with valid, malformed,
wrongly typed, unknown-keyed (and, in the hostile runs, huge and deep) replies.

Runs bounded by default; FALAI_FUZZ=long or FALAI_FUZZ_EXAMPLES=N runs longer
(tests/fuzz_scenarios.py).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import traceback
from datetime import datetime

import pytest
from hypothesis import example, given, strategies as st

from falai import GenerationChunk, ScriptedProvider, ScriptError, Session, iso
from falai_stores import SQLiteStore, encode_session_row
from fuzz_scenarios import DEEP_INPUT, RE_ASK, SHARED_MEDIA, Scenario, fuzz_settings, provider_for, scenario



@pytest.fixture(autouse=True)
def _quiet_engine_log():
    """Thousands of turns log thousands of expected warnings: keep only errors while fuzzing."""
    logger = logging.getLogger("falai")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


class Chunky(ScriptedProvider):
    """Streams each scripted reply three characters at a time, as a real provider streams JSON text."""

    def generate_stream(self, request):
        generation = self.generate(request)
        text, sent = generation.message if isinstance(generation.message, str) else "", ""
        for i in range(0, len(text), 3):
            sent += text[i:i + 3]
            yield GenerationChunk(delta=text[i:i + 3], accumulated=sent, done=False)
        yield GenerationChunk(delta="", accumulated=text, done=True, structured=generation.structured,
                              tool_calls=generation.tool_calls, usage=generation.usage)


def view(value):
    """A result (or session) as comparable JSON text: NaN equals NaN, datetimes as ISO text."""
    if isinstance(value, Session):
        value = value.to_dict()
    elif dataclasses.is_dataclass(value):
        value = {f.name: (value.session.to_dict() if f.name == "session" else getattr(value, f.name))
                 for f in dataclasses.fields(value)}

    def default(item):
        if isinstance(item, datetime):
            return iso(item)
        if dataclasses.is_dataclass(item):
            return dataclasses.asdict(item)
        return repr(item)

    return json.dumps(value, default=default, ensure_ascii=False)


def same(a: str, b: str, what: str) -> None:
    """Fail with ``what`` when two views differ (no pytest diff: views of huge replies are large)."""
    if a != b:
        raise AssertionError(f"{what}\n  first:  {a[:600]}\n  second: {b[:600]}")


def depth(value) -> int:
    """How many lists and dicts deep a value nests (iterative: the values here may be very deep)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level + 1)
            todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def documented(error: BaseException, provider: ScriptedProvider, turn) -> bool:
    """What may escape turn(): a failed understand call (a scripted failure, or a dry queue), unchanged
    (runtime.md §10.1); and, before any model call, a TypeError or ValueError refusing an input nested
    too deep (issue 8: deeper input is refused at the door)."""
    if not provider.calls:
        given = turn.kwargs.get("payload"), (turn.kwargs.get("start") or {}).get("input")
        return isinstance(error, (TypeError, ValueError)) and depth(list(given)) > 100
    name = provider.calls[-1].schema_name
    if isinstance(error, ScriptError) and f'no scripted "{name}" reply left' in str(error):
        return True         # a dry script queue raises out of the turn, whatever the call (testing.md)
    if name != "understand":
        return False
    scripted = turn.understand
    return any(type(error) is type(entry) and str(error) == str(entry)
               for entry in scripted if isinstance(entry, BaseException))


class Swappable:
    """The agent's provider, whose scripted replies a test swaps turn by turn (an Agent's own
    attributes cannot change after it is built)."""

    def __init__(self, provider):
        self.current = provider

    def generate(self, request):
        return self.current.generate(request)

    def generate_stream(self, request):
        return self.current.generate_stream(request)

    def __getattr__(self, name):
        return getattr(self.current, name)


class Host:
    """The README's host loop over one scenario: keeps the session, the wakes scheduled and fired."""

    def __init__(self, case: Scenario):
        self.case = case
        self.provider = Swappable(ScriptedProvider())
        self.agent = case.agent(self.provider)
        self.session = None
        self.scheduled: list = []
        self.fired: list = []
        self.sent_keys: list[str] = []

    def kwargs_for(self, turn) -> dict:
        kwargs = dict(turn.kwargs)     # values are shared on purpose: turn() must not change them either
        self.agent.clock.advance(turn.advance_s)
        wake = kwargs.get("wake")
        if isinstance(wake, tuple):
            which, i = wake
            pool = self.scheduled if which == "scheduled" else self.fired
            if pool:
                entry = pool[i % len(pool)]
                kwargs["wake"] = entry.key
                if which == "scheduled":
                    self.scheduled.remove(entry)
                    self.fired.append(entry)
                    if entry.at > self.agent.clock():
                        self.agent.clock.set(iso(entry.at))
            else:
                kwargs["wake"] = f"forjado:{which}:{i}"
        return kwargs

    def given_session(self, index: int):
        """Alternate between handing over the Session and its blob dict (python-api.md, One turn)."""
        if self.session is None:
            return None
        return self.session if index % 2 else self.session.to_dict()

    def play(self, on_turn=None):
        """Play every turn; ``on_turn(host, index, turn, kwargs, session_in, result_or_error)`` checks each."""
        for index, turn in enumerate(self.case.turns):
            kwargs = self.kwargs_for(turn)
            given = self.given_session(index)
            provider = provider_for(turn)
            self.provider.current = provider
            try:
                result = self.agent.turn(session_id="s1", session=given, **kwargs)
            except Exception as error:  # noqa: BLE001 - the property decides what may escape
                if not documented(error, provider, turn):
                    # Without the chain: a RecursionError's thousand frames take pytest a minute to print.
                    where = "".join(traceback.format_tb(error.__traceback__)[-6:])
                    raise AssertionError(f"turn {index} raised {type(error).__name__}: {str(error)[:300]}\n"
                                         f"{where}") from None
                if on_turn:
                    on_turn(self, index, turn, kwargs, given, error)
                continue
            if on_turn:
                on_turn(self, index, turn, kwargs, given, result)
            self.session = result.session
            self.scheduled.extend(result.schedule)
            self.sent_keys.extend(message.key for message in result.messages)


SETTINGS = fuzz_settings(40)
HOSTILE_SETTINGS = fuzz_settings(15)


# Only documented exceptions escape turn() -------------------------------------------------------

@SETTINGS
@given(scenario())
def test_only_documented_exceptions_escape_turn(case):
    """runtime.md §10.1, model-calls.md §10: only a failed understand call raises out of turn()."""
    Host(case).play()


@HOSTILE_SETTINGS
@given(scenario(hostile=frozenset({"huge"})))
def test_only_documented_exceptions_escape_turn_with_huge_replies(case):
    """Replies of 20-70 KB (runs of "{", unclosed envelopes, long digit runs) are read, never raised."""
    Host(case).play()


@HOSTILE_SETTINGS
@given(scenario(hostile=frozenset({"deep"})))
@example(DEEP_INPUT)
def test_only_documented_exceptions_escape_turn_with_deep_values(case):
    """Event payloads and start inputs 500-6000 and model values 100-300 levels deep are refused or read,
    never raised."""
    Host(case).play()


# The input session is never mutated --------------------------------------------------------------

def _check_unmutated(host, index, turn, kwargs, given, outcome, before):
    if given is not None:
        same(view(given), before, f"turn {index} mutated its session")


def _play_checking_inputs(case):
    host = Host(case)
    befores = {}
    original_given = host.given_session

    def given_session(index):
        given = original_given(index)
        befores[index] = None if given is None else view(given)
        return given

    host.given_session = given_session
    host.play(lambda h, i, t, k, g, o: _check_unmutated(h, i, t, k, g, o, befores[i]))


@SETTINGS
@given(scenario())
def test_the_input_session_is_never_mutated(case):
    """python-api.md, The session: turn() works on a deep copy, on success and on failure alike."""
    _play_checking_inputs(case)


@HOSTILE_SETTINGS
@given(scenario(hostile=frozenset({"deep", "huge"})))
@example(DEEP_INPUT)
def test_the_input_session_is_never_mutated_by_hostile_input(case):
    _play_checking_inputs(case)


# Every result session round-trips ----------------------------------------------------------------

def _check_round_trip(host, index, turn, kwargs, given, outcome):
    if isinstance(outcome, Exception):
        return
    blob = outcome.session.to_dict()
    text = json.dumps(blob, ensure_ascii=False)
    again = Session.from_dict(json.loads(text), session_id="s1").to_dict()
    same(json.dumps(again, ensure_ascii=False), text, f"turn {index}: to_dict/from_dict changed the blob")
    store = SQLiteStore(sqlite3.connect(":memory:"), table="fuzz_sessions")
    store.initialize()
    try:
        row = encode_session_row(outcome.session, 0)
        store.save(outcome.session, expected_version=0)
        stored = store.connection.execute("SELECT blob FROM fuzz_sessions WHERE id = 's1'").fetchone()[0]
        loaded = store.load("s1")
    finally:
        store.close()
    same(stored, row, f"turn {index}: the stored row is not the session's encoding")
    same(encode_session_row(loaded, 0), row, f"turn {index}: the loaded session encodes differently")
    same(json.dumps({**loaded.to_dict(), "version": blob.get("version")}, ensure_ascii=False), text,
         f"turn {index}: the loaded session differs from the saved one")


@SETTINGS
@given(scenario())
def test_every_result_session_round_trips_the_blob_and_sqlite_byte_for_byte(case):
    """persistence.md §2, §3.2: to_dict()/Session.from_dict() and a SQLiteStore keep every byte."""
    Host(case).play(_check_round_trip)


@HOSTILE_SETTINGS
@given(scenario(hostile=frozenset({"deep", "huge"})))
@example(DEEP_INPUT)
def test_hostile_result_sessions_round_trip(case):
    Host(case).play(_check_round_trip)


# Replaying an input on the same session gives identical results ----------------------------------

def _run_again(host, index, outcome, provider, what, run):
    """Run the turn again through ``run()`` with ``provider``; the result, or None when both runs
    raised the same error (anything else fails)."""
    saved = host.provider.current
    host.provider.current = provider
    try:
        again = run()
    except Exception as error:  # noqa: BLE001
        assert isinstance(outcome, Exception), f"turn {index}: {what} raised {error!r}, the first run did not"
        assert (type(error), str(error)) == (type(outcome), str(outcome))
        return None
    finally:
        host.provider.current = saved
    assert not isinstance(outcome, Exception), f"turn {index}: the first run raised {outcome!r}, {what} did not"
    return again


def _check_replay(host, index, turn, kwargs, given, outcome):
    again = _run_again(host, index, outcome, provider_for(turn), "the replay",
                       lambda: host.agent.turn(session_id="s1", session=given, **kwargs))
    if again is not None:
        same(view(again), view(outcome), f"turn {index}: the replay differs")


@SETTINGS
@given(scenario())
def test_replaying_an_input_on_the_same_session_gives_identical_results(case):
    """runtime.md §2.3, §8: the same input on the same session version mints the same keys and results."""
    Host(case).play(_check_replay)


# turn() and turn_stream() agree ------------------------------------------------------------------

def _check_stream(host, index, turn, kwargs, given, outcome):
    chunks = _run_again(host, index, outcome, provider_for(turn, Chunky), "turn_stream",
                        lambda: list(host.agent.turn_stream(session_id="s1", session=given, **kwargs)))
    if chunks is not None:
        assert chunks and chunks[-1].done and all(not chunk.done for chunk in chunks[:-1])
        same(view(chunks[-1].result), view(outcome), f"turn {index}: turn_stream's result differs from turn()'s")


@SETTINGS
@given(scenario())
def test_turn_and_turn_stream_agree(case):
    """runtime.md §16: the stream's last chunk carries the very result turn() returns."""
    Host(case).play(_check_stream)


@HOSTILE_SETTINGS
@given(scenario(hostile=frozenset({"huge"})))
def test_turn_and_turn_stream_agree_on_huge_replies(case):
    Host(case).play(_check_stream)


# No message key is emitted twice -----------------------------------------------------------------

@SETTINGS
@given(scenario(max_turns=6))
@example(RE_ASK)
def test_no_message_key_is_emitted_twice(case):
    """issue 8: every outbound message key is unique among all the messages a session sends."""
    host = Host(case)
    host.play()
    assert len(host.sent_keys) == len(set(host.sent_keys)), f"repeated keys: {host.sent_keys}"


# What a turn returns shares nothing with the agent ------------------------------------------------

def _scribble(value):
    """Change every dict and list inside value in place."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _scribble(item)
        value["rabisco"] = True
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("rabisco")


@SETTINGS
@given(scenario())
@example(SHARED_MEDIA)
def test_changing_a_result_never_changes_the_agent(case):
    """issue 8: nothing a turn returns shares mutable objects with the Agent."""
    host = Host(case)
    flows_before = view(host.agent.flows)

    def scribble(h, index, turn, kwargs, given, outcome):
        if isinstance(outcome, Exception):
            return
        for message in outcome.messages:
            _scribble(message.media)
        for run in [*outcome.session.runs, *outcome.ended]:
            _scribble(run.input)
            _scribble(run.trigger)
        same(view(h.agent.flows), flows_before, f"turn {index}: changing the result changed the agent's flows")

    host.play(scribble)


# Extreme values the issue names ------------------------------------------------------------------

@HOSTILE_SETTINGS
@given(duration=st.sampled_from(["3000000d", "99999999999h", "400000d"]),
       where=st.sampled_from(["wait", "upTo", "after", "silence", "defer"]))
def test_a_validated_duration_never_overflows_a_turn(duration, where):
    """issue 8: a duration validate_flow accepts never raises OverflowError inside turn()."""
    from falai import FlowConfigurationError, falai
    f = falai().fields({})
    steps = {"wait": [{"id": "w", "wait": duration}], "upTo": [{"id": "w", "wait": {"event": "e", "upTo": duration}}],
             "defer": [{"id": "d", "do": "adia"}]}.get(where, [{"id": "s", "say": "Oi"}])
    on = {"after": [{"event": "e", "after": duration}], "silence": [{"silence": duration}]}.get(where, [])
    flow = {"id": "x", "name": "X", "on": on, "steps": steps}
    try:
        agent = f.agent(name="Ana", provider=ScriptedProvider(script={"speak": [{"message": "Oi"}] * 3}),
                        flows=[flow], events={"e": f.event()}, idle={"prompt": "Atenda."},
                        actions={"adia": f.action(parameters={}, run=lambda p, c: {"defer": duration})})
    except FlowConfigurationError:
        return                       # refused at the door, naming the duration: fine
    agent.turn(session_id="s1", start={"flow": "x", "key": "k"})
    agent.turn(session_id="s1", event="e", key="k1")
    agent.turn(session_id="s1", message="oi", id="m1")


@HOSTILE_SETTINGS
@given(path=st.sampled_from(["context.__init__", "context.__class__", "context.__init__.__globals__",
                             "context._privado", "context.metodo"]))
def test_a_template_never_reaches_code_or_private_attributes(path):
    """issue 8: a FlowSpec template reads mappings and public data attributes only, never raises."""
    from falai import falai

    @dataclasses.dataclass
    class Ctx:
        plano: str = "ouro"
        _privado: str = "SEGREDO-1"

        def metodo(self):
            return "SEGREDO-3"

    flow = {"id": "x", "name": "X", "steps": [{"id": "s", "say": "{{" + path + "}}"}]}
    agent = falai().fields({}).agent(name="Ana", provider=ScriptedProvider(), idle="silent", flows=[flow])
    result = agent.turn(session_id="s1", start={"flow": "x", "key": "k"}, context=Ctx())
    text = result.messages[0].text
    assert "SEGREDO" not in text and "function" not in text and "<" not in text and "module" not in text


@HOSTILE_SETTINGS
@given(number=st.one_of(st.integers(min_value=10 ** 309, max_value=10 ** 4000),
                        st.integers(max_value=-10 ** 309, min_value=-10 ** 4000)))
def test_a_number_extracted_by_the_model_never_breaks_a_template(number):
    """model-calls.md §3.5: extract values are not coerced, so a template may meet any JSON number."""
    from falai import falai
    flow = {"id": "x", "name": "X", "on": [{"mention": ["preço"], "extract": {"quanto": {"type": "number"}}}],
            "steps": [{"id": "s", "say": "Valor: {{input.quanto}}"}]}
    reply = '{"mentions": {"x": true}, "extract": {"x": {"quanto": %d}}}' % number
    agent = falai().fields({}).agent(name="Ana", provider=ScriptedProvider(script={"understand": [reply]}),
                                     flows=[flow], idle="silent")
    result = agent.turn(session_id="s1", message="quanto custa?", id="m1")
    assert [message.text[:7] for message in result.messages] == ["Valor: "]
