"""Values the customer must say (flows.md §2.4b, runtime.md §3.5.1 rule 4b): a field with
``"evidence": "message"`` keeps a model-given value only when the customer's own message says it."""
import pytest

import falai as F
from falai import FlowConfigurationError, ScriptedProvider, falai

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both

FIELDS = {
    "pedido": {"type": "string", "description": "The order to cancel", "extract": "never"},
    "conta": {"type": "string", "ask": "Ask for the account id.", "evidence": "message"},
    "confirma": {"type": "boolean", "ask": "Ask whether to cancel it.", "extract": "anywhere",
                 "evidence": "message"},
}


def agent_with(understand):
    """Asks for the account, then for a yes (read by the understand call), then cancels."""
    f = falai().fields(FIELDS)
    flow = f.flow({"id": "cancela", "name": "Cancel", "on": [{"message": ["wants to cancel"]}], "steps": [
        {"id": "quem", "collect": ["conta"]},
        {"id": "sim", "collect": ["confirma"]},
        {"id": "fim", "if": {"equals": {"confirma": True}}, "then": "feito", "else": "nada"},
        {"id": "feito", "say": "Cancelled for {{data.conta}}.", "then": "end"},
        {"id": "nada", "say": "Nothing changed."}]})
    speak = [{"message": "Your account id?"}, {"message": "Cancel it?"}, {"message": "Cancel it, then?"}]
    return f.agent(name="Ana", flows=[flow],
                   provider=ScriptedProvider(script={"understand": understand, "speak": speak}))


def play(agent, *messages):
    r = None
    for n, text in enumerate(messages):
        r = agent.turn(session_id="s", session=r.session if r else None, message=text, id=f"m{n}")
    return r


def unsaid(result):
    return [o.detail for o in result.outcomes if o.code == "unsaid"]


def test_an_account_id_the_customer_never_wrote_is_dropped():
    agent = agent_with([{"flows": {"cancela": 95}}, {"fields": {"conta": "ana_77"}}])
    r = play(agent, "I want to cancel", "it's the one my sister uses")
    assert "conta" not in r.session.data and unsaid(r) == ["conta"]
    assert r.session.runs[0].step_id == "quem"              # still asking for the account


def test_an_account_id_the_customer_wrote_is_kept_whatever_its_case():
    agent = agent_with([{"flows": {"cancela": 95}}, {"fields": {"conta": "ana_77"}}])
    r = play(agent, "I want to cancel", "My account is ANA_77.")
    assert r.session.data["conta"] == "ana_77" and unsaid(r) == []


def test_a_yes_the_model_invents_does_not_confirm():
    """The customer asked a question; a model that reads it as a yes cannot cancel anything."""
    agent = agent_with([{"flows": {"cancela": 95}, "fields": {"conta": "ana_77"}},
                        {"fields": {"confirma": True}}])
    r = play(agent, "cancel for ana_77", "how much would I get back?")
    assert "confirma" not in r.session.data and unsaid(r) == ["confirma"]
    assert [m.text for m in r.messages] != ["Cancelled for ana_77."]


@pytest.mark.parametrize("words, value, outcome", [
    ("yes, please go ahead", True, "Cancelled for ana_77."),
    ("Sim, pode cancelar", True, "Cancelled for ana_77."),
    ("no, leave it", False, "Nothing changed."),
])
def test_the_customers_own_yes_or_no_is_kept(words, value, outcome):
    agent = agent_with([{"flows": {"cancela": 95}, "fields": {"conta": "ana_77"}},
                        {"fields": {"confirma": value}}])
    r = play(agent, "cancel for ana_77", words)
    assert r.session.data["confirma"] is value and [m.text for m in r.messages] == [outcome]


@pytest.mark.parametrize("message, yes, no", [
    ("yes", True, False), ("Yes, that's correct.", True, False), ("ok", True, False),
    ("Sure, go ahead", True, False), ("sim", True, False), ("Confirmo.", True, False),
    ("no", False, True), ("Not yet, wait", False, True), ("não", False, True), ("don't", False, True),
    ("yes... actually no", False, False), ("what is the refund?", False, False), ("", False, False),
])
def test_a_boolean_needs_a_yes_word_or_a_no_word_and_not_both(message, yes, no):
    assert F.says_value({"type": "boolean"}, True, message) is yes
    assert F.says_value({"type": "boolean"}, False, message) is no


@pytest.mark.parametrize("definition, value, message, said", [
    ({"type": "string"}, "HAT123", "flight hat123 please", True),
    ({"type": "string"}, "HAT12", "flight hat123 please", False),           # a part of a word is not it
    ({"type": "integer"}, 3, "three bags, 3 in all", True),
    ({"type": "integer"}, 3, "13 bags", False),
    ({"type": "string", "format": "phone"}, "+5511999998888", "call +55 (11) 99999-8888", True),
    ({"type": "string", "format": "email"}, "ana@example.com", "it's Ana@Example.com", True),
])
def test_text_and_numbers_must_appear_in_the_message(definition, value, message, said):
    assert F.says_value(definition, value, message) is said


def test_a_value_on_a_turn_without_a_message_is_never_said():
    """A wake or an event has no customer words: a speak-envelope value for such a field is dropped."""
    f = falai().fields({"conta": {"type": "string", "ask": "Ask the account.", "evidence": "message"}})
    flow = f.flow({"id": "p", "name": "P", "steps": [{"id": "q", "collect": ["conta"]}]})
    agent = f.agent(name="Ana", flows=[flow], provider=ScriptedProvider(script={
        "speak": [{"message": "Your account?", "conta": "ana_77"}]}))
    r = agent.turn(session_id="s", start={"flow": "p", "key": "k"})
    assert r.session.data == {} and unsaid(r) == ["conta"]


def test_evidence_takes_only_message():
    with pytest.raises(FlowConfigurationError, match='evidence is "words", not "message"'):
        falai().fields({"x": {"type": "string", "evidence": "words"}}).agent(
            name="A", provider=ScriptedProvider(), flows=[])
