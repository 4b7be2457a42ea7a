"""τ²-bench's airline domain as a falai agent: the model reads and proposes; the policy is code.

τ²-bench (sierra-research/tau2-bench, MIT) scores a customer-service agent by the airline
database it leaves behind. Here the model holds τ²'s read tools and, for each of τ²'s six write
tools, a request tool (``request_<tool>``): a request runs the gate below, a change the gate
allows waits for the customer's explicit yes, and the commit re-checks the gate on the database
as it is then and runs τ²'s own tool with the stored arguments (``port.py`` says how).
``airline_tools.py`` is τ²'s tools over plain JSON; nothing here changes what they do.

An interface outside code can drive (issue 29): ``DOMAIN``, ``POLICY`` (verbatim), ``NOW``,
``FIRST_MESSAGE``, ``TOOLS``, ``load_db()``, ``build_agent(db, provider, clock, *, on_write=None)``,
``execute(db, name, args)`` (τ²'s raw semantics, no gates), ``CONFIRM_FIELDS``, ``FACT_FIELDS``;
also ``GATES`` (τ² write name -> gate) and ``DOMAIN_SPEC`` (the ``port.Domain``). Importing it reads
no file: ``POLICY``, ``TOOLS`` and ``DOMAIN_SPEC`` load on first use. ``python airline.py`` plays a
conversation offline.

How the policy (data/airline/policy.md) is kept, line by line:

Code: the gates, one per write tool (each check quotes its line below)
  "The user must provide their user id" / "The agent must first obtain the user id from the user"
      -> every gate: code writes ``user_id`` only when get_user_details finds the user the
         customer's own message named; the user, or the reservation's owner, must be that user
         and the reservation not cancelled (the agent acts for no other user)
  Book: "at most five passengers"; "first name, last name, and date of birth for each passenger";
      "All payment methods must already be in user profile"; "at most one travel certificate, at
      most one credit card, and at most three gift cards"; "Checked bag allowance" (the non-free
      bags are exactly those beyond membership x cabin x passengers); trip type, origin and
      destination (the flights connect from the origin to the destination, and back for a round
      trip)                                                              -> gate_book_reservation
  Cancel: "obtain the reason for cancellation"; "If any portion of the flight has already been
      flown, the agent cannot help"; then "within the last 24 hrs" (inclusive: created_at is at
      most 24 h before NOW), "cancelled by airline" (a flight of it has status cancelled), "a
      business flight", or "travel insurance and the reason ... is covered" (health or weather)
                                                                         -> gate_cancel_reservation
  Change flights: "Basic economy flights cannot be modified" (the cabin can change, the flights
      not); "without changing the origin, destination, and trip type"; "Cabin cannot be changed
      if any flight in the reservation has already been flown" (status landed or flying), and a
      flown flight stays; "a single gift card or credit card", "already in user profile"
                                                                 -> gate_update_reservation_flights
  Bags: "The user can add but not remove checked bags"; the allowance, as for a booking; the
      payment method in the profile, not a certificate (τ² refuses one)
                                                                -> gate_update_reservation_baggages
  Passengers: "cannot modify the number of passengers"; each named and dated
                                                              -> gate_update_reservation_passengers
  Compensation: to the user in the conversation, once; "Do not offer compensation for any other
      reason" (the complaint is a cancelled or a delayed flight); "Only compensate if the user is a
      silver/gold member or has travel insurance or flies business" (on that reservation); a
      cancelled flight in one of their reservations: exactly "$100 times the number of
      passengers"; a delayed one, only "after ... changing or cancelling the reservation" in this
      conversation: exactly "$50 times" (the flights a change replaced are remembered with the
      write, ``_remember``)                                              -> gate_send_certificate
  "The user cannot add insurance after initial booking", "changing cabin for just one flight
      segment is not possible", "Cabin class must be the same across all the flights": no τ²
      write tool can express them (no insurance argument after booking, one cabin per call)

Facts only the customer can state (``FACT_FIELDS``): the reason for a cancellation (the policy
makes the agent obtain it, and insurance covers only some reasons) and what a complaint is about
(compensation is only for a cancelled or a delayed flight). The model reads them from the
customer's messages; the gates hold them against the database (a claimed "airline cancelled"
reason counts only if the database shows a cancelled flight).

The confirmation: the field ``confirmed`` (port.CONFIRM_FIELDS), an explicit yes to the listed
change, before every write ("you must list the action details and obtain explicit user
confirmation"); ``check_words=True`` also checks the customer's own message for the yes.

Left to the model (``GUIDANCE`` and the policy it reads), because code cannot see them:
  - not giving information or procedures the user or the tools did not give, nor opinions:
    a property of the wording of each reply
  - one tool call at a time, no reply beside a call: the port's instruction, a property of a
    model reply
  - transferring to a human "if and only if" the request is out of scope, then the fixed
    message: whether a request is in scope is judgement (the transfer tool writes nothing)
  - asking for the trip type, origin, destination, passengers and insurance, and helping find a
    reservation id: the order of a conversation; the gates check what is proposed, not the path
  - "Do not add checked bags that the user does not need": only the customer knows what they need
  - "Do not proactively offer a compensation unless the user explicitly asks for one": who spoke
    of compensation first is in the wording; the gate checks the complaint and the amount
  - the refund's 5 to 7 business days, a certificate's remainder not being refunded: facts to
    tell the customer, not conditions of a write
"""
from __future__ import annotations

import copy
import datetime as _dt
import re
import sys

import airline_tools as _air
import play
import port

# The interface ###############################################################################

DOMAIN = _air.DOMAIN
NOW = _air.NOW
FIRST_MESSAGE = port.FIRST_MESSAGE
CONFIRM_FIELDS = port.CONFIRM_FIELDS
load_db = _air.load_db
execute = _air.execute          # τ²'s raw semantics: no gate

# What only the customer can state; the gates read them (port.Facts.said).
FACT_FIELDS = {
    # "The agent must also obtain the reason for cancellation (change of plan, airline cancelled
    # flight, or other reasons)", and insurance refunds only "given health or weather reasons".
    "cancel_reason": {
        "type": "string",
        "enum": ["change_of_plan", "airline_cancelled_flight", "health", "weather", "other"],
        "description": "Why the customer wants to cancel, as they say it: a change of plan, a "
                       "flight the airline cancelled, their health, the weather, or another "
                       "reason.",
    },
    # "If the user complains about cancelled flights ... delayed flights ..." and "Do not offer
    # compensation for any other reason than the ones listed above."
    "complaint": {
        "type": "string",
        "enum": ["cancelled_flight", "delayed_flight", "other"],
        "description": "What the customer complains about when they ask for compensation: a "
                       "cancelled flight, a delayed flight, or something else.",
    },
}

GUIDANCE = (
    "The code checks every change against the policy; you still follow the rules it cannot see. "
    "Give no information, procedure, recommendation or opinion that neither the user nor a tool "
    "gave. Before booking, ask for the trip type, origin and destination, each passenger's first "
    "name, last name and date of birth, and whether they want travel insurance; add no checked "
    "bag the user does not need. Help find a reservation id with the tools. Never offer "
    "compensation unless the user explicitly asks for one. Transfer to a human agent if and "
    "only if the request is outside what your tools can do: call transfer_to_human_agents, then "
    "send 'YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.'")

# Reading the database ########################################################################

CABINS = ("basic_economy", "economy", "business")
FLOWN = ("landed", "flying")     # "flying: the flight has taken off"; landed flew before it
COVERED_REASONS = ("health", "weather")
MAX_PASSENGERS = 5
# "Checked bag allowance": free bags per passenger, by the booking user's membership and cabin.
FREE_BAGS = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
PAYMENT_LIMITS = {"certificate": 1, "credit_card": 1, "gift_card": 3}
DAY = _dt.timedelta(hours=24)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _status(db: dict, number: str, date: str) -> str | None:
    """A flight's status on a date, or None when the database has no such flight date."""
    day = db["flights"].get(number, {}).get("dates", {}).get(date)
    return day["status"] if day else None


def _flown(db: dict, reservation: dict) -> list:
    """The reservation's segments that have taken off."""
    return [s for s in reservation["flights"]
            if _status(db, s["flight_number"], s["date"]) in FLOWN]


def _segments(flights) -> list | None:
    """``[(flight_number, date)]`` of a flights argument, or None when it is not a list of those."""
    if not isinstance(flights, list) or not flights:
        return None
    if not all(isinstance(f, dict) and isinstance(f.get("flight_number"), str)
               and isinstance(f.get("date"), str) for f in flights):
        return None
    return [(f["flight_number"], f["date"]) for f in flights]


def _route_problem(db: dict, segments: list, origin, destination, flight_type) -> str | None:
    """Whether the flights make the trip: one way from origin to destination, or there and back."""
    legs = []
    for number, _date in segments:
        flight = db["flights"].get(number)
        if flight is None:
            return f"flight {number} does not exist"
        legs.append((flight["origin"], flight["destination"]))
    if any(legs[i][1] != legs[i + 1][0] for i in range(len(legs) - 1)):
        return "the flights do not connect"
    if legs[0][0] != origin:
        return f"the first flight does not leave from {origin}"
    if flight_type == "one_way" and legs[-1][1] != destination:
        return f"the last flight does not arrive in {destination}"
    if flight_type == "round_trip" and (legs[-1][1] != origin
                                        or all(leg[1] != destination for leg in legs[:-1])):
        return f"the flights do not go from {origin} to {destination} and back"
    return None


def _passengers_problem(passengers) -> str | None:
    """Each passenger as "The agent needs to collect" them: "the first name, last name, and date of
    birth for each passenger"."""
    if not isinstance(passengers, list) or not passengers:
        return "the passengers must be a list of first name, last name and date of birth"
    for p in passengers:
        if not (isinstance(p, dict) and all(isinstance(p.get(k), str) and p[k].strip()
                                            for k in ("first_name", "last_name", "dob"))):
            return "each passenger needs a first name, last name, and date of birth"
        if not _is_date(p["dob"]):
            return f"the date of birth {p['dob']!r} is not a date (YYYY-MM-DD)"
    return None


def _is_date(text: str) -> bool:
    if not _DATE.fullmatch(text):
        return False
    try:
        _dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _count(value) -> bool:
    """A bag count τ² can store: a whole number, not negative (True and 2.0 are not)."""
    return type(value) is int and value >= 0


def _free_bags(db: dict, user_id: str, cabin: str, passengers: int) -> int:
    return FREE_BAGS[db["users"][user_id]["membership"]][cabin] * passengers


def _bags_problem(db: dict, user_id: str, cabin: str, passengers: int, total,
                  nonfree) -> str | None:
    """"Checked bag allowance" by membership and cabin; "Each extra baggage is 50 dollars.\""""
    if not (_count(total) and _count(nonfree)):
        return "the bag counts must be whole numbers, not negative"
    free = _free_bags(db, user_id, cabin, passengers)
    if nonfree != max(0, total - free):
        membership = db["users"][user_id]["membership"]
        due = max(0, total - free)
        return (f"a {membership} member in {cabin} has {free} free checked bags for {passengers} "
                f"passenger(s), so {total} bags have {due} non-free, not {nonfree}")
    return None


def _profile_payment(db: dict, user_id: str, payment_id) -> dict | None:
    if not isinstance(payment_id, str):
        return None
    return db["users"][user_id]["payment_methods"].get(payment_id)


def _who(facts: port.Facts) -> str | None:
    """"The agent must first obtain the user id from the user": refused until code knows them."""
    if not facts.user_id:
        return "the user id must be obtained from the user first"
    return None


def _own_reservation(db: dict, reservation_id,
                     facts: port.Facts) -> tuple[dict | None, str | None]:
    """The reservation, when it is the authenticated user's and still active; else the refusal."""
    refusal = _who(facts)
    if refusal:
        return None, refusal
    reservations = db["reservations"]
    reservation = reservations.get(reservation_id) if isinstance(reservation_id, str) else None
    if reservation is None:
        return None, f"reservation {reservation_id} not found"
    # The user "must provide their user id": the agent acts for that user and no other.
    if reservation["user_id"] != facts.user_id:
        return None, ("the reservation belongs to another user; the agent acts only for the user "
                      "who gave their user id")
    if reservation.get("status") == "cancelled":
        return None, "the reservation is already cancelled"
    return reservation, None


def _elapsed(since: str, now: str) -> _dt.timedelta:
    return _dt.datetime.fromisoformat(now) - _dt.datetime.fromisoformat(since)


# The gates: one per write tool ###############################################################
# Each is (db, arguments, facts) -> the refusal, in the policy's words, or None.

def gate_book_reservation(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Book flight."""
    refusal = _who(facts)
    if refusal:
        return refusal
    user_id = args.get("user_id")
    if user_id != facts.user_id:         # the user id "from the user": book for them only
        return ("a reservation is booked under the user id the user gave; the agent acts for no "
                "other user")
    if args.get("flight_type") not in ("one_way", "round_trip"):
        return "the trip type is one way or round trip"
    cabin = args.get("cabin")
    if cabin not in CABINS:              # "Cabin class must be the same across all the flights"
        return "the cabin is one of basic_economy, economy, business, the same for all flights"
    if args.get("insurance") not in ("yes", "no"):
        return "travel insurance is yes or no"
    passengers = args.get("passengers")
    refusal = _passengers_problem(passengers)
    if refusal:
        return refusal
    if len(passengers) > MAX_PASSENGERS:      # "Each reservation can have at most five passengers."
        return "Each reservation can have at most five passengers."
    segments = _segments(args.get("flights"))
    if segments is None:
        return "the flights must be a list of flight numbers and dates"
    refusal = _route_problem(db, segments, args.get("origin"), args.get("destination"),
                             args["flight_type"])
    if refusal:
        return refusal
    refusal = _bags_problem(db, user_id, cabin, len(passengers),
                            args.get("total_baggages"), args.get("nonfree_baggages"))
    if refusal:
        return refusal
    return _booking_payment_problem(db, user_id, args.get("payment_methods"))


def _booking_payment_problem(db: dict, user_id: str, payments) -> str | None:
    """## Book flight, Payment."""
    if not isinstance(payments, list) or not payments or not all(
            isinstance(p, dict) and isinstance(p.get("payment_id"), str) for p in payments):
        return "the payment methods must be a list of payment ids and amounts"
    ids = [p["payment_id"] for p in payments]
    if len(set(ids)) != len(ids):
        return "each payment method is used once"
    used = {source: 0 for source in PAYMENT_LIMITS}
    for payment in payments:
        method = _profile_payment(db, user_id, payment["payment_id"])
        # "All payment methods must already be in user profile for safety reasons."
        if method is None:
            return (f"payment method {payment['payment_id']} is not in the user profile; all "
                    "payment methods must already be in user profile for safety reasons")
        amount = payment.get("amount")
        if type(amount) not in (int, float) or amount <= 0:
            return f"the amount for {payment['payment_id']} must be a positive number"
        used[method["source"]] += 1
    # "Each reservation can use at most one travel certificate, at most one credit card, and at
    # most three gift cards."
    if any(used[source] > limit for source, limit in PAYMENT_LIMITS.items()):
        return ("Each reservation can use at most one travel certificate, at most one credit card, "
                "and at most three gift cards.")
    return None


def gate_cancel_reservation(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Cancel flight."""
    reservation, refusal = _own_reservation(db, args.get("reservation_id"), facts)
    if refusal:
        return refusal
    # "The agent must also obtain the reason for cancellation"
    reason = facts.said.get("cancel_reason")
    if not reason:
        return ("the reason for cancellation is needed (change of plan, airline cancelled flight, "
                "or other reasons)")
    # "If any portion of the flight has already been flown, the agent cannot help and transfer
    # is needed."
    if _flown(db, reservation):
        return ("a portion of the flight has already been flown: the agent cannot cancel it, "
                "transfer is needed")
    # "Otherwise, flight can be cancelled if any of the following is true:"
    if _elapsed(reservation["created_at"], facts.now) <= DAY:        # "within the last 24 hrs"
        return None
    if any(_status(db, s["flight_number"], s["date"]) == "cancelled"
           for s in reservation["flights"]):
        return None                                                    # "cancelled by airline"
    if reservation["cabin"] == "business":                            # "It is a business flight"
        return None
    # "The user has travel insurance and the reason for cancellation is covered by insurance."
    # Insurance "enables full refund if the user needs to cancel the flight given health or
    # weather reasons".
    if reservation["insurance"] == "yes" and reason in COVERED_REASONS:
        return None
    return ("the reservation cannot be cancelled: it was not booked within the last 24 hrs, no "
            "flight in it was cancelled by the airline, it is not a business flight, and "
            + ("travel insurance does not cover the reason given (only health or weather)"
               if reservation["insurance"] == "yes" else "the user has no travel insurance"))


def gate_update_reservation_flights(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Modify flight: change flights, change cabin, payment."""
    reservation, refusal = _own_reservation(db, args.get("reservation_id"), facts)
    if refusal:
        return refusal
    cabin = args.get("cabin")
    if cabin not in CABINS:    # "Cabin class must remain the same across all the flights"
        return ("the cabin is one of basic_economy, economy, business, for all flights of the "
                "reservation")
    segments = _segments(args.get("flights"))
    if segments is None:
        return "the flights must be a list of flight numbers and dates"
    before = [(s["flight_number"], s["date"]) for s in reservation["flights"]]
    if segments != before:
        # "Basic economy flights cannot be modified."
        if reservation["cabin"] == "basic_economy":
            return ("Basic economy flights cannot be modified (the cabin can change, without "
                    "changing the flights).")
        # "Other reservations can be modified without changing the origin, destination, and
        # trip type."
        if _route_problem(db, segments, reservation["origin"], reservation["destination"],
                          reservation["flight_type"]):
            return ("the origin, destination, and trip type cannot be changed: the new flights "
                    f"must go from {reservation['origin']} to {reservation['destination']}"
                    + (" and back" if reservation["flight_type"] == "round_trip" else ""))
    flown = _flown(db, reservation)
    # "Cabin cannot be changed if any flight in the reservation has already been flown."
    if cabin != reservation["cabin"] and flown:
        return "Cabin cannot be changed if any flight in the reservation has already been flown."
    # A flown segment is history: it can only be kept ("Some flight segments can be kept").
    if any((s["flight_number"], s["date"]) not in segments for s in flown):
        return "a flight that has already been flown cannot be changed"
    # "the user needs to provide a single gift card or credit card for payment or refund method.
    # The payment method must already be in user profile for safety reasons."
    return _update_payment_problem(db, reservation["user_id"], args.get("payment_id"))


def _update_payment_problem(db: dict, user_id: str, payment_id) -> str | None:
    method = _profile_payment(db, user_id, payment_id)
    if method is None:
        return (f"payment method {payment_id} is not in the user profile; the payment method "
                "must already be in user profile for safety reasons")
    if method["source"] not in ("gift_card", "credit_card"):
        return ("a change is paid or refunded with a single gift card or credit card, not a travel "
                "certificate")
    return None


def gate_update_reservation_baggages(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Modify flight: change baggage."""
    reservation, refusal = _own_reservation(db, args.get("reservation_id"), facts)
    if refusal:
        return refusal
    total, nonfree = args.get("total_baggages"), args.get("nonfree_baggages")
    # "The user can add but not remove checked bags."
    if _count(total) and total < reservation["total_baggages"]:
        return (f"The user can add but not remove checked bags: the reservation has "
                f"{reservation['total_baggages']} checked bags.")
    refusal = _bags_problem(db, reservation["user_id"], reservation["cabin"],
                            len(reservation["passengers"]), total, nonfree)
    if refusal:
        return refusal
    return _update_payment_problem(db, reservation["user_id"], args.get("payment_id"))


def gate_update_reservation_passengers(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Modify flight: change passengers."""
    reservation, refusal = _own_reservation(db, args.get("reservation_id"), facts)
    if refusal:
        return refusal
    passengers = args.get("passengers")
    refusal = _passengers_problem(passengers)
    if refusal:
        return refusal
    # "The user can modify passengers but cannot modify the number of passengers."
    if len(passengers) != len(reservation["passengers"]):
        return ("The user can modify passengers but cannot modify the number of passengers "
                f"({len(reservation['passengers'])}); even a human agent cannot.")
    return None


def gate_send_certificate(db: dict, args: dict, facts: port.Facts) -> str | None:
    """## Refunds and Compensation."""
    refusal = _who(facts)
    if refusal:
        return refusal
    if args.get("user_id") != facts.user_id:
        return "compensation goes only to the user who gave their user id"
    # A gesture for the complaint, once: "the agent can offer a certificate as a gesture"
    if any(write["name"] == "send_certificate" for write in facts.done):
        return "a certificate was already sent in this conversation; compensation is offered once"
    # "Do not offer compensation for any other reason than the ones listed above."
    complaint = facts.said.get("complaint")
    if complaint not in ("cancelled_flight", "delayed_flight"):
        return ("Do not offer compensation for any other reason than the ones listed above: a "
                "complaint about a cancelled flight, or about a delayed flight with the "
                "reservation changed or cancelled.")
    amount = args.get("amount")
    if type(amount) not in (int, float):
        return "the amount must be a number"
    offers = _compensations(db, facts, complaint)
    if not offers:
        return _no_compensation(db, facts, complaint)
    if amount not in offers.values():
        due = ", ".join(f"{rid}: ${value}" for rid, value in sorted(offers.items()))
        per = 100 if complaint == "cancelled_flight" else 50
        return f"the amount must be ${per} times the number of passengers ({due}), not {amount}"
    return None


def _compensations(db: dict, facts: port.Facts, complaint: str) -> dict:
    """reservation id -> the certificate its complaint earns, for each of the user's reservations
    the policy compensates."""
    # The reservations changed or cancelled in this conversation, with the flight statuses they
    # had before (a change may have replaced the delayed flight).
    touched: dict = {}
    for write in facts.done:
        if write["name"] in ("update_reservation_flights", "cancel_reservation"):
            before = write.get("before") or {}
            touched.setdefault(write["arguments"].get("reservation_id"), set()).update(
                status for _number, _date, status in before.get("flights", []))
    offers = {}
    for rid in db["users"][facts.user_id]["reservations"]:
        reservation = db["reservations"].get(rid)
        if reservation is None or not _may_compensate(db, reservation):
            continue
        statuses = {_status(db, s["flight_number"], s["date"]) for s in reservation["flights"]}
        passengers = len(reservation["passengers"])
        # "complains about cancelled flights in a reservation ... $100 times the number of
        # passengers"
        if complaint == "cancelled_flight" and "cancelled" in statuses:
            offers[rid] = 100 * passengers
        # "complains about delayed flights in a reservation and wants to change or cancel the
        # reservation ... after ... changing or cancelling the reservation ... $50 times"
        had = statuses | touched[rid] if rid in touched else set()      # not touched: nothing
        if complaint == "delayed_flight" and "delayed" in had:
            offers[rid] = 50 * passengers
    return offers


def _may_compensate(db: dict, reservation: dict) -> bool:
    """"Only compensate if the user is a silver/gold member or has travel insurance or flies
    business" (on the reservation complained about)."""
    return (db["users"][reservation["user_id"]]["membership"] in ("silver", "gold")
            or reservation["insurance"] == "yes" or reservation["cabin"] == "business")


def _no_compensation(db: dict, facts: port.Facts, complaint: str) -> str:
    """Why nothing earns compensation, in the policy's words."""
    flights = "cancelled" if complaint == "cancelled_flight" else "delayed"
    mine = [db["reservations"][rid] for rid in db["users"][facts.user_id]["reservations"]
            if rid in db["reservations"]]
    with_flight = [r for r in mine if any(_status(db, s["flight_number"], s["date"]) == flights
                                          for s in r["flights"])]
    if with_flight and not any(_may_compensate(db, r) for r in with_flight):
        return ("Do not compensate if the user is regular member and has no travel insurance and "
                "flies (basic) economy.")
    if complaint == "delayed_flight" and with_flight:
        return ("compensation for a delayed flight comes only after changing or cancelling the "
                "reservation in this conversation")
    return f"none of the user's reservations has a {flights} flight the policy compensates"


GATES = {
    "book_reservation": gate_book_reservation,
    "cancel_reservation": gate_cancel_reservation,
    "update_reservation_flights": gate_update_reservation_flights,
    "update_reservation_baggages": gate_update_reservation_baggages,
    "update_reservation_passengers": gate_update_reservation_passengers,
    "send_certificate": gate_send_certificate,
}

# What the customer confirms ##################################################################


def _remember(db: dict, name: str, args: dict) -> dict | None:
    """Before a flight change or a cancellation: the reservation's flights and their statuses,
    for the delayed-flight compensation that may follow (port.Domain.remember)."""
    if name not in ("update_reservation_flights", "cancel_reservation"):
        return None
    reservation = db["reservations"].get(args.get("reservation_id"))
    if reservation is None:
        return None
    return {"flights": [[s["flight_number"], s["date"], _status(db, s["flight_number"], s["date"])]
                        for s in reservation["flights"]]}


def _authenticate(arguments: dict, result, messages: list) -> str | None:
    """get_user_details proves the user when the customer's own words give the user id."""
    user_id = arguments.get("user_id")
    found = isinstance(result, dict) and result.get("user_id") == user_id
    return user_id if found and port.said_in(user_id, messages) else None


def _describe(db: dict, name: str, args: dict) -> str:
    """The change in words, with what τ²'s tool would charge (run on a copy of what it touches)."""
    try:
        return _charge(db, name, args)
    except _air.ToolError as error:
        return f"The airline system will refuse this: {port.tool_message(error)}"


def _charge(db: dict, name: str, args: dict) -> str:
    sandbox = _sandbox(db, args)
    rid = args.get("reservation_id")
    reservation = sandbox["reservations"].get(rid)
    before = len(reservation["payment_history"]) if reservation else 0
    result = _air.execute(sandbox, name, args)
    if name == "book_reservation":
        total = sum(p["amount"] for p in result["payment_history"])
        return f"Book a new reservation; total price ${total}."
    if name == "send_certificate":
        return f"Send a certificate of ${args.get('amount')} to {args.get('user_id')}."
    if name == "cancel_reservation":
        refund = -sum(p["amount"] for p in result["payment_history"][before:])
        return f"Cancel reservation {rid}; ${refund} goes back to the original payment methods."
    lines = result["payment_history"][before:] if isinstance(result, dict) else []
    if not lines:
        return f"Change reservation {rid}; no charge."
    amount = lines[0]["amount"]
    verb = "charge" if amount > 0 else "refund"
    return f"Change reservation {rid}; {verb} ${abs(amount)} to {lines[0]['payment_id']}."


def _sandbox(db: dict, args: dict) -> dict:
    """A copy of the part of ``db`` a write touches: its reservation, user and flights."""
    out = {"flights": {}, "users": {}, "reservations": {}}
    rid = args.get("reservation_id")
    reservation = db["reservations"].get(rid) if isinstance(rid, str) else None
    if reservation:
        out["reservations"][reservation["reservation_id"]] = copy.deepcopy(reservation)
    user_id = reservation["user_id"] if reservation else args.get("user_id")
    if isinstance(user_id, str) and user_id in db["users"]:
        out["users"][user_id] = copy.deepcopy(db["users"][user_id])
    for flight in args.get("flights") or []:
        number = flight.get("flight_number") if isinstance(flight, dict) else None
        if isinstance(number, str) and number in db["flights"]:
            out["flights"][number] = copy.deepcopy(db["flights"][number])
    return out


def _summaries() -> dict:
    return {name: (lambda db, args, name=name: _describe(db, name, args)) for name in GATES}


# The agent ###################################################################################

def _domain() -> port.Domain:
    return port.Domain(name=DOMAIN, policy=_air.POLICY, now=NOW, tools=_air.TOOLS,
                       execute=_air.execute, output_text=_air.output_text,
                       tool_error=_air.ToolError, gates=GATES,
                       facts=FACT_FIELDS, authenticate={"get_user_details": _authenticate},
                       summaries=_summaries(), guidance=GUIDANCE, remember=_remember)


_LAZY: dict = {}


def __getattr__(name: str):
    """``POLICY`` (verbatim), ``TOOLS`` (τ² name -> kind, parameters, via) and ``DOMAIN_SPEC``,
    on first use."""
    if name == "POLICY":
        return _air.POLICY
    if name not in ("TOOLS", "DOMAIN_SPEC"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "DOMAIN_SPEC" not in _LAZY:
        _LAZY["DOMAIN_SPEC"] = _domain()
        _LAZY["TOOLS"] = port.interface_tools(_LAZY["DOMAIN_SPEC"])
    return _LAZY[name]


def build_agent(db: dict, provider, clock, *, on_write=None, check_words: bool = False,
                **options):
    """The airline agent over ``db`` (changed in place by confirmed, re-checked writes only).

    ``on_write(name, arguments, outcome)`` hears every write executed or refused: ``"ok"``,
    ``"refused:<reason>"`` or ``"error:<τ²'s message>"``. ``check_words=True`` counts a yes only
    when the customer's own message says one. ``options`` go to the falai agent.
    """
    return port.build(__getattr__("DOMAIN_SPEC"), db, provider, clock, on_write=on_write,
                      check_words=check_words, **options)


# The demo ####################################################################################

def main() -> None:
    """Task 19, offline: the customer authenticates, asks to move a basic economy flight
    (refused), then cancels the trip under her travel insurance because she feels unwell (listed,
    confirmed)."""
    task = next(t for t in _air.load_tasks() if t["id"] == "19")
    move = {"reservation_id": "Z7GOZK", "cabin": "basic_economy",
            "payment_id": "gift_card_2200803",
            "flights": [{"flight_number": "HAT188", "date": "2024-05-28"},
                        {"flight_number": "HAT149", "date": "2024-05-29"}]}
    conversation = [
        play.Say("Hi, I'm Olivia Gonzalez, user id olivia_gonzalez_2305.",
                 rounds=[[play.call("get_user_details", {"user_id": "olivia_gonzalez_2305"})]],
                 reply="Thank you, Olivia. How can I help?"),
        play.Say("On my Texas trip I need a later flight back to Newark, or the earliest one "
                 "the next day.",
                 rounds=[[play.call("get_reservation_details", {"reservation_id": "Z7GOZK"})],
                         [play.call(port.via("update_reservation_flights"), move)]],
                 reply="I'm sorry: Z7GOZK is basic economy, and basic economy flights cannot "
                       "be modified."),
        play.Say("Then cancel it. I feel unwell, and I have travel insurance.",
                 fields={"cancel_reason": "health"},
                 rounds=[[play.call(port.via("cancel_reservation"), {"reservation_id": "Z7GOZK"})]],
                 reply="I can cancel Z7GOZK and refund $169 to your original payment method. "
                       "Confirm (yes)?"),
        play.Say("Yes, please.", fields={port.CONFIRM_FIELD: True},
                 reply="Done: Z7GOZK is cancelled."),
    ]
    db = load_db()
    here = sys.modules[__name__]
    played = play.converse(here, db, conversation, check_words=True)
    play.show(here, conversation, played)
    same = _air.db_hash(db) == _air.db_hash(play.reference_db(here, task))
    print(f"\nThe db equals the one task 19's reference actions give: {same}")


if __name__ == "__main__":
    main()
