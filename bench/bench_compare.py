"""The same four-turn booking conversation in falai, LangGraph and Pydantic AI: time per turn and the ratios.

    python bench/bench_compare.py               # 5 rounds of 100 conversations each
    python bench/bench_compare.py --rounds 2 --conversations 50

The conversation is the concierge's booking (README, examples/concierge.py),
cut to two fields:

    1. "Oi!"                       no flow takes it: the idle reply greets
    2. "Quero reservar um quarto"  routed to the booking flow, which asks the name
    3. "Sou a Ana"                 the name is read from the message; the flow asks the date
    4. "Dia 12 de outubro"         the date is read; the flow confirms the booking

Every turn makes the same two model calls in each framework, and every model
is an instant in-process fake (no network, no tokens): one structured-output
call that scores the booking flow and reads the fields (a Pydantic model, or
falai's own understand schema), then one reply call. Each framework does what
its documentation shows for this, so each pays for its own machinery:

- falai: ``agent.turn`` with ``ScriptedProvider``; the session and the
  conversation so far (``history=``) are passed back in on the next turn, as
  the host loop of examples/concierge.py does. The flow, its fields, the
  routing and the prompts are falai's.
- LangGraph: a ``StateGraph`` (state: the messages with ``add_messages``, the
  flow, the two fields) with an understand node calling
  ``model.with_structured_output(Understanding)``, a conditional edge to a
  booking node or an idle node, each of which asks a chat model for the reply;
  compiled with an ``InMemorySaver`` checkpointer, one ``thread_id`` per
  conversation. The model is a ``BaseChatModel`` subclass that replays
  scripted messages and binds tools the way real chat models do.
- Pydantic AI: an ``Agent`` with ``output_type=Understanding`` and an
  ``Agent`` for the reply, both on ``FunctionModel``s that replay scripted
  parts; the routing and the fields are plain Python in the host (Pydantic AI
  has no flows), and the reply agent gets the step's instruction through
  ``instructions=`` and the conversation so far through ``message_history``.

Each framework runs in its own subprocess, falai in this interpreter's
environment and the other two each in a virtual environment of its own under
``bench/.venvs/`` (created on the first run from PyPI with the versions pinned
in ``bench/compare-*.txt``; neither framework is ever a dependency of falai).
The frameworks take turns over several rounds, so the drift of this shared
machine falls on all of them alike; a figure is the median over the rounds of
each round's median over its conversations. Times are the process's CPU time
(``time.process_time``), not wall time: on a busy machine a turn longer than a
scheduler slice is preempted, so its wall time grows with the load while a
short turn's does not, which would inflate the ratios. The import time is that
of a fresh interpreter importing what the conversation uses, bytecode cached.
"""
from __future__ import annotations

import itertools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
VENVS = os.path.join(HERE, ".venvs")

MESSAGES = ["Oi!", "Quero reservar um quarto", "Sou a Ana", "Dia 12 de outubro"]
# What the fake models answer, turn by turn: the understanding (booking score, fields), then the reply.
UNDERSTANDINGS = [{"reserva": 0}, {"reserva": 95}, {"reserva": 90, "nome": "Ana"},
                  {"reserva": 90, "data": "2026-10-12"}]
REPLIES = ["Olá! Sou o Concierge. Posso ajudar com uma reserva?", "Claro! Em nome de quem?",
           "Obrigado, Ana. Para qual data?", "Reserva feita, Ana: entrada em 2026-10-12."]
PERSONA = "Você é o concierge de uma rede de hotéis: cordial, breve, em português do Brasil."
IDLE = "Apresente-se e ofereça ajuda com uma reserva de quarto."
ASK = {"nome": "Pergunte o nome do hóspede.", "data": "Pergunte a data de entrada (AAAA-MM-DD)."}
CONFIRM = "Confirme a reserva com o nome e a data."
ROUTE_AT = 40   # the score that starts the booking flow, as falai routes (runtime.md §3.5)

FRAMEWORKS = {  # name -> requirements file (None: this interpreter, falai from this tree)
    "falai": None,
    "LangGraph": os.path.join(HERE, "compare-langgraph.txt"),
    "Pydantic AI": os.path.join(HERE, "compare-pydantic-ai.txt"),
}


# falai ----------------------------------------------------------------------------------------

def falai_conversation(conversations: int):
    """(import ms, new_conversation, model calls so far, versions) for falai."""
    sys.path.insert(0, ROOT)
    started = time.process_time()
    import falai  # noqa: PLC0415
    imported = (time.process_time() - started) * 1000

    understand = [{"flows": {"reserva": u["reserva"]}, "fields": {k: v for k, v in u.items() if k != "reserva"}}
                  for u in UNDERSTANDINGS]
    provider = falai.ScriptedProvider(script={"understand": understand * conversations,
                                              "speak": [{"message": text} for text in REPLIES] * conversations})
    f = falai.falai().fields({"nome": {"type": "string", "ask": ASK["nome"]},
                              "data": {"type": "string", "description": "Data de entrada, AAAA-MM-DD.",
                                       "ask": ASK["data"]}})
    agent = f.agent(name="Concierge", provider=provider, persona=PERSONA, idle={"prompt": IDLE},
                    clock=falai.fake_clock("2026-09-20T10:00:00.000Z"), flows=[f.flow({
                        "id": "reserva", "name": "Reserva", "description": "Quer reservar um quarto.",
                        "on": [{"message": ["quer reservar um quarto"]}],
                        "steps": [{"id": "quem", "collect": ["nome"]}, {"id": "quando", "collect": ["data"]},
                                  {"id": "confirma", "prompt": CONFIRM}]})])
    numbers = iter(range(10 ** 9))

    def new_conversation():
        state: dict = {"id": f"c{next(numbers)}", "session": None, "history": []}

        def turn(text: str) -> str:
            result = agent.turn(session_id=state["id"], session=state["session"], message=text, id=text,
                                history=state["history"])
            state["session"] = result.session
            state["history"] = [*state["history"], {"role": "user", "content": text},
                                *({"role": "assistant", "content": m.text} for m in result.messages)]
            return result.messages[0].text
        return turn
    return imported, new_conversation, lambda: len(provider.calls), {"falai": falai.__version__}


# LangGraph ------------------------------------------------------------------------------------

def langgraph_conversation(conversations: int):
    """(import ms, new_conversation, model calls so far, versions) for LangGraph."""
    started = time.process_time()
    from typing import Annotated, Any, TypedDict  # noqa: PLC0415

    from langchain_core.language_models import BaseChatModel  # noqa: PLC0415
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: PLC0415
    from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: PLC0415
    from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: PLC0415
    from langgraph.checkpoint.memory import InMemorySaver  # noqa: PLC0415
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415
    from langgraph.graph.message import add_messages  # noqa: PLC0415
    from pydantic import BaseModel, Field  # noqa: PLC0415
    imported = (time.process_time() - started) * 1000

    class Understanding(BaseModel):
        """What the customer's latest message says."""
        reserva: int = Field(description="0-100: how sure it is about booking a room.")
        nome: str | None = Field(None, description="The guest's name, if given.")
        data: str | None = Field(None, description="Data de entrada, AAAA-MM-DD, if given.")

    class ScriptedChatModel(BaseChatModel):
        """Replays scripted messages, one a call; binds tools as real chat models do."""
        replies: Any          # an iterator of AIMessages
        calls: list = []      # (pydantic gives each model a list of its own)

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            self.calls.append(messages)
            return ChatResult(generations=[ChatGeneration(message=next(self.replies).model_copy())])

        def bind_tools(self, tools, *, tool_choice=None, **kwargs):
            return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], tool_choice=tool_choice,
                             **kwargs)

    understand_chat = ScriptedChatModel(replies=itertools.cycle([
        AIMessage(content="", tool_calls=[{"name": "Understanding", "args": u, "id": "call"}])
        for u in UNDERSTANDINGS]))
    understand_model = understand_chat.with_structured_output(Understanding)
    reply_model = ScriptedChatModel(replies=itertools.cycle(AIMessage(content=text) for text in REPLIES))

    Booking = TypedDict("Booking", {"messages": Annotated[list, add_messages], "flow": str | None,  # noqa: UP013
                                    "nome": str | None, "data": str | None}, total=False)

    def understand(state: Booking) -> dict:
        understood = understand_model.invoke([SystemMessage("Score the booking flow and read the fields."),
                                              *state["messages"]])
        update = {name: getattr(understood, name) for name in ASK if getattr(understood, name)}
        if not state.get("flow") and understood.reserva >= ROUTE_AT:
            update["flow"] = "reserva"
        return update

    def booking(state: Booking) -> dict:
        missing = [name for name in ASK if not state.get(name)]
        instruction = ASK[missing[0]] if missing else CONFIRM
        return {"messages": [reply_model.invoke([SystemMessage(f"{PERSONA}\n{instruction}"), *state["messages"]])]}

    def idle(state: Booking) -> dict:
        return {"messages": [reply_model.invoke([SystemMessage(f"{PERSONA}\n{IDLE}"), *state["messages"]])]}

    graph = StateGraph(Booking)
    graph.add_node("understand", understand)
    graph.add_node("booking", booking)
    graph.add_node("idle", idle)
    graph.add_edge(START, "understand")
    graph.add_conditional_edges("understand", lambda state: "booking" if state.get("flow") else "idle",
                                ["booking", "idle"])
    graph.add_edge("booking", END)
    graph.add_edge("idle", END)
    app = graph.compile(checkpointer=InMemorySaver())
    numbers = iter(range(10 ** 9))

    def new_conversation():
        config = {"configurable": {"thread_id": f"c{next(numbers)}"}}

        def turn(text: str) -> str:
            return app.invoke({"messages": [HumanMessage(text)]}, config)["messages"][-1].content
        return turn
    model_calls = lambda: len(understand_chat.calls) + len(reply_model.calls)  # noqa: E731
    return imported, new_conversation, model_calls, versions("langgraph", "langchain-core", "pydantic")


# Pydantic AI ----------------------------------------------------------------------------------

def pydantic_ai_conversation(conversations: int):
    """(import ms, new_conversation, model calls so far, versions) for Pydantic AI."""
    started = time.process_time()
    from pydantic import BaseModel, Field  # noqa: PLC0415
    from pydantic_ai import Agent  # noqa: PLC0415
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: PLC0415
    from pydantic_ai.models.function import FunctionModel  # noqa: PLC0415
    imported = (time.process_time() - started) * 1000

    class Understanding(BaseModel):
        """What the customer's latest message says."""
        reserva: int = Field(description="0-100: how sure it is about booking a room.")
        nome: str | None = Field(None, description="The guest's name, if given.")
        data: str | None = Field(None, description="Data de entrada, AAAA-MM-DD, if given.")

    calls: list = []
    understandings, replies = itertools.cycle(UNDERSTANDINGS), itertools.cycle(REPLIES)

    async def understand_function(messages, info):      # async, as a real model client is (a sync one runs in a thread)
        calls.append(messages)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, dict(next(understandings)))])

    async def reply_function(messages, info):
        calls.append(messages)
        return ModelResponse(parts=[TextPart(next(replies))])

    understand_agent = Agent(FunctionModel(understand_function), output_type=Understanding,
                             instructions="Score the booking flow and read the fields.")
    reply_agent = Agent(FunctionModel(reply_function), instructions=PERSONA)

    def new_conversation():
        state: dict = {"flow": None, "nome": None, "data": None, "history": []}

        def turn(text: str) -> str:
            understood = understand_agent.run_sync(text, message_history=state["history"]).output
            state.update({name: getattr(understood, name) for name in ASK if getattr(understood, name)})
            if not state["flow"] and understood.reserva >= ROUTE_AT:
                state["flow"] = "reserva"
            missing = [name for name in ASK if not state[name]]
            instruction = IDLE if not state["flow"] else ASK[missing[0]] if missing else CONFIRM
            reply = reply_agent.run_sync(text, message_history=state["history"], instructions=instruction)
            state["history"] = reply.all_messages()
            return reply.output
        return turn
    return imported, new_conversation, lambda: len(calls), versions("pydantic-ai-slim", "pydantic")


def versions(*distributions: str) -> dict:
    from importlib.metadata import version  # noqa: PLC0415
    return {name: version(name) for name in distributions}


BUILDERS = {"falai": falai_conversation, "LangGraph": langgraph_conversation,
            "Pydantic AI": pydantic_ai_conversation}


# One framework, in its own subprocess ---------------------------------------------------------

def measure(framework: str, conversations: int) -> dict:
    """Play the conversation ``conversations`` times (after 5 unmeasured); median time of each turn, in µs."""
    imported, new_conversation, model_calls, installed = BUILDERS[framework](conversations + 5)
    samples: list[list[float]] = [[] for _ in MESSAGES]
    calls_per_turn = []
    for number in range(conversations + 5):
        turn = new_conversation()
        for index, text in enumerate(MESSAGES):
            before = model_calls()
            started = time.process_time()
            reply = turn(text)
            elapsed = time.process_time() - started
            if reply != REPLIES[index]:
                raise AssertionError(f"{framework}, turn {index + 1}: replied {reply!r}, not {REPLIES[index]!r}")
            if number >= 5:
                samples[index].append(elapsed * 1e6)
            calls_per_turn.append(model_calls() - before)
    if set(calls_per_turn) != {2}:
        raise AssertionError(f"{framework}: model calls per turn {sorted(set(calls_per_turn))}, not 2")
    return {"import_ms": imported, "turns_us": [statistics.median(turn) for turn in samples],
            "versions": {**installed, "Python": sys.version.split()[0]}}


# The runner: virtual environments, rounds, the table ------------------------------------------

def interpreter(framework: str) -> str:
    """The Python that runs ``framework``: this one for falai, else its virtual environment's, made if needed."""
    requirements = FRAMEWORKS[framework]
    if requirements is None:
        return sys.executable
    venv = os.path.join(VENVS, os.path.splitext(os.path.basename(requirements))[0].removeprefix("compare-"))
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "installed-requirements.txt")
    wanted = pathlib.Path(requirements).read_text()
    if os.path.exists(stamp) and pathlib.Path(stamp).read_text() == wanted:
        return python
    print(f"bench_compare: installing {framework} into {os.path.relpath(venv)} from PyPI "
          f"({os.path.relpath(requirements)})...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--timeout", "20",
                           "--retries", "1", "-r", requirements], capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        sys.exit(f"bench_compare: could not install {framework} from PyPI into {os.path.relpath(venv)} "
                 f"(pip exited {done.returncode}). The comparison needs PyPI once, to create its virtual "
                 f"environments; check the network, then run it again. pip said:\n{tail}")
    pathlib.Path(stamp).write_text(wanted)
    return python


def run_worker(python: str, framework: str, conversations: int, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPYCACHEPREFIX"] = cache        # the same bytecode cache rule for all three
    done = subprocess.run([python, os.path.abspath(__file__), "--worker", framework, str(conversations)],
                          capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        sys.exit(f"bench_compare: the {framework} run failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def main() -> None:
    if "--worker" in sys.argv:
        framework, conversations = sys.argv[sys.argv.index("--worker") + 1:][:2]
        print(json.dumps(measure(framework, int(conversations))))
        return
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    conversations = (int(sys.argv[sys.argv.index("--conversations") + 1]) if "--conversations" in sys.argv
                     else 100)
    pythons = {framework: interpreter(framework) for framework in FRAMEWORKS}
    results: dict[str, list[dict]] = {framework: [] for framework in FRAMEWORKS}
    with tempfile.TemporaryDirectory() as cache:
        for framework, python in pythons.items():
            run_worker(python, framework, 2, cache)           # checks the conversation, fills the bytecode cache
        for number in range(rounds):
            order = list(FRAMEWORKS) if number % 2 == 0 else list(reversed(FRAMEWORKS))
            for framework in order:
                results[framework].append(run_worker(pythons[framework], framework, conversations, cache))
            print(f"round {number + 1} of {rounds} done", file=sys.stderr)
    print_table(results, rounds, conversations)


def print_table(results: dict[str, list[dict]], rounds: int, conversations: int) -> None:
    def turns(framework: str) -> list[float]:
        return [statistics.median(run["turns_us"][index] for run in results[framework])
                for index in range(len(MESSAGES))]
    base = turns("falai")
    header = ["framework", *(f"turn {n + 1}" for n in range(len(MESSAGES))), "4 turns", "vs falai", "import"]
    rows = []
    for framework in FRAMEWORKS:
        times = turns(framework)
        imported = statistics.median(run["import_ms"] for run in results[framework])
        rows.append([framework, *(f"{t:,.0f} µs" for t in times), f"{sum(times):,.0f} µs",
                     f"{sum(times) / sum(base):.1f}x", f"{imported:,.0f} ms"])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths)) + " |"  # noqa: E731
    print(f"The four-turn booking conversation, 2 model calls a turn (instant fakes); CPU time, median of "
          f"{rounds} rounds of {conversations} conversations each\n")
    print(line(header))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print(line(row))
    installed = {name: version for runs in results.values() for name, version in runs[0]["versions"].items()}
    print("\n" + ", ".join(f"{name} {version}" for name, version in installed.items()))


if __name__ == "__main__":
    main()
