import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from falai import GenerateRequest, ScriptedProvider, fake_clock, falai  # noqa: E402

T0 = "2026-09-20T10:00:00.000Z"


# Shared builders (issue 12): `from conftest import T0, build, lines` in a test module.

def build(flows, *, fields=None, script=None, clock=None, usage=False, **options):
    """An agent over ``flows`` on a fake clock at T0: (agent, its ScriptedProvider, the clock).

    ``options`` go to the agent; in a test marked ``protocols(...)`` it runs under the test's protocol.
    """
    clock = clock or fake_clock(T0)
    provider = ScriptedProvider(script=script or {}, usage=usage)
    agent = falai().fields(fields or {}).agent(name="Ana", provider=provider, clock=clock,
                                               flows=flows, **options)
    return agent, provider, clock


def lines(r):
    """A turn result's outcome lines as (kind, status, code)."""
    return [(o.kind, o.status, o.code) for o in r.outcomes]


def sections(prompt):
    """A prompt's ``## `` sections: heading -> body, in order."""
    out = {}
    for block in prompt.split("\n## "):
        block = block[3:] if block.startswith("## ") else block
        heading, _, body = block.partition("\n")
        out[heading] = body.rstrip("\n")
    return out


def req(**kw):
    """A GenerateRequest for a provider test: no system text, prompt "PROMPT", an empty history unless given."""
    kw.setdefault("system", None)
    kw.setdefault("prompt", "PROMPT")
    kw.setdefault("history", [])
    return GenerateRequest(**kw)


# providers.md §9.1 rule 3: no test reaches the internet. Every connection to a
# non-loopback address fails at once (and fails the test), so a provider left on
# its default base_url cannot call a real vendor. Tests marked `live` (the
# opt-in smoke tests of tests/providers/test_live_providers.py) are let through.
import socket as _socket

import pytest as _pytest

_pytest.register_assert_rewrite("e2e_concierge")     # its shared checks (same_result, ...) report like a test's

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def pytest_configure(config):
    config.addinivalue_line("markers", "live: talks to a real vendor API; runs only when its key is set")
    config.addinivalue_line("markers", "local_model: runs against a real small model on a local llama-server "
                            "(tests/local_model_server.py)")
    config.addinivalue_line("markers", "protocols(*names): the agent protocols the module's tests hold "
                                       "under; a run takes the one --protocol names (lean by default)")
    config.addinivalue_line("markers", "faults: the production host's fault test (roles as processes); "
                                       "deselect it with -m \"not faults\"")
    config.addinivalue_line("markers", "slow: property tests, examples run as processes and long runs; "
                                       "`pytest -m slow` runs them (CI does, after the default run)")
    config.addinivalue_line("markers", "repository: how the repository is arranged (tests/repository/: commit "
                                       "subjects, module structure, line width, who reads a cache), not what "
                                       "the library does; `pytest -m repository` runs them (a CI step of its own)")


# The default run is the fast tier. Generated-input (hypothesis) tests and the modules that start
# processes go to the slow tier, which CI runs as a second step (docs/guide/development.md).
SLOW_MODULES = {"test_examples.py", "test_production_host.py", "test_host_faults.py"}


def fast_slice(values, every: int, ids=None) -> list:
    """``values`` as pytest params where only every ``every``-th runs in the fast tier and the rest
    are marked slow: an exhaustive parametrization (every τ² task, every attack) whose whole runs in
    CI's slow tier while the default run keeps a spread of it."""
    return [_pytest.param(value, id=ids(value) if ids else None,
                          marks=() if n % every == 0 else (_pytest.mark.slow,))
            for n, value in enumerate(values)]


# The repository's own rules (tests/repository/) are not library tests: the default run leaves them out
# (setup.cfg) and CI runs them as a step of their own, `python -m pytest -m repository`.
REPOSITORY_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repository")


def pytest_collection_modifyitems(config, items):
    _keep_the_protocol_pass(config, items)
    for item in items:
        is_property = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
        if is_property or item.path.name in SLOW_MODULES:
            item.add_marker(_pytest.mark.slow)
        if str(item.path.parent) == REPOSITORY_FOLDER:
            item.add_marker(_pytest.mark.repository)


class NonLoopbackConnectionBlocked(RuntimeError):
    """Raised on a connection attempt to anything but the loopback (not an OSError, so nobody retries it)."""


@_pytest.fixture(autouse=True)
def _block_non_loopback_sockets(request, monkeypatch):
    if request.node.get_closest_marker("live"):
        yield
        return
    blocked: list[str] = []

    def check(address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in _LOOPBACK:
            blocked.append(f"{host}:{address[1]}")
            raise NonLoopbackConnectionBlocked(f"test tried to connect to {host}:{address[1]} (not loopback)")

    real_connect = _socket.socket.connect
    real_connect_ex = _socket.socket.connect_ex
    real_create_connection = _socket.create_connection

    def connect(self, address):
        check(address)
        return real_connect(self, address)

    def connect_ex(self, address):
        check(address)
        return real_connect_ex(self, address)

    def create_connection(address, *args, **kwargs):
        check(address)
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(_socket.socket, "connect", connect)
    monkeypatch.setattr(_socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(_socket, "create_connection", create_connection)
    yield blocked              # a test of the guard itself may inspect and clear this list
    if blocked:
        _pytest.fail(f"non-loopback connection attempted: {', '.join(blocked)}", pytrace=False)


@_pytest.fixture
def fake():
    """A FakeModelServer on 127.0.0.1 for one test (providers.md §9.4), closed afterwards."""
    from fake_model_server import FakeModelServer
    server = FakeModelServer()
    yield server
    server.close()


# Protocols (docs/guide/development.md, "The protocol passes"). A module marked
# ``pytestmark = pytest.mark.protocols("lean", "v4")`` holds under either protocol: a run takes the
# one ``--protocol`` names, "lean" (the default) in the default run; ``pytest --protocol=v4`` is the
# v4 conformance pass, which runs only those modules (CI runs it after the default run).
# ``protocols("v4")`` alone pins a test that reads v4 prompts: it runs in every default run. The
# marker is the one place a test's protocol is said: ``_agents_take_the_tests_protocol`` builds every
# agent of a marked test under it and fails the test if one ends up under another.
PROTOCOL_NAMES = ("lean", "v4")


def pytest_addoption(parser):
    parser.addoption("--protocol", default="lean", choices=PROTOCOL_NAMES,
                     help="the agent protocol of the tests that hold under either (default: lean); "
                          "--protocol=v4 runs only those, as the v4 conformance pass")


def _either_protocol(node) -> bool:
    marker = node.get_closest_marker("protocols")
    return marker is not None and len(marker.args) > 1


def pytest_generate_tests(metafunc):
    """A marked test is parametrized with its protocol (``test_x[lean]``); it may read it as its
    ``protocol`` argument, and need not."""
    marker = metafunc.definition.get_closest_marker("protocols")
    if marker is not None:
        if "protocol" not in metafunc.fixturenames:
            metafunc.fixturenames.append("protocol")
        names = list(marker.args)
        if len(names) > 1:
            names = [metafunc.config.getoption("protocol")]
        metafunc.parametrize("protocol", names)


def _keep_the_protocol_pass(config, items):
    """Under --protocol=v4, only the tests that hold under either protocol run."""
    if config.getoption("protocol") == "lean":
        return
    kept = [item for item in items if _either_protocol(item)]
    config.hook.pytest_deselected(items=[item for item in items if not _either_protocol(item)])
    items[:] = kept


def protocol_of(node) -> str | None:
    """The protocol a test marked ``protocols(...)`` runs under; None for an unmarked test."""
    callspec = getattr(node, "callspec", None)
    if node.get_closest_marker("protocols") is None or callspec is None:
        return None
    return callspec.params.get("protocol")


@_pytest.fixture(autouse=True)
def _agents_take_the_tests_protocol(request, monkeypatch):
    """Every agent a marked test builds runs under the test's protocol, and the test fails otherwise.

    The agents are built by the library's own ``Agent``, given ``protocol=`` when the test's code
    gives none; the test's code gives none, so the marker is the one place its protocol is said.
    After the test, each agent it built is checked: an agent under another protocol (one built
    with ``protocol=`` itself) fails the test, so the v4 pass cannot test "lean" under the name "v4".
    """
    protocol = protocol_of(request.node)
    if protocol is None:
        yield
        return
    built = agents_built_under(protocol, monkeypatch)
    yield
    strays = agents_not_under(protocol, built)
    _AGENTS_CHECKED[protocol] += len(built) - len(strays)
    if strays:
        _pytest.fail(f"agents built under another protocol than the test's {protocol!r}: "
                     + "; ".join(strays), pytrace=False)


_AGENTS_CHECKED: dict[str, int] = {name: 0 for name in PROTOCOL_NAMES}


def pytest_terminal_summary(terminalreporter, config):
    """The v4 pass says how many agents it built, each checked to run under v4."""
    protocol = config.getoption("protocol")
    if protocol != "lean" and not config.option.collectonly:
        terminalreporter.write_line(f"protocol pass {protocol}: {_AGENTS_CHECKED[protocol]} agents built, "
                                    f"each under {protocol}")


def agents_built_under(protocol: str, monkeypatch) -> list:
    """Until ``monkeypatch`` undoes it, agents built without ``protocol=`` are built under ``protocol``;
    returns the list of ``(where, agent)`` each build appends to.

    ``falai.Agent.__init__`` is wrapped on the class, for this test only (monkeypatch restores it at
    teardown): the library's signature, its default ("lean") and every agent built outside the test
    stay as they are, and an explicit ``protocol=`` is passed on unchanged, for the guard to see.
    """
    import falai
    built: list = []
    build_agent = falai.Agent.__init__

    @functools.wraps(build_agent)
    def build_under_the_tests_protocol(self, *args, **kwargs):
        kwargs.setdefault("protocol", protocol)
        build_agent(self, *args, **kwargs)
        built.append((_build_site(), self))

    monkeypatch.setattr(falai.Agent, "__init__", build_under_the_tests_protocol)
    return built


def agents_not_under(protocol: str, built: list) -> list[str]:
    """The agents of ``built`` not running under ``protocol``, as "where (their protocol)": their
    ``protocol`` and the class of the protocol object their model calls go through."""
    import falai_protocols
    expected = falai_protocols.PROTOCOLS[protocol]
    return [f"{where} (protocol={agent.protocol!r})" for where, agent in built
            if agent.protocol != protocol or type(agent.compiled.model_calls()) is not expected]


def _build_site() -> str:
    """Where the test code built the agent: the first caller outside falai and this file."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not os.path.basename(name).startswith("falai") and name != __file__:
            return f"{os.path.relpath(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


# The local Postgres and Redis the store tests run against: connect, or skip saying why not.
# FALAI_TEST_POSTGRES_DSN / FALAI_TEST_REDIS_URL point elsewhere; `unique_name` gives each run its own
# table name / key prefix. `from conftest import postgres_connection, redis_client, unique_name`.

import uuid as _uuid  # noqa: E402

POSTGRES_DSN = os.environ.get("FALAI_TEST_POSTGRES_DSN",
                              "host=127.0.0.1 port=5432 dbname=test user=postgres connect_timeout=3")
REDIS_URL = os.environ.get("FALAI_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def unique_name(prefix="falai_test") -> str:
    return f"{prefix}_{os.getpid()}_{_uuid.uuid4().hex[:10]}"


def postgres_connection():
    """A psycopg connection to the local test server, or a skip saying why not."""
    try:
        import psycopg
    except ImportError:
        _pytest.skip('psycopg is not installed: pip install "psycopg[binary]" to run the Postgres store tests')
    try:
        return psycopg.connect(POSTGRES_DSN)
    except psycopg.OperationalError as error:
        _pytest.skip(f"no Postgres server reachable at {POSTGRES_DSN!r}: {str(error).strip()}")


def redis_client(decode_responses=False):
    """A redis-py client to the local test server, or a skip saying why not."""
    try:
        import redis
    except ImportError:
        _pytest.skip("redis is not installed: pip install redis to run the Redis store tests")
    client = redis.Redis.from_url(REDIS_URL, decode_responses=decode_responses, socket_connect_timeout=3)
    try:
        client.ping()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        client.close()
        _pytest.skip(f"no Redis server reachable at {REDIS_URL}: {error}")
    return client
