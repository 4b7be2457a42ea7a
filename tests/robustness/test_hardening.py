"""Hardening (issue 8): nothing a flow author, a customer or a model writes can crash a turn or reach code.

Spec: flows.md §8 (templates), §13 (durations); runtime.md §2.2, §6, §8 (keys), §15 (time);
persistence.md §2.5 (the blob reader). The limits themselves: docs/guide/limits.md.
"""
import json
import sqlite3
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest
import requests

import falai as F
import falai_providers
import falai_stores
from falai import fake_clock
from falai_stores import PostgresStore, RedisStore, SQLiteStore
from conftest import postgres_connection, redis_client, unique_name

from conftest import build


def say_flow(text, **extra):
    return {"id": "f", "name": "F", "steps": [{"id": "s", "say": text, **extra}]}


# Templates read data, never code (flows.md §8.1, docs/guide/limits.md) -----------------------

class Secretive:
    """A host object holding a secret behind a private name, a method and a property."""

    def __init__(self):
        self.name = "Ana"
        self._token = "sk-secret"

    def greet(self):
        return "hi"

    @property
    def token(self):
        return self._token


@dataclass
class Ctx:
    lead: str = "Bia"
    tags: list = field(default_factory=lambda: ["a", "b"])
    host: object = field(default_factory=Secretive)
    _key: str = "sk-private-field"


@pytest.mark.parametrize("path", [
    "context.__init__", "context.__init__.__globals__", "context.__class__.__name__",
    "context.__dict__", "context._key", "context.host._token", "context.host.greet",
    "context.host.token", "context.host", "context.tags.append", "context.__dataclass_fields__",
])
def test_template_never_reaches_private_names_callables_or_unprintable_values(path):
    agent, _, _ = build([say_flow("x {{%s}} y" % path)])
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["x {{%s}} y" % path]


def test_template_reads_dataclass_fields_and_mappings_but_no_instance_attributes(caplog):
    agent, _, _ = build([say_flow("{{context.lead}} {{context.host.name}} {{context.tags}} {{context.tags.1}}")])
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "Bia {{context.host.name}} a, b b"
    [warning] = [rec.getMessage() for rec in caplog.records if "template" in rec.getMessage()]
    assert warning.startswith("[falai] template {{context.host.name}}: context.host is a Secretive, not data")
    assert "dataclasses and named tuples" in warning and "docs/guide/limits.md" in warning


class Point(NamedTuple):
    x: int
    y: int


def test_template_reads_named_tuple_fields_by_name_and_index():
    agent, _, _ = build([say_flow("{{context.p.x}}/{{context.p.1}}/{{context.p._fields}}/{{context.p.z}}")])
    r = agent.turn(session_id="s1", context={"p": Point(3, 4)}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "3/4/{{context.p._fields}}/{{context.p.z}}"


def test_template_cannot_reach_a_token_inside_a_host_client(caplog):
    """A requests.Session (or a provider) kept in the context: its headers are not data to a template."""
    http = requests.Session()
    http.headers["Authorization"] = "Bearer sk-live-secret"

    @dataclass
    class Crm:
        http: object
        name: str = "crm"
    provider = falai_providers.OpenAICompatibleProvider(name="local", base_url="http://127.0.0.1:9", api_key="sk-k",
                                                        model="m")
    paths = ["context.crm.http.headers.Authorization", "context.crm.http.headers", "context.crm.http.auth",
             "context.llm.headers", "context.llm.session.headers.Authorization", "context.llm._api_key",
             "context.llm.retry_config", "context.crm.http", "context.llm"]
    text = " | ".join("{{%s}}" % p for p in paths) + " | {{context.crm.name}}"
    agent, _, _ = build([say_flow(text)])
    r = agent.turn(session_id="s1", context={"crm": Crm(http), "llm": provider}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == " | ".join("{{%s}}" % p for p in paths) + " | crm"
    assert "sk-live-secret" not in repr(r) and "sk-k" not in r.messages[0].text


def test_a_whole_dataclass_prints_without_its_private_fields():
    @dataclass
    class Plain:
        nome: str = "Ana"
        _segredo: str = "sk-1"
    agent, _, _ = build([say_flow("{{context.p}}")])
    r = agent.turn(session_id="s1", context={"p": Plain()}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == '{"nome":"Ana"}'


def test_callable_values_inside_a_mapping_are_unknown():
    agent, _, _ = build([say_flow("{{context.f}} {{context.g.x}}")])
    r = agent.turn(session_id="s1", context={"f": print, "g": {"x": lambda: 1}}, start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "{{context.f}} {{context.g.x}}"


def test_unknown_host_objects_in_prompt_persona_goal_and_knowledge_stay_verbatim():
    flow = {"id": "f", "name": "F",
            "steps": [{"id": "p", "prompt": "P {{context.__init__}} {{context.host}}"}]}
    agent, provider, _ = build([flow], script={"speak": [{"message": "ok"}]},
                               persona="Persona {{context.__class__}}", goal="Goal {{context.host.greet}}",
                               knowledge_base={"k": "{{context._key}}"})
    r = agent.turn(session_id="s1", context=Ctx(), start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["ok"]
    sent = repr([(call.system, call.prompt, call.history) for call in provider.calls])
    assert "sk-private-field" not in sent and "sk-secret" not in sent
    assert "{{context.__init__}}" in sent and "{{context.__class__}}" in sent and "{{context.host.greet}}" in sent


# Exceptions from user code that cannot print (flows.md §9.5, model-calls.md §6.3) --------------

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken")

    def __repr__(self):
        raise RuntimeError("__repr__ is broken")


def raise_unprintable(*args):
    raise Unprintable()


def test_an_action_exception_that_cannot_print_is_an_action_failure_named_by_its_class():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=raise_unprintable)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    failed = [o for o in r.outcomes if o.code == "action-failed"]
    assert [o.detail for o in failed] == ["Unprintable"]


def test_a_tool_exception_that_cannot_print_becomes_the_tool_error_text():
    tool = F.Tool(id="t", description="T", parameters={"type": "object", "properties": {}}, handler=raise_unprintable)
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "P", "tools": ["t"]}]}
    script = {"speak": [{"message": "", "toolCalls": [{"toolName": "t", "arguments": {}}]},
                        {"message": "done"}]}
    agent, provider, _ = build([flow], script=script, tools=[tool])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["done"]
    assert '{"error":"Unprintable"}' in repr(provider.calls[1].history)


# Durations and instants (flows.md §13, runtime.md §15, docs/guide/limits.md) -----------------

@pytest.mark.parametrize("trigger, step", [
    ({"silence": "3000000d"}, {"id": "a", "say": "Oi"}),
    ({"event": "ev", "after": "3000000d"}, {"id": "a", "say": "Oi"}),
    ({"event": "ev", "repeat": {"cooldown": "3651d"}}, {"id": "a", "say": "Oi"}),
    ({"event": "ev"}, {"id": "a", "wait": "87601h"}),
    ({"event": "ev"}, {"id": "a", "wait": {"event": "ev", "upTo": "99999999999999999999999999d"}}),
])
def test_validate_flow_rejects_a_duration_beyond_the_maximum_and_names_it(trigger, step):
    spec = {"id": "fx", "name": "FX", "on": [trigger], "steps": [step]}
    with pytest.raises(F.FlowConfigurationError) as caught:
        F.validate_flow(spec, {"events": {"ev": F.EventDef()}})
    assert 'longer than the maximum "3650d"' in str(caught.value)


def test_the_maximum_duration_itself_is_valid_and_runs():
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "3650d"}, {"id": "s", "say": "Oi"}]}
    agent, _, _ = build([flow], clock=fake_clock("8999-12-31T23:59:59.999Z"))
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [w.at.year for w in r.schedule] == [9009]


def test_an_action_deferring_beyond_the_maximum_fails_with_a_reason():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=lambda p, c: {"defer": "3000000d"})})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    failed = [o for o in r.outcomes if o.code == "action-failed"]
    assert len(failed) == 1 and 'longer than the maximum duration "3650d"' in failed[0].detail
    assert r.schedule == []


@pytest.mark.parametrize("at", ["0999-12-31T23:59:59.999Z", "9000-01-01T00:00:00.000Z",
                                "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00+01:00",
                                "9999-12-31T23:30:00-01:00"])
def test_turn_rejects_an_at_outside_the_supported_range(at):
    agent, _, _ = build([{"id": "f", "name": "F", "steps": [{"id": "s", "say": "Oi"}]}])
    with pytest.raises(TypeError) as caught:
        agent.turn(session_id="s1", message="oi", id="m1", at=at)
    assert "outside the supported range 1000-01-01T00:00:00.000Z to 8999-12-31T23:59:59.999Z" in str(caught.value)


@pytest.mark.parametrize("now", ["0500-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"])
def test_a_clock_outside_the_supported_range_is_a_value_error_not_an_overflow(now):
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "3650d"}]}
    agent, _, _ = build([flow], clock=fake_clock(now))
    with pytest.raises(ValueError, match="the agent's clock reading is .* outside the supported range"):
        agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})


def test_business_hours_returning_an_instant_out_of_range_is_named():
    from datetime import datetime, timezone
    flow = {"id": "f", "name": "F", "steps": [{"id": "w", "wait": "1d", "businessHours": True}]}
    agent, _, _ = build([flow], business_hours=lambda at, ctx: datetime(9999, 12, 31, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="the time business_hours returned"):
        agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})


def test_a_provider_reset_beyond_the_supported_range_keeps_the_retry_ladder():
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "P"}]}
    failure = F.ProviderError("quota", kind="quota", reset_at_ms=10 ** 18)
    agent, _, _ = build([flow], script={"speak": [failure]})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [w.at.isoformat() for w in r.schedule] == ["2026-09-20T10:01:00+00:00"]


def test_a_silence_armed_from_an_old_blob_time_near_year_9999_does_not_overflow():
    flow = {"id": "f", "name": "F", "on": [{"silence": "3650d"}], "steps": [{"id": "s", "say": "Oi"}]}
    agent, _, _ = build([flow])
    blob = {"id": "s1", "v": 4, "version": 3, "data": {}, "runs": [], "claims": {}, "inputs": [], "metadata": {},
            "lastAssistantAt": "9999-12-31T00:00:00.000Z"}
    wakes = agent.pending_wakes(session=blob)
    assert [w.at.year for w in wakes] == [9999]


# Depth: the nesting limit of what enters a session (docs/guide/limits.md) --------------------

def nested(levels):
    value = "fundo"
    for _ in range(levels):
        value = [value]
    return value


def event_agent(**options):
    flow = {"id": "f", "name": "F", "on": [{"event": "ev"}],
            "steps": [{"id": "w", "wait": {"event": "fim"}}]}
    return build([flow], events={"ev": F.EventDef(), "fim": F.EventDef()}, **options)[0]


def test_a_payload_at_the_limit_is_kept_and_the_session_keeps_turning():
    agent = event_agent()
    store = F.MemoryStore()
    r = agent.turn(session_id="s1", event="ev", key="e1", payload=nested(F.MAX_NESTING))
    saved = store.save(r.session, 0)
    loaded = store.load("s1")
    assert loaded == saved and loaded.runs[0].input == nested(F.MAX_NESTING)
    again = agent.turn(session_id="s1", session=loaded, event="fim", key="e2")
    assert [e.reason for e in again.ended] == ["end"]


@pytest.mark.parametrize("levels", [F.MAX_NESTING + 1, 600, 5000])
def test_an_event_payload_deeper_than_the_limit_is_refused_at_the_door(levels):
    agent = event_agent()
    with pytest.raises(ValueError, match=r"turn\(payload=...\) nests lists and dicts deeper than 64 levels"):
        agent.turn(session_id="s1", event="ev", key="e1", payload=nested(levels))


def test_a_start_input_deeper_than_the_limit_is_refused_at_the_door():
    agent = event_agent()
    with pytest.raises(ValueError, match=r'turn\(start=\{"input": ...\}\) nests'):
        agent.turn(session_id="s1", start={"flow": "f", "key": "k1", "input": {"a": nested(700)}})


def test_an_action_writing_a_too_deep_value_fails_and_writes_nothing():
    def write(params, ctx):
        ctx.set({"raso": 1, "fundo": nested(F.MAX_NESTING + 1)})
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=write)})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert r.session.data == {}
    failed = [o for o in r.outcomes if o.code == "action-failed"]
    assert len(failed) == 1 and 'the value written to "fundo" nests' in failed[0].detail


def test_a_context_value_an_action_writes_is_refused_when_too_deep():
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={},
                                                          run=lambda p, ctx: ctx.set({"x": ctx.context["deep"]}))})
    r = agent.turn(session_id="s1", context={"deep": nested(900)}, start={"flow": "f", "key": "k1"})
    assert r.session.data == {} and [o.code for o in r.outcomes if o.status == "failed"] == ["action-failed"]


def test_tool_data_deeper_than_the_limit_is_ignored():
    tool = F.Tool(id="t", description="T", parameters={"type": "object", "properties": {}},
                  handler=lambda args, ctx: F.ToolResult(value="ok", data={"fundo": nested(800), "raso": 1}))
    flow = {"id": "f", "name": "F", "steps": [{"id": "p", "prompt": "P", "tools": ["t"]}]}
    script = {"speak": [{"message": "", "toolCalls": [{"toolName": "t", "arguments": {}}]}, {"message": "done"}]}
    agent, _, _ = build([flow], script=script, tools=[tool])
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    assert [m.text for m in r.messages] == ["done"] and r.session.data == {}


def test_a_flow_target_input_deeper_than_the_limit_is_rejected_at_build():
    flows = [{"id": "a", "name": "A", "steps": [{"id": "s", "say": "Oi", "then": {"flow": "b", "input": nested(65)}}]},
             {"id": "b", "name": "B", "steps": [{"id": "t", "say": "Tchau"}]}]
    with pytest.raises(F.FlowConfigurationError, match="then.input nests lists and dicts deeper than 64 levels"):
        build(flows)


def deep_blob(levels):
    return {"id": "s1", "v": 4, "version": 1, "data": {"x": nested(levels)}, "runs": [], "claims": {},
            "inputs": [], "metadata": {}}


@pytest.mark.parametrize("levels", [F.BLOB_NESTING, 990, 3000])
def test_a_blob_deeper_than_the_limit_is_an_invalid_session(levels):
    with pytest.raises(F.InvalidSessionError, match="nests deeper than 68 levels"):
        F.Session.from_dict(deep_blob(levels))


def test_a_blob_at_the_limit_loads():
    assert F.Session.from_dict(deep_blob(F.MAX_NESTING)).data["x"] == nested(F.MAX_NESTING)


def deep_row(levels):
    return json.dumps(deep_blob(0)).replace('"fundo"', "[" * levels + '"fundo"' + "]" * levels)


@pytest.mark.parametrize("levels", [200, 100_000])
def test_a_stored_row_deeper_than_the_limit_is_an_invalid_session_in_sqlite(tmp_path, levels):
    text = deep_row(levels)
    connection = sqlite3.connect(tmp_path / "s.db")
    store = SQLiteStore(connection, table="hardening_deep")
    store.initialize()
    connection.execute("INSERT INTO hardening_deep (id, version, blob, created_at, updated_at) "
                       "VALUES ('s1', 1, ?, '', '')", (text,))
    connection.commit()
    with pytest.raises(F.InvalidSessionError):
        store.load("s1")
    with pytest.raises(F.InvalidSessionError):
        falai_stores.decode_session_row(text, "s1")


@pytest.mark.parametrize("levels", [200, 2000])
def test_a_stored_row_deeper_than_the_limit_is_an_invalid_session_in_postgres(levels):
    """psycopg parses JSONB itself: at 2000 levels its own json.loads hits the recursion limit."""
    connection = postgres_connection()
    table = unique_name()
    try:
        store = PostgresStore(connection, table=table)
        store.initialize()
        connection.execute(f"INSERT INTO {table} (id, version, blob) VALUES ('s1', 1, %s::jsonb)", (deep_row(levels),))
        connection.commit()
        with pytest.raises(F.InvalidSessionError, match="nests deeper than 68 levels"):
            store.load("s1")
    finally:
        connection.rollback()
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.commit()
        connection.close()


@pytest.mark.parametrize("levels", [200, 100_000])
def test_a_stored_row_deeper_than_the_limit_is_an_invalid_session_in_redis(levels):
    client = redis_client()
    prefix = unique_name() + ":"
    store = RedisStore(client, key_prefix=prefix)
    try:
        client.hset(store.key("s1"), mapping={"version": "1", "blob": deep_row(levels)})
        with pytest.raises(F.InvalidSessionError, match="nests deeper than 68 levels"):
            store.load("s1")
    finally:
        client.delete(store.key("s1"))


def test_a_session_object_deeper_than_the_limit_is_refused_before_the_turn_copies_it():
    agent = event_agent()
    session = F.Session(id="s1", version=1, data={"x": nested(5000)})
    with pytest.raises(F.InvalidSessionError, match="nests deeper than 68 levels"):
        agent.turn(session_id="s1", session=session, event="ev", key="e1")
    with pytest.raises(F.InvalidSessionError):
        agent.pending_wakes(session=session)


# Shared objects: nothing a turn returns is the Agent's (runtime.md §12) ----------------------

def test_a_flow_target_input_and_say_media_are_copies():
    flows = [{"id": "a", "name": "A", "steps": [
                 {"id": "s", "say": "Oi", "media": {"url": "https://x/y.png", "tags": ["a"]},
                  "then": {"flow": "b", "input": {"itens": [1, 2]}}}]},
             {"id": "b", "name": "B", "steps": [{"id": "w", "wait": "1d"}]}]
    agent, _, _ = build(flows)
    first = agent.turn(session_id="s1", start={"flow": "a", "key": "k1"})
    first.messages[0].media["tags"].append("changed")
    first.session.runs[0].input["itens"].append(3)
    first.session.runs[0].trigger["payload"]["itens"].append(4)
    second = agent.turn(session_id="s2", start={"flow": "a", "key": "k1"})
    assert second.messages[0].media == {"url": "https://x/y.png", "tags": ["a"]}
    assert second.session.runs[0].input == {"itens": [1, 2]}


def test_values_an_action_writes_are_copies():
    defaults = {"tags": ["novo"]}
    flow = {"id": "f", "name": "F", "steps": [{"id": "a", "do": "acao"}]}
    agent, _, _ = build([flow], actions={"acao": F.Action(parameters={}, run=lambda p, ctx: ctx.set(defaults))})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    r.session.data["tags"].append("changed")
    assert defaults == {"tags": ["novo"]}


# Claim keys and wake keys whatever the ids contain (runtime.md §6, §8; docs/guide/limits.md) --

def test_a_flow_id_starting_like_a_silence_wake_key_is_rejected():
    with pytest.raises(F.FlowConfigurationError) as caught:
        F.validate_flow({"id": "silence:x", "name": "R", "steps": [{"id": "s", "say": "Oi"}]})
    assert 'flow "silence:x": has an id starting with "silence:"' in str(caught.value)


def test_the_flow_id_of_the_issue_and_an_anchor_with_colons_get_distinct_claims():
    """Flow retomar anchored to lead:456 and flow retomar:lead in session 456 both wrote retomar:lead:456:."""
    anchored = {"id": "retomar", "name": "R", "anchor": "lead", "on": [{"event": "ev", "repeat": "once"}],
                "steps": [{"id": "s", "say": "Oi"}]}
    plain = {"id": "retomar:lead", "name": "R2", "on": [{"event": "ev", "repeat": "once"}],
             "steps": [{"id": "s", "say": "Olá"}]}
    agent, _, _ = build([anchored, plain], events={"ev": F.EventDef()})
    r = agent.turn(session_id="456", anchors=lead("lead:456"), event="ev", key="e1")
    assert [(s.flow_id, s.dedupe_key) for s in r.started] == [("retomar", "retomar:lead:456:"),
                                                              ("retomar:lead", "retomar%3Alead:456:")]
    assert r.skipped == [] and [m.text for m in r.messages] == ["Oi", "Olá"]


def lead(key):
    return {"lead": {"key": key}}


def anchored_agent():
    flow = {"id": "f", "name": "F", "anchor": "lead",
            "on": [{"event": "sempre", "repeat": "always"}, {"event": "umavez", "repeat": "once"}],
            "steps": [{"id": "s", "say": "Oi"}]}
    return build([flow], events={"sempre": F.EventDef(), "umavez": F.EventDef()})[0]




def test_distinct_flow_and_anchor_pairs_never_share_a_claim_key():
    agent = anchored_agent()
    first = agent.turn(session_id="s1", anchors=lead("x"), event="sempre", key="y:")
    second = agent.turn(session_id="s1", session=first.session, anchors=lead("x:y"), event="umavez", key="e2")
    assert [s.code for s in second.skipped] == [] and [r.anchor for r in second.started] == ["x:y"]
    assert set(second.session.claims) == {"f:x:y%3A", "f:x:y:"}
    assert second.started[0].dedupe_key == "f:x:y:"


def test_a_nonce_that_reads_as_escaped_is_escaped_too():
    agent = anchored_agent()
    first = agent.turn(session_id="s1", anchors=lead("x"), event="sempre", key="a:b")
    second = agent.turn(session_id="s1", session=first.session, anchors=lead("x"), event="sempre", key="a%3Ab")
    assert [r.dedupe_key for r in first.started + second.started] == ["f:x:a%3Ab", "f:x:a%253Ab"]
    assert second.skipped == []


def test_keys_of_ids_without_a_colon_stay_as_they_are():
    agent = anchored_agent()
    r = agent.turn(session_id="s1", anchors=lead("lead-456"), event="sempre", key="ev7")
    assert list(r.session.claims) == ["f:lead-456:ev7"] and r.started[0].run_id == "f#ev7"


def test_pruning_counts_only_the_always_claims_of_its_own_anchor():
    agent = anchored_agent()
    session = None
    for i in range(50):
        session = agent.turn(session_id="s1", session=session, anchors=lead("x:y"), event="sempre",
                             key=f"k{i}").session
    session = agent.turn(session_id="s1", session=session, anchors=lead("x"), event="sempre", key="z").session
    assert len(session.claims) == 51
    replay = agent.turn(session_id="s1", session=session, anchors=lead("x:y"), event="sempre", key="k0")
    assert [s.code for s in replay.skipped] == ["already-claimed"]


def test_a_live_pair_is_flow_id_and_raw_anchor():
    """runtime.md §6.4: "<flowId>:<anchor>"; a flow id has no ":", so the first ":" ends it."""
    agent = anchored_agent()
    held = agent.turn(session_id="s1", anchors=lead("x:y"), claims={"active": ["f:x:y"]}, event="umavez", key="e1")
    free = agent.turn(session_id="s1", anchors=lead("x"), claims={"active": ["f:x:y"]}, event="umavez", key="e1")
    assert [s.code for s in held.skipped] == ["already-running"] and [r.anchor for r in free.started] == ["x"]


def test_a_silence_wake_of_a_session_id_with_colons_parses():
    flow = {"id": "retomar", "name": "R", "on": [{"silence": "1h"}], "steps": [{"id": "s", "say": "Oi?"}]}
    agent, _, clock = build([flow, {"id": "g", "name": "G", "steps": [{"id": "o", "say": "Olá"}]}])
    first = agent.turn(session_id="whats:55:1", start={"flow": "g", "key": "k1"})   # no anchor: the session id
    [wake] = [w for w in first.schedule if w.key.startswith("silence:")]
    assert wake.key == "silence:retomar:whats:55:1:1789898400000"
    clock.advance("1h")
    r = agent.turn(session_id="whats:55:1", session=first.session, wake=wake.key)
    assert [m.text for m in r.messages] == ["Oi?"]


# Message keys: unique in a session, the same on a replay (runtime.md §8; docs/guide/limits.md) --

NOME = {"nome": {"type": "string", "ask": "Pergunte o nome."}}


def boas_vindas():
    flow = {"id": "boas-vindas", "name": "Boas-vindas", "on": [{"message": []}],
            "steps": [{"id": "nome", "collect": ["nome"], "maxAsks": 4}]}
    nothing = {"fields": {}}
    script = {"understand": [nothing] * 4, "speak": [{"message": f"Qual é o seu nome? ({i})"} for i in range(1, 5)]}
    return build([flow], fields=NOME, script=script)[0]


def test_a_re_ask_under_the_same_visit_gets_its_own_key_and_a_key_deduping_host_sends_it():
    agent = boas_vindas()
    store, sent, session = F.MemoryStore(), {}, None
    for message_id in ("m1", "m2", "m3"):
        loaded = store.load("s1")
        result = agent.turn(session_id="s1", session=loaded, message="oi", id=message_id)
        if result.changed:
            store.save(result.session, loaded.version if loaded else 0)
            for message in result.messages:          # the README's host loop: dedupe on key
                sent.setdefault(message.key, message.text)
        session = result.session
    assert list(sent) == ["boas-vindas#m1:nome:1", "boas-vindas#m1:nome:1:re:m2", "boas-vindas#m1:nome:1:re:m3"]
    assert list(sent.values()) == ["Qual é o seu nome? (1)", "Qual é o seu nome? (2)", "Qual é o seu nome? (3)"]
    assert session.runs[0].visits == {"nome": 1}


def test_a_replayed_re_ask_gets_the_same_key():
    agent = boas_vindas()
    first = agent.turn(session_id="s1", message="oi", id="m1")
    again = [agent.turn(session_id="s1", session=first.session, message="oi", id="m2") for _ in range(2)]
    assert [r.messages[0].key for r in again] == ["boas-vindas#m1:nome:1:re:m2"] * 2


def test_the_first_message_after_a_fixed_question_is_a_re_ask():
    flow = {"id": "f", "name": "F", "steps": [{"id": "nome", "collect": ["nome"], "question": "Seu nome?"}]}
    agent, _, _ = build([flow], fields=NOME, script={"understand": [{"fields": {}}], "speak": [{"message": "E aí?"}]})
    first = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    second = agent.turn(session_id="s1", session=first.session, message="hm", id="m1")
    assert [m.key for m in first.messages + second.messages] == ["f#k1:nome:1", "f#k1:nome:1:re:m1"]


def test_a_host_object_that_raises_when_read_or_printed_is_unknown():
    class Angry(dict):
        def __getitem__(self, key):
            raise RuntimeError("no")

    class Loop:
        def __init__(self):
            self.me = [self]
    agent, _, _ = build([say_flow("{{context.a.x}} {{context.loop.me}} {{context.cycle}}")])
    cycle = []
    cycle.append(cycle)
    r = agent.turn(session_id="s1", context={"a": Angry(x=1), "loop": Loop(), "cycle": cycle},
                   start={"flow": "f", "key": "k1"})
    assert r.messages[0].text == "{{context.a.x}} {{context.loop.me}} {{context.cycle}}"


@pytest.mark.parametrize("make_store", [F.MemoryStore, lambda: SQLiteStore(sqlite3.connect(":memory:"))])
def test_a_store_refuses_to_save_a_session_it_could_not_load_again(make_store):
    store = make_store()
    if hasattr(store, "initialize"):
        store.initialize()
    with pytest.raises(ValueError, match='session "s1" nests deeper than 68 levels'):
        store.save(F.Session(id="s1", data={"x": nested(100)}), 0)
    assert store.load("s1") is None


def test_key_part_keeps_plain_ids_and_escapes_the_rest_reversibly():
    ids = ["s1", "lead-456", "a%b", "a%2", ":", "a:b", "a%3Ab", "a%253Ab", "%25", "%3A:%", "100%"]
    parts = [F.key_part(text) for text in ids]
    assert parts[:5] == ["s1", "lead-456", "a%b", "a%2", "%3A"]
    assert all(":" not in part for part in parts) and len(set(parts)) == len(ids)
    assert [F.unescape_key_part(part) for part in parts] == ids


@pytest.mark.parametrize("levels", [200, 5000])
def test_a_flow_nested_deeper_than_the_flow_limit_is_a_configuration_error(levels):
    spec = {"id": "f", "name": "F", "steps": [{"id": "a", "say": "x", "media": {"u": nested(levels)}}]}
    with pytest.raises(F.FlowConfigurationError, match="nests lists and dicts deeper than 96 levels"):
        F.validate_flow(spec)
    with pytest.raises(F.FlowConfigurationError, match="deeper than 96 levels"):
        build([spec])
    with pytest.raises(F.FlowConfigurationError, match="deeper than 96 levels"):
        F.from_spec({"id": "f", "name": "F", "steps": [{"id": "a", "say": "x", "media": {"u": nested(levels)}}]})


# Reply keys of id-less messages (docs/guide/limits.md, "Message keys") --------------------------

AT = "2026-09-20T10:00:00.000Z"


def idle_agent(replies=5):
    return build([], script={"speak": [{"message": f"r{i}"} for i in range(replies)]})


def test_id_less_messages_in_one_instant_get_distinct_reply_keys():
    """The first keeps the original's key; each later one at that instant is numbered."""
    agent, _, _ = idle_agent()
    keys, session = [], None
    for text in ("oi", "tudo bem?", "alô"):
        r = agent.turn(session_id="s1", session=session, message=text, at=AT)
        keys.append(r.messages[0].key)
        session = r.session
    assert keys == [f"idle:{AT}", f"idle:{AT}#2", f"idle:{AT}#3"]
    assert session.inputs == [f"{AT}#2", f"{AT}#3"]


def test_id_less_messages_on_a_stopped_clock_get_distinct_reply_keys():
    agent, _, _ = idle_agent()
    r1 = agent.turn(session_id="s1", message="oi")
    r2 = agent.turn(session_id="s1", session=r1.session, message="oi de novo")
    assert r1.messages[0].key == f"idle:{AT}"                   # the fake clock stands at T0 = AT
    assert r2.messages[0].key == r1.messages[0].key + "#2"


def test_an_id_less_message_replayed_on_the_same_session_gets_the_same_key():
    agent, _, _ = idle_agent()
    first = agent.turn(session_id="s1", message="oi", at=AT)
    again = [agent.turn(session_id="s1", session=first.session, message="de novo", at=AT) for _ in range(2)]
    assert again[0].messages[0].key == again[1].messages[0].key == f"idle:{AT}#2"


def test_a_later_id_less_message_keeps_the_plain_instant_key():
    agent, _, _ = idle_agent()
    r1 = agent.turn(session_id="s1", message="oi", at=AT)
    r2 = agent.turn(session_id="s1", session=r1.session, message="e aí", at="2026-09-20T10:00:01.000Z")
    assert r2.messages[0].key == "idle:2026-09-20T10:00:01.000Z" and r2.session.inputs == []


def test_an_id_less_message_with_an_earlier_at_never_reuses_a_key():
    agent, _, _ = idle_agent()
    r1 = agent.turn(session_id="s1", message="a", at=AT)
    r2 = agent.turn(session_id="s1", session=r1.session, message="b", at="2026-09-20T10:05:00.000Z")
    r3 = agent.turn(session_id="s1", session=r2.session, message="c", at=AT)
    keys = [r.messages[0].key for r in (r1, r2, r3)]
    assert len(set(keys)) == 3 and keys[2] == f"idle:{AT}#2"


def test_id_less_re_asks_in_one_instant_get_distinct_keys():
    flow = {"id": "f", "name": "F", "steps": [{"id": "nome", "collect": ["nome"], "question": "Seu nome?"}]}
    agent, _, _ = build([flow], fields={"nome": {"type": "string"}},
                        script={"understand": [{"fields": {}}] * 4,
                                "speak": [{"message": "Seu nome, por favor?"}] * 4})
    r = agent.turn(session_id="s1", start={"flow": "f", "key": "k1"})
    keys = [m.key for m in r.messages]
    session = r.session
    for text in ("hã?", "como?"):
        r = agent.turn(session_id="s1", session=session, message=text, at=AT)
        keys += [m.key for m in r.messages]
        session = r.session
    assert len(keys) == len(set(keys)) == 3, keys
