"""τ²-bench's airline tools over a plain-JSON database: its raw semantics, no policy.

τ²-bench (sierra-research/tau2-bench, MIT) gives a customer-service agent 14 airline tools over a
database of flights, users and reservations, and scores a conversation by a SHA-256 of the
database at its end. This module is those tools rewritten over plain JSON (the dicts and lists
of τ²'s ``FlightDB.model_dump()``), so that ``execute`` leaves the database, the tool's reply and
``db_hash`` exactly as τ² would: the checks τ² makes and only those, its error texts, and its
quirks (listed under "The tools"). What the airline policy forbids is not checked here; the
agent built on this module does that.

    import airline_tools as air
    db = air.load_db()                          # a fresh copy of the pinned database
    reply = air.execute(db, "get_reservation_details", {"reservation_id": "4OG6T3"})
    air.output_text(reply)                      # the text τ²'s agent reads
    air.db_hash(db)                             # τ²'s Environment.get_db_hash()

Standard library only, and importing it reads nothing: ``POLICY`` and ``TOOLS`` load from
``data/airline/`` the first time they are used (PEP 562), ``load_db()`` and ``load_tasks()`` on
every call. ``data/airline/SOURCES.json`` says where each file comes from.

Sections:
   1. Data ............. the pinned files, the hash
   2. Validation ....... pydantic's checks of the models the tools build, and their texts
   3. Lookups .......... users, reservations, flights, as τ²'s toolkit finds them
   4. The tools ........ one function per tool
   5. Calling a tool ... execute, output_text
"""
from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
import os
import re

DOMAIN = "airline"
NOW = "2024-05-15T15:00:00"    # τ²'s airline clock (AirlineTools._get_datetime), as the policy says

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "airline")


class ToolError(Exception):
    """A call τ² answers with an error: ``str(err)`` is the text its agent reads, "Error: ...".

    The database may have changed before the error where τ²'s does too (a gift card charged
    before its payment line fails, a certificate removed before a repeat of it is looked up).
    """


# 1. Data ########################################################################################

def load_db() -> dict:
    """A fresh copy of the pinned database, in τ²'s ``FlightDB.model_dump()`` shape."""
    with gzip.open(os.path.join(_DATA, "db.json.gz"), "rb") as fp:
        return json.load(fp)


def load_tasks() -> list[dict]:
    """τ²'s airline tasks.json, as it is."""
    with gzip.open(os.path.join(_DATA, "tasks.json.gz"), "rb") as fp:
        return json.load(fp)


def db_hash(db: dict) -> str:
    """τ²'s database hash: SHA-256 of the JSON text with sorted keys (tau2.utils.get_dict_hash)."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, default=str).encode()).hexdigest()


_LAZY: dict = {}


def __getattr__(name: str):
    """``POLICY`` (τ²'s policy text, verbatim) and ``TOOLS`` (tools.json), read on first use."""
    if name not in ("POLICY", "TOOLS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _LAZY:
        if name == "POLICY":
            with open(os.path.join(_DATA, "policy.md"), encoding="utf-8") as fp:   # as τ² reads it
                _LAZY[name] = fp.read()
        else:
            with open(os.path.join(_DATA, "tools.json"), encoding="utf-8") as fp:
                _LAZY[name] = json.load(fp)
    return _LAZY[name]


# 2. Validation ##################################################################################

# τ²'s tools build pydantic models from their arguments (FlightInfo(**flight), Passenger(**p),
# Payment(**p), Reservation(...), Certificate(...)). Validation coerces in pydantic's lax mode
# ("3" -> 3, 3.0 -> 3, 50 -> 50.0, True -> 1) and fails with pydantic's text, which the agent
# reads. A model is (name, fields); a field is (name, kind) or (name, kind, default); a kind is
# "str", "int", "float", "any", ("literal", options), ("model", model) or ("list", kind). Extra
# keys are dropped, as pydantic's default does. The texts are pydantic 2.12's (τ²'s pin).

_FLIGHT_INFO = ("FlightInfo", [("flight_number", "str"), ("date", "str")])
_PASSENGER = ("Passenger", [("first_name", "str"), ("last_name", "str"), ("dob", "str")])
_PAYMENT = ("Payment", [("payment_id", "str"), ("amount", "int")])
_CERTIFICATE = ("Certificate", [("source", ("literal", ("certificate",))), ("id", "str"),
                                ("amount", "float")])
_RESERVATION = ("Reservation", [
    ("reservation_id", "str"), ("user_id", "str"), ("origin", "str"), ("destination", "str"),
    ("flight_type", ("literal", ("round_trip", "one_way"))),
    ("cabin", ("literal", ("business", "economy", "basic_economy"))),
    ("flights", ("list", "any")), ("passengers", ("list", ("model", _PASSENGER))),
    ("payment_history", ("list", ("model", _PAYMENT))), ("created_at", "str"),
    ("total_baggages", "int"), ("nonfree_baggages", "int"),
    ("insurance", ("literal", ("yes", "no"))), ("status", ("literal", ("cancelled",)), None),
])

_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")      # what pydantic reads as an int


class _ValidationError(Exception):
    """pydantic's ValidationError, as ``str()`` shows it."""

    def __init__(self, title: str, errors: list):
        plural = "s" if len(errors) > 1 else ""
        lines = [f"{len(errors)} validation error{plural} for {title}"]
        for loc, message, code, value in errors:
            shown = repr(value)
            if len(shown) > 50:                      # pydantic-core shows a long input's two ends
                shown = shown[:25] + "..." + shown[-24:]
            lines += [".".join(str(part) for part in loc),
                      f"  {message} [type={code}, input_value={shown}, "
                      f"input_type={type(value).__name__}]",
                      f"    For further information visit https://errors.pydantic.dev/2.12/v/{code}"]
        super().__init__("\n".join(lines))


def _validated(model, data: dict) -> dict:
    """``Model(**data)``: the model's dict, or _ValidationError."""
    errors: list = []
    value = _check_model(model, data, (), errors)
    if errors:
        raise _ValidationError(model[0], errors)
    return value


def _check_model(model, data, loc, errors):
    name, fields = model
    if not isinstance(data, dict):
        errors.append((loc, f"Input should be a valid dictionary or instance of {name}",
                       "model_type", data))
        return None
    out = {}
    for field, kind, *default in fields:
        if field in data:
            out[field] = _check(kind, data[field], loc + (field,), errors)
        elif default:
            out[field] = default[0]
        else:
            errors.append((loc + (field,), "Field required", "missing", data))
    return out


def _check(kind, value, loc, errors):
    """One field in lax mode: the coerced value, or None with an error appended."""
    def fail(message, code):
        errors.append((loc, message, code, value))

    if kind == "any":
        return value
    if kind == "str":
        if isinstance(value, str):
            return value
        return fail("Input should be a valid string", "string_type")
    if kind == "int":
        if isinstance(value, (bool, int)):
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                return fail("Input should be a finite number", "finite_number")
            if value != int(value):
                return fail("Input should be a valid integer, got a number with a fractional part",
                            "int_from_float")
            if abs(value) >= 2 ** 63:
                return fail("Unable to parse input string as an integer, exceeded maximum size",
                            "int_parsing_size")
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            if _INT_TEXT.fullmatch(text):
                return int(text.split(".")[0].replace("_", ""))
            return fail("Input should be a valid integer, unable to parse string as an integer",
                        "int_parsing")
        return fail("Input should be a valid integer", "int_type")
    if kind == "float":
        if isinstance(value, (bool, int, float)):
            return float(value)
        if isinstance(value, str):
            text = value.strip()
            if text.isascii():
                try:
                    return float(text)
                except ValueError:
                    pass
            return fail("Input should be a valid number, unable to parse string as a number",
                        "float_parsing")
        return fail("Input should be a valid number", "float_type")
    if kind[0] == "literal":
        if isinstance(value, str) and value in kind[1]:
            return value
        shown = [repr(option) for option in kind[1]]
        expected = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
        return fail(f"Input should be {expected}", "literal_error")
    if kind[0] == "model":
        return _check_model(kind[1], value, loc, errors)
    if kind[0] == "list":
        if not isinstance(value, list):
            return fail("Input should be a valid list", "list_type")
        return [_check(kind[1], item, loc + (i,), errors) for i, item in enumerate(value)]
    raise AssertionError(kind)


def _items(value) -> list:
    """What ``for x in value`` goes over, for a JSON value (Python's TypeError for the rest)."""
    if isinstance(value, (list, str, dict)):
        return list(value)
    raise TypeError(f"'{type(value).__name__}' object is not iterable")


def _models_if_all_dicts(value, model):
    """τ²'s ``if all(isinstance(x, dict) for x in value): value = [Model(**x) for x in value]``.

    Returns (value, converted). Unconverted, the value stays as given and its items are not
    models: reading a field of one fails as Python's attribute error does (_field).
    """
    items = _items(value)
    if all(isinstance(item, dict) for item in items):
        return [_validated(model, item) for item in items], True
    return value, False


def _field(item, name: str, converted: bool):
    """``item.name`` for an item of a list _models_if_all_dicts converted, or did not."""
    if not converted:
        raise AttributeError(f"'{type(item).__name__}' object has no attribute '{name}'")
    return item[name]


# 3. Lookups #####################################################################################

class _Refusal(Exception):
    """A ValueError τ²'s tool raises itself; its text follows "Error: "."""


def _user(db: dict, user_id) -> dict:
    if user_id not in db["users"]:
        raise _Refusal(f"User {user_id} not found")
    return db["users"][user_id]


def _reservation(db: dict, reservation_id) -> dict:
    if reservation_id not in db["reservations"]:
        raise _Refusal(f"Reservation {reservation_id} not found")
    return db["reservations"][reservation_id]


def _flight(db: dict, flight_number) -> dict:
    if flight_number not in db["flights"]:
        raise _Refusal(f"Flight {flight_number} not found")
    return db["flights"][flight_number]


def _flight_day(db: dict, flight_number, date) -> dict:
    """One date of a flight: its status, and its seats and prices when available."""
    flight = _flight(db, flight_number)
    if date not in flight["dates"]:
        raise _Refusal(f"Flight {flight_number} not found on date {date}")
    return flight["dates"][date]


def _direct_flights(db: dict, date, origin=None, destination=None, leave_after=None) -> list:
    """The flights available on ``date``, as DirectFlight dicts (date unset), in the db's order.

    A None origin or destination matches any; ``leave_after`` compares departure times as text.
    """
    found = []
    for flight in db["flights"].values():
        if ((origin is None or flight["origin"] == origin)
                and (destination is None or flight["destination"] == destination)
                and date in flight["dates"]
                and flight["dates"][date]["status"] == "available"
                and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after)):
            day = flight["dates"][date]
            found.append({
                "flight_number": flight["flight_number"], "origin": flight["origin"],
                "destination": flight["destination"], "status": "available",
                "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
                "date": None, "available_seats": dict(day["available_seats"]),
                "prices": dict(day["prices"]),
            })
    return found


def _charge_for_update(user: dict, payment_id, total_price):
    """Charge (refund, when negative) a change: the payment line to append, or None at 0.

    A certificate is refused even at 0. A gift card is charged before the payment line is
    built, so a fractional price (from a fractional bag count) leaves the card charged and
    fails with pydantic's int error.
    """
    if payment_id not in user["payment_methods"]:
        raise _Refusal("Payment method not found")
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        raise _Refusal("Certificate cannot be used to update reservation")
    elif method["source"] == "gift_card" and method["amount"] < total_price:
        raise _Refusal("Gift card balance is not enough")
    if method["source"] == "gift_card":
        method["amount"] -= total_price
    if total_price != 0:
        return _validated(_PAYMENT, {"payment_id": payment_id, "amount": total_price})
    return None


# 4. The tools ###################################################################################

# Each takes the database and τ²'s arguments as given (coerced only where τ² coerces) and returns
# the model_dump() of what τ²'s tool returns. The quirks kept on purpose:
# - book_reservation: the new ids are HATHAT, HATHAU, HATHAV, then "Too many reservations"; a
#   certificate is removed whole whatever part of it pays; the same gift card twice can take it
#   below zero; the same certificate twice fails with KeyError's text after the methods before
#   it were charged; the same flight twice is priced and seated twice; the route, trip type and
#   flights are not checked against one another; a string nonfree_baggages passes Reservation
#   (coerced) and then fails the price sum.
# - cancel_reservation: refunds every payment line (again on a second cancel), frees no seat.
# - update_reservation_flights: takes no seat and frees none; a kept segment (same number, date
#   and cabin) keeps its old price even if it has flown; a cheaper change is a negative payment
#   line (a gift card gets it back); the cabin is stored as given.
# - update_reservation_baggages and _passengers store their arguments as given (a count as a
#   string or a float, passengers as strings when there are as many as before).
# - send_certificate: the ids are certificate_3221322, _3221323, _3221324, then "Too many
#   certificates"; nothing else is checked; the reply echoes the amount as given.
# - search_onestop_flight: a first leg arriving "+1" looks for the second on f"2024-05-{day+1}".
# - calculate: Python's eval over digits, + - * / ( ) . and spaces, so ** works too.

_NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
_NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
_AIRPORTS = [("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"),
             ("ORD", "Chicago"), ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"),
             ("ATL", "Atlanta"), ("MIA", "Miami"), ("BOS", "Boston"), ("PHX", "Phoenix"),
             ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"), ("EWR", "Newark"),
             ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
             ("PHL", "Philadelphia"), ("LGA", "LaGuardia")]


def book_reservation(db, user_id, origin, destination, flight_type, cabin, flights, passengers,
                     payment_methods, total_baggages, nonfree_baggages, insurance):
    """Book a reservation.

    Checks, in τ²'s order: each flight exists on its date, is available and has a seat in the
    cabin for each passenger; each payment method is the user's, and a gift card or certificate
    covers its amount; the amounts add up to the price (the cabin's price per passenger and
    flight, 30 per passenger for insurance, 50 per non-free bag). Then charges the payment
    methods (a certificate is removed), takes the seats and stores the reservation.
    """
    flights, flights_are_models = _models_if_all_dicts(flights, _FLIGHT_INFO)
    passengers, _ = _models_if_all_dicts(passengers, _PASSENGER)
    payment_methods, _ = _models_if_all_dicts(payment_methods, _PAYMENT)
    user = _user(db, user_id)
    reservation_id = next((rid for rid in _NEW_RESERVATION_IDS if rid not in db["reservations"]),
                          None)
    if reservation_id is None:
        raise _Refusal("Too many reservations")
    reservation = _validated(_RESERVATION, {
        "reservation_id": reservation_id, "user_id": user_id, "origin": origin,
        "destination": destination, "flight_type": flight_type, "cabin": cabin, "flights": [],
        "passengers": copy.deepcopy(passengers), "payment_history": copy.deepcopy(payment_methods),
        "created_at": NOW, "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    })
    # Reservation has validated the passengers and payments: from here they are models.
    total_price = 0
    days = []
    for info in _items(flights):
        number = _field(info, "flight_number", flights_are_models)
        flight = _flight(db, number)
        day = _flight_day(db, number, info["date"])
        if day["status"] != "available":
            raise _Refusal(f"Flight {number} not available on date {info['date']}")
        if day["available_seats"][cabin] < len(passengers):
            raise _Refusal(f"Not enough seats on flight {number}")
        price = day["prices"][cabin]
        reservation["flights"].append({"flight_number": number, "origin": flight["origin"],
                                       "destination": flight["destination"], "date": info["date"],
                                       "price": price})
        days.append(day)
        total_price += price * len(passengers)
    if insurance == "yes":
        total_price += 30 * len(passengers)
    total_price += 50 * nonfree_baggages         # the argument as given: a string fails here
    for payment in payment_methods:
        payment_id = payment["payment_id"]
        if payment_id not in user["payment_methods"]:
            raise _Refusal(f"Payment method {payment_id} not found")
        method = user["payment_methods"][payment_id]
        has_balance = method["source"] in {"gift_card", "certificate"}
        if has_balance and method["amount"] < payment["amount"]:
            raise _Refusal(f"Not enough balance in payment method {payment_id}")
    total_payment = sum(payment["amount"] for payment in payment_methods)
    if total_payment != total_price:
        raise _Refusal(f"Payment amount does not add up, total price is {total_price}, "
                       f"but paid {total_payment}")
    for payment in payment_methods:
        # a certificate paid with twice is gone the second time: KeyError
        method = user["payment_methods"][payment["payment_id"]]
        if method["source"] == "gift_card":
            method["amount"] -= payment["amount"]
        elif method["source"] == "certificate":
            user["payment_methods"].pop(payment["payment_id"])
    for day in days:
        day["available_seats"][cabin] -= len(passengers)
    db["reservations"][reservation_id] = reservation
    db["users"][user_id]["reservations"].append(reservation_id)
    return reservation


def calculate(db, expression):
    """Calculate a math expression (digits, + - * / ( ) . and spaces), rounded to 2 places."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise _Refusal("Invalid characters in expression")
    return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))


def cancel_reservation(db, reservation_id):
    """Cancel the whole reservation: a negative line for each payment line, status "cancelled"."""
    reservation = _reservation(db, reservation_id)
    refunds = [_validated(_PAYMENT, {"payment_id": line["payment_id"], "amount": -line["amount"]})
               for line in reservation["payment_history"]]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return reservation


def get_reservation_details(db, reservation_id):
    """Get the details of a reservation."""
    return _reservation(db, reservation_id)


def get_user_details(db, user_id):
    """Get the details of a user, including their reservations."""
    return _user(db, user_id)


def list_all_airports(db):
    """Returns a list of all available airports."""
    return [{"iata": iata, "city": city} for iata, city in _AIRPORTS]


def search_direct_flight(db, origin, destination, date):
    """Search for direct flights between two cities on a specific date."""
    return _direct_flights(db, date, origin=origin, destination=destination)


def search_onestop_flight(db, origin, destination, date):
    """Search for one-stop flights between two cities on a date: [first, second] leg pairs."""
    pairs = []
    for first in _direct_flights(db, date, origin=origin):
        first["date"] = date
        overnight = "+1" in first["scheduled_arrival_time_est"]
        date2 = f"2024-05-{int(date[-2:]) + 1}" if overnight else date
        for second in _direct_flights(db, date2, origin=first["destination"],
                                      destination=destination,
                                      leave_after=first["scheduled_arrival_time_est"]):
            second["date"] = date2
            pairs.append([first, second])
    return pairs


def send_certificate(db, user_id, amount):
    """Send a certificate to a user: the first free id of three, its amount stored as a float."""
    user = _user(db, user_id)
    for payment_id in _NEW_CERTIFICATE_IDS:
        if payment_id not in user["payment_methods"]:
            user["payment_methods"][payment_id] = _validated(
                _CERTIFICATE, {"id": payment_id, "amount": amount, "source": "certificate"})
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    raise _Refusal("Too many certificates")


def transfer_to_human_agents(db, summary):
    """Transfer the user to a human agent, with a summary of the user's issue."""
    return "Transfer successful"


def update_reservation_baggages(db, reservation_id, total_baggages, nonfree_baggages, payment_id):
    """Update the bags of a reservation: 50 for each non-free bag added; fewer refund nothing."""
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    total_price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    payment = _charge_for_update(user, payment_id, total_price)
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["total_baggages"] = total_baggages          # stored as given
    reservation["nonfree_baggages"] = nonfree_baggages
    return reservation


def update_reservation_flights(db, reservation_id, cabin, flights, payment_id):
    """Update the flights of a reservation (the whole new list) and its cabin.

    A flight already in the reservation on the same date, in an unchanged cabin, keeps its
    price; any other must exist on its date, be available and have a seat for each passenger,
    at today's price. The difference with what the old flights cost is charged (or, negative,
    refunded) to the payment method.
    """
    flights, flights_are_models = _models_if_all_dicts(flights, _FLIGHT_INFO)
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    passengers = len(reservation["passengers"])
    total_price = 0
    new_flights = []
    for info in _items(flights):
        kept = None
        for old in reservation["flights"]:
            if (old["flight_number"] == _field(info, "flight_number", flights_are_models)
                    and old["date"] == info["date"] and cabin == reservation["cabin"]):
                kept = old
                break
        if kept:
            total_price += kept["price"] * passengers
            new_flights.append(kept)
            continue
        number = _field(info, "flight_number", flights_are_models)
        flight = _flight(db, number)
        day = _flight_day(db, number, info["date"])
        if day["status"] != "available":
            raise _Refusal(f"Flight {number} not available on date {info['date']}")
        if day["available_seats"][cabin] < passengers:
            raise _Refusal(f"Not enough seats on flight {number}")
        segment = {"flight_number": number, "origin": flight["origin"],
                   "destination": flight["destination"], "date": info["date"],
                   "price": day["prices"][cabin]}
        total_price += segment["price"] * passengers
        new_flights.append(segment)
    total_price -= sum(old["price"] for old in reservation["flights"]) * passengers
    payment = _charge_for_update(user, payment_id, total_price)
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["flights"] = new_flights
    reservation["cabin"] = cabin                             # stored as given
    return reservation


def update_reservation_passengers(db, reservation_id, passengers):
    """Replace the passengers of a reservation; there must be as many as before."""
    passengers, _ = _models_if_all_dicts(passengers, _PASSENGER)
    reservation = _reservation(db, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise _Refusal("Number of passengers does not match")
    reservation["passengers"] = copy.deepcopy(passengers)
    return reservation


def get_flight_status(db, flight_number, date):
    """Get the status of a flight on a date."""
    return _flight_day(db, flight_number, date)["status"]


# 5. Calling a tool ##############################################################################

_TOOL_FUNCTIONS = {fn.__name__: fn for fn in (
    book_reservation, calculate, cancel_reservation, get_reservation_details, get_user_details,
    list_all_airports, search_direct_flight, search_onestop_flight, send_certificate,
    transfer_to_human_agents, update_reservation_baggages, update_reservation_flights,
    update_reservation_passengers, get_flight_status)}


def _call_error(name: str, args: dict) -> str | None:
    """Python's TypeError text for ``AirlineTools.<name>(**args)`` with wrong argument names."""
    code = _TOOL_FUNCTIONS[name].__code__
    params = code.co_varnames[1:code.co_argcount]                # after db
    for key in args:
        if key == "self":
            return f"AirlineTools.{name}() got multiple values for argument 'self'"
        if key not in params:
            return f"AirlineTools.{name}() got an unexpected keyword argument '{key}'"
    missing = [f"'{param}'" for param in params if param not in args]
    if not missing:
        return None
    if len(missing) == 1:
        listed = missing[0]
    elif len(missing) == 2:
        listed = f"{missing[0]} and {missing[1]}"
    else:
        listed = ", ".join(missing[:-1]) + ", and " + missing[-1]
    plural = "s" if len(missing) > 1 else ""
    return (f"AirlineTools.{name}() missing {len(missing)} required positional "
            f"argument{plural}: {listed}")


def execute(db: dict, name: str, args: dict):
    """Run τ²'s airline tool ``name`` with ``args`` on ``db``, changing it in place as τ² does.

    Returns the tool's result as plain JSON (a dict, a list, or the string τ² returns), a copy
    that shares nothing with ``db``. Raises ToolError where τ² answers with an error; what τ²
    changes before its error is changed here too.
    """
    if name not in _TOOL_FUNCTIONS:
        raise ToolError(f"Error: Tool '{name}' not found.")
    args = copy.deepcopy(args)
    problem = _call_error(name, args)
    if problem:
        raise ToolError(f"Error: {problem}")
    try:
        result = _TOOL_FUNCTIONS[name](db, **args)
    except Exception as e:        # as τ²'s Environment.get_response answers any exception
        raise ToolError(f"Error: {e}") from e
    return copy.deepcopy(result)


def output_text(result) -> str:
    """The text τ²'s agent reads for a result of ``execute`` (Environment.to_json_str)."""
    return result if isinstance(result, str) else json.dumps(result, default=str)
