"""A small mutation pass over the scheduler, the KV pool and admission (issue 16, part 5).

No mutation tool is installed, so this applies hand-chosen source mutations one at a time (a
flipped comparison, an off-by-one, a dropped term or statement) to a scratch copy of the tree,
runs the tests aimed at that code, and reports each mutant killed (a test failed) or survived.
Compiled code is kept cheap three ways, per mutant (`mode`):
- `nojit`: its tests run with `NUMBA_DISABLE_JIT=1` (the kernels as plain Python);
- `pinned`: a pure-Python file changed, so the compiled kernels are those of the unmutated
  tree: its tests load them from the base cache (refimpl's source fingerprint pinned to the
  base tree's, since Numba's own stamp of the kernel files is unchanged);
- `compile`: a kernel the serving loop compiles in changed: a fresh cache, a full compile.

    PYTHONPATH=. python tools/mutate.py [--planted] [name-filter ...]

`--planted` runs issue 16's three planted bugs against the tests before and after its fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path(os.environ.get("MUTATE_SCRATCH", "/tmp/refimpl-mutants"))
BASE_REVISION = "6cef57b"  # the tests before issue 16's part 5
TIME_LIMIT_S = 1500


@dataclass(frozen=True)
class Mutant:
    """One source change and the tests that should notice it."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    mode: str = "nojit"


KNAPSACK = "refimpl/sched/slo/knapsack.py"
POOL_KERNELS = "refimpl/kv/_pool_kernels.py"
K_TESTS = ("tests/sched/test_knapsack.py",)
P_TESTS = ("tests/kv/test_pool.py", "tests/kv/test_pool_state_machine.py")
ADMISSION_TESTS = ("tests/admission/test_capacity.py", "tests/admission/test_engine_admission.py")

MUTANTS = (
    Mutant("knapsack: a fit needs strictly less time", KNAPSACK,
           "if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:\n"
           "            time_left",
           "if est_time_s[slot] < time_left and kv_need[slot] <= pages_left:\n"
           "            time_left",
           K_TESTS),
    Mutant("knapsack: urgent includes the horizon's edge", KNAPSACK,
           "        if deadline_s[slot] < now_s + horizon_s:",
           "        if deadline_s[slot] <= now_s + horizon_s:", K_TESTS),
    Mutant("knapsack: partition from fewer candidates", KNAPSACK,
           "size <= 4 * room + 64", "size <= room", K_TESTS),
    Mutant("knapsack: value w*t instead of w/t", KNAPSACK,
           "value = weight[slot] / max(est_time_s[slot], 1e-12)",
           "value = weight[slot] * est_time_s[slot]", K_TESTS),
    Mutant("knapsack: no fill around the earliest deadline", KNAPSACK,
           "    if count == 0:  # nothing urgent fitted",
           "    if count < 0:  # nothing urgent fitted",
           K_TESTS),
    Mutant("knapsack: the rest after the partition dropped (planted i)", KNAPSACK,
           "if count < max_batch and cut < np.inf and _any_fits(",
           "if False and count < max_batch and cut < np.inf and _any_fits(", K_TESTS),
    Mutant("knapsack: page need off by one", KNAPSACK,
           "kv_need[slot] = 1 if context[slot] % page_size == 0 else 0",
           "kv_need[slot] = 1 if context[slot] % page_size == 1 else 0", K_TESTS),
    Mutant("knapsack: bucket edge exclusive", KNAPSACK,
           "while context_tokens >= edge:", "while context_tokens > edge:", K_TESTS),
    Mutant("pool: growth to exactly the context refused", POOL_KERNELS,
           "elif lengths[slot] + grow > max_tokens:", "elif lengths[slot] + grow >= max_tokens:",
           P_TESTS),
    Mutant("pool: shared count not lowered on release", POOL_KERNELS,
           "        elif refcount[page] == 1:\n            counters[SHARED] -= 1",
           "        elif refcount[page] == 1:\n            pass", P_TESTS),
    Mutant("pool: pages rounded down", POOL_KERNELS,
           "target = (length + grow + tpp - 1) // tpp", "target = (length + grow) // tpp",
           P_TESTS),
    Mutant("pool: batched free leaves the slot state", POOL_KERNELS,
           "        lengths[slot] = 0\n        states[slot] = FREE_SLOT\n    return 0",
           "        lengths[slot] = 0\n    return 0", P_TESTS),
    Mutant("pool: batched free leaks the slot (planted ii)", "refimpl/kv/pool.py",
           "            self._free_slots.append(slot)\n", "", P_TESTS),
    Mutant("pool: duplicate check in free dropped", POOL_KERNELS,
           "        elif states[slot] < 0:\n            refusal = DUPLICATE",
           "        elif states[slot] < -9:\n            refusal = DUPLICATE", P_TESTS),
    Mutant("ladder: a rung acts only strictly below its threshold", "refimpl/kv/_ladder_kernels.py",
           "if level <= thresholds[step - CAP_LENGTH]", "if level < thresholds[step - CAP_LENGTH]",
           ("tests/kv/test_ladder.py", "tests/kv/test_ladder_plan.py")),
    Mutant("ladder: cap ignores priority", "refimpl/kv/_ladder_kernels.py",
           "(priorities >= low_priority)", "(priorities >= 0)",
           ("tests/kv/test_ladder.py", "tests/kv/test_ladder_plan.py")),
    Mutant("requests: prompt_tokens of 0 allowed", "refimpl/sched/table.py",
           '((PROMPT, "prompt_tokens", 1, MAX_TOKENS)', '((PROMPT, "prompt_tokens", 0, MAX_TOKENS)',
           ("tests/engine/test_simulate.py",), "pinned"),
    Mutant("slo prefill key: remaining tokens negated", "refimpl/sched/slo/queues.py",
           "int(requests.prompt_tokens[i] + requests.num_generated[i]) - num_computed,",
           "num_computed - int(requests.prompt_tokens[i] + requests.num_generated[i]),",
           ("tests/sched/test_slo_policy.py", "tests/sched/test_slo_compiled.py"), "pinned"),
    Mutant("engine: context check off by one (planted iii)", "refimpl/engine/loop.py",
           "if total > config[MAX_CONTEXT]:", "if total >= config[MAX_CONTEXT]:",
           ("tests/engine/test_engine.py",), "compile"),
    Mutant("kv facade: free keeps the slot", "refimpl/kv/manager.py",
           "    kv.free_slots[height] += 1\n", "", ("tests/kv/test_manager.py",
                                                  "tests/engine/test_engine.py"), "compile"),
    Mutant("admission: TPOT rule dropped", "refimpl/admission/decide.py",
           "        return waits, TPOT_CAPACITY, 0", "        return ACCEPT, 0, 0",
           ADMISSION_TESTS, "compile"),
    Mutant("admission: prompt time without its pairs term", "refimpl/admission/capacity.py",
           "return tokens * f[S.PREFILL_TOKEN_S] + pairs * f[S.PREFILL_PAIR_S]",
           "return tokens * f[S.PREFILL_TOKEN_S]", ADMISSION_TESTS, "compile"),
)
PLANTED = ("(planted i)", "(planted ii)", "(planted iii)")


def _copy_tree(dest: Path, old_tests: bool) -> None:
    """A scratch copy of the package, tests, tools and pyproject; with `old_tests`, also the
    tests of BASE_REVISION in `tests_old/` (one tree, so a compile serves both)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("refimpl", "tools", "tests"):
        shutil.copytree(ROOT / name, dest / name, copy_function=shutil.copy2,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    if old_tests:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASE_REVISION, "tests"],
                                 capture_output=True, check=True).stdout
        (dest / "old").mkdir()
        subprocess.run(["tar", "-x", "-C", str(dest / "old")], input=archive, check=True)
        (dest / "old" / "tests").rename(dest / "tests_old")


def _env(tree: Path, mutant: Mutant, base_fingerprint: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'tools'}"}
    if mutant.mode == "nojit":
        env.update(NUMBA_DISABLE_JIT="1", REFIMPL_NUMBA_CACHE="0")
    elif mutant.mode == "pinned":
        env.update(NUMBA_CACHE_DIR=str(SCRATCH / "cache-base"),
                   REFIMPL_PINNED_FINGERPRINT=base_fingerprint)
    else:
        env["NUMBA_CACHE_DIR"] = str(SCRATCH / f"cache-{abs(hash(mutant.name)) % 10**8}")
    return env


def run_mutant(tree: Path, mutant: Mutant, base_fingerprint: str,
               test_sets: tuple[str, ...] = ("tests",)) -> list[dict]:
    """Apply `mutant` in `tree`, run its tests (from each of `test_sets`), restore."""
    path = tree / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return [{"name": mutant.name, "outcome": "not applied (text not found once)"}]
    stat = path.stat()
    path.write_text(original.replace(mutant.old, mutant.new))
    results = []
    try:
        for test_set in test_sets:
            results.append({**_run_tests(tree, mutant, base_fingerprint, test_set),
                            "tests": test_set})
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # Numba's stamp: unchanged
    return results


def _run_tests(tree: Path, mutant: Mutant, base_fingerprint: str, test_set: str) -> dict:
    """Run the mutant's tests from folder `test_set`; the outcome."""
    tests = [t.replace("tests/", f"{test_set}/", 1) for t in mutant.tests]
    tests = [t for t in tests if (tree / t).exists()]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               *(["-p", "_pinned_fingerprint"] if mutant.mode == "pinned" else []), *tests]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=tree, env=_env(tree, mutant, base_fingerprint),
                              capture_output=True, text=True, timeout=TIME_LIMIT_S, check=False)
        code, tail = done.returncode, (done.stdout.strip().splitlines() or [""])[-1]
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    except subprocess.TimeoutExpired:
        code, tail, failed = -1, "time limit", []
    outcome = "survived" if code == 0 else "killed" if code in (1, -1) else f"error {code}"
    return {"name": mutant.name, "mode": mutant.mode, "outcome": outcome,
            "seconds": round(time.perf_counter() - started), "tail": tail,
            "first_failure": failed[0][:200] if failed else ""}


def main(argv: list[str]) -> None:
    """Run the mutants whose names contain any filter (all without one)."""
    planted = "--planted" in argv
    filters = [a for a in argv if a != "--planted"]
    chosen = [m for m in MUTANTS if (not filters or any(f in m.name for f in filters))
              and (not planted or any(p in m.name for p in PLANTED))]
    tree = SCRATCH / "tree"
    _copy_tree(tree, old_tests=planted)
    fingerprint = subprocess.run(
        [sys.executable, "-c", "from refimpl._numba import sources_fingerprint as f; print(f())"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
        check=True).stdout.strip()
    results = []
    for mutant in chosen:
        for result in run_mutant(tree, mutant, fingerprint,
                                 ("tests_old", "tests") if planted else ("tests",)):
            results.append(result)
            print(json.dumps(result), flush=True)
    for r in results:
        print(f"{r['outcome']:<9} {r.get('seconds', 0):>5}s  [{r.get('tests')}] {r['name']}  "
              f"{r.get('first_failure') or r.get('tail', '')}")


if __name__ == "__main__":
    main(sys.argv[1:])
