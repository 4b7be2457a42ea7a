"""falai's command line: see and try flows without writing Python.

    falai validate FILE... [--registry REG] [--strict] [--json]
    falai schema [--registry REG]
    falai graph FILE... [--format mermaid|dot]
    falai chat FLOWS... [--registry REG] [--provider scripted|gemini|openai|anthropic] [--now ISO]
    falai inspect FLOWS... [--registry REG] [--port N]     (same options as chat)
    falai replay SESSION.json [--flows FLOWS...] [--registry REG]
    falai migrate OLD.json [--session-id ID] [--rename OLD=NEW] [-o FILE]

The exit status is 0 (ok), 1 (a flow has problems) or 2 (unusable input).
The guide is docs/guide/cli.md.

Standard library only (argparse, http.server, json); the vendor providers come
from falai_providers, imported only when one is asked for.

Sections: 1. Input files and the registry, 2. validate and schema, 3. graph,
4. the playground (an agent, a fake clock and a recording provider, shared by
chat and inspect), 5. chat, 6. replay and migrate, 7. inspect, 8. main.
"""
from __future__ import annotations

import argparse
import http.server
import json
import logging
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

import falai
from falai_base import (
    Action, Condition, FalaiError, GenerateRequest, Generation, OUTCOME_MESSAGES, ProviderError,
    Session, TokenUsage, Tool, iso, nests_deeper, parse_iso, strip_nones, system_clock,
)
from falai import (
    Agent, ScriptedProvider,
)
from falai_checks import Checks, check_flow_shape, flow_frame

# Exit statuses of validate (and of every command that reads files).
OK, PROBLEMS, UNUSABLE = 0, 1, 2


class UsageError(Exception):
    """Input the command cannot use at all (exit status 2); the message says where,
    what and the fix.
    """


# 1. Input files and the registry ##############################################################

MAX_INPUT_BYTES = 64 * 1024 * 1024      # far past any real flows file, registry, script or session
MAX_INPUT_NESTING = 256                 # levels of lists and objects; a flow may nest 96, a blob 68


def read_json(path: str, what: str) -> Any:
    """The parsed JSON of a file, or a UsageError naming the file and the fix: a file that
    cannot be read, is larger than MAX_INPUT_BYTES, is not JSON or nests deeper than
    MAX_INPUT_NESTING levels (docs/guide/cli.md, Notes)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise UsageError(f"{path}: cannot read the {what} ({error.strerror}). "
                         "Check the path.") from None
    if len(data) > MAX_INPUT_BYTES:
        mib = MAX_INPUT_BYTES // (1024 * 1024)
        raise UsageError(f"{path}: the {what} is larger than {mib} MiB, far past any real one. "
                         "Check that it is the right file.")
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError as error:            # UnicodeDecodeError is one
        raise UsageError(f"{path}: the {what} is not valid JSON ({error}). "
                         "Fix its syntax.") from None
    except (RecursionError, MemoryError):
        value = None
        nested = True
    else:
        nested = nests_deeper(value, MAX_INPUT_NESTING)
    if nested:
        raise UsageError(f"{path}: the {what} nests lists and objects deeper than "
                         f"{MAX_INPUT_NESTING} levels, past any flow, registry or session. "
                         "Flatten it.")
    return value


def specs_in(value: Any, path: str) -> list[dict]:
    """The FlowSpecs of one file: a flow object or a list of them."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return value
    raise UsageError(f"{path}: holds {type(value).__name__ if value != [] else 'an empty list'}, "
                     "not a flow or a list of flows. Write one FlowSpec object, or a list of them.")


def load_specs(paths: list[str]) -> list[tuple[str, int | None, dict]]:
    """Every FlowSpec of the files as (file, index in a list file or None, spec)."""
    found = []
    for path in paths:
        value = read_json(path, "flows file")
        specs = specs_in(value, path)
        found += [(path, i if isinstance(value, list) else None, spec)
                  for i, spec in enumerate(specs)]
    return found


@dataclass
class Registry:
    """A registry file: the names flows may use, with stand-ins for the code behind them.

    The sections ``falai.check_registry`` gives (docs/guide/cli.md). ``actions``:
    {name: {"parameters", "description", "result", "set"}}; the stand-in action writes ``set``
    into the session and returns ``result`` (default ``{"ok": true}``). ``tools``: [{"id",
    "description", "parameters", "result", "data"}]; the stand-in tool returns ``result`` and
    writes ``data`` into the session. ``conditions``: {name: true/false}. ``events``: {name:
    EventDef}. ``agent``: the options name, persona, goal, idle, instructions and protocol.
    """
    fields: dict = field(default_factory=dict)
    actions: dict = field(default_factory=dict)
    events: dict = field(default_factory=dict)
    conditions: dict = field(default_factory=dict)
    tools: list = field(default_factory=list)
    agent: dict = field(default_factory=dict)
    given: bool = False

    def names(self, flows: list | None = None) -> dict | None:
        """The registries ``check_flow`` and ``flow_spec_schema`` read;
        None without a registry file.
        """
        if not self.given:
            return None
        names = {"fields": self.fields, "actions": self.actions, "events": self.events,
                 "conditions": self.conditions, "tools": self.tools}
        if flows is not None:
            names["flows"] = flows
        return names


def read_registry(path: str | None) -> Registry:
    """The registry file, checked for its shape by ``falai.check_registry`` (as a program's
    ``falai.load_registry`` checks it); an empty registry when no path is given.
    """
    if path is None:
        return Registry()
    value = read_json(path, "registry")
    try:
        sections = falai.check_registry(value, path)
    except ValueError as error:     # the same message a program gets, as unusable input here
        raise UsageError(str(error)) from None
    return Registry(**sections, given=True)


def standin_action(name: str, definition: dict) -> Action:
    """An action that writes its ``set`` patch and returns its ``result``:
    the host's code is not here.
    """
    def run(params: dict, ctx: Any) -> dict:
        if isinstance(definition.get("set"), dict):
            ctx.set(definition["set"])
        return definition.get("result") or {"ok": True}
    return Action(parameters=definition.get("parameters") or {}, run=run,
                  description=definition.get("description"))


def standin_tool(definition: dict) -> Tool:
    """A tool that returns its ``result`` (default: the arguments it was called with)."""
    def handler(args: dict, ctx: Any) -> dict:
        result = {"value": definition.get("result", {"ok": True, "arguments": args})}
        data = definition.get("data")
        return {**result, "data": data} if isinstance(data, dict) else result
    return Tool(id=definition["id"], handler=handler, description=definition.get("description"),
                parameters=definition.get("parameters") or {"type": "object", "properties": {}})


def standin_condition(value: bool) -> Condition:
    """A named condition that always answers the registry's value."""
    def check(ctx: Any, argument: Any) -> bool:
        return value
    return Condition(check=check)


def build_agent(flow_paths: list[str], registry: Registry, provider: Any, clock: Callable,
                protocol: str | None = None) -> Agent:
    """An agent of the flows files and the registry's stand-ins; FalaiError when a flow cannot run.

    ``protocol`` wins over the registry's ``agent.protocol``; without either, "lean".
    """
    specs = [spec for _, _, spec in load_specs(flow_paths)]
    flows = [falai.from_spec(spec) for spec in specs]
    conditions = {name: standin_condition(value) for name, value in registry.conditions.items()}
    options = {**registry.agent, "name": registry.agent.get("name") or "Agent",
               "protocol": protocol or registry.agent.get("protocol") or "lean"}
    return Agent(provider=provider, fields=registry.fields, flows=flows,
                 actions={name: standin_action(name, d) for name, d in registry.actions.items()},
                 events=registry.events, conditions=conditions,
                 tools=[standin_tool(t) for t in registry.tools], clock=clock, **options)


# 2. validate and schema #######################################################################

def path_text(where: list) -> str:
    """A Problem path as text: ``steps[2].then``; the flow itself is ``(flow)``."""
    text = ""
    for part in where:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(flow)"


def shape_problems(spec: Any) -> list:
    """check_flow without a registry: the shape only, since every name would read as unknown.

    Uses check_flow's own collecting pass (falai_checks.Checks); check_flow itself always checks
    names.
    """
    checks = Checks(collect=True)
    flow = strip_nones(spec)
    if checks.run((), flow_frame, flow):
        check_flow_shape(flow, checks)
    return checks.problems


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    registry = read_registry(args.registry)
    found, unusable, usable = [], [], []
    for path in args.files:            # an unusable file is reported and the others still checked
        try:
            found += load_specs([path])
            usable.append(path)
        except UsageError as error:
            unusable.append(str(error))
    flows = [spec for _, _, spec in found]
    report: list[dict[str, Any]] = []
    seen: dict[Any, str] = {}
    for path, index, spec in found:
        problems = (falai.check_flow(spec, registry.names(flows)) if registry.given
                    else shape_problems(spec))
        flow_id = spec.get("id")
        if isinstance(flow_id, str) and flow_id in seen:
            problems.append(falai.Problem("error", ["id"],
                                          f'flow "{flow_id}" is declared twice (first in '
                                          f'{seen[flow_id]}). Flow ids must be unique: '
                                          'rename one.'))
        seen.setdefault(flow_id, path)
        prefix = [] if index is None else [index]
        for problem in problems:
            severity = "error" if args.strict else problem.severity
            report.append({"file": path, "flow": flow_id if isinstance(flow_id, str) else None,
                           "severity": severity, "path": prefix + list(problem.path),
                           "message": problem.message})
    errors = sum(1 for item in report if item["severity"] == "error")
    if registry.given and not errors:   # what chat, inspect and a program refuse: build the agent
        problem = agent_problem(usable, registry)
        if problem is not None:
            report.append({"file": args.registry, "flow": None, "severity": "error",
                           "path": ["(agent)"], "message": problem})
            errors += 1
    if args.json:
        out.write(json.dumps({"ok": not errors and not unusable, "unusable": unusable,
                              "problems": report},
                             indent=2, ensure_ascii=False) + "\n")
    else:
        for text in unusable:
            out.write(f"{text}\n")
        for item in report:
            out.write(f"{item['file']}: {item['severity']}: {path_text(item['path'])}: "
                      f"{item['message']}\n")
        out.write(f"{len(found)} flow(s) in {len(args.files) - len(unusable)} file(s): "
                  f"{errors} error(s), {len(report) - errors} warning(s)"
                  + (f", {len(unusable)} file(s) unusable" if unusable else "")
                  + ("" if registry.given else " (shape only: pass --registry to check the names)")
                  + "\n")
    return UNUSABLE if unusable else PROBLEMS if errors else OK


def agent_problem(paths: list[str], registry: Registry) -> str | None:
    """Why the agent of these flows and this registry cannot be built (the field definitions, the
    agent's options, flows across files), or None: validate refuses what chat and a program do."""
    try:
        build_agent(paths, registry, ScriptedProvider(), system_clock)
    except (FalaiError, ValueError, TypeError) as error:
        return str(error).removeprefix("[FlowConfigurationError] ")
    return None


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    out.write(json.dumps(falai.flow_spec_schema(read_registry(args.registry).names()), indent=2,
                         ensure_ascii=False) + "\n")
    return OK


# 3. graph #####################################################################################
#
# One neutral model (nodes, edges, one cluster per flow), drawn as Mermaid or DOT;
# the inspector page draws the same model.

@dataclass
class Node:
    id: str
    label: str
    shape: str          # trigger, talk, say, do, wait, if, end, flow
    flow: str | None
    step: str | None = None


@dataclass
class Edge:
    source: str
    target: str
    label: str = ""
    dashed: bool = False


@dataclass
class Graph:
    clusters: list = field(default_factory=list)     # [(flow id, name, [node ids])]
    nodes: dict = field(default_factory=dict)
    edges: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"clusters": [{"flow": f, "name": n, "nodes": ids} for f, n, ids in self.clusters],
                "nodes": [vars(node) for node in self.nodes.values()],
                "edges": [vars(e) for e in self.edges]}


def short(text: Any, size: int = 48) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= size else text[:size - 1] + "…"


def predicate_text(predicate: Any) -> str:
    return short(json.dumps(predicate, ensure_ascii=False), 40)


def trigger_text(trigger: dict) -> str:
    """One trigger in a few words: its kind and what it listens for."""
    parts = []
    if "message" in trigger:
        phrases = trigger["message"] or []
        parts.append("message: " + ("; ".join(phrases) if phrases else "any"))
    if "mention" in trigger:
        parts.append("mention: " + "; ".join(trigger["mention"] or []))
    if "silence" in trigger:
        parts.append(f"silence {trigger['silence']}")
    if "event" in trigger:
        parts.append(f"event {trigger['event']}")
    for key in ("after", "repeat"):
        if trigger.get(key) is not None:
            value = trigger[key] if isinstance(trigger[key], str) else json.dumps(trigger[key])
            parts.append(f"{key} {value}")
    if trigger.get("if") is not None:
        parts.append("if " + predicate_text(trigger["if"]))
    return short(", ".join(parts) or "trigger", 60)


def step_text(step: dict) -> tuple[str, str]:
    """(shape, label) of one step, by its kind."""
    sid = step.get("id")
    if step.get("collect") is not None:
        return "talk", f"{sid}: collect {', '.join(map(str, step['collect']))}"
    if step.get("prompt") is not None:
        return "talk", f"{sid}: prompt {short(step['prompt'], 36)}"
    if step.get("say") is not None:
        return "say", f"{sid}: say {short(step['say'], 36)}"
    if step.get("do") is not None:
        return "do", f"{sid}: do {step['do']}"
    wait = step.get("wait")
    if isinstance(wait, str):
        return "wait", f"{sid}: wait {wait}"
    if isinstance(wait, dict):
        return "wait", (f"{sid}: wait for event {wait.get('event')} "
                        f"(up to {wait.get('upTo') or '30d'})")
    if step.get("if") is not None:
        return "if", f"{sid}: if {predicate_text(step['if'])}"
    return "say", f"{sid}: (no body)"


def safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


class FlowDrawing:
    """One flow's part of the graph: its nodes and every edge its steps can take."""

    def __init__(self, graph: Graph, n: int, spec: dict, first_step: dict):
        self.graph, self.n, self.spec, self.first_step = graph, n, spec, first_step
        self.flow_id = str(spec.get("id"))
        self.steps = [s for s in spec.get("steps") or [] if isinstance(s, dict)]
        self.ids = {step.get("id"): f"f{n}s{i}" for i, step in enumerate(self.steps)}
        self.members: list[str] = []
        self.end = f"f{n}end"

    def add(self, node: Node) -> str:
        if node.id not in self.graph.nodes:
            self.graph.nodes[node.id] = node
            self.members.append(node.id)
        return node.id

    def target(self, value: Any, here: int) -> str | None:
        """The node a then/else/onFail/branch target leads to; None is the next step."""
        if value is None:
            following = here + 1 < len(self.steps)
            return self.ids[self.steps[here + 1].get("id")] if following else self.finish()
        if value == "end":
            return self.add(Node(self.end, "end", "end", self.flow_id))
        if isinstance(value, dict) and value.get("flow") is not None:
            other = str(value["flow"])
            if other in self.first_step:                  # a chain: the other flow's first step
                return self.first_step[other]
            node_id = f"ext_{safe_id(other)}"
            self.graph.nodes.setdefault(node_id, Node(node_id, f"flow {other}", "flow", None))
            return node_id
        step_id = value.get("step") if isinstance(value, dict) else value
        if not isinstance(step_id, str):
            return None
        return self.ids.get(step_id) or self.add(Node(f"f{self.n}missing_{safe_id(step_id)}",
                                                      f"{step_id}: missing step", "end",
                                                      self.flow_id))

    def finish(self) -> str:
        """Past the last step: onEnd end, reset (back to the first step) or stay (the last talk
        step).
        """
        on_end = self.spec.get("onEnd") or "end"
        talks = [s for s in self.steps if s.get("collect") is not None
                 or s.get("prompt") is not None]
        if on_end == "reset" and self.steps:
            return self.ids[self.steps[0].get("id")]
        if on_end == "stay" and talks:
            return self.ids[talks[-1].get("id")]
        return self.add(Node(self.end, "end", "end", self.flow_id))

    def edge(self, source: str, value: Any, here: int, label: str, dashed: bool = False) -> None:
        destination = self.target(value, here)
        if isinstance(value, dict) and value.get("flow") is not None:
            label = (label + " " if label else "") + f"chain to {value['flow']}"
        if value is None and here + 1 >= len(self.steps) and (self.spec.get("onEnd")
                                                              or "end") != "end":
            label = (label + " " if label else "") + f"onEnd {self.spec['onEnd']}"
        if destination is not None:
            self.graph.edges.append(Edge(source, destination, label, dashed))

    def draw(self) -> None:
        for t, trigger in enumerate(self.spec.get("on") or []):
            if isinstance(trigger, dict):
                node = self.add(Node(f"f{self.n}t{t}", trigger_text(trigger), "trigger",
                                     self.flow_id))
                if self.steps:
                    self.graph.edges.append(Edge(node, self.ids[self.steps[0].get("id")]))
        for step in self.steps:
            shape, label = step_text(step)
            self.add(Node(self.ids[step.get("id")], label, shape, self.flow_id,
                          step=str(step.get("id"))))
        for i, step in enumerate(self.steps):
            self.step_edges(i, step)
        self.graph.clusters.append((self.flow_id, str(self.spec.get("name") or self.flow_id),
                                    self.members))

    def step_edges(self, i: int, step: dict) -> None:
        node, then, wait = self.ids[step.get("id")], step.get("then"), step.get("wait")
        for branch in step.get("branches") or []:
            if isinstance(branch, dict):
                when = branch.get("when") or (predicate_text(branch["if"])
                                              if branch.get("if") is not None else "")
                self.edge(node, branch.get("then"), i, "branch: " + short(when, 30))
        if step.get("do") is not None:
            self.edge(node, then, i, "ok" if step.get("onFail") is not None else "")
            if step.get("onFail") is not None:
                self.edge(node, step["onFail"], i, "failed", dashed=True)
        elif isinstance(wait, str):
            self.edge(node, then, i, f"after {wait}")
            if step.get("else") is not None:
                self.edge(node, step["else"], i, "replied", dashed=True)
        elif isinstance(wait, dict):
            self.edge(node, then, i, f"event {wait.get('event')}")
            self.edge(node, step.get("else", "end"), i, f"no event in {wait.get('upTo') or '30d'}",
                      dashed=True)
        elif step.get("if") is not None:
            self.edge(node, then, i, "yes")
            self.edge(node, step.get("else"), i, "no", dashed=True)
        else:
            self.edge(node, then, i, "")


def flow_graph(specs: list[dict]) -> Graph:
    """The flows as one graph: triggers, steps by kind, every edge a step can take."""
    graph = Graph()
    first_step = {spec["id"]: f"f{n}s0" for n, spec in enumerate(specs)
                  if isinstance(spec.get("id"), str)
                  and any(isinstance(s, dict) for s in spec.get("steps") or [])}
    for n, spec in enumerate(specs):
        FlowDrawing(graph, n, spec, first_step).draw()
    return graph


MERMAID_SHAPES = {"trigger": ('(["', '"])'), "talk": ('["', '"]'), "say": ('[/"', '"/]'),
                  "do": ('[["', '"]]'), "wait": ('{{"', '"}}'), "if": ('{"', '"}'),
                  "end": ('(("', '"))'), "flow": ('[["', '"]]')}


def mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def to_mermaid(graph: Graph) -> str:
    """The graph as a Mermaid flowchart."""
    lines = ["flowchart TD"]
    clustered = set()
    for n, (flow_id, name, members) in enumerate(graph.clusters):
        lines.append(f'  subgraph flow{n}["{mermaid_text(name)} ({mermaid_text(flow_id)})"]')
        for node_id in members:
            node = graph.nodes[node_id]
            opening, closing = MERMAID_SHAPES[node.shape]
            lines.append(f"    {node.id}{opening}{mermaid_text(node.label)}{closing}")
            clustered.add(node_id)
        lines.append("  end")
    for node in graph.nodes.values():
        if node.id not in clustered:
            opening, closing = MERMAID_SHAPES[node.shape]
            lines.append(f"  {node.id}{opening}{mermaid_text(node.label)}{closing}")
    for e in graph.edges:
        arrow = "-.->" if e.dashed else "-->"
        label = f'|"{mermaid_text(e.label)}"|' if e.label else ""
        lines.append(f"  {e.source} {arrow}{label} {e.target}")
    return "\n".join(lines) + "\n"


DOT_SHAPES = {"trigger": "oval", "talk": "box", "say": "parallelogram", "do": "component",
              "wait": "hexagon", "if": "diamond", "end": "doublecircle", "flow": "box3d"}


def dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(graph: Graph) -> str:
    """The graph as Graphviz DOT."""
    lines = ["digraph flows {", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=11];']
    clustered = set()
    for n, (flow_id, name, members) in enumerate(graph.clusters):
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={dot_text(f'{name} ({flow_id})')};")
        for node_id in members:
            node = graph.nodes[node_id]
            lines.append(f"    {node.id} [label={dot_text(node.label)}, "
                         f"shape={DOT_SHAPES[node.shape]}];")
            clustered.add(node_id)
        lines.append("  }")
    for node in graph.nodes.values():
        if node.id not in clustered:
            lines.append(f"  {node.id} [label={dot_text(node.label)}, "
                         f"shape={DOT_SHAPES[node.shape]}];")
    for e in graph.edges:
        attrs = [f"label={dot_text(e.label)}"] if e.label else []
        if e.dashed:
            attrs.append("style=dashed")
        lines.append(f"  {e.source} -> {e.target}" + (f" [{', '.join(attrs)}]" if attrs else "")
                     + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"


def cmd_graph(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    found = load_specs(args.files)
    broken = [(path, problem) for path, _, spec in found for problem in shape_problems(spec)
              if problem.severity == "error"]
    if broken:                  # only a flow of the right shape can be drawn: say what to fix first
        for path, problem in broken:
            err.write(f"{path}: error: {path_text(problem.path)}: {problem.message}\n")
        return PROBLEMS
    graph = flow_graph([spec for _, _, spec in found])
    out.write(to_dot(graph) if args.format == "dot" else to_mermaid(graph))
    return OK


# 4. The playground ############################################################################
#
# What chat and inspect share: one agent, one session under a fake clock, the
# history a host would keep, and a provider wrapper that records each model call.

class RecordingProvider:
    """Wraps a provider and records every request and reply, with its time, for the inspector."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", "provider")
        self.capabilities = inner.capabilities
        self.calls: list[dict] = []

    def _record(self, request: GenerateRequest, started: float, reply: Generation | None,
                error: BaseException | None) -> None:
        entry = {"schemaName": request.schema_name, "system": request.system,
                 "prompt": request.prompt, "schema": request.schema, "history": request.history,
                 "tools": request.tools, "ms": round((time.perf_counter() - started) * 1000, 1)}
        if reply is not None:
            entry["reply"] = {"message": reply.message, "structured": reply.structured,
                              "toolCalls": [{"name": c.name, "arguments": c.arguments}
                                            for c in reply.tool_calls],
                              "usage": usage_dict(reply.usage)}
        if error is not None:
            entry["error"] = f"{type(error).__name__}: {error}"
        self.calls.append(json.loads(json.dumps(entry, default=str)))

    def generate(self, request: GenerateRequest) -> Generation:
        started = time.perf_counter()
        try:
            reply = self.inner.generate(request)
        except BaseException as error:
            self._record(request, started, None, error)
            raise
        self._record(request, started, reply, None)
        return reply

    def generate_stream(self, request: GenerateRequest):
        started, last = time.perf_counter(), None
        try:
            for chunk in self.inner.generate_stream(request):
                last = chunk
                yield chunk
        except BaseException as error:
            self._record(request, started, None, error)
            raise
        if last is not None:
            self._record(request, started,
                         Generation(message=last.accumulated, structured=last.structured,
                                    tool_calls=last.tool_calls, usage=last.usage), None)


def usage_dict(usage: TokenUsage | None) -> dict | None:
    return None if usage is None else {"prompt": usage.prompt_tokens,
                                       "completion": usage.completion_tokens,
                                       "cached": usage.cached_input_tokens}


# The offline stand-in: reads each request the way a model would, with word matching.

STOP_WORDS = {"the", "and", "for", "with", "what", "where", "this", "that", "asks", "says",
              "customer", "things", "like", "someone", "when", "about", "from", "your", "you",
              "are", "want", "wants"}
YES = {"yes", "yeah", "yep", "sure", "ok", "okay", "sim", "claro", "pode", "si", "true"}
NO = {"no", "nope", "não", "nao", "false", "never"}


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w{3,}", text.lower()) if w not in STOP_WORDS}


def quoted_message(prompt: str) -> str:
    found = re.search(r'## Customer\'s latest message\n"""\n(.*?)\n"""', prompt, re.S)
    return found.group(1) if found else ""


def flow_scores(prompt: str, message: str, aliases: list[str]) -> dict:
    """0-100 per flow: shared words between the message and the flow's name,
    description and phrases.
    """
    said = words(message)
    blocks = re.split(r"\n(?=\d+\. )",
                      prompt.split("## Flows the customer may want", 1)[-1].split("\n## ")[0])
    scores = {}
    for alias in aliases:
        block = next((b for b in blocks if re.match(rf"\d+\. {re.escape(alias)} — ", b)), "")
        positive, _, negative = block.partition("Score 0 when:")
        hits = len(said & words(positive.replace(alias, " ")))
        scores[alias] = (0 if not hits or (negative and len(said & words(negative)) > hits)
                         else min(95, 45 + 20 * hits))
    return scores


def field_value(prop: dict, message: str, asked: bool) -> Any:
    """A field's value in the message: an enum option it names; a number,
    yes/no or the text when asked for.
    """
    types: list = prop["type"] if isinstance(prop.get("type"), list) else [prop.get("type")]
    lowered = message.lower()
    if prop.get("enum"):
        return next((o for o in prop["enum"] if isinstance(o, str)
                     and re.search(rf"\b{re.escape(o.lower())}\b",
                                    lowered)), None)
    if not asked:
        return None
    if "boolean" in types:
        said = set(re.findall(r"\w+", lowered))
        return True if said & YES else False if said & NO else None
    if "number" in types or "integer" in types:
        number = re.search(r"-?\d+(?:[.,]\d+)?", message)
        if number is None or re.search(r"\d{4}-\d\d?-\d\d?|\d\d?:\d\d", message):
            return None         # a date or a time is no count: "2026-12-20" is not 2026 guests
        text = number.group(0).replace(",", ".")
        return int(float(text)) if "integer" in types else float(text)
    return message.strip() or None


def standin_understand(request: GenerateRequest) -> dict:
    message = request.message if request.message is not None else quoted_message(request.prompt)
    properties = (request.schema or {}).get("properties", {})
    reply: dict = {}
    if "flows" in properties:
        reply["flows"] = flow_scores(request.prompt, message,
                                     list(properties["flows"]["properties"]))
    if "fields" in properties:
        # The whole message answers a text field only when it reads as an answer: no question, no
        # other flow.
        current = re.search(r"^The conversation is in the flow .*\(id: ([^)]+)\)", request.prompt,
                            re.M)
        switching = any(score >= 40 for alias, score in reply.get("flows", {}).items()
                        if not current or alias != current.group(1))
        answer = not switching and not message.rstrip().endswith("?")
        asking = request.prompt.split("Still being asked for:", 1)
        pending = re.findall(r"^- (\S+) "
                             r"\(", asking[1].split("\n\n")[0], re.M) if len(asking) == 2 else []
        first_text = next((slug for slug in pending
                           if "string" in str(properties["fields"]["properties"]
                                              .get(slug, {}).get("type"))), None)
        reply["fields"] = {slug: field_value(prop, message, slug in pending and (
            (slug == first_text and answer) or "string" not in str(prop.get("type"))))
            for slug, prop in properties["fields"]["properties"].items()}
    return reply


def standin_speak(request: GenerateRequest) -> dict:
    """A plain reply: ask for the first field still to collect, else call the step's tool once,
    else the guideline.

    Like a model, it also fills the reply's field properties it can read in the customer's message
    (a number, a yes/no, an enum option; text fields are left to the understand call).
    """
    message = request.message or ""
    properties = {k: v for k, v in ((request.schema or {}).get("properties") or {}).items()
                  if k != "message"}
    values = {slug: field_value(prop, message, "string" not in str(prop.get("type")))
              for slug, prop in properties.items()}
    last = request.history[-1] if request.history else {}
    collect = request.prompt.split("## Still to collect", 1)
    found = re.search(r"^- (\S+) \(", collect[1], re.M) if len(collect) == 2 else None
    missing = found.group(1) if found and values.get(found.group(1)) is None else None
    if last.get("role") == "tool":
        reply = f"(stand-in) {last.get('name')} answered: {short(last.get('content'), 120)}"
    elif missing:
        reply = f"(stand-in) Could you tell me your {missing}?"
    elif request.tools and not any(item.get("role") == "tool" for item in request.history[-4:]):
        tool = request.tools[0]
        known = dict(re.findall(r'^- (\S+): "(.*)"$', request.prompt, re.M))
        arguments = {name: known.get(name, message)
                     for name in ((tool.get("parameters") or {}).get("properties") or {})}
        return {"message": "", "toolCalls": [{"toolName": tool["name"], "arguments": arguments}]}
    else:
        guideline = re.search(r"## Guideline for your reply[^\n]*\n([^#\n].*?)(?:\n\n|\Z)",
                              request.prompt, re.S)
        reply = (f"(stand-in) {short(guideline.group(1), 160)}" if guideline
                 else "(stand-in) Hello! How can I help?")
    return {"message": reply, **values}


def scripted_provider(script_path: str | None) -> ScriptedProvider:
    """The offline provider: a script file's replies first, then the word-matching stand-in."""
    script: dict = {"understand": [], "speak": []}
    if script_path is not None:
        given = read_json(script_path, "script")
        if not isinstance(given, dict) or not all(isinstance(v, list) for v in given.values()):
            raise UsageError(f'{script_path}: a script is {{"understand": [replies], "speak": '
                             f'[replies]}}. '
                             "Write each queue as a list.")
        script.update({name: list(entries) for name, entries in given.items()})
    script["understand"] += [standin_understand] * 10_000
    script["speak"] += [standin_speak] * 10_000
    return ScriptedProvider(script=script, usage=True)


PROVIDER_KEYS = {"gemini": "GEMINI_API_KEY", "openai": "OPENAI_API_KEY",
                 "anthropic": "ANTHROPIC_API_KEY"}


def make_provider(args: argparse.Namespace, environ: dict) -> Any:
    """The provider --provider names; the vendor ones read their key from the environment."""
    if args.provider == "scripted":
        return scripted_provider(args.script)
    try:
        import falai_providers
    except ImportError as error:
        raise UsageError(f"--provider {args.provider}: falai_providers cannot be imported "
                         f"({error}). Install falai with its dependencies: "
                         "pip install falai.") from None
    key = environ.get(PROVIDER_KEYS[args.provider])
    options = {"model": args.model} if args.model else {}
    if args.base_url:
        options["base_url"] = args.base_url
    try:
        if args.provider == "gemini":
            return falai_providers.GeminiProvider(api_key=key, **options)
        if args.provider == "anthropic":
            return falai_providers.AnthropicProvider(api_key=key, **options)
        base = options.pop("base_url", None) or environ.get("OPENAI_BASE_URL")
        return falai_providers.OpenAICompatibleProvider(api_key=key, base_url=base, **options)
    except (ValueError, TypeError) as error:
        raise UsageError(f"--provider {args.provider}: {error} (the key comes from "
                         f"{PROVIDER_KEYS[args.provider]}; --model "
                         "and --base-url set the rest).") from None


def diff(before: Any, after: Any, path: str = "") -> list[dict]:
    """What changed between two JSON values, leaf by leaf: {path, op, before, after}."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for key in list(before) + [k for k in after if k not in before]:
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                changes.append({"path": where, "op": "removed", "before": before[key]})
            elif key not in before:
                changes.append({"path": where, "op": "added", "after": after[key]})
            else:
                changes += diff(before[key], after[key], where)
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for i in range(max(len(before), len(after))):
            where = f"{path}[{i}]"
            if i >= len(after):
                changes.append({"path": where, "op": "removed", "before": before[i]})
            elif i >= len(before):
                changes.append({"path": where, "op": "added", "after": after[i]})
            else:
                changes += diff(before[i], after[i], where)
        return changes
    if before != after or type(before) is not type(after):
        return [{"path": path or "(session)", "op": "changed", "before": before, "after": after}]
    return []


def run_rows(session: Session) -> list[dict]:
    """The live runs, the floor marked: the run that is asking holds the floor (runtime.md §4)."""
    return [{"id": run.id, "flow": run.flow_id, "step": run.step_id, "status": run.status,
             "hop": run.hop, "floor": run.status == "asking", "waiting": run.waiting}
            for run in session.runs]


def outcome_row(line: Any) -> dict:
    row = line.to_dict()
    if line.code:
        row["meaning"] = line.message or OUTCOME_MESSAGES.get(line.code, "")
    return row


def phases(kind: str, result: Any, calls: list[dict]) -> list[dict]:
    """The turn's phases (runtime.md §3), each with what it did, as read from the result and the
    model calls.
    """
    ignored = next((line for line in result.outcomes if line.run_id is None and line.code in (
        "duplicate-input", "stale-wake", "silence-broken", "no-session")), None)
    understood = [c for c in calls if c["schemaName"] == "understand"]
    spoken = [c for c in calls if c["schemaName"] != "understand"]
    rows = [{"phase": "ingest",
             "detail": f"{kind}" + (f": ignored ({ignored.code})" if ignored else "")}]
    if ignored:
        return rows
    if kind == "message":
        rows.append({"phase": "understand",
                     "detail": f"{len(understood)} model call(s)" if understood
                     else "no model call needed"})
        rows.append({"phase": "decide", "detail": ", ".join(
            [f"started {s.flow_id}" for s in result.started] + [f"skipped {s.flow_id} ({s.code})"
                                                                for s in result.skipped])
                     or "no new run"})
    rows.append({"phase": "run", "detail": f"{len(result.outcomes)} outcome line(s)"
                 + (f", ended {', '.join(f'{e.flow_id} ({e.reason})' for e in result.ended)}"
                    if result.ended else "")})
    rows.append({"phase": "speak",
                 "detail": f"{len(spoken)} model call(s), {len(result.messages)} message(s)"})
    rows.append({"phase": "settle", "detail": f"{len(result.schedule)} wake(s) to schedule, "
                 f"session version {result.session.version}"})
    return rows


class Playground:
    """One conversation against an agent: a fake clock, the host's history, every turn recorded."""

    def __init__(self, flow_paths: list[str], registry: Registry, provider: Any, now: str):
        self.clock = falai.fake_clock(now)
        self.provider = RecordingProvider(provider)
        # The offline stand-in reads the v4 prompts (docs/guide/tokens.md), so it plays under "v4",
        # whatever the registry asks; a real provider takes the registry's protocol.
        standin = isinstance(provider, ScriptedProvider)
        self.agent = build_agent(flow_paths, registry, self.provider, self.clock,
                                 "v4" if standin else None)
        asked = registry.agent.get("protocol")
        self.note = (f'the offline stand-in reads only "v4" prompts, so it plays under "v4"; the '
                     f'registry\'s protocol "{asked}" applies with a real --provider'
                     if standin and asked not in (None, "v4") else None)
        self.specs = [spec for _, _, spec in load_specs(flow_paths)]
        self.graph = flow_graph(self.specs)
        self.session: Session | None = None
        self.history: list[dict] = []
        self.turns: list[dict] = []
        self.messages = self.events = 0
        self.lock = threading.Lock()

    def pending(self) -> list:
        return [] if self.session is None else self.agent.pending_wakes(session=self.session)

    def message(self, text: str) -> dict:
        self.messages += 1
        record = self._turn("message", text, message=text, id=f"m{self.messages}",
                            history=list(self.history))
        if record.get("error") is None:
            self.history.append({"role": "user", "content": text})
            self.history += [{"role": "assistant", "content": m["text"]}
                             for m in record["messages"]]
        return record

    def wake(self, key: str | None = None) -> dict | None:
        """Fire a wake (the next due one by default), moving the fake clock to its time;
        None when none waits.
        """
        pending = sorted(self.pending(), key=lambda entry: entry.at)
        entry = next((e for e in pending if key is None or e.key == key), None)
        if entry is None:
            return None
        if entry.at > self.clock():
            self.clock.set(iso(entry.at))
        return self._turn("wake", entry.key, wake=entry.key, history=list(self.history))

    def event(self, name: str, payload: Any = None) -> dict:
        self.events += 1
        return self._turn("event", name, event=name, key=f"e{self.events}", payload=payload,
                          history=list(self.history))

    def _turn(self, kind: str, label: str, **inputs: Any) -> dict:
        before = self.session.to_dict() if self.session else None
        self.provider.calls = []
        started = time.perf_counter()
        record: dict = {"number": len(self.turns) + 1, "kind": kind, "input": label,
                        "at": iso(self.clock())}
        try:
            result = self.agent.turn(session_id="playground", session=self.session, **inputs)
        except ProviderError as error:
            record.update(changed=False,
                          error=f"the model call failed ({error.provider}, {error.kind}): {error}. "
                          "Nothing was processed; the session is as it was.", messages=[],
                          outcomes=[])
            record.update(self._state(before, time.perf_counter() - started))
            self.turns.append(record)
            return record
        if result.changed:
            self.session = result.session
        record.update(
            changed=result.changed,
            messages=[{"text": m.text, "kind": m.kind, "afterMs": m.after_ms, "run": m.run_id,
                       "step": m.step_id}
                      for m in result.messages],
            outcomes=[outcome_row(line) for line in result.outcomes],
            schedule=[{"key": e.key, "at": iso(e.at), "replaces": e.replaces}
                      for e in result.schedule],
            started=[vars(s) for s in result.started],
            ended=[{"run": e.id, "flow": e.flow_id, "reason": e.reason}
                    for e in result.ended],
            skipped=[vars(s) for s in result.skipped], llmCalls=result.llm_calls,
            usage=usage_dict(result.usage), phases=phases(kind, result, self.provider.calls))
        record.update(self._state(before, time.perf_counter() - started))
        self.turns.append(record)
        return record

    def _state(self, before: dict | None, seconds: float) -> dict:
        after = self.session.to_dict() if self.session else None
        return {"before": before, "after": after, "diff": diff(before or {}, after or {}),
                "runs": run_rows(self.session) if self.session else [],
                "pending": [{"key": e.key, "at": iso(e.at)} for e in self.pending()],
                "modelCalls": list(self.provider.calls), "ms": round(seconds * 1000, 1),
                "now": iso(self.clock())}


# 5. chat ######################################################################################

def print_turn(record: dict, out: TextIO) -> None:
    """One turn as the chat shows it: the reply, then the state a flow author checks."""
    if record.get("error"):
        out.write(f"  ! {record['error']}\n")
        return
    for message in record["messages"]:
        delay = f" (after {message['afterMs']} ms)" if message["afterMs"] else ""
        out.write(f"bot{delay}: {message['text']}\n")
    if not record["messages"]:
        out.write("bot: (no reply this turn)\n")
    data = (record["after"] or {}).get("data", {})
    out.write(f"  data:     {json.dumps(data, ensure_ascii=False)}\n")
    runs = record["runs"]
    out.write("  runs:     " + ("; ".join(
        f"{r['id']} at {r['step']} ({r['status']})" + (" [floor]" if r["floor"] else "")
        for r in runs)
        or "(none)") + "\n")
    floor = next((r["id"] for r in runs if r["floor"]), None)
    out.write(f"  floor:    {floor or '(nobody is asking)'}\n")
    out.write("  schedule: "
              + ("; ".join(f"{e['key']} at {e['at']}" + (f" (replaces {e['replaces']})"
                                                      if e["replaces"] else "")
                        for e in record["schedule"]) or "(nothing new)") + "\n")
    out.write("  outcomes:\n" if record["outcomes"] else "  outcomes: (none)\n")
    for line in record["outcomes"]:
        where = "/".join(str(x) for x in (line.get("flowId"), line.get("stepId")) if x) or "-"
        code = f" {line['code']}: {line['meaning']}" if line.get("code") else ""
        extra = "".join(f" {name}={line[name]}" for name in ("detail", "next", "until")
                        if line.get(name))
        out.write(f"    {line['kind']} {line['status']} {where}{code}{extra}\n")
    usage = record["usage"]
    usage_text = (f"prompt {usage['prompt']}, completion {usage['completion']}, "
                  f"cached {usage['cached']}"
                  if usage else "not reported")
    out.write(f"  llm_calls: {record['llmCalls']}  usage: {usage_text}\n")


CHAT_HELP = ("Type a message, or: /wake (fire the next due wake), /event NAME [JSON payload], "
             "/session (the saved blob), /help, /quit.\n")


def cmd_chat(args: argparse.Namespace, out: TextIO, environ: dict,
             read: Callable[[str], str]) -> int:
    # falai's warnings (a retry, a failed call) go to stderr on their own lines, marked as the
    # engine's.
    logging.basicConfig(format="  (falai: %(message)s)", level=logging.WARNING)
    playground = make_playground(args, environ)
    out.write(f"falai chat: {playground.agent.name} with {len(playground.specs)} flow(s), provider "
              f"{args.provider} (protocol {playground.agent.protocol}), clock "
              f"{playground.clock}.\n" + (f"({playground.note})\n" if playground.note else "")
              + CHAT_HELP)
    while True:
        try:
            text = read("you: ").strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n(bye)\n")
            return OK
        if not text:
            continue
        if text in ("/quit", "/exit"):
            out.write("(bye)\n")
            return OK
        if text == "/help":
            out.write(CHAT_HELP)
        elif text == "/session":
            out.write(json.dumps(playground.session.to_dict() if playground.session else None,
                                 indent=2, ensure_ascii=False) + "\n")
        elif text == "/wake":
            record = playground.wake()
            if record is None:
                out.write("  (no wake is pending)\n")
            else:
                out.write(f"  (clock at {record['at']}: firing {record['input']})\n")
                print_turn(record, out)
        elif text.startswith("/event"):
            name, _, payload = text[len("/event"):].strip().partition(" ")
            if not name:
                out.write("  usage: /event NAME [JSON payload]\n")
                continue
            try:
                value = json.loads(payload) if payload.strip() else None
            except ValueError as error:
                out.write(f"  the payload is not JSON ({error}); send /event {name} {{\"key\": "
                          f"\"value\"}}\n")
                continue
            except RecursionError:          # past json.loads's depth (which varies by Python)
                out.write(f"  the payload nests lists and dicts deeper than {falai.MAX_NESTING} "
                          "levels, the limit for a value a session holds (docs/guide/limits.md). "
                          "Flatten it.\n")
                continue
            try:
                print_turn(playground.event(name, value), out)
            except ValueError as error:          # a payload the turn refuses (too deep: limits.md)
                out.write(f"  {error}\n")
        elif text.startswith("/"):
            out.write(f"  unknown command {text.split()[0]}. " + CHAT_HELP)
        else:
            print_turn(playground.message(text), out)


def make_playground(args: argparse.Namespace, environ: dict) -> Playground:
    """The playground of chat and inspect; a flow the agent cannot run raises FlowConfigurationError
    (exit 1).
    """
    return Playground(args.flows, read_registry(args.registry), make_provider(args, environ),
                      args.now or now_text())


def now_text() -> str:
    return iso(datetime.now(timezone.utc).replace(microsecond=0))


# 6. replay and migrate ########################################################################

def load_session(path: str) -> Session:
    blob = read_json(path, "session")
    try:
        return Session.from_dict(blob,
                                 session_id=blob.get("id") if isinstance(blob, dict) else None)
    except FalaiError as error:
        raise UsageError(f"{path}: not a v4 session blob: {error}. A 3.x blob converts with: "
                         f"falai migrate {path}") from None


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    session = load_session(args.session)
    registry = read_registry(args.registry)
    agent = build_agent(args.flows or [], registry, ScriptedProvider(), system_clock)
    out.write(f"session {session.id} (version {session.version})\n")
    out.write(f"  data: {json.dumps(session.data, ensure_ascii=False)}\n")
    out.write(f"  runs ({len(session.runs)}):\n")
    for run in session.runs:
        waiting = (f", waiting for {run.waiting.get('key')} until {run.waiting.get('until')}"
                   if run.waiting else "")
        out.write(f"    {run.id}: flow {run.flow_id} at {run.step_id} ({run.status}), "
                  f"hop {run.hop}, started {run.started_at}{waiting}\n")
        for line in run.outcomes[-args.lines:] if args.lines else []:
            code = (f" {line['code']}: {OUTCOME_MESSAGES.get(line['code'], '')}"
                    if line.get("code") else "")
            out.write(f"      {line.get('at')} {line.get('kind')} {line.get('status')} "
                      f"{line.get('stepId') or ''}{code}\n")
    out.write(f"  claims ({len(session.claims)}):\n")
    for key, claim in session.claims.items():
        out.write(f"    {key}: {json.dumps(claim, ensure_ascii=False)}\n")
    wakes = agent.pending_wakes(session=session)
    out.write(f"  pending wakes ({len(wakes)}):" + ("" if args.flows else
                                                   " (silence wakes need the flows: pass --flows)")
              + "\n")
    for entry in wakes:
        out.write(f"    {entry.key} at {iso(entry.at)}\n")
    return OK


def cmd_migrate(args: argparse.Namespace, out: TextIO) -> int:
    blob = read_json(args.old, "3.x session")
    session_id = args.session_id or (blob.get("id") if isinstance(blob, dict)
                                     and isinstance(blob.get("id"), str)
                                     else None)
    if session_id is None:
        raise UsageError(f"{args.old}: the blob has no string id. Pass one: --session-id ID.")
    renames = {}
    for pair in args.rename or []:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise UsageError(f'--rename "{pair}": write OLD=NEW, e.g. '
                             '--rename qualificacao=qualify.')
        renames[old] = new
    try:
        session = falai.migrate_session(blob, session_id=session_id,
                                        flow_id_of=lambda key: renames.get(key, key),
                                        now=parse_iso(args.now) if args.now else None)
    except FalaiError as error:
        raise UsageError(f"{args.old}: {error}") from None
    text = json.dumps(session.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
        out.write(f"wrote {args.output}: session {session.id}, {len(session.runs)} run(s), "
                  f"{len(session.claims)} claim(s)\n")
    else:
        out.write(text)
    return OK


# 7. inspect ###################################################################################

INSPECT_MAX_BODY = 1_000_000        # bytes; the page sends a message, an event or a wake key
INSPECT_TIMEOUT_S = 30               # a connection that sends nothing for this long is closed
TOKEN_HEADER = "X-Falai-Token"


def inspect_handler(playground: Playground, page: bytes, token: str | None = None) -> type:
    """The inspector's request handler: the page, its state, and one POST per action.

    Only the page the server handed out can use it (docs/guide/cli.md, "Who can reach the
    inspector"): every request must name the address served in ``Host`` (so a DNS-rebinding
    page is refused), a request carrying ``Origin`` must come from that address, every
    ``/api/`` request carries the per-run ``token`` the page was served with, and a POST is
    ``application/json`` with a ``Content-Length`` up to ``INSPECT_MAX_BODY``.
    """
    secret = token if token is not None else secrets.token_urlsafe(24)
    page = page.replace(b"__FALAI_TOKEN__", secret.encode("ascii"))

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = INSPECT_TIMEOUT_S

        def log_message(self, *args: Any) -> None:       # quiet: the terminal shows the URL only
            pass

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("X-Frame-Options", "DENY")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value, default=str, ensure_ascii=False).encode(),
                       "application/json")

        def _refused(self, api: bool) -> bool:
            """Answer 403 and return True when the request does not come from the page served."""
            port = self.connection.getsockname()[1]          # the port this connection came to
            served = {f"127.0.0.1:{port}", f"localhost:{port}"}
            host = (self.headers.get("Host") or "").strip().lower()
            origin = self.headers.get("Origin")
            if host not in served:
                problem = (f"Host {host or '(none)'} is not this inspector's address: open "
                           f"http://127.0.0.1:{port}/")
            elif origin is not None and origin.strip().lower() not in {f"http://{h}"
                                                                       for h in served}:
                problem = (f"a page at {origin} may not use the inspector: "
                           f"open http://127.0.0.1:{port}/")
            elif api and not secrets.compare_digest(self.headers.get(TOKEN_HEADER) or "", secret):
                problem = (f"the {TOKEN_HEADER} header is missing or wrong: "
                           "use the page the inspector serves")
            else:
                return False
            self.close_connection = True
            self._json(403, {"error": problem})
            return True

        def do_GET(self) -> None:
            if self._refused(api=self.path.startswith("/api/")):
                return
            if self.path in ("/", "/index.html"):
                self._send(200, page, "text/html; charset=utf-8")
            elif self.path == "/api/state":
                with playground.lock:
                    self._json(200, state_of(playground))
            else:
                self._json(404, {"error": f"no page {self.path}"})

        def _body(self) -> dict | None:
            """The POST's JSON object; None when it already answered with an error."""
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if kind != "application/json":
                self.close_connection = True
                self._json(415, {"error": "send the action as Content-Type: application/json"})
                return None
            length = self.headers.get("Content-Length")
            if length is None or not length.strip().isdigit() or int(length) > INSPECT_MAX_BODY:
                self.close_connection = True
                self._json(400, {"error": "the request needs a Content-Length from 0 to "
                                          f"{INSPECT_MAX_BODY} bytes"})
                return None
            try:
                body = json.loads(self.rfile.read(int(length)) or b"{}")
            except (ValueError, RecursionError):
                body = None
            if not isinstance(body, dict):
                self._json(400, {"error": "the request body is not a JSON object"})
                return None
            return body

        def do_POST(self) -> None:
            if self._refused(api=True):
                return
            body = self._body()
            if body is None:
                return
            record: dict | None
            with playground.lock:
                try:
                    record = self._act(body)
                except Exception as error:  # a dev tool: show what broke on the page, keep serving
                    self._json(500, {"error": f"{type(error).__name__}: {error}"})
                    return
                if record is None:
                    return
                self._json(200, {"turn": record, "state": state_of(playground)})

        def _act(self, body: dict) -> dict | None:
            """The turn a POST asks for; None when it already answered with an error."""
            if self.path == "/api/message" and str(body.get("text", "")).strip():
                return playground.message(str(body["text"]).strip())
            if self.path == "/api/wake":
                record = playground.wake(body.get("key"))
                if record is None:
                    self._json(409, {"error": "no wake is pending"})
                return record
            if self.path == "/api/event" and body.get("name"):
                return playground.event(str(body["name"]), body.get("payload"))
            self._json(400, {"error": f"{self.path}: unknown action or missing text/name"})
            return None

    return Handler


def state_of(playground: Playground) -> dict:
    session = playground.session
    return {"agent": playground.agent.name, "now": iso(playground.clock()),
            "graph": playground.graph.to_dict(), "mermaid": to_mermaid(playground.graph),
            "session": session.to_dict() if session else None,
            "runs": run_rows(session) if session else [],
            "pending": [{"key": e.key, "at": iso(e.at)} for e in playground.pending()],
            "events": sorted(playground.agent.events), "turns": playground.turns}


def cmd_inspect(args: argparse.Namespace, out: TextIO, environ: dict) -> int:
    playground = make_playground(args, environ)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port),
                                             inspect_handler(playground,
                                                             INSPECT_PAGE.encode("utf-8")))
    out.write(f"falai inspect: http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)\n"
              + (f"({playground.note})\n" if playground.note else ""))
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.write("(stopped)\n")
    finally:
        server.server_close()
    return OK


# 8. main ######################################################################################

def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="falai", description="See and try falai flows: validate, "
                                                            "draw, chat, inspect.")
    top.add_argument("--version", action="version", version=f"falai {falai.__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def registry_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--registry", metavar="FILE",
                       help="JSON file of the fields, actions, events, "
                            "conditions and tools flows may name")

    p = commands.add_parser("validate",
                            help="check FlowSpec files; exit 0 ok, 1 problems, 2 unusable input")
    p.add_argument("files", nargs="+", metavar="FILE")
    registry_option(p)
    p.add_argument("--strict", action="store_true", help="count warnings as errors")
    p.add_argument("--json", action="store_true", help="print the problems as JSON (for editors)")

    p = commands.add_parser("schema", help="the JSON Schema of a FlowSpec for a registry")
    registry_option(p)

    p = commands.add_parser("graph", help="draw flows as Mermaid (default) or Graphviz DOT")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=("mermaid", "dot"), default="mermaid")

    for name, text in (("chat", "chat with flows in the terminal"),
                       ("inspect", "a local page to talk to an agent and watch each turn")):
        p = commands.add_parser(name, help=text)
        p.add_argument("flows", nargs="+", metavar="FLOWS")
        registry_option(p)
        p.add_argument("--provider", choices=("scripted", "gemini", "openai", "anthropic"),
                       default="scripted", help="scripted (default): an offline stand-in; "
                                                "the others read GEMINI_API_KEY, "
                            "OPENAI_API_KEY or ANTHROPIC_API_KEY")
        p.add_argument("--script", metavar="FILE",
                       help='scripted replies first: {"understand": [...], "speak": [...]}')
        p.add_argument("--model", help="the vendor's model name")
        p.add_argument("--base-url", help="the provider's endpoint (openai: also OPENAI_BASE_URL)")
        p.add_argument("--now", help="the fake clock's start, ISO text (default: now)")
        if name == "inspect":
            p.add_argument("--port", type=int, default=8765, help="0 picks a free port")

    p = commands.add_parser("replay", help="the runs, claims and pending wakes of a saved session")
    p.add_argument("session", metavar="SESSION.json")
    p.add_argument("--flows", nargs="*", metavar="FLOWS",
                   help="the flows files (for silence wakes)")
    registry_option(p)
    p.add_argument("--lines", type=int, default=5, help="outcome lines shown per run (default 5)")

    # Listed for --help only: main() hands `falai host ...` to falai_host before parsing.
    commands.add_parser("host",
                        help="the production host's roles and admin (pip install 'falai[host]')")

    p = commands.add_parser("migrate", help="a 3.x session blob as a v4 blob")
    p.add_argument("old", metavar="OLD.json")
    p.add_argument("--session-id", help="default: the blob's id")
    p.add_argument("--now", help="ISO time stamped on what carries no date (default: now)")
    p.add_argument("--rename", action="append", metavar="OLD=NEW",
                   help="a 3.x flow id or signal key and the v4 "
                        "flow that took it over (repeatable)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the v4 blob here instead of printing it")
    return top


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None,
         environ: dict | None = None, read: Callable[[str], str] | None = None) -> int:
    """Run one command; returns its exit status (0 ok, 1 problems, 2 unusable input)."""
    import os
    out, err = out or sys.stdout, err or sys.stderr
    environ = dict(os.environ) if environ is None else environ
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["host"]:            # the production host: its own module, its own extra
        import falai_host
        return falai_host.main(argv[1:], out, err, environ)
    try:
        args = parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else UNUSABLE
    try:
        if args.command == "validate":
            return cmd_validate(args, out)
        if args.command == "schema":
            return cmd_schema(args, out)
        if args.command == "graph":
            return cmd_graph(args, out, err)
        if args.command == "chat":
            return cmd_chat(args, out, environ, read or (lambda prompt: prompt_line(prompt, out)))
        if args.command == "inspect":
            return cmd_inspect(args, out, environ)
        if args.command == "replay":
            return cmd_replay(args, out)
        return cmd_migrate(args, out)
    except UsageError as error:
        err.write(f"falai {args.command}: {error}\n")
        return UNUSABLE
    except FalaiError as error:           # a flow the agent cannot run (from_spec, Agent)
        err.write(f"falai {args.command}: {error}\n")
        return PROBLEMS


def prompt_line(prompt: str, out: TextIO) -> str:
    """input(), echoing piped lines so a transcript reads like a terminal session."""
    text = input(prompt)
    if not sys.stdin.isatty():
        out.write(text + "\n")
    return text


# The inspector page: one static file, no build step, nothing fetched from outside.
INSPECT_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="falai-token" content="__FALAI_TOKEN__">
<title>falai inspect</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
  header { background: #1d2330; color: #fff; padding: 8px 16px; display: flex; gap: 16px;
    align-items: baseline; }
  header h1 { font-size: 16px; margin: 0; }
  main { display: grid; grid-template-columns: minmax(280px, 1fr) minmax(0, 2.2fr); gap: 12px;
    padding: 12px; }
  #diagram { overflow-x: auto; }
  #flowsvg { max-width: 100%; height: auto; }
  @media (max-width: 1100px) { main { grid-template-columns: minmax(0, 1fr); } }
  td code { word-break: break-all; }
  #runs td:first-child, #pending td:first-child { overflow-wrap: anywhere; }
  section { background: #fff; border: 1px solid #d9dce3; border-radius: 6px; padding: 8px 12px;
    margin-bottom: 12px; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .04em; color: #5a6275;
    margin: 4px 0 8px; }
  #transcript { height: 320px; overflow-y: auto; }
  .msg { margin: 4px 0; padding: 4px 8px; border-radius: 6px; max-width: 90%;
    white-space: pre-wrap; }
  .you { background: #dbe8ff; margin-left: auto; text-align: right; }
  .bot { background: #eef0f3; }
  .note { color: #5a6275; font-style: italic; font-size: 12px; }
  .error { color: #a32020; }
  form { display: flex; gap: 6px; margin-top: 8px; }
  input[type=text] { flex: 1; padding: 6px; border: 1px solid #c3c8d2; border-radius: 4px; }
  button { padding: 5px 10px; border: 1px solid #8b93a5; background: #fff; border-radius: 4px;
    cursor: pointer; }
  button:hover { background: #eef0f3; }
  table { border-collapse: collapse; width: 100%; font-size: 12px; }
  td, th { border-bottom: 1px solid #eceef2; padding: 3px 6px; text-align: left;
    vertical-align: top; }
  code, pre { font: 12px/1.35 ui-monospace, monospace; }
  pre { white-space: pre-wrap; word-break: break-word; background: #f7f8fa; padding: 6px;
    margin: 4px 0;
        max-height: 260px; overflow: auto; }
  .code { font-weight: 600; color: #7a3e00; }
  .added { color: #17692b; } .removed { color: #a32020; } .changed { color: #7a3e00; }
  .floor { font-weight: 600; color: #17692b; }
  #turns button { margin: 2px; font-size: 12px; } #turns button.selected { background: #1d2330;
    color: #fff; }
  svg text { font: 11px system-ui, sans-serif; }
  .node rect { fill: #fff; stroke: #8b93a5; } .node.trigger rect { fill: #f0f4ff; rx: 14; }
  .node.wait rect { fill: #fff8e6; } .node.do rect { fill: #eefaf0; }
    .node.if rect { fill: #fbeefa; }
  .node.end rect { fill: #eceef2; rx: 14; }
  .node.current rect { stroke: #d14d00; stroke-width: 3; fill: #fff1e6; }
  .edge { fill: none; stroke: #8b93a5; marker-end: url(#arrow); }
    .edge.dashed { stroke-dasharray: 4 3; }
  .edge-label { fill: #5a6275; font-size: 10px; }
  details summary { cursor: pointer; }
</style>
</head>
<body>
<header><h1>falai inspect</h1><span id="agent"></span><span>clock: <code
  id="now"></code></span></header>
<main>
  <div>
    <section>
      <h2>Conversation</h2>
      <div id="transcript"></div>
      <form id="chat"><input type="text" id="message" placeholder="Type a customer message"
        autocomplete="off">
        <button id="send">Send</button></form>
      <form id="eventform"><input type="text" id="eventname" placeholder="event name">
        <button id="sendevent">Send event</button></form>
    </section>
    <section>
      <h2>Schedule</h2>
      <div><button id="wake">Fire next wake</button></div>
      <table id="pending"></table>
    </section>
    <section>
      <h2>Runs and the floor</h2>
      <table id="runs"></table>
    </section>
    <section>
      <h2>Turns</h2>
      <div id="turns"></div>
    </section>
  </div>
  <div>
    <section><h2>Flow diagram</h2><div id="diagram"></div>
      <details><summary>Mermaid source</summary><pre id="mermaid"></pre></details></section>
    <section><h2>Turn <span id="turnno"></span>: phases</h2><table id="phases"></table>
      <p class="note" id="timing"></p></section>
    <section><h2>Outcome lines</h2><table id="outcomes"></table></section>
    <section><h2>Session: before and after</h2><table id="diff"></table>
      <details><summary>before</summary><pre id="before"></pre></details>
      <details><summary>after</summary><pre id="after"></pre></details></section>
    <section><h2>Model calls</h2><div id="calls"></div></section>
  </div>
</main>
<script>
"use strict";
let state = null, selected = null;
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child
      : document.createTextNode(child == null ? "" : String(child)));
  }
  return node;
}
function row(...cells) { return el("tr", {}, ...cells.map((c) => el("td", {}, c))); }
function text(value) { return typeof value === "string" ? value : JSON.stringify(value, null, 2); }
function fill(id, ...rows) { $(id).replaceChildren(...rows); }
function note(message, isError) {
  $("transcript").append(el("div", {class: "note" + (isError ? " error" : "")}, message));
}

const TOKEN = document.querySelector('meta[name="falai-token"]').content;
async function call(path, body) {
  const headers = {"X-Falai-Token": TOKEN};
  const options = body === undefined ? {headers} :
    {method: "POST", headers: {...headers, "Content-Type": "application/json"},
      body: JSON.stringify(body)};
  const response = await fetch(path, options);
  const value = await response.json();
  if (!response.ok) { note(value.error || ("HTTP " + response.status), true); return null; }
  return value;
}
async function act(path, body) {
  const answer = await call(path, body);
  if (!answer) return;
  state = answer.state;
  selected = answer.turn.number;
  render();
}
function submitted(input, send) {
  return (e) => {
    e.preventDefault();
    const value = $(input).value.trim();
    if (!value) return;
    $(input).value = "";
    send(value);
  };
}
$("chat").addEventListener("submit", submitted("message", (t) => act("/api/message", {text: t})));
$("eventform").addEventListener("submit", submitted("eventname", (n) => act("/api/event",
  {name: n})));
$("wake").addEventListener("click", () => act("/api/wake", {}));

function render() {
  $("agent").textContent = state.agent;
  $("now").textContent = state.now;
  const log = [];
  for (const turn of state.turns) {
    if (turn.kind === "message") log.push(el("div", {class: "msg you"}, turn.input));
    else log.push(el("div", {class: "note"},
      (turn.kind === "wake" ? "wake fired: " : "event: ") + turn.input));
    if (turn.error) log.push(el("div", {class: "note error"}, turn.error));
    for (const m of turn.messages) log.push(el("div", {class: "msg bot"}, m.text));
  }
  $("transcript").replaceChildren(...log);
  $("transcript").scrollTop = 1e9;
  const fire = (w) => el("button", {class: "fire", onclick: () => act("/api/wake", {key: w.key})},
    "Fire");
  fill("pending", ...(state.pending.length ? state.pending.map((w) => row(el("code", {}, w.key),
    w.at, fire(w)))
    : [row("no wake pending")]));
  const runRow = (r) => {
    const tr = row(r.id, r.flow, r.step, r.status + (r.floor ? " (floor)" : ""));
    if (r.floor) tr.className = "floor";
    return tr;
  };
  fill("runs", ...(state.runs.length ? [row("run", "flow", "step", "status"),
    ...state.runs.map(runRow)]
    : [row("no live run")]));
  $("turns").replaceChildren(...state.turns.map((t) => el("button", {
    class: t.number === selected ? "selected" : "",
      onclick: () => { selected = t.number; render(); },
  }, "#" + t.number + " " + t.kind)));
  $("mermaid").textContent = state.mermaid;
  drawDiagram();
  renderTurn(state.turns.find((t) => t.number === selected));
}

function renderTurn(turn) {
  $("turnno").textContent = turn
    ? "#" + turn.number + " (" + turn.kind + ": " + turn.input + ")" : "";
  if (!turn) {
    for (const id of ["phases", "outcomes", "diff"]) fill(id);
    $("calls").replaceChildren();
    return;
  }
  fill("phases", ...(turn.phases || []).map((p) => row(el("b", {}, p.phase), p.detail)));
  const u = turn.usage;
  const usage = u ? `tokens: prompt ${u.prompt}, completion ${u.completion}, cached ${u.cached}`
    : "tokens: not reported";
  $("timing").textContent = `llm_calls ${turn.llmCalls || 0} · ${usage} · turn took ${turn.ms} ms`;
  const outcome = (o) => row(o.kind, o.status, [o.flowId, o.stepId].filter(Boolean).join(" / "),
    el("span", {class: "code"}, o.code || ""), o.meaning || o.detail || "",
      o.next || o.until || "");
  fill("outcomes", ...(turn.outcomes.length
    ? [row("kind", "status", "flow / step", "code", "meaning", "next / until"),
      ...turn.outcomes.map(outcome)]
    : [row("no outcome line")]));
  const change = (d) => {
    const tr = row(d.op, el("code", {}, d.path), d.op === "added" ? "" : el("code", {},
      JSON.stringify(d.before)),
      d.op === "removed" ? "" : el("code", {}, JSON.stringify(d.after)));
    tr.className = d.op;
    return tr;
  };
  fill("diff", ...(turn.diff.length ? turn.diff.map(change) : [row("the session did not change")]));
  $("before").textContent = text(turn.before);
  $("after").textContent = text(turn.after);
  const modelCall = (c, i) => {
    const t = c.reply && c.reply.usage
      ? ` · tokens ${c.reply.usage.prompt} in / ${c.reply.usage.completion} out` : "";
    const title = `#${i + 1} ${c.schemaName} · ${c.ms} ms${t}${c.error ? " · failed" : ""}`;
    return el("details", {class: "call"}, el("summary", {}, title),
      el("div", {}, "system"), el("pre", {}, c.system || ""), el("div", {}, "prompt"), el("pre", {},
        c.prompt),
      el("div", {}, "schema"), el("pre", {}, text(c.schema)), el("div", {}, "tools"), el("pre", {},
        text(c.tools)),
      el("div", {}, "history (" + (c.history || []).length + ")"), el("pre", {}, text(c.history)),
      el("div", {}, c.error ? "error" : "reply"), el("pre", {class: "reply"},
        c.error || text(c.reply)));
  };
  $("calls").replaceChildren(...(turn.modelCalls.length ? turn.modelCalls.map(modelCall)
    : [el("p", {class: "note"}, "no model call this turn")]));
}

// The diagram: one column per flow, its nodes top to bottom; the next step is a straight arrow,
// a jump is a curve on the right (a second edge between the same two nodes curves on the left).
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, content) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (content !== undefined) node.textContent = content;
  return node;
}
function edgePath(a, b, again, W, H, GAP) {
  const bend = 30 + Math.abs(b.y - a.y) / 8, ay = a.y + H / 2, by = b.y + H / 2;
  if (again && a.x === b.x) {
    return [`M${a.x},${ay} C${a.x - bend},${ay} ${b.x - bend},${by} ${b.x},${by}`, a.x - bend - 4,
      (ay + by) / 2];
  }
  if (a.x === b.x && b.y === a.y + H + GAP) {
    return [`M${a.x + W / 2},${a.y + H} L${b.x + W / 2},${b.y}`, a.x + W / 2 + 4,
      a.y + H + GAP / 2 + 4];
  }
  if (a.x === b.x) {
    const r = a.x + W;
    return [`M${r},${ay} C${r + bend},${ay} ${r + bend},${by} ${r},${by}`, r + bend * 0.75 + 2,
      (ay + by) / 2];
  }
  return [`M${a.x + W},${ay} L${b.x},${by}`, (a.x + W + b.x) / 2 - 20, (ay + by) / 2 - 4];
}
function drawDiagram() {
  const g = state.graph, W = 230, H = 30, GAP = 24, PAD = 20, COL = W + 110, LEFT = PAD + 40;
  const where = {}, nodes = Object.fromEntries(g.nodes.map((n) => [n.id, n]));
  const current = new Set(state.runs.map((r) => r.flow + "\u0000" + r.step));
  const clusters = g.clusters.slice();
  const loose = g.nodes.filter((n) => !clusters.some((c) => c.nodes.includes(n.id)))
    .map((n) => n.id);
  if (loose.length) clusters.push({flow: "", name: "other flows", nodes: loose});
  let height = 0;
  clusters.forEach((c, col) => c.nodes.forEach((id, i) => {
    where[id] = {x: LEFT + col * COL, y: PAD + 22 + i * (H + GAP)};
    height = Math.max(height, where[id].y + H + PAD);
  }));
  // A viewBox lets CSS shrink the drawing to its panel (max-width: 100%): every flow is on screen.
  const wide = LEFT + PAD + clusters.length * COL;
  const root = svg("svg", {width: wide, height: height, viewBox: `0 0 ${wide} ${height}`,
                           id: "flowsvg"});
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                                markerHeight: 7, orient: "auto"});
  marker.append(svg("path", {d: "M0,0 L10,5 L0,10 z", fill: "#8b93a5"}));
  const defs = svg("defs");
  defs.append(marker);
  root.append(defs);
  clusters.forEach((c, col) => root.append(svg("text", {x: LEFT + col * COL, y: PAD + 8,
    "font-weight": "bold"},
    c.name + (c.flow ? " (" + c.flow + ")" : ""))));
  const drawn = new Set();
  for (const e of g.edges) {
    const a = where[e.source], b = where[e.target];
    if (!a || !b) continue;
    const pair = e.source + ">" + e.target, again = drawn.has(pair);
    drawn.add(pair);
    const [d, lx, ly] = edgePath(a, b, again, W, H, GAP);
    root.append(svg("path", {d: d, class: "edge" + (e.dashed ? " dashed" : "")}));
    if (e.label) root.append(svg("text", {x: lx, y: ly, class: "edge-label"}, e.label));
  }
  for (const [id, p] of Object.entries(where)) {
    const n = nodes[id];
    const isCurrent = n.step != null && current.has(n.flow + "\u0000" + n.step);
    const group = svg("g", {class: "node " + n.shape + (isCurrent ? " current" : ""),
                            "data-flow": n.flow || "", "data-step": n.step || ""});
    group.append(svg("rect", {x: p.x, y: p.y, width: W, height: H, rx: 4}));
    const label = n.label.length > 40 ? n.label.slice(0, 39) + "…" : n.label;
    group.append(svg("text", {x: p.x + 8, y: p.y + H / 2 + 4}, label));
    group.append(svg("title", {}, n.label));
    root.append(group);
  }
  $("diagram").replaceChildren(root);
}
call("/api/state").then((value) => {
  if (!value) return;
  state = value;
  selected = value.turns.length ? value.turns.length : null;
  render();
});
</script>
</body>
</html>
"""


if __name__ == "__main__":
    sys.exit(main())
