"""HardwareSpec: spec-sheet presets, this machine's caches, and the cached probe."""

from __future__ import annotations

import json

import pytest

from refimpl import HardwareSpec
from refimpl.cli import main
from refimpl.config import HARDWARE_PRESETS, preset_names, probe
from refimpl.errors import ConfigError

FAKE_FIGURES = {
    "memory_bandwidth_bytes_s": 20e9,
    "copy_bandwidth_bytes_s": 10e9,
    "peak_flops": 100e9,
}


@pytest.fixture
def fake_probe(monkeypatch, tmp_path):
    """Point the probe cache at a temporary folder and count measurements instead of timing."""
    calls = []
    monkeypatch.setenv("REFIMPL_CACHE_DIR", str(tmp_path))

    def measure(l3_bytes):
        calls.append(l3_bytes)
        return dict(FAKE_FIGURES)

    monkeypatch.setattr(probe, "_measure", measure)
    monkeypatch.setattr(probe, "_MEASURED", {})  # nothing measured yet in this process
    return calls


def test_gpu_presets_carry_spec_sheet_figures():
    h100 = HardwareSpec.preset("h100-sxm")
    assert h100.analytic
    assert h100.memory_bandwidth_bytes_s == pytest.approx(3.35e12)
    assert h100.peak_flops == pytest.approx(989e12)
    assert h100.sram_bytes == 228 * 1024
    a100 = HardwareSpec.preset("a100-80gb")
    assert a100.memory_bytes == 80 * 2**30
    assert a100.ridge_intensity == pytest.approx(312e12 / 2.039e12)


def test_unknown_hardware_lists_every_preset():
    with pytest.raises(ConfigError, match="hardware='tpu'") as info:
        HardwareSpec.preset("tpu")
    for name in preset_names():
        assert name in str(info.value)


def test_sram_budget_can_be_changed_and_is_validated():
    h100 = HardwareSpec.preset("h100-sxm")
    assert h100.with_sram_budget(64 * 1024).sram_bytes == 64 * 1024
    assert h100.with_sram_budget(64 * 1024).peak_flops == h100.peak_flops
    with pytest.raises(ConfigError, match="sram_bytes=0"):
        h100.with_sram_budget(0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("memory_bandwidth_bytes_s", float("nan")), ("peak_flops", -1.0), ("memory_bytes", 1.5)],
)
def test_impossible_hardware_is_rejected(field, value):
    fields = {**HARDWARE_PRESETS["a100-80gb"].__dict__, field: value}
    with pytest.raises(ConfigError, match=field):
        HardwareSpec(**fields)


def test_cpu_local_budget_is_the_l2_size_and_measured_once_per_process(fake_probe, tmp_path):
    first = HardwareSpec.preset("cpu-local")
    second = HardwareSpec.preset("cpu-local")
    assert len(fake_probe) == 1  # measured once, then kept
    assert first == second
    assert first.sram_bytes == probe.detect_caches().l2_bytes
    assert first.memory_bandwidth_bytes_s == FAKE_FIGURES["memory_bandwidth_bytes_s"]
    assert not first.analytic
    assert not (tmp_path / "hardware-cpu-local.json").exists()  # a preset never saves


def test_only_refimpl_info_saves_the_probe_and_later_processes_read_it(fake_probe, tmp_path,
                                                                       monkeypatch, capsys):
    assert main(["info"]) == 0
    saved = json.loads((tmp_path / "hardware-cpu-local.json").read_text())
    assert saved["fingerprint"] == probe.machine_fingerprint()
    assert saved["figures"] == FAKE_FIGURES
    monkeypatch.setattr(probe, "_MEASURED", {})  # as in a fresh process
    assert HardwareSpec.preset("cpu-local").peak_flops == FAKE_FIGURES["peak_flops"]
    assert len(fake_probe) == 1  # read back, not measured again


def test_remeasure_and_a_changed_machine_measure_again(fake_probe, monkeypatch):
    HardwareSpec.preset("cpu-local")
    HardwareSpec.preset("cpu-local", remeasure=True)
    assert len(fake_probe) == 2
    real = probe.machine_fingerprint
    monkeypatch.setattr(probe, "machine_fingerprint", lambda: {**real(), "cpu": "another"})
    HardwareSpec.preset("cpu-local")
    assert len(fake_probe) == 3


def test_a_damaged_probe_file_is_measured_again(fake_probe, tmp_path):
    (tmp_path / "hardware-cpu-local.json").write_text("{not json")
    HardwareSpec.preset("cpu-local")
    assert len(fake_probe) == 1


def test_cache_sizes_are_read_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
         (3, "Unified", "105M")]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    caches = probe._caches_from_sysfs(tmp_path)
    assert caches.l1d_bytes == 48 * 1024
    assert caches.l2_bytes == 2 * 1024 * 1024
    assert caches.l3_bytes == 105 * 1024 * 1024


def test_missing_cache_information_falls_back_to_one_mib(monkeypatch, tmp_path):
    monkeypatch.setattr(probe.sys, "platform", "linux")
    monkeypatch.setattr(probe, "_caches_from_sysfs", lambda root: None)
    caches = probe.detect_caches()
    assert caches.l2_bytes == 1 << 20
    assert "assumed" in caches.source


def test_real_probe_measures_plausible_figures():
    figures = probe._measure(l3_bytes=0)
    assert 1e8 < figures["memory_bandwidth_bytes_s"] < 1e13
    assert 1e8 < figures["peak_flops"] < 1e14
