"""history_to_events and events_to_history (model-calls.md §11.2)."""
import re
from datetime import datetime, timezone

import pytest

from falai import events_to_history, history_to_events

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)

ISO_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


# history_to_events -------------------------------------------------------------------------------

def test_a_user_item_becomes_a_user_message_event():
    """model-calls.md §11.2: participant display_name is the name, or "User"."""
    [plain, named] = history_to_events([{"role": "user", "content": "oi"},
                                        {"role": "user", "content": "olá", "name": "Ana"}])
    assert {k: plain[k] for k in ("kind", "source", "data")} == {
        "kind": "message", "source": "user", "data": {"participant": {"display_name": "User"}, "message": "oi"}}
    assert named["data"] == {"participant": {"display_name": "Ana"}, "message": "olá"}


def test_an_assistant_item_becomes_an_assistant_message_event():
    """model-calls.md §11.2: content or "", display_name "Assistant"; no toolCalls key without tool calls."""
    [spoken, silent, empty_calls] = history_to_events([
        {"role": "assistant", "content": "Oi!"}, {"role": "assistant", "content": None},
        {"role": "assistant", "content": "x", "tool_calls": []}])
    assert (spoken["kind"], spoken["source"]) == ("message", "assistant")
    assert spoken["data"] == {"participant": {"display_name": "Assistant"}, "message": "Oi!"}
    assert silent["data"]["message"] == ""
    assert "toolCalls" not in empty_calls["data"]


def test_an_assistant_items_tool_calls_ride_along_as_tool_calls():
    """model-calls.md §11.2: `toolCalls` carries the item's tool_calls when non-empty."""
    calls = [{"id": "c1", "name": "buscar", "arguments": {"q": "x"}, "thoughtSignature": "sig"}]
    [event] = history_to_events([{"role": "assistant", "content": None, "tool_calls": calls,
                                  "reasoning": "because", "reasoningDetails": [1]}])
    assert event["data"] == {"participant": {"display_name": "Assistant"}, "message": "", "toolCalls": calls}


def test_a_tool_item_becomes_a_tool_event():
    """model-calls.md §11.2: source "agent", one ToolCall with empty arguments and the content as result data."""
    [event] = history_to_events([{"role": "tool", "tool_call_id": "c1", "name": "buscar",
                                  "content": {"ok": True}}])
    assert {k: event[k] for k in ("kind", "source", "data")} == {
        "kind": "tool", "source": "agent",
        "data": {"tool_calls": [{"tool_id": "c1", "arguments": {}, "result": {"data": {"ok": True}}}]}}


def test_a_system_item_becomes_a_system_message_event():
    """model-calls.md §11.2."""
    [event] = history_to_events([{"role": "system", "content": "Resumo."}])
    assert (event["kind"], event["source"], event["data"]) == (
        "message", "system", {"participant": {"display_name": "System"}, "message": "Resumo."})


def test_events_are_stamped_with_the_current_utc_time():
    """model-calls.md §11.2: timestamp is the current UTC time, ISO with milliseconds and Z (one stamp per call,
    inferred)."""
    before = datetime.now(timezone.utc).replace(microsecond=0)
    events = history_to_events([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    after = datetime.now(timezone.utc)
    stamps = {event["timestamp"] for event in events}
    assert len(stamps) == 1
    [stamp] = stamps
    assert ISO_TEXT.fullmatch(stamp)
    assert before <= datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= after


def test_an_empty_history_gives_no_events():
    """model-calls.md §11.2."""
    assert history_to_events([]) == []


# Malformed history items (name, history, index, reason): the test that reads them follows EVENT_ERRORS below.
HISTORY_ERRORS = [
    ("not-a-dict", ["oi"], 0, "expected an object"),
    ("unknown-role", [{"role": "bot", "content": "x"}], 0, 'unknown role "bot"'),
    ("no-role", [{"content": "x"}], 0, "unknown role missing"),
    ("user-content-none", [{"role": "user", "content": None}], 0, "a user item needs text content"),
    ("user-content-list", [{"role": "user", "content": ["x"]}], 0, "a user item needs text content"),
    ("user-name-number", [{"role": "user", "content": "x", "name": 5}], 0, "name must be text"),
    ("assistant-content-number", [{"role": "assistant", "content": 5}], 0, "content must be text or null"),
    ("assistant-calls-not-list", [{"role": "assistant", "content": "x", "tool_calls": {}}], 0,
     "tool_calls must be a list"),
    ("assistant-call-no-id", [{"role": "assistant", "content": None, "tool_calls": [{"name": "t", "arguments": {}}]}],
     0, "tool_calls[0] needs an id, a name and an arguments object"),
    ("assistant-call-arguments-text",
     [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "t", "arguments": "{}"}]}],
     0, "tool_calls[0] needs an id, a name and an arguments object"),
    ("tool-no-call-id", [{"role": "tool", "name": "t", "content": "x"}], 0, "needs a tool_call_id and a name"),
    ("tool-no-name", [{"role": "tool", "tool_call_id": "c", "content": "x"}], 0, "needs a tool_call_id and a name"),
    ("system-content-missing", [{"role": "system"}], 0, "a system item needs text content"),
    ("second-item", [{"role": "user", "content": "ok"}, {"role": "user"}], 1, "a user item needs text content"),
]


@pytest.mark.parametrize("history", [None, {"role": "user"}, "oi", ({"role": "user", "content": "x"},)])
def test_history_to_events_takes_a_list(history):
    """model-calls.md §11.2: the argument must be a list."""
    with pytest.raises(ValueError, match="takes a list"):
        history_to_events(history)


# events_to_history -------------------------------------------------------------------------------

def message_event(source, message, **data):
    return {"kind": "message", "source": source, "timestamp": "2026-09-20T10:00:00.000Z",
            "data": {"message": message, **data}}


def test_a_user_message_becomes_a_user_item_with_a_name_only_when_not_user():
    """model-calls.md §11.2: `name` when the participant's display name exists and is not "User"."""
    history = events_to_history([
        message_event("user", "oi"),
        message_event("user", "oi", participant={"display_name": "User"}),
        message_event("user", "oi", participant={"display_name": "Ana"}),
        message_event("user", "", participant={}),
    ])
    assert history == [{"role": "user", "content": "oi"}, {"role": "user", "content": "oi"},
                       {"role": "user", "content": "oi", "name": "Ana"}, {"role": "user", "content": ""}]


def test_an_assistant_message_becomes_an_assistant_item():
    """model-calls.md §11.2: content is the message or None; tool_calls from toolCalls when non-empty."""
    calls = [{"id": "c1", "name": "buscar", "arguments": {}}]
    assert events_to_history([message_event("assistant", "Oi!"), message_event("assistant", ""),
                              message_event("assistant", "", toolCalls=calls),
                              message_event("assistant", "x", toolCalls=[])]) == [
        {"role": "assistant", "content": "Oi!"}, {"role": "assistant", "content": None},
        {"role": "assistant", "content": None, "tool_calls": calls}, {"role": "assistant", "content": "x"}]


def test_a_system_message_becomes_a_system_item():
    """model-calls.md §11.2."""
    assert events_to_history([message_event("system", "Resumo.")]) == [{"role": "system", "content": "Resumo."}]


def test_a_tool_event_becomes_one_tool_item_from_its_first_call():
    """model-calls.md §11.2: tool_call_id and name are the first call's tool_id; further calls are dropped."""
    event = {"kind": "tool", "source": "agent", "data": {"tool_calls": [
        {"tool_id": "buscar", "arguments": {"q": 1}, "result": {"data": {"ok": True}, "meta": {"ms": 3}}},
        {"tool_id": "outro", "arguments": {}, "result": {"data": 2}}]}}
    assert events_to_history([event]) == [{"role": "tool", "tool_call_id": "buscar", "name": "buscar",
                                           "content": {"ok": True}}]


def test_a_tool_call_without_a_result_gives_null_content():
    """model-calls.md §11.2 (inferred): only tool_id is required of the first call; no result reads as null."""
    event = {"kind": "tool", "source": "agent", "data": {"tool_calls": [{"tool_id": "t"}]}}
    assert events_to_history([event]) == [{"role": "tool", "tool_call_id": "t", "name": "t", "content": None}]


def test_a_status_event_becomes_a_system_item():
    """model-calls.md §11.2: content is the status, or "Status update"."""
    assert events_to_history([{"kind": "status", "source": "system", "data": {"status": "Transferido"}},
                              {"kind": "status", "source": "agent", "data": {}},
                              {"kind": "status", "source": "agent", "data": {"status": ""}}]) == [
        {"role": "system", "content": "Transferido"}, {"role": "system", "content": "Status update"},
        {"role": "system", "content": "Status update"}]


def test_history_survives_a_round_trip_through_events():
    """model-calls.md §11.2: the two helpers are inverses for items they both carry."""
    history = [{"role": "system", "content": "Resumo."}, {"role": "user", "content": "oi", "name": "Ana"},
               {"role": "user", "content": "tudo bem?"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c1", "name": "buscar", "arguments": {"q": "x"}}]},
               {"role": "tool", "tool_call_id": "c1", "name": "c1", "content": "achei"},
               {"role": "assistant", "content": "Achei!"}]
    assert events_to_history(history_to_events(history)) == history


EVENT_ERRORS = [
    ("not-a-dict", ["x"], 0, "expected an object"),
    ("no-kind", [{"source": "user", "data": {"message": "x"}}], 0, "an event needs kind, source and data"),
    ("no-source", [{"kind": "message", "data": {"message": "x"}}], 0, "an event needs kind, source and data"),
    ("no-data", [{"kind": "message", "source": "user"}], 0, "an event needs kind, source and data"),
    ("data-not-object", [{"kind": "message", "source": "user", "data": "x"}], 0, 'data is "x", expected an object'),
    ("no-message", [{"kind": "message", "source": "user", "data": {}}], 0, "a message event needs a message"),
    ("message-not-text", [message_event("user", None)], 0, "a message event needs a message"),
    ("other-source", [message_event("agent", "x")], 0, 'a message from "agent" has no history role'),
    ("tool-calls-empty", [{"kind": "tool", "source": "agent", "data": {"tool_calls": []}}], 0,
     "a tool event needs a non-empty tool_calls list"),
    ("tool-calls-missing", [{"kind": "tool", "source": "agent", "data": {}}], 0,
     "a tool event needs a non-empty tool_calls list"),
    ("tool-id-missing", [{"kind": "tool", "source": "agent", "data": {"tool_calls": [{"result": {"data": 1}}]}}], 0,
     "tool_calls[0] needs a tool_id"),
    ("tool-result-text", [{"kind": "tool", "source": "agent", "data": {"tool_calls": [{"tool_id": "t",
                                                                                       "result": "x"}]}}], 0,
     "tool_calls[0].result must be an object"),
    ("assistant-tool-calls-not-list", [message_event("assistant", "x", toolCalls="c")], 0,
     "toolCalls must be a list"),
    ("status-not-text", [{"kind": "status", "source": "agent", "data": {"status": 5}}], 0, "status must be text"),
    ("unknown-kind", [{"kind": "note", "source": "agent", "data": {}}], 0, 'unknown kind "note"'),
    ("third-event", [message_event("user", "a"), message_event("system", "b"), {"kind": "x"}], 2,
     "an event needs kind, source and data"),
]


@pytest.mark.parametrize("convert, what, items, index, reason", [
    *[pytest.param(history_to_events, "history item", h, i, r, id=f"history-{name}")
      for name, h, i, r in HISTORY_ERRORS],
    *[pytest.param(events_to_history, "event", e, i, r, id=f"event-{name}") for name, e, i, r in EVENT_ERRORS],
])
def test_a_malformed_history_item_or_event_raises_value_error_naming_its_index(convert, what, items, index, reason):
    """model-calls.md §11.2: the message starts `Error converting history item at index <i>: ` (or `event`)
    then the reason, in history_to_events (HISTORY_ERRORS) and events_to_history (EVENT_ERRORS) alike."""
    with pytest.raises(ValueError) as caught:
        convert(items)
    message = str(caught.value)
    assert message.startswith(f"Error converting {what} at index {index}: ")
    assert reason in message


@pytest.mark.parametrize("events", [None, {"kind": "message"}, "x"])
def test_events_to_history_takes_a_list(events):
    """model-calls.md §11.2: the argument must be a list."""
    with pytest.raises(ValueError, match="takes a list"):
        events_to_history(events)
