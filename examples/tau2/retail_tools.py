"""τ²-bench's retail domain as data: the pinned database, policy and tasks, and τ²'s retail tools
rewritten over plain JSON, quirks included, with no policy checks of their own.

    import retail_tools as rt
    db = rt.load_db()                                  # a fresh copy of the pinned db
    out = rt.execute(db, "get_order_details", {"order_id": "#W2378156"})
    rt.output_text(out)                                # the text τ² hands the agent

The data (``data/retail/``, MIT, Copyright (c) 2025 Sierra Research) comes from
github.com/sierra-research/tau2-bench at the commit ``data/retail/SOURCES.json`` names. The code
here is ours, written from a reading of τ²'s ``src/tau2/domains/retail/tools.py`` and of the
``Environment`` that calls it; ``tests/tau2/test_retail_semantics.py`` holds it to what τ²'s own
code did on every reference action of the 114 tasks and on probes of each tool's odd paths
(``data/retail/reference_effects.json.gz``).

The db is τ²'s ``RetailDB.model_dump()``: ``{"products", "users", "orders"}``, dicts and lists in
the models' field order, so ``db_hash`` is τ²'s ``get_db_hash()`` and ``output_text`` of a result
is the string τ²'s environment gives the agent. ``execute`` is the raw tool: a policy gate, a
confirmation or an authentication check is the caller's business, as it is in τ².

Sections:
   1. The pinned data ........ policy (POLICY), load_db, load_tasks, db_hash, TOOLS
   2. Calls .................. ToolError, execute, output_text, how τ² binds arguments
   3. Lookups ................ τ²'s _get_* helpers
   4. Write tools ............ cancel, modify (address, items, payment, user address),
                               exchange, return
   5. Read and generic tools . find, get, list, calculate, transfer
   6. Argument checks ........ pydantic's string check on addresses, calculate's arithmetic
"""
from __future__ import annotations

import ast
import copy
import functools
import gzip
import hashlib
import json
import operator
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOMAIN = "retail"

_DATA = Path(__file__).resolve().parent / "data" / "retail"


# 1. The pinned data ###############################################################################

@functools.cache
def _text(name: str) -> str:
    """A data file's text, read once (gunzipped when it ends in .gz)."""
    raw = (_DATA / name).read_bytes()
    return (gzip.decompress(raw) if name.endswith(".gz") else raw).decode("utf-8")


def policy() -> str:
    """The retail policy τ² gives the agent, verbatim."""
    return _text("policy.md")


def load_db() -> dict:
    """A fresh copy of the pinned db, in τ²'s ``model_dump()`` shape; each call is independent."""
    return json.loads(_text("db.json.gz"))


def load_tasks() -> list[dict]:
    """τ²'s retail tasks (tasks.json), verbatim, a fresh copy each call."""
    return json.loads(_text("tasks.json.gz"))


def db_hash(db: dict) -> str:
    """τ²'s db hash: sha256 of ``json.dumps(model_dump, sort_keys=True, default=str)``."""
    try:  # without `default` the encoder is twice as fast, and gives the same text on plain JSON
        text = json.dumps(db, sort_keys=True)
    except TypeError:
        text = json.dumps(db, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def __getattr__(name: str) -> Any:
    """``TOOLS`` and ``POLICY`` (the text of ``policy()``) are read on first use, not at import.

    TOOLS: every tool τ² offers the retail agent -> {"kind": "read" | "write" | "generic",
    "description": ..., "parameters": <JSON Schema>}, exactly as τ²'s toolkit sends them to the
    model (``Tool.openai_schema``), from ``data/retail/tools.json`` (see SOURCES.json).
    """
    if name == "TOOLS":
        value: Any = json.loads(_text("tools.json"))
    elif name == "POLICY":
        value = policy()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


# 2. Calls #########################################################################################

class ToolError(Exception):
    """A call τ² answers with an error. ``str(err)`` is the exact text the agent sees
    (``"Error: "`` and the exception's message, as ``Environment.get_response`` writes it)."""


def _error(message: str) -> ToolError:
    return ToolError(f"Error: {message}")


def execute(db: dict, name: str, args: dict) -> Any:
    """Run τ²'s retail tool ``name`` on ``db`` (mutated in place exactly as τ² mutates its db).

    Returns what the tool returns, as plain JSON: a ``model_dump()`` dict (a copy, not a view of
    ``db``) or a str. Raises ``ToolError`` where τ² raises, with τ²'s text, including Python's own
    errors for arguments of the wrong shape, since τ² passes arguments through unchecked.
    """
    _check_environment_arguments(args)
    tool = _TOOLS.get(name)
    if tool is None:
        raise _error(f"Tool '{name}' not found.")
    _check_arguments(name, tool, args)
    try:
        return tool(db, **args)
    except ToolError:
        raise
    except Exception as exc:  # τ²'s get_response turns any exception into the agent's text
        raise _error(str(exc)) from exc


def output_text(result: Any) -> str:
    """The string τ²'s environment hands the agent for a result of ``execute``
    (``Environment.to_json_str``: a str as it is, a model as
    ``json.dumps(model_dump(), default=str)``)."""
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str)


def _check_environment_arguments(args: dict) -> None:
    """τ² calls ``Environment.make_tool_call(name, requestor=..., **args)``: an argument named
    ``requestor``, ``tool_name`` or ``self`` collides there, before the tool is looked up."""
    if "requestor" in args:  # raised where the call's keywords merge: Python names the module
        raise _error("tau2.environment.environment.Environment.make_tool_call() got multiple "
                     "values for keyword argument 'requestor'")
    for key in args:
        if key in ("self", "tool_name"):
            raise _error(f"Environment.make_tool_call() got multiple values for argument '{key}'")


def _check_arguments(name: str, tool: Callable, args: dict) -> None:
    """Python's own TypeError for ``RetailTools.<name>(**args)``: an unexpected argument first,
    then the missing ones."""
    params = tool.__code__.co_varnames[1:tool.__code__.co_argcount]  # after `db`
    for key in args:
        if key not in params:
            raise _error(f"RetailTools.{name}() got an unexpected keyword argument '{key}'")
    missing = [f"'{p}'" for p in params if p not in args]
    if missing:
        if len(missing) == 1:
            listed = missing[0]
        elif len(missing) == 2:
            listed = f"{missing[0]} and {missing[1]}"
        else:
            listed = ", ".join(missing[:-1]) + f", and {missing[-1]}"
        plural = "argument" if len(missing) == 1 else "arguments"
        raise _error(f"RetailTools.{name}() missing {len(missing)} required positional {plural}: "
                     f"{listed}")


# 3. Lookups #######################################################################################

def _order(db: dict, order_id: Any) -> dict:
    if order_id not in db["orders"]:
        raise _error("Order not found")
    return db["orders"][order_id]


def _user(db: dict, user_id: Any) -> dict:
    if user_id not in db["users"]:
        raise _error("User not found")
    return db["users"][user_id]


def _product(db: dict, product_id: Any) -> dict:
    if product_id not in db["products"]:
        raise _error("Product not found")
    return db["products"][product_id]


def _variant(db: dict, product_id: Any, variant_id: Any) -> dict:
    product = _product(db, product_id)
    if variant_id not in product["variants"]:
        raise _error("Variant not found")
    return product["variants"][variant_id]


def _payment_method(db: dict, user_id: Any, payment_method_id: Any) -> dict:
    user = _user(db, user_id)
    if payment_method_id not in user["payment_methods"]:
        raise _error("Payment method not found")
    return user["payment_methods"][payment_method_id]


def _is_gift_card(method: dict) -> bool:
    return method["source"] == "gift_card"


def _find_item(order: dict, item_id: Any) -> dict | None:
    """The order's first item with this id (τ² always takes the first)."""
    return next((item for item in order["items"] if item["item_id"] == item_id), None)


def _check_held(order: dict, item_ids: Any, message: Callable[[Any], str]) -> None:
    """Each listed id must be held by the order at least as many times as it is listed."""
    held = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            raise _error(message(item_id))


def _payment(kind: str, amount: Any, payment_method_id: Any) -> dict:
    """An OrderPayment as model_dump writes it (pydantic makes the amount a float)."""
    return {"transaction_type": kind, "amount": float(amount),
            "payment_method_id": payment_method_id}


# 4. Write tools ###################################################################################

def cancel_pending_order(db: dict, order_id: Any, reason: Any) -> dict:
    """Cancel a pending order: status 'cancelled', the reason recorded, a refund entry appended
    for every entry of the payment history (refunds included), a gift card credited at once
    (balance rounded to cents). Only the exact status 'pending' can be cancelled; the reason must
    be 'no longer needed' or 'ordered by mistake'."""
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise _error("Non-pending order cannot be cancelled")
    if reason not in {"no longer needed", "ordered by mistake"}:
        raise _error("Invalid reason")
    refunds = []
    # As in τ², each method is looked up after the earlier gift cards were credited: on a db where
    # a method were missing, the error would leave those credits (the pinned db has none such).
    for entry in order["payment_history"]:
        refunds.append(_payment("refund", entry["amount"], entry["payment_method_id"]))
        user = _user(db, order["user_id"])
        method = _payment_method(db, user["user_id"], entry["payment_method_id"])
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] + entry["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return copy.deepcopy(order)


def modify_pending_order_address(db: dict, order_id: Any, address1: Any, address2: Any,
                                 city: Any, state: Any, country: Any, zip: Any) -> dict:
    """Modify the shipping address of a pending order. Any status containing 'pending' counts,
    so 'pending (item modified)' can still change its address."""
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise _error("Non-pending order cannot be modified")
    order["address"] = _address(address1, address2, city, state, country, zip)
    return copy.deepcopy(order)


def modify_pending_order_items(db: dict, order_id: Any, item_ids: Any, new_item_ids: Any,
                               payment_method_id: Any) -> dict:
    """Modify items in a pending order to new items of the same product type; the status becomes
    'pending (item modified)', which no later item modification or cancellation accepts.

    The price difference (unrounded) is appended to the payment history as one 'payment'
    (difference > 0) or 'refund' (otherwise, 0 included) of its absolute value; a gift card pays
    or receives it at once (balance rounded to cents) and must hold at least the difference.
    τ²'s quirk, kept: every rewritten item takes the price and options of the LAST new variant
    looked up, and each rewrite finds the order's first item with the old id at that moment.
    """
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise _error("Non-pending order cannot be modified")
    _check_held(order, item_ids, lambda item_id: f"{item_id} not found")
    if len(item_ids) != len(new_item_ids):
        raise _error("The number of items to be exchanged should match")

    diff_price = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        if item_id == new_item_id:
            raise _error("The new item id should be different from the old item id")
        item = _find_item(order, item_id)
        if item is None:
            raise _error(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise _error(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]

    method = _payment_method(db, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise _error("Insufficient gift card balance to pay for the new item")

    order["payment_history"].append(
        _payment("payment" if diff_price > 0 else "refund", abs(diff_price), payment_method_id))
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - diff_price, 2)

    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = _find_item(order, item_id)
        if item is None:
            raise _error(f"Item {item_id} not found")
        item["item_id"] = new_item_id
        item["price"] = variant["price"]  # the last variant of the loop above, as in τ²
        item["options"] = dict(variant["options"])
    order["status"] = "pending (item modified)"
    return copy.deepcopy(order)


def modify_pending_order_payment(db: dict, order_id: Any, payment_method_id: Any) -> dict:
    """Modify the payment method of a pending order (any status containing 'pending') whose
    history is exactly one payment: appends a payment by the new method and a refund to the old
    one, both of the full amount; a new gift card must hold the amount and is charged at once, an
    old gift card is credited at once (balances rounded to cents)."""
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise _error("Non-pending order cannot be modified")
    method = _payment_method(db, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise _error("There should be exactly one payment for a pending order")
    if history[0]["payment_method_id"] == payment_method_id:
        raise _error("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if _is_gift_card(method) and method["balance"] < amount:
        raise _error("Insufficient gift card balance to pay for the order")

    old_method_id = history[0]["payment_method_id"]
    history.extend([_payment("payment", amount, payment_method_id),
                    _payment("refund", amount, old_method_id)])
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - amount, 2)
    old_method = _payment_method(db, order["user_id"], old_method_id)  # after the writes, as in τ²
    if _is_gift_card(old_method):
        old_method["balance"] = round(old_method["balance"] + amount, 2)
    return copy.deepcopy(order)


def modify_user_address(db: dict, user_id: Any, address1: Any, address2: Any, city: Any,
                        state: Any, country: Any, zip: Any) -> dict:
    """Modify the default address of a user (the user's orders keep theirs)."""
    user = _user(db, user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return copy.deepcopy(user)


def exchange_delivered_order_items(db: dict, order_id: Any, item_ids: Any, new_item_ids: Any,
                                   payment_method_id: Any) -> dict:
    """Exchange items in a delivered order to new items of the same product type: records the
    request (status 'exchange requested', both id lists sorted, the method, the price difference
    rounded to cents) and moves no money. A gift card must hold at least the difference. Unlike
    modify, an item may be exchanged for itself, and any method of the user is accepted."""
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise _error("Non-delivered order cannot be exchanged")
    _check_held(order, item_ids, lambda item_id: f"Number of {item_id} not found.")
    if len(item_ids) != len(new_item_ids):
        raise _error("The number of items to be exchanged should match.")

    diff_price = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = _find_item(order, item_id)
        if item is None:
            raise _error(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise _error(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    diff_price = round(diff_price, 2)  # an int 0 when nothing is exchanged, as in τ²

    method = _payment_method(db, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise _error("Insufficient gift card balance to pay for the price difference")

    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff_price
    return copy.deepcopy(order)


def return_delivered_order_items(db: dict, order_id: Any, item_ids: Any,
                                 payment_method_id: Any) -> dict:
    """Return some items of a delivered order: status 'return requested', the items sorted, the
    refund method recorded; no money moves. The method must be the original payment method or
    any gift card of the user; it is checked before the items."""
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise _error("Non-delivered order cannot be returned")
    user = _user(db, order["user_id"])
    method = _payment_method(db, user["user_id"], payment_method_id)
    if (not _is_gift_card(method)
            and payment_method_id != order["payment_history"][0]["payment_method_id"]):
        raise _error("Payment method should be the original payment method")
    _check_held(order, item_ids, lambda item_id: "Some item not found")

    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return copy.deepcopy(order)


# 5. Read and generic tools ########################################################################

def find_user_id_by_name_zip(db: dict, first_name: Any, last_name: Any, zip: Any) -> str:
    """Find user id by first name, last name (both case-insensitive) and zip code (exact); the
    first match in db order."""
    for user_id, user in db["users"].items():
        if (user["name"]["first_name"].lower() == first_name.lower()
                and user["name"]["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip):
            return user_id
    raise _error("User not found")


def find_user_id_by_email(db: dict, email: Any) -> str:
    """Find user id by email (case-insensitive)."""
    for user_id, user in db["users"].items():
        if user["email"].lower() == email.lower():
            return user_id
    raise _error("User not found")


def get_order_details(db: dict, order_id: Any) -> dict:
    """Get the status and details of an order."""
    return copy.deepcopy(_order(db, order_id))


def get_product_details(db: dict, product_id: Any) -> dict:
    """Get the inventory details of a product (by product id, not item id)."""
    return copy.deepcopy(_product(db, product_id))


def get_item_details(db: dict, item_id: Any) -> dict:
    """Get the inventory details of an item: the first product (in db order) holding it."""
    for product in db["products"].values():
        if item_id in product["variants"]:
            return copy.deepcopy(product["variants"][item_id])
    raise _error("Item not found")


def get_user_details(db: dict, user_id: Any) -> dict:
    """Get the details of a user, including their orders."""
    return copy.deepcopy(_user(db, user_id))


def list_all_product_types(db: dict) -> str:
    """List the name and product id of all product types: a JSON string of name -> product id,
    sorted by name."""
    return json.dumps({p["name"]: p["product_id"] for p in db["products"].values()}, sort_keys=True)


def calculate(db: dict, expression: Any) -> str:
    """Calculate the result of a mathematical expression of digits, + - * / ( ) . and spaces, as
    Python evaluates it (so ** and // work too), rounded to 2 decimals and written as str(float).

    Like τ²'s, the arithmetic is unbounded: a power such as 9**9**9 runs until memory or patience
    gives out.
    """
    if not all(char in _CALC_CHARS for char in expression):
        raise _error("Invalid characters in expression")
    return str(round(float(_arithmetic(expression)), 2))


def transfer_to_human_agents(db: dict, summary: Any) -> str:
    """Transfer the user to a human agent, with a summary of the user's issue."""
    return "Transfer successful"


_TOOL_FUNCTIONS: list[Callable[..., Any]] = [
    calculate, cancel_pending_order, exchange_delivered_order_items, find_user_id_by_name_zip,
    find_user_id_by_email, get_order_details, get_product_details, get_item_details,
    get_user_details, list_all_product_types, modify_pending_order_address,
    modify_pending_order_items, modify_pending_order_payment, modify_user_address,
    return_delivered_order_items, transfer_to_human_agents,
]
_TOOLS = {tool.__name__: tool for tool in _TOOL_FUNCTIONS}


# 6. Argument checks ###############################################################################

# τ² builds a pydantic UserAddress from the six strings; a value that is not a str fails with
# pydantic's message, which names the pydantic version τ² ran with (reference_effects.json.gz).
_ADDRESS_FIELDS = ("address1", "address2", "city", "country", "state", "zip")  # model field order
_PYDANTIC_ERRORS_URL = "https://errors.pydantic.dev/2.14/v/string_type"


def _address(address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any) -> dict:
    """A UserAddress as model_dump writes it, or pydantic's ValidationError text."""
    given = {"address1": address1, "address2": address2, "city": city, "state": state,
             "country": country, "zip": zip}
    bad = [name for name in _ADDRESS_FIELDS if not isinstance(given[name], str)]
    if bad:
        lines = [f"{len(bad)} validation error{'s' if len(bad) > 1 else ''} for UserAddress"]
        for name in bad:
            value = given[name]
            lines += [name,
                      f"  Input should be a valid string [type=string_type, "
                      f"input_value={_pydantic_repr(value)}, input_type={type(value).__name__}]",
                      f"    For further information visit {_PYDANTIC_ERRORS_URL}"]
        raise _error("\n".join(lines))
    return {name: given[name] for name in _ADDRESS_FIELDS}


def _pydantic_repr(value: Any) -> str:
    """repr() as pydantic prints an input value: past 50 UTF-8 bytes, the first 25 and last 24
    bytes around '...', each cut back to whole characters."""
    text = repr(value)
    raw = text.encode("utf-8")
    if len(raw) <= 50:
        return text
    head = raw[:25].decode("utf-8", errors="ignore")
    tail = raw[-24:].decode("utf-8", errors="ignore")
    return f"{head}...{tail}"


_CALC_CHARS = "0123456789+-*/(). "

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _arithmetic(expression: Any) -> Any:
    """The value Python's eval() gives an expression of _CALC_CHARS, without eval: Python's own
    compiler reports the syntax errors, then the tree is walked with Python's operators, so each
    result and each error (division by zero, a tuple in a sum, ...) is Python's own."""
    if not isinstance(expression, str):
        raise TypeError("eval() arg 1 must be a string, bytes or code object")
    source = expression.lstrip(" \t")  # eval() strips leading spaces and tabs; compile() does not
    with warnings.catch_warnings():  # e.g. "(1)(2)": "'int' object is not callable; perhaps ..."
        warnings.simplefilter("ignore")
        compile(source, "<string>", "eval")
    return _walk(ast.parse(source, "<string>", "eval").body)


def _walk(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_walk(node.operand))
    if isinstance(node, ast.BinOp):
        left = _walk(node.left)
        return _BINARY[type(node.op)](left, _walk(node.right))
    if isinstance(node, ast.Tuple):
        return tuple(_walk(element) for element in node.elts)
    if isinstance(node, ast.Call):  # "(1)(2)": only numbers, tuples and ... can be called here
        func = _walk(node.func)
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = _walk(arg.value)
                try:
                    iter(value)
                except TypeError:
                    raise TypeError(f"{func} argument after * must be an iterable, "
                                    f"not {type(value).__name__}") from None
            else:
                _walk(arg)
        for keyword in node.keywords:
            value = _walk(keyword.value)
            if keyword.arg is None and not hasattr(value, "keys"):
                raise TypeError(f"{func} argument after ** must be a mapping, "
                                f"not {type(value).__name__}")
        raise TypeError(f"'{type(func).__name__}' object is not callable")
    raise SyntaxError(f"unsupported expression: {ast.dump(node)}")  # unreachable with _CALC_CHARS
