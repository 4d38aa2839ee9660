"""The README's Quickstart: exactly two commands, and CI runs the second one verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quickstart_has_exactly_two_one_line_commands():
    commands = _quickstart_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    install_and_run, install_and_test = commands
    assert "refimpl" in install_and_run and "pip install" in install_and_run
    assert "pytest" in install_and_test and ".[test]" in install_and_test


def test_ci_runs_the_readme_test_command_verbatim():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _quickstart_commands()[1] in ci_lines


def test_every_path_in_the_readme_map_exists():
    text = (ROOT / "README.md").read_text()
    table = text.split("## Map", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing
