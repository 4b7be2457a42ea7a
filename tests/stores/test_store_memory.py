"""MemoryStore specifics (persistence.md §3.3); the shared conformance list is in test_stores.py."""
import json

import pytest

from falai import MemoryStore, Session, SessionConflictError


def test_the_spec_example_runs_as_written():
    """persistence.md §3.3: the example."""
    store = MemoryStore()
    assert store.load("s1") is None
    fresh = Session(id="s1", data={"nome": "Ana"})
    saved = store.save(fresh, 0)
    assert (saved.version, fresh.version) == (1, 0)
    assert store.load("s1").to_dict() == {**fresh.to_dict(), "version": 1}
    with pytest.raises(SessionConflictError) as caught:
        store.save(fresh, 0)
    assert (caught.value.expected_version, caught.value.actual_version) == (0, 1)


def test_rows_are_version_and_compact_json_text():
    """persistence.md §3.3, §3.2: rows are id -> (version, JSON text), encoded compactly with non-ASCII kept."""
    store = MemoryStore()
    store.save(Session(id="s1", data={"nome": "João"}), 0)
    version, text = store._rows["s1"]
    assert version == 1 and json.loads(text)["version"] == 1
    assert '"nome":"João"' in text and ", " not in text


def test_load_returns_a_fresh_object_each_time():
    """persistence.md §3.3: rows are read back through JSON, so a loaded session shares nothing with the saved one
    or with another load."""
    store = MemoryStore()
    data = {"itens": [1]}
    store.save(Session(id="s1", data=data), 0)
    first = store.load("s1")
    first.data["itens"].append(2)
    assert store.load("s1").data == {"itens": [1]} and data == {"itens": [1]}


def test_clear_drops_every_session():
    """persistence.md §3.3: clear() drops every session; an insert then succeeds again."""
    store = MemoryStore()
    store.save(Session(id="s1"), 0)
    store.save(Session(id="s2"), 0)
    store.clear()
    assert store.load("s1") is None and store.load("s2") is None
    assert store.save(Session(id="s1"), 0).version == 1
