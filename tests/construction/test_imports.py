"""python-api.md, Modules: `import falai` pulls in no third-party module; what importing the modules does.

How the modules import each other (the ladder, private names, any module first) is the repository's
arrangement: tests/repository/test_module_structure.py, run by `python -m pytest -m repository`."""
import glob
import subprocess
import sys

import pytest

import falai

THIRD_PARTY = ("requests", "jsonschema", "urllib3", "charset_normalizer", "idna", "certifi")


def test_import_falai_imports_no_third_party_module():
    # Compare with the modules the interpreter itself loaded (a site .pth may preload some).
    code = ("import sys; before = set(sys.modules); import falai; "
            f"print(','.join(m for m in {THIRD_PARTY!r} if m in sys.modules and m not in before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == ""


def test_import_falai_loads_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import falai; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(','.join(sorted(m for m in new if m not in sys.stdlib_module_names and not m.startswith('falai'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == ""


def test_every_public_name_exists():
    for name in falai.__all__:
        assert hasattr(falai, name), name


def test_import_runs_none_of_falais_own_functions():
    """No import-time work (the project's style): importing falai defines things and runs none of them.
    Only the comprehensions that spell a constant table run; how long an import takes is bench/'s job."""
    code = ("import inspect, sys\n"
            "ran = []\n"
            "def seen(frame, event, arg):\n"
            "    code = frame.f_code\n"
            "    if (event == 'call' and code.co_filename.endswith('falai.py') and code.co_flags & inspect.CO_OPTIMIZED\n"
            "            and not code.co_name.startswith('<')):\n"
            "        ran.append(code.co_name)\n"
            "sys.setprofile(seen)\n"
            "import falai\n"
            "sys.setprofile(None)\n"
            "print(ran)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == "[]", f"import falai ran: {out.stdout.strip()}"


def _falai_names_used(path):
    """Every name a module takes from falai: ``from falai import x`` and ``falai.x`` (or its alias)."""
    import ast
    tree = ast.parse(open(path, encoding="utf-8").read())
    aliases, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(alias.asname or "falai" for alias in node.names if alias.name == "falai")
        elif isinstance(node, ast.ImportFrom) and node.module == "falai":
            names.update(alias.name for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


ROOT = falai.__file__.rsplit("/", 1)[0]
SIBLINGS = sorted(path.rsplit("/", 1)[1][:-3] for path in glob.glob(f"{ROOT}/falai_*.py"))


def test_dir_of_falai_and_all_agree():
    """An IDE's ``falai.`` completion shows the API: dir() is __all__ plus the module's dunders."""
    shown = {name for name in dir(falai) if not name.startswith("__")}
    assert shown == set(falai.__all__)
    assert len(falai.__all__) == len(set(falai.__all__))


def test_a_public_name_that_lives_elsewhere_is_loaded_on_use_and_is_the_siblings_own():
    import importlib
    for name, module in falai.PUBLIC_ELSEWHERE.items():
        assert name in falai.__all__, name
        assert getattr(falai, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
        falai.NotAName  # noqa: B018


def test_type_checkers_see_every_name_that_lives_elsewhere():
    """The ``if TYPE_CHECKING:`` imports name the same names, from the same modules, as PUBLIC_ELSEWHERE."""
    import ast
    tree = ast.parse(open(falai.__file__, encoding="utf-8").read())
    seen = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom) and item.module != "falai" and item.module.startswith("falai"):
                    seen.update({alias.name: item.module for alias in item.names})
    assert seen == falai.PUBLIC_ELSEWHERE


# What a turn never needs: ``import falai`` leaves these unloaded until one of their names is used.
LOADED_ON_USE = ("falai_spec", "falai_testing", "falai_stores", "falai_providers", "falai_cli", "falai_host")


def test_import_falai_loads_the_engine_and_nothing_a_turn_does_not_need():
    """``import falai`` loads the engine's floors (base, checks, calls, protocols); the JSON helpers, the testing
    kit, the stores, the providers, the CLI and the host load when a name of theirs is first used."""
    code = ("import sys; import falai; "
            f"print(','.join(m for m in {SIBLINGS!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(filter(None, out.stdout.strip().split(",")))
    assert loaded == {"falai_base", "falai_checks", "falai_calls", "falai_protocols"}
    assert not loaded & set(LOADED_ON_USE)


TURN = """
import falai
agent = falai.falai().agent(
    name="Bot", provider=falai.ScriptedProvider(script={"understand": [{"flows": {"hello": 90}}]}),
    flows=[{"id": "hello", "on": [{"message": ["hello"]}], "steps": [{"id": "hi", "say": "Hello!"}]}])
store = falai.MemoryStore()
result = agent.turn(session_id="s1", message="hello", id="m1")
store.save(result.session, 0)
print(falai.__file__, [m.text for m in result.messages], store.load("s1").version)
"""


def test_copying_the_falai_files_into_an_empty_folder_is_enough_to_run_a_turn(tmp_path):
    """Vendoring is "copy the falai*.py files" (docs/guide/deploying.md): no package, no install."""
    import shutil
    for path in glob.glob(f"{ROOT}/falai*.py"):
        shutil.copy(path, tmp_path)
    # -S -I: no site-packages (so not this checkout's editable install), no PYTHON* variables. The folder
    # goes on sys.path by its full name: from ".", Python 3.10 names the module "..././falai.py".
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{TURN}"
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(tmp_path / "falai.py"), "['Hello!']", "1"]


def test_import_falai_neither_imports_logging_nor_creates_the_falai_logger():
    """issue 12: the "falai" logger is looked up on first use; -S, so that no site .pth imports logging first."""
    code = "import sys; import falai; print('logging' in sys.modules)"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == "False"


def test_a_record_of_the_falai_logger_names_the_function_that_logged(caplog):
    """The looked-up-on-use logger hands out the logger's own methods, so a record's funcName is the caller's."""
    import logging
    with caplog.at_level(logging.WARNING, logger="falai"):
        falai.log.warning("a warning")
    assert [(r.name, r.funcName) for r in caplog.records] == [
        ("falai", "test_a_record_of_the_falai_logger_names_the_function_that_logged")]


# The engine's records are plain slotted dataclasses -------------------------------------------

def test_a_record_compares_and_shows_field_by_field_like_a_dataclass():
    first = falai.Deferred("provider-unavailable", True, llm_calls=1)
    assert first == falai.Deferred(code="provider-unavailable", retryable=True, reset_at_ms=None, llm_calls=1)
    assert first != falai.Deferred("provider-unavailable", True, llm_calls=2)
    assert first != falai.Spoken("provider-unavailable")       # another record type is never equal
    assert repr(first) == ("Deferred(code='provider-unavailable', retryable=True, reset_at_ms=None, "
                           "llm_calls=1, usage=None, data={})")
    with pytest.raises(TypeError):      # mutable, so unhashable, like a dataclass that compares
        hash(first)
    with pytest.raises(AttributeError):     # slotted: a misspelt attribute fails instead of sticking
        first.retryabel = False


def test_a_records_default_lists_are_its_own():
    """Like ``field(default_factory=list)``: two records never share a default list or dict."""
    one, two = falai.Judgement(), falai.Judgement()
    one.flows["a"] = 90
    assert two.flows == {} and falai.Eligibility().eligible is not falai.Eligibility().eligible
