"""Library lines are at most 100 columns (docs/guide/development.md, Commits, comments and the
changelog). ruff's E501 (``line-length = 100`` in pyproject.toml) checks the same in the lint step;
this keeps the list of modules that got there, so a module cannot slip back under a per-file ignore."""
import pytest

import falai

ROOT = falai.__file__.rsplit("/", 1)[0]

WITHIN_100_COLUMNS = ("falai_base", "falai", "falai_checks", "falai_spec", "falai_testing", "falai_stores",
                      "falai_calls", "falai_protocols", "falai_providers", "falai_cli", "falai_host")


@pytest.mark.parametrize("module", WITHIN_100_COLUMNS)
def test_a_module_within_100_columns_stays_there(module):
    """Add a module when it gets there."""
    lines = open(f"{ROOT}/{module}.py", encoding="utf-8").read().splitlines()
    wide = [f"{module}.py:{number}" for number, line in enumerate(lines, 1) if len(line) > 100]
    assert wide == [], f"wrap these lines at 100 columns: {wide}"
