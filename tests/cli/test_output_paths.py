"""Report and plot paths are checked before a run starts: bad ones are one-line errors (exit 2)
and nothing runs, so a finished run is never lost to a path that cannot be written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from refimpl.cli import main


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("")
    return path


def _bad_paths(tmp_path: Path, a_file: Path) -> dict[str, tuple[str, str]]:
    """(path, what the error says) per kind of unwritable path."""
    return {"a folder": (str(tmp_path), "is a folder; give a file name"),
            "under a file": (f"{a_file}/x.json", "is a file, not a folder")}


@pytest.mark.parametrize("kind", ["a folder", "under a file"])
@pytest.mark.parametrize("command", [
    ["simulate", "--num-requests", "3", "--json"],
    ["demo", "--num-requests", "3", "--json"],
    ["bench", "kv", "--quick", "--json"],
    ["pareto", "--json"],
    ["pareto", "--plot"],
    ["profile", "--quick", "--out"],
])
def test_an_unwritable_report_path_is_refused_before_anything_runs(command, kind, tmp_path,
                                                                   a_file, capsys):
    path, problem = _bad_paths(tmp_path, a_file)[kind]
    assert main([*command, path]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no table: nothing ran
    field = command[-1].lstrip("-")
    assert err.startswith(f"refimpl {command[0]}: error: {field}={path!r}: ")
    assert problem in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["simulate", "demo"])
def test_a_plot_folder_that_is_a_file_is_refused_before_the_run(command, a_file, tmp_path,
                                                                 capsys):
    argv = [command, "--num-requests", "3", "--json", str(tmp_path / "r.json"), "--out"]
    assert main([*argv, str(a_file)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"out={str(a_file)!r}: is a file, not a folder" in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only folder")
def test_a_read_only_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    assert main(["simulate", "--num-requests", "3", "--json", str(folder / "x.json")]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_a_negative_seed_is_a_one_line_error(capsys):
    assert main(["simulate", "--num-requests", "3", "--seed", "-1"]) == 2
    assert capsys.readouterr().err == (
        "refimpl simulate: error: seed=-1: must be at least 0\n")
