"""The linear readers of model output read exactly what the spec's plain algorithms read (issue 8).

Each reference below is the spec's algorithm written the direct way (quadratic on hostile
input, which is why the engine no longer uses it); on every generated text the engine's
reader must give the same answer.
"""
from __future__ import annotations

import json
import re

from hypothesis import given, strategies as st

from falai import Scope, ScriptedProvider, falai, render
from falai_base import (JS_PREFIXED, PLACEHOLDER, _fill_placeholders, _tidy, find_json_object, js_number,
                        lenient_loads)
from falai_calls import StreamDecoder, compact_history
from fuzz_scenarios import fuzz_settings

READER_SETTINGS = fuzz_settings(400)


def reference_find_json_object(text):
    """model-calls.md §2.9 as written: each "{", its matching "}", a lenient parse of the slice."""
    start = text.find("{")
    while start >= 0:
        depth, in_string, escaped, end = 0, False, False, -1
        for i in range(start, len(text)):
            c = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        if end >= 0:
            try:
                value = lenient_loads(text[start:end + 1])
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    return None


# Texts made of the pieces JSON is made of, so that objects, near-objects and traps all come up.
json_pieces = st.sampled_from(['{', '}', '[', ']', '"', ':', ',', '\\', ' ', '\n', '\t', '\x01', 'a', 'u', '0', '1',
                               '-', '.', 'e', 'E', '+', 'null', 'true', 'fals', 'NaN', '-Infinity', '"a"', '"k":',
                               '{"a":', '{}', '[]', '\\"', '\\u00e9', '\\ud83d', 'é', '```', 'json'])
json_texts = st.one_of(
    st.lists(json_pieces, max_size=30).map("".join),
    st.builds(lambda pre, value, post: pre + json.dumps(value) + post,
              st.text(max_size=10), st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                                                 lambda inner: st.lists(inner, max_size=3)
                                                 | st.dictionaries(st.text(max_size=3), inner, max_size=3)),
              st.lists(json_pieces, max_size=8).map("".join)))


@READER_SETTINGS
@given(json_texts)
def test_find_json_object_finds_what_the_spec_algorithm_finds(text):
    """model-calls.md §2.9: the first balanced slice that parses to a dict, whatever surrounds it."""
    assert json.dumps(find_json_object(text)) == json.dumps(reference_find_json_object(text))


def test_find_json_object_passes_over_an_object_too_deep_to_parse():
    """A slice json cannot parse for its depth is passed over like one that does not parse: the
    outermost nested object json can still read is taken."""
    found = find_json_object("x " + '{"a":' * 5000 + "1" + "}" * 5000)
    inner, levels = found, 0
    while isinstance(inner, dict):
        inner, levels = inner["a"], levels + 1
    assert inner == 1 and 0 < levels < 5000


def test_find_json_object_reads_an_integer_json_refuses_as_a_failed_slice():
    """An integer beyond int's digit limit makes json refuse the slice; the next object is taken."""
    assert find_json_object('{"a": ' + "1" * 5000 + '} {"b": 2}') == {"b": 2}
    assert find_json_object('{"a": {"b": ' + "1" * 5000 + '}, "c": {"d": 1}}') == {"d": 1}


JS_DECIMAL_AS_WRITTEN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def reference_js_number(text):
    text = text.strip().replace(",", ".", 1)
    if JS_PREFIXED.fullmatch(text):
        return int(text, 0)
    if JS_DECIMAL_AS_WRITTEN.fullmatch(text):
        return float(text)
    return None


@READER_SETTINGS
@given(st.lists(st.sampled_from(["1", "0", "9", ".", ",", "e", "E", "+", "-", " ", "x", "0x", "f", "_"]),
                max_size=14).map("".join))
def test_js_number_reads_what_the_grammar_as_written_reads(text):
    """model-calls.md §4: JavaScript's Number(string), the first "," read as "."."""
    assert repr(js_number(text)) == repr(reference_js_number(text))


def reference_tidy(text):
    text = re.sub(r"(?<=\S)[ \t]{2,}", " ", text)
    text = re.sub(r"[ \t]+(?=[,.;:!?…])", "", text)
    return re.sub(r"[ \t]+$", "", text, flags=re.M)


template_texts = st.lists(st.sampled_from(["{", "}", "{{", "}}", " ", "  ", "\t", "\n", "a", ".", ",", "…", "!",
                                           "data.x", "data.y", "\u00a0", "\r"]), max_size=24).map("".join)


@READER_SETTINGS
@given(template_texts)
def test_tidying_collapses_exactly_what_the_three_rules_collapse(text):
    """flows.md §8.2: a blank placeholder's gaps are tidied; the rules are the same, applied in one pass."""
    assert _tidy(text) == reference_tidy(text)


@READER_SETTINGS
@given(template_texts)
def test_placeholders_are_the_ones_re_sub_finds(text):
    """flows.md §8: the same placeholders as ``PLACEHOLDER.sub``, in the same order, rendered the same."""
    def mark(match):
        return f"<{match.group(1)}>"

    assert _fill_placeholders(text, mark) == PLACEHOLDER.sub(mark, text)
    values, blank = {"data.x": "", "data.y": "7"}, []

    def fill(match):
        name = match.group(1)
        blank.extend([True] if values.get(name) == "" else [])
        return values.get(name, match.group(0))

    expected = PLACEHOLDER.sub(fill, text)
    assert render(text, Scope(data={"x": "", "y": 7})) == (reference_tidy(expected) if blank else expected)


def reference_stream(pushes):
    """What a decoder that rescans the whole text on every push returns (one fresh decoder per push)."""
    out, previous = [], ""
    for accumulated in pushes:
        text, _ = StreamDecoder().push(accumulated)
        out.append((text, text[len(previous):] if text.startswith(previous) else text))
        previous = text
    return out


stream_texts = st.lists(st.sampled_from(['{', '}', '"', 'message', '"message"', ':', ',', ' ', '\\', 'u', '00e9',
                                         'd83d', '\\ude00', 'n', 'a', '`', '```', '\n', '[', ']', 'Oi']),
                        max_size=20).map("".join)


@READER_SETTINGS
@given(stream_texts, st.lists(st.integers(1, 6), min_size=1, max_size=12))
def test_the_stream_decoder_reads_incrementally_what_a_fresh_read_gives(text, steps):
    """model-calls.md §8: each push reads only the new characters, and gives what one read of the whole gives."""
    cuts, at = [], 0
    for step in steps:
        at = min(len(text), at + step)
        cuts.append(text[:at])
    cuts.append(text)
    decoder = StreamDecoder()
    assert [decoder.push(part) for part in cuts] == reference_stream(cuts)


def reference_compaction_fallback(history, max_tokens, keep):
    """model-calls.md §9.3-§9.4 as written, for a summary call that fails: (history, calls)."""
    from falai_calls import estimate_tokens
    threshold = max_tokens * 0.8
    if estimate_tokens(history) < threshold:
        return history, 0
    edge = len(history) - min(keep, len(history))
    budgeted = [({**item, "content": f"{item['content'][:5000]}\n\n[Truncated: {len(item['content'])} chars total, "
                                     f"showing first 5000]"} if i < edge and item["role"] == "tool"
                 and len(item["content"]) > 5000 else item) for i, item in enumerate(history)]
    if estimate_tokens(budgeted) < threshold:
        return budgeted, 0
    micro = [({**item, "content": re.sub(r"\s+", " ", item["content"]).strip()} if i < edge and item["role"] == "tool"
              else item) for i, item in enumerate(budgeted)]
    if estimate_tokens(micro) < threshold:
        return micro, 0
    while 0 < edge < len(micro) and micro[edge]["role"] == "tool":
        edge -= 1
    if edge == 0:
        return micro, 0
    older, kept = micro[:edge], list(micro[edge:])
    for item in reversed(older):
        if estimate_tokens([item] + kept) >= threshold:
            break
        kept.insert(0, item)
    return kept, 1


@READER_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=30)), max_size=30),
       st.integers(10, 200), st.integers(2, 6))
def test_the_compaction_fallback_keeps_what_the_item_by_item_rule_keeps(items, max_tokens, keep):
    """model-calls.md §9.4: keep the window, then older items newest first while the estimate stays below."""
    history = [{"role": role, "content": text} for role, text in items]
    agent = falai().agent(name="Ana", provider=ScriptedProvider(script={"compaction": [RuntimeError("x")]}),
                          compaction={"maxTokens": max_tokens, "preserveRecentCount": keep})
    trimmed, calls, _ = compact_history(agent, history)
    assert (trimmed, calls) == reference_compaction_fallback(history, max_tokens, keep)


def test_an_extracted_nan_or_infinity_is_dropped_so_the_session_still_saves():
    """model-calls.md §3.5 extract: json reads NaN and Infinity, JSON has neither; such an entry is
    dropped like a blank one, so a model cannot make a session unsavable."""
    import sqlite3
    from falai_stores import SQLiteStore
    f = falai().fields({})
    flows = [{"id": "preco", "name": "Preço", "on": [{"mention": ["preço"], "extract": {
        "quanto": {"type": "number"}, "onde": {"type": "string"}}}], "steps": [{"id": "w", "wait": "1h"}]}]
    replies = [{"mentions": {"preco": True}, "extract": {"preco": {"quanto": float("nan"), "onde": "Rio"}}},
               '{"mentions": {"preco": true}, "extract": {"preco": {"quanto": [1, -Infinity], "onde": "Rio"}}}']
    for reply in replies:
        agent = f.agent(name="Ana", provider=ScriptedProvider(script={"understand": [reply]}), flows=flows,
                        idle="silent")
        result = agent.turn(session_id="s1", message="quanto custa?", id="m1")
        assert [run.input for run in result.session.runs] == [{"onde": "Rio"}]
        store = SQLiteStore(sqlite3.connect(":memory:"), table="nan_sessions")
        store.initialize()
        store.save(result.session, expected_version=0)
        assert store.load("s1").runs[0].input == {"onde": "Rio"}
        store.close()
