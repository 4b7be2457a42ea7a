"""python-api.md, Modules: `import falai` pulls in no third-party module."""
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
    """Besides the standard library, only the engine's own model-call modules, which it calls."""
    code = ("import sys; before = set(sys.modules); import falai; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(','.join(sorted(m for m in new if m not in sys.stdlib_module_names\n"
            "                       and m not in ('falai', 'falai_calls', 'falai_protocols'))))")
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
            "    if (event == 'call' and code.co_filename.endswith(('falai.py', 'falai_calls.py', 'falai_protocols.py')) and code.co_flags & inspect.CO_OPTIMIZED\n"
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


def test_sibling_modules_import_only_the_api_and_their_named_helpers():
    """issue 12: falai_providers, falai_stores and falai_cli take from falai only ``__all__``, ``__version__``
    and the helpers falai.SIBLING_IMPORTS names for them; each named helper exists and is used."""
    root = falai.__file__.rsplit("/", 1)[0]
    for module, helpers in falai.SIBLING_IMPORTS.items():
        used = _falai_names_used(f"{root}/{module}.py")
        extra = sorted(used - set(falai.__all__) - {"__version__"} - set(helpers))
        assert extra == [], f"{module} imports {extra} from falai: add them to SIBLING_IMPORTS or use the API"
        assert all(hasattr(falai, name) for name in helpers)
        assert sorted(set(helpers) - used) == [], f"{module} no longer uses {sorted(set(helpers) - used)}"


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


# Internal records are _Record, public types dataclasses (issue 12) ---------------------------------------------

HANDED_TO_HOST_CODE = {"BusinessHoursCtx"}     # outside __all__, but business_hours(at, ctx) reads it


def test_every_dataclass_of_falai_is_a_public_type_or_handed_to_host_code():
    """issue 12: @dataclass compiles its methods at import, so an internal record is a _Record instead;
    a new internal dataclass would put that cost back on every ``import falai``."""
    import dataclasses
    made_here = [value for value in vars(falai).values()
                 if isinstance(value, type) and value.__module__ == "falai" and dataclasses.is_dataclass(value)]
    internal = sorted(cls.__name__ for cls in made_here if cls.__name__ not in falai.__all__)
    assert internal == sorted(HANDED_TO_HOST_CODE), "make these falai._Record subclasses (see its docstring)"


def test_the_internal_records_are_slotted_records():
    records = [value for value in vars(falai).values()
               if isinstance(value, type) and issubclass(value, falai._Record) and value is not falai._Record]
    assert len(records) >= 15         # the model calls' own records are dataclasses of falai_calls
    for record in records:
        assert record.__name__ not in falai.__all__, f"{record.__name__} is public: make it a dataclass"
        assert record.__slots__ and "__dict__" not in dir(record), record.__name__


def test_a_record_compares_and_shows_field_by_field_like_a_dataclass():
    first = falai.Deferred("provider-unavailable", True, llm_calls=1)
    assert first == falai.Deferred(code="provider-unavailable", retryable=True, reset_at_ms=None, llm_calls=1)
    assert first != falai.Deferred("provider-unavailable", True, llm_calls=2)
    assert first != falai.Spoken("provider-unavailable")       # another record type is never equal
    assert repr(first) == ("Deferred(code='provider-unavailable', retryable=True, reset_at_ms=None, "
                           "llm_calls=1, usage=None)")
    with pytest.raises(TypeError):      # mutable, so unhashable, like a dataclass that compares
        hash(first)
    with pytest.raises(AttributeError):     # slotted: a misspelt attribute fails instead of sticking
        first.retryabel = False


def test_a_records_default_lists_are_its_own():
    """Like ``field(default_factory=list)``: two records never share a default list or dict."""
    one, two = falai.Judgement(), falai.Judgement()
    one.flows["a"] = 90
    assert two.flows == {} and falai.Eligibility().eligible is not falai.Eligibility().eligible


def public_dataclasses() -> list[type]:
    import dataclasses
    return [value for value in vars(falai).values()
            if isinstance(value, type) and value.__module__ == "falai" and dataclasses.is_dataclass(value)]


@pytest.mark.parametrize("cls", public_dataclasses(), ids=lambda cls: cls.__name__)
def test_a_public_dataclass_compares_and_shows_itself_as_dataclass_would_write_it(cls):
    """issue 12: the public types take == and repr() from falai._FieldWise instead of having @dataclass
    compile them at import; each behaves as the methods @dataclass writes (a twin made by make_dataclass)."""
    import dataclasses
    names = [f.name for f in dataclasses.fields(cls)]
    assert "__eq__" not in vars(cls) and "__repr__" not in vars(cls) and cls.__hash__ is None
    twin = dataclasses.make_dataclass(cls.__name__, names)

    def pair(values: dict) -> tuple:
        ours = object.__new__(cls)
        for name, value in values.items():
            object.__setattr__(ours, name, value)
        return ours, twin(**values)

    values = {name: [n, "x"] if n % 2 else f"v{n}" for n, name in enumerate(names)}
    ours, theirs = pair(values)
    assert repr(ours) == repr(theirs)
    assert (ours == pair(dict(values))[0]) is (theirs == twin(**values)) is True
    for name in names:          # one field unlike: unequal, as @dataclass's tuple comparison says
        other, other_twin = pair({**values, name: "unlike"})
        assert (ours == other) is (theirs == other_twin) is False and (ours != other) is True
    nan = float("nan")          # a value is equal to itself (a tuple comparison), a NaN to no other NaN
    one, one_twin = pair({**values, names[0]: nan})
    assert (one == pair({**values, names[0]: nan})[0]) is (one_twin == twin(**{**values, names[0]: nan})) is True
    two, two_twin = pair({**values, names[0]: float("nan")})
    assert (one == two) is (one_twin == two_twin) is False
    assert ours.__eq__(theirs) is NotImplemented and ours != theirs
    values[names[-1]] = ours    # a repr that recurses shows "..." where it would
    looped, looped_twin = pair(values)
    object.__setattr__(looped, names[-1], looped)
    looped_twin.__dict__[names[-1]] = looped_twin
    assert repr(looped) == repr(looped_twin)
    with pytest.raises(TypeError):
        hash(ours)
