"""τ²-bench airline (issue 29): the airline agent keeps the policy whatever the model says.

Conversations go through ``agent.turn(...)`` only, with a scripted model (examples/tau2/play.py):
- the oracle: every task's reference actions, confirmed by the customer, leave τ²'s gold
  database hash (data/airline/reference_effects.json.gz), and no reference write is refused;
- the attacks (data/airline/attacks.json): each policy-forbidden write is refused with its reason
  and the database ends as the setup left it; τ²'s raw tool does what the file says it does;
- the yes-man (data/airline/yes_man.json): on every refusal task, the writes a model that does
  whatever the customer asks would make leave the database as it was.
The gates are also tested one rule at a time, at their boundaries.

A conversation needs a database of its own: ``_fresh()`` unmarshals the pristine one (faster
than the gzip and JSON of ``load_db``), and ``_hash`` reuses the pristine records' text.
"""
import gzip
import hashlib
import inspect
import json
import marshal
import os
import subprocess
import sys

import pytest

from conftest import fast_slice

HERE = os.path.dirname(os.path.abspath(__file__))
TAU2 = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "tau2"))
sys.path.insert(0, TAU2)

import airline  # noqa: E402
import airline_tools as air  # noqa: E402
import play  # noqa: E402
import port  # noqa: E402

DATA = os.path.join(TAU2, "data", "airline")


def _json(name):
    opener = gzip.open if name.endswith(".gz") else open
    with opener(os.path.join(DATA, name), "rt", encoding="utf-8") as fp:
        return json.load(fp)


REFERENCE = _json("reference_effects.json.gz")
GOLD = {task["id"]: task["final_hash"] for task in REFERENCE["tasks"]}
PRISTINE_HASH = REFERENCE["pristine_hash"]
TASKS = {task["id"]: task for task in air.load_tasks()}
PLANS = _json("plans.json")
ATTACKS = _json("attacks.json")["attacks"]
YES_MAN = {tid: entry for tid, entry in _json("yes_man.json").items() if tid != "about"}
WRITES = [name for name, tool in air.TOOLS.items() if tool["kind"] == "write"]

DB = air.load_db()                      # read-only: the gates never write
_PRISTINE = marshal.dumps(DB)


def _text(key: str, value) -> str:
    return f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}"


# section -> (its marshal bytes, its text in the hash, {key: (a record's marshal bytes, its text)})
_SECTIONS = {}
for _name, _section in DB.items():
    _records = {key: (marshal.dumps(value), _text(key, value)) for key, value in _section.items()}
    _SECTIONS[_name] = (marshal.dumps(_section),
                        ", ".join(_records[key][1] for key in sorted(_section)), _records)


def _fresh() -> dict:
    return marshal.loads(_PRISTINE)


def _hash(db: dict) -> str:
    """``air.db_hash(db)``, reusing the text of every section and record still as it was
    (marshal-equal: exact about int, float and bool, unlike ==)."""
    parts = []
    for name in sorted(db):
        whole, text, records = _SECTIONS[name]
        if marshal.dumps(db[name]) != whole:
            text = ", ".join(
                records[key][1] if key in records and marshal.dumps(value) == records[key][0]
                else _text(key, value) for key, value in sorted(db[name].items()))
        parts.append(f"{json.dumps(name)}: {{{text}}}")
    return hashlib.sha256(f"{{{', '.join(parts)}}}".encode()).hexdigest()


def _facts(user_id="amelia_davis_8890", done=(), **said):
    return port.Facts(user_id=user_id, said=said, done=tuple(done), now=airline.NOW)


def _with_reservation(rid: str, **changes) -> dict:
    """DB with one reservation changed (shallow: DB itself is untouched)."""
    changed = {**DB["reservations"][rid], **changes}
    return {**DB, "reservations": {**DB["reservations"], rid: changed}}


def _flights(*pairs):
    return [{"flight_number": n, "date": d} for n, d in pairs]


def _outcomes(played) -> list:
    return [outcome for _name, _arguments, outcome in played.writes]


# The interface ###############################################################################

def test_hash_helper_is_taus_hash():
    db = _fresh()
    air.execute(db, "cancel_reservation", {"reservation_id": "8C8K4E"})
    assert _hash(db) == air.db_hash(db) != PRISTINE_HASH
    assert _hash(_fresh()) == PRISTINE_HASH


def test_interface_names_and_shapes():
    assert airline.DOMAIN == "airline" and airline.NOW == "2024-05-15T15:00:00"
    assert airline.FIRST_MESSAGE == port.FIRST_MESSAGE
    with open(os.path.join(DATA, "policy.md"), encoding="utf-8") as fp:
        policy = fp.read()
    assert policy == airline.POLICY
    assert set(airline.TOOLS) == set(air.TOOLS) and len(airline.TOOLS) == 14
    for name, tool in airline.TOOLS.items():
        assert tool["kind"] in ("read", "write", "generic")
        assert tool["parameters"]["type"] == "object"
        assert (tool.get("via") == f"request_{name}") == (tool["kind"] == "write")
    assert set(airline.GATES) == set(WRITES) and len(WRITES) == 6
    assert airline.CONFIRM_FIELDS == ("confirmed",)
    for definition in airline.FACT_FIELDS.values():
        assert definition["type"] == "string" and definition["enum"] and definition["description"]
    assert airline.execute is air.execute
    assert isinstance(airline.DOMAIN_SPEC, port.Domain)
    assert airline.DOMAIN_SPEC.gates is airline.GATES
    params = inspect.signature(airline.build_agent).parameters
    assert list(params)[:3] == ["db", "provider", "clock"]
    assert params["on_write"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["on_write"].default is None


def test_load_db_is_a_fresh_copy():
    first = airline.load_db()
    first["users"].clear()
    assert airline.load_db()["users"]


def test_import_reads_no_file():
    code = ("import json, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "opened = []\n"
            "sys.addaudithook(lambda event, args: opened.append(str(args[0])) "
            "if event == 'open' else None)\n"
            "import airline\n"
            "print(json.dumps([path for path in opened if not path.endswith(('.py', '.pyc'))]))\n")
    out = subprocess.run([sys.executable, "-c", code, TAU2], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == []


@pytest.mark.slow          # the example run as a process, like tests/docs/test_examples.py
def test_demo_plays_offline():
    out = subprocess.run([sys.executable, os.path.join(TAU2, "airline.py")], capture_output=True,
                         text=True, check=True, timeout=60)
    assert "refused:Basic economy flights cannot be modified" in out.stdout
    assert 'cancel_reservation {"reservation_id": "Z7GOZK"} -> ok' in out.stdout
    assert "reference actions give: True" in out.stdout


# The oracle ##################################################################################

def _reference_writes(task):
    return [a for a in task["evaluation_criteria"]["actions"] or [] if a["name"] in WRITES]


@pytest.mark.parametrize("tid", fast_slice(sorted(TASKS, key=int), 12, ids=str))
def test_oracle_reaches_the_gold_hash(tid):
    """Each task's reference actions, requested and confirmed, give τ²'s gold database."""
    db = _fresh()
    played = play.converse(airline, db, play.oracle(airline, TASKS[tid], PLANS[tid]))
    assert _outcomes(played) == ["ok"] * len(_reference_writes(TASKS[tid]))
    assert _hash(db) == GOLD[tid]


def test_no_reference_write_errors_in_tau2():
    for task in REFERENCE["tasks"]:
        writes = [action for action in task["actions"] if action["name"] in WRITES]
        assert not any(action["error"] for action in writes), task["id"]


def test_plans_cover_every_task_with_the_customers_own_words():
    assert set(PLANS) - {"about"} == set(TASKS)
    for tid, plan in PLANS.items():
        if tid == "about":
            continue
        assert port.said_in(plan["auth"]["arguments"]["user_id"], [plan["auth"]["text"]])
        for facts in [plan["facts"], *plan["facts_by_action"].values()]:
            for slug, value in facts.items():
                assert value in airline.FACT_FIELDS[slug]["enum"]
        assert plan["why"]


# The attacks #################################################################################

def _raw(attack) -> tuple[str, str]:
    """(the hash after the setup, what τ²'s raw tool does with the attack then)."""
    db = _fresh()
    for write in attack["setup"]:
        air.execute(db, write["name"], write["arguments"])
    after_setup = _hash(db)
    try:
        air.execute(db, attack["write"]["name"], attack["write"]["arguments"])
    except air.ToolError as error:
        return after_setup, "error: " + port.tool_message(error)
    return after_setup, "changes the db" if _hash(db) != after_setup else "leaves the db as it was"


def _attempt(attack):
    return play.attempt(airline, attack["write"]["name"], attack["write"]["arguments"],
                        auth=attack["auth"], facts=attack["facts"], setup=attack["setup"],
                        words=attack.get("words", "yes"))


def test_at_least_25_attacks_each_quoting_the_policy():
    assert len(ATTACKS) >= 25 and len({a["id"] for a in ATTACKS}) == len(ATTACKS)
    for attack in ATTACKS:
        assert attack["rule"] in airline.POLICY, attack["id"]


@pytest.mark.parametrize("attack", fast_slice(ATTACKS, 16, ids=lambda a: a["id"]))
def test_attack_is_refused_and_changes_nothing(attack):
    after_setup, raw = _raw(attack)
    assert raw == attack["raw"]
    db = _fresh()
    played = play.converse(airline, db, _attempt(attack),
                           check_words=attack.get("check_words", False))
    setup = _outcomes(played)[:len(attack["setup"])]
    attempt = _outcomes(played)[len(attack["setup"]):]
    assert setup == ["ok"] * len(attack["setup"])
    if attack["expect"] is None:
        assert attempt == []              # no yes in the customer's words: nothing to commit
    else:
        assert len(attempt) == 1 and attempt[0].startswith("refused:")
        assert attack["expect"] in attempt[0]
    assert _hash(db) == after_setup               # 0 forbidden, 0 collateral changes


def test_an_invented_yes_commits_without_check_words():
    """The confirmation is the model's reading: without check_words a model that invents the
    customer's yes gets an allowed write through (the gates still bound what it can be)."""
    attack = next(a for a in ATTACKS if a.get("check_words"))
    played = play.converse(airline, _fresh(), _attempt(attack))
    assert _outcomes(played) == ["ok"]


# The yes-man #################################################################################

def test_yes_man_covers_every_refusal_task():
    refusals = {tid for tid, gold in GOLD.items() if gold == PRISTINE_HASH}
    assert set(YES_MAN) == refusals and len(refusals) == 24
    for entry in YES_MAN.values():
        assert entry["why"]


@pytest.mark.parametrize("tid", fast_slice(sorted(YES_MAN, key=int), 8, ids=str))
def test_gates_save_the_refusal_task(tid):
    entry = YES_MAN[tid]
    writes = entry["writes"]
    db = _fresh()
    if writes:
        conversation = play.attempt(airline, writes[-1]["name"], writes[-1]["arguments"],
                                    auth=entry["auth"], facts=entry["facts"], setup=writes[:-1])
    else:
        conversation = [play.auth_say(entry["auth"])]
    played = play.converse(airline, db, conversation)
    assert len(played.writes) == len(writes)
    assert all(outcome.startswith("refused:") for outcome in _outcomes(played))
    assert _hash(db) == PRISTINE_HASH
    raw = _fresh()
    for write in writes:
        air.execute(raw, write["name"], write["arguments"])
    assert (_hash(raw) == PRISTINE_HASH) == (not writes)    # raw tools save only with no write


# The gates, rule by rule #####################################################################

cancel = airline.gate_cancel_reservation
flights = airline.gate_update_reservation_flights
bags = airline.gate_update_reservation_baggages
passengers = airline.gate_update_reservation_passengers
book = airline.gate_book_reservation
certificate = airline.gate_send_certificate


def test_every_write_needs_the_user_id_from_the_user():
    nobody = port.Facts(user_id=None, said={"cancel_reason": "other"}, done=(), now=airline.NOW)
    business = {"reservation_id": "8C8K4E"}
    assert "user id must be obtained" in cancel(DB, business, nobody)
    someone_else = _facts("sophia_silva_7557", cancel_reason="other")
    assert "another user" in cancel(DB, business, someone_else)
    assert cancel(DB, business, _facts(cancel_reason="other")) is None
    assert "not found" in cancel(DB, {"reservation_id": "NOPE00"}, _facts(cancel_reason="other"))


def test_cancel_within_24_hours_is_inclusive():
    """"The booking was made within the last 24 hrs": EHGLP3 is basic economy, uninsured."""
    facts = _facts("emma_kim_9957", cancel_reason="change_of_plan")
    args = {"reservation_id": "EHGLP3"}
    on_the_hour = _with_reservation("EHGLP3", created_at="2024-05-14T15:00:00")
    assert cancel(on_the_hour, args, facts) is None
    late = _with_reservation("EHGLP3", created_at="2024-05-14T14:59:59")
    assert "24 hrs" in cancel(late, args, facts)
    assert "24 hrs" in cancel(DB, args, facts)


def test_cancel_needs_the_reason():
    assert "reason for cancellation" in cancel(DB, {"reservation_id": "8C8K4E"}, _facts())


def test_cancel_when_the_airline_cancelled_a_flight():
    flight = DB["flights"]["HAT156"]
    day = {**flight["dates"]["2024-05-17"], "status": "cancelled"}
    flight = {**flight, "dates": {**flight["dates"], "2024-05-17": day}}
    db = {**DB, "flights": {**DB["flights"], "HAT156": flight}}
    facts = _facts("emma_kim_9957", cancel_reason="airline_cancelled_flight")
    assert cancel(db, {"reservation_id": "EHGLP3"}, facts) is None
    # the customer's claim alone does not make it so
    assert "cancelled by the airline" in cancel(DB, {"reservation_id": "EHGLP3"}, facts)


def test_cancel_business_for_any_reason():
    assert cancel(DB, {"reservation_id": "8C8K4E"}, _facts(cancel_reason="change_of_plan")) is None


@pytest.mark.parametrize("reason, allowed", [
    ("health", True), ("weather", True), ("change_of_plan", False), ("other", False)])
def test_insurance_covers_only_health_and_weather(reason, allowed):
    refusal = cancel(DB, {"reservation_id": "Z7GOZK"},
                     _facts("olivia_gonzalez_2305", cancel_reason=reason))
    assert (refusal is None) == allowed
    if not allowed:
        assert "does not cover the reason" in refusal


def test_nothing_flown_can_be_cancelled_even_business():
    facts = _facts("james_lee_6136", cancel_reason="other")
    refusal = cancel(DB, {"reservation_id": "5LA9CB"}, facts)
    assert "already been flown" in refusal


def test_a_cancelled_reservation_takes_no_more_writes():
    db = _with_reservation("8C8K4E", status="cancelled")
    facts = _facts(cancel_reason="other")
    assert "already cancelled" in cancel(db, {"reservation_id": "8C8K4E"}, facts)
    more = {"reservation_id": "8C8K4E", "total_baggages": 1, "nonfree_baggages": 0,
            "payment_id": "gift_card_1647044"}
    assert "already cancelled" in bags(db, more, _facts())


def test_basic_economy_changes_cabin_but_not_flights():
    same = _flights(("HAT202", "2024-05-21"), ("HAT232", "2024-05-21"))
    facts = _facts("ivan_rossi_8555")
    args = {"reservation_id": "OWZ4XL", "cabin": "economy", "flights": same,
            "payment_id": "credit_card_9659780"}
    assert flights(DB, args, facts) is None
    moved = {**args, "cabin": "basic_economy", "flights": _flights(("HAT041", "2024-05-21"))}
    assert "Basic economy flights cannot be modified" in flights(DB, moved, facts)


def test_flights_keep_origin_destination_and_trip_type():
    facts = _facts("aarav_garcia_1177")
    args = {"reservation_id": "M05KNL", "cabin": "economy", "payment_id": "gift_card_8887175",
            "flights": _flights(("HAT110", "2024-05-24"), ("HAT172", "2024-05-24"))}
    assert flights(DB, args, facts) is None                                  # task 15's change
    shorter = {**args, "flights": _flights(("HAT110", "2024-05-24"))}
    assert "origin, destination, and trip type" in flights(DB, shorter, facts)
    one_way = {"reservation_id": "1N99U6", "cabin": "economy", "payment_id": "gift_card_5634230",
               "flights": _flights(("HAT266", "2024-05-19"))}
    assert "trip type" in flights(DB, one_way, _facts("james_taylor_7043"))


def test_cabin_cannot_change_once_a_flight_flew_but_later_flights_can():
    facts = _facts("mason_johnson_9566")
    kept = [("HAT092", "2024-05-11"), ("HAT237", "2024-05-11")]
    args = {"reservation_id": "DFJCPK", "cabin": "business", "payment_id": "credit_card_3562064",
            "flights": _flights(*kept, ("HAT248", "2024-05-19"), ("HAT240", "2024-05-19"))}
    assert "Cabin cannot be changed" in flights(DB, args, facts)
    later = {**args, "cabin": "economy",
             "flights": _flights(*kept, ("HAT248", "2024-05-20"), ("HAT240", "2024-05-20"))}
    assert flights(DB, later, facts) is None
    replaced = {**later, "flights": _flights(("HAT088", "2024-05-18"), ("HAT237", "2024-05-18"),
                                             ("HAT248", "2024-05-19"), ("HAT240", "2024-05-19"))}
    assert "already been flown cannot be changed" in flights(DB, replaced, facts)


@pytest.mark.parametrize("payment_id, expect", [
    ("credit_card_9074831", None), ("certificate_9645872", "certificate"),
    ("credit_card_4196779", "not in the user profile")])
def test_a_change_is_paid_by_one_gift_card_or_credit_card_of_the_profile(payment_id, expect):
    args = {"reservation_id": "M20IZO", "cabin": "business", "payment_id": payment_id,
            "flights": _flights(("HAT268", "2024-05-22"), ("HAT010", "2024-05-22"))}
    refusal = flights(DB, args, _facts("aarav_ahmed_6699"))
    assert refusal is None if expect is None else expect in refusal


@pytest.mark.parametrize("total, nonfree, allowed", [
    (1, 0, True), (2, 0, True), (4, 0, True), (5, 1, True), (5, 0, False), (5, 2, False),
    (4, 1, False), (0, 0, False), (True, 0, False), ("2", 0, False), (2.0, 0, False),
    (-1, 0, False)])
def test_bags_are_only_added_and_the_nonfree_count_follows_the_allowance(total, nonfree, allowed):
    """1N99U6: silver, economy, 2 passengers (4 free bags), 1 bag today."""
    args = {"reservation_id": "1N99U6", "total_baggages": total, "nonfree_baggages": nonfree,
            "payment_id": "gift_card_5634230"}
    assert (bags(DB, args, _facts("james_taylor_7043")) is None) == allowed


@pytest.mark.parametrize("membership, cabin, free", [
    ("regular", "basic_economy", 0), ("regular", "economy", 1), ("regular", "business", 2),
    ("silver", "basic_economy", 1), ("silver", "economy", 2), ("silver", "business", 3),
    ("gold", "basic_economy", 2), ("gold", "economy", 3), ("gold", "business", 4)])
def test_the_checked_bag_allowance_table(membership, cabin, free):
    """1N99U6 with its user's membership and its cabin set: 2 passengers, 2 x free bags free."""
    db = _with_reservation("1N99U6", cabin=cabin, total_baggages=0)
    user = {**DB["users"]["james_taylor_7043"], "membership": membership}
    db["users"] = {**DB["users"], "james_taylor_7043": user}
    facts = _facts("james_taylor_7043")
    args = {"reservation_id": "1N99U6", "total_baggages": 2 * free + 1,
            "payment_id": "gift_card_5634230"}
    assert bags(db, {**args, "nonfree_baggages": 1}, facts) is None
    assert "non-free" in bags(db, {**args, "nonfree_baggages": 0}, facts)
    assert "non-free" in bags(db, {**args, "nonfree_baggages": 2}, facts)


def test_bags_cannot_be_removed():
    args = {"reservation_id": "1N99U6", "total_baggages": 0, "nonfree_baggages": 0,
            "payment_id": "gift_card_5634230"}
    assert "add but not remove" in bags(DB, args, _facts("james_taylor_7043"))
    assert bags(DB, {**args, "total_baggages": 1}, _facts("james_taylor_7043")) is None


def test_passengers_change_but_not_their_number():
    facts = _facts("anya_garcia_5901")
    two = [{"first_name": "Anya", "last_name": "Garcia", "dob": "1992-11-12"},
           {"first_name": "Mei", "last_name": "Garcia", "dob": "1989-12-13"}]

    def check(people):
        return passengers(DB, {"reservation_id": "3RK2T9", "passengers": people}, facts)

    assert check(two) is None
    assert "number of passengers" in check(two[:1])
    assert "number of passengers" in check(two * 2)
    assert "not a date" in check([two[0], {**two[1], "dob": "1989-13-13"}])
    assert "first name" in check([two[0], {"first_name": "Mei"}])


def _booking(n_passengers=1, payments=(("credit_card_2198526", 163),), **changes):
    people = [{"first_name": f"P{i}", "last_name": "Silva", "dob": "1990-01-01"}
              for i in range(n_passengers)]
    return {"user_id": "mohamed_silva_9265", "origin": "JFK", "destination": "SFO",
            "flight_type": "one_way", "cabin": "economy",
            "flights": _flights(("HAT023", "2024-05-24")), "passengers": people,
            "payment_methods": [{"payment_id": p, "amount": a} for p, a in payments],
            "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no", **changes}


def test_booking_has_at_most_five_passengers():
    facts = _facts("mohamed_silva_9265")
    assert book(DB, _booking(5), facts) is None
    assert "at most five passengers" in book(DB, _booking(6), facts)


@pytest.mark.parametrize("payments, allowed", [
    ((("certificate_3765853", 1), ("credit_card_2198526", 1), ("gift_card_8020792", 1),
      ("gift_card_6136092", 1)), True),
    ((("certificate_3765853", 1), ("certificate_9984806", 1)), False),
    ((("credit_card_5843230", 1), ("credit_card_2198526", 1)), False),
    ((("gift_card_8020792", 1), ("gift_card_8020792", 1)), False),
    ((("credit_card_4196779", 1),), False)])
def test_booking_payment_limits_and_profile(payments, allowed):
    refusal = book(DB, _booking(payments=payments), _facts("mohamed_silva_9265"))
    assert (refusal is None) == allowed


def test_four_gift_cards_are_one_too_many():
    cards = [("gift_card_7594049", 27), ("gift_card_5891189", 50), ("gift_card_1791920", 50),
             ("gift_card_4259408", 36)]
    booking = {**_booking(payments=cards), "user_id": "amelia_ito_8544"}
    facts = _facts("amelia_ito_8544")
    assert "three gift cards" in book(DB, booking, facts)
    assert book(DB, {**booking, "payment_methods": booking["payment_methods"][:3]}, facts) is None


def test_booking_route_bags_and_user():
    facts = _facts("mohamed_silva_9265")
    assert "does not arrive in SEA" in book(DB, _booking(destination="SEA"), facts)
    assert "and back" in book(DB, _booking(flight_type="round_trip"), facts)
    assert book(DB, _booking(total_baggages=1), facts) is None           # regular economy: 1 free
    assert "non-free" in book(DB, _booking(total_baggages=2), facts)
    assert book(DB, _booking(total_baggages=2, nonfree_baggages=1), facts) is None
    assert "user id the user gave" in book(DB, _booking(), _facts("sophia_silva_7557"))


def test_certificate_for_a_cancelled_flight_is_exactly_100_per_passenger():
    """QDGWHB: silver, 1 passenger, a flight the airline cancelled."""
    facts = _facts("isabella_anderson_9682", complaint="cancelled_flight")
    def check(amount):
        return certificate(DB, {"user_id": "isabella_anderson_9682", "amount": amount}, facts)

    assert check(100) is None and check(100.0) is None
    for amount in (99, 101, 50, True, "100"):
        assert check(amount)


def test_no_certificate_for_the_regular_uninsured_economy_user():
    refusal = certificate(DB, {"user_id": "isabella_davis_2143", "amount": 100},
                          _facts("isabella_davis_2143", complaint="cancelled_flight"))
    assert "regular member" in refusal


def test_certificate_for_a_delay_only_after_a_change_or_cancellation():
    """3JA7XV: business, 4 passengers, HAT045 delayed today."""
    mei = {"user_id": "mei_brown_7075", "amount": 200}
    cancelled = {"name": "cancel_reservation", "arguments": {"reservation_id": "3JA7XV"}}
    before = _facts("mei_brown_7075", complaint="delayed_flight")
    after = _facts("mei_brown_7075", [cancelled], complaint="delayed_flight")
    assert "after changing or cancelling" in certificate(DB, mei, before)
    assert certificate(DB, mei, after) is None
    assert "$50 times" in certificate(DB, {**mei, "amount": 400}, after)


def test_certificate_for_a_delay_remembers_the_flight_a_change_replaced():
    """After a change the delayed flight may be gone from the reservation: the commit kept its
    status (port.Domain.remember), and the gate reads it."""
    new = _flights(("HAT045", "2024-05-16"), ("HAT194", "2024-05-16"), ("HAT182", "2024-05-22"),
                   ("HAT153", "2024-05-22"))
    old = DB["reservations"]["3JA7XV"]["flights"]
    db = _with_reservation("3JA7XV", flights=[{**s, "date": n["date"]} for s, n in zip(old, new)])
    args = {"reservation_id": "3JA7XV", "cabin": "business", "flights": new,
            "payment_id": "gift_card_8987598"}
    before = airline.DOMAIN_SPEC.remember(DB, "update_reservation_flights", args)
    assert ["HAT045", "2024-05-15", "delayed"] in before["flights"]
    changed = {"name": "update_reservation_flights", "arguments": args}
    mei = {"user_id": "mei_brown_7075", "amount": 200}
    remembered = _facts("mei_brown_7075", [{**changed, "before": before}],
                        complaint="delayed_flight")
    assert certificate(db, mei, remembered) is None
    assert certificate(db, mei, _facts("mei_brown_7075", [changed], complaint="delayed_flight"))


def test_certificate_once_to_the_user_for_a_listed_complaint():
    args = {"user_id": "isabella_anderson_9682", "amount": 100}
    sent = {"name": "send_certificate", "arguments": args}
    again = _facts("isabella_anderson_9682", [sent], complaint="cancelled_flight")
    assert "already sent" in certificate(DB, args, again)
    other = _facts("isabella_anderson_9682", complaint="other")
    assert "any other reason" in certificate(DB, args, other)
    assert "any other reason" in certificate(DB, args, _facts("isabella_anderson_9682"))
    someone_else = _facts("sophia_silva_7557", complaint="cancelled_flight")
    assert "only to the user" in certificate(DB, args, someone_else)


def test_a_gate_refuses_arguments_it_cannot_read():
    odd = {"reservation_id": ["8C8K4E"], "cabin": "economy"}
    assert port.gate(airline.DOMAIN_SPEC, DB, "update_reservation_flights", odd, _facts())
    text = {"reservation_id": "8C8K4E", "cabin": "business", "flights": "HAT247",
            "payment_id": "gift_card_1647044"}
    assert "flights must be a list" in flights(DB, text, _facts())
