"""One owner for what an agent works out once (docs/guide/development.md, What an agent works out once),
read from the source (ast) of every falai module.

``agent.compiled`` (``Compiled``, falai.py) owns every cache of the agent: its own parts, and the
protocol object (``ModelCalls``: ``Lean`` or ``V4``, falai_protocols) that keeps the parts of the
model calls. Each keeps its caches in ``_private`` attributes that only its own methods read; the
rest of falai asks through the methods. How the source is arranged, not what the library does: a step
of its own in CI (``python -m pytest -m repository``); tests/construction/test_owners.py checks a built
agent.
"""
import ast
import glob

import falai

ROOT = falai.__file__.rsplit("/", 1)[0]
LIBRARY = sorted(glob.glob(f"{ROOT}/falai*.py"))


def _trees():
    return {path.rsplit("/", 1)[1]: ast.parse(open(path, encoding="utf-8").read()) for path in LIBRARY}


def _classes(trees):
    return {node.name: node for tree in trees.values() for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)}


def _owner_families(classes):
    """The owners of the agent's caches: Compiled; ModelCalls with every protocol class under it."""
    protocols = {"ModelCalls"} | {name for name, node in classes.items()
                                  if any(getattr(base, "id", None) == "ModelCalls" for base in node.bases)}
    return [{"Compiled"}, protocols]


def _kept(classes, family):
    """The ``_private`` attributes a family of classes sets on ``self``: what it keeps."""
    kept = set()
    for name in family:
        for node in ast.walk(classes[name]):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                for part in ast.walk(target):
                    if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                            and part.value.id == "self" and part.attr.startswith("_")
                            and not part.attr.startswith("__")):
                        kept.add(part.attr)
    return kept


def _reads(tree, attrs):
    """Each ``x._attr`` for ``attrs`` in a module: (enclosing class or None, ``x._attr``, line)."""
    found = []

    def visit(node, cls):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            if isinstance(child, ast.Attribute) and child.attr in attrs:
                found.append((inner, ast.unparse(child), child.lineno))
            visit(child, inner)
    visit(tree, None)
    return found


def test_the_owners_keep_their_caches_in_private_attributes():
    """So the test below has something to hold: each owner keeps what the brief of each names."""
    classes = _classes(_trees())
    compiled, protocols = _owner_families(classes)
    assert protocols >= {"ModelCalls", "Lean", "V4"}
    assert _kept(classes, compiled) >= {"_flow_facts", "_flow_words", "_by_trigger", "_harvest",
                                        "_silence_flows", "_tool_pool", "_model_calls"}
    assert _kept(classes, protocols) >= {"_envelopes", "_field_envelopes", "_speak_system", "_parts",
                                         "_field_order", "_field_lines", "_speak_schema"}


def test_no_cache_of_the_agent_is_reached_from_outside_its_owner():
    """Every read or write of an owner's ``_private`` attribute, in any falai module, is ``self.``
    inside that owner's own methods (or another class's ``self.`` of a name it keeps itself): the
    rest of falai asks through the owner's methods."""
    trees = _trees()
    classes = _classes(trees)
    outside = []
    for family in _owner_families(classes):
        kept = _kept(classes, family)
        for module, tree in trees.items():
            for cls, read, line in _reads(tree, kept):
                value, attr = read.rsplit(".", 1)
                own = cls in family or (cls is not None and attr in _kept(classes, {cls}))
                if not (value == "self" and own):
                    outside.append(f"{module}:{line} {read} in {cls or 'a function'}")
    assert outside == [], "reach a cache through its owner's methods: " + "; ".join(outside)


def _calls_of(trees, name):
    """The functions (class.function) that call ``name`` or ``x.name``."""
    callers = set()
    for tree in trees.values():
        for cls in [None, *[node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]]:
            scope = tree if cls is None else cls
            for function in (node for node in ast.iter_child_nodes(scope)
                             if isinstance(node, ast.FunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None),
                                                               getattr(node.func, "attr", None)):
                        callers.add(f"{cls.name}.{function.name}" if cls else function.name)
    return callers


def test_only_the_agent_builds_its_compiled_parts_and_only_they_build_its_protocol_object():
    trees = _trees()
    assert _calls_of(trees, "Compiled") == {"Agent.__init__"}
    assert _calls_of(trees, "for_protocol") == {"Compiled.__init__"}
