"""One writer each (docs/guide/development.md, Where a run changes status, Where the floor moves),
read from the source (ast): a run's status is written only by ``move_status``, the turn's floor only by
``move_floor``. How the source is arranged, not what the library does: a step of its own in CI
(``python -m pytest -m repository``); tests/turn/test_run_status.py and tests/turn/test_floor.py hold
the engine to each mover as it runs."""
import ast
import pathlib

import falai
import falai_base


def test_no_function_but_move_status_writes_a_runs_status():
    """The choke point holds: every ``x.status = ...`` in the engine (falai.py, falai_base.py) is move_status's
    own (or an error's)."""
    writers = set()
    functions = [function for module in (falai, falai_base)
                 for function in ast.walk(ast.parse(pathlib.Path(module.__file__).read_text(encoding="utf-8")))]
    for function in functions:
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and part.attr == "status":
                        writers.add(function.name)
    assert writers == {"move_status", "__init__"}       # __init__: ProviderError's HTTP status


def test_no_function_but_move_floor_writes_the_turns_floor():
    """The choke point holds: ``turn.floor_run`` and ``turn.floor_from_ingest`` are written only in
    move_floor (and set to their start in Turn.__init__)."""
    tree = ast.parse(pathlib.Path(falai.__file__).read_text(encoding="utf-8"))
    writers = set()
    for cls in [None, *[node for node in tree.body if isinstance(node, ast.ClassDef)]]:
        scope = tree if cls is None else cls
        for function in (node for node in ast.iter_child_nodes(scope) if isinstance(node, ast.FunctionDef)):
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in targets:
                    for part in ast.walk(target):
                        if (isinstance(part, ast.Attribute) and part.attr in ("floor_run", "floor_from_ingest")
                                and getattr(part.value, "id", None) in ("turn", "self")):
                            writers.add(f"{cls.name}.{function.name}" if cls else function.name)
    assert writers == {"move_floor", "Turn.__init__"}
