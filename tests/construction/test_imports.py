"""python-api.md, Modules: `import falai` pulls in no third-party module; the modules and their imports."""
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
            "print(','.join(sorted(m for m in new if m not in sys.stdlib_module_names and m != 'falai')))")
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


def test_siblings_import_from_falai_only_the_api_and_the_names_for_sibling_modules():
    """A sibling takes from falai only ``__all__``, ``__version__`` and the names falai.FOR_SIBLING_MODULES
    lists; each listed name exists, has no leading underscore and is used by some sibling."""
    allowed = set(falai.__all__) | {"__version__"} | set(falai.FOR_SIBLING_MODULES)
    used_anywhere = set()
    for module in SIBLINGS:
        used = _falai_names_used(f"{ROOT}/{module}.py")
        used_anywhere |= used
        extra = sorted(used - allowed)
        assert extra == [], f"{module} imports {extra} from falai: add them to FOR_SIBLING_MODULES or use the API"
    for name in falai.FOR_SIBLING_MODULES:
        assert not name.startswith("_") and name in vars(falai), name
    assert sorted(set(falai.FOR_SIBLING_MODULES) - used_anywhere) == [], "no sibling uses these any more"


def _private_names_taken(path):
    """``from falai... import _x`` and ``module._x`` for an imported falai module: (module, name) pairs."""
    import ast
    tree = ast.parse(open(path, encoding="utf-8").read())
    ours = {name for name in ["falai", *SIBLINGS]}
    aliases, taken = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names if alias.name in ours})
        elif isinstance(node, ast.ImportFrom) and node.module in ours:
            taken.update((node.module, alias.name) for alias in node.names if alias.name.startswith("_"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            taken.add((aliases[node.value.id], node.attr))
    return sorted(taken)


@pytest.mark.parametrize("module", ["falai", *SIBLINGS])
def test_no_module_takes_another_modules_private_names(module):
    assert _private_names_taken(f"{ROOT}/{module}.py") == []


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
LOADED_ON_USE = ("falai_checks", "falai_spec", "falai_testing", "falai_stores", "falai_providers", "falai_cli",
                 "falai_host")


def _siblings_falai_imports_at_its_bottom():
    """The siblings falai.py imports at module level, each after every definition (the module object only)."""
    import ast
    body = ast.parse(open(falai.__file__, encoding="utf-8").read()).body
    bottom = set()
    for index, node in enumerate(body):
        if isinstance(node, ast.Import) and any(alias.name.startswith("falai_") for alias in node.names):
            later = body[index + 1:]
            assert all(isinstance(item, (ast.Import, ast.If)) for item in later), \
                f"falai.py imports {node.names[0].name} before a definition: import it after every definition"
            bottom.update(alias.name for alias in node.names)
        assert not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("falai_")), \
            "falai.py reaches a sibling through its module object, never ``from falai_x import``"
    return bottom


def test_import_falai_loads_no_sibling_but_the_ones_it_imports_at_its_bottom():
    """``import falai`` is the engine: a sibling loads when a name of it is first used, except one falai
    itself calls on every turn and imports at its bottom; never the checks, JSON, testing kit or stores."""
    bottom = _siblings_falai_imports_at_its_bottom()
    assert not bottom & set(LOADED_ON_USE)
    code = ("import sys; import falai; "
            f"print(','.join(m for m in {SIBLINGS!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert set(filter(None, out.stdout.strip().split(","))) == bottom


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


@pytest.mark.parametrize("first", ["falai", *SIBLINGS])
def test_any_module_may_be_imported_first_in_a_fresh_interpreter(first):
    others = [module for module in ["falai", *SIBLINGS] if module != first]
    code = f"import {first}\n" + "".join(f"import {module}\n" for module in others) + TURN
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "['Hello!'] 1" in out.stdout


def test_copying_the_falai_files_into_an_empty_folder_is_enough_to_run_a_turn(tmp_path):
    """Vendoring is "copy the falai*.py files" (docs/guide/deploying.md): no package, no install."""
    import shutil
    for path in glob.glob(f"{ROOT}/falai*.py"):
        shutil.copy(path, tmp_path)
    # -S -I: no site-packages (so not this checkout's editable install), no PYTHON* variables.
    out = subprocess.run([sys.executable, "-S", "-I", "-c", f"import sys; sys.path.insert(0, '.')\n{TURN}"],
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


# Lines at most 100 columns: the modules that got there stay there -----------------------------

WITHIN_100_COLUMNS = ("falai", "falai_checks", "falai_spec", "falai_testing", "falai_stores",
                      "falai_calls", "falai_protocols", "falai_providers", "falai_cli", "falai_host")


@pytest.mark.parametrize("module", WITHIN_100_COLUMNS)
def test_a_module_within_100_columns_stays_there(module):
    """Library lines are at most 100 columns (docs/guide/development.md); ruff checks that too, except
    in a module still under its per-file E501 ignore, so each module that got there is listed here.
    Add a module when it gets there."""
    lines = open(f"{ROOT}/{module}.py", encoding="utf-8").read().splitlines()
    wide = [f"{module}.py:{number}" for number, line in enumerate(lines, 1) if len(line) > 100]
    assert wide == [], f"wrap these lines at 100 columns: {wide}"
