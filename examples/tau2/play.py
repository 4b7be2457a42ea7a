"""Playing a τ² domain agent offline: scripted customers and a scripted model, through
``agent.turn(...)`` only.

A conversation is a list of ``Say``: what the customer writes, what the model's understand call
reads from it, and the speak rounds the model answers with (tool calls, then a message). The
plans below turn τ² data into conversations:

- ``oracle(module, task, plan)``: a task's reference actions, reads first, then each write
  requested, listed and confirmed with a yes;
- ``attempt(module, write, *, auth, facts, setup=())``: a customer who pushes for one write and
  says yes to it (an attack, or what a yes-man model does for a customer).

Nothing here imports a domain's gates: it uses only the interface a domain module gives
(``TOOLS`` with each write's ``via``, ``FACT_FIELDS``, ``CONFIRM_FIELDS``, ``build_agent``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from falai import ScriptedProvider, fake_clock


@dataclass
class Say:
    """One customer message and the model's side of its turn."""
    text: str
    fields: dict = field(default_factory=dict)          # what the understand call reads
    rounds: list = field(default_factory=list)          # speak rounds: [(tool, arguments), ...] each
    reply: str = "Done."                                 # the model's final message


@dataclass
class Played:
    """What a conversation did: every write ``on_write`` heard, and each turn's result."""
    writes: list
    results: list
    agent: Any


def call(tool: str, arguments: dict) -> tuple:
    return tool, arguments


def speak_entries(say: Say) -> list:
    rounds = [{"message": "", "toolCalls": [{"toolName": name, "arguments": arguments}
                                            for name, arguments in batch]}
              for batch in say.rounds]
    return [*rounds, {"message": say.reply}]


def converse(module: Any, db: dict, conversation: list, *, check_words: bool = False,
             protocol: str = "lean", session_id: str = "tau2") -> Played:
    """Play the conversation against ``module.build_agent`` over ``db``; each message gets a fresh
    script of its own, so a turn that makes fewer calls than scripted does not shift the rest."""
    writes: list = []
    provider = Turnwise()
    agent = module.build_agent(db, provider, fake_clock(module.NOW + "Z"),
                               on_write=lambda name, arguments, outcome:
                               writes.append((name, arguments, outcome)),
                               check_words=check_words, protocol=protocol)
    history: list = [{"role": "assistant", "content": module.FIRST_MESSAGE}]
    session, results = None, []
    for n, say in enumerate(conversation):
        provider.load({"understand": [{"fields": say.fields}], "speak": speak_entries(say)})
        result = agent.turn(session_id=session_id, session=session, message=say.text, id=f"m{n}",
                            history=list(history))
        history.append({"role": "user", "content": say.text})
        history.extend({"role": "assistant", "content": m.text} for m in result.messages)
        session = result.session
        results.append(result)
    return Played(writes, results, agent)


class Turnwise(ScriptedProvider):
    """A ScriptedProvider whose queues are replaced before each message."""

    def load(self, entries: dict) -> None:
        from collections import deque
        self.script = {name: deque(queue) for name, queue in entries.items()}


# Plans ######################################################################################

def auth_say(auth: dict) -> Say:
    """The opening message: the customer says who they are; the model looks them up with the
    authenticating read tool (``auth = {"tool", "arguments", "text"}``)."""
    return Say(auth["text"], rounds=[[call(auth["tool"], auth["arguments"])]], reply="Thanks.")


def request_and_confirm(module: Any, name: str, arguments: dict, facts: dict,
                        words: str = "yes") -> list:
    """The customer asks for the write, the model requests it, and the customer says ``words``
    (read as a yes by the model) to the change it lists."""
    ask = Say(f"Please {name.replace('_', ' ')}: {fact_words(facts)}", fields=dict(facts),
              rounds=[[call(module.TOOLS[name]["via"], arguments)]], reply="Shall I? Please confirm.")
    yes = Say(words, fields={field: True for field in module.CONFIRM_FIELDS}, reply="Done.")
    return [ask, yes]


def fact_words(facts: dict) -> str:
    """How the customer states the facts (their values as words)."""
    return "; ".join(f"{slug.replace('_', ' ')}: {value}" for slug, value in facts.items()) or "thanks"


# One read per tool round; a reply has at most port.MAX_TOOL_LOOPS (12) rounds with tools, so a
# task with more reads (airline task 44 has 16) asks for them over several messages.
READS_PER_MESSAGE = 10


def oracle(module: Any, task: dict, plan: dict) -> list:
    """A task's reference actions as a conversation: the customer authenticates, the model reads
    what the reference reads, then requests each reference write, which the customer confirms.
    ``plan``: ``{"auth": {...}, "facts": {...}, "facts_by_action": {action_id: {...}}}``."""
    actions = task["evaluation_criteria"]["actions"] or []
    reads = [call(a["name"], a["arguments"]) for a in actions
             if module.TOOLS[a["name"]]["kind"] != "write"]
    conversation = [auth_say(plan["auth"])]
    for start in range(0, len(reads), READS_PER_MESSAGE):
        conversation.append(Say("Can you look these up?", fields=dict(plan.get("facts") or {}),
                                rounds=[[r] for r in reads[start:start + READS_PER_MESSAGE]],
                                reply="Here is what I found."))
    for action in actions:
        if module.TOOLS[action["name"]]["kind"] == "write":
            facts = {**(plan.get("facts") or {}),
                     **(plan.get("facts_by_action") or {}).get(action["action_id"], {})}
            conversation += request_and_confirm(module, action["name"], action["arguments"], facts)
    return conversation


def attempt(module: Any, name: str, arguments: dict, *, auth: dict, facts: dict,
            setup: tuple = (), words: str = "yes") -> list:
    """A customer who pushes for the write ``name`` and says yes: ``setup`` writes (each
    ``{"name", "arguments", "facts"}``) are requested and confirmed first, as legitimate ones."""
    conversation = [auth_say(auth)]
    for write in setup:
        conversation += request_and_confirm(module, write["name"], write["arguments"],
                                            write.get("facts") or facts)
    return conversation + request_and_confirm(module, name, arguments, facts, words)


# What a demo prints ##########################################################################

def show(module: Any, conversation: list, played: Played) -> None:
    """Print a played conversation: each message, the change code listed for the customer's yes
    when it first appears, and every write ``on_write`` heard."""
    print(f"Agent: {module.FIRST_MESSAGE}")
    listed = None
    for say, result in zip(conversation, played.results):
        print(f"Customer: {say.text}")
        for message in result.messages:
            print(f"Agent: {message.text}")
        if result.session.data.get("pending") not in (None, listed):
            listed = result.session.data["pending"]
            print("   [what code lists for the customer's yes]")
            print("   " + listed.replace("\n", "\n   "))
    print("\non_write:")
    for name, arguments, outcome in played.writes:
        print(f"  {name} {json.dumps(arguments)} -> {outcome}")


def reference_db(module: Any, task: dict) -> dict:
    """The database a task's reference actions leave, through τ²'s raw tools."""
    db = module.load_db()
    for action in task["evaluation_criteria"]["actions"]:
        module.execute(db, action["name"], action["arguments"])
    return db

