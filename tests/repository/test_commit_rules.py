"""docs/guide/development.md, Commits: a subject of at most 72 characters, a body after a blank line.

The rule is kept twice: `.githooks/commit-msg` refuses a message that breaks it as it is written,
and the last test reads the history since the hook came, so a commit made without the hook still
fails CI."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HOOK = os.path.join(ROOT, ".githooks", "commit-msg")
HOOK_ADDED = "Commits: a commit-msg hook keeps subjects within 72"   # the first commit it checks


def refused(message: str, tmp_path) -> str | None:
    """What the hook says of ``message``: None when it takes it."""
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    done = subprocess.run([sys.executable, HOOK, str(path)], capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr


@pytest.mark.parametrize("message", [
    "Sender: keep each session's order across shards\n",
    "Short subject\n\nA body that says why, wrapped at 72 columns.\n",
    "\n\nLeading blank lines are dropped by git\n",
    "Non-ASCII counts as characters — " + "x" * 38 + "\n",
    "A subject\n# Please enter the commit message (git's comment)\n",
])
def test_the_hook_takes_a_message_that_keeps_the_rule(message, tmp_path):
    assert refused(message, tmp_path) is None


@pytest.mark.parametrize("message, says", [
    ("x" * 73 + "\n", "the subject is 73 characters; at most 72"),
    ("Subject\nbody right under it\n", "blank line between the subject and the body"),
    ("# only a comment\n\n", "the message is empty"),
])
def test_the_hook_refuses_a_message_that_breaks_it_and_says_why(message, says, tmp_path):
    assert says in (refused(message, tmp_path) or "")


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no git history here (git {' '.join(args)}: {done.stderr.strip()})")
    return done.stdout


def test_every_commit_since_the_hook_keeps_the_rule():
    added = git("log", "--format=%H", "--fixed-strings", f"--grep={HOOK_ADDED}").split()
    if not added:
        pytest.skip("the commit that added the hook is not in this checkout's history (shallow clone?)")
    subjects = git("log", "--format=%s", f"{added[-1]}~1..HEAD").splitlines()
    assert subjects, "the history since the hook is empty: the range is wrong"
    assert [s for s in subjects if len(s) > 72] == []
