"""Compaction: estimate, the three cheap layers, the summary call, the fallback (model-calls.md §9)."""
import logging

import pytest

import falai as F
import falai_calls
from falai import ProviderError, ScriptedProvider, TokenUsage

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both (issue 11)


def make_agent(compaction, script=None, provider=None):
    return F.Agent(name="Ana", provider=provider or ScriptedProvider(script=script or {}), compaction=compaction)


def user(text):
    return {"role": "user", "content": text}


def tool(text, call_id="c"):
    return {"role": "tool", "tool_call_id": call_id, "name": "t", "content": text}


# §9.3: the estimate ----------------------------------------------------------------------------

def test_estimate_counts_content_name_and_four_per_item_rounded_up():
    """model-calls.md §9.3: strings as is, other content as compact JSON, None as ""."""
    history = [{"role": "user", "content": "abcdef", "name": "Bia"},               # 6 + 3 + 4
               {"role": "assistant", "content": None},                            # 0 + 4
               {"role": "tool", "name": 5, "content": {"a": [1, True]}}]          # 16 + 4
    assert falai_calls.estimate_tokens(history) == -(-(13 + 4 + len('{"a":[1,true]}') + 4) // 4) == 9
    assert falai_calls.estimate_tokens([]) == 0


# §9.2: when nothing happens --------------------------------------------------------------------

@pytest.mark.parametrize("config", [None, {"maxTokens": 10, "enabled": False}])
def test_no_config_or_disabled_leaves_history_alone(config):
    """model-calls.md §9.2: nothing happens without a config or with enabled False."""
    history = [user("x" * 1000)] * 10
    agent = make_agent(config)
    assert falai_calls.compact_history(agent, history) == (history, 0, None)
    assert agent.provider.calls == []


def test_empty_history_is_left_alone():
    """model-calls.md §9.2."""
    agent = make_agent({"maxTokens": 1})
    assert falai_calls.compact_history(agent, []) == ([], 0, None)


def test_history_below_the_threshold_is_unchanged():
    """model-calls.md §9.3 layer none: estimate already below maxTokens * compactionThreshold."""
    history = [user("x" * 36)] * 4                      # 4 * 40 / 4 = 40 tokens
    agent = make_agent({"maxTokens": 51})               # threshold 40.8
    assert falai_calls.compact_history(agent, history) == (history, 0, None)


def test_an_estimate_equal_to_the_threshold_is_not_below_it():
    """model-calls.md §9.3: a layer wins only when the estimate is strictly below the threshold."""
    history = [user("x" * 36)] * 4                      # 40 tokens
    agent = make_agent({"maxTokens": 50, "preserveRecentCount": 2}, script={"compaction": [{"message": "resumo"}]})
    compacted, calls, _ = falai_calls.compact_history(agent, history)
    assert calls == 1 and compacted[0]["role"] == "system"


# §9.3: the cheap layers ------------------------------------------------------------------------

def test_tool_result_budget_cuts_old_tool_results_with_the_exact_note():
    """model-calls.md §9.3: cut to maxToolResultChars, a blank line, `[Truncated: N chars total, showing first M]`."""
    history = [user("q"), tool("A" * 400, "c1"), user("r"), tool("B" * 400, "c2"), user("s"), user("t")]
    config = {"maxTokens": 200, "preserveRecentCount": 3, "maxToolResultChars": 10}
    compacted, calls, usage = falai_calls.compact_history(make_agent(config), history)
    assert (calls, usage) == (0, None)
    assert compacted[1] == {"role": "tool", "tool_call_id": "c1", "name": "t",
                            "content": "AAAAAAAAAA\n\n[Truncated: 400 chars total, showing first 10]"}
    assert compacted[3] == history[3]                   # inside the preserved window: untouched
    assert history[1]["content"] == "A" * 400           # the caller's history is never changed


def test_micro_compact_collapses_whitespace_of_old_tool_results():
    """model-calls.md §9.3: every tool item before the window is whitespace-collapsed and stripped."""
    spaced = "  a" + " " * 200 + "b\n\n\tc  "
    history = [tool(spaced), tool("x  y"), user("u" * 20), user("v"), user("w")]
    config = {"maxTokens": 60, "preserveRecentCount": 2, "maxToolResultChars": 5000}
    compacted, calls, _ = falai_calls.compact_history(make_agent(config), history)
    assert calls == 0
    assert [item["content"] for item in compacted] == ["a b c", "x y", "u" * 20, "v", "w"]


def test_micro_compact_also_applies_over_the_truncation():
    """model-calls.md §9.3: the layers are cumulative; the note's blank line collapses too."""
    history = [tool("a  " * 200), user("v"), user("w")]
    # truncated alone: 21 tokens, not below the threshold of 20; collapsed as well: 19
    config = {"maxTokens": 25, "preserveRecentCount": 2, "maxToolResultChars": 20}
    compacted, calls, _ = falai_calls.compact_history(make_agent(config), history)
    assert calls == 0
    assert compacted[0]["content"] == "a a a a a a a [Truncated: 600 chars total, showing first 20]"


# §9.4: the summary call ------------------------------------------------------------------------

def test_auto_compact_summarizes_older_messages_into_one_system_item():
    """model-calls.md §9.4: one compaction call; [summary] + window; usage added; llm_calls 1."""
    usage = TokenUsage(50, 10, 0)
    provider = ScriptedProvider(script={"compaction": [{"message": "A pessoa pediu o preço."}]}, usage=usage)
    history = [user("oi " * 50), {"role": "assistant", "content": None, "tool_calls": []},
               tool({"preço": 420}), user("a"), {"role": "assistant", "content": "b"}]
    compacted, calls, got_usage = falai_calls.compact_history(
        make_agent({"maxTokens": 40, "preserveRecentCount": 2}, provider=provider), history)
    assert compacted == [{"role": "system", "content": "[Conversation Summary]\nA pessoa pediu o preço."},
                         user("a"), {"role": "assistant", "content": "b"}]
    assert (calls, got_usage) == (1, usage)
    request = provider.calls[0]
    assert request.schema_name == "compaction" and request.schema is None and request.system is None
    assert request.history == [] and request.context == {} and request.tools is None
    assert request.max_output_tokens == 1024
    intro, transcript = request.prompt.split("\n\n", 1)
    assert "summar" in intro.lower()
    assert transcript == ("[user]: " + "oi " * 50 + "\n[assistant]: \n" + '[tool]: {"preço":420}')


def test_the_window_never_opens_on_a_tool_result():
    """model-calls.md §9.3: the aligned edge moves left past tool items to their calling assistant item."""
    provider = ScriptedProvider(script={"compaction": [{"message": "resumo"}]})
    call_item = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "t", "arguments": {}}]}
    history = [user("x" * 400), call_item, tool("r1", "c1"), tool("r2", "c1"), user("y")]
    compacted, calls, _ = falai_calls.compact_history(make_agent({"maxTokens": 60, "preserveRecentCount": 2},
                                                       provider=provider), history)
    assert calls == 1
    assert compacted[1:] == [call_item, tool("r1", "c1"), tool("r2", "c1"), user("y")]
    assert provider.calls[0].prompt.endswith("[user]: " + "x" * 400)


def test_nothing_older_than_the_window_spends_no_call():
    """model-calls.md §9.3 (inferred): when the window is the whole history, a summary would buy nothing."""
    history = [user("x" * 400), user("y" * 400)]
    agent = make_agent({"maxTokens": 10, "preserveRecentCount": 2})
    assert falai_calls.compact_history(agent, history) == (history, 0, None)
    assert agent.provider.calls == []


@pytest.mark.parametrize("failure", [ProviderError("down", kind="overload"), RuntimeError("boom")])
def test_a_failed_summary_drops_the_oldest_messages_instead(failure, caplog):
    """model-calls.md §9.4: keep the window, add older items newest first while below the threshold.
    (A dry script queue is no failed call: it raises ScriptError, tests/robustness/test_scripted_strict.py.)"""
    script = {"compaction": [failure]}
    history = [user("a" * 96), user("b" * 16), user("c" * 16), user("d" * 96), user("e"), user("f")]
    agent = make_agent({"maxTokens": 50, "preserveRecentCount": 2}, script=script)   # threshold 40
    with caplog.at_level(logging.WARNING, logger="falai"):
        compacted, calls, usage = falai_calls.compact_history(agent, history)
    # window e, f = 2 + 2 tokens; d (25) fits -> 29; c (5) fits -> 34; b (5) would make 39 -> fits; a does not
    assert compacted == [user("b" * 16), user("c" * 16), user("d" * 96), user("e"), user("f")]
    assert (calls, usage) == (1, None)
    assert falai_calls.estimate_tokens(compacted) < 40
    assert any("summary" in r.getMessage() for r in caplog.records)


def test_fallback_stops_at_the_first_item_that_does_not_fit():
    """model-calls.md §9.4: stop at the first that does not fit, even if an older one would."""
    history = [user("a"), user("b" * 200), user("c"), user("d"), user("e")]
    agent = make_agent({"maxTokens": 50, "preserveRecentCount": 2}, script={"compaction": [RuntimeError("x")]})
    compacted, calls, _ = falai_calls.compact_history(agent, history)
    assert compacted == [user("c"), user("d"), user("e")] and calls == 1


def test_the_spec_example_spends_one_summary_call():
    """model-calls.md §9.5: 400 old messages, maxTokens 2000: one summary, the recent ones kept."""
    provider = ScriptedProvider(script={"compaction": [{"message": "A pessoa mandou muitas mensagens antigas."}]})
    history = [{"role": "user", "content": f"mensagem antiga número {i}"} for i in range(400)]
    compacted, calls, _ = falai_calls.compact_history(make_agent({"maxTokens": 2000}, provider=provider), history)
    assert calls == 1 and len(compacted) == 5 and compacted[-4:] == history[-4:]
    assert compacted[0]["content"].startswith("[Conversation Summary]\n")


def test_a_malformed_config_never_raises(caplog):
    """The interface: compact_history never raises; a config construction would have refused
    (here swapped in after construction) is skipped."""
    history = [user("x" * 100)] * 3
    with pytest.raises(ValueError, match=r"\[CompactionEngine\] maxTokens is \"lots\""):
        make_agent({"maxTokens": "lots"})
    agent = make_agent({"maxTokens": 1000})
    object.__setattr__(agent, "compaction", {"maxTokens": "lots"})     # past the freeze, as only a test may
    with caplog.at_level(logging.WARNING, logger="falai"):
        assert falai_calls.compact_history(agent, history) == (history, 0, None)
