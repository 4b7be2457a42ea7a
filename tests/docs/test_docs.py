"""The user guide's code runs, and its links lead somewhere (issue 10).

Every ```python block of README.md, docs/README.md and docs/guide/*.md runs, in order, in one namespace
per page, inside a temporary folder and offline (conftest blocks every non-loopback socket). A block whose
first line is ``# compile-only: <reason>`` (it needs a key, a server or a database the reader has) is only
compiled. Relative links must name a file of the repository, and a ``#anchor`` a heading of that file.
"""
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Pages the other branches of this release add (providers, engine limits, production host); the
# integrator merges them, and this list then goes.
ADDED_BY_OTHER_BRANCHES: set[str] = set()


def page_id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    text = BLOCK.sub("", path.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_guide_has_its_pages():
    names = {p.name for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert {"getting-started.md", "flows.md", "tools.md", "host-loop.md", "testing.md", "stores.md",
            "deploying.md", "conformance.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_python_block_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    for name in ("GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict = {"__name__": "guide_page"}
    text = page.read_text(encoding="utf-8")
    blocks = BLOCK.findall(text)
    for number, code in enumerate(blocks, 1):
        where = f"{page_id(page)} block {number}"
        compiled = compile(code, where, "exec")
        if code.startswith("# compile-only:"):
            continue
        exec(compiled, namespace)


@pytest.mark.parametrize("page", PAGES + sorted((ROOT / "docs" / "spec").glob("*.md")), ids=page_id)
def test_every_relative_link_resolves(page):
    problems = []
    for target in LINK.findall(BLOCK.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target) or "|" in target:
            continue                                        # https:, mailto:, a regex in the text
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if os.path.relpath(path, ROOT) in ADDED_BY_OTHER_BRANCHES:
            continue
        if not path.exists():
            problems.append(f"{page_id(page)}: link {target}: {file} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{page_id(page)}: link {target}: no heading #{anchor} in {file or page.name}")
    assert not problems, "\n".join(problems)


def test_the_shipped_spec_gives_every_outcome_code_the_engine_text():
    """runtime.md §11.4 as shipped lists exactly OUTCOME_MESSAGES, word for word: the reference a host or a
    conformance user reads is the engine's own table."""
    from falai import OUTCOME_MESSAGES

    text = (ROOT / "docs" / "spec" / "runtime.md").read_text(encoding="utf-8")
    table = text[text.index("### 11.4"):text.index("## 12.")]
    rows = dict(re.findall(r"^\| `([a-z-]+)` \|.*\| `([^`]*)` \|\s*$", table, re.M))
    assert rows == OUTCOME_MESSAGES
