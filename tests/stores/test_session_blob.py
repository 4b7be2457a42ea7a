"""The v4 session blob: Session.to_dict / Session.from_dict (persistence.md Part 2)."""
import copy
import json
import pathlib
import re

import pytest

from falai import EndedRun, FalaiError, InvalidSessionError, Run, Session

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TAIL = ". Repair or delete the row; it is never replaced by a fresh conversation."


def v4_fixture() -> dict:
    return json.loads((FIXTURES / "v4.json").read_text(encoding="utf-8"))


def fresh_blob(session_id="s1") -> dict:
    return {"id": session_id, "v": 4, "version": 0, "data": {}, "runs": [], "claims": {}, "inputs": [],
            "metadata": {}}


def a_run(**changes) -> dict:
    run = {"id": "f#m1", "flowId": "f", "anchor": "s1", "dedupeKey": "f:s1:", "stepId": "p1",
           "status": "asking", "trigger": {"kind": "message", "key": "m1"}, "hop": 0,
           "startedAt": "2026-09-20T10:00:00.000Z", "asked": {}, "visits": {"p1": 1}, "outcomes": []}
    run.update(changes)
    return run


def full_blob() -> dict:
    """Every optional key of §2.1 and §2.2 set."""
    return {
        "id": "s1", "v": 4, "version": 7, "data": {"nome": "Ana", "itens": [1, "a", None]},
        "runs": [
            a_run(),
            a_run(id="w#1", flowId="w", dedupeKey="w:s1:", stepId="w1", status="waiting", hop=2,
                  trigger={"kind": "event", "key": "e1", "payload": {"x": [1, "a", None]}},
                  input={"x": [1, "a", None]},
                  waiting={"kind": "event", "key": "w#1:w1:1", "until": "2026-10-20T10:00:00.000Z",
                           "setAt": "2026-09-20T10:00:00.000Z", "event": "pago"},
                  outcomes=[{"runId": "w#1", "flowId": "w", "stepId": "w1", "kind": "wait", "status": "waiting",
                             "until": "2026-10-20T10:00:00.000Z", "at": "2026-09-20T10:00:00.000Z"}]),
            a_run(id="g#2", flowId="g", dedupeKey="g:s1:", status="suspended",
                  suspendedAt="2026-09-20T10:01:00.000Z", staying=True),
        ],
        "claims": {"f:s1:": {"at": "2026-09-20T10:00:00.000Z"}, "sempre:full:wamid.HBgN.abc": {"at": "2026-09-20T10:00:00.000Z"}},
        "inputs": ["m1"], "metadata": {"a": {"b": [1, {"c": None}]}},
        "lastUserAt": "2026-09-20T10:00:00.000Z", "lastAssistantAt": "2026-09-20T10:00:02.000Z",
        "history": [{"role": "user", "content": "oi"}],
    }


def why_of(blob, session_id="s1") -> str:
    with pytest.raises(InvalidSessionError) as caught:
        Session.from_dict(blob, session_id)
    message = str(caught.value)
    prefix = f'[InvalidSessionError] stored session "{caught.value.session_id}" is unreadable: '
    assert message.startswith(prefix) and message.endswith(TAIL), message
    return message[len(prefix):-len(TAIL)]


# §2.1 the shape ---------------------------------------------------------------------------------

def test_fresh_session_is_exactly_the_eight_keys():
    """persistence.md §2.1: a fresh session is exactly id, v, version 0, and empty data/runs/claims/inputs/metadata."""
    assert Session(id="s1").to_dict() == fresh_blob()
    assert list(Session(id="s1").to_dict()) == ["id", "v", "version", "data", "runs", "claims", "inputs", "metadata"]


def test_to_dict_leaves_out_absent_optional_keys():
    """persistence.md §2.3 rule 2: lastUserAt, lastAssistantAt, history only when not None; no nulls written."""
    blob = Session(id="s1", data={"x": 1}).to_dict()
    assert not {"lastUserAt", "lastAssistantAt", "history"} & set(blob)
    assert None not in blob.values()


def test_to_dict_writes_optional_keys_when_set_in_order():
    """persistence.md §2.3 rule 2: the optional keys follow metadata, in this order."""
    session = Session(id="s1", last_user_at="2026-09-20T10:00:00.000Z",
                      last_assistant_at="2026-09-20T10:00:01.000Z", history=[])
    assert list(session.to_dict())[-3:] == ["lastUserAt", "lastAssistantAt", "history"]
    assert session.to_dict()["history"] == []       # an empty history is still "set"


def test_to_dict_always_writes_v_4():
    """persistence.md §2.3 rule 2: `v` is always 4."""
    assert Session(id="s1", v=3).to_dict()["v"] == 4


def test_run_to_dict_writes_the_required_keys_and_null_step_id():
    """persistence.md §2.2, §2.3 rule 2: a run without optional values has exactly the twelve keys; stepId may be null."""
    run = Run(id="f#k", flow_id="f", anchor="s1", dedupe_key="f:s1:", step_id=None, status="running",
              trigger={"kind": "start", "key": "k"}, hop=0, started_at="2026-09-20T10:00:00.000Z")
    assert run.to_dict() == {"id": "f#k", "flowId": "f", "anchor": "s1", "dedupeKey": "f:s1:", "stepId": None,
                             "status": "running", "trigger": {"kind": "start", "key": "k"}, "hop": 0,
                             "startedAt": "2026-09-20T10:00:00.000Z", "asked": {}, "visits": {}, "outcomes": []}


def test_run_to_dict_writes_optional_keys_only_when_set_and_staying_only_as_true():
    """persistence.md §2.3 rule 2: input, waiting, suspendedAt when not None; `staying: true` only when True."""
    base = dict(id="f#k", flow_id="f", anchor="s1", dedupe_key="f:s1:", step_id="p", status="suspended",
                trigger={"kind": "start", "key": "k"}, hop=0, started_at="2026-09-20T10:00:00.000Z")
    assert not {"input", "waiting", "suspendedAt", "staying"} & set(Run(**base).to_dict())
    blob = Run(**base, input={"a": 1}, waiting={"kind": "timer", "setAt": "x"}, suspended_at="t",
               staying=True).to_dict()
    assert (blob["input"], blob["waiting"], blob["suspendedAt"], blob["staying"]) == (
        {"a": 1}, {"kind": "timer", "setAt": "x"}, "t", True)
    assert Run(**base, input=0).to_dict()["input"] == 0          # falsy but not None is kept
    assert Run(**base, input=False).to_dict()["input"] is False


def test_ended_run_writes_no_reason():
    """runtime.md §4.8: EndedRun's `reason` is not a blob key."""
    run = EndedRun(id="f#k", flow_id="f", anchor="s1", dedupe_key="f:s1:", step_id=None, status="running",
                   trigger={"kind": "start", "key": "k"}, hop=0, started_at="t", reason="done")
    assert "reason" not in run.to_dict()


def test_to_dict_shares_nested_values_and_does_not_deep_copy():
    """persistence.md §2.3 rule 2 (inferred): to_dict does not deep-copy nested values."""
    session = Session(id="s1", data={"a": 1})
    assert session.to_dict()["data"] is session.data


# §2.3 rule 4: round trip -------------------------------------------------------------------------

def test_v4_fixture_round_trips_key_for_key():
    """persistence.md §2.3 rule 4, §4.6: Session.from_dict(b, b["id"]).to_dict() == b for the v4 fixture."""
    blob = v4_fixture()
    assert Session.from_dict(blob, blob["id"]).to_dict() == blob


def test_v4_fixture_round_trips_through_json_text():
    """persistence.md §2.1: the blob survives json.dumps / json.loads unchanged."""
    blob = v4_fixture()
    again = json.loads(json.dumps(Session.from_dict(blob, "conv_v4").to_dict()))
    assert again == blob
    assert Session.from_dict(again, "conv_v4").to_dict() == blob


def test_v4_fixture_reads_into_snake_case_attributes():
    """persistence.md §2.3 rule 1: attributes are snake_case; nested values stay the camelCase dicts."""
    session = Session.from_dict(v4_fixture(), "conv_v4")
    assert (session.version, session.last_user_at, session.last_assistant_at) == (
        3, "2026-09-20T10:02:00.000Z", "2026-09-20T10:02:05.000Z")
    waiting = session.runs[1]
    assert (waiting.flow_id, waiting.anchor, waiting.dedupe_key, waiting.status) == (
        "retomar", "lead:456", "retomar:lead:456:", "waiting")
    assert waiting.waiting["setAt"] == "2026-09-20T11:00:00.000Z"
    assert session.runs[0].outcomes[0]["llmCalls"] == 1
    assert isinstance(session.runs[0], Run) and session.v == 4


def test_full_blob_round_trips():
    """persistence.md §2.3 rule 4: every optional key of §2.1/§2.2 comes back as stored."""
    blob = full_blob()
    assert Session.from_dict(copy.deepcopy(blob), "s1").to_dict() == blob


def test_from_dict_without_session_id_expects_the_blobs_own_id():
    """persistence.md §2.3 rule 3: without session_id the expected id is the blob's own `id`."""
    assert Session.from_dict(v4_fixture()).id == "conv_v4"


# §2.5 what the reader keeps and drops -------------------------------------------------------------

def test_reader_drops_store_bookkeeping_and_unknown_top_level_keys():
    """persistence.md §2.1, §2.5: createdAt, updatedAt, created_at and any other key are dropped on read."""
    blob = {**fresh_blob(), "createdAt": "x", "updatedAt": "y", "created_at": "z", "currentFlow": {"id": "f"}}
    assert Session.from_dict(blob, "s1").to_dict() == fresh_blob()


def test_reader_drops_unknown_run_keys():
    """persistence.md §2.5: for a run, only the keys of §2.2 are kept."""
    blob = {**fresh_blob(), "runs": [a_run(extra=1, reason="done")]}
    assert Session.from_dict(blob, "s1").to_dict()["runs"] == [a_run()]


@pytest.mark.parametrize("value", [None, 5, {"at": "x"}, True])
def test_reader_silently_drops_a_suspended_at_that_is_not_text(value):
    """persistence.md §2.5: `suspendedAt` is kept only when it is a string."""
    run = Session.from_dict({**fresh_blob(), "runs": [a_run(suspendedAt=value)]}, "s1").runs[0]
    assert run.suspended_at is None and "suspendedAt" not in run.to_dict()


@pytest.mark.parametrize("value", [False, None, 1, "true", [True]])
def test_reader_silently_drops_a_staying_other_than_true(value):
    """persistence.md §2.5: `staying` is kept only when it is exactly true."""
    run = Session.from_dict({**fresh_blob(), "runs": [a_run(staying=value)]}, "s1").runs[0]
    assert run.staying is False and "staying" not in run.to_dict()


def test_input_null_is_read_as_no_input():
    """persistence.md §2.3 rule 5 (known loss): `"input": null` is written back without `input`."""
    run = Session.from_dict({**fresh_blob(), "runs": [a_run(input=None)]}, "s1").runs[0]
    assert run.input is None and "input" not in run.to_dict()


@pytest.mark.parametrize("value", [0, "", [], False, {"a": [1]}])
def test_input_is_kept_when_present(value):
    """persistence.md §2.5: `input` is kept when present, whatever JSON it holds."""
    run = Session.from_dict({**fresh_blob(), "runs": [a_run(input=value)]}, "s1").runs[0]
    assert run.to_dict()["input"] == value


def test_reader_trusts_trigger_waiting_and_time_text_the_engine_does_not_read():
    """persistence.md §2.5, not checked: trigger content beyond kind/key (kind not in the list), waiting's other
    keys, the format of startedAt, lastUserAt and claim times, data/metadata/history content."""
    run = a_run(trigger={"kind": "telepathy", "key": "k", "payload": None, "other": 1}, waiting={"weird": True},
                startedAt="yesterday")
    blob = {**fresh_blob(), "runs": [run], "data": {"x": object.__name__}, "history": [1, "two"],
            "metadata": {"k": [None]}, "lastUserAt": "not a date", "claims": {"a": {"at": "soon", "why": 1}}}
    assert Session.from_dict(blob, "s1").to_dict() == blob


@pytest.mark.parametrize("change, why", [
    ({"asked": {"x": "many"}}, 'runs[0].asked.x is "many", expected a whole number'),
    ({"visits": {"y": None}}, "runs[0].visits.y is null, expected a whole number"),
    ({"outcomes": ["not a line", 3]}, 'runs[0].outcomes[0] is "not a line", expected an object'),
    ({"waiting": {"key": 5}}, "runs[0].waiting.key is 5, expected text"),
    ({"waiting": {"key": "k", "until": "amanhã"}}, 'runs[0].waiting.until is "amanhã", expected a time'),
    ({"waiting": {"key": "k", "setAt": 7}}, "runs[0].waiting.setAt is 7, expected a time"),
])
def test_reader_refuses_run_contents_the_engine_could_not_turn(change, why):
    """persistence.md §2.5 R13-R15 (falai for Python): what the engine reads is checked, so every blob the reader
    accepts also turns and saves (docs/guide/limits.md); the original trusts these."""
    with pytest.raises(InvalidSessionError, match=re.escape(why)):
        Session.from_dict({**fresh_blob(), "runs": [a_run(**change)]}, "s1")
    with pytest.raises(InvalidSessionError, match='lastAssistantAt is "ontem", not a time'):
        Session.from_dict({**fresh_blob(), "lastAssistantAt": "ontem"}, "s1")


def test_whole_number_floats_are_stored_back_as_ints():
    """persistence.md §2.5: an integral float version or hop is read as an int; `v` 4.0 is accepted."""
    session = Session.from_dict({**fresh_blob(), "v": 4.0, "version": 3.0, "runs": [a_run(hop=2.0)]}, "s1")
    assert (session.version, session.runs[0].hop, session.v) == (3, 2, 4)
    assert type(session.version) is int and type(session.runs[0].hop) is int
    assert session.to_dict()["v"] == 4 and type(session.to_dict()["v"]) is int


def test_from_dict_shares_nested_values_with_the_blob():
    """persistence.md §2.3 (inferred, mirrors to_dict): the reader does not copy data, metadata or run dicts."""
    blob = {**fresh_blob(), "runs": [a_run()]}
    session = Session.from_dict(blob, "s1")
    assert session.data is blob["data"] and session.metadata is blob["metadata"]
    assert session.runs[0].trigger is blob["runs"][0]["trigger"]


# §2.5 the top-level rules, each with its exact `why` ------------------------------------------------

def without(blob, key):
    return {k: v for k, v in blob.items() if k != key}


TOP_LEVEL_RULES = [
    # rule 1: the blob is a dict
    ("rule1_none", None, "expected an object, got null"),
    ("rule1_text", "garbage", 'expected an object, got "garbage"'),
    ("rule1_list", [], "expected an object, got a list"),
    ("rule1_number", 3, "expected an object, got 3"),
    ("rule1_bool", True, "expected an object, got true"),
    # rule 2: v is 4
    ("rule2_v3", {**fresh_blob(), "v": 3}, "v is 3, expected 4"),
    ("rule2_missing", without(fresh_blob(), "v"), "v is missing, expected 4"),
    ("rule2_text", {**fresh_blob(), "v": "4"}, 'v is "4", expected 4'),
    ("rule2_float", {**fresh_blob(), "v": 4.5}, "v is 4.5, expected 4"),
    ("rule2_null", {**fresh_blob(), "v": None}, "v is null, expected 4"),
    # rule 3: id equals the expected id
    ("rule3_other", {**fresh_blob(), "id": "other"}, 'id is "other", expected "s1"'),
    ("rule3_missing", without(fresh_blob(), "id"), 'id is missing, expected "s1"'),
    ("rule3_number", {**fresh_blob(), "id": 1}, 'id is 1, expected "s1"'),
    # rule 4: version is a whole number
    ("rule4_text", {**fresh_blob(), "version": "3"}, 'version is "3", expected a whole number'),
    ("rule4_negative", {**fresh_blob(), "version": -1}, "version is -1, expected a whole number"),
    ("rule4_fraction", {**fresh_blob(), "version": 1.5}, "version is 1.5, expected a whole number"),
    ("rule4_bool", {**fresh_blob(), "version": True}, "version is true, expected a whole number"),
    ("rule4_missing", without(fresh_blob(), "version"), "version is missing, expected a whole number"),
    # rule 5: data is a dict
    ("rule5_list", {**fresh_blob(), "data": []}, "data is a list, expected an object"),
    ("rule5_missing", without(fresh_blob(), "data"), "data is missing, expected an object"),
    ("rule5_null", {**fresh_blob(), "data": None}, "data is null, expected an object"),
    # rule 6: runs is a list
    ("rule6_object", {**fresh_blob(), "runs": {}}, "runs is an object, expected a list"),
    ("rule6_missing", without(fresh_blob(), "runs"), "runs is missing, expected a list"),
    # rule 7: claims is a map of { at }
    ("rule7_list", {**fresh_blob(), "claims": []}, "claims is not a map of { at }"),
    ("rule7_no_at", {**fresh_blob(), "claims": {"a:s1:": {}}}, "claims is not a map of { at }"),
    ("rule7_at_number", {**fresh_blob(), "claims": {"a:s1:": {"at": 5}}}, "claims is not a map of { at }"),
    ("rule7_value_text", {**fresh_blob(), "claims": {"a:s1:": "x"}}, "claims is not a map of { at }"),
    ("rule7_missing", without(fresh_blob(), "claims"), "claims is not a map of { at }"),
    # rule 8: inputs is a list of strings
    ("rule8_number_item", {**fresh_blob(), "inputs": [1]}, "inputs is not a list of ids"),
    ("rule8_object", {**fresh_blob(), "inputs": {}}, "inputs is not a list of ids"),
    ("rule8_missing", without(fresh_blob(), "inputs"), "inputs is not a list of ids"),
    # rule 9: metadata is a dict
    ("rule9_missing", without(fresh_blob(), "metadata"), "metadata is missing, expected an object"),
    ("rule9_text", {**fresh_blob(), "metadata": "x"}, 'metadata is "x", expected an object'),
    # rule 10: history, when present, is a list ("present" includes None)
    ("rule10_object", {**fresh_blob(), "history": {}}, "history is an object, expected a list"),
    ("rule10_null", {**fresh_blob(), "history": None}, "history is null, expected a list"),
    # rules 11, 12: lastUserAt / lastAssistantAt, when present, are text
    ("rule11_number", {**fresh_blob(), "lastUserAt": 5}, "lastUserAt is not text"),
    ("rule11_null", {**fresh_blob(), "lastUserAt": None}, "lastUserAt is not text"),
    ("rule12_number", {**fresh_blob(), "lastAssistantAt": 5}, "lastAssistantAt is not text"),
    ("rule12_null", {**fresh_blob(), "lastAssistantAt": None}, "lastAssistantAt is not text"),
]


@pytest.mark.parametrize("blob, why", [(b, w) for _, b, w in TOP_LEVEL_RULES],
                         ids=[name for name, _, _ in TOP_LEVEL_RULES])
def test_each_top_level_rule_raises_its_exact_why(blob, why):
    """persistence.md §2.5 rules 1-12: the first failed rule raises InvalidSessionError with its `why`."""
    assert why_of(blob) == why


def test_the_full_message_names_the_session_and_how_to_fix():
    """persistence.md §2.5, Part 5: the exact message text and the error's attributes."""
    with pytest.raises(InvalidSessionError) as caught:
        Session.from_dict({**fresh_blob(), "v": 3}, "s1")
    assert str(caught.value) == ('[InvalidSessionError] stored session "s1" is unreadable: v is 3, expected 4. '
                                 "Repair or delete the row; it is never replaced by a fresh conversation.")
    assert caught.value.session_id == "s1" and isinstance(caught.value, FalaiError)


def test_rules_are_checked_in_order_and_only_the_first_failure_is_reported():
    """persistence.md §2.5: rules run in the table's order; rule 2 wins over rule 3, rule 5 over rule 6, and so on."""
    assert why_of({**fresh_blob(), "v": 3, "id": "x", "data": []}) == "v is 3, expected 4"
    assert why_of({**fresh_blob(), "id": "x", "version": -1}) == 'id is "x", expected "s1"'
    assert why_of({**fresh_blob(), "data": [], "runs": {}}) == "data is a list, expected an object"
    assert why_of({**fresh_blob(), "inputs": [1], "metadata": 1, "runs": [5]}) == "inputs is not a list of ids"
    assert why_of({**fresh_blob(), "lastUserAt": 1, "runs": [5]}) == "lastUserAt is not text"


def test_without_session_id_a_non_dict_blob_reports_an_empty_session_id():
    """persistence.md §2.3 rule 3 (inferred): with no session_id and no string `id`, the error carries ""."""
    with pytest.raises(InvalidSessionError) as caught:
        Session.from_dict("garbage")
    assert caught.value.session_id == ""
    with pytest.raises(InvalidSessionError) as caught:
        Session.from_dict({**fresh_blob(), "id": 7})
    assert caught.value.session_id == "" and 'id is 7, expected ""' in str(caught.value)


def test_without_session_id_the_error_names_the_blobs_own_id():
    """persistence.md §2.3 rule 3: the expected id (and the error's session_id) is the blob's own string id."""
    with pytest.raises(InvalidSessionError) as caught:
        Session.from_dict({**fresh_blob("abc"), "v": 3})
    assert caught.value.session_id == "abc"


# §2.5 describe(v) ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (3.0, "3"), (3.5, "3.5"), (1e21, "1e+21"), (1e-7, "1e-7"), (-2, "-2"), (10 ** 22, "1e+22"),
    (False, "false"), (None, "null"), ([1], "a list"), (object(), "an object"),
    ((1, 2), "an object"), (len, "a function"), (lambda: 1, "a function"),
    ('say "hi" \\ ' + "x" * 60, '"say "hi" \\ ' + "x" * 60 + '"'), ("", '""'), ("ção", '"ção"'),
], ids=lambda v: repr(v)[:20])
def test_describe_names_values_as_the_spec_says(value, text):
    """persistence.md §2.5, describe(v): strings in plain quotes (not escaped, not cut), numbers as JavaScript prints
    them, true/false/null, `a list`, `a function`, `an object` for anything else."""
    assert why_of({**fresh_blob(), "data": value}) == f"data is {text}, expected an object"


def test_describe_names_a_dict_an_object():
    """persistence.md §2.5, describe(v): a dict is `an object`."""
    assert why_of({**fresh_blob(), "runs": {"a": 1}}) == "runs is an object, expected a list"


# §2.5 the run rules, each with its exact `why` ---------------------------------------------------

def without_run_key(key):
    run = a_run()
    del run[key]
    return run


RUN_RULES = [
    ("R1_text", "x", 'runs[1] is "x", expected an object'),
    ("R1_list", [], "runs[1] is a list, expected an object"),
    ("R1_null", None, "runs[1] is null, expected an object"),
    ("R2_number", a_run(status=1), "runs[1].status is 1, expected text"),
    ("R2_missing", without_run_key("status"), "runs[1].status is missing, expected text"),
    ("R3_done", a_run(status="done"), 'runs[1].status is "done"'),
    ("R3_case", a_run(status="Asking"), 'runs[1].status is "Asking"'),
    ("R4_missing", without_run_key("stepId"), "runs[1].stepId is missing, expected text or null"),
    ("R4_number", a_run(stepId=3), "runs[1].stepId is 3, expected text or null"),
    ("R5_text", a_run(hop="0"), 'runs[1].hop is "0", expected a whole number'),
    ("R5_negative", a_run(hop=-1), "runs[1].hop is -1, expected a whole number"),
    ("R5_fraction", a_run(hop=0.5), "runs[1].hop is 0.5, expected a whole number"),
    ("R5_missing", without_run_key("hop"), "runs[1].hop is missing, expected a whole number"),
    ("R6_object", a_run(outcomes={}), "runs[1].outcomes is an object, expected a list"),
    ("R6_missing", without_run_key("outcomes"), "runs[1].outcomes is missing, expected a list"),
    ("R7_missing", without_run_key("trigger"), "runs[1].trigger is missing, expected an object"),
    ("R7_text", a_run(trigger="message"), 'runs[1].trigger is "message", expected an object'),
    ("R8_no_key", a_run(trigger={"kind": "message"}), "runs[1].trigger needs kind and key"),
    ("R8_no_kind", a_run(trigger={"key": "k"}), "runs[1].trigger needs kind and key"),
    ("R8_number_key", a_run(trigger={"kind": "start", "key": 5}), "runs[1].trigger needs kind and key"),
    ("R9_text", a_run(waiting="timer"), 'runs[1].waiting is "timer", expected an object'),
    ("R9_null", a_run(waiting=None), "runs[1].waiting is null, expected an object"),
    ("R10_id", a_run(id=None), "runs[1].id is null, expected text"),
    ("R10_flowId", a_run(flowId=1), "runs[1].flowId is 1, expected text"),
    ("R10_anchor", without_run_key("anchor"), "runs[1].anchor is missing, expected text"),
    ("R10_dedupeKey", a_run(dedupeKey=[]), "runs[1].dedupeKey is a list, expected text"),
    ("R11_number", a_run(startedAt=0), "runs[1].startedAt is 0, expected text"),
    ("R11_missing", without_run_key("startedAt"), "runs[1].startedAt is missing, expected text"),
    ("R12_asked", a_run(asked=[]), "runs[1].asked is a list, expected an object"),
    ("R12_visits", without_run_key("visits"), "runs[1].visits is missing, expected an object"),
]


@pytest.mark.parametrize("run, why", [(r, w) for _, r, w in RUN_RULES], ids=[name for name, _, _ in RUN_RULES])
def test_each_run_rule_raises_its_exact_why_with_the_runs_index(run, why):
    """persistence.md §2.5 rule 13, R1-R12: runs are checked in order; the message names `runs[i]`."""
    assert why_of({**fresh_blob(), "runs": [a_run(), run]}) == why


def test_run_rules_are_checked_in_order():
    """persistence.md §2.5: R2 before R3 before R4 ... and R10 checks id, flowId, anchor, dedupeKey in that order."""
    assert why_of({**fresh_blob(), "runs": [a_run(status="done", hop="x")]}) == 'runs[0].status is "done"'
    assert why_of({**fresh_blob(), "runs": [a_run(hop=-1, outcomes=None)]}) == \
        "runs[0].hop is -1, expected a whole number"
    assert why_of({**fresh_blob(), "runs": [a_run(trigger={}, waiting=1, id=1)]}) == "runs[0].trigger needs kind and key"
    assert why_of({**fresh_blob(), "runs": [a_run(waiting=1, id=1)]}) == "runs[0].waiting is 1, expected an object"
    assert why_of({**fresh_blob(), "runs": [a_run(anchor=1, flowId=2, startedAt=3)]}) == \
        "runs[0].flowId is 2, expected text"
    assert why_of({**fresh_blob(), "runs": [a_run(startedAt=3, asked=None)]}) == \
        "runs[0].startedAt is 3, expected text"
    assert why_of({**fresh_blob(), "runs": [a_run(asked=None, visits=None)]}) == \
        "runs[0].asked is null, expected an object"


def test_the_first_bad_run_is_the_one_reported():
    """persistence.md §2.5 rule 13: each run, in order; the index counts from 0."""
    assert why_of({**fresh_blob(), "runs": [a_run(status="x"), a_run(hop=-1)]}) == 'runs[0].status is "x"'


def test_run_rules_come_after_every_top_level_rule():
    """persistence.md §2.5: rule 13 is last, so a bad lastAssistantAt is reported before a bad run."""
    assert why_of({**fresh_blob(), "runs": [None], "lastAssistantAt": 1}) == "lastAssistantAt is not text"
