"""The protocol passes (docs/guide/development.md): a test marked ``protocols("lean", "v4")`` takes
the run's ``--protocol`` as its ``protocol`` parameter and builds its agents with it, and conftest's
guard fails a test of a protocol that builds an agent without it."""
import pytest

from conftest import agents_built_without, build


@pytest.mark.protocols("lean", "v4")
def test_a_test_of_either_protocol_runs_under_the_runs_protocol_and_builds_its_agents_so(
        protocol, request):
    agent, _, _ = build([], protocol=protocol)
    assert protocol == request.config.getoption("protocol")
    assert agent.protocol == protocol


@pytest.mark.parametrize("other", ["lean", "v4"])
def test_the_guard_lists_each_agent_built_without_the_tests_protocol(monkeypatch, other):
    wanted = "v4" if other == "lean" else "lean"
    strays = agents_built_without(wanted, monkeypatch)
    build([], protocol=wanted)
    assert strays == []
    build([])
    build([], protocol=other)
    assert [stray.split(" ", 1)[1] for stray in strays] == ["(protocol='<not given>')",
                                                            f"(protocol={other!r})"]
    assert all(stray.split(" ", 1)[0].split(":")[0].endswith("test_protocol_passes.py") for stray in strays)


def test_the_guard_leaves_what_is_built_unchanged(monkeypatch):
    agents_built_without("v4", monkeypatch)
    assert build([])[0].protocol == "lean"
    assert build([], protocol="v4")[0].protocol == "v4"
