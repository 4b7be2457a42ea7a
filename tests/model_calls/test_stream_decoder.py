"""The envelope stream decoder (model-calls.md §8)."""
import json

from hypothesis import given, settings, strategies as st

from falai_calls import StreamDecoder


def feed(pieces):
    """Push growing prefixes built from the pieces; return (final text, deltas)."""
    decoder = StreamDecoder()
    accumulated, deltas, text = "", [], ""
    for piece in pieces:
        accumulated += piece
        text, delta = decoder.push(accumulated)
        deltas.append(delta)
    return text, deltas


def by_char(text):
    return feed(list(text))


def test_message_grows_as_the_envelope_streams():
    """model-calls.md §8: the decoded top-level "message" as it grows; deltas are the new parts."""
    text, deltas = feed(['{"mess', 'age": "Oi', ", tudo", ' bem?"', ', "nome": "Bia"}'])
    assert text == "Oi, tudo bem?"
    assert deltas == ["", "Oi", ", tudo", " bem?", ""]


def test_every_split_point_gives_the_same_text():
    """model-calls.md §8: deltas concatenate to the final text, pushed one character at a time."""
    envelope = json.dumps({"nome": "x", "message": 'Olá "Bia" \\ \n\t/ é 😀 \u2028 fim'}, ensure_ascii=True)
    text, deltas = by_char(envelope)
    assert text == 'Olá "Bia" \\ \n\t/ é 😀 \u2028 fim'
    assert "".join(deltas) == text


def test_nothing_until_the_message_value_starts():
    """model-calls.md §8: returns nothing until the message value has started."""
    decoder = StreamDecoder()
    assert decoder.push('{"message"') == ("", "")
    assert decoder.push('{"message": ') == ("", "")
    assert decoder.push('{"message": "') == ("", "")
    assert decoder.push('{"message": "O') == ("O", "O")


def test_keys_before_message_are_skipped_with_their_values():
    """model-calls.md §8: the values of keys before "message" are skipped, nested or not."""
    envelope = ('{"a": "the \\"message\\": \\"no\\"", "b": {"message": "nested", "x": ["message", {"message": 1}]},'
                ' "c": [1, 2, "}"], "d": null, "message": "top", "e": "after"}')
    text, deltas = by_char(envelope)
    assert text == "top" and "".join(deltas) == "top"


def test_a_key_named_message_inside_a_value_string_is_not_taken():
    """model-calls.md §8: the word inside another value is never taken."""
    text, deltas = by_char('{"note": "say \\"message\\": \\"x\\"", "message": "real"}')
    assert text == "real" and "".join(deltas) == "real"


def test_escapes_split_across_pushes_are_held_back():
    """model-calls.md §8: an incomplete escape (a lone backslash, a partial \\uXXXX) is never half-emitted."""
    decoder = StreamDecoder()
    assert decoder.push('{"message": "a\\') == ("a", "a")
    assert decoder.push('{"message": "a\\n') == ("a\n", "\n")
    assert decoder.push('{"message": "a\\n\\u00') == ("a\n", "")
    assert decoder.push('{"message": "a\\n\\u00e9') == ("a\né", "é")
    assert decoder.push('{"message": "a\\n\\u00e9\\"') == ('a\né"', '"')


def test_a_surrogate_pair_split_across_pushes_becomes_one_character():
    """model-calls.md §8: a high surrogate waits for its pair instead of emitting half a character."""
    decoder = StreamDecoder()
    assert decoder.push('{"message": "x\\ud83d') == ("x", "x")
    assert decoder.push('{"message": "x\\ud83d\\ud') == ("x", "")
    assert decoder.push('{"message": "x\\ud83d\\ude00!') == ("x😀!", "😀!")


def test_a_lone_high_surrogate_is_emitted_when_no_pair_follows():
    """(inferred) json.loads keeps a lone surrogate; so does the decoder once it is clearly alone."""
    text, _ = feed(['{"message": "\\ud83d x"}'])
    assert text == json.loads('"\\ud83d x"')


def test_text_after_the_message_is_ignored():
    """model-calls.md §8: the message value ends at its closing quote."""
    text, deltas = feed(['{"message": "Oi"', ', "message": "again"}', "\n```\ntrailing"])
    assert text == "Oi" and deltas == ["Oi", "", ""]


def test_null_message_yields_nothing():
    """model-calls.md §8: a null message yields nothing, whatever follows."""
    text, deltas = by_char('{"message": null, "nome": "Bia", "x": "message"}')
    assert text == "" and set(deltas) == {""}


def test_a_message_that_is_not_a_string_yields_nothing():
    """(inferred) only a string message is text."""
    assert feed(['{"message": {"text": "no"}}'])[0] == ""
    assert feed(['{"message": 12}'])[0] == ""


def test_an_object_without_message_yields_nothing():
    """model-calls.md §8: nothing until a message value starts."""
    assert feed(['{"nome": "Bia"}', " depois"])[0] == ""


def test_a_leading_fence_is_skipped():
    """model-calls.md §8: three or more backticks to the end of the line are skipped."""
    text, deltas = feed(["``", "`js", "on\n", '{"message": "Oi"}', "\n```"])
    assert text == "Oi" and deltas == ["", "", "", "Oi", ""]
    assert feed(['  ````\n  {"message": "quatro"}'])[0] == "quatro"


def test_only_backticks_emit_nothing():
    """model-calls.md §8: while only backticks have arrived, nothing is emitted."""
    decoder = StreamDecoder()
    assert decoder.push("`") == ("", "")
    assert decoder.push("``") == ("", "")
    assert decoder.push("```") == ("", "")


def test_one_or_two_backticks_are_prose():
    """model-calls.md §8: one or two backticks are prose, passed through verbatim."""
    assert feed(["``", "code`` aqui"])[0] == "``code`` aqui"
    assert feed(["`x`"])[0] == "`x`"


def test_behind_a_fence_text_that_is_not_an_object_emits_nothing():
    """model-calls.md §8."""
    text, deltas = feed(["```\n", "plain text", " more"])
    assert text == "" and deltas == ["", "", ""]


def test_plain_prose_passes_through_verbatim():
    """model-calls.md §8: a provider streaming prose."""
    text, deltas = feed(["  Olá", "! Tudo", " bem? {x}"])
    assert text == "  Olá! Tudo bem? {x}"
    assert deltas == ["  Olá", "! Tudo", " bem? {x}"]


def test_whitespace_only_is_undecided():
    """(inferred) leading whitespace waits for the first visible character to choose prose or JSON."""
    decoder = StreamDecoder()
    assert decoder.push("  \n") == ("", "")
    assert decoder.push('  \n{"message": "a"}') == ("a", "a")


def test_a_push_that_does_not_extend_the_previous_one_starts_over():
    """model-calls.md §8: not an extension: the whole new text is the delta."""
    decoder = StreamDecoder()
    assert decoder.push("Primeira versão") == ("Primeira versão", "Primeira versão")
    assert decoder.push("Outra") == ("Outra", "Outra")
    assert decoder.push('{"message": "Outra coisa"}') == ("Outra coisa", " coisa")   # an extension again
    assert decoder.push('{"message": "Nova"}') == ("Nova", "Nova")


@settings(max_examples=200, deadline=None)
@given(message=st.text(), before=st.dictionaries(st.text(max_size=5), st.recursive(
           st.none() | st.booleans() | st.integers() | st.text(max_size=8),
           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
           max_leaves=6), max_size=3),
       ascii_only=st.booleans(), cuts=st.lists(st.integers(min_value=1, max_value=7), max_size=60))
def test_any_envelope_in_any_pieces_decodes_to_its_message(message, before, ascii_only, cuts):
    """model-calls.md §8: for any envelope and any split, the text is json.loads' message."""
    before.pop("message", None)
    envelope = json.dumps({**before, "message": message, "after": "x"}, ensure_ascii=ascii_only)
    pieces, i = [], 0
    for cut in cuts:
        pieces.append(envelope[i:i + cut])
        i += cut
    pieces.append(envelope[i:])
    text, deltas = feed(pieces)
    assert text == message and "".join(deltas) == message
