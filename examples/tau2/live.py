"""τ²-bench with a live model: an LLM customer talks to the falai port, scored with τ²'s formula.

    python examples/tau2/live.py --domain airline --tasks 0-4 --trials 4
    python examples/tau2/live.py --domain retail --trials 4 --out runs/   # every base task

For each task and trial this plays a τ²-style conversation: the agent opens with
``FIRST_MESSAGE``; an LLM user simulator, given τ²'s simulation guidelines
(``data/user_simulator.md``, vendored verbatim) and the task's ``user_scenario`` the way τ²'s
user prompt lays it out, answers; the falai agent (``build_agent(db, provider, clock)``) replies
through ``agent.turn(...)``; and so on until the customer writes a stop token (``###STOP###``,
``###TRANSFER###``, ``###OUT-OF-SCOPE###``) or the step limit. Then τ²'s reward: the database
hash against the gold hash (the task's reference actions replayed with τ²'s raw tools on a fresh
database), times each reward-basis component this script can judge. pass^1..pass^k over the
trials use τ²'s estimator. The result is a custom scaffold (the falai port), not τ²'s leaderboard
harness; τ²'s published figures for the same model are printed beside it when the leaderboard
has them.

Where it matches τ²'s harness (sierra-research/tau2-bench at ``TAU2_COMMIT``):
  - the agent speaks first with τ²'s own greeting; the customer's system prompt is τ²'s
    (guidelines + ``<scenario>`` + the scenario text); the customer sees the conversation with
    the roles flipped and no tools (τ² gives airline and retail users none);
  - the stop tokens end the conversation as τ²'s ``UserSimulator.is_stop`` does (the message
    that carries one is kept); a conversation that ends any other way (the step limit, too many
    tool errors, an empty message) scores 0, as τ²'s evaluator does for a premature end;
  - the steps are counted about as τ²'s orchestrator counts them: one per message, two per
    round of tool calls (the call and the environment's answer); ``--max-steps`` defaults to
    τ²'s 200 and ``--max-errors`` to its 10 tool errors;
  - the reward: DB (final hash == gold hash) × COMMUNICATE (each required string, lower case, in
    one of the agent's messages lower-cased with its commas removed), each only when the task's
    ``reward_basis`` names it; success is a reward of 1; pass^k = mean over tasks of
    C(c, k) / C(n, k); conversations that failed for infrastructure reasons are left out.

Where it differs:
  - the agent is falai's (``port.py``): an understand call and a speak call per customer
    message, tool rounds inside one reply, writes only through request, confirmation and a
    re-checked commit; several messages of one turn reach the customer as one, joined;
  - the agent's history (``agent.turn(history=...)``) holds the conversation's messages only,
    as falai's host contract has it: tool calls and results live inside one reply, and a later
    turn does not see them (τ²'s agent keeps every tool result in its context). What the port
    must remember (the authenticated user, the pending change, the writes done) is in the
    session; the model looks anything else up again with the read tools, which change nothing;
  - NL_ASSERTION (retail: 112 of 114 tasks) needs a judge model, which this script does not
    run: those tasks are scored on their other components and flagged, so the retail figure is
    an upper bound of τ²'s reward;
  - both models get temperature 0 where the model accepts one (τ²'s default), and no seed.

``main(argv)`` is the whole program (``bench/tau2.py --live`` calls it with its own arguments);
it returns the exit status: 0; 1 when a model call fails in a way retrying cannot fix (a key, a
model name); 2 when no model is configured. A conversation whose model calls keep failing
otherwise is an infrastructure error, left out of pass^k as τ² does. Providers are chosen from the
environment as ``examples/concierge.py`` does: ``GEMINI_API_KEY`` (Gemini), ``ANTHROPIC_API_KEY``
(Anthropic), ``OPENAI_BASE_URL`` (any OpenAI-compatible server, with ``OPENAI_API_KEY`` when it
needs one) or ``OPENAI_API_KEY`` alone (OpenAI); ``FALAI_MODEL`` picks the agent's model and
``FALAI_USER_MODEL`` the customer's (default: the same). Each trial's transcript is written as
JSON lines under ``--out``, with a ``summary.json`` beside them.

Sections:
   1. τ²'s rules ........... the user prompt, stop tokens, the reward, pass^k
   2. Published figures .... τ²'s leaderboard rows for a model
   3. A conversation ....... the user simulator, the recording provider, one trial
   4. The program .......... providers from the environment, arguments, the report
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import gzip
import importlib
import json
import math
import os
import re
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:           # run as a script or imported by bench/tau2.py
    sys.path.insert(0, str(HERE))
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:           # falai, when run from a checkout without installing it
    sys.path.insert(0, str(ROOT))

from falai import GenerateRequest, ProviderError, fake_clock  # noqa: E402

DATA = HERE / "data"
TAU2_REPO = "sierra-research/tau2-bench"
TAU2_COMMIT = "a2c024725189473d2d7cea3a5cfdbcc67478e41f"
LABEL = "custom scaffold (falai port), not comparable to τ²'s leaderboard harness"

# 1. τ²'s rules ###############################################################################

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
MAX_STEPS = 200                 # τ²'s config.DEFAULT_MAX_STEPS
MAX_ERRORS = 10                 # τ²'s config.DEFAULT_MAX_ERRORS
# τ²'s evaluator scores only conversations that a participant ended; anything else is 0.
SCORED_ENDS = ("user_stop", "agent_stop")
# Provider failures that retrying cannot fix: the run stops and says what to check.
CONFIGURATION_ERRORS = ("auth", "entitlement", "model", "invalid")
CONFIGURATION_OUTCOMES = {"provider-auth": "auth", "provider-invalid": "invalid"}


def guidelines() -> str:
    """τ²'s user simulation guidelines (text mode, no user tools), verbatim."""
    return (DATA / "user_simulator.md").read_text(encoding="utf-8")


def scenario_text(scenario: dict) -> str:
    """A task's ``user_scenario`` as τ²'s ``str(UserScenario)`` lays it out (tab-indented
    sections; the structured instructions as Domain, Reason for call, Known info, Unknown info,
    Task instructions, each present one on its own lines)."""
    tab = "\t"
    instructions = scenario["instructions"]
    if isinstance(instructions, dict):
        lines = [f"Domain: {instructions['domain']}",
                 f"Reason for call:\n{textwrap.indent(instructions['reason_for_call'], tab)}"]
        for key, title in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
            if instructions.get(key) is not None:
                lines.append(f"{title}:\n{textwrap.indent(instructions[key], tab)}")
        task_lines = textwrap.indent(instructions["task_instructions"], tab)
        lines.append(f"Task instructions:\n{task_lines}")
        instructions = "\n".join(lines)
    out = []
    if scenario.get("persona") is not None:
        out += ["Persona:", textwrap.indent(scenario["persona"], tab)]
    out += ["Instructions:", textwrap.indent(str(instructions), tab)]
    return "\n".join(out)


def user_system_prompt(task: dict) -> str:
    """The customer's system prompt, as τ²'s text-mode UserSimulator builds it with the default
    persona (which adds nothing)."""
    text = guidelines().replace("<PERSONA_GUIDELINES>", "")
    return f"{text}\n\n<scenario>\n{scenario_text(task['user_scenario'])}\n</scenario>"


def is_stop(text: str | None) -> bool:
    """τ²'s ``UserSimulator.is_stop``: any of the three tokens anywhere in the message."""
    return bool(text) and any(token in text for token in STOP_TOKENS)


def communicated(info: str, agent_texts: list[str]) -> bool:
    """τ²'s CommunicateEvaluator: the string, lower-cased, inside one of the agent's messages,
    lower-cased and with its commas removed."""
    return any(info.lower() in text.lower().replace(",", "") for text in agent_texts if text)


def gold_hash(tools: Any, task: dict) -> str:
    """The hash of the database τ²'s evaluator builds for the task: its reference actions
    replayed in order on a fresh database with the raw tools, an action that fails logged and
    skipped (EnvironmentEvaluator)."""
    db = tools.load_db()
    for action in task["evaluation_criteria"].get("actions") or []:
        try:
            tools.execute(db, action["name"], action["arguments"])
        except Exception:       # τ² logs a failing gold action and goes on
            pass
    return tools.db_hash(db)


def recorded_gold_hashes(domain: str) -> dict:
    """task id -> the final hash τ²'s own code recorded (reference_effects.json.gz)."""
    path = DATA / domain / "reference_effects.json.gz"
    if not path.exists():
        return {}
    with gzip.open(path, "rb") as fp:
        tasks = json.load(fp).get("tasks") or []
    return {str(t["id"]): t.get("final_hash") for t in tasks if isinstance(t, dict)}


def score(task: dict, *, end: str, final_hash: str, gold: str, agent_texts: list[str]) -> dict:
    """τ²'s reward for one conversation (evaluate_simulation with EvaluationType.ALL), as far as
    it can be judged without a model: NL_ASSERTION is reported as not judged.

    ``reward`` multiplies the judged components of the task's ``reward_basis``; ``nl_unjudged``
    says an NL_ASSERTION component was left out (the reward is then an upper bound of τ²'s).
    """
    criteria = task.get("evaluation_criteria") or {}
    basis = list(criteria.get("reward_basis") or [])
    out: dict = {"reward_basis": basis, "end": end, "nl_unjudged": "NL_ASSERTION" in basis}
    if end not in SCORED_ENDS:
        return {**out, "reward": 0.0, "note": f"ended prematurely ({end}): τ² scores it 0"}
    actions, assertions = criteria.get("actions"), criteria.get("env_assertions")
    db_match = True if actions is None and assertions is None else final_hash == gold
    checks = {info: communicated(info, agent_texts)
              for info in criteria.get("communicate_info") or []}
    reward = 1.0
    if "DB" in basis:
        reward *= 1.0 if db_match else 0.0
    if "ENV_ASSERTION" in basis:        # no airline or retail task has one
        raise ValueError(f"task {task['id']}: ENV_ASSERTION is not supported here")
    if "ACTION" in basis:               # nor this
        raise ValueError(f"task {task['id']}: ACTION is not supported here")
    if "COMMUNICATE" in basis:
        reward *= 1.0 if all(checks.values()) else 0.0
    return {**out, "reward": reward, "db_match": db_match, "communicate": checks}


def is_success(reward: float) -> bool:
    """τ²'s ``is_successful``: a reward of 1, within 1e-6."""
    return (1 - 1e-6) <= reward <= (1 + 1e-6)


def pass_hat_k(trials: int, successes: int, k: int) -> float:
    """τ²'s pass^k for one task: the chance that k trials drawn without replacement from the
    ``trials`` run all succeed, C(successes, k) / C(trials, k)."""
    if trials < k:
        raise ValueError(f"{trials} trials are fewer than k = {k}")
    return math.comb(successes, k) / math.comb(trials, k)


def pass_hat_ks(outcomes: dict) -> dict:
    """``{task id: [success, ...]}`` -> ``{k: mean over tasks of pass^k}`` for k = 1 .. the
    fewest trials any task has (τ²'s get_metrics_df lowers its max k the same way)."""
    counts = {task: len(results) for task, results in outcomes.items() if results}
    if not counts:
        return {}
    top = min(counts.values())
    return {k: sum(pass_hat_k(counts[t], sum(bool(s) for s in outcomes[t]), k) for t in counts)
            / len(counts) for k in range(1, top + 1)}


# 2. Published figures ########################################################################

# τ²'s leaderboard, text-mode rows with airline or retail figures: (submission, model name,
# reasoning effort, user simulator, airline pass^1..4, retail pass^1..4), percentages as
# published in web/leaderboard/public/submissions/<submission>/submission.json at TAU2_COMMIT
# (None: not published). Full task sets (airline 50, retail 114), τ²'s own harness.
PUBLISHED = [
    ("claude-3-7-sonnet_anthropic_2024-06-20", "Claude-3.7-Sonnet", "", "gpt-4.1-2025-04-14",
     (64.2, 58.9, 55.4, 52.1), (72.1, 66.8, 63.2, 59.7)),
    ("claude-opus-4-1_anthropic_2025-01-15", "Claude Opus 4.1", "", "", (56.0, None, None, None),
     (82.4, None, None, None)),
    ("claude-opus-4-5_sierra_2026-02-26", "Claude Opus 4.5", "high", "gpt-5.2",
     (84.0, 77.67, 73.5, 70.0), (79.61, 67.4, 58.77, 51.75)),
    ("claude-opus-4_anthropic_2025-05-22", "Claude Opus 4", "", "", (59.6, None, None, None),
     (81.4, None, None, None)),
    ("claude-sonnet-4-5_anthropic_2025-10-02", "Claude-Sonnet-4.5", "", "",
     (70.0, None, None, None), (86.2, None, None, None)),
    ("claude-sonnet-4-5_sierra_2026-02-26", "Claude Sonnet 4.5", "enabled", "gpt-5.2",
     (72.0, 62.0, 54.5, 48.0), (72.37, 57.46, 47.37, 39.47)),
    ("claude-sonnet-4_anthropic_2025-05-22", "Claude Sonnet 4", "", "", (60.0, None, None, None),
     (80.5, None, None, None)),
    ("deepseek-v3.2_deepseek_2025-12-01", "DeepSeek-V3.2", "", "DeepSeek-V3.2",
     (63.8, None, None, None), (81.1, None, None, None)),
    ("gemini-3-flash_sierra_2026-03-02", "Gemini 3 Flash", "high", "gpt-5.2",
     (82.5, 76.33, 72.0, 68.0), (76.75, 65.94, 57.89, 51.75)),
    ("gemini-3-pro_google_2025-11-18", "Gemini 3.0 Pro", "", "Gemini-3.0-Pro",
     (73.0, None, None, None), (85.3, None, None, None)),
    ("gemini-3-pro_sierra_2026-03-02", "Gemini 3 Pro", "high", "gpt-5.2",
     (80.5, 74.67, 70.0, 66.0), (75.88, 63.45, 54.39, 47.37)),
    ("glm-5-think_sierra_2026-03-02", "GLM-5", "enabled", "gpt-5.2",
     (82.5, 76.0, 72.0, 70.0), (73.68, 60.38, 51.1, 43.86)),
    ("gpt-4-1-mini_openai_2024-06-20", "GPT-4.1-mini", "", "gpt-4.1-2025-04-14",
     (48.7, 38.9, 32.1, 27.8), (61.4, 49.8, 42.3, 36.9)),
    ("gpt-4-1_openai_2024-06-20", "GPT-4.1", "", "gpt-4.1-2025-04-14",
     (56.0, 47.8, 42.4, 38.1), (74.0, 64.2, 58.1, 52.3)),
    ("gpt-5-2-none_sierra_2026-02-26", "GPT-5.2", "none", "gpt-5.2",
     (52.5, 35.67, 27.0, 22.0), (75.0, 62.13, 53.07, 45.61)),
    ("gpt-5-2_sierra_2026-02-26", "GPT-5.2", "high", "gpt-5.2",
     (83.0, 78.33, 75.0, 72.0), (81.58, 69.59, 59.87, 51.75)),
    ("gpt-5_sierra_2025-08-09", "GPT-5", "", "gpt-4.1-2025-04-14",
     (62.5, 55.33, 51.0, 48.0), (81.58, 71.78, 64.69, 58.77)),
    ("kimi-k2_moonshot-ai_2025-07-11", "Kimi-k2", "", "", (56.5, None, None, None),
     (70.6, None, None, None)),
    ("o3_openai_2025-01-15", "o3", "", "", (52.0, None, None, None), (73.9, None, None, None)),
    ("o4-mini_openai_2024-06-20", "o4-mini", "", "gpt-4.1-2025-04-14",
     (52.1, 44.2, 38.9, 34.7), (68.3, 58.7, 52.1, 46.8)),
    ("qwen3-max_qwen_2024_09_23", "Qwen3-Max", "", "",
     (59.5, 55.0, None, 46.0), (72.2, 67.5, None, 57.0)),
    ("qwen3-max_qwen_2025-10-30", "Qwen3-Max-Thinking-Preview", "", "gpt-4.1-2025-04-14",
     (71.0, 65.33, 62.5, 60.0), (75.44, 66.23, 60.09, 55.26)),
    ("qwen3-max_qwen_2026-01-23", "Qwen3-Max-Thinking", "", "gpt-4.1-2025-04-14",
     (69.0, 65.33, 63.5, 62.0), (79.39, 69.44, 62.72, 57.89)),
    ("qwen3.5-397b-a17b-think_sierra_2026-03-02", "Qwen3.5-397B-A17B", "enabled", "gpt-5.2",
     (81.5, 75.67, 71.5, 68.0), (84.43, 74.42, 66.45, 59.65)),
]
_EFFORT_SUFFIXES = ("", "-none", "-think")


def model_key(model: str) -> str:
    """A model id as the leaderboard's submission folders spell it: the last path part, lower
    case, dots as dashes, without a date suffix or ``-preview``/``-latest``
    (``openai/gpt-4.1-mini-2025-04-14`` -> ``gpt-4-1-mini``)."""
    key = model.strip().lower().rsplit("/", 1)[-1].replace(".", "-").replace("_", "-")
    key = re.sub(r"-(\d{8}|\d{4}-\d{2}-\d{2})$", "", key)
    return re.sub(r"-(preview|latest)$", "", key)


def published_for(model: str, domain: str) -> list[dict]:
    """τ²'s published rows for ``model`` in ``domain``: each with its submission file, the model
    name, reasoning effort, user simulator and pass^1..4 (percent; None where not published)."""
    key = model_key(model)
    rows = []
    for submission, name, effort, user, airline, retail in PUBLISHED:
        folder = submission.split("_", 1)[0].replace(".", "-")
        figures = airline if domain == "airline" else retail
        if figures is None or folder not in {key + suffix for suffix in _EFFORT_SUFFIXES}:
            continue
        rows.append({"file": f"{TAU2_REPO}@{TAU2_COMMIT[:7]}:web/leaderboard/public/submissions/"
                             f"{submission}/submission.json",
                     "model": name, "effort": effort or None, "user_simulator": user or None,
                     "pass": list(figures)})
    return rows


# 3. A conversation ###########################################################################

class UserSimulator:
    """The LLM customer: τ²'s system prompt, and the conversation with the roles flipped (the
    agent's messages are the model's user turns, the customer's its own), ending on the agent's
    latest message. It has no tools."""

    def __init__(self, provider: Any, task: dict):
        self.provider = provider
        self.system = user_system_prompt(task)

    def reply(self, transcript: list[dict]) -> str:
        """The customer's next message after ``transcript`` (``{"role", "content"}`` items from
        the agent's side: ``assistant`` is the agent), whose last item is the agent's."""
        flipped = [{"role": "user" if item["role"] == "assistant" else "assistant",
                    "content": item["content"]} for item in transcript]
        request = GenerateRequest(system=self.system, prompt=flipped[-1]["content"],
                                  history=flipped[:-1], schema_name="user")
        return (self.provider.generate(request).message or "").strip()


class Recording:
    """A provider that passes every call through and keeps (request, generation) pairs, so the
    host can see the agent's tool rounds (the engine returns only messages) and the usage."""

    def __init__(self, provider: Any):
        self.provider = provider
        self.name = getattr(provider, "name", "recording")
        self.capabilities = getattr(provider, "capabilities", None)
        self.calls: list[tuple] = []
        self._lock = threading.Lock()

    def generate(self, request: GenerateRequest):
        generation = self.provider.generate(request)
        with self._lock:
            self.calls.append((request, generation))
        return generation

    def generate_stream(self, request: GenerateRequest):
        final = None
        for chunk in self.provider.generate_stream(request):
            final = chunk
            yield chunk
        if final is not None:
            with self._lock:
                self.calls.append((request, final))

    def take(self) -> list[tuple]:
        """The calls since the last ``take``."""
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


def tool_rounds(calls: list[tuple]) -> list[dict]:
    """The tool calls of a turn's speak calls, each with its result when a later round shows
    it: after a round, the next speak request of the same reply ends with one tool item per call
    (model-calls.md §6.7)."""
    rounds = []
    speak = [(request, generation) for request, generation in calls
             if request.schema_name == "speak"]
    for n, (request, generation) in enumerate(speak):
        made = list(getattr(generation, "tool_calls", None) or [])
        if not made:
            continue
        later = speak[n + 1][0].history if n + 1 < len(speak) else []
        results = later[-len(made):] if len(later) >= len(made) else []
        if not all(isinstance(item, dict) and item.get("role") == "tool" for item in results):
            results = [None] * len(made)
        for call, result in zip(made, results):
            rounds.append({"name": call.name, "arguments": call.arguments,
                           "result": result.get("content") if result else None})
    return rounds


def usage_of(calls: list[tuple]) -> dict:
    """Summed token usage of some calls (what the providers reported)."""
    total = {"prompt_tokens": 0, "completion_tokens": 0, "calls": len(calls)}
    for _request, generation in calls:
        usage = getattr(generation, "usage", None)
        if usage is not None:
            total["prompt_tokens"] += usage.prompt_tokens or 0
            total["completion_tokens"] += usage.completion_tokens or 0
    return total


@dataclass
class Trial:
    """One conversation: what was said and done, how it ended, and its score."""
    task_id: str
    trial: int
    events: list = field(default_factory=list)      # the transcript, as the JSONL lines
    end: str = ""
    steps: int = 0
    errors: int = 0
    writes: list = field(default_factory=list)
    score: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def infra_error(self) -> bool:
        return self.end == "infrastructure_error"


def play(module: Any, tools: Any, task: dict, agent_provider: Any, user_provider: Any, *,
         trial: int = 0, max_steps: int = MAX_STEPS, max_errors: int = MAX_ERRORS,
         gold: str | None = None, retries: int = 2, sleep: Callable[[float], Any] = time.sleep,
         agent_options: dict | None = None) -> Trial:
    """Play one τ²-style conversation of ``task`` between ``user_provider`` (the customer) and
    the agent ``module.build_agent`` builds on ``agent_provider``, and score it. ``module`` is the
    domain module (``airline``, ``retail``), ``tools`` its raw tools (``airline_tools``,
    ``retail_tools``: τ²'s database hash and, without ``gold``, the gold replay).

    A model call that fails after the provider's own retries is tried ``retries`` more times
    (the same message id, as falai's host loop does); after that the trial is an
    ``infrastructure_error``, which τ² leaves out of its metrics.
    """
    started = time.monotonic()
    out = Trial(task_id=str(task["id"]), trial=trial)
    db = module.load_db()
    recorder = Recording(agent_provider)
    agent = module.build_agent(db, recorder, fake_clock(module.NOW + "Z"),
                               on_write=lambda name, arguments, outcome: out.writes.append(
                                   {"name": name, "arguments": arguments, "outcome": outcome}),
                               **(agent_options or {}))
    customer_model = Recording(user_provider)
    customer = UserSimulator(customer_model, task)
    transcript = [{"role": "assistant", "content": module.FIRST_MESSAGE}]   # τ²: the agent opens
    agent_texts = [module.FIRST_MESSAGE]
    out.events.append({"type": "meta", "domain": module.DOMAIN, "task_id": out.task_id,
                       "trial": trial, "user_system_prompt": customer.system})
    out.events.append({"type": "message", "role": "assistant", "content": module.FIRST_MESSAGE,
                       "step": 0})
    session, number, written = None, 0, 0

    def retried(call: Callable[[], Any]) -> Any:
        for attempt in range(retries + 1):
            try:
                return call()
            except ProviderError as error:
                out.events.append({"type": "provider_error", "kind": error.kind,
                                   "message": str(error)})
                if attempt == retries or error.kind in CONFIGURATION_ERRORS:
                    raise
                sleep(2.0 * (attempt + 1))
        return None

    try:
        while True:
            text = retried(lambda: customer.reply(transcript))
            out.steps += 1
            transcript.append({"role": "user", "content": text})
            out.events.append({"type": "message", "role": "user", "content": text,
                               "step": out.steps})
            if not text:
                out.end = "user_error"              # τ²: an empty message ends it, unscored
                break
            if is_stop(text):
                out.end = "user_stop"
                break
            if out.steps >= max_steps:
                out.end = "max_steps"
                break
            number += 1
            history = [dict(item) for item in transcript[:-1]]
            result = retried(lambda: agent.turn(session_id=f"{task['id']}-{trial}", session=session,
                                                message=text, id=f"m{number}", history=history))
            for attempt in range(retries):          # a failed speak call is deferred to a wake
                if result.messages or not any((o.code or "").startswith("provider-")
                                              for o in result.outcomes):
                    break
                wakes = [entry.key for entry in result.schedule]
                if not wakes:
                    break
                sleep(2.0 * (attempt + 1))
                asked = [*history, {"role": "user", "content": text}]   # unanswered: answer it
                result = retried(lambda: agent.turn(session_id=f"{task['id']}-{trial}",
                                                    session=result.session, wake=wakes[0],
                                                    history=asked))
            session = result.session
            failed = {o.code for o in result.outcomes if (o.code or "").startswith("provider-")}
            for code in failed & set(CONFIGURATION_OUTCOMES):
                raise ProviderError(f"the agent's speak call failed ({code})", provider="falai",
                                    kind=CONFIGURATION_OUTCOMES[code])
            calls = recorder.take()
            out.usage = _add(out.usage, {f"agent_{k}": v for k, v in usage_of(calls).items()})
            for tool_call in tool_rounds(calls):
                out.steps += 2                       # τ²: the call, then the environment's answer
                if str(tool_call["result"]).startswith("Error:"):
                    out.errors += 1
                out.events.append({"type": "tool_call", **tool_call})
            out.events.extend({"type": "write", **write} for write in out.writes[written:])
            written = len(out.writes)
            texts = [m.text for m in result.messages if m.text]
            if not texts:
                if failed:
                    out.end = "infrastructure_error"
                else:
                    out.end = "agent_error"          # τ²: an empty agent message ends it, unscored
                break
            reply = "\n\n".join(texts)
            out.steps += len(texts)
            agent_texts += texts
            transcript.append({"role": "assistant", "content": reply})
            out.events.append({"type": "message", "role": "assistant", "content": reply,
                               "step": out.steps,
                               "outcomes": [o.code for o in result.outcomes if o.code]})
            if out.errors >= max_errors:
                out.end = "too_many_errors"
                break
            if out.steps >= max_steps:
                out.end = "max_steps"
                break
    except ProviderError as error:
        if error.kind in CONFIGURATION_ERRORS:
            raise                               # a key or model to fix: no use going on
        out.end = "infrastructure_error"
        out.events.append({"type": "infrastructure_error", "kind": error.kind,
                           "message": str(error)})
    customer_usage = usage_of(customer_model.take())
    out.usage = _add(out.usage, {f"user_{k}": v for k, v in customer_usage.items()})
    out.events.extend({"type": "write", **write} for write in out.writes[written:])
    tools_gold = gold if gold is not None else gold_hash(tools, task)
    final = tools.db_hash(db)
    out.score = score(task, end=out.end, final_hash=final, gold=tools_gold, agent_texts=agent_texts)
    out.score.update({"final_hash": final, "gold_hash": tools_gold})
    out.seconds = round(time.monotonic() - started, 2)
    out.events.append({"type": "score", "task_id": out.task_id, "trial": trial, "end": out.end,
                       "steps": out.steps, "tool_errors": out.errors, "usage": out.usage,
                       "seconds": out.seconds, **out.score})
    return out


def _add(a: dict, b: dict) -> dict:
    return {key: a.get(key, 0) + b.get(key, 0) for key in set(a) | set(b)}


# 4. The program ##############################################################################

NO_MODEL = """No model is configured. Set one of:
  GEMINI_API_KEY                      Gemini (FALAI_MODEL, default gemini-3.8-flash)
  ANTHROPIC_API_KEY                   Anthropic (FALAI_MODEL, default claude-haiku-4-5)
  OPENAI_API_KEY                      OpenAI (FALAI_MODEL, default gpt-4.1-mini)
  OPENAI_BASE_URL [+ OPENAI_API_KEY]  an OpenAI-compatible server (FALAI_MODEL: its model name)
and optionally FALAI_USER_MODEL for the simulated customer (default: the agent's model).
See docs/guide/providers.md."""


@dataclass(frozen=True)
class Models:
    """How to make the two providers (a fresh one per conversation) and what to call them."""
    vendor: str
    agent_model: str
    user_model: str
    make: Callable[[str], Any]          # model id -> provider


def models_from_env(environ: dict | None = None) -> Models | None:
    """The providers the environment configures, chosen as examples/concierge.py chooses (Gemini
    first, then Anthropic, then an OpenAI-compatible server or OpenAI); None when none is."""
    env = os.environ if environ is None else environ
    model, user_model = env.get("FALAI_MODEL"), env.get("FALAI_USER_MODEL")
    config = {"temperature": 0.0}       # τ²'s default for both models; dropped where refused
    if env.get("FALAI_MAX_TOKENS"):
        config["maxTokens"] = int(env["FALAI_MAX_TOKENS"])
    if env.get("GEMINI_API_KEY"):
        vendor, default = "gemini", "gemini-3.8-flash"
    elif env.get("ANTHROPIC_API_KEY"):
        vendor, default = "anthropic", "claude-haiku-4-5"
    elif env.get("OPENAI_BASE_URL"):
        vendor, default = "openai-compatible", "llama3.1"
    elif env.get("OPENAI_API_KEY"):
        vendor, default = "openai", "gpt-4.1-mini"
    else:
        return None
    agent_model = model or default

    def make(model_id: str) -> Any:
        import falai_providers as fp        # needs requests: only a live run imports it
        if vendor == "gemini":
            return fp.GeminiProvider(api_key=env["GEMINI_API_KEY"], model=model_id, config=config)
        if vendor == "anthropic":
            return fp.AnthropicProvider(api_key=env["ANTHROPIC_API_KEY"], model=model_id,
                                        config=config)
        if vendor == "openai":
            return fp.OpenAICompatibleProvider(api_key=env["OPENAI_API_KEY"], model=model_id,
                                               config=config)
        return fp.OpenAICompatibleProvider(
            name="local", base_url=env["OPENAI_BASE_URL"], api_key=env.get("OPENAI_API_KEY"),
            model=model_id, server=env.get("FALAI_SERVER") or None,
            structured_output=env.get("FALAI_STRUCTURED_OUTPUT") or None, config=config)

    return Models(vendor=vendor, agent_model=agent_model, user_model=user_model or agent_model,
                  make=make)


def task_ids(spec: str | None, tasks: list[dict], domain: str) -> list[str]:
    """The task ids ``--tasks`` names (``0-4,7``: ranges and single ids), else τ²'s base split."""
    known = [str(t["id"]) for t in tasks]
    if not spec:
        split = json.loads((DATA / domain / "split_tasks.json").read_text(encoding="utf-8"))
        base = set(split.get("base") or known)
        return [i for i in known if i in base]
    wanted: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if re.fullmatch(r"\d+-\d+", part):
            low, high = map(int, part.split("-"))
            wanted += [str(n) for n in range(low, high + 1)]
        elif part:
            wanted.append(part)
    missing = [i for i in wanted if i not in known]
    if missing:
        raise SystemExit(f"no {domain} task with id {', '.join(missing)}")
    return wanted


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="live.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=("airline", "retail"), default="airline")
    parser.add_argument("--tasks", help="task ids, e.g. 0-4,7 (default: τ²'s base split)")
    parser.add_argument("--trials", type=int, default=4, help="trials per task (default 4)")
    parser.add_argument("--out", help="the transcripts' folder (default tau2-live/<domain>-<time>)")
    parser.add_argument("--max-steps", type=int, default=MAX_STEPS)
    parser.add_argument("--max-errors", type=int, default=MAX_ERRORS)
    parser.add_argument("--concurrency", type=int, default=1, help="conversations at once")
    parser.add_argument("--check-words", action="store_true",
                        help="build the agent with check_words=True (the customer's own words "
                             "must say the yes)")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.concurrency < 1:
        parser.error("--trials and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None, *, environ: dict | None = None,
         models: Models | None = None, stdout: Any = None) -> int:
    """Run the live benchmark; the exit status: 0, 1 when a model call fails for a reason
    retrying cannot fix (a key, a model name), 2 when no model is configured."""
    args = parse(argv)
    say = (lambda text="": print(text, file=stdout, flush=True)) if stdout else \
        (lambda text="": print(text, flush=True))
    models = models or models_from_env(environ)
    if models is None:
        print(NO_MODEL, file=sys.stderr)
        return 2
    module = importlib.import_module(args.domain)
    tools = importlib.import_module(f"{args.domain}_tools")
    tasks = {str(t["id"]): t for t in tools.load_tasks()}
    ids = task_ids(args.tasks, list(tasks.values()), args.domain)
    out_dir = Path(args.out or Path("tau2-live") / f"{args.domain}-"
                   f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    recorded = recorded_gold_hashes(args.domain)
    golds = {}
    for i in ids:
        golds[i] = gold_hash(tools, tasks[i])
        if recorded.get(i) and recorded[i] != golds[i]:
            say(f"warning: task {i}: the replayed gold hash is not the one τ²'s code recorded")
    say(f"falai on τ²-bench {args.domain}, live: {LABEL}")
    say(f"agent: {models.agent_model} ({models.vendor}); simulated customer: {models.user_model}; "
        f"{len(ids)} task(s) x {args.trials} trial(s); transcripts in {out_dir}")
    options = {"check_words": True} if args.check_words else {}

    def run(job: tuple) -> Trial:
        task_id, trial = job
        result = play(module, tools, tasks[task_id], models.make(models.agent_model),
                      models.make(models.user_model), trial=trial, max_steps=args.max_steps,
                      max_errors=args.max_errors, gold=golds[task_id], agent_options=options)
        path = out_dir / f"task-{task_id}-trial-{trial}.jsonl"
        with path.open("w", encoding="utf-8") as fp:
            for event in result.events:
                fp.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
        flag = " (NL assertion not judged)" if result.score.get("nl_unjudged") else ""
        say(f"  task {task_id} trial {trial}: reward {result.score['reward']:.0f}{flag}, "
            f"end {result.end}, {result.steps} steps, {len(result.writes)} write(s), "
            f"{result.seconds}s")
        return result

    jobs = [(task_id, trial) for trial in range(args.trials) for task_id in ids]
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            results = list(pool.map(run, jobs))
    except ProviderError as error:
        print(f"The model call failed ({error.kind}): {error}\nCheck the key and the model "
              "(FALAI_MODEL, FALAI_USER_MODEL); see docs/guide/providers.md.", file=sys.stderr)
        return 1
    summary = summarize(results, args.domain, models)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False),
                                          encoding="utf-8")
    for line in report(summary):
        say(line)
    return 0


def summarize(results: list[Trial], domain: str, models: Models) -> dict:
    """pass^k over the trials that ran (infrastructure errors left out, as τ² does), the flags,
    and τ²'s published rows for the agent's model."""
    outcomes: dict = {}
    for r in results:
        if not r.infra_error:
            outcomes.setdefault(r.task_id, []).append(is_success(r.score["reward"]))
    nl = sorted({r.task_id for r in results if r.score.get("nl_unjudged")}, key=_numeric)
    return {
        "label": LABEL, "domain": domain, "agent_model": models.agent_model,
        "user_model": models.user_model, "vendor": models.vendor,
        "tasks": len({r.task_id for r in results}), "conversations": len(results),
        "infrastructure_errors": sum(r.infra_error for r in results),
        "ends": _count(r.end for r in results),
        "pass_hat_k": {str(k): v for k, v in pass_hat_ks(outcomes).items()},
        "successes": {task: sum(outcomes[task]) for task in sorted(outcomes, key=_numeric)},
        "nl_assertion_unjudged": nl,
        "published": published_for(models.agent_model, domain),
        "tau2": f"{TAU2_REPO}@{TAU2_COMMIT}",
    }


def report(summary: dict) -> list[str]:
    """The summary as lines of text: pass^k beside τ²'s published rows for the model."""
    ks = summary["pass_hat_k"]

    def row(label: str, percents: list) -> str:
        cells = ("       -" if p is None else f"{p:8.1f}" for p in percents)
        return f"  {label:<16}" + "".join(cells)

    lines = ["", f"pass^k on τ²-bench {summary['domain']}: {summary['label']}",
             f"  {summary['tasks']} task(s), {summary['conversations']} conversation(s), "
             f"{summary['infrastructure_errors']} infrastructure error(s) left out",
             f"  {'':<16}" + "".join(f"{'pass^' + str(k):>8}" for k in range(1, 5)),
             row("falai port", [100 * ks[str(k)] if str(k) in ks else None for k in range(1, 5)])]
    unjudged = summary["nl_assertion_unjudged"]
    if unjudged:
        lines.append(f"  NL_ASSERTION not judged (no judge model) on {len(unjudged)} task(s): "
                     "their reward is the DB check alone, an upper bound of τ²'s")
    if not summary["published"]:
        lines.append(f"  τ² published for {summary['agent_model']}: none in {TAU2_REPO}@"
                     f"{TAU2_COMMIT[:7]} web/leaderboard/public/submissions")
    for published in summary["published"]:
        effort = f" (effort {published['effort']})" if published["effort"] else ""
        lines += [row("τ² published", published["pass"]),
                  f"    {published['model']}{effort}, user simulator "
                  f"{published['user_simulator'] or 'not stated'}, every {summary['domain']} task, "
                  f"τ²'s own harness: {published['file']}"]
    lines.append(f"  ends: {summary['ends']}")
    return lines


def _numeric(task_id: str) -> tuple:
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


def _count(values) -> dict:
    counts: dict = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
