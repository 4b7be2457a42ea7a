"""How the readers of model output grow with the reply: time per size, doubling 1 KB to 128 KB.

    python bench/bench_parse.py            # prints a table
    python bench/bench_parse.py --max 64   # stop at 64 KB

Each row is one reader fed one shape of reply (hostile ones above all: long runs of
"{", unclosed strings and objects, deep nesting, long digit runs, many backslashes).
A reader in linear time doubles its time when the reply doubles: the last column is
the growth factor per doubling from 16 KB up (geometric mean), the target is x2;
a quadratic reader shows x4. Figures are the best of a few runs.

The StreamDecoder rows feed the text as the engine does (``_stream_round``): the
provider's deltas, 16 characters each, through ``feed``. One row pushes the whole
accumulated text every 16 characters instead (``push``, kept for callers that only
have the text so far): each push compares and returns whole texts, so it grows
above x2.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import falai  # noqa: E402
import falai_calls  # noqa: E402
from falai import Generation, Scope, ScriptedProvider, # noqa: E402
                   js_number, render
from falai_base import find_json_object
from falai_calls import StreamDecoder, read_round, tool_arguments
from falai_providers import (_Accumulator, _parse_envelope, _SseReader, _StreamedChunk,  # noqa: E402
                             parse_tool_args)

KB = 1024


def repeat_to(unit: str, size: int) -> str:
    """``unit`` repeated to ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def nested(opening: str, middle: str, closing: str, size: int) -> str:
    """``opening * k + middle + closing * k`` with k chosen to fill ``size`` characters."""
    k = max(1, (size - len(middle)) // (len(opening) + len(closing)))
    return opening * k + middle + closing * k


def stream(text: str, chunk: int = 16) -> None:
    """Feed ``text`` to a StreamDecoder as the engine does: each provider delta, ``chunk`` characters."""
    decoder = StreamDecoder()
    for i in range(0, len(text), chunk):
        decoder.feed(text[i:i + chunk])


def stream_push(text: str, chunk: int = 16) -> None:
    """Push ``text`` to a StreamDecoder as a whole accumulated text, ``chunk`` characters more each time."""
    decoder, accumulated = StreamDecoder(), ""
    for i in range(0, len(text), chunk):
        accumulated += text[i:i + chunk]
        decoder.push(accumulated)


def compaction_fallback(size: int) -> None:
    """The oldest-first drop after a failed summary call, over a history of ``size // 64`` items."""
    provider = ScriptedProvider(script={"compaction": [RuntimeError("no summary")]})
    agent = falai.falai().agent(name="Ana", provider=provider, idle={"prompt": "Atenda."},
                                compaction={"maxTokens": size // 2})
    history = [{"role": "user" if i % 2 else "assistant", "content": repeat_to("palavra ", 60)}
               for i in range(size // 64)]
    falai_calls.compact_history(agent, history)


def provider_stream(text: str, chunk: int = 16) -> None:
    """Fold ``text`` as a provider's streamed deltas of ``chunk`` characters, as one attempt does:
    the accumulator keeps the pieces, each chunk handed out reads only its delta."""
    accumulator = _Accumulator()
    for i in range(0, len(text), chunk):
        delta = accumulator.fold({"type": "delta", "content": text[i:i + chunk],
                                  "tool_calls": [{"index": 0, "name": "t", "arguments": text[i:i + chunk]}]})
        _StreamedChunk(delta, accumulator.pieces)
    assert len(accumulator.text) == len(text)
    accumulator.tool_calls()


def sse(text: str, chunk: int = 512) -> None:
    """Frame ``text`` (SSE bytes) through the provider's reader in reads of ``chunk`` bytes."""
    reader, data = _SseReader(), text.encode()
    for i in range(0, len(data), chunk):
        reader.feed(data[i:i + chunk])
    reader.finish()


def envelope(size: int) -> Generation:
    return Generation(message=repeat_to('{"message":', size))


# (reader, shape, function of the size in characters that does the work)
CASES = [
    ("find_json_object", "prose, then an object", lambda n: find_json_object(repeat_to("texto ", n) + '{"a":1}')),
    ("find_json_object", '"{" run', lambda n: find_json_object("{" * n)),
    ("find_json_object", '"{"a":" unclosed', lambda n: find_json_object(repeat_to('{"a":', n))),
    ("find_json_object", "deep valid object", lambda n: find_json_object(nested('{"a":', "1", "}", n))),
    ("find_json_object", "balanced, invalid nest", lambda n: find_json_object(nested('{"a":', "1", ",}", n))),
    ("find_json_object", "unclosed string", lambda n: find_json_object('{"a":"' + "x" * n)),
    ("find_json_object", '"{" inside strings', lambda n: find_json_object(repeat_to('{"a":"{"', n))),
    ("find_json_object", "two tokenizations", lambda n: find_json_object(repeat_to('{"a":"{",":[","', n))),
    ("find_json_object", "many backslashes", lambda n: find_json_object('{"a":"' + "\\" * n)),
    ("find_json_object", '"}" run', lambda n: find_json_object("{" + "}" * n)),
    ("read_round", "envelope-shaped prose", lambda n: read_round(envelope(n), [])),
    ("js_number", "digits, then junk", lambda n: js_number("1" * n + "x")),
    ("js_number", "digits, dot, digits, junk", lambda n: js_number("1" * (n // 2) + "." + "1" * (n // 2) + "e")),
    ("js_number", "long exponent, junk", lambda n: js_number("1e" + "1" * n + "x")),
    ("tool_arguments", "fenced object", lambda n: tool_arguments("```json\n{\"a\":\"" + "x" * n + "\"}\n```")),
    ("tool_arguments", "backtick run", lambda n: tool_arguments("`" * n)),
    ("tool_arguments", "fence, newline-fence run", lambda n: tool_arguments("```" + repeat_to("\n```", n) + "x")),
    ("tool_arguments", "deep array", lambda n: tool_arguments("[" * n)),
    ("StreamDecoder", "message, 16-char deltas", lambda n: stream('{"message":"' + repeat_to("olá ", n) + '"}')),
    ("StreamDecoder", "escapes", lambda n: stream('{"message":"' + repeat_to("\\n\\u00e9\\\\", n))),
    ("StreamDecoder", "long key", lambda n: stream('{"' + "k" * n)),
    ("StreamDecoder", "whitespace only", lambda n: stream(" " * n)),
    ("StreamDecoder", "backticks only", lambda n: stream("`" * n)),
    ("StreamDecoder", "prose, 1-char deltas", lambda n: stream(repeat_to("olá ", n), chunk=1)),
    ("StreamDecoder", "long key, 1-char deltas", lambda n: stream('{"' + "k" * n, chunk=1)),
    ("StreamDecoder.push", "message, 16-char pushes",
     lambda n: stream_push('{"message":"' + repeat_to("olá ", n) + '"}')),
    ("render", '"{" run in a template', lambda n: render("{" * n, Scope(data={}))),
    ("render", "blank value, blank runs", lambda n: render("{{data.x}}" + repeat_to(" \t", n) + "x",
                                                           Scope(data={"x": ""}))),
    ("render", "blank value, spaced words", lambda n: render("{{data.x}}" + repeat_to("a  ", n),
                                                             Scope(data={"x": ""}))),
    ("compaction fallback", "history of n/64 items", compaction_fallback),
    ("parse_tool_args", "backslash run", lambda n: parse_tool_args("\\" * n)),
    ("parse_tool_args", "string, odd backslash run", lambda n: parse_tool_args('{"a":"x' + "\\" * (n | 1))),
    ("parse_tool_args", "backslashes, then u00", lambda n: parse_tool_args('{"a":"' + "\\" * n + "u00")),
    ("parse_tool_args", '"{" run', lambda n: parse_tool_args("{" * n)),
    ("parse_tool_args", "many objects", lambda n: parse_tool_args(repeat_to('{"q":"x"}', n))),
    ("_parse_envelope", "unclosed envelope", lambda n: _parse_envelope('{"message":"' + "x" * n)),
    ("provider stream", "16-char deltas, text+args", lambda n: provider_stream(repeat_to("olá ", n))),
    ("_SseReader", "data: lines", lambda n: sse(repeat_to('data: {"a":"b"}\n\n', n))),
    ("_SseReader", "bare unbalanced braces", lambda n: sse("{" * n)),
]


def best_time(work, size: int) -> float:
    """Best of up to nine runs (at least three), fewer once a second is spent: the least disturbed run."""
    best, spent = math.inf, 0.0
    for run in range(9):
        start = time.perf_counter()
        work(size)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if run >= 2 and spent > 1.0:
            break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=128, help="largest reply, in KB (a power of two)")
    args = parser.parse_args()
    sizes = [KB << i for i in range(int(math.log2(max(1, args.max))) + 1)]
    falai.log.disabled = True        # the compaction fallback logs a warning per run
    logging.disable(logging.WARNING)  # so do broken tool arguments
    header = f"{'reader':<20} {'shape':<27}" + "".join(f"{s // KB:>7}K" for s in sizes) + "   x/doubling"
    print("time per reply, ms")
    print(header)
    print("-" * len(header))
    worst = 0.0
    for reader, shape, work in CASES:
        times = [best_time(work, size) for size in sizes]
        tail = [t for s, t in zip(sizes, times) if s >= 16 * KB]
        growth = (tail[-1] / tail[0]) ** (1 / (len(tail) - 1)) if len(tail) > 1 and tail[0] > 0 else float("nan")
        at_64k = dict(zip(sizes, times)).get(64 * KB)
        worst = max(worst, at_64k or 0.0)
        print(f"{reader:<20} {shape:<27}" + "".join(f"{t * 1000:>8.2f}" for t in times) + f"   x{growth:.2f}")
    print()
    print(f"slowest 64 KB reply: {worst * 1000:.1f} ms")


if __name__ == "__main__":
    main()
