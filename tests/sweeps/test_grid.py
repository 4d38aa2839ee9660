"""Grids from flags or TOML: cells in one order, keys that change with what decides a run,
and bad input refused before anything runs, naming the field and the value."""

from __future__ import annotations

import pytest

import refimpl.sweeps.cell as cell_module
from refimpl.errors import ConfigError
from refimpl.sweeps import Cell, SweepGrid, load_grid


def test_cells_cover_the_grid_in_one_order_the_seed_varying_fastest():
    grid = SweepGrid(policies=("slo", "vllm"), rates=(5.0, 10.0), seeds=(0, 1),
                     slos=("default", "chat-batch"))
    cells = grid.cells()
    assert len(cells) == 2 * 2 * 2 * 2
    assert [(c.slo, c.policy, c.rate, c.seed) for c in cells[:3]] == [
        ("default", "slo", 5.0, 0), ("default", "slo", 5.0, 1), ("default", "slo", 10.0, 0)]
    assert cells == grid.cells()
    assert len({c.key() for c in cells}) == len(cells)


def test_policy_params_multiply_only_their_policy(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('policy = ["slo", "vllm"]\nrate = 10\nseed = [0, 1]\n'
                    '[policy_params]\nvllm = [{token_budget = 2048}, {token_budget = 8192}]\n')
    grid = load_grid(path)
    cells = grid.cells()
    assert len(cells) == (1 + 2) * 2
    assert {c.policy_params.get("token_budget") for c in cells if c.policy == "vllm"} == {
        2048, 8192}
    assert grid.rates == (10,)


def test_toml_axes_take_one_value_or_a_list_and_flags_replace_them(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('workload = "azure-code-like"\npolicy = "all"\nslo = "default"\n'
                    'classes = ["chat-batch"]\nnum_requests = 50\n')
    grid = load_grid(path, seeds=[3], num_requests=None)  # None: keep the file's value
    assert grid.workloads == ("azure-code-like",) and len(grid.policies) == 6
    assert grid.slos == ("default", "chat-batch") and grid.seeds == (3,)
    assert grid.num_requests == 50


def test_the_key_changes_with_any_setting_refimpls_version_and_its_compiled_sources(
        monkeypatch):
    base = Cell("azure-conv-like", "vllm", 10.0, "default", 0)
    assert base.key() == Cell("azure-conv-like", "vllm", 10.0, "default", 0).key()
    others = [Cell("azure-conv-like", "vllm", 10.5, "default", 0),
              Cell("azure-conv-like", "vllm", 10.0, "default", 1),
              Cell("azure-conv-like", "vllm", 10.0, "default", 0, {"token_budget": 4096})]
    assert len({base.key(), *(c.key() for c in others)}) == 4
    key = base.key()
    monkeypatch.setattr(cell_module, "__version__", "99.0")
    assert base.key() != key
    edited = base.key()
    monkeypatch.setattr(cell_module, "_compiled_sources_fingerprint", lambda: "an edited loop")
    assert base.key() not in (key, edited)


def test_a_trace_file_is_keyed_by_its_contents(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens,output_tokens\n100,20\n")
    first = Cell(str(path), "vllm", 5.0, "default", 0).key()
    path.write_text("prompt_tokens,output_tokens\n100,21\n")
    assert Cell(str(path), "vllm", 5.0, "default", 0).key() != first


@pytest.mark.parametrize(("values", "field", "value"), [
    ({"rates": (10.0, 0.0)}, "rate", 0.0),
    ({"rates": (-5.0,)}, "rate", -5.0),
    ({"rates": (float("nan"),)}, "rate", float("nan")),
    ({"policies": ("fastest",)}, "policy", "fastest"),
    ({"workloads": ("no-such-workload",)}, "workload", "no-such-workload"),
    ({"slos": ("impatient",)}, "slo", "impatient"),
    ({"seeds": (-1,)}, "seed", -1),
    ({"num_requests": 0}, "num_requests", 0),
    ({"rates": ()}, "rates", ()),
    ({"policies": "slo"}, "policies", "slo"),
    ({"policy_params": {"vllm": [{"token_budget": 1024}]}}, "policy_params", "vllm"),
    ({"policies": ("vllm",), "policy_params": {"vllm": [{"speed": 2}]}}, "policy_params",
     "speed"),
])
def test_bad_grids_are_refused_naming_the_field_and_value(values, field, value):
    with pytest.raises(ConfigError) as caught:
        SweepGrid(**values)
    assert caught.value.field == field
    assert repr(caught.value.value) == repr(value)


def test_bad_grid_files_name_the_file_the_field_and_the_value(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('policy = ["vllm"]\nrates = [10]\n')  # `rate`, not `rates`
    with pytest.raises(ConfigError, match=r"grid.toml: rates=\[10\]: unknown grid field"):
        load_grid(path)
    path.write_text('rate = [10, -1]\n')
    with pytest.raises(ConfigError, match=r"grid.toml: rate=-1: must be a finite number"):
        load_grid(path)
    path.write_text('rate = [10\n')
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_grid(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_grid(tmp_path / "missing.toml")
