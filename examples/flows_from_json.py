"""Flows stored as FlowSpec JSON files: check every file, report every problem, run the good ones.

    python examples/flows_from_json.py                 # the files in examples/flows/
    python examples/flows_from_json.py my_flows/*.json

Each file holds one FlowSpec (a flow as plain JSON, every step with its
``kind``). The program checks each file against the agent's registries (its
fields, actions and events) with ``validate_flow``: a file that does not parse
or whose flow would break at run time is reported with the error's own
"where: what. fix" message and left out; warnings are printed and the flow is
kept. Every file is checked, so one run lists every problem. The flows that
passed are converted with ``from_spec`` and the agent plays a short
conversation offline (``ScriptedProvider`` stands in for the model).
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

from falai import FlowConfigurationError, ScriptedProvider, falai, from_spec, validate_flow  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ORDERS = {"A100": "out for delivery", "B200": "being packed"}

f = falai().fields({
    "nome": {"type": "string", "ask": "Ask the person's name."},
    "pedido": {"type": "string", "description": "An order number such as A100."},
    "situacao": {"type": "string", "description": "Where the order is."},
    "endereco": {"type": "string", "ask": "Ask the new delivery address."},
    "confirmado": {"type": "boolean"},
})


def lookup_order(params: dict, ctx) -> dict:
    """The host action the order_status flow's ``do`` step names."""
    status = ORDERS.get(params["numero"].upper())
    if status is None:
        return {"failed": f"no order {params['numero']}"}
    ctx.set({"situacao": status})
    return {"ok": True}


ACTIONS = {"lookup_order": f.action(parameters={"numero": {"type": "string"}}, run=lookup_order)}
REGISTRIES = {"fields": f.fields, "actions": ACTIONS, "events": {}}


def load_flows(paths: list[str]) -> list[dict]:
    """Every flow that passed, as a flow dict; each problem printed as it is found."""
    flows, ids = [], set()
    for path in paths:
        name = os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as file:
                spec = json.load(file)
            checked = validate_flow(spec, REGISTRIES)
        except OSError as error:
            print(f"  {name}: not loaded: {error.strerror}. Check the path")
            continue
        except ValueError as error:                      # json.JSONDecodeError
            print(f"  {name}: not loaded: the file is not valid JSON ({error}). Fix its syntax")
            continue
        except FlowConfigurationError as error:
            print(f"  {name}: rejected: {error}")
            continue
        if spec["id"] in ids:
            print(f"  {name}: rejected: flow \"{spec['id']}\" is declared twice; flow ids must be unique")
            continue
        ids.add(spec["id"])
        flows.append(from_spec(spec))
        print(f"  {name}: ok, flow \"{spec['id']}\" with {len(spec['steps'])} steps")
        for warning in checked.warnings:
            print(f"      warning: {warning}")
    return flows


def understand(request) -> dict:
    """The offline stand-in for the understand call: keyword routing, a name and an order number."""
    found = re.search(r'"""\n(.*?)\n"""', request.prompt, re.S)
    text = found.group(1) if found else ""
    asked = request.schema["properties"]
    reply: dict = {}
    if "flows" in asked:
        wants_order = "order" in text.lower() and "thank" not in text.lower()
        reply["flows"] = {alias: 90 if wants_order and alias == "pedido" else 0
                          for alias in asked["flows"]["properties"]}
    if "fields" in asked:
        name = re.search(r"\bI am (\w+)", text)
        order = re.search(r"\b([A-Z]\d{3})\b", text)
        values = {"nome": name.group(1) if name else None, "pedido": order.group(1) if order else None}
        reply["fields"] = {alias: values.get(alias) for alias in asked["fields"]["properties"]}
    return reply


def main(argv: list[str]) -> int:
    paths = argv or sorted(glob.glob(os.path.join(HERE, "flows", "*.json")))
    print(f"Checking {len(paths)} FlowSpec files:")
    flows = load_flows(paths)
    if not flows:
        print("No flow passed: nothing to run.")
        return 0
    agent = f.agent(name="Shop", flows=flows, actions=ACTIONS, idle="silent",
                    provider=ScriptedProvider(script={"understand": [understand] * 20}))
    print(f"\nAn agent with {[flow['id'] for flow in flows]}, offline:")
    session = None
    for number, text in enumerate(["hello", "I am Rita", "where is my order?", "it is A100"], 1):
        result = agent.turn(session_id="demo", session=session, message=text, id=f"m{number}")
        session = result.session
        replies = " / ".join(m.text for m in result.messages) or "(no reply)"
        print(f"  you: {text}\n  shop: {replies}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
