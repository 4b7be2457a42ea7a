"""Hypothesis strategies for the property suite: valid agents, input sequences, provider replies.

Not a test module. tests/robustness/test_properties.py draws a ``Scenario`` (an agent's flows and
options, then a list of turns, each an input plus the provider replies it will get) and
runs it the way the README's host loop does.

How long it runs: the default is bounded for CI (``FUZZ_SETTINGS``, derandomized);
``FALAI_FUZZ=long`` multiplies the examples by 50 and picks fresh random seeds;
``FALAI_FUZZ_EXAMPLES=N`` sets the examples per property exactly.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings, strategies as st

from falai import ProviderError, ScriptedProvider, Tool, falai, fake_clock

LONG = os.environ.get("FALAI_FUZZ") == "long"


def fuzz_settings(default_examples: int) -> settings:
    """The settings of one property: bounded and repeatable by default, longer on request."""
    examples = os.environ.get("FALAI_FUZZ_EXAMPLES")
    count = int(examples) if examples else default_examples * (50 if LONG else 1)
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
    return settings(max_examples=count, deadline=None, derandomize=not (LONG or examples),
                    database=None, print_blob=True, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


# The registries every generated flow names (flows.md §1) -----------------------------------------

FIELDS = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "idade": {"type": "integer", "description": "Idade em anos"},
    "ativo": {"type": "boolean", "ask": "Pergunte se a conta está ativa."},
    "porte": {"type": "string", "enum": ["pequeno", "grande"]},
    "valor": {"type": "number", "extract": "asked"},
}
SLUGS = sorted(FIELDS)
EVENT_NAMES = ["chegou", "pago"]


def _record(result: Any) -> Any:
    return lambda params, ctx: result


def _raise(params: Any, ctx: Any) -> None:
    raise ValueError("quebrou")


def _set_name(params: Any, ctx: Any) -> None:
    ctx.set({"nome": "Zé"})


ACTION_BEHAVIOURS = {
    "ok": _record({"ok": True, "detail": "feito"}),
    "falha": _record({"failed": "sem sistema"}),
    "pula": _record({"skipped": "nada a fazer"}),
    "adia": _record({"defer": "5m"}),
    "adia_mal": _record({"defer": "logo"}),
    "explode": _raise,
    "fala": _record({"ok": True, "spoke": True}),
    "estranho": _record(42),
    "grava": _set_name,
}


def registries() -> dict:
    """Fresh registries for one agent (nothing shared between examples)."""
    f = falai()
    actions = {name: f.action(parameters={}, run=run) for name, run in ACTION_BEHAVIOURS.items()}
    actions["anota"] = f.action(parameters={"texto": {"type": "string"}},
                                run=lambda params, ctx: {"ok": True, "detail": str(params.get("texto"))})
    return {
        "actions": actions,
        "events": {"chegou": f.event(direction="inbound"), "pago": f.event()},
        "conditions": {"vip": f.condition(lambda ctx, arg: bool(ctx.data.get("ativo")))},
        "tools": [
            Tool(id="preco", handler=lambda args, ctx: {"value": {"preco": 420, "cidade": args.get("cidade")}},
                 is_read_only=lambda args: True,
                 parameters={"type": "object", "properties": {"cidade": {"type": "string"}}}),
            Tool(id="salva", handler=lambda args, ctx: {"value": "salvo", "data": {"nome": "Ferramenta"}},
                 parameters={"type": "object", "properties": {}}),
        ],
    }


# Values ------------------------------------------------------------------------------------------

words = st.sampled_from(["oi", "quero saber o preço", "sou a Ana", "não", "sim", "42", "", "  ", "çñ 🙂"])
keyish = st.text(alphabet="abc:#-_ 0", min_size=1, max_size=6)
scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                   st.floats(allow_nan=False, allow_infinity=False, width=32), st.text(max_size=8))
json_value = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)
durations = st.sampled_from(["0s", "5s", "10s", "11s", "1m", "30m", "1h", "1.5h", "2d", "30d"])
templates = st.sampled_from([
    "Oi!", "Oi, {{data.nome}}!", "Idade: {{data.idade}} .", "{{input.x}} e {{context.plano}}", "{{data}}",
    "{{data.nome.x}} fim", "Olá {{ data.porte }}  ,  tudo bem?", "{{nada}}", "{{{data.nome}}}", ""])


def field_value(slug: str) -> st.SearchStrategy:
    kind = FIELDS[slug]["type"]
    if "enum" in FIELDS[slug]:
        return st.sampled_from(FIELDS[slug]["enum"])
    return {"string": st.text(max_size=6), "integer": st.integers(-5, 200),
            "boolean": st.booleans(), "number": st.floats(-1e6, 1e6, allow_nan=False)}[kind]


@st.composite
def condition(draw) -> dict:
    """A JSON predicate whose names all resolve (flows.md §7.2, §14.3)."""
    choice = draw(st.sampled_from(["equals", "known", "silenced", "vip", "both"]))
    if choice == "equals" or choice == "both":
        slugs = draw(st.lists(st.sampled_from(SLUGS), min_size=1, max_size=2, unique=True))
        out = {"equals": {slug: draw(field_value(slug)) for slug in slugs}}
        if choice == "both":
            out["known"] = draw(st.lists(st.sampled_from(SLUGS), max_size=2))
        return out
    if choice == "known":
        return {"known": draw(st.lists(st.sampled_from(SLUGS), max_size=2))}
    if choice == "silenced":
        return {"silenced": draw(st.booleans())}
    return {"vip": draw(json_value)}


# Flows -------------------------------------------------------------------------------------------

@st.composite
def target(draw, step_ids: list[str], flow_ids: list[str]) -> Any:
    """A ``Next`` that names only steps and flows that exist (flows.md §5.2)."""
    kinds = ["step", "end", "clear"] + (["flow"] if flow_ids else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "step":
        return draw(st.sampled_from(step_ids))
    if kind == "end":
        return "end"
    if kind == "clear":
        return {"step": draw(st.sampled_from(step_ids)),
                "clear": draw(st.lists(st.sampled_from(SLUGS), max_size=2, unique=True))}
    out = {"flow": draw(st.sampled_from(flow_ids))}
    if draw(st.booleans()):
        out["input"] = draw(json_value)
    return out


@st.composite
def step(draw, step_id: str, step_ids: list[str], flow_ids: list[str]) -> dict:
    """One step of every kind flows.md §5 lists, with only names that resolve."""
    kind = draw(st.sampled_from(["prompt", "collect", "collect", "say", "do", "wait", "waitEvent", "if"]))
    nxt = target(step_ids, flow_ids)
    out: dict = {"id": step_id}
    if kind in ("prompt", "collect"):
        if kind == "prompt" or draw(st.booleans()):
            out["prompt"] = draw(templates)
        if kind == "collect":
            out["collect"] = draw(st.lists(st.sampled_from(SLUGS), min_size=1, max_size=3, unique=True))
            if draw(st.booleans()):
                out["question"] = draw(templates)
            if draw(st.booleans()):
                out["ask"] = {slug: draw(templates) for slug in out["collect"][:1]}
        if draw(st.booleans()):
            out["maxAsks"] = draw(st.integers(1, 3))
        if draw(st.booleans()):
            out["branches"] = draw(st.lists(st.one_of(
                st.fixed_dictionaries({"when": words, "then": nxt}),
                st.fixed_dictionaries({"if": condition(), "then": nxt})), min_size=1, max_size=2))
        if draw(st.booleans()):
            out["tools"] = draw(st.lists(st.sampled_from(["preco", "salva"]), max_size=2, unique=True))
        if draw(st.booleans()):
            out["instructions"] = [{"prompt": draw(templates), "kind": draw(st.sampled_from(["must", "never"]))}]
    elif kind == "say":
        out["say"] = draw(templates)
        if draw(st.booleans()):
            out["media"] = {"slug": draw(keyish)}
        if draw(st.booleans()):
            out["once"] = True
    elif kind == "do":
        action = draw(st.sampled_from(sorted(ACTION_BEHAVIOURS) + ["anota"]))
        out["do"] = action
        if action == "anota":
            out["with"] = {"texto": draw(templates)}
        if draw(st.booleans()):
            out["onFail"] = draw(nxt)
    elif kind == "wait":
        out["wait"] = draw(durations)
        if draw(st.booleans()):
            out["else"] = draw(nxt)
        if draw(st.booleans()):
            out["businessHours"] = True
        if draw(st.booleans()):
            out["branches"] = [{"if": draw(condition()), "then": draw(nxt)}]
    elif kind == "waitEvent":
        out["wait"] = {"event": draw(st.sampled_from(EVENT_NAMES))}
        if draw(st.booleans()):
            out["wait"]["upTo"] = draw(durations)
        if draw(st.booleans()):
            out["else"] = draw(nxt)
    else:
        out["if"] = draw(condition())
        out["else"] = draw(nxt)      # an "if" jumping back needs an else (flows.md §5.8)
    if draw(st.booleans()):
        out["then"] = draw(nxt)
    return out


@st.composite
def trigger(draw) -> dict:
    """One trigger of every kind flows.md §4 lists."""
    kind = draw(st.sampled_from(["message", "catch-all", "mention", "silence", "event"]))
    if kind == "message":
        out: dict = {"message": draw(st.lists(st.sampled_from(["quer preço", "!reclamação", "quer ajuda"]),
                                              max_size=2)) + ["pede algo"]}
    elif kind == "catch-all":
        out = {"message": []}
    elif kind == "mention":
        out = {"mention": draw(st.lists(st.sampled_from(["concorrente", "preço"]), min_size=1, max_size=2))}
        if draw(st.booleans()):
            out["extract"] = {"trecho": {"type": "string"}, "quanto": {"type": "number"}}
    elif kind == "silence":
        out = {"silence": draw(durations)}
        if draw(st.booleans()):
            out["businessHours"] = True
    else:
        out = {"event": draw(st.sampled_from(EVENT_NAMES))}
        if draw(st.booleans()):
            out["after"] = draw(durations)
        if draw(st.booleans()):
            out["businessHours"] = True
    if draw(st.integers(0, 3)) == 3:
        out["if"] = draw(condition())
    if draw(st.booleans()):
        out["repeat"] = draw(st.one_of(st.sampled_from(["once", "always"]),
                                       st.builds(lambda d: {"cooldown": d}, durations)))
    return out


@st.composite
def flow(draw, flow_id: str, flow_ids: list[str]) -> dict:
    count = draw(st.integers(1, 4))
    step_ids = [f"s{i}" for i in range(count)]
    others = [other for other in flow_ids if other != flow_id]
    out = {"id": flow_id, "name": f"Fluxo {flow_id}",
           "steps": [draw(step(step_id, step_ids, others)) for step_id in step_ids]}
    optional = {
        "description": templates,
        "on": st.lists(trigger(), min_size=1, max_size=3),
        "anchor": st.sampled_from(["session", "lead"]),
        "while": condition(),
        "collect": st.lists(st.sampled_from(SLUGS), max_size=2, unique=True),
        "clearOnStart": st.lists(st.sampled_from(SLUGS), max_size=2, unique=True),
        "onEnd": st.sampled_from(["end", "stay", "reset"]),
        "instructions": st.lists(st.fixed_dictionaries({"prompt": templates}), max_size=1),
        "tools": st.lists(st.sampled_from(["preco", "salva"]), max_size=2, unique=True),
    }
    for key, strategy in optional.items():
        # A premise or a cleared field ends most runs early: keep them rarer than triggers. (The
        # top of the range includes the key: hypothesis leans towards small numbers.)
        top = 1 if key == "on" else 5 if key in ("while", "clearOnStart") else 2
        if draw(st.integers(0, top)) == top:
            out[key] = draw(strategy)
    return out


# Provider replies (model-calls.md §3.5, §5.5) --------------------------------------------------------

def _aliases(flow_ids: list[str]) -> st.SearchStrategy:
    return st.sampled_from(flow_ids + ["f9", "flows", "", "x y"])


@st.composite
def understand_reply(draw, flow_ids: list[str], hostile: frozenset = frozenset()) -> Any:
    """A reply to the understand call: valid, malformed, wrong types, unknown keys, huge or deep."""
    kind = draw(st.sampled_from(["valid", "valid", "valid", "wrong-types", "text", "unknown-keys", "error"]
                                + sorted(hostile & {"huge", "deep"})))
    score = st.one_of(st.integers(0, 100), st.integers(-1000, 1000), st.sampled_from(["95", "4,5", "0x40", "abc", ""]),
                      st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none())
    if kind == "valid":
        reply: dict = {"flows": {draw(st.sampled_from(flow_ids)): draw(st.integers(30, 100)),
                                 **draw(st.dictionaries(_aliases(flow_ids), st.integers(0, 100), max_size=2))}}
        if draw(st.booleans()):
            reply["fields"] = {slug: draw(st.one_of(field_value(slug), scalar))
                               for slug in draw(st.lists(st.sampled_from(SLUGS), max_size=2, unique=True))}
        if draw(st.booleans()):
            reply["mentions"] = draw(st.dictionaries(_aliases(flow_ids), st.one_of(st.booleans(), words), max_size=2))
        if draw(st.booleans()):
            reply["extract"] = draw(st.dictionaries(_aliases(flow_ids), st.fixed_dictionaries(
                {}, optional={"trecho": st.text(max_size=5),
                              "quanto": st.one_of(scalar, st.floats(), st.lists(st.floats(), max_size=2))}),
                max_size=2))
        if draw(st.booleans()):
            reply["branches"] = draw(st.dictionaries(st.sampled_from(["q1", "q2", "b1"]),
                                                     st.one_of(st.booleans(), words), max_size=2))
        return reply
    if kind == "wrong-types":
        return draw(st.fixed_dictionaries({}, optional={
            "flows": st.one_of(st.dictionaries(_aliases(flow_ids), score, max_size=3), json_value),
            "fields": st.one_of(st.dictionaries(st.sampled_from(SLUGS + ["zz"]), json_value, max_size=3), json_value),
            "mentions": json_value, "extract": json_value, "branches": json_value}))
    if kind == "text":
        return draw(st.one_of(st.text(max_size=40), st.sampled_from([
            "", "   ", '{"flows": {"f0": 90}', 'Claro! {"flows": {"f0": 80}} espero ter ajudado',
            '```json\n{"flows": {"f1": 70}}\n```', "{{{{", '{"flows": "x"}', "[1, 2]", "null"])))
    if kind == "unknown-keys":
        return {"flows": {flow_ids[0]: 90}, "zz": draw(json_value), "message": draw(st.text(max_size=5))}
    if kind == "huge":
        size = draw(st.sampled_from([20_000, 70_000]))
        return draw(st.sampled_from(["{" * size, '{"flows":' * (size // 9), "9" * size,
                                     '{"fields": {"nome": "' + "x" * size + '"}}']))
    if kind == "deep":
        depth = draw(st.integers(100, 300))     # ScriptedProvider copies a reply: deeper would fail there
        return {"flows": {flow_ids[0]: 90}, "extract": {flow_ids[0]: {"trecho": _deep(depth)}},
                "fields": {"nome": _deep(depth)}}
    return draw(errors())


def _deep(depth: int) -> Any:
    value: Any = "fundo"
    for _ in range(depth):
        value = [value]
    return value


def errors() -> st.SearchStrategy:
    return st.sampled_from([
        ProviderError("sobrecarregado", provider="scripted", kind="overload", status=529),
        ProviderError("cota", provider="scripted", kind="quota", status=429, reset_at_ms=1_800_000_000_000),
        ProviderError("chave", provider="scripted", kind="auth", status=401),
        RuntimeError("caiu a conexão"),
    ]).map(copy.copy)


@st.composite
def speak_reply(draw, hostile: frozenset = frozenset()) -> Any:
    """A reply to a speak round: an envelope, tool calls, text, a broken envelope, an error, huge or deep."""
    kind = draw(st.sampled_from(["valid", "valid", "valid", "tools", "text", "wrong-types", "error"]
                                + sorted(hostile & {"huge", "deep"})))
    if kind == "valid":
        reply = {"message": draw(words)}
        for slug in draw(st.lists(st.sampled_from(SLUGS), max_size=2, unique=True)):
            reply[slug] = draw(st.one_of(field_value(slug), scalar))
        return reply
    if kind == "tools":
        calls = draw(st.lists(st.fixed_dictionaries(
            {"toolName": st.sampled_from(["preco", "salva", "sumiu"])},
            optional={"arguments": st.dictionaries(st.sampled_from(["cidade", "zz"]), scalar, max_size=2)}),
            min_size=1, max_size=2))
        return {"message": "", "toolCalls": calls}
    if kind == "text":
        return draw(st.one_of(st.text(max_size=30), st.sampled_from([
            "", "  ", '{"message": "Oi', '{"message": "Oi!"} e mais', "```\n{\"message\": \"Oi\"}\n```",
            '{"message": 5}', "{{{", "Só texto."])))
    if kind == "wrong-types":
        return draw(st.fixed_dictionaries({}, optional={"message": json_value, "nome": json_value,
                                                        "idade": json_value, "zz": json_value}))
    if kind == "huge":
        size = draw(st.sampled_from([20_000, 70_000]))
        return draw(st.sampled_from(["{" * size, '{"message": "' + "a" * size + '"}', "\\" * size,
                                     '{"message":' * (size // 11)]))
    if kind == "deep":
        return {"message": "Oi", "nome": _deep(draw(st.integers(100, 300)))}
    return draw(errors())


# Inputs (runtime.md §2) --------------------------------------------------------------------------

silenced_forms = st.one_of(
    st.none(), st.none(), st.none(), st.none(), st.none(), st.just("humano assumiu"),
    st.fixed_dictionaries({"reason": st.just("pausa")},
                          optional={"understand": st.booleans(), "skip": st.booleans()}))


@st.composite
def turn_input(draw, flow_ids: list[str], hostile: frozenset = frozenset()) -> dict:
    """The keywords of one turn, except session and session_id.

    A wake is a placeholder the runner resolves against what was scheduled so far:
    ``("scheduled", i)``, ``("stale", i)`` (one already fired) or a forged key.
    """
    kind = draw(st.sampled_from(["message", "message", "message", "wake", "wake", "event", "start", "start"]))
    out: dict = {}
    if kind == "message":
        out["message"] = draw(words)
        out["id"] = draw(st.sampled_from(["m1", "m2", "m3", "m4", None, ""]))
    elif kind == "wake":
        out["wake"] = draw(st.one_of(st.tuples(st.sampled_from(["scheduled", "stale"]), st.integers(0, 5)),
                                     keyish, st.sampled_from(["f0#m1:s0:1", "f0#m1:s0:1:retry:1", "silence:x"])))
    elif kind == "event":
        out["event"] = draw(st.sampled_from(EVENT_NAMES))
        out["key"] = draw(st.sampled_from(["e1", "e2", "e1"]))
        if draw(st.booleans()):
            out["payload"] = draw(st.one_of(json_value, st.builds(_deep, st.integers(500, 6000)))
                                  if "deep" in hostile else json_value)
        if draw(st.booleans()):
            out["hop"] = draw(st.integers(0, 6))
    else:
        start = {"flow": draw(st.sampled_from(flow_ids * 3 + ["sumiu"])), "key": draw(st.sampled_from(["k1", "k2"]))}
        if draw(st.booleans()):
            start["input"] = draw(st.one_of(json_value, st.builds(_deep, st.integers(500, 6000)))
                                  if "deep" in hostile else json_value)
        if draw(st.booleans()):
            start["hop"] = draw(st.integers(0, 6))
        out["start"] = start
    silenced = draw(silenced_forms)
    if silenced is not None:
        out["silenced"] = silenced
    if draw(st.integers(0, 3)) == 3:
        out["context"] = {"plano": draw(st.sampled_from(["ouro", "prata"]))}
    if draw(st.integers(0, 3)) == 3:
        out["anchors"] = {"lead": {"key": draw(st.sampled_from(["lead:1", "lead:2"]))}}
    return out


@dataclass
class Turn:
    """One input, the replies the provider gives during it, and how far the clock moves first."""
    kwargs: dict
    understand: list
    speak: list
    compaction: list
    advance_s: int


def _short(value: Any, depth: int = 0) -> Any:
    """A value cut down for a failure report: long texts and deep or long containers elided."""
    if isinstance(value, str):
        return value if len(value) <= 80 else f"{value[:40]}...<{len(value)} chars>"
    if depth >= 8 and isinstance(value, (list, dict)):
        return "<deeper>"
    if isinstance(value, list):
        return [_short(item, depth + 1) for item in value[:12]] + ([f"<{len(value)} items>"] if len(value) > 12 else [])
    if isinstance(value, dict):
        return {key: _short(item, depth + 1) for key, item in value.items()}
    if isinstance(value, Turn):
        return Turn(**{name: _short(getattr(value, name), depth) for name in value.__dataclass_fields__})
    return value


@dataclass
class Scenario:
    flows: list
    idle: Any
    compaction: dict | None
    business_hours: bool
    turns: list = field(default_factory=list)

    def __repr__(self) -> str:
        return (f"Scenario(flows={_short(self.flows)!r}, idle={self.idle!r}, compaction={self.compaction!r}, "
                f"business_hours={self.business_hours!r}, turns={[_short(turn) for turn in self.turns]!r})")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def agent(self, provider: Any) -> Any:
        """A fresh agent for this scenario (fresh registries, a fake clock at a fixed instant)."""
        options = registries()
        business = (lambda at, ctx: at.replace(hour=max(at.hour, 9))) if self.business_hours else None
        return falai().fields(copy.deepcopy(FIELDS)).agent(
            name="Ana", provider=provider, flows=copy.deepcopy(self.flows), idle=copy.deepcopy(self.idle),
            compaction=copy.deepcopy(self.compaction), business_hours=business,
            clock=fake_clock("2026-09-20T10:00:00.000Z"), **options)


@st.composite
def scenario(draw, hostile: frozenset = frozenset(), max_turns: int = 5) -> Scenario:
    """An agent and the turns it gets; ``hostile`` adds "huge" and / or "deep" replies and payloads."""
    flow_ids = [f"f{i}" for i in range(draw(st.integers(1, 3)))]
    flows = [draw(flow(flow_id, flow_ids)) for flow_id in flow_ids]
    # The first flow can always be routed to, so most scenarios reach their steps.
    flows[0]["on"] = [{"message": ["pede algo"]}, *flows[0].get("on", [])]
    idle = draw(st.sampled_from(["silent", {"prompt": "Atenda {{context.plano}}."}, None]))
    compaction = draw(st.one_of(st.none(), st.just({"maxTokens": 40, "preserveRecentCount": 2})))
    out = Scenario(flows=flows, idle=idle, compaction=compaction, business_hours=draw(st.booleans()))
    for _ in range(draw(st.integers(1, max_turns))):
        out.turns.append(Turn(
            kwargs=draw(turn_input(flow_ids, hostile)),
            understand=draw(st.lists(understand_reply(flow_ids, hostile), min_size=1, max_size=2)),
            speak=draw(st.lists(speak_reply(hostile), min_size=1, max_size=3)),
            compaction=draw(st.lists(st.one_of(st.just({"message": "Resumo."}), errors()), max_size=1)),
            advance_s=draw(st.sampled_from([0, 1, 30, 3600, 90_000]))))
    return out


def provider_for(turn: Turn, provider_class: type = ScriptedProvider) -> ScriptedProvider:
    """A ScriptedProvider holding this turn's replies (copied: a reply is never shared across runs)."""
    return provider_class(script={"understand": copy.deepcopy(turn.understand), "speak": copy.deepcopy(turn.speak),
                                  "compaction": copy.deepcopy(turn.compaction)})


# Known defects of issue 8, as explicit examples: each property that covers one fails on it for sure --------

def _known(steps: list, *turns: Turn) -> Scenario:
    flow = {"id": "f0", "name": "Fluxo f0", "on": [{"message": ["pede algo"]}], "steps": steps}
    return Scenario(flows=[flow], idle="silent", compaction=None, business_hours=False, turns=list(turns))


# A start whose input nests 5000 levels parks its run; the next turn deep-copies the session. (5000,
# not the 500-990 that already break a host: hypothesis raises the recursion limit while it runs.)
DEEP_INPUT = _known([{"id": "s0", "wait": "1h"}],
                    Turn({"start": {"flow": "f0", "key": "k1", "input": _deep(5000)}}, [], [], [], 0),
                    Turn({"message": "oi", "id": "m1"}, [{"flows": {"f0": 10}}], [], [], 0))
# A collect step asks, the customer answers something else, the step asks again under the same visit.
RE_ASK = _known([{"id": "s0", "collect": ["nome"]}],
                Turn({"start": {"flow": "f0", "key": "k1"}}, [], [{"message": "Qual é o seu nome?"}], [], 0),
                Turn({"message": "oi", "id": "m1"}, [{"flows": {}}], [{"message": "E o seu nome?"}], [], 0))
# A say step with media, and a chain into another flow with an input.
SHARED_MEDIA = _known([{"id": "s0", "say": "Oi", "media": {"slug": "foto"}}],
                      Turn({"start": {"flow": "f0", "key": "k1"}}, [], [], [], 0))
