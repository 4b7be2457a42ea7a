"""The protocol passes (docs/guide/development.md): a test marked ``protocols("lean", "v4")`` runs under
the run's ``--protocol``, every agent it builds runs under that protocol without the test saying so, and
conftest's guard fails a test whose agent ends up under another. The library's own default stays "lean"."""
import inspect

import falai
import pytest

from conftest import agents_built_under, agents_not_under, build


@pytest.mark.protocols("lean", "v4")
def test_a_marked_test_builds_every_agent_under_the_runs_protocol_and_the_library_is_unchanged(protocol, request):
    assert protocol == request.config.getoption("protocol")
    agent, _, _ = build([])
    direct = falai.Agent(name="Ana", provider=falai.ScriptedProvider(script={}))
    assert agent.protocol == direct.protocol == protocol
    assert type(agent.compiled.model_calls()).__name__ == {"lean": "Lean", "v4": "V4"}[protocol]
    # Meanwhile the library's signature and default are its own (no patched __kwdefaults__).
    assert inspect.signature(falai.Agent).parameters["protocol"].default == "lean"
    assert inspect.unwrap(falai.Agent.__init__).__kwdefaults__["protocol"] == "lean"


def test_an_unmarked_test_builds_under_the_librarys_default():
    assert build([])[0].protocol == "lean"
    assert not hasattr(falai.Agent.__init__, "__wrapped__")          # the marked tests' wrapper is gone


@pytest.mark.parametrize("other", ["lean", "v4"])
def test_the_guard_names_each_agent_built_under_another_protocol(monkeypatch, other):
    wanted = "v4" if other == "lean" else "lean"
    built = agents_built_under(wanted, monkeypatch)
    build([])
    build([], protocol=wanted)
    assert agents_not_under(wanted, built) == []
    build([], protocol=other)                                          # said at the build: kept, and named
    assert [agent.protocol for _, agent in built] == [wanted, wanted, other]
    strays = agents_not_under(wanted, built)
    assert [stray.split(" ", 1)[1] for stray in strays] == [f"(protocol={other!r})"]
    assert strays[0].split(":")[0].endswith("test_protocol_passes.py")
