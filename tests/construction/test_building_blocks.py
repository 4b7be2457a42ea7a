"""The building blocks the engine stands on: durations, time, templates, predicates, coercion."""
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from falai import (ERROR_KINDS, OUTCOME_MESSAGES, FlowConfigurationError, PredCtx, ProviderError,
                   classify_error, fake_clock)
import falai as F
import falai_base

NOW = datetime(2026, 9, 20, 10, 0, tzinfo=timezone.utc)


# flows.md §13: durations --------------------------------------------------------------------

@pytest.mark.parametrize("text, ms", [("30s", 30_000), ("5m", 300_000), ("24h", 86_400_000),
                                      ("3d", 259_200_000), ("1.5h", 5_400_000), ("0s", 0),
                                      ("0.0005s", 1), ("0.0004s", 0)])
def test_duration_forms_and_half_up_rounding(text, ms):
    assert F.is_duration(text)
    assert F.duration_ms(text) == ms


@pytest.mark.parametrize("text", ["5 min", "1h30m", "2D", "-1h", ".5h", "30", "1w", "3 days", "", "٣s", None, 5])
def test_bad_durations_are_rejected_with_a_message(text):
    assert not F.is_duration(text)
    with pytest.raises(ValueError, match="not a duration"):
        F.duration_ms(text)


# runtime.md §15, persistence.md §2.4: time --------------------------------------------------

def test_iso_is_utc_with_milliseconds_and_z():
    at = datetime(2026, 9, 20, 7, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-3)))
    assert F.iso(at) == "2026-09-20T10:00:00.123Z"
    assert F.iso(datetime(2026, 9, 20, 10, 0)) == "2026-09-20T10:00:00.000Z"   # naive read as UTC


def test_parse_iso_accepts_z_offsets_and_no_zone():
    assert F.parse_iso("2026-09-20T10:00:00.000Z") == NOW
    assert F.parse_iso("2026-09-20T07:00:00-03:00") == NOW
    assert F.parse_iso("2026-09-20T10:00:00") == NOW
    with pytest.raises(ValueError, match="not ISO date-time text"):
        F.parse_iso("yesterday")


def test_epoch_ms_is_integer_arithmetic():
    assert F.to_ms(NOW) == 1789898400000
    assert F.from_ms(1789898400000) == NOW
    assert F.to_ms(NOW + timedelta(days=1)) == 1789984800000


def test_fake_clock_stands_still_and_moves_when_told():
    clock = fake_clock("2026-09-20T10:00:00.000Z")
    assert clock() == NOW and clock.now() == NOW and clock() == clock()
    assert clock.advance("2d") == NOW + timedelta(days=2)
    assert clock.advance(90) == NOW + timedelta(days=2, seconds=90)      # seconds, not ms
    assert clock.advance(0.5) == NOW + timedelta(days=2, seconds=90.5)
    assert clock.set("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert clock().tzinfo is not None


def test_fake_clock_rejects_bad_text_and_bad_steps():
    with pytest.raises(ValueError, match="2026-09-20T10:00:00.000Z"):
        fake_clock("not a time")
    clock = fake_clock("2026-09-20T10:00:00.000Z")
    with pytest.raises(ValueError, match="not a duration"):
        clock.advance("2 days")
    with pytest.raises(TypeError):
        clock.advance(True)


# flows.md §8: templates ----------------------------------------------------------------------

def scope(data=None, context=None, input=None):
    return F.Scope(data=data if data is not None else {}, context=context, input=input)


def test_template_reads_data_context_and_input():
    s = scope({"nome": "Ana"}, {"loja": "Azul"}, {"codigo": "X1"})
    assert F.render("Oi {{data.nome}} da {{ context.loja }} ({{input.codigo}})", s) == "Oi Ana da Azul (X1)"


def test_template_numbers_print_as_javascript():
    s = scope({"a": 3.0, "b": 1.5, "c": 1e-7, "d": 0.000001, "e": 30, "f": True, "g": False, "h": 1e21})
    assert F.render("{{data.a}} {{data.b}} {{data.c}} {{data.d}} {{data.e}} {{data.f}} {{data.g}} {{data.h}}", s) \
        == "3 1.5 1e-7 0.000001 30 true false 1e+21"


def test_template_lists_join_and_dicts_print_as_compact_json():
    s = scope({"tags": ["a", 2, True], "obj": {"k": "ç", "n": [1]}})
    assert F.render("{{data.tags}} | {{data.obj}}", s) == 'a, 2, true | {"k":"ç","n":[1]}'


def test_unknown_placeholder_stays_verbatim():
    s = scope({"nome": None}, {})
    text = "Oi {{data.nmoe}}, {{data.nome}} {{context.lead.name}} {{other.x}} {{input.x}}"
    assert F.render(text, s) == text


def test_blank_placeholder_through_none_is_removed_and_tidied():
    assert F.render("Olá {{context.lead.name}}, tudo bem?", scope(context={"lead": None})) == "Olá, tudo bem?"
    assert F.render("Olá {{context.lead.name}}, tudo bem?", scope(context={})) == "Olá {{context.lead.name}}, tudo bem?"


def test_tidy_rules_apply_only_when_something_was_blank():
    text = "  Oi  {{data.x}}  mundo !  \nlinha   \t\n"
    assert F.render(text, scope({"x": ""})) == "  Oi mundo!\nlinha\n"
    assert F.render("  Oi  {{data.y}}  mundo !  ", scope({"y": "z"})) == "  Oi  z  mundo !  "
    assert F.render("lista: {{data.l}} .", scope({"l": []})) == "lista:."


def test_template_indexes_lists_and_reads_dataclass_attributes():
    @dataclass
    class Lead:
        name: str

    s = scope({"itens": ["a", "b"]}, {"lead": Lead("Bia")})
    assert F.render("{{data.itens.1}} {{context.lead.name}} {{data.itens.7}}", s) == "b Bia {{data.itens.7}}"


def test_render_deep_renders_strings_at_any_depth_only():
    s = scope({"n": "Ana"})
    assert F.render_deep({"t": "{{data.n}}", "l": ["{{data.n}}", 3], "{{data.n}}": {"x": None}}, s) == \
        {"t": "Ana", "l": ["Ana", 3], "{{data.n}}": {"x": None}}


# flows.md §7: predicates -----------------------------------------------------------------------

def ctx(data=None, silenced=None, context=None):
    return PredCtx(context=context, data=data or {}, input=None, run=None, silenced=silenced, now=NOW)


def test_equals_is_strict_json_equality():
    assert F.judge({"equals": {"n": 1}}, ctx({"n": 1.0}), {})
    assert not F.judge({"equals": {"n": 1}}, ctx({"n": True}), {})
    assert not F.judge({"equals": {"n": "1"}}, ctx({"n": 1}), {})
    assert F.judge({"equals": {"l": [1, {"a": None}]}}, ctx({"l": [1.0, {"a": None}]}), {})
    assert not F.judge({"equals": {"l": [1]}}, ctx({"l": [1, 2]}), {})
    assert F.judge({"equals": {"x": None}}, ctx({}), {})


def test_known_and_silenced_and_empty():
    assert F.judge({}, ctx(), {})
    assert F.judge({"known": ["a"]}, ctx({"a": 0}), {})
    assert F.judge({"known": ["a"]}, ctx({"a": False}), {})
    assert not F.judge({"known": ["a"]}, ctx({"a": ""}), {})
    assert F.judge({"silenced": True}, ctx(silenced="humano"), {})
    assert not F.judge({"silenced": True}, ctx(), {})
    assert F.judge({"silenced": False}, ctx(), {})
    assert F.judge({"known": None, "silenced": None}, ctx(), {})      # None keys are skipped


def test_every_key_must_hold_and_named_conditions_get_their_argument():
    seen = []
    vip = F.Condition(check=lambda c, arg: seen.append(arg) or arg in c.context["tags"])
    c = ctx({"a": 1}, context={"tags": ["vip"]})
    assert F.judge({"known": ["a"], "vip": "vip"}, c, {"vip": vip})
    assert not F.judge({"known": ["b"], "vip": "vip"}, c, {"vip": vip})
    assert seen == ["vip"]


def test_callable_predicates_are_judged_for_truthiness():
    assert F.judge(lambda c: c.data.get("a"), ctx({"a": 1}), {})
    assert not F.judge(lambda c: [], ctx(), {})


def test_unregistered_condition_at_run_time_raises():
    with pytest.raises(FlowConfigurationError, match='unknown condition "vip"'):
        F.judge({"vip": True}, ctx(), {})


def test_split_phrases_handles_exclusions_blanks_and_bare_bang():
    assert falai_base.split_phrases([" quer comprar ", "! só agradece ", "  ", "!", "a ! b"]) == \
        (["quer comprar", "a ! b"], ["só agradece"])


# flows.md §2.4, model-calls.md §4: coercion ----------------------------------------------------

@pytest.mark.parametrize("definition, raw, expected", [
    ({"type": "string"}, "x", ("ok", "x")),
    ({"type": "string"}, True, ("ok", "true")),
    ({"type": "string"}, 30.0, ("ok", "30")),
    ({"type": "string"}, 0.000001, ("ok", "0.000001")),
    ({"type": "string"}, 1e-7, ("ok", "1e-7")),
    ({"type": "string"}, 10 ** 400, ("bad-value", None)),
    ({"type": "string"}, ["x"], ("bad-value", None)),
    ({"type": "number"}, "1500,50", ("ok", 1500.5)),
    ({"type": "number"}, "1.500,50", ("bad-value", None)),
    ({"type": "number"}, " 42 ", ("ok", 42)),
    ({"type": "number"}, 42.0, ("ok", 42)),
    ({"type": "number"}, "0x1A", ("ok", 26)),
    ({"type": "number"}, "-0x1A", ("bad-value", None)),
    ({"type": "number"}, "1_000", ("bad-value", None)),
    ({"type": "number"}, "inf", ("bad-value", None)),
    ({"type": "number"}, "nan", ("bad-value", None)),
    ({"type": "number"}, "   ", ("bad-value", None)),
    ({"type": "number"}, "1e400", ("bad-value", None)),
    ({"type": "number"}, True, ("bad-value", None)),
    ({"type": "integer"}, "3,9", ("ok", 3)),
    ({"type": "integer"}, -2.7, ("ok", -2)),
    ({"type": "boolean"}, " Sim ", ("ok", True)),
    ({"type": "boolean"}, "NÃO", ("ok", False)),
    ({"type": "boolean"}, "nao", ("ok", False)),
    ({"type": "boolean"}, 1, ("bad-value", None)),
    ({"type": "boolean"}, "talvez", ("bad-value", None)),
    ({"type": "string", "enum": ["1-10", "11-50"]}, "11-50", ("ok", "11-50")),
    ({"type": "string", "enum": ["1-10"]}, "51+", ("not-in-enum", None)),
    ({"type": "number", "enum": [1, 2]}, "1", ("ok", 1)),
    ({"type": "string", "enum": [1]}, 1, ("not-in-enum", None)),
    ({"type": "boolean", "enum": [1]}, True, ("not-in-enum", None)),
    ({"type": "date"}, "x", ("bad-value", None)),
])
def test_coerce_field(definition, raw, expected):
    assert F.coerce_field(definition, raw) == expected


def test_known_and_extract_modes():
    assert F.is_known(0) and F.is_known(False) and F.is_known([]) and not F.is_known("") and not F.is_known(None)
    assert F.extract_mode({"type": "boolean"}) == "asked"
    assert F.extract_mode({"type": "string"}) == "anywhere"
    assert F.extract_mode({"type": "boolean", "extract": "anywhere"}) == "anywhere"


def test_merge_patch_deletes_on_none():
    data = {"a": 1, "b": 2}
    F.merge_patch(data, {"a": None, "c": 3})
    assert data == {"b": 2, "c": 3}


def test_nullable_envelope_adds_null_to_types_and_enums():
    schema = falai_base.nullable_envelope({"message": {"type": "string"},
                                  "porte": {"type": "string", "enum": ["1-10"], "description": "Porte", "ask": "x"},
                                  "tags": {"type": "array", "items": {"type": "string", "enum": ["a"]}}})
    assert schema == {"type": "object", "additionalProperties": False, "required": ["message", "porte", "tags"],
                      "properties": {"message": {"type": ["string", "null"]},
                                     "porte": {"type": ["string", "null"], "description": "Porte",
                                               "enum": ["1-10", None]},
                                     "tags": {"type": ["array", "null"],
                                              "items": {"type": "string", "enum": ["a"]}}}}


# runtime.md §11.4 and providers.md §8 ------------------------------------------------------------

# Codes falai for Python adds to the original's 38 (docs/guide/conformance.md).
ADDED_CODES = {"tool-only", "repeat-spent", "no-route", "unknown-event", "bad-format", "refused", "corrected",
               "provider-length", "not-asked", "unsaid"}


def test_outcome_messages_has_all_38_codes_with_their_exact_text():
    assert ADDED_CODES <= set(OUTCOME_MESSAGES)
    assert len(set(OUTCOME_MESSAGES) - ADDED_CODES) == 38
    assert OUTCOME_MESSAGES["duplicate-input"] == "this input was already applied"
    assert OUTCOME_MESSAGES["provider-unavailable"] == "the model call failed or came back empty"
    assert OUTCOME_MESSAGES["step-loop"] == "the run moved through 50 steps in one turn"


@pytest.mark.parametrize("status, body, kind", [
    (400, "This model's maximum context length is 8192 tokens", "context"),
    (403, "Your plan does not include API access", "entitlement"),
    (429, "You exceeded your current quota, please check your plan", "quota"),
    (400, "insufficient_quota", "quota"),
    (404, "models/gemini-9 is not found for API version v1beta", "model"),
    (401, "bad", "auth"),
    (400, "API key not valid. Please pass a valid API key.", "auth"),
    (402, "", "quota"),
    (404, "", "model"),
    (429, "slow down", "rate"),
    (400, "blocked by safety settings", "content"),
    (503, "overloaded", "overload"),
    (529, "", "overload"),
    (409, "", "overload"),
    (408, "", "timeout"),
    (None, "Rate limit reached", "rate"),
    (None, "The model is overloaded", "overload"),
    (None, "request timed out", "timeout"),
    (418, "teapot", "invalid"),
    (None, "something odd", "unknown"),
])
def test_classify_error_by_status_and_body(status, body, kind):
    assert classify_error(status=status, body=body) == kind


def test_classify_error_from_exceptions():
    assert classify_error(ProviderError("x", kind="quota")) == "quota"
    assert classify_error(ConnectionRefusedError(111, "Connection refused")) == "network"
    assert classify_error(TimeoutError("slow")) == "timeout"
    try:
        try:
            raise OSError("ECONNRESET by peer")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert classify_error(outer) == "network"


def test_provider_error_attributes_and_wrapping():
    error = ProviderError("gemini 429: slow", provider="gemini", kind="rate", status=429,
                          retry_after_ms=1000, body="x" * 3000)
    assert error.is_transient and error.is_backup_eligible and len(error.body) == 2000
    assert ProviderError.from_exception("p", error) is error
    wrapped = ProviderError.from_exception("p", TimeoutError("slow"))
    assert wrapped.kind == "timeout" and wrapped.provider == "p" and isinstance(wrapped.__cause__, TimeoutError)
    assert len(ERROR_KINDS) == 14 and "length" in ERROR_KINDS
    with pytest.raises(ValueError):
        ProviderError("x", kind="weird")
