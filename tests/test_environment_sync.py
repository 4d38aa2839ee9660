"""pyproject.toml and environment.yml describe the same set-up."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Optional groups environment.yml leaves out on purpose: `hf` (PyTorch and transformers, for one
# cross-check test that skips without them) would add gigabytes to every set-up.
_NOT_MIRRORED = {"hf"}

# conda-forge names that differ from PyPI's: conda name -> PyPI name.
_PYPI_NAME = {"ray-core": "ray"}

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$")


def _split(requirement: str) -> tuple[str, str]:
    """'numba>=0.60' -> ('numba', '>=0.60'); names compared case- and dash-insensitively."""
    match = _REQUIREMENT.match(requirement)
    assert match, requirement
    return match.group(1).lower().replace("_", "-"), match.group(2).replace(" ", "")


def _pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for name, group in project["optional-dependencies"].items():
        if name not in _NOT_MIRRORED:
            requirements.extend(group)
    pairs = [_split(r) for r in requirements]
    merged: dict[str, str] = {}
    for name, spec in pairs:
        assert merged.get(name, spec) == spec, f"{name} has two version specs in pyproject.toml"
        merged[name] = spec
    return merged


def _conda_requirements() -> tuple[dict[str, str], list[str]]:
    """The conda-forge dependencies, and the pip lines, of environment.yml."""
    conda: dict[str, str] = {}
    pip: list[str] = []
    section = None
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped:
            continue
        if not line.startswith(" "):
            section = stripped.rstrip(":")
            continue
        if section != "dependencies":
            continue
        item = stripped.strip().removeprefix("- ").strip()
        if line.startswith("      "):
            pip.append(item)
        elif item not in ("pip", "pip:"):
            name, spec = _split(item)
            conda[_PYPI_NAME.get(name, name)] = spec
    return conda, pip


def test_environment_yml_lists_exactly_the_pyproject_dependencies():
    conda, _ = _conda_requirements()
    conda.pop("python")
    assert conda == _pyproject_requirements()


def test_environment_yml_installs_the_project_itself():
    _, pip = _conda_requirements()
    assert "-e ." in pip


def test_python_floor_agrees():
    conda, _ = _conda_requirements()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert conda["python"] == project["requires-python"]
