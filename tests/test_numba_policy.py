"""The Numba policy module: environment switches and serial/parallel pairs from one function."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numba
import numpy as np
import pytest

from refimpl import _numba
from refimpl.errors import ConfigError


def _total(values):
    acc = 0.0
    for i in _numba_prange(values.shape[0]):
        acc += values[i]
    return acc


from numba import prange as _numba_prange  # noqa: E402  (used inside the kernel above)


def test_switches_default_to_cached_and_serial(monkeypatch):
    monkeypatch.delenv("REFIMPL_NUMBA_CACHE", raising=False)
    monkeypatch.delenv("REFIMPL_PARALLEL", raising=False)
    assert _numba.cache_enabled() and not _numba.parallel_default()


def test_switches_read_the_environment(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")
    monkeypatch.setenv("REFIMPL_PARALLEL", "yes")
    assert not _numba.cache_enabled() and _numba.parallel_default()
    monkeypatch.setenv("REFIMPL_PARALLEL", "maybe")
    with pytest.raises(ConfigError, match="REFIMPL_PARALLEL='maybe'"):
        _numba.parallel_default()


def test_kernel_pair_builds_agreeing_serial_and_parallel_variants(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")  # a test-local function: nothing to cache
    pair = _numba.kernel_pair(_total)
    values = np.arange(1000, dtype=np.float64)
    assert pair.serial(values) == pair.parallel(values) == values.sum()
    monkeypatch.setenv("REFIMPL_PARALLEL", "1")
    assert pair.default is pair.parallel


def _divide(a, b):
    return a / b


def test_fast_float_uses_only_reassociation_and_contraction_and_numpys_error_model(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")
    assert sorted(_numba.FAST_FLOAT_FLAGS) == ["contract", "reassoc"]  # never nnan / ninf
    assert _numba.kernel(fast_float=True)(_divide)(1.0, 0.0) == np.inf
    with pytest.raises(ZeroDivisionError):  # the default keeps Python's semantics
        _numba.kernel(_divide)(1.0, 0.0)
    pair = _numba.kernel_pair(fast_float=True)(_total)
    values = np.arange(1000, dtype=np.float64)
    assert pair.serial(values) == pair.parallel(values) == values.sum()


def _add(x, k):
    return x + k


def _calls_with_constants(add):
    def calls(x):
        n = 0  # a counter started at a constant: Literal[int](0) on inference's first pass
        for i in range(3):
            n = add(n, i)
        return add(x, 0) + add(x, 3) + n
    return calls


def test_a_kernel_called_with_constants_compiles_once_for_their_plain_types(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")  # test-local functions: nothing to cache
    add = _numba.kernel(_add)
    assert _numba.kernel(_calls_with_constants(add))(1) == 8
    assert [str(s) for s in add.signatures] == ["(int64, int64)"]
    # what plain Numba does, and the kernel decorator exists to avoid: a build per constant
    plain = numba.njit(_add)
    assert numba.njit(_calls_with_constants(plain))(1) == 8
    assert len(plain.signatures) == 4


_THREAD_IDS_MODULE = '''
import numpy as np
from numba import get_thread_id, prange
from refimpl._numba import kernel_pair

@kernel_pair
def thread_ids(out):
    for i in prange(out.shape[0]):
        acc = 0.0
        for j in range(20000):  # enough work per iteration that both threads take some
            acc += (i * j) % 7
        out[i] = get_thread_id() + 0 * acc
'''

_RUN = '''
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import threadmod
out = np.zeros(256, np.int64)
threadmod.thread_ids.parallel(out)
parallel = len(set(out.tolist()))
threadmod.thread_ids.serial(out)
print(parallel, len(set(out.tolist())))
'''


def test_serial_and_parallel_builds_stay_apart_in_the_on_disk_cache(tmp_path):
    (tmp_path / "threadmod.py").write_text(_THREAD_IDS_MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_NUM_THREADS": "2",
           "REFIMPL_NUMBA_CACHE": "1"}
    for run in ("compiles", "loads from the cache"):
        done = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path)], env=env, check=True,
                              capture_output=True, text=True)
        assert done.stdout.split() == ["2", "1"], run  # parallel on 2 threads, serial on 1
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").rglob("*.nbi")) == [
        "threadmod.thread_ids", "threadmod.thread_ids_parallel"]


def test_the_sources_fingerprint_follows_what_kernels_import_and_nothing_else(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "_numba.py").write_text("")
    helper = tmp_path / "pkg" / "helper.py"
    helper.write_text("X = 1\n")
    deeper = tmp_path / "pkg" / "deeper.py"
    deeper.write_text("Z = 1\n")
    helper.write_text("from refimpl.pkg.deeper import Z\nX = Z\n")
    (tmp_path / "kernel.py").write_text("from refimpl._numba import kernel\n"
                                        "from refimpl.pkg import helper\n")
    other = tmp_path / "cli.py"
    other.write_text("from refimpl import kernel\n")  # imports kernels, is not imported
    fingerprint = _numba.sources_fingerprint.__wrapped__
    before = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == before  # deterministic
    other.write_text("from refimpl import kernel\nW = 3\n")
    assert fingerprint(tmp_path) == before  # no compiled code can see it
    deeper.write_text("Z = 2\n")  # a constant a kernel sees through two imports
    assert fingerprint(tmp_path) != before


@pytest.mark.skipif(not _numba.cache_enabled(), reason="REFIMPL_NUMBA_CACHE is off")
def test_cached_kernels_are_stamped_with_the_fingerprint_of_refimpls_sources():
    from refimpl.kernels import _prefill, _tile

    for dispatcher in (_prefill.prefill_kernel.serial, _prefill.prefill_kernel.parallel,
                       _tile.new_scratch):
        stamp = dispatcher._cache._impl.locator.get_source_stamp()
        assert stamp[1] == _numba.sources_fingerprint()


_GONE_MODULE = '''
from refimpl._numba import kernel

class Gone:
    pass

@kernel
def double(x):
    return 2 * x
'''

_INDEX_RUN = '''
import sys
sys.path.insert(0, sys.argv[1])
import gonemod
print(gonemod.double(21))
'''


def test_an_index_naming_a_class_that_no_longer_exists_is_a_cache_miss(tmp_path):
    (tmp_path / "gonemod.py").write_text(_GONE_MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "REFIMPL_NUMBA_CACHE": "1"}
    run = [sys.executable, "-c", _INDEX_RUN, str(tmp_path)]
    assert subprocess.run(run, env=env, check=True, capture_output=True,
                          text=True).stdout.split() == ["42"]
    (index,) = (tmp_path / "cache").rglob("*.nbi")
    with index.open("rb") as f:  # Numba's layout: its version, then (stamp, overloads)
        version = pickle.load(f)
        stamp, _ = pickle.loads(f.read())
    sys.path.insert(0, str(tmp_path))
    try:
        import gonemod

        with index.open("wb") as f:
            pickle.dump(version, f)
            f.write(pickle.dumps((stamp, {gonemod.Gone(): "x"})))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gonemod", None)
    # (the kernel keeps its line: Numba names the index after it)
    (tmp_path / "gonemod.py").write_text(_GONE_MODULE.replace("class Gone:\n    pass\n",
                                                              "# Gone was here\n#\n"))
    done = subprocess.run(run, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # recompiled, not AttributeError
    assert done.stdout.split() == ["42"]


_SEEN_MODULE = '''
from refimpl._numba import kernel


@kernel
def add_one(x):
    return x + 1
'''

_SEEN_RUN = '''
import sys
sys.path.insert(0, sys.argv[1])
import seenmod
before = seenmod.add_one.has_cached_build()
seenmod.add_one(1)
print(before, seenmod.add_one.has_cached_build())
'''


@pytest.mark.parametrize(("cache", "runs"), [("1", ["False True", "True True"]),
                                             ("0", ["False False", "False False"])])
def test_a_cached_build_is_seen_from_the_next_process_on(tmp_path, cache, runs):
    (tmp_path / "seenmod.py").write_text(_SEEN_MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "REFIMPL_NUMBA_CACHE": cache}
    for want in runs:
        done = subprocess.run([sys.executable, "-c", _SEEN_RUN, str(tmp_path)], env=env,
                              check=True, capture_output=True, text=True)
        assert done.stdout.strip() == want


def _compiled_functions():
    """Every compiled function defined in refimpl (the CLI and attention kernels aside)."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import refimpl

    found = {}
    for info in pkgutil.walk_packages(refimpl.__path__, "refimpl."):
        if info.name.endswith("__main__") or info.name.startswith(("refimpl.cli",
                                                                    "refimpl.kernels")):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == info.name:
                found[value.py_func] = value
    return list(found.values())


def _callees(dispatcher):
    """The compiled functions `dispatcher`'s body calls, once per call site."""
    from numba.core import ir
    from numba.core.compiler import run_frontend
    from numba.core.registry import CPUDispatcher

    func_ir = run_frontend(dispatcher.py_func)
    values = {}
    for block in func_ir.blocks.values():
        for stmt in block.find_insts(ir.Assign):
            if isinstance(stmt.value, ir.Global | ir.FreeVar):
                values[stmt.target.name] = stmt.value.value
            elif isinstance(stmt.value, ir.Expr) and stmt.value.op == "getattr":
                owner = values.get(stmt.value.value.name)
                if owner is not None:
                    values[stmt.target.name] = getattr(owner, stmt.value.attr, None)
    sites = []
    for block in func_ir.blocks.values():
        for stmt in block.find_insts(ir.Assign):
            if isinstance(stmt.value, ir.Expr) and stmt.value.op == "call":
                callee = values.get(stmt.value.func.name)
                if isinstance(callee, CPUDispatcher):
                    sites.append(callee)
    return func_ir, sites


# Statements a helper may bring to each of several call sites (its own pasted helpers
# included); the largest pasted at several sites today is 128 (`prefill._frontier_push`)
MAX_PASTED_STATEMENTS = 250


def test_no_large_helper_is_pasted_at_several_call_sites():
    """A pasted helper (`inline_kernel`) is typed, lowered and optimised again at every site,
    its own pasted helpers included: the serving loop's cold compile was a fifth larger while
    the baselines' budgeted step and the gate's prompt rate were pasted five times over."""
    sizes, calls, sites = {}, {}, {}
    for dispatcher in _compiled_functions():
        func_ir, callees = _callees(dispatcher)
        sizes[dispatcher] = sum(len(block.body) for block in func_ir.blocks.values())
        calls[dispatcher] = callees
        for callee in callees:
            sites[callee] = sites.get(callee, 0) + 1

    def is_pasted(d):
        return d.targetoptions.get("inline") == "always"

    def pasted(d, seen=()):
        if d in seen:
            return 0
        return sizes.get(d, 0) + sum(pasted(c, (*seen, d)) for c in calls.get(d, ())
                                     if is_pasted(c))

    helpers = {d: pasted(d) for d, n in sites.items() if is_pasted(d) and n > 1}
    large = {d.py_func.__qualname__: (size, sites[d]) for d, size in helpers.items()
             if size > MAX_PASTED_STATEMENTS}
    assert len(sizes) > 100  # the walk found the package's compiled functions
    assert not large, large  # name: (statements pasted per site, sites)
