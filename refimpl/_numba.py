"""The one place where refimpl talks to Numba: compile options and environment switches.

Every kernel module decorates its kernels with `kernel` (hot helpers with `inline_kernel`, or a
serial/parallel pair with `kernel_pair`) instead of calling `numba.njit` itself, so the policy
below holds everywhere:

- `nopython` always; `fastmath` off, because online softmax relies on `-inf` and NaN
  semantics that `nnan`/`ninf` would break. Float kernels that need their sums vectorized opt
  in with `fast_float=True`: only the `reassoc` and `contract` flags (a dot product may be
  summed in SIMD lanes and use FMA; infinities and NaN keep their meaning) and NumPy's error
  model (a float division by zero gives inf instead of a Python exception check in the loop);
- cached on disk, so a kernel compiles once per machine and later processes load it in
  milliseconds; `REFIMPL_NUMBA_CACHE=0` turns the cache off. Numba checks a cached kernel only
  against its own source file, so an edit to a helper it inlines from another file (the tile
  step, the exp) would keep serving the old machine code: refimpl's kernels are cached with a
  fingerprint of every source file of the package as well, and any edit recompiles them. Where
  the cache lives is Numba's own `NUMBA_CACHE_DIR` (the test suite and CI point it at a
  folder outside the repository);
- serial by default, for reproducible timings and results. `REFIMPL_PARALLEL=1` makes
  `kernel_pair(...).default` the parallel variant; both variants are compiled from the same
  Python function (its `prange` loops run as plain `range` in the serial one). The number of
  threads is Numba's `NUMBA_NUM_THREADS` or `numba.set_num_threads`.

Decorating compiles nothing: Numba compiles a kernel on its first call, and `import numba`
itself happens only when a kernel module is imported, never on `import refimpl`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numba
from numba.core import caching
from numba.core import types as nb_types
from numba.core.registry import CPUDispatcher

_PACKAGE_ROOT = Path(__file__).resolve().parent

__all__ = [
    "FAST_FLOAT_FLAGS",
    "KernelDispatcher",
    "KernelPair",
    "cache_enabled",
    "inline_kernel",
    "kernel",
    "kernel_pair",
    "parallel_default",
    "sources_fingerprint",
]


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    from refimpl.errors import ConfigError

    raise ConfigError(name, raw, "not a boolean switch", choices=("0", "1"))


def cache_enabled() -> bool:
    """Whether compiled kernels are cached on disk (`REFIMPL_NUMBA_CACHE`, default on)."""
    return _flag("REFIMPL_NUMBA_CACHE", True)


def parallel_default() -> bool:
    """Whether `KernelPair.default` is the parallel variant (`REFIMPL_PARALLEL`, default off)."""
    return _flag("REFIMPL_PARALLEL", False)


def _options(fast_float: bool, calls_python: bool = False) -> dict[str, Any]:
    """Numba options shared by every kernel (see the module docstring); caching is added by
    `_cached`. A kernel that calls back into Python (`objmode`) keeps the GIL it needs."""
    options: dict[str, Any] = {"nogil": not calls_python, "fastmath": False}
    if fast_float:
        options.update(fastmath=set(FAST_FLOAT_FLAGS), error_model="numpy")
    return options


@functools.cache
def sources_fingerprint(root: Path = _PACKAGE_ROOT) -> str:
    """SHA-256 of every source file compiled code can see: each file that defines kernels
    (imports `refimpl._numba`) and every refimpl module it imports, transitively."""
    digest = hashlib.sha256()
    for path in sorted(_compiled_sources(root)):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _compiled_sources(root: Path) -> set[Path]:
    """The files of `sources_fingerprint`: an edit elsewhere (the CLI, a Python policy, the
    docs' examples) changes no machine code, so it recompiles nothing."""
    imports = {path: _refimpl_imports(root, path) for path in root.rglob("*.py")}
    numba_file = root / "_numba.py"
    todo = [path for path, names in imports.items() if numba_file in names]
    seen = set(todo)
    while todo:
        for found in imports.get(todo.pop(), ()):
            if found not in seen:
                seen.add(found)
                todo.append(found)
    return seen


def _refimpl_imports(root: Path, path: Path) -> set[Path]:
    """The files of the `refimpl.*` modules (and their packages) that `path` imports."""
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    files = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "refimpl":
            continue
        for k in range(1, len(parts) + 1):  # the package's __init__ files run too
            base = root.joinpath(*parts[1:k])
            files.update(f for f in (base / "__init__.py", base.with_suffix(".py"))
                         if f.is_file())
    return files


def _fingerprinted(locator: type) -> type:
    """A Numba cache locator whose source stamp also carries `sources_fingerprint()`."""
    return type(f"Fingerprinted{locator.__name__}", (locator,), {
        "get_source_stamp": lambda self: (locator.get_source_stamp(self), sources_fingerprint()),
    })


class _CacheImpl(caching.CompileResultCacheImpl):
    _locator_classes: ClassVar[list[type]] = [
        _fingerprinted(c) for c in caching.CompileResultCacheImpl._locator_classes]


class _TolerantIndex(caching.IndexDataCacheFile):
    """An index that reads as empty (a cache miss: the kernel recompiles) when it cannot be
    unpickled: Numba reads the pickled signatures before it compares source stamps, so an
    index written by older sources that named a class since renamed would raise instead."""

    def _load_index(self):
        try:
            return super()._load_index()
        except (AttributeError, ImportError, EOFError, pickle.UnpicklingError):
            return {}


class _FunctionCache(caching.FunctionCache):
    _impl_class = _CacheImpl

    def __init__(self, py_func) -> None:
        super().__init__(py_func)
        self._cache_file = _TolerantIndex(
            cache_path=self._cache_path, filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp())


def _cached(dispatcher):
    """`dispatcher` with refimpl's on-disk cache, unless `REFIMPL_NUMBA_CACHE` is off.

    The same as Numba's `cache=True` (`Dispatcher.enable_caching`), with the locators above.
    """
    if cache_enabled():
        dispatcher._cache = _FunctionCache(dispatcher.py_func)
    return dispatcher


# The only fast-math flags refimpl uses: reassociation (SIMD sums) and FMA contraction.
FAST_FLOAT_FLAGS = frozenset({"reassoc", "contract"})


class KernelDispatcher(CPUDispatcher):
    """Numba's CPU dispatcher, compiling a kernel called from compiled code once per argument
    types, not once more per constant passed.

    Numba types a constant argument (`end_request(..., REJECTED, ...)`) as its value,
    `Literal[int](4)`, and a counter started at 0 before a loop (`next_arrival` in the serving
    loop) as `Literal[int](0)` on type inference's first pass, and compiles the callee for
    each: a cold serving loop compiled `assess`, `_choose_prefill`, the gate's `arrive` and
    `decide` twice each and `end_request` eight times. The literals give Numba nothing our
    kernels use, so the callee is typed by the plain types (`int64`) alone.
    """

    def get_call_template(self, args, kws):
        """Numba's template for the call, for `args` and `kws` without their literal values."""
        return super().get_call_template(
            tuple(nb_types.unliteral(a) for a in args),
            {name: nb_types.unliteral(a) for name, a in kws.items()})

    def caches_on_disk(self) -> bool:
        """Whether this kernel's builds are kept in the on-disk cache."""
        return isinstance(self._cache, _FunctionCache)

    def has_cached_build(self) -> bool:
        """Whether the on-disk cache holds a build of this kernel for today's sources (a stale
        or unreadable index holds none)."""
        return self.caches_on_disk() and bool(self._cache._cache_file._load_index())


def kernel(fn: Callable[..., Any] | None = None, *, fast_float: bool = False,
           calls_python: bool = False):
    """Compile `fn` lazily as a serial, cached, nopython kernel (`@kernel`,
    `@kernel(fast_float=True)`, or `@kernel(calls_python=True)` for one with `objmode`
    blocks, or calling such a kernel)."""
    if fn is None:
        return functools.partial(kernel, fast_float=fast_float, calls_python=calls_python)
    options = {"nopython": True, "boundscheck": None, **_options(fast_float, calls_python)}
    return _cached(KernelDispatcher(py_func=fn, locals={}, targetoptions=options))


def inline_kernel(fn: Callable[..., Any] | None = None, *, fast_float: bool = False):
    """Compile `fn` as a helper that Numba pastes into every kernel calling it.

    A call from one compiled function to another updates the reference count of every array
    argument, which costs more than a small helper's work; `inline="always"` inlines the body at
    Numba's IR level, so hot helpers cost nothing and kernels can still be cut into small
    functions. Called from Python, it runs as an ordinary kernel. The flags a helper runs with
    are those of the kernel it is pasted into.

    Only for small helpers: Numba types and lowers a pasted body again at every call site, its
    own pasted helpers included, so a large helper pasted at several sites multiplies a cold
    compile (the serving loop's planners and admission rates were a fifth of it,
    docs/performance.md); such helpers, run once a tick or once a decision, are `kernel` calls.
    """
    if fn is None:
        return functools.partial(inline_kernel, fast_float=fast_float)
    return _cached(numba.njit(inline="always", **_options(fast_float))(fn))


@dataclass(frozen=True)
class KernelPair:
    """The serial and parallel builds of one kernel function."""

    serial: Callable[..., Any]
    parallel: Callable[..., Any]

    @property
    def default(self) -> Callable[..., Any]:
        """The variant selected by `REFIMPL_PARALLEL`."""
        return self.parallel if parallel_default() else self.serial


def kernel_pair(fn: Callable[..., Any] | None = None, *, fast_float: bool = False):
    """Compile `fn` lazily twice: serially and with `prange` loops run in parallel.

    Both builds are cached, each under its own name: Numba keys its on-disk cache by the
    function's module, qualified name and signature, not by `parallel`, so two builds of one
    function would share an entry and a process that loaded the parallel kernel from the cache
    could get the serial one (it did: `tests/test_numba_policy.py` checks they stay apart).
    """
    if fn is None:
        return functools.partial(kernel_pair, fast_float=fast_float)
    options = _options(fast_float)
    return KernelPair(
        serial=_cached(numba.njit(**options)(fn)),
        parallel=_cached(numba.njit(parallel=True, **options)(_renamed(fn, "parallel"))),
    )


def _renamed(fn: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    """The same function (code, globals, defaults, closure) under a distinct qualified name."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, f"{fn.__name__}_{suffix}",
                              fn.__defaults__, fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}_{suffix}"
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy
