"""The understand call: prompt, envelope, aliases, reading the reply (model-calls.md §2-§3)."""
import json
import logging

import pytest

import falai as F
import falai_calls
import falai_base
from conftest import sections
from falai import Generation, ProviderError, ScriptedProvider, TokenUsage

pytestmark = pytest.mark.protocols("v4")     # the v4 prompts and envelopes (model-calls.md); "lean": test_protocol.py

NOME = {"type": "string", "description": "Nome da pessoa"}
FIELDS = {"nome": NOME, "empresa": {"type": "string", "ask": "Pergunte a empresa."},
          "porte": {"type": "string", "enum": ["1-10", "11-50"], "description": "Porte"}}

TRIAGEM = {"id": "triagem", "name": "Triagem", "description": "Qualifica quem chega",
           "on": [{"message": []}],
           "steps": [{"id": "quem", "prompt": "Descubra quem é, {{data.nome}}.", "collect": ["nome", "empresa"],
                      "branches": [{"when": "a pessoa quer falar com {{context.humano}}", "then": "fim"}]}]}
SUPORTE = {"id": "suporte", "name": "Suporte", "description": "Ajuda com problemas",
           "on": [{"message": ["quer ajuda com um problema", "!só está elogiando"]},
                  {"message": ["o sistema caiu"]}],
           "steps": [{"id": "s1", "prompt": "Ajude."}]}
CONCORRENTE = {"id": "concorrente", "name": "Concorrente",
               "on": [{"mention": ["cita um concorrente", "!cita a própria empresa"],
                       "extract": {"trecho": {"type": "string"},
                                   "nome do item": {"type": "array", "items": {"type": "string"},
                                                    "description": "itens", "optional": True}}}],
               "steps": [{"id": "c1", "say": "Anotado."}]}


def run(flow_id="triagem", step_id="quem", run_id="triagem#m1"):
    return F.Run(id=run_id, flow_id=flow_id, anchor="session", dedupe_key=f"{flow_id}:session:",
                 step_id=step_id, status="asking", trigger={"kind": "message", "key": "m1"}, hop=0,
                 started_at="2026-09-20T10:00:00.000Z")


def make_agent(script=None, **options):
    options.setdefault("fields", FIELDS)
    provider = options.pop("provider", None) or ScriptedProvider(script=script or {})
    return F.Agent(name="Ana", provider=provider, **options)


def full_ask(**changes):
    """The §3.3 example: floor run in triagem asking quem (one when branch), suporte eligible,
    the mention concorrente with an extract, and the harvestable field nome."""
    ask = F.UnderstandAsk(
        message="sou a Bia, da Acme",
        scope=F.Scope(data={"empresa": "Acme", "extra": 1}, context={"humano": "um atendente"}),
        history=[{"role": "assistant", "content": "Oi! Quem fala?"}],
        floor_run=run(), floor_flow=TRIAGEM, floor_step=TRIAGEM["steps"][0], floor_pending=["nome", "sem-def"],
        candidates=[TRIAGEM, SUPORTE], mentions=[CONCORRENTE],
        branches=[("triagem#m1", "quem", 0, TRIAGEM["steps"][0]["branches"][0]["when"])],
        fields=["nome"])
    for key, value in changes.items():
        setattr(ask, key, value)
    return ask


def call(ask, reply=None, **options):
    agent = make_agent({"understand": [reply if reply is not None else {}]}, **options)
    judgement = falai_calls.understand(agent, ask)
    return agent.provider.calls[0], judgement


# §3.4: prompt sections -------------------------------------------------------------------------

def test_understand_prompt_sections_in_order():
    """model-calls.md §3.4: headings and their order are normative."""
    request, _ = call(full_ask())
    assert list(sections(request.prompt)) == [
        "Task", "Current flow", "Already known", "Flows the customer may want",
        "Things the customer may mention", "Questions about this message",
        "Details the customer may have given", "Customer's latest message", "Output"]


def test_understand_omits_sections_with_nothing_in_them():
    """model-calls.md §3.4: each section only when it has something."""
    ask = full_ask(floor_run=None, floor_flow=None, floor_step=None, floor_pending=[], mentions=[],
                   branches=[], fields=[], scope=F.Scope(data={}))
    request, _ = call(ask)
    assert list(sections(request.prompt)) == ["Task", "Flows the customer may want", "Customer's latest message",
                                              "Output"]


def test_understand_request_fields():
    """model-calls.md §1: system is the stable prefix, the history as given, no tools, schema_name understand."""
    ask = full_ask()
    request, _ = call(ask)
    assert request.schema_name == "understand"
    assert request.tools is None and request.max_output_tokens is None
    assert request.history == ask.history and request.history is not ask.history
    assert request.context == {"humano": "um atendente"}
    assert request.system.startswith("## Identity\n") and '"Ana"' in request.system


def test_identity_goes_to_system_when_persona_and_goal_are_fixed():
    """model-calls.md §2.3: Identity then Knowledge base in system; nothing of them in the prompt."""
    kb = {"hotel": {"name": "Azul", "rooms": ["single", "double"]},
          "prices": [{"room": "single", "night": 300.0}], "pets": False}
    request, _ = call(full_ask(), persona="Simpática e breve.", goal="Vender diárias.", knowledge_base=kb)
    assert request.system == (
        '## Identity\nYou are "Ana". Always refer to yourself by that name.\nSimpática e breve.\n'
        "Your goal: Vender diárias.\n\n"
        "## Knowledge base\n- hotel:\n  - name: Azul\n  - rooms: single, double\n- prices:\n"
        "  - room: single\n  - night: 300\n- pets: false")
    assert "## Identity" not in request.prompt and "Knowledge base" not in request.prompt


def test_identity_moves_to_the_prompt_when_persona_varies():
    """model-calls.md §2.3, §2.4: a templated persona is rendered with data and context, first in the prompt."""
    request, _ = call(full_ask(), persona="Fale com a {{data.empresa}} ({{input.x}}).", goal="Ajudar.",
                      knowledge_base={"horario": "9h às 18h"})
    assert request.system == "## Knowledge base\n- horario: 9h às 18h"
    assert request.prompt.startswith("## Identity\n")
    identity = sections(request.prompt)["Identity"]
    assert "Fale com a Acme ({{input.x}})." in identity
    assert identity.index('"Ana"') < identity.index("Fale com") < identity.index("Ajudar.")


def test_identity_varies_without_knowledge_base_leaves_system_none():
    """model-calls.md §2.3: varying identity and no knowledge base: system is None."""
    request, _ = call(full_ask(), goal="Atender {{data.empresa}}")
    assert request.system is None


def test_knowledge_base_lists_of_lists_and_scalars_in_lists():
    """model-calls.md §2.3: list elements that are lists use their indexes; scalars beside them are bullets."""
    lines = falai_calls.knowledge_lines({"m": [[1, "a"], "solto", {"k": None}], "e": {}, "n": [1.5, True, None]})
    assert lines == ["- m:", "  - 0: 1", "  - 1: a", "  - solto", "  - k: null", "- e:", "- n: 1.5, true, null"]


def test_current_flow_section_names_the_flow_step_prompt_and_pending_fields():
    """model-calls.md §3.4 item 3: name, id, rendered description and step prompt, pending field lines."""
    request, _ = call(full_ask())
    body = sections(request.prompt)["Current flow"]
    assert "Triagem" in body and "triagem" in body and "Qualifica quem chega" in body
    assert "quem" in body and "Descubra quem é, {{data.nome}}." in body     # unknown data.nome stays
    assert "- nome (string): Nome da pessoa" in body.splitlines()
    assert "- sem-def" in body.splitlines()                                   # no definition: slug alone


def test_flow_without_name_prints_its_id():
    """flows.md §3.1: wherever a name is printed, a flow without one prints its id."""
    unnamed = {"id": "vendas", "on": [{"message": ["quer comprar"]}], "steps": []}
    request, _ = call(full_ask(candidates=[TRIAGEM, unnamed], floor_flow={**TRIAGEM, "name": None}))
    prompt = sections(request.prompt)
    assert "2. vendas — vendas" in prompt["Flows the customer may want"]
    assert '"triagem"' in prompt["Current flow"]


def test_candidates_listed_with_rendered_phrases_exclusions_and_rubric():
    """model-calls.md §3.4 item 5: numbered, alias — name: description, phrases of every message trigger."""
    request, _ = call(full_ask())
    body = sections(request.prompt)["Flows the customer may want"]
    lines = body.splitlines()
    assert "1. triagem — Triagem: Qualifica quem chega" in lines
    assert "2. suporte — Suporte: Ajuda com problemas" in lines
    support = body[body.index("2. suporte"):]
    assert "quer ajuda com um problema; o sistema caiu" in support
    assert "só está elogiando" in support and "!só" not in support
    for band in ("90–100", "70–89", "50–69", "30–49", "0–29"):
        assert band in body


def test_phrases_and_descriptions_render_data_and_context_but_not_input():
    """model-calls.md §2.4: understand renders descriptions, phrases and when with data and context only."""
    flow = {"id": "x", "name": "{{data.empresa}} name", "description": "para {{data.empresa}} {{input.a}}",
            "on": [{"message": ["fala de {{context.humano}}"]}]}
    request, _ = call(full_ask(candidates=[flow], floor_run=None, floor_flow=None, floor_step=None))
    body = sections(request.prompt)["Flows the customer may want"]
    assert "1. x — {{data.empresa}} name: para Acme {{input.a}}" in body    # names are not rendered
    assert "fala de um atendente" in body


def test_mentions_section_lists_phrases_exclusions_and_extract_lines():
    """model-calls.md §3.4 item 6."""
    request, _ = call(full_ask())
    body = sections(request.prompt)["Things the customer may mention"]
    assert "- concorrente — Concorrente" in body.splitlines()
    assert "cita um concorrente" in body and "cita a própria empresa" in body and "!cita" not in body
    assert "  - trecho (string)" in body.splitlines()
    assert "  - nome do item (list of string): itens" in body.splitlines()


def test_branch_questions_are_rendered_under_their_alias():
    """model-calls.md §3.4 item 7: `- <alias>: <rendered when>`; branch keys always need an alias."""
    request, _ = call(full_ask())
    assert sections(request.prompt)["Questions about this message"].splitlines()[-1] == \
        "- q1: a pessoa quer falar com um atendente"


def test_details_section_lists_fields_under_their_alias():
    """model-calls.md §3.4 item 8, §2.5: one-line descriptions with the enum options."""
    request, _ = call(full_ask(fields=["nome", "porte"]))
    lines = sections(request.prompt)["Details the customer may have given"].splitlines()
    assert lines[-2:] == ["- nome (string): Nome da pessoa", "- porte (string) [1-10 | 11-50]: Porte"]


def test_already_known_lists_known_agent_fields_only_as_compact_json():
    """model-calls.md §2.6: known agent fields in definition order; other data keys never listed."""
    ask = full_ask(scope=F.Scope(data={"porte": "1-10", "empresa": "Acme", "nome": "", "extra": 1}))
    request, _ = call(ask)
    lines = sections(request.prompt)["Already known"].splitlines()
    assert lines[1:] == ['- empresa: "Acme"', '- porte: "1-10"']


def test_message_is_quoted_verbatim_between_triple_quotes():
    """model-calls.md §3.4 item 9."""
    request, _ = call(full_ask(message='  "oi"\nsou eu  '))
    assert '## Customer\'s latest message\n"""\n  "oi"\nsou eu  \n"""' in request.prompt


# §3.3: the envelope ----------------------------------------------------------------------------

def test_envelope_matches_the_spec_example():
    """model-calls.md §3.3: only present sections, closed, every key required, nullable leaves."""
    request, _ = call(full_ask(fields=["nome", "porte"]))
    schema = request.schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert list(schema["properties"]) == ["flows", "mentions", "extract", "branches", "fields"]
    assert schema["required"] == ["flows", "mentions", "extract", "branches", "fields"]
    flows = schema["properties"]["flows"]
    assert flows["additionalProperties"] is False and flows["required"] == ["triagem", "suporte"]
    assert flows["properties"]["triagem"]["type"] == ["integer", "null"]
    assert flows["properties"]["suporte"]["description"].startswith("0-100 fit")
    assert schema["properties"]["mentions"]["properties"]["concorrente"]["type"] == ["boolean", "null"]
    assert schema["properties"]["extract"] == {
        "type": "object", "additionalProperties": False, "required": ["concorrente"],
        "properties": {"concorrente": {
            "type": "object", "additionalProperties": False, "required": ["trecho", "nome do item"],
            "properties": {"trecho": {"type": ["string", "null"]},
                           "nome do item": {"type": ["array", "null"], "description": "itens",
                                            "items": {"type": "string"}}}}}}
    branches = schema["properties"]["branches"]
    assert branches["required"] == ["q1"] and branches["properties"]["q1"]["type"] == ["boolean", "null"]
    assert schema["properties"]["fields"] == {
        "type": "object", "additionalProperties": False, "required": ["nome", "porte"],
        "properties": {"nome": {"type": ["string", "null"], "description": "Nome da pessoa"},
                       "porte": {"type": ["string", "null"], "description": "Porte",
                                 "enum": ["1-10", "11-50", None]}}}


def test_mentions_without_extract_send_no_extract_section():
    """model-calls.md §3.3: extract only when at least one mention flow has one."""
    plain = {"id": "preco", "name": "Preço", "on": [{"mention": ["pergunta o preço"]}]}
    request, _ = call(full_ask(mentions=[plain]))
    assert "extract" not in request.schema["properties"]
    assert "mentions" in request.schema["required"]


def test_output_skeleton_mirrors_the_schema():
    """model-calls.md §3.4 item 10: the skeleton of the spec, as compact JSON."""
    vendas = {"id": "vendas", "name": "Vendas", "on": [{"message": ["quer comprar"]}]}
    ask = full_ask(floor_run=run(), candidates=[vendas, SUPORTE], mentions=[])
    request, _ = call(ask)
    lines = sections(request.prompt)["Output"].splitlines()
    assert '{"flows":{"vendas":0,"suporte":0},"branches":{"q1":false},"fields":{"nome":null}}' in lines


def test_output_skeleton_expands_extract_objects():
    """model-calls.md §3.4 item 10: null under extract, false under mentions."""
    request, _ = call(full_ask(candidates=[], branches=[], fields=[]))
    assert sections(request.prompt)["Output"].splitlines()[-1] == \
        '{"mentions":{"concorrente":false},"extract":{"concorrente":{"trecho":null,"nome do item":null}}}'


# §2.8: aliases ---------------------------------------------------------------------------------

def test_slug_that_needs_an_alias_travels_as_d_n_and_maps_back():
    """model-calls.md §2.8: invalid names get <prefix><n>; the reply is mapped back."""
    agent_fields = {**FIELDS, "nome completo": {"type": "string"}}
    ask = full_ask(fields=["nome completo"])
    request, judgement = call(ask, {"fields": {"d2": "Bia Souza"}, "branches": {"q1": True}},
                              fields=agent_fields)
    assert list(request.schema["properties"]["fields"]["properties"]) == ["d2"]   # q1 took n=1
    assert judgement.fields == {"nome completo": "Bia Souza"}
    assert judgement.branches == {"triagem#m1/quem/0": True}


def test_kept_real_ids_are_never_minted_again():
    """model-calls.md §2.8: a kept real id such as f1 is taken, so the counter skips it."""
    weird = {"id": "a b", "name": "Weird", "on": [{"message": ["x"]}]}
    f1 = {"id": "f1", "name": "Real f1", "on": [{"message": ["y"]}]}
    ask = full_ask(floor_run=None, floor_flow=None, floor_step=None, candidates=[f1, weird], mentions=[],
                   branches=[("r", "s", 0, "q?")], fields=[])
    request, judgement = call(ask, {"flows": {"f1": 10, "f2": 90}, "branches": {"q3": False}})
    assert list(request.schema["properties"]["flows"]["properties"]) == ["f1", "f2"]
    assert list(request.schema["properties"]["branches"]["properties"]) == ["q3"]
    assert judgement.flows == {"f1": 10, "a b": 90}
    assert judgement.branches == {"r/s/0": False}


def test_a_minted_alias_takes_the_name_before_a_later_real_id():
    """model-calls.md §2.8 (inferred): a name is taken once emitted, alias or real id."""
    table = falai_calls.AliasTable()
    assert table.alias("a b", "f") == "f1"
    assert table.alias("f1", "f") == "f2"
    assert table.alias("a b", "f") == "f1"                 # same real id, same alias
    assert table.real("f2") == "f1" and table.real("zzz") == "zzz"


def test_a_flow_both_candidate_and_mention_keeps_one_alias():
    """model-calls.md §2.8: the same real id always gets the same alias; extract uses the flow alias."""
    both = {"id": "x y", "name": "Both", "on": [{"message": ["a"]},
                                                {"mention": ["b"], "extract": {"p q": {"type": "string"}}}]}
    ask = full_ask(floor_run=None, floor_flow=None, floor_step=None, candidates=[both], mentions=[both],
                   branches=[], fields=[])
    request, judgement = call(ask, {"flows": {"f1": 50}, "mentions": {"f1": True},
                                    "extract": {"f1": {"p q": "v", "other": None}}})
    props = request.schema["properties"]
    assert list(props["flows"]["properties"]) == list(props["mentions"]["properties"]) == ["f1"]
    assert list(props["extract"]["properties"]["f1"]["properties"]) == ["p q"]   # params never aliased
    assert judgement.flows == {"x y": 50} and judgement.mentions == {"x y": True}
    assert judgement.extract == {"x y": {"p q": "v"}}


# §3.5: reading the reply -----------------------------------------------------------------------

REPLY = {"flows": {"triagem": 30, "suporte": 88}, "mentions": {"concorrente": True},
         "extract": {"concorrente": {"trecho": "a Beta", "nome do item": None}},
         "branches": {"q1": False}, "fields": {"nome": "Bia"}}


def test_structured_reply_is_read_section_by_section():
    """model-calls.md §3.5 rule 3."""
    _, judgement = call(full_ask(), REPLY)
    assert judgement.flows == {"triagem": 30, "suporte": 88}
    assert judgement.mentions == {"concorrente": True}
    assert judgement.extract == {"concorrente": {"trecho": "a Beta"}}
    assert judgement.branches == {"triagem#m1/quem/0": False}
    assert judgement.fields == {"nome": "Bia"}
    assert judgement.llm_calls == 1 and judgement.usage is None


def test_json_object_inside_reply_text_is_used_when_structured_is_missing():
    """model-calls.md §2.9, §3.5 rule 1: prose and fences around the object are tolerated."""
    text = 'Claro! ```json\n{"flows": {"suporte": 70}, "fields": {"nome": "Linha\nquebrada"}}\n``` fim'
    _, judgement = call(full_ask(), text)
    assert judgement.flows == {"suporte": 70}
    assert judgement.fields == {"nome": "Linha\nquebrada"}      # a raw newline inside a string is tolerated


def test_structured_without_any_section_key_falls_back_to_the_text():
    """model-calls.md §3.5 rule 1: structured must carry at least one of the five section keys."""
    generation = Generation(message='{"flows": {"suporte": 61}}', structured={"message": "oi"})
    _, judgement = call(full_ask(), generation)
    assert judgement.flows == {"suporte": 61}


def test_malformed_reply_warns_and_judges_nothing_but_counts(caplog):
    """model-calls.md §3.5 rule 2: warning with the first 200 characters; llm_calls 1; usage counted."""
    usage = TokenUsage(10, 2, 0)
    agent = make_agent({"understand": ["x" * 300]}, provider=ScriptedProvider(
        script={"understand": ["{not json " + "x" * 300]}, usage=usage))
    with caplog.at_level(logging.WARNING, logger="falai"):
        judgement = falai_calls.understand(agent, full_ask())
    assert (judgement.flows, judgement.mentions, judgement.extract, judgement.branches, judgement.fields) == \
        ({}, {}, {}, {}, {})
    assert judgement.llm_calls == 1 and judgement.usage == usage
    warning = [r for r in caplog.records if r.levelno == logging.WARNING][-1].getMessage()
    assert ("{not json " + "x" * 190) in warning and "x" * 300 not in warning


@pytest.mark.parametrize("raw, score", [
    (85, 85), (55.5, 55.5), ("85", 85), (" 72,5 ", 72.5), ("0x1A", 26), (150, 100), (-3, 0), ("1e3", 100),
])
def test_scores_are_coerced_and_clamped_not_rounded(raw, score):
    """model-calls.md §3.5: numbers or js_number strings, clamped to 0..100, not rounded."""
    _, judgement = call(full_ask(), {"flows": {"suporte": raw}})
    assert judgement.flows == {"suporte": score}


@pytest.mark.parametrize("raw", [True, False, "abc", "", "1_000", "1e400", float("inf"), float("nan"),
                                 10 ** 400, None, [50], {"v": 50}])
def test_unusable_scores_are_dropped(raw):
    """model-calls.md §3.5: bools, rejected strings, non-finite values (OverflowError too) are dropped."""
    _, judgement = call(full_ask(), Generation(message="", structured={"flows": {"suporte": raw, "triagem": 5}}))
    assert judgement.flows == {"triagem": 5}


@pytest.mark.parametrize("raw, answer", [(True, True), (False, False), ("sim", True), (" No ", False),
                                         ("não", False), ("1", True), ("true", True)])
def test_mentions_and_branches_use_the_boolean_coercion(raw, answer):
    """model-calls.md §3.5, §4: the boolean coercion."""
    _, judgement = call(full_ask(), {"mentions": {"concorrente": raw}, "branches": {"q1": raw}})
    assert judgement.mentions == {"concorrente": answer}
    assert judgement.branches == {"triagem#m1/quem/0": answer}


@pytest.mark.parametrize("raw", [1, 0, "talvez", None, [True]])
def test_non_boolean_mentions_and_branches_are_dropped(raw):
    """model-calls.md §3.5: anything the boolean coercion rejects is dropped."""
    _, judgement = call(full_ask(), {"mentions": {"concorrente": raw}, "branches": {"q1": raw}})
    assert judgement.mentions == {} and judgement.branches == {}


def test_extract_drops_none_and_empty_and_does_not_coerce():
    """model-calls.md §3.5: extract values are not coerced; {} stays when every entry was dropped."""
    other = {"id": "outro", "name": "Outro", "on": [{"mention": ["x"], "extract": {"n": {"type": "integer"}}}]}
    ask = full_ask(mentions=[CONCORRENTE, other])
    _, judgement = call(ask, {"extract": {"concorrente": {"trecho": "", "nome do item": None},
                                          "outro": {"n": "3"}}})
    assert judgement.extract == {"concorrente": {}, "outro": {"n": "3"}}


def test_extract_entry_that_is_not_a_dict_is_dropped():
    """model-calls.md §3.5: only dict values of extract are read."""
    _, judgement = call(full_ask(), {"extract": {"concorrente": "a Beta"}, "flows": None})
    assert judgement.extract == {} and judgement.flows == {}


def test_fields_drop_none_and_empty_and_pass_unknown_keys_through():
    """model-calls.md §3.5: raw values, reply order; an unasked key passes through for the applier."""
    _, judgement = call(full_ask(), {"fields": {"porte": 12, "nome": "", "sem-alias": "x", "empresa": None}})
    assert list(judgement.fields.items()) == [("porte", 12), ("sem-alias", "x")]


def test_usage_of_the_call_is_reported():
    """model-calls.md §7: the understand call's usage rides on the judgement."""
    provider = ScriptedProvider(script={"understand": [REPLY]}, usage=True)
    judgement = falai_calls.understand(make_agent(provider=provider), full_ask())
    request = provider.calls[0]
    assert judgement.usage == TokenUsage(len(request.system or "") + len(request.prompt),
                                         len(json.dumps(REPLY, separators=(",", ":"), ensure_ascii=False)), 0)


# §3.1: zero-call rules and failures ------------------------------------------------------------

def test_nothing_to_judge_makes_no_call():
    """model-calls.md §3.1: no scored flows, mentions, branches or fields: zero calls."""
    ask = F.UnderstandAsk(message="oi", scope=F.Scope(data={}), history=[])
    provider = ScriptedProvider(script={})
    assert falai_calls.needs_understand_call(ask) is False
    judgement = falai_calls.understand(make_agent(provider=provider), ask)
    assert judgement == F.Judgement() and provider.calls == []


def test_only_the_floor_flow_to_score_makes_no_call():
    """model-calls.md §3.1: only routing left and the candidates hold only the floor holder's flow."""
    ask = full_ask(candidates=[TRIAGEM], mentions=[], branches=[], fields=[])
    provider = ScriptedProvider(script={})
    assert falai_calls.needs_understand_call(ask) is False
    assert falai_calls.understand(make_agent(provider=provider), ask).llm_calls == 0
    assert provider.calls == []


def test_floor_flow_plus_another_candidate_is_judged():
    """model-calls.md §3.1: something to compare the floor flow with."""
    assert falai_calls.needs_understand_call(full_ask(mentions=[], branches=[], fields=[])) is True


def test_a_lone_candidate_without_a_floor_run_is_judged():
    """model-calls.md §3.1: with a catch-all or idle speaker present the lone flow is scored (engine sends it)."""
    ask = full_ask(floor_run=None, floor_flow=None, floor_step=None, candidates=[SUPORTE], mentions=[],
                   branches=[], fields=[])
    assert falai_calls.needs_understand_call(ask) is True


@pytest.mark.parametrize("change", [{"mentions": [CONCORRENTE]}, {"fields": ["nome"]},
                                    {"branches": [("r", "s", 0, "q")]}])
def test_mentions_branches_or_fields_alone_are_judged(change):
    """model-calls.md §3.1: the floor-only shortcut applies only when routing is all that is left."""
    base = dict(candidates=[TRIAGEM], mentions=[], branches=[], fields=[])
    assert falai_calls.needs_understand_call(full_ask(**{**base, **change})) is True


def test_provider_error_propagates_unchanged():
    """model-calls.md §10.1: the understand call's failure raises out unchanged."""
    error = ProviderError("down", kind="overload")
    agent = make_agent({"understand": [error]})
    with pytest.raises(ProviderError) as raised:
        falai_calls.understand(agent, full_ask())
    assert raised.value is error


def test_dry_script_raises_runtime_error():
    """model-calls.md §12: a call nobody scripted raises RuntimeError out of the understand call."""
    with pytest.raises(RuntimeError, match='no scripted "understand" reply left'):
        falai_calls.understand(make_agent({}), full_ask())


# §2.9: finding a JSON object -------------------------------------------------------------------

def test_find_json_object_skips_unbalanced_and_non_dict_slices():
    """model-calls.md §2.9: first balanced slice that parses to a dict; braces in strings ignored."""
    assert falai_base.find_json_object('a { b {"k": "}{", "n": {"x": 1}} c') == {"k": "}{", "n": {"x": 1}}
    assert falai_base.find_json_object('{"a": "\\"}"} tail') == {"a": '"}'}
    assert falai_base.find_json_object("{bad} {also bad") is None
    assert falai_base.find_json_object("no object") is None
    assert falai_base.find_json_object(None) is None
