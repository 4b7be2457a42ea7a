"""migrate_session: from a 3.x blob to a v4 session (persistence.md Part 4)."""
import copy
import json
import pathlib
from datetime import datetime, timedelta, timezone

import pytest

from falai import InvalidSessionError, MemoryStore, Session, migrate_session

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
NOW = datetime(2026, 9, 21, 12, 0, tzinfo=timezone.utc)
NOW_TEXT = "2026-09-21T12:00:00.000Z"
SAME = lambda key: key  # noqa: E731 - the fixtures' flow_id_of


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def migrate(blob, session_id="s1", **options):
    options.setdefault("now", NOW)
    return migrate_session(blob, session_id=session_id, **options)


# §4.6 prospectar-midflow.json ------------------------------------------------------------------

def test_prospectar_midflow_gives_exactly_the_spec_session():
    """persistence.md §4.6: one asking run at ask_budget, the completed flow's claim and the run's claim, version 0,
    data the same object, metadata equal, no history / lastUserAt / lastAssistantAt."""
    blob = fixture("prospectar-midflow.json")
    sid = "session_1756731890123_k3j9x2"
    session = migrate(blob, session_id=blob["id"], flow_id_of=SAME)
    assert session.to_dict() == {
        "id": sid, "v": 4, "version": 0, "data": blob["data"],
        "runs": [{"id": "qualificacao#legacy", "flowId": "qualificacao", "anchor": sid,
                  "dedupeKey": f"qualificacao:{sid}:", "stepId": "ask_budget", "status": "asking",
                  "trigger": {"kind": "message", "key": "legacy"}, "hop": 0,
                  "startedAt": "2026-09-01T13:05:12.000Z", "asked": {}, "visits": {}, "outcomes": []}],
        "claims": {f"boas_vindas:{sid}:": {"at": "2026-09-01T13:05:12.000Z"},
                   f"qualificacao:{sid}:": {"at": "2026-09-01T13:05:12.000Z"}},
        "inputs": [],
        "metadata": blob["metadata"],
    }
    assert session.data is blob["data"]
    assert (session.history, session.last_user_at, session.last_assistant_at) == (None, None, None)


def test_prospectar_midflow_saves_and_loads_back_at_version_1():
    """persistence.md §4.6, §4.3: MemoryStore().save(s, s.version) is the insert; the load gives the same dict with
    version 1 and the run still at ask_budget."""
    blob = fixture("prospectar-midflow.json")
    session = migrate(blob, session_id=blob["id"], flow_id_of=SAME)
    store = MemoryStore()
    store.save(session, session.version)
    loaded = store.load(blob["id"])
    assert loaded.to_dict() == {**session.to_dict(), "version": 1}
    assert loaded.runs[0].step_id == "ask_budget"


def test_migration_without_flow_id_of_keeps_every_id():
    """persistence.md §4.1: flow_id_of=None is the same as lambda key: key."""
    blob = fixture("prospectar-midflow.json")
    assert migrate(blob, session_id=blob["id"]).to_dict() == migrate(blob, session_id=blob["id"],
                                                                      flow_id_of=SAME).to_dict()


def test_the_spec_example_runs_as_written():
    """persistence.md §4.4."""
    legacy = {"id": "session_1", "data": {"nome": "Mariana"}, "version": 12,
              "currentFlow": {"id": "qualificacao", "enteredAt": "2026-09-01T13:05:12.000Z"},
              "currentStep": {"id": "ask_budget"},
              "flowHistory": [{"flowId": "boas_vindas", "exitedAt": "2026-09-01T13:05:12.000Z", "completed": True}]}
    session = migrate_session(legacy, session_id="session_1", flow_id_of=lambda key: key)
    assert session.version == 0
    assert (session.runs[0].flow_id, session.runs[0].step_id, session.runs[0].status) == (
        "qualificacao", "ask_budget", "asking")
    assert list(session.claims) == ["boas_vindas:session_1:", "qualificacao:session_1:"]
    assert session.data is legacy["data"]


# §4.6 ilojista-signals.json --------------------------------------------------------------------

def test_ilojista_signals_gives_one_run_and_a_claim_per_signal():
    """persistence.md §4.6: every signal (once or cooldown) claims at its last firing; the run claims at its start;
    the null inside data stays; version 0."""
    blob = fixture("ilojista-signals.json")
    sid = "session_1756900011000_p8q1zz"
    session = migrate(blob, session_id=blob["id"], flow_id_of=SAME)
    [run] = session.runs
    assert (run.id, run.flow_id, run.step_id, run.status, run.started_at) == (
        "atendimento_pedido#legacy", "atendimento_pedido", "confirmar_endereco", "asking", "2026-09-03T15:20:05.000Z")
    assert session.version == 0
    assert session.data == blob["data"] and session.data["endereco"] is None
    assert session.claims == {
        f"not_interested_detection:{sid}:": {"at": "2026-09-03T15:21:10.000Z"},
        f"pediu_preco:{sid}:": {"at": "2026-09-03T15:22:02.000Z"},
        f"bot_detected:{sid}:": {"at": "2026-09-03T15:23:15.000Z"},
        f"lembrete_carrinho:{sid}:": {"at": "2026-09-03T15:24:00.000Z"},
        f"atendimento_pedido:{sid}:": {"at": "2026-09-03T15:20:05.000Z"},
    }
    assert list(session.claims)[-1] == f"atendimento_pedido:{sid}:"     # steps 4, 5, 7 in insertion order


def test_ilojista_signals_drops_the_pending_directive():
    """persistence.md §4.6, §4.2 step 8: pendingDirective (pointing at step pagamento) leaves no trace."""
    blob = fixture("ilojista-signals.json")
    text = json.dumps(migrate(blob, session_id=blob["id"], flow_id_of=SAME).to_dict())
    assert "pendingDirective" not in text and "pagamento" not in text


def test_ilojista_signals_with_a_flow_id_map():
    """persistence.md §4.6: flow_id_of maps flow ids and signal keys; the step id is not mapped."""
    blob = fixture("ilojista-signals.json")
    sid = "session_1756900011000_p8q1zz"
    mapping = {"pediu_preco": "preco", "atendimento_pedido": "pedido"}
    session = migrate(blob, session_id=blob["id"], flow_id_of=lambda k: mapping.get(k, k))
    run = session.runs[0]
    assert (run.id, run.flow_id, run.dedupe_key, run.step_id) == (
        "pedido#legacy", "pedido", f"pedido:{sid}:", "confirmar_endereco")
    assert sorted(session.claims) == [f"bot_detected:{sid}:", f"lembrete_carrinho:{sid}:",
                                      f"not_interested_detection:{sid}:", f"pedido:{sid}:", f"preco:{sid}:"]


def test_flow_id_of_is_called_for_completed_flows_signals_and_the_current_flow_only():
    """persistence.md §4.2 steps 4, 5, 7: not-completed flowHistory entries do not call flow_id_of."""
    asked = []
    blob = fixture("ilojista-signals.json")
    migrate(blob, session_id=blob["id"], flow_id_of=lambda k: asked.append(k) or k)
    assert asked == ["not_interested_detection", "pediu_preco", "bot_detected", "lembrete_carrinho",
                     "atendimento_pedido"]


# §4.6 v4.json ----------------------------------------------------------------------------------

def test_a_v4_blob_passes_through_unchanged_and_flow_id_of_is_never_called():
    """persistence.md §4.6, §4.2 rule 2: a blob with `v` is read by Session.from_dict."""
    blob = fixture("v4.json")

    def never(key):
        raise AssertionError(f"flow_id_of called with {key!r}")

    session = migrate_session(blob, session_id="conv_v4", flow_id_of=never)
    assert session.to_dict() == blob
    assert session.to_dict() == Session.from_dict(blob, "conv_v4").to_dict()
    assert session.version == 3


def test_a_v4_blob_loses_only_its_non_session_keys():
    """persistence.md §4.6: with createdAt / updatedAt added, the result has exactly the session's keys."""
    blob = {**fixture("v4.json"), "createdAt": "x", "updatedAt": "y"}
    assert sorted(migrate_session(blob, session_id="conv_v4").to_dict()) == [
        "claims", "data", "id", "inputs", "lastAssistantAt", "lastUserAt", "metadata", "runs", "v", "version"]


# §4.6 other cases ------------------------------------------------------------------------------

def test_datetime_dates_become_text_everywhere():
    """persistence.md §4.6, other cases: a 3.x state whose dates are datetime objects."""
    def at(h, m, s=0):
        return datetime(2026, 9, 10, h, m, s, tzinfo=timezone.utc)

    blob = {"id": "s1", "data": {},
            "currentFlow": {"id": "f", "enteredAt": at(9, 0)},
            "flowHistory": [{"flowId": "g", "enteredAt": at(9, 0), "exitedAt": at(9, 0, 30), "completed": True}],
            "signals": {"triggers": {"sig": {"firstTriggeredAt": at(9, 0), "lastTriggeredAt": at(9, 2)}}},
            "metadata": {"createdAt": at(9, 0), "lastUpdatedAt": at(9, 2),
                         "nested": {"when": at(9, 1), "list": [at(9, 3), 1]}}}
    session = migrate(blob)
    assert session.runs[0].started_at == "2026-09-10T09:00:00.000Z"
    assert session.claims["g:s1:"] == {"at": "2026-09-10T09:00:30.000Z"}
    assert session.claims["sig:s1:"] == {"at": "2026-09-10T09:02:00.000Z"}
    assert session.metadata == {"createdAt": "2026-09-10T09:00:00.000Z", "lastUpdatedAt": "2026-09-10T09:02:00.000Z",
                                "nested": {"when": "2026-09-10T09:01:00.000Z",
                                           "list": ["2026-09-10T09:03:00.000Z", 1]}}
    d = session.to_dict()
    assert json.loads(json.dumps(d)) == d


def test_a_bare_3x_state_gives_a_fresh_session_with_its_data():
    """persistence.md §4.6, other cases: {"id": "s1", "data": {"nome": "Ana"}}."""
    assert migrate({"id": "s1", "data": {"nome": "Ana"}}).to_dict() == {
        "id": "s1", "v": 4, "version": 0, "data": {"nome": "Ana"}, "runs": [], "claims": {}, "inputs": [],
        "metadata": {}}


def test_a_current_flow_without_a_step_starts_running_at_now():
    """persistence.md §4.6, other cases; §4.2 step 7: no step -> stepId None, status running; no enteredAt -> now."""
    session = migrate({"id": "s1", "data": {}, "currentFlow": {"id": "f", "title": "F"}})
    run = session.runs[0]
    assert (run.id, run.step_id, run.status, run.started_at) == ("f#legacy", None, "running", NOW_TEXT)
    assert session.claims == {"f:s1:": {"at": NOW_TEXT}}


def test_history_is_carried_when_present_and_absent_otherwise():
    """persistence.md §4.6, other cases; §4.2 step 8."""
    history = [{"role": "user", "content": "oi"}]
    assert migrate({"id": "s1", "data": {}, "history": history}).history == history
    assert "history" not in migrate({"id": "s1", "data": {}}).to_dict()


# §4.2 the rules in detail -------------------------------------------------------------------------

def test_the_session_id_argument_wins_over_the_blobs_id():
    """persistence.md §4.1: the legacy blob's own id is ignored."""
    session = migrate({"id": "old", "data": {}, "currentFlow": "f"}, session_id="new")
    assert session.id == "new" and session.runs[0].anchor == "new" and list(session.claims) == ["f:new:"]


def test_the_legacy_version_is_not_checked_or_carried():
    """persistence.md §4.2 rule 3: the legacy version is ignored; the result is at version 0."""
    assert migrate({"data": {}, "version": "twelve"}).version == 0


@pytest.mark.parametrize("flow, step, expected", [
    ("f", "q", ("f", "q", "asking")),
    ({"id": "f"}, {"id": "q", "description": "x"}, ("f", "q", "asking")),
    ("f", None, ("f", None, "running")),
    ("f", "", ("f", None, "running")),
    ({"id": "f"}, {"id": ""}, ("f", None, "running")),
], ids=["text", "objects", "no-step", "empty-step", "empty-step-id"])
def test_the_cursor_reads_text_or_an_object_with_an_id(flow, step, expected):
    """persistence.md §4.2 step 6: a non-empty string or a dict with a string id is a reference; a step id that is
    empty is no step (stepId null, status running)."""
    run = migrate({"data": {}, "currentFlow": flow, "currentStep": step}).runs[0]
    assert (run.flow_id, run.step_id, run.status) == expected


@pytest.mark.parametrize("flow", [None, "", "absent"])
def test_no_current_flow_creates_no_run_even_with_a_step(flow):
    """persistence.md §4.2 steps 6, 7: absent, None or "" is no reference; a currentStep alone creates nothing."""
    blob = {"data": {}, "currentStep": {"id": "q"}}
    if flow != "absent":
        blob["currentFlow"] = flow
    session = migrate(blob)
    assert session.runs == [] and session.claims == {}


def test_the_step_id_is_not_mapped():
    """persistence.md §4.2 step 7: the step id is used as is."""
    run = migrate({"data": {}, "currentFlow": "f", "currentStep": "f"}, flow_id_of=lambda k: "mapped").runs[0]
    assert (run.flow_id, run.step_id) == ("mapped", "f")


def test_only_completed_true_flow_history_entries_claim():
    """persistence.md §4.2 step 4: `completed` exactly true; others write nothing."""
    history = [{"flowId": "a", "completed": True}, {"flowId": "b", "completed": False}, {"flowId": "c"},
               {"flowId": "d", "completed": 1}, {"flowId": "e", "completed": "true"}]
    assert list(migrate({"data": {}, "flowHistory": history}).claims) == ["a:s1:"]


@pytest.mark.parametrize("entry, at", [
    ({"exitedAt": "2026-09-01T10:00:00.000Z", "enteredAt": "2026-09-01T09:00:00.000Z"}, "2026-09-01T10:00:00.000Z"),
    ({"exitedAt": "soon", "enteredAt": "2026-09-01T09:00:00.000Z"}, "2026-09-01T09:00:00.000Z"),
    ({"exitedAt": None, "enteredAt": {"x": 1}}, NOW_TEXT),
    ({}, NOW_TEXT),
], ids=["exitedAt", "enteredAt-after-a-bad-exitedAt", "now-after-bad-dates", "now"])
def test_a_completed_flow_claims_at_the_first_usable_date(entry, at):
    """persistence.md §4.2 step 4: first usable of (exitedAt, enteredAt, now)."""
    session = migrate({"data": {}, "flowHistory": [{"flowId": "g", "completed": True, **entry}]})
    assert session.claims == {"g:s1:": {"at": at}}


@pytest.mark.parametrize("state, at", [
    ({"firstTriggeredAt": "2026-09-01T09:00:00.000Z", "lastTriggeredAt": "2026-09-02T09:00:00.000Z", "count": 2},
     "2026-09-02T09:00:00.000Z"),
    ({"firstTriggeredAt": "2026-09-01T09:00:00.000Z"}, "2026-09-01T09:00:00.000Z"),
    ({"count": 0}, NOW_TEXT),
], ids=["last", "first", "now"])
def test_every_signal_claims_at_its_last_then_first_firing_then_now(state, at):
    """persistence.md §4.2 step 5: whatever its count; first usable of (lastTriggeredAt, firstTriggeredAt, now)."""
    assert migrate({"data": {}, "signals": {"triggers": {"sig": state}}}).claims == {"sig:s1:": {"at": at}}


def test_the_runs_claim_overwrites_an_earlier_claim_of_the_same_key_in_place():
    """persistence.md §4.2 step 7: the run's claim overwrites one from steps 4-5 (insertion order kept)."""
    blob = {"data": {}, "currentFlow": {"id": "f", "enteredAt": "2026-09-05T00:00:00.000Z"},
            "flowHistory": [{"flowId": "f", "completed": True, "exitedAt": "2026-09-01T00:00:00.000Z"},
                            {"flowId": "g", "completed": True, "exitedAt": "2026-09-02T00:00:00.000Z"}]}
    claims = migrate(blob).claims
    assert claims == {"f:s1:": {"at": "2026-09-05T00:00:00.000Z"}, "g:s1:": {"at": "2026-09-02T00:00:00.000Z"}}
    assert list(claims) == ["f:s1:", "g:s1:"]


def test_two_signals_mapped_to_one_flow_keep_the_later_entry():
    """persistence.md §4.2 step 5: claims are written in order, so a later entry with the same key wins."""
    blob = {"data": {}, "signals": {"triggers": {"a": {"lastTriggeredAt": "2026-09-01T00:00:00.000Z"},
                                                  "b": {"lastTriggeredAt": "2026-09-02T00:00:00.000Z"}}}}
    assert migrate(blob, flow_id_of=lambda k: "x").claims == {"x:s1:": {"at": "2026-09-02T00:00:00.000Z"}}


@pytest.mark.parametrize("value, text", [
    (datetime(2026, 9, 10, 9, 0, 0, 999999), "2026-09-10T09:00:00.999Z"),                          # naive is UTC
    (datetime(2026, 9, 10, 6, 0, tzinfo=timezone(timedelta(hours=-3))), "2026-09-10T09:00:00.000Z"),
    (1789898400000, "2026-09-20T10:00:00.000Z"),
    (1789898400000.7, "2026-09-20T10:00:00.000Z"),
    (0, "1970-01-01T00:00:00.000Z"),
    ("2026-09-10", "2026-09-10T00:00:00.000Z"),
    ("2026-09-10T09:00:00Z", "2026-09-10T09:00:00.000Z"),
    ("2026-09-10T06:00:00-03:00", "2026-09-10T09:00:00.000Z"),
    ("2026-09-10T09:00:00", "2026-09-10T09:00:00.000Z"),                                           # no offset: UTC
    ("2026-09-10T09:00:00.123456+00:00", "2026-09-10T09:00:00.123Z"),
], ids=["naive-datetime", "aware-datetime", "epoch-ms", "epoch-ms-float", "epoch-zero", "date", "z", "offset",
        "no-offset", "microseconds"])
def test_usable_dates(value, text):
    """persistence.md §4.2, Usable date: a datetime, epoch milliseconds, or ISO text starting with YYYY-MM-DD."""
    assert migrate({"data": {}, "currentFlow": {"id": "f", "enteredAt": value}}).runs[0].started_at == text


@pytest.mark.parametrize("value", ["yesterday", "10/09/2026", "2026-13-45", "2026-09-10Tnope", "  2026-09-10",
                                   True, None, {"at": 1}, [2026], 10 ** 20, float("nan"), float("inf"), ""],
                         ids=lambda v: repr(v)[:20])
def test_values_that_are_not_usable_dates_fall_back_to_now(value):
    """persistence.md §4.2, Usable date: a string that does not parse, an out-of-range number, a dict, None ... are
    not usable, so the next candidate (here now) is used."""
    assert migrate({"data": {}, "currentFlow": {"id": "f", "enteredAt": value}}).runs[0].started_at == NOW_TEXT


def test_now_defaults_to_the_current_utc_time():
    """persistence.md §4.1: now defaults to the current UTC time."""
    before = datetime.now(timezone.utc).replace(microsecond=0)
    started = migrate_session({"data": {}, "currentFlow": "f"}, session_id="s1").runs[0].started_at
    after = datetime.now(timezone.utc)
    assert before <= datetime.fromisoformat(started.replace("Z", "+00:00")) <= after


def test_data_is_the_same_object_and_metadata_a_rebuilt_copy():
    """persistence.md §4.2 step 8: data is not copied or coerced; metadata is rebuilt (strings and other values kept)."""
    blob = {"data": {"x": None, "n": "3"}, "metadata": {"a": ["t", 2, None, {"b": True}]}}
    before = copy.deepcopy(blob)
    session = migrate(blob)
    assert session.data is blob["data"] and session.data == {"x": None, "n": "3"}
    assert session.metadata == blob["metadata"] and session.metadata is not blob["metadata"]
    assert blob == before


def test_everything_else_is_dropped():
    """persistence.md §4.2 step 8: currentFlow, flowHistory, signals, pendingDirective, version, dataByRoute ... go."""
    blob = {"id": "x", "data": {}, "dataByRoute": {"r": 1}, "routeHistory": [1], "pendingDirective": {"step": "p"},
            "version": 9, "flowHistory": [], "signals": {}, "currentStep": None}
    assert migrate(blob).to_dict() == {"id": "s1", "v": 4, "version": 0, "data": {}, "runs": [], "claims": {},
                                       "inputs": [], "metadata": {}}


def test_signals_without_triggers_counts_as_empty():
    """persistence.md §4.2 L6: signals.triggers absent or None counts as {}."""
    assert migrate({"data": {}, "signals": {"triggers": None}}).claims == {}
    assert migrate({"data": {}, "signals": {}}).claims == {}


# §4.5 what migrate_session rejects -------------------------------------------------------------------

def why_of(blob, **options) -> str:
    with pytest.raises(InvalidSessionError) as caught:
        migrate(blob, **options)
    assert caught.value.session_id == "s1"
    message = str(caught.value)
    assert message.startswith('[InvalidSessionError] stored session "s1" is unreadable: ')
    assert message.endswith(". Repair or delete the row; it is never replaced by a fresh conversation.")
    return message[len('[InvalidSessionError] stored session "s1" is unreadable: '):-len(
        ". Repair or delete the row; it is never replaced by a fresh conversation.")]


LEGACY_REJECTIONS = [
    ("rule1_none", None, "expected an object, got null"),
    ("rule1_text", "not a session", 'expected an object, got "not a session"'),
    ("rule1_list", [], "expected an object, got a list"),
    ("L1_empty", {}, "data is missing, expected an object; not a 3.x session either"),
    ("L1_text", {"id": "s1", "data": "nope"}, 'data is "nope", expected an object; not a 3.x session either'),
    ("L1_list", {"id": "s1", "data": []}, "data is a list, expected an object; not a 3.x session either"),
    ("L1_null", {"id": "s1", "data": None}, "data is null, expected an object; not a 3.x session either"),
    ("L2", {"id": "s1", "data": {}, "metadata": "x"}, 'metadata is "x", expected an object'),
    ("L2_null", {"id": "s1", "data": {}, "metadata": None}, "metadata is null, expected an object"),
    ("L3", {"id": "s1", "data": {}, "history": {}}, "history is an object, expected a list"),
    ("L4", {"id": "s1", "data": {}, "flowHistory": {}}, "flowHistory is an object, expected a list"),
    ("L5", {"id": "s1", "data": {}, "signals": []}, "signals is a list, expected an object"),
    ("L6", {"id": "s1", "data": {}, "signals": {"triggers": []}}, "signals.triggers is a list, expected an object"),
    ("step4_completed_no_flow_id", {"id": "s1", "data": {}, "flowHistory": [{"completed": True}]},
     "flowHistory[0] is not a flow entry"),
    ("step4_second_entry", {"id": "s1", "data": {}, "flowHistory": [{"flowId": "a"}, "b"]},
     "flowHistory[1] is not a flow entry"),
    ("step4_not_completed_still_checked", {"id": "s1", "data": {}, "flowHistory": [{"flowId": 5}]},
     "flowHistory[0] is not a flow entry"),
    ("step5", {"id": "s1", "data": {}, "signals": {"triggers": {"pediu.preco": "fired"}}},
     "signals.triggers.pediu.preco is not a trigger state"),
    ("step6_number", {"id": "s1", "data": {}, "currentFlow": 5}, "currentFlow is 5, expected { id } or text"),
    ("step6_no_id", {"id": "s1", "data": {}, "currentFlow": {"title": "F"}},
     "currentFlow is an object, expected { id } or text"),
    ("step6_step_without_flow", {"id": "s1", "data": {}, "currentStep": ["q"]},
     "currentStep is a list, expected { id } or text"),
    ("step6_step_bad_id", {"id": "s1", "data": {}, "currentFlow": "f", "currentStep": {"id": 3}},
     "currentStep is an object, expected { id } or text"),
    ("rule2_v3", {"v": 3, "id": "s1", "data": {}}, "v is 3, expected 4"),
    ("rule2_v_null", {"v": None, "id": "s1", "data": {}}, "v is null, expected 4"),
]


@pytest.mark.parametrize("blob, why", [(b, w) for _, b, w in LEGACY_REJECTIONS],
                         ids=[name for name, _, _ in LEGACY_REJECTIONS])
def test_each_rejection_raises_invalid_session_with_its_why(blob, why):
    """persistence.md §4.2 rules 1-2, L1-L6, steps 4-6; §4.5."""
    assert why_of(blob) == why


def test_the_data_nope_message_is_as_the_spec_quotes_it():
    """persistence.md §4.5: the message starts as quoted and says how to fix it; session_id is "s1"."""
    with pytest.raises(InvalidSessionError) as caught:
        migrate_session({"id": "s1", "data": "nope"}, session_id="s1")
    assert str(caught.value).startswith('[InvalidSessionError] stored session "s1" is unreadable: data is "nope"')
    assert "Repair or delete the row" in str(caught.value) and caught.value.session_id == "s1"


def test_shape_checks_come_before_claims_and_the_cursor():
    """persistence.md §4.2: L1-L6 first, then step 4, step 5, step 6, in that order."""
    assert why_of({"data": {}, "currentFlow": 5, "signals": {"triggers": []}}) == \
        "signals.triggers is a list, expected an object"
    assert why_of({"data": {}, "currentFlow": 5, "flowHistory": [1], "signals": {"triggers": {"k": 1}}}) == \
        "flowHistory[0] is not a flow entry"
    assert why_of({"data": {}, "currentFlow": 5, "signals": {"triggers": {"k": 1}}}) == \
        "signals.triggers.k is not a trigger state"
    assert why_of({"data": {}, "currentFlow": 5, "currentStep": 6}) == "currentFlow is 5, expected { id } or text"


def v4_as_s1(**changes) -> dict:
    blob = {**fixture("v4.json"), "id": "s1"}
    blob.update(changes)
    return blob


def v4_first_run(**changes) -> dict:
    blob = v4_as_s1()
    blob["runs"][0].update(changes)
    return blob


def v4_first_run_without(key) -> dict:
    blob = v4_as_s1()
    del blob["runs"][0][key]
    return blob


V4_REJECTIONS = [
    ("rule3_id", {**fixture("v4.json"), "id": "other"}, 'id is "other", expected "s1"'),
    ("rule4_version", v4_as_s1(version="3"), 'version is "3", expected a whole number'),
    ("rule6_runs", v4_as_s1(runs={}), "runs is an object, expected a list"),
    ("rule7_claims", v4_as_s1(claims={"a:s1:": {}}), "claims is not a map of { at }"),
    ("rule8_inputs", v4_as_s1(inputs=[1]), "inputs is not a list of ids"),
    ("rule9_no_metadata", {k: v for k, v in v4_as_s1().items() if k != "metadata"},
     "metadata is missing, expected an object"),
    ("rule10_history", v4_as_s1(history={}), "history is an object, expected a list"),
    ("R3_status", v4_first_run(status="done"), 'runs[0].status is "done"'),
    ("R7_no_trigger", v4_first_run_without("trigger"), "runs[0].trigger is missing, expected an object"),
    ("R5_hop", v4_first_run(hop="0"), 'runs[0].hop is "0", expected a whole number'),
]


@pytest.mark.parametrize("blob, why", [(b, w) for _, b, w in V4_REJECTIONS],
                         ids=[name for name, _, _ in V4_REJECTIONS])
def test_an_invalid_v4_blob_is_rejected_by_the_v4_reader(blob, why):
    """persistence.md §4.5: the v4 fixture (id "s1") with one rule broken; §4.2 rule 2 sends it to §2.5."""
    assert why_of(blob) == why


def test_the_v4_fixture_as_s1_is_accepted():
    """persistence.md §4.6: the base of the invalid v4 cases is itself valid."""
    assert migrate(v4_as_s1()).to_dict() == v4_as_s1()


# Call arguments ----------------------------------------------------------------------------------

def test_session_id_is_required_and_must_be_text():
    """persistence.md §4.1: session_id is keyword-only and required; python-api.md: wrong arguments are TypeErrors."""
    with pytest.raises(TypeError):
        migrate_session({"data": {}})
    with pytest.raises(TypeError):
        migrate_session({"data": {}}, "s1")
    with pytest.raises(TypeError, match="session_id must be a string"):
        migrate_session({"data": {}}, session_id=5)


def test_now_must_be_a_datetime():
    """persistence.md §4.1: now is a datetime (or None)."""
    with pytest.raises(TypeError, match="now must be a datetime"):
        migrate_session({"data": {}}, session_id="s1", now="2026-09-21T12:00:00.000Z")


def test_flow_id_of_must_return_text():
    """persistence.md §4.1 (inferred): flow_id_of returns a v4 flow id; anything else is a TypeError naming the key."""
    with pytest.raises(TypeError, match='flow_id_of\\("f"\\) returned None'):
        migrate({"data": {}, "currentFlow": "f"}, flow_id_of=lambda key: None)
