"""falai's two model-call protocols, ``Lean`` and ``V4``, behind one seam (falai_calls.ModelCalls).

An agent chooses one when it is built (``falai(protocol=...)``, python-api.md); its ``Compiled``
(``agent.compiled``, the owner of every cache of the agent) keeps the object, which keeps what
the calls build once, read only by its own methods. Each lays out the understand request and
the speak request its own way; both read replies alike (falai_calls). ``V4`` is the TypeScript
original's, kept byte for byte to cross-check it (docs/guide/conformance.md); ``Lean``, the
default, asks the same questions in fewer tokens (docs/guide/tokens.md). To change how a
protocol talks to the model, read this module.

Sections: the v4 understand prompt (model-calls.md §3.4); the v4 speak prompt (§5.2-§5.4); the
lean understand call; the lean speak call; the two protocol objects.

SPDX-License-Identifier: MIT. Copyright (c) 2026 The falai for Python authors; full text in LICENSE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from falai_base import (
    GenerateRequest, Scope, SpeakAsk, UnderstandAsk, closed_object, compact_json, extract_mode,
    is_known, message_trigger, triggers_of,
)

from falai_calls import (
    DEFAULT_ANSWER_GUIDELINE, Envelope, LeanReading, ModelCalls, SpeakCall, UnderstandCall,
    asks_routing, envelope_part, field_line, flow_name, flow_texts, input_section,
    instructions_section, join_sections, json_text, knowledge_section, latest_message_section,
    mention_extract, mention_phrase_lines, mention_trigger, phrases, render_text, stable_prefix,
    templated,
)

if TYPE_CHECKING:
    from falai import Agent


# The v4 understand prompt (model-calls.md §3.4) -----------------------------------------------

def already_known_section(agent: Agent, data: dict) -> str | None:
    """``## Already known``: the agent's known fields, in definition order (model-calls.md §2.6)."""
    lines = [f"- {slug}: {json_text(data[slug])}" for slug in agent.fields
             if slug in data and is_known(data[slug])]
    if not lines:
        return None
    return ("## Already known\nThese values are settled. Never ask for them again.\n"
            + "\n".join(lines))


SCORE_RUBRIC = ("How to score:\n"
                "- 90–100: explicit keywords and clear intent\n"
                "- 70–89: strong contextual evidence and relevant keywords\n"
                "- 50–69: moderate relevance\n"
                "- 30–49: weak connection or ambiguous\n"
                "- 0–29: minimal or no evidence")


UNDERSTAND_TASK = ("## Task\nJudge the customer's latest message, quoted below, against the "
                   "conversation so far. Only the customer's own words are evidence: never the "
                   "assistant's questions, suggestions or "
                   'guesses. Answer with one JSON object in the shape given under "Output".')


def _understand_prompt_v4(agent: Agent, ask: UnderstandAsk, scope: Scope, envelope: Envelope,
                          identity: str | None) -> str:
    """The v4 understand prompt: the sections of §3.4, in order, each only when it has something to
    say."""
    return join_sections(
        identity, UNDERSTAND_TASK, _current_flow_section(agent, ask, scope),
        already_known_section(agent, ask.scope.data),
        envelope_part(envelope, "flows", lambda: _candidates_section(envelope.cand, scope),
                      envelope.cand_templated),
        envelope_part(envelope, "mentions", lambda: _mentions_section(envelope.ment, scope),
                      envelope.ment_templated),
        envelope_part(envelope, "branches", lambda: _branches_section(envelope.branches)),
        envelope_part(envelope, "fields", lambda: _fields_section(agent, envelope.fields)),
        latest_message_section(ask.message),
        envelope_part(envelope, "output", lambda: _understand_output_section(envelope.schema)))


def _candidates_section(cand: list, scope: Scope) -> str | None:
    """``## Flows the customer may want``: each candidate numbered, with its phrases, then the
    rubric (§3.4 item 5)."""
    if not cand:
        return None
    lines = ["## Flows the customer may want",
             "Score every flow below from 0 to 100 for how well the customer's latest message fits "
             "it, the current flow included."]
    for n, (alias, flow) in enumerate(cand, 1):
        lines.append(f"{n}. {alias} — {_named(flow, scope)}")
        plain, excluded = phrases(triggers_of(flow, "message"), "message", scope)
        if plain:
            lines.append(f"   The customer says things like: {'; '.join(plain)}")
        if excluded:
            lines.append(f"   Score 0 when: {'; '.join(excluded)}")
    lines.append(SCORE_RUBRIC)
    return "\n".join(lines)


def _mentions_section(ment: list, scope: Scope) -> str | None:
    """``## Things the customer may mention``: each mention with its phrases and extract (§3.4 item
    6)."""
    if not ment:
        return None
    lines = ["## Things the customer may mention",
             "Answer true only on clear, explicit evidence in the customer's message. The phrases "
             "of an item are alternatives: one match is enough. An exclusion overrides any match."]
    for alias, flow in ment:
        lines.append(f"- {alias} — {_named(flow, scope)}")
        lines += mention_phrase_lines(flow, scope)
        extract = mention_extract(flow)
        if extract:
            lines.append("  When true, also extract these values from the message:")
            lines += [f"  - {field_line(name, d)}" for name, d in extract.items()]
    return "\n".join(lines)


def _branches_section(branches: list) -> str | None:
    """``## Questions about this message``: one line per rendered when (§3.4 item 7)."""
    if not branches:
        return None
    return "\n".join(["## Questions about this message",
                      "Answer each question with true or false, judging the customer's latest "
                      "message in the context of the conversation."]
                     + [f"- {alias}: {when}" for alias, when in branches])


def _fields_section(agent: Agent, fields: list) -> str | None:
    """``## Details the customer may have given``: one line per field, under its alias (§3.4 item
    8)."""
    if not fields:
        return None
    return "\n".join(["## Details the customer may have given",
                      "Report a value only when the customer gave it in this message. Never guess, "
                      "and never take a value from the assistant's words. Use null when it was not "
                      "given."]
                     + [f"- {field_line(alias, agent.fields.get(slug))}" for alias, slug in fields])


def _named(flow: dict, scope: Scope) -> str:
    """``<name>[: <rendered description>]``."""
    text = render_text(flow.get("description"), scope)
    return f"{flow_name(flow)}: {text}" if text else flow_name(flow)


def _current_flow_section(agent: Agent, ask: UnderstandAsk, scope: Scope) -> str | None:
    """``## Current flow`` (model-calls.md §3.4 item 3), only with a floor run."""
    if ask.floor_run is None and ask.floor_flow is None:
        return None
    flow = ask.floor_flow
    if not flow:
        assert ask.floor_run is not None    # no floor flow: the floor run names it
        flow = {"id": ask.floor_run.flow_id}
    lines = ["## Current flow", f'The conversation is in the flow "{flow_name(flow)}" (id: '
                                f'{flow.get("id")}).']
    description = render_text(flow.get("description"), scope)
    if description:
        lines.append(f"About this flow: {description}")
    step = ask.floor_step
    if isinstance(step, dict):
        lines.append(f"Current step: {step.get('id')}")
        prompt = render_text(step.get("prompt"), scope)
        if prompt:
            lines.append(f"What the step is doing: {prompt}")
        if ask.floor_pending:
            lines.append("Still being asked for:")
            lines += [f"- {field_line(slug, agent.fields.get(slug))}" for slug in ask.floor_pending]
    lines.append("The customer may continue here or switch to something else; score the current "
                 "flow like any other.")
    return "\n".join(lines)


_SKELETON_LEAF = {"flows": 0, "mentions": False, "branches": False, "extract": None, "fields": None}
_OUTPUT_LINES = {
    "flows": '"flows": a score from 0 to 100 for every flow under "Flows the customer may want"',
    "mentions": '"mentions": true or false for every item under "Things the customer may mention"',
    "extract": '"extract": for each mention, the values pulled from the message, null when not '
               'given',
    "branches": '"branches": true or false for every question under "Questions about this message"',
    "fields": '"fields": each detail the customer gave in this message, null when not given',
}


def _skeleton(node: dict, leaf: Any) -> Any:
    """The schema as an example: object nodes expand into their properties, other nodes are
    ``leaf``."""
    if (isinstance(node, dict) and node.get("type") == "object"
            and isinstance(node.get("properties"), dict)):
        return {key: _skeleton(child, leaf) for key, child in node["properties"].items()}
    return leaf


def _understand_output_section(schema: dict) -> str:
    """``## Output``: a line per present section, then the schema's skeleton as compact JSON (§3.4
    item 10)."""
    present = list(schema["properties"])
    skeleton = {key: _skeleton(schema["properties"][key], _SKELETON_LEAF[key]) for key in present}
    return "\n".join(
        ["## Output",
         "Return exactly one JSON object and nothing else: no prose, no code fence. Every key is "
         "required; use null where there is nothing to report."]
        + [f"- {_OUTPUT_LINES[key]}" for key in present]
        + ["The exact shape:", compact_json(skeleton)])


# The v4 speak prompt (model-calls.md §5.2-§5.4) ---------------------------------------------

DEFAULT_COLLECT_GUIDELINE = ("Collect what is still missing below, in the flow of the "
                             "conversation, one or two things per message.")
GUIDELINE_HEADING = "## Guideline for your reply (adapt to the conversation)"
TOOLS_SECTION = ("## Tools\nCall the provided tools when something must be looked up or done "
                 "before you answer. Once you have enough, answer the customer.")
WRAP_UP_SECTION = ("## Wrap up\nAnswer the customer now, using the tool results in the "
                   "conversation. Do not call any tools.")


def response_format_section(agent: Agent, wire: list[tuple[str, str]]) -> str:
    lines = ["## Response format",
             'Answer with one JSON object and nothing else: no text around it, no code fences. '
             '"message" is what '
             "you say to the customer, as natural text; it never contains field names, keys or raw "
             "values."]
    for slug, name in wire:
        lines.append(f'- "{name}": {field_line(slug, agent.fields.get(slug))}. '
                     "The value the customer gave, or null.")
    if wire:
        lines += ["Rules for these properties:",
                  "- Fill a property only with what the customer actually said, in this message or "
                  "earlier; never guess.",
                  "- When the customer gives several details at once, take every one of them.",
                  "- A property the customer did not answer stays null: never a question or a "
                  "placeholder.",
                  "- Write the property names exactly as shown."]
    return "\n".join(lines)


def speak_prompt(agent: Agent, ask: SpeakAsk, wire: list[tuple[str, str]],
                 identity: str | None) -> str:
    """The v4 speak prompt, without the round section, for a talk step or the idle speaker (§5.3).

    A step ``prompt`` that renders blank counts as absent, so the default
    guideline applies (inferred: a heading with nothing under it helps nobody).
    """
    scope = ask.scope
    if ask.step is None:
        idle = agent.idle if isinstance(agent.idle, dict) else {}
        return join_sections(
            identity, f"{GUIDELINE_HEADING}\n{render_text(idle.get('prompt'), scope)}".strip(),
            instructions_section(ask.instructions, scope), input_section(ask),
            response_format_section(agent, []))
    guideline = render_text(ask.step.get("prompt"), scope) or (
        DEFAULT_COLLECT_GUIDELINE if ask.pending else DEFAULT_ANSWER_GUIDELINE)
    return join_sections(
        identity, flow_section(ask.flow or {}),
        f"{GUIDELINE_HEADING}\n{guideline}", _still_to_collect_section(agent, ask),
        already_known_section(agent, scope.data), instructions_section(ask.instructions, scope),
        input_section(ask), response_format_section(agent, wire))


def flow_section(flow: dict) -> str | None:
    """The speak prompt's ``## Flow`` section, the flow's name and description (both protocols)."""
    text = flow_name(flow) if flow else ""
    if flow.get("description"):
        text += f": {flow['description']}"
    return f"## Flow\n{text}" if text else None


def _still_to_collect_section(agent: Agent, ask: SpeakAsk) -> str | None:
    if not ask.pending:
        return None
    assert ask.step is not None             # fields are pending only on a talk step
    step_ask = ask.step["ask"] if isinstance(ask.step.get("ask"), dict) else {}
    lines = ["## Still to collect",
             "Ask for these in this order, at the pace the guideline sets. If the customer's "
             "message already gives one of them, take it and do not ask for it again."]
    for slug in ask.pending:
        definition = agent.fields.get(slug)
        lines.append(f"- {field_line(slug, definition)}")
        wording = step_ask.get(slug)
        if wording is None and isinstance(definition, dict):
            wording = definition.get("ask")
        how = render_text(wording, ask.scope)
        if how:
            lines.append(f"  How to ask: {how}")
    return "\n".join(lines)


# The lean understand call (docs/guide/tokens.md) ---------------------------------------------
#
# Same judgement, fewer tokens: the agent-constant text (task, rules, rubric, the flow, mention and
# field catalogs) is the stable system part ahead of the history, so every session of the agent
# shares it as a cached prefix; the schema is the same on every call of the agent; only the turn's
# facts follow the history; and the reply lists only what holds.

LEAN_TASK = ("## Task\nJudge the customer's latest message in context, by their own words only. "
             "List only what "
             'holds; judge every item below unless "This turn" names which:')
LEAN_KEY_RULES = {     # the schema gives each item's keys: the rules say what belongs in each list
    "flows": "- flows: each flow it fits, the current one too, scored: 90+ explicit keywords and "
             "intent, 70+ strong context, 50+ moderate, 30+ weak.",
    "mentions": "- mentions: the ids the customer clearly brought up; phrases are alternatives, an "
                "exclusion overrides.",
    "extract": "- extract: each value a listed mention gives (a list: one per element).",
    "branches": "- branches: the ids of the questions answered yes.",
    "fields": '- fields: "<id>: <value>" per detail it gives, not already known; never guess.',
}


@dataclass(slots=True)
class LeanParts:
    """The agent-constant part of a lean understand call: system text after the stable prefix,
    schema."""
    text: str
    schema: dict
    flows: set              # flow ids described in the catalog
    mentions: set           # mention flow ids described in the catalog
    slugs: list             # the fields described in the catalog (extract "anywhere")
    system: str = ""        # the call's system text: the knowledge base, then ``text``


def _lean_title(flow: dict, scope: Scope) -> str:
    """``- <id>[ — <name>][: <description>]``: the name only when it says more than the id (no text
    twice: "Triagem" for the id "triagem" says nothing more)."""
    name = flow.get("name")
    named = name and str(name).casefold() != str(flow.get("id")).casefold()
    text = render_text(flow.get("description"), scope)
    return (f"- {flow.get('id')}" + (f" — {flow['name']}" if named else "")
            + (f": {text}" if text else ""))


def _lean_flow_entry(flow: dict, scope: Scope) -> list[str]:
    lines = [_lean_title(flow, scope)]
    plain, excluded = phrases(triggers_of(flow, "message"), "message", scope)
    if plain:
        lines.append(f"  Says: {'; '.join(plain)}")
    if excluded:
        lines.append(f"  Score 0 when: {'; '.join(excluded)}")
    return lines


def _lean_mention_entry(flow: dict, scope: Scope) -> list[str]:
    lines = [_lean_title(flow, scope)] + mention_phrase_lines(flow, scope)
    extract = mention_extract(flow)
    if extract:
        lines.append("  Values: " + "; ".join(field_line(name, d) for name, d in extract.items()))
    return lines


def lean_schema(keys: Iterable[str], ids: dict | None = None, most: dict | None = None) -> dict:
    """The lean reply schema: closed lists of small typed items, valid for strict structured output
    on Gemini, OpenAI and Anthropic (no descriptions: the system text says what each key holds).

    ``ids`` (``flows``, ``mentions``, ``extract``, ``names``: the agent's) make those strings an
    enum and ``most`` caps each list, with scores 0-100, so a weak model under a grammar cannot run
    away inventing ids or lengthening lists until its output cap (docs/guide/providers.md, "Local
    models")."""
    text = {"type": "string"}
    ids, most = ids or {}, most or {}

    def named(key: str) -> dict:
        return {"type": "string", "enum": list(ids[key])} if ids.get(key) else text

    score = {"type": "integer", "minimum": 0, "maximum": 100} if ids else {"type": "integer"}
    # A field is one "<id>: <value>" string (read by lean_field_item): a third of the schema tokens
    # of an {"id","value"} object, and the value travels as text either way.
    items = {"flows": closed_object({"id": named("flows"), "score": score}),
             "mentions": named("mentions"),
             "extract": closed_object({"id": named("extract"), "name": named("names"),
                                       "value": text}),
             "branches": text, "fields": text}
    return closed_object({key: {"type": "array", "items": items[key],
                                **({"maxItems": most[key]} if most.get(key) else {})}
                          for key in keys})


def _lean_bounds(agent: Agent, flows: list[dict]) -> tuple[dict, dict]:
    """The ids and list lengths of the agent's lean understand schema (flows, mentions, fields)."""
    mentions = [f for f in flows if mention_trigger(f).get("mention")]
    extracting = [f for f in mentions if mention_extract(f)]
    names = list(dict.fromkeys(name for f in extracting for name in mention_extract(f)))
    branches = sum(1 for f in flows for st in f.get("steps") or [] if isinstance(st, dict)
                   for b in st.get("branches") or []
                   if isinstance(b, dict) and b.get("when") is not None)
    # With max_candidates the turn's few candidates travel after the history: an enum of every flow
    # would put the whole catalog back in each call, so there the ids stay free strings.
    every = [f["id"] for f in flows] if agent.max_candidates is None else []
    ids = {"flows": every, "mentions": [f["id"] for f in mentions],
           "extract": [f["id"] for f in extracting], "names": names}
    return ids, {"flows": len(flows), "mentions": len(mentions), "branches": branches,
                 "fields": len(agent.fields)}


def _collect_list(part: dict) -> list:
    collect = part.get("collect")
    return collect if isinstance(collect, list) else []


def lean_parts(agent: Agent) -> LeanParts:
    """The agent-constant part of its lean understand calls (``Lean`` keeps it).

    One system text and one schema for every call of the agent, whether it routes or asks only
    for fields: a call that does not route says so after the history ("Flows to score: none"),
    so a conversation's requests share their whole prefix up to the history's end.
    """
    empty = Scope(data={}, context=None)
    flows = [f for f in agent.flows if isinstance(f, dict) and isinstance(f.get("id"), str)]
    # With max_candidates the turn's few candidates travel after the history instead of a full
    # catalog.
    catalog = [f for f in flows if message_trigger(f, True)
               and not templated(*flow_texts(f, "message"))] if agent.max_candidates is None else []
    mentions = [f for f in flows if mention_trigger(f).get("mention")
                and not templated(*flow_texts(f, "mention"))]
    # Only fields some flow collects can ever be asked (harvestable, the asker's pending): the rest
    # is dead text.
    collected = {slug for f in flows
                 for part in [f, *(st for st in f.get("steps") or [] if isinstance(st, dict))]
                 for slug in _collect_list(part)}
    slugs = [slug for slug, d in agent.fields.items()
             if slug in collected and extract_mode(d if isinstance(d, dict) else {}) == "anywhere"]
    keys = [key for key, present in (
        # Only a message trigger makes a flow a candidate beside the floor's own: else no call
        # routes.
        ("flows", any(triggers_of(f, "message") for f in flows)),
        ("mentions", any(mention_trigger(f).get("mention") for f in flows)),
        ("extract", any(mention_extract(f) for f in flows)),
        ("branches", any(isinstance(b, dict) and b.get("when") is not None
                         for f in flows for st in f.get("steps") or [] if isinstance(st, dict)
                         for b in st.get("branches") or [])),
        ("fields", bool(agent.fields))) if present]
    sections = [LEAN_TASK + "\n" + "\n".join(LEAN_KEY_RULES[key] for key in keys)]
    if catalog:
        sections.append("\n".join(["## Flows"] + [line for f in catalog
                                                   for line in _lean_flow_entry(f, empty)]))
    if mentions:
        sections.append("\n".join(["## Things the customer may mention"]
                                  + [line for f in mentions
                                     for line in _lean_mention_entry(f, empty)]))
    if slugs and agent.max_candidates is None:
        sections.append("\n".join(["## Details"] + [
            f"- {lean_field_line(slug, agent.fields.get(slug))}" for slug in slugs]))
    text = join_sections(*sections)
    # The knowledge base stays (it can tell what a message means); the Identity is for the speaker.
    return LeanParts(text, lean_schema(keys, *_lean_bounds(agent, flows)),
                     {f["id"] for f in catalog}, {f["id"] for f in mentions},
                     slugs if agent.max_candidates is None else [],
                     join_sections(knowledge_section(agent), text))


def _lean_reading(envelope: Envelope, ask: UnderstandAsk, routing: bool) -> LeanReading:
    """What reading the lean reply of this envelope's call needs: the asked ids, the field names."""
    names = list(ask.fields) + envelope.aliases.aliases_of(ask.fields)
    return LeanReading(flows={f["id"] for _, f in envelope.cand} if routing else set(),
                       routing=routing,
                       mentions={f.get("id"): mention_extract(f) for f in ask.mentions},
                       fields=list(ask.fields), field_names=sorted(names, key=len, reverse=True))


def _lean_known_section(agent: Agent, data: dict, order: dict) -> str | None:
    """``## Already known``: one ``- <slug>: <JSON value>`` line per known field, in definition
    order."""
    known = known_slugs(agent, data, order)
    if not known:
        return None
    return "## Already known\n" + "\n".join(f"- {slug}: {json_text(data[slug])}" for slug in known)


def known_slugs(agent: Agent, data: dict, order: dict) -> list[str]:
    """The agent's fields that hold a known value, in definition order (model-calls.md §2.6;
    ``order`` maps a slug to its place); read from the data, which holds only the fields given so
    far, so a turn does not walk every field."""
    known = [slug for slug, value in data.items() if slug in agent.fields and is_known(value)]
    if len(known) > 1:
        known.sort(key=order.__getitem__)
    return known


def _lean_turn_section(agent: Agent, ask: UnderstandAsk, scope: Scope, envelope: Envelope,
                       parts: LeanParts, routing: bool) -> str | None:
    """``## This turn``: what this call asks beyond the catalog's defaults, and what the catalog
    lacks."""
    keys = parts.schema["properties"]
    lines: list[str] = []
    if routing:
        lines += envelope_part(envelope, "lean flows", lambda: _lean_asked(
            "Flows to score", [f["id"] for _, f in envelope.cand], parts.flows) + [
            line for _, f in envelope.cand if f["id"] not in parts.flows
            for line in _lean_flow_entry(f, scope)],
            envelope.cand_templated)
    elif "flows" in keys:                 # the same schema on every call: this one scores no flow
        lines.append("Flows to score: none")
    if "mentions" in keys:
        lines += envelope_part(envelope, "lean mentions", lambda: _lean_asked(
            "Mentions to check", [f.get("id") for f in ask.mentions], parts.mentions) + [
            line for f in ask.mentions if f.get("id") not in parts.mentions
            for line in _lean_mention_entry(f, scope)],
            envelope.ment_templated)
    if envelope.branches:
        lines.append("Questions (list the id when the answer is yes):")
        lines += [f"- {alias}: {when}" for alias, when in envelope.branches]
    if "fields" in keys and (parts.slugs or not ask.fields):
        known = {slug for slug, value in ask.scope.data.items() if is_known(value)}
        lines += _lean_asked("Details to report", ask.fields, set(parts.slugs) - known)
    elif "fields" in keys:      # max_candidates: no field catalog, the asked ones described here
        lines += envelope_part(envelope, "lean fields", lambda: ["Details to report:"] + [
            f"- {lean_field_line(slug, agent.fields.get(slug))}" for slug in ask.fields])
    return "## This turn\n" + "\n".join(lines) if lines else None


def _lean_asked(label: str, ids: list, default: set) -> list[str]:
    """The line naming what this turn asks, or none when it asks just the catalog's default set."""
    if default and len(ids) == len(default) and set(ids) == default:
        return []
    return [f"{label}: {', '.join(str(i) for i in ids) or 'none'}"]


def _lean_current_flow(ask: UnderstandAsk, scope: Scope, catalog: set) -> str | None:
    """``## Current flow``: the flow and step; the description only when the catalog lacks it, the
    pending fields by id (their lines are in the catalog)."""
    if ask.floor_run is None and ask.floor_flow is None:
        return None
    flow = ask.floor_flow or {"id": ask.floor_run.flow_id if ask.floor_run else None}
    line = str(flow.get("id"))
    in_catalog = flow.get("id") in catalog
    description = "" if in_catalog else render_text(flow.get("description"), scope)
    lines = ["## Current flow", line + (f": {description}" if description else "")]
    step = ask.floor_step
    if isinstance(step, dict):
        prompt = render_text(step.get("prompt"), scope)
        lines.append(f"Step {step.get('id')}" + (f": {prompt}" if prompt else ""))
        if ask.floor_pending:
            lines.append("Still being asked for: " + ", ".join(ask.floor_pending))
    return "\n".join(lines)


LEAN_SPEAK_FORMAT = (
    '## Reply\n"message": your answer in natural text (no field names or keys). "fields": "<id>: '
    '<value>" per "Still to collect" detail the customer gave, never guessed. Ask for them in '
    'order at the guideline\'s pace; never ask again for an "Already known" value.')
LEAN_TOOLS_RULE = "Call the offered tools when something must be looked up or done first."
LEAN_WRAP_UP = "## Wrap up\nAnswer now with the tool results; call no tools."
LEAN_GUIDELINE_HEADING = "## Guideline"
LEAN_COLLECT_GUIDELINE = "Collect what is still missing, one or two things per message."


def lean_speak_schema() -> dict:
    """The lean speak reply schema, the same on every speak call: the message, the details given."""
    return closed_object({"message": {"type": "string"},
                          "fields": {"type": "array", "items": {"type": "string"}}})


def lean_speak_prompt(agent: Agent, ask: SpeakAsk, system: str | None, identity: str | None,
                      collect_line: Callable[[str], str]) -> str:
    """The prompt of a speak call under protocol "lean" (docs/guide/tokens.md), after ``system``.

    The response-format rules join the stable system part, the reply schema
    (``lean_speak_schema``) is the same on every speak call of the agent, and
    each pending field is listed once (``collect_line(slug)``: a field's line, kept).
    """
    scope = ask.scope
    if ask.step is None:
        idle = agent.idle if isinstance(agent.idle, dict) else {}
        guideline = render_text(idle.get("prompt"), scope)
        return join_sections(
            identity, f"{LEAN_GUIDELINE_HEADING}\n{guideline}" if guideline else None,
            instructions_section(ask.instructions, scope), input_section(ask))
    guideline = render_text(ask.step.get("prompt"), scope) or (
        LEAN_COLLECT_GUIDELINE if ask.pending else DEFAULT_ANSWER_GUIDELINE)
    data = scope.data
    known = [f"- {slug}: {json_text(data[slug])}" for slug in agent.fields
             if slug in data and is_known(data[slug])]
    return join_sections(
        identity, flow_section(ask.flow or {}),
        f"{LEAN_GUIDELINE_HEADING}\n{guideline}",
        _lean_still_to_collect(agent, ask, collect_line),
        "## Already known\n" + "\n".join(known) if known else None,
        instructions_section(ask.instructions, scope), input_section(ask))


def _lean_still_to_collect(agent: Agent, ask: SpeakAsk,
                           collect_line: Callable[[str], str]) -> str | None:
    """``## Still to collect``, one line per pending field and its wording; the rules are in the
    system part."""
    if not ask.pending:
        return None
    step = ask.step or {}
    step_ask = step["ask"] if isinstance(step.get("ask"), dict) else {}
    lines = ["## Still to collect"]
    for slug in dict.fromkeys(ask.pending):
        definition = agent.fields.get(slug)
        wording = step_ask.get(slug)
        if wording is None and isinstance(definition, dict):
            wording = definition.get("ask")
        how = render_text(wording, ask.scope)
        lines.append(collect_line(slug) + (f" — ask: {how}" if how else ""))
    return "\n".join(lines)


def lean_field_line(name: str, definition: Any) -> str:
    """``<name>[ (<type>)][ [a | b]][: <description>]``: like ``field_line``, the type left out for
    a string."""
    line = field_line(name, definition)
    typed = f"{name} (string)"
    return line.replace(typed, name, 1) if line.startswith(typed) else line


# The two protocols ############################################################################

class V4(ModelCalls):
    """The TypeScript original's model calls (docs/spec/model-calls.md), byte for byte: the
    understand prompt and envelope of §3.3-§3.4, the speak prompt and envelope of §5.2-§5.4."""
    name = "v4"

    def understand_request(self, agent: Agent, ask: UnderstandAsk) -> UnderstandCall:
        """The v4 understand request: prompt (§3.4), envelope (§3.3) and its alias table (§2.8)."""
        scope = Scope(data=ask.scope.data, context=ask.scope.context)
        envelope = self.understand_envelope(agent, ask, scope)
        system, identity = stable_prefix(agent, scope)
        prompt = _understand_prompt_v4(agent, ask, scope, envelope, identity)
        request = GenerateRequest(system=system, prompt=prompt, history=list(ask.history),
                                  context=ask.scope.context, schema=envelope.schema,
                                  schema_name="understand", message=ask.message)
        return UnderstandCall(request=request, aliases=envelope.aliases)

    def speak_request(self, agent: Agent, ask: SpeakAsk) -> SpeakCall:
        """The v4 speak call: the prompt of §5.3 and the envelope of §5.4 as the reply schema."""
        wire, envelope = self.speak_reply_shape(agent, ask.pending if ask.step is not None else [])
        system, identity = self.speak_prefix(agent, ask.scope)
        return SpeakCall(wire=wire, system=system, prompt=speak_prompt(agent, ask, wire, identity),
                         schema=envelope, v4_schema=None, tools_section=TOOLS_SECTION,
                         wrap_up=WRAP_UP_SECTION, cache_history=False)


class Lean(ModelCalls):
    """The same judgements in fewer tokens (docs/guide/tokens.md): the agent-constant text is the
    system part ahead of the history, the schemas are the same on every call of the agent, only the
    turn's facts follow the history, and a reply lists only what holds."""
    name = "lean"

    def __init__(self) -> None:
        super().__init__()
        self._parts: LeanParts | None = None    # the system text and schema of its understand calls
        self._field_order: dict | None = None   # slug -> its place among the agent's fields
        self._field_lines: dict = {}            # slug -> its "Still to collect" line
        self._speak_schema = lean_speak_schema()

    def understand_request(self, agent: Agent, ask: UnderstandAsk) -> UnderstandCall:
        """The same questions as ``V4``'s, laid out for the prefix caches, with the v4 envelope
        attached for a ScriptedProvider's strict check."""
        scope = Scope(data=ask.scope.data, context=ask.scope.context)
        # The same aliases as V4's, so a script in the v4 form reads the same.
        envelope = self.understand_envelope(agent, ask, scope)
        routing = asks_routing(ask)
        parts = self.parts(agent)
        prompt = join_sections(_lean_current_flow(ask, scope, parts.flows),
                               _lean_known_section(agent, ask.scope.data, self.field_order(agent)),
                               _lean_turn_section(agent, ask, scope, envelope, parts, routing),
                               latest_message_section(ask.message))
        request = GenerateRequest(system=parts.system, prompt=prompt, history=list(ask.history),
                                  context=ask.scope.context,
                                  schema=parts.schema,      # shared: a provider never changes it
                                  schema_name="understand", cache_history=True,
                                  v4_schema=envelope.schema, message=ask.message)
        reading = envelope_part(envelope, f"lean reading {routing}",
                                lambda: _lean_reading(envelope, ask, routing))
        return UnderstandCall(request=request, aliases=envelope.aliases, lean=reading)

    def speak_request(self, agent: Agent, ask: SpeakAsk) -> SpeakCall:
        """The lean speak call: the reply rules in the system part, one schema for every call."""
        wire, envelope = self.speak_reply_shape(agent, ask.pending if ask.step is not None else [])
        system, identity = self.speak_prefix(agent, ask.scope)
        return SpeakCall(wire=wire, system=system,
                         prompt=lean_speak_prompt(agent, ask, system, identity,
                                                  lambda slug: self.collect_line(agent, slug)),
                         schema=self._speak_schema, v4_schema=envelope,
                         tools_section=None,    # the tools rule is in the system part
                         wrap_up=LEAN_WRAP_UP, cache_history=True)

    def speak_system(self, agent: Agent, system: str | None) -> str | None:
        rules = LEAN_SPEAK_FORMAT + ("\n" + LEAN_TOOLS_RULE if agent.tools else "")
        return join_sections(system, rules)

    def parts(self, agent: Agent) -> LeanParts:
        """The agent-constant part of its lean understand calls (``lean_parts``), built once."""
        if self._parts is None:
            self._parts = lean_parts(agent)
        return self._parts

    def collect_line(self, agent: Agent, slug: str) -> str:
        """A pending field's ``## Still to collect`` line, without its wording, built once."""
        line = self._field_lines.get(slug)
        if line is None:
            line = self._field_lines[slug] = f"- {lean_field_line(slug, agent.fields.get(slug))}"
        return line

    def field_order(self, agent: Agent) -> dict:
        """Each of the agent's field slugs -> its place among them."""
        order = self._field_order
        if order is None:       # built whole, then set: a turn on another thread never sees half
            order = self._field_order = {slug: n for n, slug in enumerate(agent.fields)}
        return order


PROTOCOLS: dict[str, type[ModelCalls]] = {"lean": Lean, "v4": V4}


def for_protocol(name: str) -> ModelCalls:
    """A new protocol object for one agent's ``Compiled``, its one owner: ``name`` is ``"lean"``
    or ``"v4"`` (Agent checks it)."""
    return PROTOCOLS[name]()
