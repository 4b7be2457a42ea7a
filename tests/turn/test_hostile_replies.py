"""What a hostile or broken model cannot do (issue 29, the red-team pass): write a field its call was not
asked for (runtime.md §3.5.1 rule 2a, model-calls.md §3.5), leave a session no store saves (limits.md,
flows.md §2.4a), repeat a destructive call in one reply (model-calls.md §6.3a), or make a failed reply lose
what a tool did (model-calls.md §6.6, §10.2)."""
import pytest

from falai import FlowConfigurationError, MemoryStore, ProviderError, ScriptedProvider, Tool, falai

pytestmark = pytest.mark.protocols("lean", "v4")     # the same results under both


def hotel(script, **fields):
    """Review finding 1's agent: a city, then an offer that asks for a boolean confirmation."""
    f = falai().fields({"cidade": {"type": "string", "ask": "Ask which city."},
                        "nome": {"type": "string", "ask": "Ask the name."},
                        "confirma": {"type": "boolean"}, **fields})
    flow = f.flow({"id": "hotel", "name": "Hotel", "on": [{"message": ["wants to book a room"]}], "steps": [
        {"id": "onde", "collect": ["cidade"]},
        {"id": "quem", "collect": ["nome"]},
        {"id": "oferta", "prompt": "Give the price in {{data.cidade}} and ask whether to book.",
         "collect": ["confirma"]},
        {"id": "ok", "say": "Booked in {{data.cidade}} for {{data.nome}}!"}]})
    return f.agent(name="Ana", provider=ScriptedProvider(script=script), flows=[flow])


def dropped(result):
    """The dropped model values: `collect / skipped` lines with no run (runtime.md §3.5.1)."""
    return [(o.code, o.detail) for o in result.outcomes
            if o.status == "skipped" and o.kind == "collect" and o.run_id is None]


# A reply writes only what its call asked (runtime.md §3.5.1 rule 2a) ---------------------------------------

def test_an_object_form_reply_cannot_confirm_a_boolean_no_step_asked():
    """Review finding 1, part 1: "confirma" is `extract: "asked"`; the first message cannot confirm it."""
    agent = hotel({"understand": [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife", "confirma": True}}],
                   "speak": [{"message": "Your name?"}]})
    r = agent.turn(session_id="h", message="a room in Recife", id="m1")
    assert r.session.data == {"cidade": "Recife"}
    assert dropped(r) == [("not-asked", "confirma")]
    assert [m.text for m in r.messages] == ["Your name?"]        # nothing was booked


def test_an_object_form_reply_cannot_overwrite_a_known_field_that_is_not_correctable():
    """Review finding 1, part 2: "cidade" is known and not correctable, so the call does not ask for it."""
    agent = hotel({"understand": [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                                  {"fields": {"nome": "Ana", "cidade": "Lisbon"}}],
                   "speak": [{"message": "Your name?"}, {"message": "Recife is R$ 360. Book it?"}]})
    r = agent.turn(session_id="h", message="a room in Recife", id="m1")
    r = agent.turn(session_id="h", session=r.session, message="Ana. And make it Lisbon", id="m2")
    assert r.session.data == {"cidade": "Recife", "nome": "Ana"}
    assert dropped(r) == [("not-asked", "cidade")] and "corrected" not in [o.code for o in r.outcomes]


def test_a_correctable_known_field_is_asked_so_a_correction_still_lands():
    """flows.md §2.5: a correctable field stays in the call's fields, so its new value is written."""
    agent = hotel({"understand": [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                                  {"fields": {"nome": "Ana", "cidade": "Lisbon"}}],
                   "speak": [{"message": "Your name?"}, {"message": "Lisbon is R$ 500. Book it?"}]},
                  cidade={"type": "string", "ask": "Ask which city.", "correctable": True})
    r = agent.turn(session_id="h", message="a room in Recife", id="m1")
    r = agent.turn(session_id="h", session=r.session, message="Ana. And make it Lisbon", id="m2")
    assert r.session.data == {"cidade": "Lisbon", "nome": "Ana"}
    assert [o.code for o in r.outcomes if o.code == "corrected"] == ["corrected"]


def test_the_answer_to_the_step_that_asks_a_boolean_still_confirms_it():
    """flows.md §2.3: an "asked" boolean comes from the speak reply of the step that asks it."""
    agent = hotel({"understand": [{"flows": {"hotel": 95}, "fields": {"cidade": "Recife"}},
                                  {"fields": {"nome": "Ana"}}, {"fields": {}}],
                   "speak": [{"message": "Your name?"}, {"message": "R$ 360. Book it?"},
                             {"message": "Booking.", "confirma": True}]})
    r = agent.turn(session_id="h", message="a room in Recife", id="m1")
    r = agent.turn(session_id="h", session=r.session, message="Ana", id="m2")
    r = agent.turn(session_id="h", session=r.session, message="yes, book it", id="m3")
    assert r.session.data["confirma"] is True and r.messages[-1].text == "Booked in Recife for Ana!"


# A session no store saves never comes out of turn() (docs/guide/limits.md) ----------------------------------

@pytest.mark.parametrize("bad", ["Ana\u0000", "Ana\ud800"])
def test_a_nul_or_lone_surrogate_in_an_understood_value_is_a_bad_value(bad):
    """Review finding 2: such text is no value of a string field; the session saves."""
    agent = hotel({"understand": [{"flows": {"hotel": 95}, "fields": {"cidade": bad}}],
                   "speak": [{"message": "Which city?"}]})
    r = agent.turn(session_id="h", message="a room", id="m1")
    assert "cidade" not in r.session.data and dropped(r) == [("bad-value", "cidade")]
    MemoryStore().save(r.session, 0)


def test_a_nul_in_a_speak_envelope_value_or_an_email_is_a_bad_value():
    f = falai().fields({"email": {"type": "string", "format": "email", "ask": "Ask the e-mail."},
                        "nome": {"type": "string", "ask": "Ask the name."}})
    flow = f.flow({"id": "b", "name": "B", "on": [{"message": ["book"]}], "steps": [
        {"id": "quem", "collect": ["nome", "email"]}, {"id": "ok", "say": "Hi {{data.nome}}"}]})
    agent = f.agent(name="A", flows=[flow], provider=ScriptedProvider(script={
        "understand": [{"flows": {"b": 95}, "fields": {"email": "a\u0000b@example.com"}}],
        "speak": [{"message": "Name?", "nome": "Ana\u0000"}]}))
    r = agent.turn(session_id="s", message="book", id="m1")
    assert r.session.data == {} and sorted(dropped(r)) == [("bad-value", "email"), ("bad-value", "nome")]
    MemoryStore().save(r.session, 0)


def test_a_mention_value_no_store_keeps_is_dropped_from_the_run_input():
    f = falai().fields({})
    flow = f.flow({"id": "conc", "name": "C", "on": [{"mention": ["names a competitor"], "extract": {
        "nome": {"type": "string"}, "cidade": {"type": "string"}}}],
        "steps": [{"id": "s", "say": "Ok: {{input.cidade}}, {{input.nome}}."}]})
    agent = f.agent(name="A", flows=[flow], idle="silent", provider=ScriptedProvider(script={
        "understand": [{"mentions": {"conc": True}, "extract": {"conc": {"nome": "AC\u0000ME", "cidade": "Rio"}}}]}))
    r = agent.turn(session_id="s", message="ACME is better", id="m1")
    assert r.started[0].flow_id == "conc" and r.messages[0].text == "Ok: Rio, {{input.nome}}."
    MemoryStore().save(r.session, 0)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ failed")


class UnprintableValue:
    def __str__(self):
        raise RuntimeError("__str__ failed")


deep = ["x"]
for _ in range(200):
    deep = [deep]


@pytest.mark.parametrize("rule, reason", [
    (lambda v: {v}, "the validator returned a value that is a set, not a JSON value"),
    (lambda v: object(), "the validator returned a value that is a object, not a JSON value"),
    (lambda v: float("nan"), "the validator returned a value that holds nan, which JSON has no number for"),
    (lambda v: deep, "the validator returned a value that nests deeper than 64 levels"),
    (lambda v: v + "\u0000", "the validator returned a value that holds a NUL character (U+0000)"),
    (lambda v: (_ for _ in ()).throw(Unprintable()), "Unprintable"),
    (lambda v: {"error": UnprintableValue()}, "UnprintableValue"),
])
def test_what_a_validator_returns_is_checked_and_its_refusal_always_reads(rule, reason):
    """Review finding 4: a kept value must be one a session holds; an unprintable refusal is named by its
    class."""
    f = falai().fields({"nome": {"type": "string", "ask": "Ask the name.", "validate": rule}})
    flow = f.flow({"id": "b", "name": "B", "on": [{"message": ["book"]}], "steps": [
        {"id": "quem", "collect": ["nome"]}, {"id": "ok", "say": "Hi"}]})
    agent = f.agent(name="A", flows=[flow], provider=ScriptedProvider(script={
        "understand": [{"flows": {"b": 95}, "fields": {"nome": "Ana"}}], "speak": [{"message": "Name?"}]}))
    r = agent.turn(session_id="s", message="book, I'm Ana", id="m1")
    assert r.session.data == {} and dropped(r) == [("refused", f"nome: {reason}")]
    MemoryStore().save(r.session, 0)


def test_tool_data_no_store_keeps_is_ignored():
    f = falai().fields({"codigo": {"type": "string", "extract": "never"}})
    tool = Tool(id="t", handler=lambda a, c: {"value": "ok", "data": {"codigo": "RES\u0000"}})
    flow = f.flow({"id": "b", "name": "B", "on": [{"message": ["book"]}], "steps": [
        {"id": "p", "prompt": "Book.", "tools": ["t"]}]})
    agent = f.agent(name="A", flows=[flow], tools=[tool], provider=ScriptedProvider(script={
        "understand": [{"flows": {"b": 95}}],
        "speak": [{"message": "", "toolCalls": [{"toolName": "t", "arguments": {}}]}, {"message": "Done."}]}))
    r = agent.turn(session_id="s", message="book", id="m1")
    assert r.session.data == {} and r.messages[0].text == "Done."
    MemoryStore().save(r.session, 0)


# A destructive call runs once per reply (model-calls.md §6.3a) ---------------------------------------------

def booking(speak, *, tools=None, step_keys=None, **flow_keys):
    """A talk step offering `reservar` (destructive) and `preco` (read-only); returns (agent, handled)."""
    handled = []

    def book(args, ctx):
        handled.append(("reservar", args))
        code = f"RES-{len(handled)}"
        return {"value": {"codigo": code}, "data": {"reserva": code}}

    def price(args, ctx):
        handled.append(("preco", args))
        return {"value": {"preco": 420}}

    reservar = Tool(id="reservar", description="Book.", handler=book, is_destructive=lambda args: True,
                    parameters={"type": "object", "properties": {"cidade": {"type": "string"}}})
    preco = Tool(id="preco", description="Price.", handler=price, is_read_only=lambda args: True,
                 parameters={"type": "object", "properties": {"cidade": {"type": "string"}}})
    f = falai().fields({"reserva": {"type": "string", "extract": "never"}})
    flow = f.flow({"id": "h", "name": "H", "on": [{"message": ["book"]}], **flow_keys, "steps": [
        {"id": "p", "prompt": "Book the room.", "tools": ["reservar", "preco"], **(step_keys or {})}]})
    agent = f.agent(name="A", flows=[flow], tools=tools or [reservar, preco],
                    provider=ScriptedProvider(script={"understand": [{"flows": {"h": 95}}], "speak": speak}))
    return agent, handled


def calls(*pairs, message=""):
    return {"message": message, "toolCalls": [{"toolName": name, "arguments": args} for name, args in pairs]}


CURITIBA = {"cidade": "Curitiba"}


def test_the_same_destructive_call_in_five_rounds_runs_once():
    """The local-model finding: `reservar` five times in one reply books once; the model reads the first
    result again, with a note."""
    agent, handled = booking([*[calls(("reservar", CURITIBA))] * 5, {"message": "Booked: RES-1."}])
    r = agent.turn(session_id="s", message="book Curitiba", id="m1")
    assert handled == [("reservar", CURITIBA)]
    assert r.session.data == {"reserva": "RES-1"} and r.messages[0].text == "Booked: RES-1."
    last = agent.provider.calls[-1].history
    repeats = [item["content"] for item in last if item.get("role") == "tool"][1:]
    assert len(repeats) == 4 and all("Not run again" in text and "RES-1" in text for text in repeats)


def test_two_identical_destructive_calls_in_one_round_run_once_and_other_calls_run():
    agent, handled = booking([calls(("reservar", CURITIBA), ("reservar", CURITIBA), ("preco", CURITIBA),
                                    ("preco", CURITIBA), ("reservar", {"cidade": "Recife"})),
                              {"message": "Done."}])
    agent.turn(session_id="s", message="book", id="m1")
    assert handled == [("reservar", CURITIBA), ("preco", CURITIBA), ("preco", CURITIBA),
                       ("reservar", {"cidade": "Recife"})]


@pytest.mark.parametrize("where", ["step", "flow"])
def test_repeat_tools_lets_a_destructive_call_repeat(where):
    keys = {"repeatTools": ["reservar"]}
    agent, handled = booking([calls(("reservar", CURITIBA)), calls(("reservar", CURITIBA)), {"message": "Two."}],
                             step_keys=keys if where == "step" else None,
                             **(keys if where == "flow" else {}))
    agent.turn(session_id="s", message="book two", id="m1")
    assert handled == [("reservar", CURITIBA)] * 2


def test_repeat_tools_must_name_registered_tools():
    with pytest.raises(FlowConfigurationError, match='unknown tool "reservr"'):
        booking([], step_keys={"repeatTools": ["reservr"]})
    with pytest.raises(FlowConfigurationError, match="repeatTools is \"reservar\", not a list"):
        booking([], repeatTools="reservar")


@pytest.mark.parametrize("failure", [ProviderError("busy", kind="overload"), {"message": "   "},
                                     ProviderError("cut", kind="length")])
def test_what_a_destructive_call_wrote_survives_a_failed_reply(failure):
    """The local-model finding: the booking code is kept when the reply then fails; the step defers."""
    agent, handled = booking([calls(("reservar", CURITIBA)), failure])
    r = agent.turn(session_id="s", message="book Curitiba", id="m1")
    assert handled == [("reservar", CURITIBA)] and r.session.data == {"reserva": "RES-1"}
    assert r.messages == [] and [o.status for o in r.outcomes][-1] == "deferred"
    assert len(r.schedule) == 1
    MemoryStore().save(r.session, 0)
