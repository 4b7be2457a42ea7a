"""τ²-bench's retail domain as a falai agent: the model understands, the code decides.

    import retail
    db = retail.load_db()
    agent = retail.build_agent(db, provider, clock, on_write=print)
    result = agent.turn(session_id="c1", message="Hi, I'm Yusuf Rossi, zip 19122", id="m1")

The model reads with τ²'s read tools and asks for a write with ``request_<write>`` (``TOOLS[name]
["via"]``); the gate below decides at once, the customer confirms, and the commit re-checks the
gate and runs τ²'s raw tool (``retail_tools.execute``) with the stored arguments (``port.py``).

How the policy (``data/retail/policy.md``) is kept, line by line:

Code (a gate refuses the write; each check quotes its line):
  "authenticate the user identity by locating their user id via email, or via name + zip code.
   This has to be done even when the user already provides the user id"
        -> every gate: ``user_id`` is written only by the authenticators below, when the email, or
           the first name, last name and zip, are in the customer's own messages.
  "You can only help one user per conversation ... must deny any requests for tasks related to
   any other user"                 -> every gate: the order (or user) is the authenticated user's.
  "Generally, you can only take action on pending or delivered orders"
  "An order can only be cancelled if its status is 'pending'" (exactly: not 'pending (item
   modified)', since "The agent will not be able to modify or cancel the order anymore")
  "An order can only be modified if its status is 'pending'"   -> cancel and the three modify gates
  "An order can only be returned / exchanged if its status is 'delivered'"
                                                       -> return and exchange gates
  "Exchange or modify order tools can only be called once per order" -> the status: an item
           modification leaves 'pending (item modified)', an exchange 'exchange requested'. Read
           as the item tools (τ²'s own gold changes an order's address, then its items).
  "(either 'no longer needed' or 'ordered by mistake') ... Other reasons are not acceptable"
                                                       -> cancel gate, on the tool's ``reason``
  "The user needs to confirm the order id and the reason" -> cancel gate: ``reason`` is the one
           the customer stated (the fact ``cancel_reason``), not one the model picked
  "each item can be modified/exchanged to an available new item of the same product but of
   different product option. There cannot be any change of product types"
                                                       -> modify-items and exchange gates
  "If the user provides a gift card, it must have enough balance to cover the price difference"
  "The user can only choose a single payment method different from the original payment method"
  "If the user wants the modify the payment method to gift card, it must have enough balance to
   cover the total amount"                             -> modify-payment gate
  "The refund must either go to the original payment method, or an existing gift card"
                                                       -> return gate
  every payment method named must be one of the user's own ("Each user has a profile containing
   ... payment methods")
  "you must list the action details and obtain explicit user confirmation (yes)"
        -> port.py: the confirm step lists ``SUMMARIES``' text and the exact arguments; with
           ``check_words=True`` the yes must be in the customer's own words.
  "For a pending order, you can take actions to modify its shipping address, payment method, or
   product item options, but nothing else" -> only τ²'s write tools have a request tool.

Facts only the customer can state (``FACT_FIELDS``): the cancellation reason. Which items, which
new options and which payment method the customer wants are the tool's arguments; the gates
bound them, and the confirmation lists them for the customer's yes.

Stays with the model (the prompt; ``GUIDANCE`` repeats the ones worth repeating), because no code
can know them from the database:
  - "You should not make up any information ... or give subjective recommendations" (wording);
  - "at most make one tool call at a time" (port.py's instruction; code runs one request at a time);
  - "Be sure that all items to be changed are collected into a list" and "remind the customer to
    confirm they have provided all the items": whether the list is complete is in the customer's
    head; the confirmation text (``SUMMARIES``) says it is the order's only chance;
  - "transfer ... if and only if the request cannot be handled within the scope of your actions"
    (a judgement; the transfer tool changes nothing);
  - what happens after a write (refund timing, the return email): the confirmation text says it,
    τ²'s raw tool does it.

``NOW``: the retail policy reads no clock, τ² gives the retail domain none and the pinned db holds
no dates, so no decision depends on it; the agent needs one, and runs at τ²'s airline clock
(2024-05-15 15:00 EST).

``python examples/tau2/retail.py`` plays task 0 offline: the customer authenticates, asks for an
exchange the policy refuses, then for the one it allows, and says yes.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

from falai import Agent

import play
import port
import retail_tools as rt
from retail_tools import execute, load_db  # noqa: F401  (the interface: τ²'s raw semantics)

DOMAIN = rt.DOMAIN
NOW = "2024-05-15T15:00:00"
FIRST_MESSAGE = port.FIRST_MESSAGE
CONFIRM_FIELDS = port.CONFIRM_FIELDS
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

FACT_FIELDS = {
    "cancel_reason": {
        "type": "string", "enum": [*CANCEL_REASONS, "other"],
        "description": "Why the customer wants to cancel an order, in their own words: 'no longer "
                       "needed', 'ordered by mistake', or 'other' for any other reason.",
    },
}

GUIDANCE = (
    "Authenticate the customer first (find_user_id_by_email, or find_user_id_by_name_zip), even "
    "when they give a user id. Before requesting a change, check the order's status, ask the "
    "customer for the payment method that pays or receives the difference or refund, and for a "
    "cancellation ask the reason. Items of an order can be modified or exchanged only once: "
    "collect every item into one request and remind the customer to list them all.")


# Who the customer is ##########################################################################

def _said(values: list, messages: list[str]) -> bool:
    return all(isinstance(v, str) and v.strip() and port.said_in(v, messages) for v in values)


def _by_email(arguments: dict, result: Any, messages: list[str]) -> str | None:
    """The user ``find_user_id_by_email`` found, when the customer wrote that email."""
    return result if _said([arguments.get("email")], messages) else None


def _by_name_zip(arguments: dict, result: Any, messages: list[str]) -> str | None:
    """The user ``find_user_id_by_name_zip`` found, when the customer wrote the first name, last
    name and zip code."""
    names = [arguments.get("first_name"), arguments.get("last_name"), arguments.get("zip")]
    return result if _said(names, messages) else None


AUTHENTICATORS = {"find_user_id_by_email": _by_email, "find_user_id_by_name_zip": _by_name_zip}


# Checks shared by the gates ###################################################################

def _the_user(user_id: Any, facts: port.Facts) -> str | None:
    """"authenticate the user identity ... even when the user already provides the user id";
    "You can only help one user per conversation ... must deny any requests for tasks related to
    any other user"."""
    if not facts.user_id:
        return ("the customer is not authenticated: find their user id by email, or by name and "
                "zip code, from what they said")
    if user_id != facts.user_id:
        return "that belongs to another user: only the authenticated user can be helped"
    return None


def _their_order(db: dict, order_id: Any, facts: port.Facts) -> tuple[dict | None, str | None]:
    """The order, when it exists and is the authenticated user's; else the refusal."""
    order = db["orders"].get(order_id) if isinstance(order_id, str) else None
    if order is None:
        return None, f"order {order_id} not found"
    refusal = _the_user(order["user_id"], facts)
    return (None, refusal) if refusal else (order, None)


def _status_is(order: dict, wanted: str, done: str) -> str | None:
    """"An order can only be <done> if its status is '<wanted>'" (exactly)."""
    if order["status"] != wanted:
        return (f"order {order['order_id']} is '{order['status']}': an order can only be {done} "
                f"if its status is '{wanted}'")
    return None


def _held(order: dict, item_ids: Any) -> str | None:
    """The listed items are the order's, each at most as often as the order holds it."""
    if not isinstance(item_ids, list) or not item_ids:
        return "list the items of the order to change"
    held = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            return f"item {item_id} is not in order {order['order_id']}"
    return None


def _first_item(order: dict, item_id: str) -> dict:
    return next(item for item in order["items"] if item["item_id"] == item_id)


def _swaps(db: dict, order: dict, item_ids: Any, new_item_ids: Any) -> str | None:
    """"each item can be modified/exchanged to an available new item of the same product but of
    different product option. There cannot be any change of product types"."""
    refusal = _held(order, item_ids)
    if refusal:
        return refusal
    if not isinstance(new_item_ids, list) or len(new_item_ids) != len(item_ids):
        return "give exactly one new item for each item to change"
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = _first_item(order, item_id)
        product = db["products"][item["product_id"]]
        variant = product["variants"].get(new_item_id) if isinstance(new_item_id, str) else None
        if variant is None:
            return (f"item {new_item_id} is not a variant of {product['name']}: an item can only "
                    "change to another option of the same product, never to another product type")
        if new_item_id == item_id or variant["options"] == item["options"]:
            return (f"item {new_item_id} has the same options as {item_id}: the new item must "
                    "differ in its options")
        if not variant["available"]:
            return f"item {new_item_id} is not available"
    return None


def _difference(db: dict, order: dict, item_ids: list, new_item_ids: list) -> float:
    """What the new items cost more than the old ones (τ²'s sum, each old item the order's first
    with its id)."""
    difference = 0.0
    for old, new in zip(item_ids, new_item_ids):
        item = _first_item(order, old)
        difference += db["products"][item["product_id"]]["variants"][new]["price"] - item["price"]
    return difference


def _their_method(db: dict, user_id: str, payment_method_id: Any) -> tuple[dict | None, str | None]:
    """One of the user's own payment methods ("Each user has a profile containing ... payment
    methods")."""
    methods = db["users"][user_id]["payment_methods"]
    method = methods.get(payment_method_id) if isinstance(payment_method_id, str) else None
    if method is None:
        return None, f"payment method {payment_method_id} is not one of the customer's"
    return method, None


def _covers(method: dict, amount: float, what: str) -> str | None:
    """"If the user provides a gift card, it must have enough balance to cover the <what>"."""
    if method["source"] == "gift_card" and method["balance"] < amount:
        return (f"gift card {method['id']} has a balance of {method['balance']}, not enough to "
                f"cover the {what} ({round(amount, 2)})")
    return None


# The gates: one per write tool ################################################################

def cancel_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be cancelled if its status is 'pending'"; "The user needs to confirm the
    order id and the reason (either 'no longer needed' or 'ordered by mistake') for cancellation.
    Other reasons are not acceptable."."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    if refusal:
        return refusal
    if refusal := _status_is(order, "pending", "cancelled"):
        return refusal
    reason, stated = arguments.get("reason"), facts.said.get("cancel_reason")
    if reason not in CANCEL_REASONS:   # "Other reasons are not acceptable."
        return (f"the reason {reason!r} is not acceptable: only 'no longer needed' or 'ordered "
                "by mistake'")
    if stated is None:                 # "The user needs to confirm the order id and the reason"
        return "the customer has not said why they cancel: ask for the reason"
    if stated != reason:
        return (f"the customer's reason is {stated!r}, not {reason!r}: only 'no longer needed' "
                "or 'ordered by mistake' are acceptable")
    return None


def modify_address_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be modified if its status is 'pending'", and not after its items were
    ("The agent will not be able to modify or cancel the order anymore")."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    return refusal or _status_is(order, "pending", "modified")


def modify_items_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be modified if its status is 'pending'"; "This action can only be called
    once" (the status then says so); the new items as ``_swaps`` says; "If the user provides a
    gift card, it must have enough balance to cover the price difference"."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    if refusal:
        return refusal
    item_ids, new_item_ids = arguments.get("item_ids"), arguments.get("new_item_ids")
    if refusal := (_status_is(order, "pending", "modified")
                   or _swaps(db, order, item_ids, new_item_ids)):
        return refusal
    method, refusal = _their_method(db, order["user_id"], arguments.get("payment_method_id"))
    return refusal or _covers(method, _difference(db, order, item_ids, new_item_ids),
                              "price difference")


def modify_payment_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be modified if its status is 'pending'"; "The user can only choose a
    single payment method different from the original payment method"; "If the user wants the
    modify the payment method to gift card, it must have enough balance to cover the total
    amount"."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    if refusal:
        return refusal
    if refusal := _status_is(order, "pending", "modified"):
        return refusal
    method, refusal = _their_method(db, order["user_id"], arguments.get("payment_method_id"))
    if refusal:
        return refusal
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        return f"order {order['order_id']} was not paid by a single payment method"
    if history[0]["payment_method_id"] == method["id"]:
        return (f"{method['id']} is already the order's payment method: the new one must be "
                "different from the original")
    return _covers(method, history[0]["amount"], "total amount")


def modify_user_address_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"modify their default user address": the authenticated user's own."""
    return _the_user(arguments.get("user_id"), facts)


def exchange_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be exchanged if its status is 'delivered'"; "Exchange or modify order
    tools can only be called once per order" (the status then says so); the new items as
    ``_swaps`` says; "If the user provides a gift card, it must have enough balance to cover the
    price difference"."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    if refusal:
        return refusal
    item_ids, new_item_ids = arguments.get("item_ids"), arguments.get("new_item_ids")
    if refusal := (_status_is(order, "delivered", "exchanged")
                   or _swaps(db, order, item_ids, new_item_ids)):
        return refusal
    method, refusal = _their_method(db, order["user_id"], arguments.get("payment_method_id"))
    return refusal or _covers(method, round(_difference(db, order, item_ids, new_item_ids), 2),
                              "price difference")


def return_gate(db: dict, arguments: dict, facts: port.Facts) -> str | None:
    """"An order can only be returned if its status is 'delivered'"; "The user needs to confirm the
    order id and the list of items to be returned"; "The refund must either go to the original
    payment method, or an existing gift card"."""
    order, refusal = _their_order(db, arguments.get("order_id"), facts)
    if refusal:
        return refusal
    if refusal := (_status_is(order, "delivered", "returned")
                   or _held(order, arguments.get("item_ids"))):
        return refusal
    method, refusal = _their_method(db, order["user_id"], arguments.get("payment_method_id"))
    if refusal:
        return refusal
    original = order["payment_history"][0]["payment_method_id"]
    if method["id"] != original and method["source"] != "gift_card":
        return (f"the refund must go to the original payment method ({original}) or an existing "
                f"gift card, not {method['id']}")
    return None


GATES = {
    "cancel_pending_order": cancel_gate,
    "modify_pending_order_address": modify_address_gate,
    "modify_pending_order_items": modify_items_gate,
    "modify_pending_order_payment": modify_payment_gate,
    "modify_user_address": modify_user_address_gate,
    "exchange_delivered_order_items": exchange_gate,
    "return_delivered_order_items": return_gate,
}


# What the customer confirms ###################################################################

def _method_words(db: dict, user_id: str, payment_method_id: str) -> str:
    method = db["users"][user_id]["payment_methods"][payment_method_id]
    if method["source"] == "credit_card":
        return (f"the {method['brand']} credit card ending {method['last_four']} "
                f"({payment_method_id})")
    if method["source"] == "gift_card":
        return f"the gift card {payment_method_id} (balance {method['balance']})"
    return f"the {method['source']} account {payment_method_id}"


def _refund_timing(db: dict, user_id: str, payment_method_id: str) -> str:
    method = db["users"][user_id]["payment_methods"][payment_method_id]
    return "at once" if method["source"] == "gift_card" else "in 5 to 7 business days"


def _options_words(options: dict) -> str:
    return ", ".join(f"{key} {value}" for key, value in options.items())


def _item_words(item: dict) -> str:
    return f"{item['name']} ({_options_words(item['options'])})"


def _address_words(arguments: dict) -> str:
    parts = ("address1", "address2", "city", "state", "zip", "country")
    return ", ".join(str(arguments.get(part)) for part in parts if arguments.get(part))


def _swap_words(db: dict, order: dict, arguments: dict) -> str:
    lines = []
    for old, new in zip(arguments["item_ids"], arguments["new_item_ids"]):
        item = _first_item(order, old)
        variant = db["products"][item["product_id"]]["variants"][new]
        lines.append(f"- {_item_words(item)} -> {_options_words(variant['options'])}")
    difference = round(_difference(db, order, arguments["item_ids"], arguments["new_item_ids"]), 2)
    pays = "you pay" if difference > 0 else "you are refunded"
    method = _method_words(db, order["user_id"], arguments["payment_method_id"])
    return "\n".join([*lines, f"Price difference: {pays} {abs(difference)} with {method}."])


def _cancel_summary(db: dict, arguments: dict) -> str:
    order = db["orders"][arguments["order_id"]]
    user = order["user_id"]
    items = "; ".join(_item_words(item) for item in order["items"])
    refunds = [f"{entry['amount']} to {_method_words(db, user, entry['payment_method_id'])} "
               f"{_refund_timing(db, user, entry['payment_method_id'])}"
               for entry in order["payment_history"] if entry["transaction_type"] == "payment"]
    return (f"Cancel order {order['order_id']} ({items}), reason: {arguments['reason']}. "
            f"Refunded: {'; '.join(refunds)}.")


def _modify_address_summary(db: dict, arguments: dict) -> str:
    return f"Ship order {arguments['order_id']} to: {_address_words(arguments)}."


def _modify_items_summary(db: dict, arguments: dict) -> str:
    order = db["orders"][arguments["order_id"]]
    return (f"Modify the items of pending order {order['order_id']}:\n"
            f"{_swap_words(db, order, arguments)}\n"
            "This can be done only once: afterwards the order can no longer be modified or "
            "cancelled. Please confirm these are all the items you want to modify.")


def _modify_payment_summary(db: dict, arguments: dict) -> str:
    order = db["orders"][arguments["order_id"]]
    paid = order["payment_history"][0]
    user = order["user_id"]
    return (f"Pay order {order['order_id']} ({paid['amount']}) with "
            f"{_method_words(db, user, arguments['payment_method_id'])} instead of "
            f"{_method_words(db, user, paid['payment_method_id'])}, which is refunded "
            f"{_refund_timing(db, user, paid['payment_method_id'])}.")


def _modify_user_address_summary(db: dict, arguments: dict) -> str:
    return f"Change your default address to: {_address_words(arguments)}."


def _exchange_summary(db: dict, arguments: dict) -> str:
    order = db["orders"][arguments["order_id"]]
    return (f"Exchange items of delivered order {order['order_id']}:\n"
            f"{_swap_words(db, order, arguments)}\n"
            "An order can be exchanged only once: please confirm these are all the items you "
            "want to exchange. You will receive an email on how to return the items.")


def _return_summary(db: dict, arguments: dict) -> str:
    order = db["orders"][arguments["order_id"]]
    items = [_item_words(_first_item(order, item_id)) for item_id in arguments["item_ids"]]
    return (f"Return from delivered order {order['order_id']}: {'; '.join(items)}. The refund goes "
            f"to {_method_words(db, order['user_id'], arguments['payment_method_id'])}. You will "
            "receive an email on how to return the items.")


SUMMARIES = {
    "cancel_pending_order": _cancel_summary,
    "modify_pending_order_address": _modify_address_summary,
    "modify_pending_order_items": _modify_items_summary,
    "modify_pending_order_payment": _modify_payment_summary,
    "modify_user_address": _modify_user_address_summary,
    "exchange_delivered_order_items": _exchange_summary,
    "return_delivered_order_items": _return_summary,
}


# The interface ################################################################################

@functools.cache
def _port() -> port.Domain:
    """The domain as port.py builds agents from it (reads the policy and tools on first use)."""
    return port.Domain(name=DOMAIN, policy=rt.policy(), now=NOW, tools=rt.TOOLS, execute=execute,
                       output_text=rt.output_text, tool_error=rt.ToolError, gates=GATES,
                       facts=FACT_FIELDS, authenticate=AUTHENTICATORS, summaries=SUMMARIES,
                       guidance=GUIDANCE)


def __getattr__(name: str) -> Any:
    """``POLICY`` (verbatim), ``TOOLS`` (τ² name -> kind, parameters, and ``via`` for a write) and
    ``DOMAIN_SPEC`` (the ``port.Domain``) are read on first use, not at import."""
    if name == "POLICY":
        return rt.policy()
    if name == "TOOLS":
        return port.interface_tools(_port())
    if name == "DOMAIN_SPEC":
        return _port()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_agent(db: dict, provider: Any, clock: Any, *, on_write: Any = None,
                check_words: bool = False, **options: Any) -> Agent:
    """The retail agent over ``db`` (changed in place by confirmed, re-checked writes only).

    ``on_write(name, arguments, outcome)`` hears every write executed or refused (``"ok"``,
    ``"refused:<reason>"``, ``"error:<τ²'s message>"``); ``check_words=True`` counts a yes only
    when the customer's own message says one; ``options`` go to the falai agent.
    """
    return port.build(_port(), db, provider, clock, on_write=on_write, check_words=check_words,
                      **options)


# The demo #####################################################################################

def _demo() -> None:
    """Task 0, offline: authenticate, an exchange the policy refuses, then the allowed one."""
    task = next(t for t in rt.load_tasks() if t["id"] == "0")
    exchange = next(a for a in task["evaluation_criteria"]["actions"]
                    if a["name"] == "exchange_delivered_order_items")["arguments"]
    to_headphones = {**exchange, "item_ids": ["1151293680"], "new_item_ids": ["3374679624"]}
    via = port.via("exchange_delivered_order_items")
    conversation = [
        play.Say("Hi, I'm Yusuf Rossi, zip code 19122.",
                 rounds=[[play.call("find_user_id_by_name_zip", {"first_name": "Yusuf",
                                                                 "last_name": "Rossi",
                                                                 "zip": "19122"})]],
                 reply="Thank you, Yusuf. How can I help?"),
        play.Say("Can I swap the keyboard in order #W2378156 for some headphones?",
                 rounds=[[play.call("get_order_details", {"order_id": "#W2378156"})],
                         [play.call(via, to_headphones)]],
                 reply="I'm sorry: an item can only be exchanged for another option of the same "
                       "product, not for headphones."),
        play.Say("OK. Then the keyboard with clicky switches, and the thermostat for Google Home, "
                 "paid with my credit card.",
                 rounds=[[play.call(via, exchange)]],
                 reply="Here is the exchange; do you confirm (yes)?"),
        play.Say("yes", fields={"confirmed": True}, reply="Done: the exchange is requested."),
    ]
    db = load_db()
    here = sys.modules[__name__]
    played = play.converse(here, db, conversation)
    play.show(here, conversation, played)
    print(f"\nThe db equals the one task 0's reference actions give: "
          f"{rt.db_hash(db) == rt.db_hash(play.reference_db(here, task))}")


if __name__ == "__main__":
    _demo()
