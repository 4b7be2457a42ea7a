"""FallbackProvider (providers.md §7, §9.5 "FallbackProvider"): stub members raising ProviderError,
an injected clock, and one run over real HTTP providers on two fake servers."""
import math
import threading

import pytest

from falai import GenerateRequest, Generation, GenerationChunk, ProviderCapabilities, ProviderError
from falai_providers import (FallbackProvider, GeminiProvider, NoAvailableProviderError,
                             OpenAICompatibleProvider)
from fake_model_server import FakeModelServer, gemini_frame, openai_frame


class Clock:
    def __init__(self, ms=1_000_000):
        self.ms = ms

    def __call__(self):
        return self.ms


class Stub:
    """A member that replays a script: a str answers, an exception raises, ("partial", exc) streams one
    chunk then raises, a callable is called first (to block a probe)."""

    def __init__(self, name, *script, caps=None):
        self.name = name
        self.capabilities = caps or ProviderCapabilities()
        self.script = list(script)
        self.calls = 0

    def _next(self):
        self.calls += 1
        item = self.script.pop(0)
        if callable(item) and not isinstance(item, (BaseException, type)):
            item = item()
        return item

    def generate(self, request):
        item = self._next()
        if isinstance(item, BaseException):
            raise item
        return Generation(message=item, metadata={"provider": self.name})

    def generate_stream(self, request):
        item = self._next()
        if isinstance(item, tuple):
            yield GenerationChunk(delta="parte", accumulated="parte", done=False)
            raise item[1]
        if isinstance(item, BaseException):
            raise item
        yield GenerationChunk(delta=item, accumulated=item, done=False)
        yield GenerationChunk(delta="", accumulated=item, done=True, metadata={"provider": self.name})


def err(kind, **kw):
    return ProviderError(f"stub {kind}", provider="stub", kind=kind, **kw)


def req():
    return GenerateRequest(system=None, prompt="p", history=[])


def test_a_rate_failure_falls_through_and_the_next_call_skips_the_cooling_member():
    """providers.md §7 rules 1-3: a `rate` error with retry_after_ms=60000 goes to the second member;
    the next call skips the first until its cooldown ends."""
    clock = Clock()
    first, second = Stub("a", err("rate", retry_after_ms=60000)), Stub("b", "um", "dois")
    pool = FallbackProvider([first, second], now=clock)
    assert pool.generate(req()).message == "um"
    clock.ms += 59_999
    assert pool.generate(req()).message == "dois"
    assert (first.calls, second.calls) == (1, 2)
    assert pool.status()[0] == {"provider": "a", "retry_at_ms": 1_060_000, "probing": False, "kind": "rate"}


def test_after_the_cooldown_one_probe_is_made_and_success_clears_it():
    """providers.md §7 rule 1: a member whose cooldown expired is tried as the one probe; success clears."""
    clock = Clock()
    first, second = Stub("a", err("overload"), "voltei", "de novo"), Stub("b", "um")
    pool = FallbackProvider([first, second], now=clock)
    pool.generate(req())
    clock.ms += 30_000
    assert pool.generate(req()).message == "voltei"
    assert pool.status()[0]["retry_at_ms"] is None
    assert pool.generate(req()).message == "de novo" and second.calls == 1


def test_a_failed_probe_cools_the_member_again():
    """providers.md §7 rule 3: the probe's failure sets a new cooldown from now."""
    clock = Clock()
    first, second = Stub("a", err("timeout"), err("timeout")), Stub("b", "um", "dois", "tres")
    pool = FallbackProvider([first, second], now=clock)
    pool.generate(req())
    clock.ms += 30_000
    assert pool.generate(req()).message == "dois"
    assert pool.status()[0]["retry_at_ms"] == clock.ms + 30_000
    assert pool.generate(req()).message == "tres" and first.calls == 2


def test_only_one_probe_runs_at_a_time():
    """providers.md §7 rule 1: while a probe runs on another thread, the member is skipped."""
    clock = Clock()
    probing, release = threading.Event(), threading.Event()

    def slow_probe():
        probing.set()
        release.wait(5)
        return "probe ok"

    first, second = Stub("a", err("network"), slow_probe), Stub("b", "um", "dois")
    pool = FallbackProvider([first, second], now=clock)
    pool.generate(req())
    clock.ms += 30_000
    results = []
    thread = threading.Thread(target=lambda: results.append(pool.generate(req()).message))
    thread.start()
    assert probing.wait(5)
    assert pool.status()[0]["probing"] is True
    assert pool.generate(req()).message == "dois"
    release.set()
    thread.join(5)
    assert results == ["probe ok"] and pool.status()[0]["probing"] is False


@pytest.mark.parametrize("kind", ["context", "content", "invalid", "unknown", "aborted"])
def test_kinds_without_a_cooldown_are_reraised_without_fallthrough(kind):
    """providers.md §7 default table: context, content, invalid, unknown and aborted never fall through."""
    first, second = Stub("a", err(kind)), Stub("b", "never")
    pool = FallbackProvider([first, second], now=Clock())
    with pytest.raises(ProviderError) as caught:
        pool.generate(req())
    assert caught.value.kind == kind and second.calls == 0
    assert pool.status()[0]["retry_at_ms"] is None


def test_a_failure_after_a_streamed_chunk_is_reraised_but_still_cools_the_member():
    """providers.md §7 rule 3: an answer already on screen is never restarted by another provider."""
    clock = Clock()
    first, second = Stub("a", ("partial", err("network"))), Stub("b", "never", "depois")
    pool = FallbackProvider([first, second], now=clock)
    stream = pool.generate_stream(req())
    assert next(stream).delta == "parte"
    with pytest.raises(ProviderError) as caught:
        next(stream)
    assert caught.value.kind == "network" and second.calls == 0
    assert pool.status()[0]["retry_at_ms"] == clock.ms + 30_000
    assert [c.delta for c in pool.generate_stream(req())] == ["never", ""]


def test_streaming_falls_through_before_the_first_chunk():
    """providers.md §7 rule 2: generate_stream re-yields the next member's chunks."""
    pool = FallbackProvider([Stub("a", err("overload")), Stub("b", "oi")], now=Clock())
    chunks = list(pool.generate_stream(req()))
    assert [c.delta for c in chunks] == ["oi", ""] and chunks[-1].done


def test_all_members_cooling_raises_no_available_provider():
    """providers.md §7 rule 4: none could be tried → NoAvailableProviderError (a ProviderError, kind rate)
    with the earliest retry_at_ms and its distance from now."""
    clock = Clock()
    pool = FallbackProvider([Stub("a", err("rate")), Stub("b", err("quota"))], now=clock)
    with pytest.raises(ProviderError) as last:
        pool.generate(req())
    assert last.value.kind == "quota"          # members were tried: the last error is re-raised
    clock.ms += 1000
    with pytest.raises(NoAvailableProviderError) as caught:
        pool.generate(req())
    e = caught.value
    assert isinstance(e, ProviderError) and (e.provider, e.kind) == ("fallback", "rate")
    assert str(e) == "All configured providers are unavailable. Retry after the cooldown."
    assert (e.reset_at_ms, e.retry_after_ms) == (1_060_000, 59_000)


def test_default_cooldowns_per_kind():
    """providers.md §7: the default table (used when the server named no wait)."""
    expected = {"rate": 60_000, "quota": 3_600_000, "timeout": 30_000, "network": 30_000, "overload": 30_000,
                "auth": 3_600_000, "entitlement": 3_600_000, "model": 3_600_000}
    for kind, interval in expected.items():
        clock = Clock()
        pool = FallbackProvider([Stub("a", err(kind)), Stub("b", "ok")], now=clock)
        pool.generate(req())
        assert pool.status()[0]["retry_at_ms"] == clock.ms + interval, kind


def test_a_server_deadline_wins_over_the_default_interval():
    """providers.md §7 rule 3: reset_at_ms and now + retry_after_ms beat the interval, even when shorter;
    a previous, later retry_at_ms is kept."""
    clock = Clock()
    first = Stub("a", err("quota", reset_at_ms=clock.ms + 5000, retry_after_ms=2000),
                 err("rate", retry_after_ms=1000))
    pool = FallbackProvider([first, Stub("b", "um", "dois")], now=clock)
    pool.generate(req())
    assert pool.status()[0]["retry_at_ms"] == clock.ms + 5000
    clock.ms += 5000
    pool.generate(req())                                   # probe fails with a shorter hint
    assert pool.status()[0]["retry_at_ms"] == clock.ms + 1000


def test_on_cooldown_receives_the_details():
    """providers.md §7: on_cooldown gets {"provider", "error", "kind", "retry_at_ms", "window"}."""
    seen = []
    error = err("quota", window="weekly")
    first = Stub("a", error)
    pool = FallbackProvider([first, Stub("b", "ok")], now=Clock(), on_cooldown=seen.append)
    pool.generate(req())
    assert seen == [{"provider": first, "error": error, "kind": "quota", "retry_at_ms": 1_000_000 + 3_600_000,
                     "window": "weekly"}]


def test_a_failing_on_cooldown_callback_does_not_break_the_call():
    """providers.md §7 (inferred): a host callback error is logged, and the call goes on."""
    def boom(info):
        raise RuntimeError("callback bug")
    pool = FallbackProvider([Stub("a", err("rate")), Stub("b", "ok")], now=Clock(), on_cooldown=boom)
    assert pool.generate(req()).message == "ok"


def test_cooldown_overrides_opt_kinds_in_and_out():
    """providers.md §7: None stops fallthrough for a kind; adding a kind opts it in."""
    pool = FallbackProvider([Stub("a", err("rate")), Stub("b", "never")], cooldown_ms={"rate": None}, now=Clock())
    with pytest.raises(ProviderError):
        pool.generate(req())
    pool = FallbackProvider([Stub("a", err("context")), Stub("b", "bigger window")],
                            cooldown_ms={"context": 1000}, now=Clock())
    assert pool.generate(req()).message == "bigger window"
    assert pool.status()[0]["retry_at_ms"] == 1_001_000


@pytest.mark.parametrize("cooldowns, pattern", [
    ({"aborted": 1000}, "aborted"), ({"rate": -1}, "rate"), ({"rate": math.inf}, "rate"),
    ({"rate": math.nan}, "rate"), ({"slow": 1}, "unknown kind")])
def test_bad_cooldowns_raise_value_error(cooldowns, pattern):
    """providers.md §7: aborted can never be opted in; negative or non-finite values raise."""
    with pytest.raises(ValueError, match=pattern):
        FallbackProvider([Stub("a")], cooldown_ms=cooldowns)


def test_empty_or_repeated_members_raise_value_error():
    """providers.md §7: an empty list and the same object twice are construction errors."""
    with pytest.raises(ValueError, match=r"\[FallbackProvider\] providers is empty: there is nothing to call"):
        FallbackProvider([])
    member = Stub("a")
    with pytest.raises(ValueError, match="twice"):
        FallbackProvider([member, member])


def test_any_exception_is_classified_for_the_decision_and_reraised_as_is():
    """providers.md §7 rule 3: a non-ProviderError is classified by §8.3: a connection reset falls
    through (network); a plain bug (unknown) is re-raised untouched."""
    pool = FallbackProvider([Stub("a", ConnectionResetError("reset")), Stub("b", "ok")], now=Clock())
    assert pool.generate(req()).message == "ok"
    assert pool.status()[0]["kind"] == "network"
    pool = FallbackProvider([Stub("a", KeyError("bug")), Stub("b", "never")], now=Clock())
    with pytest.raises(KeyError):
        pool.generate(req())


def test_reset_clears_one_or_every_cooldown():
    """providers.md §7 rule 5: reset(provider) by object or name; reset() clears all."""
    clock = Clock()
    a, b, c = Stub("a", err("rate")), Stub("b", err("rate")), Stub("c", "ok")
    pool = FallbackProvider([a, b, c], now=clock)
    pool.generate(req())
    pool.reset(a)
    assert [s["retry_at_ms"] is None for s in pool.status()] == [True, False, True]
    pool.reset()
    assert all(s["retry_at_ms"] is None for s in pool.status())


def test_name_and_capabilities_are_the_and_of_members():
    """providers.md §7: name joins member names; capabilities are the logical AND."""
    a = Stub("gemini", caps=ProviderCapabilities(supports_prompt_caching=True))
    b = Stub("openrouter", caps=ProviderCapabilities(supports_native_json_schema=False, supports_prompt_caching=True))
    pool = FallbackProvider([a, b])
    assert pool.name == "fallback(gemini->openrouter)"
    caps = pool.capabilities
    assert caps.supports_native_json_schema is False and caps.supports_prompt_caching is True
    assert caps.supports_tools and caps.supports_streaming and caps.supports_streaming_tool_calls


def test_over_http_a_gemini_throttle_falls_through_to_openrouter():
    """providers.md §7 with real members: Gemini's long 429 ends its own retries (§3.8), the pool cools
    it for the server's 45 s and the OpenAI-compatible member answers."""
    one, two = FakeModelServer(), FakeModelServer()
    try:
        one.error(429, {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED",
                                  "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                               "retryDelay": "45s"}]}})
        two.sse(openai_frame(content="oi"), openai_frame(finish="stop"))
        clock = Clock()
        pool = FallbackProvider([
            GeminiProvider(api_key="g-key", model="gemini-3.8-flash", base_url=one.url, sleep=lambda s: None),
            OpenAICompatibleProvider(name="openrouter", api_key="o-key", model="google/gemini-3.8-flash",
                                     base_url=two.url, sleep=lambda s: None)], now=clock)
        out = pool.generate(req())
        assert out.message == "oi" and out.metadata["provider"] == "openrouter"
        assert pool.status()[0]["retry_at_ms"] == clock.ms + 45_000
        assert len(one.requests) == 1 and two.requests[0].headers["authorization"] == "Bearer o-key"
    finally:
        one.close()
        two.close()


def test_over_http_a_cancelled_call_never_falls_through():
    """providers.md §3.7 / §7: aborted is re-raised at once."""
    one = FakeModelServer()
    try:
        one.sse(*[gemini_frame(text="x") for _ in range(20)], delay=0.05)
        cancel = threading.Event()
        backup = Stub("b", "never")
        pool = FallbackProvider([GeminiProvider(api_key="k", model="gemini-3.8-flash", base_url=one.url), backup])
        threading.Timer(0.1, cancel.set).start()
        with pytest.raises(ProviderError) as caught:
            pool.generate(GenerateRequest(system=None, prompt="p", history=[], cancel=cancel))
        assert caught.value.kind == "aborted" and backup.calls == 0
    finally:
        one.close()
