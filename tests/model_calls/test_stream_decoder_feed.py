"""StreamDecoder.feed: the engine's linear path gives what push gives (model-calls.md §8, issue 8)."""
from __future__ import annotations

import json

from hypothesis import given, strategies as st

from falai import Generation, GenerationChunk, GenerateRequest
from falai_calls import stream_round
from falai_calls import StreamDecoder
from fuzz_scenarios import fuzz_settings

# Texts made of the pieces the decoder reacts to, so that envelopes, fences, escapes and prose all come up.
pieces = st.sampled_from(['{', '}', '[', ']', '"', 'message', '"message"', '"message": "', ':', ',', ' ', '\n',
                          '\\', 'u', '00e9', 'd83d', '\\ud83d', '\\ude00', '\\u00', 'n', 'a', 'Oi', 'é', '`', '```',
                          'null', '"k"'])
texts = st.one_of(
    st.lists(pieces, max_size=30).map("".join),
    st.builds(lambda lead, message, ascii_only, before: lead + json.dumps({**before, "message": message},
                                                                          ensure_ascii=ascii_only),
              st.sampled_from(["", "  \n", "```json\n", "``", "`"]), st.text(max_size=12), st.booleans(),
              st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)))


def split(text, cuts):
    """``text`` in pieces of the given lengths, the rest last (empty pieces included)."""
    out, at = [], 0
    for cut in cuts:
        out.append(text[at:at + cut])
        at += cut
    out.append(text[at:])
    return out


@fuzz_settings(400)
@given(texts, st.lists(st.integers(0, 7), max_size=40))
def test_feeding_any_split_gives_the_deltas_push_gives(text, cuts):
    """Each feed returns the delta a push of the text so far returns; joined, they are push's text."""
    parts = split(text, cuts)
    fed, pushed = StreamDecoder(), StreamDecoder()
    accumulated, feed_deltas, push_deltas = "", [], []
    for part in parts:
        accumulated += part
        feed_deltas.append(fed.feed(part))
        push_deltas.append(pushed.push(accumulated)[1])
        assert fed.text == pushed.text
    assert feed_deltas == push_deltas
    assert "".join(feed_deltas) == fed.text == StreamDecoder().push(text)[0]


@fuzz_settings(200)
@given(texts, st.lists(st.integers(0, 7), max_size=20), texts)
def test_a_push_after_feeds_compares_with_what_was_fed(text, cuts, other):
    """The final chunk's accumulated text adds nothing; a text that does not extend the feeds starts over."""
    decoder = StreamDecoder()
    for part in split(text, cuts):
        decoder.feed(part)
    so_far = decoder.text
    assert decoder.push(text) == (so_far, "")
    fresh = StreamDecoder().push(other)[0]
    expected = fresh[len(so_far):] if fresh.startswith(so_far) else fresh
    assert decoder.push(other) == (fresh, expected)       # continued or started over, push's documented delta


def test_an_escape_split_across_feeds_is_held_back_then_decoded():
    """model-calls.md §8: the decoder keeps the unread end of a feed, never half a character."""
    decoder = StreamDecoder()
    assert [decoder.feed(p) for p in ['{"message": "a\\', 'u00', 'e9\\ud83d', '\\ud', 'e00!"}']] == \
        ["a", "", "é", "", "😀!"]
    assert decoder.text == "aé😀!"


def test_a_key_split_across_feeds_is_read_whole():
    """A top-level key read over many feeds is still recognised (and a look-alike is not)."""
    decoder = StreamDecoder()
    deltas = [decoder.feed(c) for c in '{"messagex": "no", "mess\\u0061ge": "yes"}']
    assert "".join(deltas) == "yes" == decoder.text


def test_prose_keeps_leading_whitespace_and_backticks_read_in_earlier_feeds():
    """model-calls.md §8: prose passes through verbatim, including what was read while undecided."""
    decoder = StreamDecoder()
    assert [decoder.feed(p) for p in [" ", "\n", "`", "`", "x", "`` y"]] == ["", "", "", "", " \n``x", "`` y"]


class Provider:
    """Streams the given chunks as (delta, accumulated) pairs, then a done chunk."""

    def __init__(self, chunks, final):
        self.chunks, self.final = chunks, final

    def generate_stream(self, request):
        for delta, accumulated in self.chunks:
            yield GenerationChunk(delta=delta, accumulated=accumulated, done=False)
        yield GenerationChunk(delta="", accumulated=self.final, done=True)


def drain(provider):
    """The deltas and the Generation of one streamed round."""
    deltas, rounds = [], stream_round(provider, GenerateRequest(system="", prompt="", history=[]))
    while True:
        try:
            deltas.append(next(rounds))
        except StopIteration as stop:
            return deltas, stop.value


ENVELOPE = '{"message": "Oi, \\u00e9 isso"}'


def test_the_engine_feeds_deltas_and_returns_the_raw_text():
    """providers.md §1.6 rule 2: deltas are read, accumulated kept as the round's raw message."""
    chunks = [(ENVELOPE[i:i + 3], ENVELOPE[:i + 3]) for i in range(0, len(ENVELOPE), 3)]
    deltas, generation = drain(Provider(chunks, ENVELOPE))
    assert "".join(deltas) == "Oi, é isso" and len(deltas) > 2
    assert isinstance(generation, Generation) and generation.message == ENVELOPE


def test_a_provider_without_deltas_is_read_from_its_accumulated_text():
    """A custom provider that sends only the text so far (empty deltas) still streams."""
    chunks = [("", ENVELOPE[:i + 5]) for i in range(0, len(ENVELOPE), 5)]
    deltas, generation = drain(Provider(chunks, ENVELOPE))
    assert "".join(deltas) == "Oi, é isso" and generation.message == ENVELOPE


def test_a_provider_without_accumulated_text_is_added_up_from_its_deltas():
    """A custom provider that sends only deltas: the raw message is their sum."""
    chunks = [(ENVELOPE[i:i + 4], None) for i in range(0, len(ENVELOPE), 4)]
    deltas, generation = drain(Provider(chunks, None))
    assert "".join(deltas) == "Oi, é isso" and generation.message == ENVELOPE
