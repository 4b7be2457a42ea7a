"""One owner for what an agent works out once (docs/guide/development.md, What an agent works out once).

``agent.compiled`` (``Compiled``, falai.py) owns every cache of the agent: its own parts, and the
protocol object (``ModelCalls``: ``Lean`` or ``V4``, falai_protocols) that keeps the parts of the
model calls. These tests read a built agent; tests/repository/test_cache_owners.py reads the source
(only each owner's methods read its caches).
"""
import pytest

import falai
import falai_calls
import falai_protocols


@pytest.mark.parametrize("protocol", ["lean", "v4"])
def test_an_agent_reaches_every_cache_through_agent_compiled(protocol):
    """The agent holds no cache-keeping object but ``agent.compiled``, and its protocol object is
    the one ``agent.compiled.model_calls()`` hands out, of the class its protocol names."""
    agent = falai.Agent(name="Ana", provider=falai.ScriptedProvider(script={}), protocol=protocol)
    keepers = [name for name, value in vars(agent).items()
               if isinstance(value, (falai.Compiled, falai_calls.ModelCalls))]
    assert keepers == ["compiled"]
    model_calls = agent.compiled.model_calls()
    assert type(model_calls) is falai_protocols.PROTOCOLS[protocol]
    assert agent.compiled.model_calls() is model_calls
    other = falai.Agent(name="Ana", provider=falai.ScriptedProvider(script={}), protocol=protocol)
    assert other.compiled.model_calls() is not model_calls         # per agent, never shared
    with pytest.raises(AttributeError, match="build a new Agent"):
        agent.model_calls = model_calls                           # the agent stays frozen


def test_a_turn_leaves_the_agent_as_it_was_built():
    """What a turn works out lands inside agent.compiled, never on the agent."""
    provider = falai.ScriptedProvider(script={"understand": [{"flows": {"hello": 90}}],
                                              "speak": [{"message": "Oi!"}]})
    agent = falai.Agent(name="Ana", provider=provider, fields={"nome": {"type": "string"}},
                        flows=[{"id": "hello", "on": [{"message": ["hello"]}],
                                "steps": [{"id": "q", "collect": ["nome"]}]}])
    before = dict(vars(agent))
    agent.turn(session_id="s1", message="hello", id="m1")
    assert vars(agent) == before and all(vars(agent)[name] is value for name, value in before.items())
