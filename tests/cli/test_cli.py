"""The `refimpl` command: help, version, `info`, and one-line errors instead of tracebacks."""

from __future__ import annotations

import subprocess
import sys

import pytest

import refimpl
from refimpl.cli import SUBCOMMANDS, build_parser, main
from refimpl.config import MODEL_PRESETS, preset_names


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"refimpl {refimpl.__version__}"


def test_every_subcommand_has_help(capsys):
    for name in SUBCOMMANDS:
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert f"usage: refimpl {name}" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "info" in capsys.readouterr().out


def test_info_prints_caches_budget_and_every_preset_with_kv_figures(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "SRAM budget S" in out and "L2" in out
    for name in (*preset_names(), *MODEL_PRESETS):
        assert name in out
    assert "524,288" in out  # llama-2-7b fp16 KV bytes per token
    assert "2.0 GiB" in out  # ... and per 4k-token request
    assert "819,200" in out  # opt-13b


def test_refimpl_errors_become_one_line_with_status_2(monkeypatch, capsys):
    from refimpl.errors import ConfigError

    def boom(args):
        raise ConfigError("model", "nope", "unknown model preset")

    parser = build_parser()
    args = parser.parse_args(["info"])
    monkeypatch.setattr("refimpl.cli.build_parser", lambda: _FixedParser(args, boom))
    assert main(["info"]) == 2
    assert capsys.readouterr().err.strip() == (
        "refimpl info: error: model='nope': unknown model preset"
    )


class _FixedParser:
    def __init__(self, args, run):
        self.args = args
        self.args.run = run

    def parse_args(self, argv):
        return self.args


def test_python_dash_m_runs_the_same_command():
    out = subprocess.run([sys.executable, "-m", "refimpl", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == f"refimpl {refimpl.__version__}"
