"""Every citation of the spec in the code resolves to a file shipped in docs/spec/ (issue 10).

A citation is a spec file name (``runtime.md``), optionally followed by section numbers (``§3.6.3``,
``§3.2-§3.3``, ``§1.6 rule 4, §3.8``) or, for python-api.md, a heading (``python-api.md, Errors``); a
path to the spec (``docs/spec/fixtures/v4.json``); or a seed page ("the Tool seed page"). Each cited
file must exist in docs/spec/ and each cited section must be a numbered heading of that file.
"""
import functools
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "spec"
SPEC_FILES = ("README", "flows", "runtime", "model-calls", "persistence", "providers", "python-api")
CITATION = re.compile(r"\b(?P<file>" + "|".join(re.escape(n) for n in SPEC_FILES[1:]) + r")\.md\b"
                      r"(?P<sections>(?:\s*(?:,|and|-|–|/)?\s*§\s?\d+(?:\.\d+)*)*)"
                      r"(?P<heading>,\s+[A-Z][A-Za-z ]+)?")
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
SPEC_PATH = re.compile(r"((?:\.\./)?shared/(?:spec|seeds)|\bdocs/spec)(/[\w./-]*)?")
SEED_PAGE = re.compile(r"\b(Tool|Agent) seed page")
HEADING_NUMBER = re.compile(r"^#+\s+(?:Part\s+)?(\d+(?:\.\d+)*)\.?\s")


def cited_files() -> list[pathlib.Path]:
    files = [ROOT / "falai.py", ROOT / "falai_providers.py", ROOT / "falai_stores.py"]
    for folder in ("tests", "examples", "bench"):
        files += sorted(f for f in (ROOT / folder).rglob("*.py")            # not bench/.venvs' packages
                        if not any(part.startswith(".") for part in f.relative_to(ROOT).parts))
    return [f for f in files if f.exists() and f.name != pathlib.Path(__file__).name]   # not this file's samples


@functools.cache
def headings(name: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """The section numbers of a spec file, and its heading texts (read once per run)."""
    numbers, texts = set(), []
    for line in (SPEC / f"{name}.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            texts.append(line.lstrip("#").strip())
            found = HEADING_NUMBER.match(line)
            if found:
                numbers.add(found.group(1))
    return frozenset(numbers), tuple(texts)


def citations(path: pathlib.Path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for found in CITATION.finditer(line):
            yield number, found
        for found in SPEC_PATH.finditer(line):
            yield number, found
        for found in SEED_PAGE.finditer(line):
            yield number, found


def problems_in(path: pathlib.Path) -> list[str]:
    where = path.relative_to(ROOT) if ROOT in path.parents else path.name
    problems = []
    for line, found in citations(path):
        if found.re is SPEC_PATH:
            if found.group(1) != "docs/spec":
                problems.append(f"{where}:{line}: cites {found.group(0)}, which is not shipped. Cite docs/spec/...")
            elif found.group(2) and not (ROOT / (found.group(1) + found.group(2).rstrip("."))).exists():
                problems.append(f"{where}:{line}: {found.group(0)} does not exist. Fix the path")
            continue
        if found.re is SEED_PAGE:
            if not (SPEC / "seeds" / f"{found.group(1).lower()}.txt").exists():
                problems.append(f"{where}:{line}: the {found.group(1)} seed page is not in docs/spec/seeds/")
            continue
        name = found.group("file")
        if not (SPEC / f"{name}.md").exists():
            problems.append(f"{where}:{line}: {name}.md is not in docs/spec/. Ship it or fix the citation")
            continue
        numbers, texts = headings(name)
        for section in SECTION.findall(found.group("sections") or ""):
            if section not in numbers:
                problems.append(f"{where}:{line}: {name}.md has no section §{section}. Fix the section number")
        heading = (found.group("heading") or "").lstrip(", ").strip()
        if name == "python-api" and heading and not any(t.startswith(heading.split()[0]) for t in texts):
            problems.append(f"{where}:{line}: python-api.md has no heading {heading!r}. Fix the heading")
    return problems


def test_the_spec_is_shipped_with_its_fixtures_and_seed_pages():
    for name in SPEC_FILES:
        assert (SPEC / f"{name}.md").is_file(), name
    for name in ("ilojista-signals.json", "prospectar-midflow.json", "v4.json", "README.md"):
        assert (SPEC / "fixtures" / name).is_file(), name
    assert (SPEC / "seeds" / "tool.txt").is_file() and (SPEC / "seeds" / "agent.txt").is_file()


def test_the_citation_finder_reads_every_form_and_catches_a_wrong_one(tmp_path):
    """The checker itself: a good citation passes, a missing section, file or path is reported."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""runtime.md §3.6.3, §3.2-§3.3; python-api.md, Errors; docs/spec/fixtures/v4.json;\n'
                      "the Tool seed page.\n"
                      "runtime.md §99.1; python-api.md, Nowhere; ../shared/spec/runtime.md; docs/spec/nope.md\n"
                      '"""\n', encoding="utf-8")
    found = problems_in(sample)
    assert len(found) == 4, found
    assert "§99.1" in found[0] and "Nowhere" in found[1]
    assert "../shared/spec/runtime.md" in found[2] and "nope.md" in found[3]
    (tmp_path / "seeds.py").write_text('"""The seed pages (shared/seeds: Tool and Agent)."""\n', encoding="utf-8")
    assert problems_in(tmp_path / "seeds.py") == ["seeds.py:1: cites shared/seeds, which is not shipped. "
                                                  "Cite docs/spec/..."]


@pytest.mark.parametrize("path", cited_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_spec_citation_resolves(path):
    problems = problems_in(path)
    assert not problems, "\n".join(problems)
