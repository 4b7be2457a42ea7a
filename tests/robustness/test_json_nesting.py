"""Model text nested past READ_NESTING is refused before json.loads reads it (falai_calls.nests_past).

json.loads recurses in C; that deep, a finalizer the garbage collector runs meanwhile has no stack
left and fails, so every reader of model output asks nests_past first.
"""
import json

import pytest
from hypothesis import given, strategies as st

from falai_base import READ_NESTING, find_json_object, lenient_loads, nests_past
from falai_providers import parse_tool_args

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='ab"\\[]{}', max_size=6))


def depth(value):
    """Levels of lists and dicts in a parsed JSON value."""
    if isinstance(value, (list, dict)):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((depth(item) for item in items), default=0)
    return 0


def nested(levels, inner, dicts):
    value = inner
    for level in range(levels):
        value = {"k": value} if dicts and level % 2 else [value]
    return value


@given(levels=st.integers(0, 2 * READ_NESTING), inner=scalars, dicts=st.booleans(),
       limit=st.sampled_from([1, 8, READ_NESTING]))
def test_nests_past_agrees_with_the_parsed_depth(levels, inner, dicts, limit):
    text = json.dumps(nested(levels, inner, dicts))
    assert nests_past(text, limit) == (depth(json.loads(text)) > limit)


@pytest.mark.parametrize("text", ['"[[[["', '"\\"[[[["', '["\\\\", "[[[{{"]', '{"a": "}}}}[[[["}'])
def test_brackets_inside_strings_do_not_count(text):
    assert text.count("[") + text.count("{") > 1          # past the quick count: the scan decides
    assert depth(json.loads(text)) <= 1 and not nests_past(text, 1)


def test_every_reader_refuses_deep_text_without_reading_it():
    deep = "[" * (READ_NESTING + 1) + "]" * (READ_NESTING + 1)
    with pytest.raises(RecursionError, match="not read"):
        lenient_loads(deep)
    assert find_json_object('{"message": ' + deep + "}") is None
    assert parse_tool_args('{"a": ' + deep + "}", "t") == {}
    shallow = "[" * READ_NESTING + "]" * READ_NESTING
    assert depth(lenient_loads(shallow)) == READ_NESTING
