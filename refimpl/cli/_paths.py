"""Output paths checked before the work that fills them, so a finished run is never lost.

A report or plot path that cannot be written is refused with a `ConfigError` before a
simulation, benchmark, profile or grading starts, instead of a traceback after it ends.
Missing folders are fine: the writers create them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from refimpl.errors import ConfigError

__all__ = ["check_output_dir", "check_output_path"]


def check_output_path(field: str, path: Path) -> None:
    """Refuse a file path that could not be written (a folder, under a file, not writable)."""
    if path.is_dir():
        raise ConfigError(field, str(path), "is a folder; give a file name")
    _check_writable(field, path, path if path.exists() else path.parent)


def check_output_dir(field: str, path: Path) -> None:
    """Refuse a folder path whose files could not be written (a file, or not writable)."""
    if path.exists() and not path.is_dir():
        raise ConfigError(field, str(path), "is a file, not a folder")
    _check_writable(field, path, path)


def _check_writable(field: str, path: Path, target: Path) -> None:
    """`target` (the path itself, or the folder to create it in) must take a write: tried,
    since permission bits do not tell (root, read-only mounts, /sys)."""
    while not target.exists():  # the nearest folder that exists is where creation starts
        target = target.parent
    if not target.is_dir() and target != path:
        raise ConfigError(field, str(path), f"{target} is a file, not a folder")
    try:
        if target.is_dir():
            with tempfile.TemporaryFile(dir=target):
                pass
        else:
            with open(target, "a"):  # appending nothing changes nothing
                pass
    except OSError as error:
        raise ConfigError(field, str(path), f"{target} is not writable "
                          f"({error.strerror})") from None
