"""The falai side of a τ²-bench domain: one agent shape that airline.py and retail.py share.

The model never holds a write tool. It reads with τ²'s read tools, and asks for a change with a
*request* tool (``request_<τ² write tool>``, taking τ²'s arguments). Code then decides:

    help ──(a request the policy allows)──▶ confirm ──(the customer's yes)──▶ decide ──▶ commit
      ▲                                        │ (no, or something else)          (re-check, run)
      └────────────────────────────────────────┴──────────────────────────────────────┘

1. **Request.** The request tool runs the domain's gate for that write against the database and
   what the customer said (``Facts``). A refusal goes back to the model with its reason and to
   ``on_write`` as ``refused:<reason>``; nothing is stored. An allowed request is stored in the
   session (tool-only fields ``pending`` and ``proposal``): the arguments code will run are the
   ones it checked, never new ones.
2. **Confirm.** The flow moves to a step that lists the pending change and asks for an explicit
   yes (the confirmation field, ``CONFIRM_FIELDS``). With ``check_words=True`` that field has
   ``"evidence": "message"``: a yes counts only when the customer's own message says one.
3. **Commit.** On a yes, the ``commit`` action re-runs the gate on the database as it is now and
   executes the stored arguments with τ²'s raw tool; ``on_write`` hears ``ok``, ``refused:...`` or
   ``error:...``. The run goes back to helping, and the model tells the customer the result.

A domain module supplies a ``Domain``: τ²'s tools (``execute``, the tool table), one gate per
write tool, the facts only the customer can state (``FACT_FIELDS``) and which read tools
authenticate the customer. Everything else here is the same for both domains.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from falai import Agent, Tool, falai

FIRST_MESSAGE = "Hi! How can I help you today?"     # τ²'s orchestrator opens every conversation so
CONFIRM_FIELD = "confirmed"
CONFIRM_FIELDS = (CONFIRM_FIELD,)
MAX_TOOL_LOOPS = 12             # an airline search walks several dates and routes in one reply
# What the session keeps about a change: the run clears these when it goes back to helping.
CHANGE_FIELDS = ["pending", "proposal", CONFIRM_FIELD]


@dataclass(frozen=True)
class Facts:
    """What a gate may read besides the database.

    ``user_id``: the user the customer authenticated as, written by code when a read tool found
    them from the customer's own words (never by the model). ``said``: the ``FACT_FIELDS`` values
    the model read from the customer. ``done``: the writes this conversation committed, in order,
    as ``{"name", "arguments"}``, plus ``"before"`` when the domain remembers something about the
    database as it was before that write (``Domain.remember``). ``now``: τ²'s clock for the domain.
    """
    user_id: str | None
    said: dict
    done: tuple
    now: str


Gate = Callable[[dict, dict, Facts], "str | None"]      # (db, arguments, facts) -> refusal or None
# (read tool arguments, its result, the customer's messages so far) -> the user id it proves, or None
Authenticator = Callable[[dict, Any, list], "str | None"]


@dataclass(frozen=True)
class Domain:
    """One τ² domain as the port needs it."""
    name: str
    policy: str
    now: str
    tools: dict                              # τ² name -> {"kind", "description", "parameters"}
    execute: Callable[[dict, str, dict], Any]
    output_text: Callable[[Any], str]
    tool_error: type                         # the exception execute raises where τ² raises
    gates: dict                              # write tool name -> Gate
    facts: dict                              # FACT_FIELDS: slug -> field definition
    authenticate: dict = field(default_factory=dict)    # read tool name -> Authenticator
    summaries: dict = field(default_factory=dict)       # write tool name -> (db, args) -> text
    guidance: str = ""                       # the policy rules that stay with the model
    # (db, name, args) -> what a later gate needs from before this write (JSON), or None
    remember: Callable[[dict, str, dict], Any] | None = None


def via(name: str) -> str:
    """The model-visible tool that requests the τ² write tool ``name``."""
    return f"request_{name}"


def interface_tools(domain: Domain) -> dict:
    """``TOOLS`` of a domain module: τ²'s tools, each with its kind, parameters and, for a write,
    the request tool that asks for it (the interface outside code drives)."""
    return {name: {"kind": tool["kind"], "parameters": tool["parameters"],
                   **({"via": via(name)} if tool["kind"] == "write" else {})}
            for name, tool in domain.tools.items()}


def customer_messages(history: list) -> list[str]:
    """The customer's own messages in a tool call's history (its user items)."""
    return [item["content"] for item in history
            if isinstance(item, dict) and item.get("role") == "user"
            and isinstance(item.get("content"), str)]


def said_in(value: Any, messages: list[str]) -> bool:
    """Whether ``value`` appears, as a whole word and case aside, in one of the messages."""
    wanted = " ".join(str(value).casefold().split())
    pattern = re.compile(rf"(?<!\w){re.escape(wanted)}(?!\w)")
    return bool(wanted) and any(pattern.search(" ".join(m.casefold().split())) for m in messages)


def tool_message(error: Exception) -> str:
    """τ²'s error message, without the "Error: " its environment puts before it."""
    text = str(error)
    return text[len("Error: "):] if text.startswith("Error: ") else text


def facts_of(domain: Domain, data: dict) -> Facts:
    """The facts in a session's (or a tool call's) data."""
    return Facts(user_id=data.get("user_id"),
                 said={slug: data[slug] for slug in domain.facts if data.get(slug) is not None},
                 done=tuple(json.loads(data["writes"])) if data.get("writes") else (),
                 now=domain.now)


def gate(domain: Domain, db: dict, name: str, arguments: dict, facts: Facts) -> str | None:
    """The refusal of a write, or None when the policy allows it. A gate that raises refuses."""
    check = domain.gates.get(name)
    if check is None:
        return f"no policy allows {name}"
    try:
        return check(db, arguments, facts)
    except Exception as error:       # a gate reading a db that lacks what the arguments name
        return f"the request could not be checked ({type(error).__name__}: {error})"


def summary(domain: Domain, db: dict, name: str, arguments: dict) -> str:
    """What the customer is asked to confirm: the action and its exact arguments."""
    describe = domain.summaries.get(name)
    lines = [describe(db, arguments)] if describe else []
    return "\n".join([*lines, f"Action: {name}", "Details: " + json.dumps(arguments, sort_keys=True)])


# The agent ###################################################################################

HELP_PROMPT = (
    "Help the customer as the policy says. Look things up with the tools. You cannot change "
    "anything yourself: to make a change, first gather every detail the policy asks for, then "
    "call the matching request_* tool once, with the exact arguments. Code checks the policy: "
    "if it refuses, tell the customer why, in the policy's terms. If it accepts, tell the customer "
    "the details of the change and ask them to confirm with an explicit yes; nothing has changed "
    "yet. The known field last_change says what the last confirmed change did.")
CONFIRM_PROMPT = (
    "A change is waiting for the customer's explicit yes. List its details exactly as below and "
    "ask the customer to confirm with a yes; do not say it is done.\n\n{{data.pending}}")
IDLE_PROMPT = ("Answer the customer from what the tools show. A change cannot be requested right "
               "now: say it will be taken up in a moment.")
CHANGED_WHEN = ("the customer declines, or asks for a different change, or wants to change "
                "the details of the pending one")


def build(domain: Domain, db: dict, provider: Any, clock: Any, *,
          on_write: Callable[[str, dict, str], None] | None = None,
          check_words: bool = False, **options: Any) -> Agent:
    """The falai agent for ``domain`` over ``db`` (mutated in place by commits only).

    ``on_write(name, arguments, outcome)`` hears every write executed or refused: ``"ok"``,
    ``"refused:<reason>"`` or ``"error:<τ²'s message>"``. ``check_words``: the confirmation
    counts only when the customer's own message says a yes (``"evidence": "message"``).
    ``options`` go to the agent (``protocol``, ``debug``, ...).
    """
    tell = on_write or (lambda name, arguments, outcome: None)
    f = falai().fields(fields(domain, check_words))
    reads = [name for name, tool in domain.tools.items() if tool["kind"] != "write"]
    writes = [name for name, tool in domain.tools.items() if tool["kind"] == "write"]
    tools = ([read_tool(domain, db, name) for name in reads]
             + [request_tool(domain, db, name, tell) for name in writes])
    flow = f.flow({
        "id": "service", "name": "Customer service", "on": [{"message": []}],
        "collect": list(domain.facts),          # so the understand call reads them from any message
        "steps": [
            {"id": "help", "prompt": HELP_PROMPT, "collect": ["pending"], "maxAsks": "unlimited",
             "tools": [*reads, *map(via, writes)], "then": {"step": "confirm", "clear": [CONFIRM_FIELD]}},
            {"id": "confirm", "prompt": CONFIRM_PROMPT, "collect": [CONFIRM_FIELD], "tools": reads,
             "branches": [{"when": CHANGED_WHEN, "then": {"step": "help", "clear": CHANGE_FIELDS}}]},
            {"id": "decide", "if": {"equals": {CONFIRM_FIELD: True}}, "then": "commit",
             "else": {"step": "help", "clear": CHANGE_FIELDS}},
            {"id": "commit", "do": "commit", "then": {"step": "help", "clear": CHANGE_FIELDS}},
        ]})
    commit = f.action(parameters={}, run=lambda params, ctx: run_commit(domain, db, ctx, tell),
                      description="Re-check the pending change against the policy and run it.")
    return f.agent(name=f"{domain.name.title()} agent", provider=provider, clock=clock, flows=[flow],
                   tools=tools, actions={"commit": commit}, max_tool_loops=MAX_TOOL_LOOPS,
                   persona=f"You are a customer service agent of the {domain.name} company.",
                   goal=domain.policy, instructions=instructions(domain),
                   # While the run waits (a failed reply's retry), the idle speaker answers: it may
                   # read, never request, since only the flow can take a request to its yes.
                   idle={"prompt": IDLE_PROMPT, "tools": reads}, **options)


def fields(domain: Domain, check_words: bool) -> dict:
    """The session's fields: the customer's facts, the confirmation, and what only code writes."""
    confirm = {"type": "boolean", "extract": "anywhere",
               "description": "The customer's explicit yes (true) or no (false) to the pending change."}
    if check_words:
        confirm["evidence"] = "message"
    return {
        **{slug: {"extract": "anywhere", "correctable": True, **definition}
           for slug, definition in domain.facts.items()},
        CONFIRM_FIELD: confirm,
        # Visible to the model, written by code only: no step collects them, so no reply may.
        "user_id": {"type": "string", "extract": "asked",
                    "description": "The user the customer proved to be (set by code)."},
        "last_change": {"type": "string", "extract": "asked",
                        "description": "What the last confirmed change did (set by code)."},
        # Tool-only: the pending change and the changes made, in no model call.
        "pending": {"type": "string", "extract": "never"},
        "proposal": {"type": "string", "extract": "never"},
        "writes": {"type": "string", "extract": "never"},
    }


def instructions(domain: Domain) -> list:
    rules = [{"kind": "must", "prompt": "Make one tool call at a time, and do not answer the customer "
                                        "in the same message as a tool call."}]
    if domain.guidance:
        rules.append({"kind": "must", "prompt": domain.guidance})
    return rules


def read_tool(domain: Domain, db: dict, name: str) -> Tool:
    """τ²'s read or generic tool as is; one that finds the customer from their own words (an
    authenticator) also writes ``user_id``, once per conversation."""
    spec = domain.tools[name]
    authenticate = domain.authenticate.get(name)

    def handler(arguments: dict, ctx: Any) -> dict:
        try:
            result = domain.execute(db, name, arguments)
        except domain.tool_error as error:
            return {"value": f"Error: {tool_message(error)}"}
        data = {}
        if authenticate is not None and not ctx.data.get("user_id"):
            user = authenticate(arguments, result, customer_messages(ctx.history))
            if user:
                data["user_id"] = user
        return {"value": domain.output_text(result), "data": data or None}

    return Tool(id=name, description=spec["description"], parameters=spec["parameters"],
                handler=handler, is_read_only=lambda arguments: True)


def request_tool(domain: Domain, db: dict, name: str, tell: Callable) -> Tool:
    """The model's way to ask for the write ``name``: the gate decides; an allowed request waits
    for the customer's yes."""
    spec = domain.tools[name]

    def handler(arguments: dict, ctx: Any) -> dict:
        if ctx.data.get("proposal"):
            return {"value": {"refused": "another change is already waiting for the customer's "
                                         "confirmation; one change at a time"}}
        refusal = gate(domain, db, name, arguments, facts_of(domain, ctx.data))
        if refusal is not None:
            tell(name, arguments, f"refused:{refusal}")
            return {"value": {"refused": refusal}}
        text = summary(domain, db, name, arguments)
        return {"value": {"status": "waiting for the customer's explicit yes; nothing has changed",
                          "change": text},
                "data": {"pending": text,
                         "proposal": json.dumps({"name": name, "arguments": arguments})}}

    return Tool(id=via(name), parameters=spec["parameters"], handler=handler,
                description=(f"Request this change: {spec['description']} Code checks the policy "
                             "and asks the customer to confirm; nothing changes until they do."))


def run_commit(domain: Domain, db: dict, ctx: Any, tell: Callable) -> dict:
    """The customer said yes: re-check the stored request on the database as it is now, then run
    τ²'s tool with exactly the stored arguments."""
    proposal = json.loads(ctx.data["proposal"])
    name, arguments = proposal["name"], proposal["arguments"]
    facts = facts_of(domain, ctx.data)
    refusal = gate(domain, db, name, arguments, facts)
    if refusal is not None:
        tell(name, arguments, f"refused:{refusal}")
        ctx.set({"last_change": f"Not done: {name} was refused ({refusal})."})
        return {"ok": True, "detail": f"refused: {refusal}"}
    before = domain.remember(db, name, arguments) if domain.remember else None
    try:
        result = domain.execute(db, name, arguments)
    except domain.tool_error as error:
        tell(name, arguments, f"error:{tool_message(error)}")
        ctx.set({"last_change": f"Not done: {name} failed: {tool_message(error)}"})
        return {"ok": True, "detail": f"error: {tool_message(error)}"}
    tell(name, arguments, "ok")
    done = [*facts.done, {"name": name, "arguments": arguments,
                          **({"before": before} if before is not None else {})}]
    ctx.set({"last_change": f"Done: {name}. Result: {domain.output_text(result)}",
             "writes": json.dumps(done)})
    return {"ok": True}
