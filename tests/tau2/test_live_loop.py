"""τ²-bench live loop (issue 29): examples/tau2/live.py, offline, with a scripted customer and a
scripted agent model.

The loop plays a τ²-style conversation (the agent's greeting, then the customer and the falai
agent in turns until a stop token or the step limit) and scores it with τ²'s formula: the final
database hash against the gold one, times the required strings (COMMUNICATE) when the task's
reward basis names it. Here both models are small provider classes that react to what they are
shown, so each test says what the pair does and what τ²'s formula makes of it.
"""
import hashlib
import io
import json
import math
import sys
from pathlib import Path

import pytest

TAU2 = Path(__file__).resolve().parents[2] / "examples" / "tau2"
sys.path.insert(0, str(TAU2))

import airline  # noqa: E402
import airline_tools  # noqa: E402
import live  # noqa: E402
import retail_tools  # noqa: E402
from falai import Generation, ProviderCapabilities, ProviderError, ToolCallRequest  # noqa: E402

TASKS = {t["id"]: t for t in airline_tools.load_tasks()}
PRISTINE = airline_tools.db_hash(airline_tools.load_db())
# τ²'s gold database for task 19 (cancel Z7GOZK), as replayed once for the whole file.
GOLD_19 = live.gold_hash(airline_tools, TASKS["19"])


def no_sleep(seconds):
    pass


# The scripted pair ###########################################################################

def _reply(text):
    return Generation(message=json.dumps({"message": text}), structured={"message": text})


def _call(name, arguments):
    call = ToolCallRequest(id="c0", name=name, arguments=arguments)
    return Generation(message="", tool_calls=[call])


class Agent:
    """The agent's model: it reads each request (understand or speak, the customer's message,
    the last tool result) and answers as a model following the policy would, for task 19 (cancel
    Z7GOZK under insurance, for health) and task 3 (how many bags). ``wrong_write``: it asks for
    two checked bags on Z7GOZK instead of the cancellation; ``bags_in_words``: it says "four"
    where τ² requires the string "4"."""

    name = "scripted-agent"
    capabilities = ProviderCapabilities()

    def __init__(self, *, wrong_write=False, bags_in_words=False):
        self.wrong_write, self.bags_in_words = wrong_write, bags_in_words
        self.requests = []

    def generate(self, request):
        self.requests.append(request)
        said = (request.message or "").lower()
        if request.schema_name == "understand":
            fields = {}
            if "unwell" in said:
                fields["cancel_reason"] = "health"
            if said.strip(" .!") == "yes":
                fields["confirmed"] = True
            reply = {"flows": {"service": 90}, "fields": fields}
            return Generation(message=json.dumps(reply), structured=reply)
        last = request.history[-1] if request.history else {}
        if last.get("role") == "tool":
            if last["name"] == "get_user_details" and "anya" in last["content"]:
                bags = "four" if self.bags_in_words else "4"
                return _reply(f"As a silver member in economy you can check {bags} suitcases.")
            if last["name"] == "get_user_details":
                return _reply("Thank you, Olivia. What can I do for you?")
            if last["name"] == "get_reservation_details":
                return _call("get_user_details", {"user_id": "anya_garcia_5901"})
            if last["name"].startswith("request_"):
                return _reply("Here is the change: " + json.loads(last["content"]).get("change", "")
                              + "\nShall I go ahead? Please confirm with yes.")
        if "olivia_gonzalez_2305" in said:
            return _call("get_user_details", {"user_id": "olivia_gonzalez_2305"})
        if "jmo1mg" in said:
            return _call("get_reservation_details", {"reservation_id": "JMO1MG"})
        if "cancel" in said and self.wrong_write:
            return _call("request_update_reservation_baggages",
                         {"reservation_id": "Z7GOZK", "total_baggages": 2, "nonfree_baggages": 2,
                          "payment_id": "gift_card_2200803"})
        if "cancel" in said:
            return _call("request_cancel_reservation", {"reservation_id": "Z7GOZK"})
        return _reply("It is done. Anything else?")

    def generate_stream(self, request):
        raise AssertionError("the live loop calls generate")


class Customer:
    """The simulated customer's model: it answers the agent's latest message (the request's
    prompt, the roles flipped) from a few cues, opens as the person its scenario names (or with
    ``opening``), and ends with ``ending``; ``then_stop`` says after how many messages it ends
    (None: when the agent has nothing more)."""

    name = "scripted-customer"
    capabilities = ProviderCapabilities()

    def __init__(self, opening=None, *, ending="Thank you. ###STOP###", then_stop=None,
                 empty=False):
        self.opening, self.ending, self.then_stop, self.empty = opening, ending, then_stop, empty
        self.requests = []

    def generate(self, request):
        self.requests.append(request)
        if self.empty:
            return Generation(message="  ")
        heard = request.prompt.lower()
        if self.then_stop is not None and len(self.requests) > self.then_stop:
            return Generation(message=self.ending)
        if "how can i help" in heard:       # who the customer is: from the scenario, unless given
            scenario = OLIVIA if "olivia" in request.system.lower() else ANYA
            return Generation(message=self.opening or scenario)
        if "what can i do" in heard:
            return Generation(message="I feel unwell, so please cancel my Texas trip.")
        if "confirm with yes" in heard:
            return Generation(message="yes")
        if "anything else" in heard or "suitcases" in heard:
            return Generation(message=self.ending)
        return Generation(message="Could you say that again?")

    def generate_stream(self, request):
        raise AssertionError("the live loop calls generate")


OLIVIA = "Hi, I'm Olivia Gonzalez, user id olivia_gonzalez_2305."
ANYA = ("Hi, this is Anya Garcia, user id anya_garcia_5901, confirmation JMO1MG. "
        "How many bags can I take?")


def play(task_id, agent, customer, **options):
    gold = GOLD_19 if task_id == "19" else None
    return live.play(airline, airline_tools, TASKS[task_id], agent, customer, gold=gold,
                     sleep=no_sleep, **options)


# A conversation and its score ################################################################

def test_the_scripted_pair_solves_task_19_and_scores_1():
    """τ²'s reward: the database after the conversation equals the gold one (task 19's single
    reference action, cancel Z7GOZK), and the task asks for no string."""
    trial = play("19", Agent(), Customer(OLIVIA))
    assert trial.end == "user_stop"
    assert trial.writes == [{"name": "cancel_reservation", "arguments": {"reservation_id": "Z7GOZK"},
                             "outcome": "ok"}]
    assert trial.score["db_match"] is True and trial.score["reward"] == 1.0
    assert trial.score["final_hash"] == GOLD_19 != PRISTINE
    assert live.is_success(trial.score["reward"])


def test_a_wrong_write_scores_0():
    """The same conversation, but the model asks for bags instead of the cancellation and the
    customer says yes: the policy allows it, the database is not the gold one, the reward is 0."""
    trial = play("19", Agent(wrong_write=True), Customer(OLIVIA))
    assert trial.end == "user_stop"
    assert [(w["name"], w["outcome"]) for w in trial.writes] == [("update_reservation_baggages", "ok")]
    assert trial.score["db_match"] is False and trial.score["reward"] == 0.0


def test_a_required_string_in_words_scores_0_and_in_digits_1():
    """Task 3 writes nothing (gold = the pristine database) and requires the string "4" in one
    of the agent's messages (COMMUNICATE): "four" fails it."""
    said = play("3", Agent(), Customer(ANYA))
    assert said.score == {**said.score, "reward": 1.0, "db_match": True, "communicate": {"4": True}}
    in_words = play("3", Agent(bags_in_words=True), Customer(ANYA))
    assert in_words.end == "user_stop" and in_words.score["db_match"] is True
    assert in_words.score["communicate"] == {"4": False} and in_words.score["reward"] == 0.0


def test_communicate_is_taus_substring_check():
    """τ²'s CommunicateEvaluator: lower case on both sides, commas removed from the message only,
    any one agent message."""
    assert live.communicated("1628", ["The total is $1,628."])
    assert live.communicated("Gold", ["you are a GOLD member"])
    assert not live.communicated("4", ["four bags"])
    assert not live.communicated("1,628", ["The total is $1,628."])    # only the message's commas go
    assert not live.communicated("5244", ["$5,2", "44"])                  # within one message


def test_the_tool_rounds_and_writes_are_in_the_transcript():
    """The engine returns messages only; the loop recovers each tool call and its result from the
    speak requests, counts two steps per call as τ²'s orchestrator does, and lists the writes."""
    trial = play("19", Agent(), Customer(OLIVIA))
    kinds = [e["type"] for e in trial.events]
    assert kinds[:2] == ["meta", "message"] and kinds[-1] == "score"
    calls = [e for e in trial.events if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["get_user_details", "request_cancel_reservation"]
    assert json.loads(calls[0]["result"])["user_id"] == "olivia_gonzalez_2305"
    assert kinds.index("write") > kinds.index("tool_call")
    # 4 customer messages + 3 agent messages + 2 calls x 2 steps
    assert trial.steps == 4 + 3 + 4


# What the customer is shown ##################################################################

def test_the_guidelines_are_taus_file_verbatim():
    """data/user_simulator.md is τ²'s simulation_guidelines.md, as SOURCES.json records it."""
    sources = json.loads((TAU2 / "data" / "SOURCES.json").read_text("utf-8"))
    entry = next(e for e in sources["files"] if e["file"] == "user_simulator.md")
    data = (TAU2 / "data" / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["vendored_sha256"] == entry["source_sha256"]
    assert entry["path"] == "data/tau2/user_simulator/simulation_guidelines.md"
    assert entry["license"] == "MIT"
    assert (TAU2 / "data" / entry["license_file"]).exists()
    text = data.decode("utf-8")
    assert all(token in text for token in live.STOP_TOKENS)


def test_the_customer_prompt_is_laid_out_as_taus():
    """τ²'s UserSimulator: guidelines, then <scenario> and str(UserScenario): tab-indented
    sections, blank lines left unindented (textwrap.indent), absent sections left out."""
    scenario = {"persona": "Calm.\nPolite.", "instructions": {
        "domain": "airline", "reason_for_call": "Cancel ABC123.\n\nIt is urgent.",
        "known_info": "You are Ana.", "unknown_info": None, "task_instructions": "Say yes."}}
    expected = ("Persona:\n\tCalm.\n\tPolite.\nInstructions:\n\tDomain: airline\n\tReason for call:\n"
                "\t\tCancel ABC123.\n\n\t\tIt is urgent.\n\tKnown info:\n\t\tYou are Ana.\n"
                "\tTask instructions:\n\t\tSay yes.")
    assert live.scenario_text(scenario) == expected
    prompt = live.user_system_prompt({"user_scenario": scenario})
    assert prompt == live.guidelines() + "\n\n<scenario>\n" + expected + "\n</scenario>"
    assert live.guidelines().endswith("consistency.\n")     # τ² formats the file in as it is


def test_the_customer_sees_the_conversation_with_roles_flipped_and_no_tools():
    """τ² (UserState.flip_roles): the agent's messages are the customer model's user turns; its
    first call reads the greeting alone."""
    customer = Customer(OLIVIA)
    play("19", Agent(), customer)
    first, second = customer.requests[:2]
    assert first.history == [] and first.prompt == airline.FIRST_MESSAGE
    assert second.history == [{"role": "user", "content": airline.FIRST_MESSAGE},
                              {"role": "assistant", "content": OLIVIA}]
    assert second.prompt == "Thank you, Olivia. What can I do for you?"
    assert all(r.tools is None and r.schema is None for r in customer.requests)
    assert "<scenario>" in first.system and "olivia_gonzalez_2305" in first.system


def test_the_customer_request_is_plain_chat_on_every_vendor():
    """What the HTTP providers would send for the customer (their own body builders, no network):
    τ²'s system prompt, the flipped conversation as alternating turns, no tools, no schema; the
    providers the environment picks get τ²'s temperature 0."""
    from request_bodies import wire_bodies

    customer = Customer(OLIVIA)
    play("19", Agent(), customer)
    request = customer.requests[1]
    bodies = wire_bodies(request)
    turns = [airline.FIRST_MESSAGE, OLIVIA, "Thank you, Olivia. What can I do for you?"]
    assert [m["content"] for m in bodies["openai"]["messages"]] == [request.system, *turns]
    assert [m["role"] for m in bodies["openai"]["messages"]] == ["system", "user", "assistant", "user"]
    assert [c["role"] for c in bodies["gemini"]["contents"]] == ["user", "model", "user"]
    assert bodies["anthropic"]["system"][0]["text"] == request.system
    assert not any(key in body for body in bodies.values()
                   for key in ("tools", "response_format", "output_config"))
    gemini = live.models_from_env({"GEMINI_API_KEY": "k"}).make("gemini-3.8-flash")
    _, _, body = gemini._wire("gemini-3.8-flash", gemini._plan(request))
    assert body["generationConfig"]["temperature"] == 0.0


def test_the_agent_gets_the_conversation_messages_as_history():
    """The host keeps the messages (falai's host contract): the agent's greeting first, each
    message in order, the message of the turn left out."""
    agent = Agent()
    play("19", agent, Customer(OLIVIA))
    last = [r for r in agent.requests if r.schema_name == "understand"][-1]
    assert last.history[:3] == [{"role": "assistant", "content": airline.FIRST_MESSAGE},
                                {"role": "user", "content": OLIVIA},
                                {"role": "assistant",
                                 "content": "Thank you, Olivia. What can I do for you?"}]
    assert last.message == "yes" and all(item.get("role") != "tool" for item in last.history)


# How a conversation ends #####################################################################

@pytest.mark.parametrize("message", ["Thanks, bye ###STOP###", "###TRANSFER###",
                                     "I can't go on without that. ###OUT-OF-SCOPE###"])
def test_each_stop_token_ends_the_conversation_and_it_is_scored(message):
    """τ²'s UserSimulator.is_stop: any of the three tokens, anywhere in the message, ends it
    (USER_STOP), and the conversation is scored; the agent does not answer the stop message."""
    agent = Agent()
    trial = play("19", agent, Customer(OLIVIA, ending=message, then_stop=1))
    assert trial.end == "user_stop"
    assert [e["content"] for e in trial.events if e["type"] == "message"][-1] == message
    assert len([r for r in agent.requests if r.schema_name == "understand"]) == 1
    assert trial.score["reward"] == 0.0 and trial.score["db_match"] is False   # nothing cancelled


def test_stop_tokens():
    assert live.STOP_TOKENS == ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
    assert live.is_stop("ok ###STOP### thanks") and not live.is_stop("STOP") and not live.is_stop("")


def test_the_step_limit_ends_it_unscored():
    """τ² scores 0 a conversation that hits max_steps, even when the database is right (task 3
    writes nothing, so the database matches all along)."""
    trial = play("3", Agent(), Customer(ANYA, ending="Hmm, and what else?"), max_steps=12)
    assert trial.end == "max_steps" and trial.steps >= 12
    assert trial.score["reward"] == 0.0 and "prematurely" in trial.score["note"]


def test_an_empty_customer_message_ends_it_unscored():
    trial = play("19", Agent(), Customer(OLIVIA, empty=True))
    assert trial.end == "user_error" and trial.score["reward"] == 0.0


class Failing:
    name = "failing"
    capabilities = ProviderCapabilities()

    def __init__(self, kind):
        self.kind, self.calls = kind, 0

    def generate(self, request):
        self.calls += 1
        raise ProviderError("down", provider="failing", kind=self.kind)

    def generate_stream(self, request):
        raise AssertionError


def test_a_model_that_stays_down_is_an_infrastructure_error_left_out_of_pass_k():
    """The understand call raises (nothing happened): the same message is tried again, then the
    trial is an infrastructure error, which τ²'s metrics leave out."""
    agent = Failing("overload")
    trial = play("19", agent, Customer(OLIVIA), retries=2)
    assert trial.end == "infrastructure_error" and trial.infra_error and agent.calls == 3
    ok = play("19", Agent(), Customer(OLIVIA))
    models = live.Models(vendor="scripted", agent_model="m", user_model="u", make=None)
    summary = live.summarize([trial, ok], "airline", models)
    assert summary["infrastructure_errors"] == 1 and summary["pass_hat_k"] == {"1": 1.0}


def test_a_bad_key_stops_the_run(tmp_path, capsys):
    """auth, entitlement, model, invalid: retrying cannot help, so the error goes up and main
    exits 1 saying what to check."""
    with pytest.raises(ProviderError):
        play("19", Failing("auth"), Customer(OLIVIA))
    models = live.Models(vendor="scripted", agent_model="m", user_model="u",
                         make=lambda model: Failing("auth") if model == "m" else Customer(OLIVIA))
    assert live.main(["--tasks", "19", "--trials", "1", "--out", str(tmp_path)], models=models,
                     stdout=io.StringIO()) == 1
    assert "(auth)" in capsys.readouterr().err


# pass^k ######################################################################################

def test_pass_hat_k_is_taus_estimator_on_made_up_counts():
    """pass^k of a task = C(c, k) / C(n, k); the figure is its mean over tasks. Four tasks, four
    trials, 4 / 2 / 0 / 1 successes, by hand:
    pass^1 = (1 + 1/2 + 0 + 1/4) / 4 = 0.4375
    pass^2 = (1 + 1/6 + 0 + 0) / 4 = 7/24
    pass^3 = pass^4 = (1 + 0 + 0 + 0) / 4 = 0.25"""
    T, F = True, False
    outcomes = {"a": [T, T, T, T], "b": [T, F, T, F], "c": [F, F, F, F], "d": [F, F, T, F]}
    got = live.pass_hat_ks(outcomes)
    assert got == pytest.approx({1: 0.4375, 2: 7 / 24, 3: 0.25, 4: 0.25})
    assert live.pass_hat_k(4, 3, 2) == 0.5 and live.pass_hat_k(5, 3, 3) == pytest.approx(1 / 10)
    assert live.pass_hat_k(4, 0, 1) == 0 and math.isclose(live.pass_hat_k(3, 3, 3), 1)


def test_pass_hat_k_stops_at_the_fewest_trials():
    """τ²'s get_metrics_df lowers max k to the fewest trials a task has."""
    got = live.pass_hat_ks({"a": [True, True, True], "b": [True, False]})
    assert got == pytest.approx({1: (1 + 0.5) / 2, 2: (1 + 0) / 2})
    with pytest.raises(ValueError):
        live.pass_hat_k(2, 2, 3)


def test_success_is_a_reward_of_one():
    assert live.is_success(1.0) and live.is_success(1 - 1e-7) and not live.is_success(0.5)


# Scoring details #############################################################################

def test_retail_nl_assertions_are_flagged_not_judged():
    """112 of 114 retail tasks are scored DB x NL_ASSERTION by τ²; without a judge model the loop
    scores the DB part and flags the task (an upper bound of τ²'s reward)."""
    tasks = retail_tools.load_tasks()
    nl = [t for t in tasks if "NL_ASSERTION" in t["evaluation_criteria"]["reward_basis"]]
    assert len(tasks) == 114 and len(nl) == 112
    got = live.score(nl[0], end="user_stop", final_hash="h", gold="h", agent_texts=[])
    assert got["reward"] == 1.0 and got["nl_unjudged"] is True
    db_only = next(t for t in tasks if t["evaluation_criteria"]["reward_basis"] == ["DB"])
    assert live.score(db_only, end="user_stop", final_hash="h", gold="x",
                      agent_texts=[])["reward"] == 0.0
    # COMMUNICATE is not in retail's basis: a missing string does not count there
    with_info = next(t for t in nl if t["evaluation_criteria"]["communicate_info"])
    assert live.score(with_info, end="user_stop", final_hash="h", gold="h",
                      agent_texts=[])["reward"] == 1.0


def test_the_gold_hash_is_the_one_taus_code_recorded():
    """The gold database: the reference actions replayed with the raw tools on a fresh database
    gives the final hash τ² recorded for the task (reference_effects.json.gz)."""
    recorded = live.recorded_gold_hashes("airline")
    assert recorded["19"] == GOLD_19 and recorded["0"] == PRISTINE
    assert live.gold_hash(airline_tools, TASKS["7"]) == recorded["7"]


def test_published_figures_are_found_by_model_id():
    """τ²'s leaderboard rows (web/leaderboard/public/submissions/*/submission.json)."""
    (row,) = live.published_for("gpt-4.1-mini", "airline")
    assert row["pass"] == [48.7, 38.9, 32.1, 27.8] and row["file"].endswith(
        "gpt-4-1-mini_openai_2024-06-20/submission.json")
    dated = live.published_for("openai/gpt-4.1-mini-2025-04-14", "retail")
    assert [r["pass"][0] for r in dated] == [61.4]
    assert len(live.published_for("claude-sonnet-4-5-20250929", "airline")) == 2
    assert {r["effort"] for r in live.published_for("gpt-5.2", "retail")} == {"none", "high"}
    assert live.published_for("gemini-3.8-flash", "airline") == []


# The program #################################################################################

def test_without_a_key_it_says_what_to_set_and_exits_2(capsys):
    assert live.main(["--domain", "airline", "--tasks", "0-4", "--trials", "4"], environ={}) == 2
    err = capsys.readouterr().err
    for name in ("GEMINI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                 "FALAI_MODEL", "FALAI_USER_MODEL"):
        assert name in err


def test_the_providers_come_from_the_environment():
    assert live.models_from_env({}) is None
    gemini = live.models_from_env({"GEMINI_API_KEY": "k", "OPENAI_API_KEY": "o"})
    assert (gemini.vendor, gemini.agent_model, gemini.user_model) == ("gemini", "gemini-3.8-flash",
                                                                      "gemini-3.8-flash")
    openai = live.models_from_env({"OPENAI_API_KEY": "k", "FALAI_MODEL": "gpt-4.1",
                                   "FALAI_USER_MODEL": "gpt-4.1-mini"})
    assert (openai.vendor, openai.agent_model, openai.user_model) == ("openai", "gpt-4.1",
                                                                      "gpt-4.1-mini")
    assert live.models_from_env({"ANTHROPIC_API_KEY": "k"}).agent_model == "claude-haiku-4-5"
    local = live.models_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "FALAI_MODEL": "qwen"})
    assert local.vendor == "openai-compatible"
    assert type(local.make("qwen")).__name__ == "OpenAICompatibleProvider"
    assert type(gemini.make("gemini-3.8-flash")).__name__ == "GeminiProvider"


def test_task_ranges():
    tasks = list(TASKS.values())
    assert live.task_ids("0-4", tasks, "airline") == ["0", "1", "2", "3", "4"]
    assert live.task_ids("3,7-8", tasks, "airline") == ["3", "7", "8"]
    assert len(live.task_ids(None, tasks, "airline")) == 50
    with pytest.raises(SystemExit):
        live.task_ids("99", tasks, "airline")


def test_main_writes_a_transcript_per_trial_and_reports_pass_k(tmp_path):
    """Two trials of task 19 and of task 3 (one of which says "four"): the JSON lines, the
    summary, and the report with its label and τ²'s published row beside it."""
    runs = {"n": 0}

    def make(model):
        if model == "customer":
            return Customer()
        runs["n"] += 1          # one run at a time: the fourth conversation is task 3's second
        return Agent(bags_in_words=runs["n"] == 4)

    models = live.Models(vendor="scripted", agent_model="gpt-4.1-mini", user_model="customer",
                         make=make)
    out = io.StringIO()
    assert live.main(["--tasks", "19,3", "--trials", "2", "--out", str(tmp_path)], models=models,
                     stdout=out) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["summary.json", "task-19-trial-0.jsonl", "task-19-trial-1.jsonl",
                     "task-3-trial-0.jsonl", "task-3-trial-1.jsonl"]
    transcript = (tmp_path / "task-19-trial-0.jsonl").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in transcript.splitlines()]
    assert lines[0]["type"] == "meta" and lines[-1]["type"] == "score"
    assert lines[-1]["reward"] == 1.0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["successes"] == {"3": 1, "19": 2}
    assert summary["pass_hat_k"] == pytest.approx({"1": 0.75, "2": 0.5})
    text = out.getvalue()
    assert "custom scaffold (falai port), not comparable to τ²'s leaderboard harness" in text
    assert "48.7" in text and "gpt-4-1-mini_openai_2024-06-20/submission.json" in text
