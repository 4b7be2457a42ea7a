"""The modules and how they import each other (docs/guide/development.md, Modules and how they import
each other): the ladder of floors, no module taking another's ``_private`` names, and any module
imported first in a fresh interpreter. How the repository is arranged, not what the library does: a
step of its own in CI (``python -m pytest -m repository``)."""
import ast
import glob
import subprocess
import sys

import pytest

import falai

ROOT = falai.__file__.rsplit("/", 1)[0]
SIBLINGS = sorted(path.rsplit("/", 1)[1][:-3] for path in glob.glob(f"{ROOT}/falai_*.py"))


# The ladder (falai.py's opening map): each module imports only those on a lower floor, at any depth
# (inside functions too), ``if TYPE_CHECKING:`` aside. A floor's modules never import each other but as listed.
FLOORS = {
    "falai_base": 0,
    "falai_checks": 1,
    "falai_calls": 2, "falai_spec": 2,
    "falai_protocols": 3,
    "falai_stores": 1, "falai_testing": 1, "falai_providers": 1,
    "falai": 4,
    "falai_cli": 5, "falai_host": 5,
}
SAME_FLOOR = {("falai_cli", "falai_host")}      # the CLI starts the host: `falai host ...`


def _falai_imports(path):
    """The falai modules a module imports, at any depth, ``if TYPE_CHECKING:`` blocks and the
    ``if __name__ == "__main__":`` entry left out."""

    def skipped(node):
        test = node.test
        return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__")

    found, todo = set(), [ast.parse(open(path, encoding="utf-8").read())]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and skipped(child):
                todo.extend(child.orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names if alias.name.startswith("falai"))
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith("falai"):
                found.add(child.module)
            todo.append(child)
    return found


def test_every_module_imports_only_down_the_ladder():
    """falai_base imports no falai module; every other module imports only lower floors: no cycle, no upward
    arrow, no list of names kept for other modules (issue 30)."""
    assert set(FLOORS) == {"falai", *SIBLINGS}
    for module, floor in FLOORS.items():
        for imported in _falai_imports(f"{ROOT}/{module}.py"):
            assert FLOORS[imported] < floor or (module, imported) in SAME_FLOOR, f"{module} imports {imported}"
    assert not hasattr(falai, "FOR_SIBLING_MODULES")


def _private_names_taken(path):
    """``from falai... import _x`` and ``module._x`` for an imported falai module: (module, name) pairs."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    ours = {name for name in ["falai", *SIBLINGS]}
    aliases, taken = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names if alias.name in ours})
        elif isinstance(node, ast.ImportFrom) and node.module in ours:
            taken.update((node.module, alias.name) for alias in node.names
                         if alias.name.startswith("_") and not alias.name.startswith("__"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            taken.add((aliases[node.value.id], node.attr))
    return sorted(taken)


@pytest.mark.parametrize("module", ["falai", *SIBLINGS])
def test_no_module_takes_another_modules_private_names(module):
    assert _private_names_taken(f"{ROOT}/{module}.py") == []


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
