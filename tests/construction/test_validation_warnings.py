"""validate_flow warnings W1-W3, their order, and the worked examples of the spec.

persistence.md §1.10 (Warnings, Examples), flows.md §14.4 and §16.
"""
import pytest

from falai import Action, FlowConfigurationError, falai, validate_flow

FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "cargo": {"type": "string"},
    "email": {"type": "string", "ask": ""},
    "confirmado": {"type": "boolean"},
    "aceite": {"type": "boolean", "extract": "anywhere"},
    "motivo": {"type": "string", "extract": "asked"},
}
REGISTRIES = {"fields": FIELDS, "actions": {"ping": Action(parameters={}, run=lambda params, ctx: None)}}


def flow(*steps, **keys):
    return {"id": "fx", "name": "FX", "steps": list(steps), **keys}


def warnings_of(spec, registries=REGISTRIES):
    return validate_flow(spec, registries).warnings


def w1(step, where, target):
    return (f'flow "fx", step "{step}": {where} jumps back to "{target}" without clear; the fields collected '
            "since stay known and those steps skip. Add clear: [...] to re-ask them.")


def w2(step, *slugs):
    quoted = ", ".join(f'"{slug}"' for slug in slugs)
    return (f'flow "fx", step "{step}": collects {quoted} with no prompt and no ask; the AI has nothing to go on. '
            "Add a prompt or an ask per field.")


def w3(slug):
    return (f'flow "fx": collect lists "{slug}", which is only taken from the answer to a step that asks it, '
            "and no step does. Add it to a step's collect, or set extract: 'anywhere' on the field.")


# W1: a jump back without clear ------------------------------------------------------------------

@pytest.mark.parametrize("then", ["a", {"step": "a"}, {"step": "a", "clear": []}])
def test_w1_a_jump_back_that_clears_nothing_warns(then):
    """persistence.md §1.10 W1: no clear, or an empty one."""
    spec = flow({"id": "a", "collect": ["nome"]}, {"id": "b", "say": "De novo.", "then": then})
    assert warnings_of(spec) == [w1("b", "then", "a")]


def test_w1_a_jump_to_the_same_step_warns():
    """persistence.md §1.10 W1: the same or an earlier step."""
    assert warnings_of(flow({"id": "a", "prompt": "p", "then": "a"})) == [w1("a", "then", "a")]


def test_w1_a_jump_back_that_clears_fields_does_not_warn():
    """persistence.md §1.10 W1: a {step, clear} with a non-empty clear re-asks, so it is fine."""
    spec = flow({"id": "a", "collect": ["nome"]}, {"id": "b", "say": "x", "then": {"step": "a", "clear": ["nome"]}})
    assert warnings_of(spec) == []


def test_w1_forward_jumps_and_flow_targets_do_not_warn():
    """persistence.md §1.10 edge check: "end" and {flow} land nowhere."""
    spec = flow({"id": "a", "say": "x", "then": "c"}, {"id": "b", "say": "y", "then": "end"},
                {"id": "c", "say": "z", "then": {"flow": "outro"}})
    assert warnings_of(spec) == []


def test_w1_is_recorded_for_else_branches_and_on_fail():
    """persistence.md §1.10 W1: <where> is then, else, onFail or branches[j].then."""
    spec = flow({"id": "a", "collect": ["nome"]},
                {"id": "b", "wait": "1d", "else": "a", "branches": [{"if": {"known": ["nome"]}, "then": "a"}]},
                {"id": "c", "do": "ping", "onFail": "b"})
    assert warnings_of(spec) == [w1("b", "else", "a"), w1("b", "branches[0].then", "a"), w1("c", "onFail", "b")]


def test_w1_a_backward_if_with_an_else_is_a_legal_loop_that_still_warns():
    """persistence.md §1.10: a backward `if` with an else is legal; it gets W1 when nothing is cleared."""
    spec = flow({"id": "a", "collect": ["confirmado"], "prompt": "Confirme."},
                {"id": "b", "if": {"equals": {"confirmado": False}}, "then": "a", "else": "c"},
                {"id": "c", "say": "Ok."})
    assert warnings_of(spec) == [w1("b", "then", "a")]


def test_w1_on_fail_of_a_non_do_step_is_not_read():
    """persistence.md §1.10 step rule 6: only do steps have their onFail target checked."""
    assert warnings_of(flow({"id": "a", "say": "x", "onFail": "a"})) == []


# W2: nothing to go on ---------------------------------------------------------------------------

def test_w2_a_collect_with_no_prompt_and_no_ask_warns_naming_every_field():
    """persistence.md §1.10 W2: every collected slug in plain double quotes, joined ", "."""
    assert warnings_of(flow({"id": "a", "collect": ["cargo", "email"]})) == [w2("a", "cargo", "email")]


@pytest.mark.parametrize("extra", [{"prompt": "Descubra o cargo."}, {"question": "Qual o seu cargo?"},
                                   {"ask": {"cargo": "Pergunte o cargo."}}])
def test_w2_a_prompt_a_question_or_a_step_ask_gives_the_ai_something(extra):
    """persistence.md §1.10 W2: a talk step with no prompt, no question and no ask."""
    assert warnings_of(flow({"id": "a", "collect": ["cargo"], **extra})) == []


def test_w2_one_field_with_an_ask_is_enough():
    """persistence.md §1.10 W2: warns only when *every* listed field lacks an ask."""
    assert warnings_of(flow({"id": "a", "collect": ["cargo", "nome"]})) == []


def test_w2_an_empty_ask_counts_as_none():
    """persistence.md §1.10 W2: a non-empty step ask or field ask."""
    assert warnings_of(flow({"id": "a", "collect": ["email"], "ask": {"email": ""}})) == [w2("a", "email")]


def test_w2_an_empty_collect_does_not_warn():
    """persistence.md §1.10 W2: needs a non-empty collect."""
    assert warnings_of(flow({"id": "a", "collect": [], "prompt": "Oi"})) == []


# W3: a flow collect field no step asks --------------------------------------------------------

def test_w3_a_boolean_in_flow_collect_that_no_step_asks_warns():
    """persistence.md §1.10 W3: booleans are "asked" by default."""
    spec = flow({"id": "a", "prompt": "Oi"}, collect=["nome", "confirmado"])
    assert warnings_of(spec) == [w3("confirmado")]


def test_w3_an_explicit_asked_field_warns_too():
    """persistence.md §1.10 W3: extract "asked", explicit."""
    assert warnings_of(flow({"id": "a", "prompt": "Oi"}, collect=["motivo"])) == [w3("motivo")]


def test_w3_no_warning_when_a_step_collects_it_or_it_is_taken_anywhere():
    """persistence.md §1.10 W3: an "anywhere" field, or one some step's collect lists."""
    spec = flow({"id": "a", "prompt": "Oi"}, {"id": "b", "collect": ["confirmado"], "prompt": "Confirme."},
                collect=["confirmado", "aceite", "cargo"])
    assert warnings_of(spec) == []


def test_w3_follows_the_flow_collect_order():
    """persistence.md §1.10 N5: W3 for each flow collect slug, in order."""
    spec = flow({"id": "a", "prompt": "Oi"}, collect=["motivo", "nome", "confirmado"])
    assert warnings_of(spec) == [w3("motivo"), w3("confirmado")]


# Order ------------------------------------------------------------------------------------------

def test_warnings_come_in_order_w3_then_per_step_then_else_w2_branches_on_fail():
    """persistence.md §1.10 Warnings: W3, then per step W1 then, W1 else, W2, W1 branches, W1 onFail."""
    spec = flow(
        {"id": "a", "say": "Oi"},
        {"id": "b", "collect": ["cargo"], "then": "a", "else": "b",
         "branches": [{"when": "quer sair", "then": "a"}, {"if": {}, "then": "b"}]},
        {"id": "c", "do": "ping", "then": "b", "onFail": "a"},
        collect=["confirmado", "motivo"])
    assert warnings_of(spec) == [
        w3("confirmado"), w3("motivo"),
        w1("b", "then", "a"), w1("b", "else", "b"), w2("b", "cargo"),
        w1("b", "branches[0].then", "a"), w1("b", "branches[1].then", "b"),
        w1("c", "then", "b"), w1("c", "onFail", "a"),
    ]


def test_an_error_discards_the_warnings():
    """persistence.md §1.10: raises on the first problem; warnings are only returned when it can run."""
    with pytest.raises(FlowConfigurationError):
        validate_flow(flow({"id": "a", "collect": ["cargo"], "then": "a"}, {"id": "b", "do": "nada"}), REGISTRIES)


# The spec's worked examples ---------------------------------------------------------------------

def test_worked_example_avisa():
    """persistence.md §1.10, the `avisa` example: one W2 warning, then unknown action "send_email"."""
    f = falai().fields({"nome": {"type": "string", "ask": "Pergunte o nome."},
                        "cargo": {"type": "string"}})
    notify = f.action(parameters={"recipient": {"type": "string"}, "message": {"type": "string"}},
                      run=lambda params, ctx: {"ok": True})
    registries = {"fields": f.fields, "actions": {"notify": notify}}
    spec = {"id": "avisa", "name": "Avisa o dono", "on": [{"message": ["quer falar com uma pessoa"]}],
            "steps": [{"id": "quem", "kind": "collect", "collect": ["cargo"]},
                      {"id": "n", "kind": "do", "do": "notify",
                       "with": {"recipient": "owner", "message": "{{data.nome}} quer ajuda"}}]}
    assert validate_flow(spec, registries).warnings == [
        'flow "avisa", step "quem": collects "cargo" with no prompt and no ask; the AI has nothing to go on. '
        "Add a prompt or an ask per field."]
    with pytest.raises(FlowConfigurationError) as caught:
        validate_flow({**spec, "steps": [{"id": "x", "kind": "do", "do": "send_email", "with": {}}]}, registries)
    assert str(caught.value) == ('[FlowConfigurationError] flow "avisa", step "x": unknown action "send_email". '
                                 "Register it in actions or fix the name.")


def test_worked_example_the_complete_flows_page_agent_builds_and_its_typo_fails():
    """flows.md §16: the complete example builds; `"collect": ["nmoe"]` fails with its message."""
    from falai import ScriptedProvider, fake_clock

    f = falai().fields({
        "nome": {"type": "string", "label": "Name", "ask": "Ask for the person's name, casually."},
        "porte": {"type": "string", "enum": ["1-10", "11-50", "51+"],
                  "ask": "Ask how many people work there and offer the ranges."},
        "orcamento": {"type": "number", "description": "Monthly budget in BRL."},
        "confirmado": {"type": "boolean", "ask": "Summarise what you noted and ask if it is right."},
    })
    notify = f.action(parameters={"texto": {"type": "string"}, "urgente": {"type": "boolean", "optional": True}},
                      run=lambda params, ctx: {"ok": True})
    in_stage = f.condition(lambda ctx, stage: ctx.context.get("stage") == stage)

    def triagem(first_collect):
        return f.flow({
            "id": "triagem", "name": "Qualification",
            "description": "Someone wants to know whether the product fits their company.",
            "on": [{"message": ["asks how it works", "asks for a quote", "!only says thanks"]}],
            "collect": ["nome", "porte", "orcamento"], "clearOnStart": ["confirmado"],
            "steps": [
                {"id": "quem", "collect": first_collect, "question": "Sure! What's your name?"},
                {"id": "porte", "collect": ["porte"], "maxAsks": 2,
                 "branches": [{"when": "the person asks to talk to a human", "then": {"flow": "humano"}}]},
                {"id": "confirma", "collect": ["confirmado"]},
                {"id": "ok", "if": {"equals": {"confirmado": True}},
                 "else": {"step": "quem", "clear": ["confirmado", "nome"]}},
                {"id": "avisa", "do": "notify", "with": {"texto": "Lead {{data.nome}} ({{data.porte}})"},
                 "onFail": "falhou"},
                {"id": "pausa", "wait": "3s"},
                {"id": "tchau", "say": "Thanks, {{data.nome}}! A seller takes it from here.", "then": "end"},
                {"id": "falhou", "say": "I could not reach the team right now; someone will write today."},
            ]})

    humano = f.flow({"id": "humano", "name": "Hand over to a person",
                     "steps": [{"id": "aviso", "say": "Of course, calling someone from the team."}]})
    followup = f.flow({
        "id": "proposta", "name": "Follow the proposal",
        "on": [{"event": "stage_entered", "after": "1h", "if": {"inStage": "proposal"}}], "anchor": "lead",
        "steps": [
            {"id": "fala", "prompt": "Ask whether the proposal arrived well."},
            {"id": "espera", "wait": {"event": "meeting_booked", "upTo": "7d"}, "else": "lembra"},
            {"id": "feito", "say": "Great, see you at the meeting.", "then": "end"},
            {"id": "lembra", "do": "notify", "with": {"texto": "No meeting after 7 days."}},
        ]})
    options = dict(name="Ana", provider=ScriptedProvider(), clock=fake_clock("2026-09-20T10:00:00.000Z"),
                   actions={"notify": notify}, events={"stage_entered": f.event(), "meeting_booked": f.event()},
                   conditions={"inStage": in_stage})

    agent = f.agent(flows=[triagem(["nome"]), humano, followup], **options)
    assert [flow["id"] for flow in agent.flows] == ["triagem", "humano", "proposta"]
    with pytest.raises(FlowConfigurationError) as caught:
        f.agent(flows=[triagem(["nmoe"]), humano, followup], **options)
    assert str(caught.value) == ('[FlowConfigurationError] flow "triagem", step "quem": unknown field "nmoe" in '
                                 "collect. Add it to the agent's fields or fix the slug.")
