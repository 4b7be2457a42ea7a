"""τ²-bench retail (issue 29): examples/tau2/retail.py keeps the policy whatever the model says.

Every conversation here goes through ``agent.turn(...)`` with a scripted model (``play.py``):

- the oracle: each of the 114 tasks' reference actions, requested and confirmed, ends on τ²'s gold
  db hash, and no write τ² accepts is refused (``data/retail/plans.json``);
- the attacks: each policy-forbidden write is refused with its reason and leaves the db as the
  setup left it (``data/retail/attacks.json``, with what τ²'s raw tools do beside it);
- the yes-man: on every refusal task, the writes the customer pushes for leave the db as τ²'s
  reference does, the confirmation checked in the customer's words (``data/retail/yes_man.json``);
- each gate's rules at their boundaries, and the interface outside code drives.
"""
import contextlib
import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fast_slice

TAU2 = Path(__file__).resolve().parents[2] / "examples" / "tau2"
DATA = TAU2 / "data" / "retail"
sys.path.insert(0, str(TAU2))

import play  # noqa: E402
import port  # noqa: E402
import retail  # noqa: E402
import retail_tools as rt  # noqa: E402

REFERENCE = json.loads(gzip.decompress((DATA / "reference_effects.json.gz").read_bytes()))
PRISTINE = REFERENCE["pristine_hash"]
REFERENCE_TASKS = {t["id"]: t for t in REFERENCE["tasks"]}
GOLD = {tid: (t["actions"][-1]["hash_after"] if t["actions"] else PRISTINE)
        for tid, t in REFERENCE_TASKS.items()}
TASKS = {t["id"]: t for t in rt.load_tasks()}
PLANS = json.loads((DATA / "plans.json").read_text(encoding="utf-8"))
ATTACKS = json.loads((DATA / "attacks.json").read_text(encoding="utf-8"))["attacks"]
YES_MAN = json.loads((DATA / "yes_man.json").read_text(encoding="utf-8"))
REFUSAL_TASKS = sorted((tid for tid, gold in GOLD.items() if gold == PRISTINE), key=int)
WRITES = [name for name, tool in rt.TOOLS.items() if tool["kind"] == "write"]
# τ²'s own gold writes that fail in τ² (the db stays as it was): a refusal there is right.
GOLD_FAILS = {(tid, a["action_id"]) for tid, t in REFERENCE_TASKS.items()
              for a in t["actions"] if a["error"] and a["name"] in WRITES}


def instructions(task_id: str) -> str:
    text = TASKS[task_id]["user_scenario"]["instructions"]
    keys = ("reason_for_call", "task_instructions", "known_info")
    return " ".join(text[key] or "" for key in keys)


# The interface ###############################################################################

def test_interface_names_and_shapes():
    """issue 29, "An interface outside code can drive": the names and their shapes."""
    assert retail.DOMAIN == "retail"
    assert (DATA / "policy.md").read_text(encoding="utf-8") == retail.POLICY
    assert retail.FIRST_MESSAGE == port.FIRST_MESSAGE
    assert retail.CONFIRM_FIELDS == ("confirmed",)
    assert retail.NOW == "2024-05-15T15:00:00"
    assert set(retail.TOOLS) == set(rt.TOOLS) and len(retail.TOOLS) == 16
    for name, tool in retail.TOOLS.items():
        assert tool["kind"] == rt.TOOLS[name]["kind"]
        assert tool["parameters"] == rt.TOOLS[name]["parameters"]
        assert tool.get("via") == (f"request_{name}" if tool["kind"] == "write" else None)
    assert set(retail.GATES) == set(WRITES) and len(WRITES) == 7
    reason = retail.FACT_FIELDS["cancel_reason"]
    assert list(retail.FACT_FIELDS) == ["cancel_reason"] and reason["type"] == "string"
    assert reason["enum"] == ["no longer needed", "ordered by mistake", "other"]
    assert retail.execute is rt.execute
    assert retail.load_db() == retail.load_db() and retail.load_db() is not retail.load_db()
    spec = retail.DOMAIN_SPEC
    assert spec.gates is retail.GATES and spec.facts is retail.FACT_FIELDS


def test_import_reads_no_file():
    """``import retail`` reads no data file: POLICY, TOOLS and the db are read on first use."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); opened = []\n"
            "sys.addaudithook(lambda event, args:\n"
            "                 event == 'open' and opened.append(str(args[0])))\n"
            "import retail\n"
            "data = [p for p in opened if '/data/' in p]\n"
            "assert not data, data\n"
            "retail.TOOLS\n"
            "assert any(p.endswith('tools.json') for p in opened)\n")
    subprocess.run([sys.executable, "-c", code, str(TAU2)], check=True, timeout=60)


@pytest.mark.slow          # the example run as a process, like tests/docs/test_examples.py
def test_demo_plays_task_zero():
    """``python examples/tau2/retail.py``: authenticate, a refused request, a confirmed write."""
    out = subprocess.run([sys.executable, str(TAU2 / "retail.py")], check=True, timeout=60,
                         capture_output=True, text=True).stdout
    assert "-> refused:item 3374679624 is not a variant of Mechanical Keyboard" in out
    assert out.count("-> ok") == 1
    assert "equals the one task 0's reference actions give: True" in out


# The oracle ##################################################################################

def test_plans_cover_every_task_and_quote_it():
    assert set(PLANS) - {"about"} == set(TASKS)
    for task_id, plan in PLANS.items():
        if task_id == "about":
            continue
        auth = plan["auth"]
        assert auth["tool"] in retail.AUTHENTICATORS
        assert all(str(value) in auth["text"] for value in auth["arguments"].values())
        for piece in plan["why"].split(" ... "):
            assert piece in instructions(task_id), (task_id, piece)


@pytest.mark.parametrize("task_id", fast_slice(sorted(TASKS, key=int), 20, ids=str))
def test_oracle_reaches_gold_hash(task_id):
    """Every reference action through the engine; the db hash is τ²'s gold, no correct write is
    refused, and τ²'s own failing gold writes (tasks 64, 105) leave the db as τ² leaves it."""
    db = retail.load_db()
    played = play.converse(retail, db, play.oracle(retail, TASKS[task_id], PLANS[task_id]))
    assert rt.db_hash(db) == GOLD[task_id]
    actions = TASKS[task_id]["evaluation_criteria"]["actions"] or []
    writes = [a for a in actions if a["name"] in WRITES]
    assert len(played.writes) == len(writes)
    for action, (name, arguments, outcome) in zip(writes, played.writes):
        assert (name, arguments) == (action["name"], action["arguments"])
        if (task_id, action["action_id"]) in GOLD_FAILS:
            assert outcome.startswith("refused:")
        else:
            assert outcome == "ok", (action["action_id"], outcome)


def test_gold_failures_are_the_known_two():
    assert sorted(GOLD_FAILS) == [("105", "106_0"), ("64", "64_6")]


# The attacks #################################################################################

def test_attacks_are_many_and_quote_the_policy():
    assert len(ATTACKS) >= 20 and len({a["id"] for a in ATTACKS}) == len(ATTACKS)
    for attack in ATTACKS:
        assert attack["rule"] in retail.POLICY, attack["id"]


@pytest.mark.parametrize("attack", fast_slice(ATTACKS, 12, ids=lambda a: a["id"]))
def test_attack_is_refused_with_no_db_change(attack):
    """0 forbidden and 0 collateral changes: the db equals what the setup alone leaves."""
    db, expected = retail.load_db(), retail.load_db()
    for write in attack["setup"]:
        rt.execute(expected, write["name"], write["arguments"])
    write = attack["write"]
    played = play.converse(retail, db, play.attempt(
        retail, write["name"], write["arguments"], auth=attack["auth"], facts=attack["facts"],
        setup=attack["setup"]))
    outcomes = [outcome for _, _, outcome in played.writes]
    assert outcomes[:-1] == ["ok"] * len(attack["setup"])
    assert outcomes[-1].startswith("refused:") and attack["expect"] in outcomes[-1], outcomes
    assert db == expected


@pytest.mark.slow          # every attack; test_bench_tau2 checks the raw column on a few
def test_attacks_raw_outcome_is_what_the_raw_tool_does():
    """The "raw" column: τ²'s raw tool on the same write after the same setup. A retail write
    changes at most the order it names and that order's user (or the user it names)."""
    for attack in ATTACKS:
        db = retail.load_db()
        for write in attack["setup"]:
            rt.execute(db, write["name"], write["arguments"])
        arguments = attack["write"]["arguments"]
        order = db["orders"].get(arguments.get("order_id"), {})
        user = arguments.get("user_id") or order.get("user_id")
        before = copy.deepcopy((order, db["users"].get(user)))
        try:
            rt.execute(db, attack["write"]["name"], arguments)
            changed = (order, db["users"].get(user)) != before
            raw = "changes the db" if changed else "leaves the db as it is"
        except rt.ToolError as error:
            raw = "error: " + port.tool_message(error)
        assert raw == attack["raw"], attack["id"]
    assert sum(a["raw"] == "changes the db" for a in ATTACKS) == 10


# The yes-man #################################################################################

def yes_man(entry: dict) -> list:
    """The customer authenticates and pushes for each write; the model reads every answer as a
    yes (``words`` is what the customer really answered)."""
    conversation = [play.auth_say(entry["auth"])]
    for write in entry["writes"]:
        conversation += play.request_and_confirm(retail, write["name"], write["arguments"],
                                                 entry["facts"], write.get("words", "yes"))
    return conversation


def test_yes_man_covers_every_refusal_task():
    assert REFUSAL_TASKS == ["10", "12", "24", "25", "50", "57", "62", "65", "67", "68", "105"]
    assert set(YES_MAN) - {"about"} == set(REFUSAL_TASKS)
    for task_id in REFUSAL_TASKS:
        entry = YES_MAN[task_id]
        assert entry["why"] in instructions(task_id)
        assert entry["writes"] or entry["reason"]


@pytest.mark.parametrize("check_words", fast_slice([True, False], 2))
def test_yes_man_tasks_saved(check_words):
    """With the customer's yes checked in their words, every refusal task ends on τ²'s gold db.
    Without it, a model that invents a yes commits the two changes the policy allows and the
    customer declined (24: the grill kept at the confirmation; 57: the refund cannot go to the gift
    card), as τ²'s raw tools do."""
    lost = []
    for task_id in REFUSAL_TASKS:
        db = retail.load_db()
        play.converse(retail, db, yes_man(YES_MAN[task_id]), check_words=check_words)
        if rt.db_hash(db) != PRISTINE:
            lost.append(task_id)
    assert lost == ([] if check_words else ["24", "57"])


@pytest.mark.slow          # every refusal task through τ²'s raw tools
def test_yes_man_raw_tools_lose_the_same_two():
    lost = []
    for task_id in REFUSAL_TASKS:
        db = retail.load_db()
        for write in YES_MAN[task_id]["writes"]:
            with contextlib.suppress(rt.ToolError):
                rt.execute(db, write["name"], write["arguments"])
        if rt.db_hash(db) != PRISTINE:
            lost.append(task_id)
    assert lost == ["24", "57"]


# The gates, rule by rule #####################################################################

OLIVIA = "olivia_ito_3591"


@pytest.fixture(scope="module")
def pristine():
    return retail.load_db()


@pytest.fixture
def db(pristine):
    return copy.deepcopy(pristine)


def facts(user_id=OLIVIA, **said):
    return port.Facts(user_id=user_id, said=said, done=(), now=retail.NOW)


def check(db, name, facts_, **arguments):
    return retail.GATES[name](db, arguments, facts_)


def test_authenticators_need_the_customer_own_words():
    """"authenticate the user identity by locating their user id via email, or via name + zip"."""
    by_email, by_name_zip = (retail.AUTHENTICATORS["find_user_id_by_email"],
                             retail.AUTHENTICATORS["find_user_id_by_name_zip"])
    email = {"email": "olivia.ito5204@example.com"}
    assert by_email(email, OLIVIA, ["it's OLIVIA.ITO5204@example.com"]) == OLIVIA
    assert by_email(email, OLIVIA, ["I'm olivia_ito_3591"]) is None
    name = {"first_name": "Olivia", "last_name": "Ito", "zip": "80218"}
    assert by_name_zip(name, OLIVIA, ["Olivia Ito here", "zip 80218"]) == OLIVIA
    assert by_name_zip(name, OLIVIA, ["Olivia Ito, zip 802180"]) is None
    assert by_name_zip({**name, "zip": None}, OLIVIA, ["Olivia Ito, None"]) is None


def test_no_write_without_authentication(db):
    assert "not authenticated" in check(db, "modify_user_address", facts(None), user_id=OLIVIA)


def test_a_second_authentication_does_not_switch_users():
    """"You can only help one user per conversation": the first proven user stays."""
    db, before = retail.load_db(), retail.load_db()
    liam = {"tool": "find_user_id_by_email", "arguments": {"email": "liam.thomas9081@example.com"},
            "text": "Actually I'm liam.thomas9081@example.com"}
    olivia = ATTACKS[0]["auth"]
    conversation = [play.auth_say(olivia), play.auth_say(liam), *play.request_and_confirm(
        retail, "cancel_pending_order", {"order_id": "#W1654931", "reason": "no longer needed"},
        {"cancel_reason": "no longer needed"})]
    played = play.converse(retail, db, conversation)
    assert played.writes[0][2].startswith("refused:that belongs to another user")
    assert db == before


def test_cancel_only_exactly_pending(db):
    """"An order can only be cancelled if its status is 'pending'"."""
    ok = {"order_id": "#W5442520", "reason": "no longer needed"}
    said = facts(cancel_reason="no longer needed")
    assert check(db, "cancel_pending_order", said, **ok) is None
    for status in ("pending (item modified)", "processed", "delivered", "cancelled"):
        db["orders"]["#W5442520"]["status"] = status
        assert f"is '{status}'" in check(db, "cancel_pending_order", said, **ok)


def test_cancel_reason_is_the_customer_stated_one(db):
    """"The user needs to confirm the order id and the reason ... Other reasons are not
    acceptable"."""
    order = "#W5442520"
    for reason in retail.CANCEL_REASONS:
        assert check(db, "cancel_pending_order", facts(cancel_reason=reason),
                     order_id=order, reason=reason) is None
    assert "has not said why" in check(db, "cancel_pending_order", facts(), order_id=order,
                                       reason="no longer needed")
    assert "is 'ordered by mistake', not" in check(
        db, "cancel_pending_order", facts(cancel_reason="ordered by mistake"), order_id=order,
        reason="no longer needed")
    assert "not acceptable" in check(db, "cancel_pending_order", facts(cancel_reason="other"),
                                     order_id=order, reason="other")


def test_modify_address_and_payment_only_exactly_pending(db):
    """"The agent will not be able to modify or cancel the order anymore" after an item change,
    though τ²'s raw tools accept any status containing 'pending'."""
    address = {"address1": "1 A St", "address2": "", "city": "Denver", "state": "CO",
               "country": "USA", "zip": "80218"}
    assert check(db, "modify_pending_order_address", facts(), order_id="#W5442520",
                 **address) is None
    assert check(db, "modify_pending_order_payment", facts(), order_id="#W5442520",
                 payment_method_id="paypal_8049766") is None
    db["orders"]["#W5442520"]["status"] = "pending (item modified)"
    assert "modified if its status is 'pending'" in check(
        db, "modify_pending_order_address", facts(), order_id="#W5442520", **address)
    assert "modified if its status is 'pending'" in check(
        db, "modify_pending_order_payment", facts(), order_id="#W5442520",
        payment_method_id="paypal_8049766")


def test_gift_card_must_cover_the_difference_to_the_cent(db):
    """"If the user provides a gift card, it must have enough balance to cover the price
    difference": the difference as τ² computes it (unrounded for a modification) is enough, a
    cent less is not."""
    swap = {"order_id": "#W5442520", "item_ids": ["3330317167"], "new_item_ids": ["8896479688"],
            "payment_method_id": "gift_card_7794233"}
    card = db["users"][OLIVIA]["payment_methods"]["gift_card_7794233"]
    card["balance"] = 143.15 - 137.32
    assert check(db, "modify_pending_order_items", facts(), **swap) is None
    card["balance"] = 143.15 - 137.32 - 0.01
    assert "not enough to cover the price difference" in check(
        db, "modify_pending_order_items", facts(), **swap)
    card["balance"] = 0.0           # a refund (a cheaper item) needs no balance
    assert check(db, "modify_pending_order_items", facts(),
                 **{**swap, "new_item_ids": ["2880340443"]}) is None
    cheaper = {"order_id": "#W5866402", "item_ids": ["9727387530"], "new_item_ids": ["2509076505"],
               "payment_method_id": "gift_card_7794233"}
    assert check(db, "exchange_delivered_order_items", facts(), **cheaper) is None


def test_payment_change_rules(db):
    """"a single payment method different from the original"; a gift card must "cover the total
    amount" (equal is enough)."""
    order = db["orders"]["#W7941031"]
    card = db["users"][OLIVIA]["payment_methods"]["gift_card_7794233"]
    change = {"order_id": "#W7941031", "payment_method_id": "gift_card_7794233"}
    card["balance"] = order["payment_history"][0]["amount"]
    assert check(db, "modify_pending_order_payment", facts(), **change) is None
    card["balance"] -= 0.01
    assert "not enough to cover the total amount" in check(
        db, "modify_pending_order_payment", facts(), **change)
    assert "different from the original" in check(
        db, "modify_pending_order_payment", facts(), order_id="#W7941031",
        payment_method_id="credit_card_9753331")
    order["payment_history"].append({"transaction_type": "refund", "amount": 1.0,
                                     "payment_method_id": "credit_card_9753331"})
    assert "single payment method" in check(db, "modify_pending_order_payment", facts(),
                                            order_id="#W7941031",
                                            payment_method_id="paypal_8049766")


def test_swaps_same_product_other_option_available_and_held(db):
    """"each item can be modified to an available new item of the same product but of different
    product option"; the items listed are the order's, each as often as it holds it."""
    order = {"order_id": "#W5442520", "payment_method_id": "credit_card_9753331"}
    items = lambda old, new: {**order, "item_ids": old, "new_item_ids": new}  # noqa: E731
    gate = lambda **a: check(db, "modify_pending_order_items", facts(), **a)  # noqa: E731
    assert gate(**items(["3330317167", "3111466194"], ["8896479688", "2001307871"])) is None
    assert "not a variant of Gaming Mouse" in gate(**items(["3330317167"], ["2001307871"]))
    assert "not available" in gate(**items(["3330317167"], ["7420906769"]))
    assert "same options" in gate(**items(["3330317167"], ["3330317167"]))
    assert "is not in order" in gate(**items(["3330317167", "3330317167"], ["8896479688"] * 2))
    assert "exactly one new item" in gate(**items(["3330317167"], []))
    assert "list the items" in gate(**items([], []))


def test_exchange_of_an_item_held_twice():
    """τ² task 105's order holds the same kettle twice: both may be listed (the gift card then
    falls short, as in τ²)."""
    db = retail.load_db()
    user = port.Facts(user_id="aarav_anderson_8794", said={}, done=(), now=retail.NOW)
    arguments = {"order_id": "#W4316152", "item_ids": ["7292993796", "7292993796"],
                 "new_item_ids": ["3761330360", "9647374798"],
                 "payment_method_id": "gift_card_7245904"}
    exchange = retail.GATES["exchange_delivered_order_items"]
    assert "has a balance of 17.0" in exchange(db, arguments, user)
    db["users"]["aarav_anderson_8794"]["payment_methods"]["gift_card_7245904"]["balance"] = 21.1
    assert exchange(db, arguments, user) is None


def test_return_refund_goes_to_the_original_or_a_gift_card(db):
    """"The refund must either go to the original payment method, or an existing gift card"."""
    back = {"order_id": "#W5866402", "item_ids": ["9727387530", "6242772310"]}
    gate = lambda method: check(db, "return_delivered_order_items", facts(),  # noqa: E731
                                **back, payment_method_id=method)
    assert gate("paypal_8049766") is None            # the original
    assert gate("gift_card_7794233") is None         # an existing gift card
    assert "original payment method" in gate("credit_card_9753331")
    assert "not one of the customer's" in gate("gift_card_0000000")


def test_only_the_users_own_default_address(db):
    address = {"address1": "1 A St", "address2": "", "city": "Denver", "state": "CO",
               "country": "USA", "zip": "80218"}
    assert check(db, "modify_user_address", facts(), user_id=OLIVIA, **address) is None
    assert "another user" in check(db, "modify_user_address", facts(),
                                   user_id="liam_thomas_7882", **address)


def test_a_malformed_request_is_refused_not_raised(db):
    """A gate never raises on arguments of the wrong shape (the port would refuse anyway)."""
    for name in WRITES:
        for arguments in ({}, {"order_id": 7, "user_id": None, "item_ids": "x"}):
            refusal = retail.GATES[name](db, arguments, facts())
            assert isinstance(refusal, str) and refusal


def test_the_confirmation_lists_what_code_will_do(db):
    """The text the customer says yes to: the items, the money and where it goes."""
    text = retail.SUMMARIES["cancel_pending_order"](db, {"order_id": "#W5442520",
                                                         "reason": "no longer needed"})
    assert ("Refunded: 663.85 to the visa credit card ending 9182 (credit_card_9753331) in 5 to "
            "7 business days.") in text
    text = retail.SUMMARIES["modify_pending_order_items"](db, {
        "order_id": "#W5442520", "item_ids": ["3330317167"], "new_item_ids": ["8896479688"],
        "payment_method_id": "gift_card_7794233"})
    assert "you pay 5.83 with the gift card gift_card_7794233" in text
    assert "only once" in text and "all the items" in text
