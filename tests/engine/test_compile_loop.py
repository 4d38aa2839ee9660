"""Compiling the serving loop ahead: the calls compiled before it are the calls it makes, and
a cold machine with two cores shares the work with a helper process that never holds it up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numba
import pytest
from numba.core import compiler, ir
from numba.core.compiler import _EarlyPipelineCompletion
from numba.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.core.registry import cpu_target
from numba.core.typed_passes import NopythonTypeInference

from refimpl.engine import compile_loop
from refimpl.engine.compile_loop import compile_calls, warm_up
from refimpl.engine.loop import ahead_calls, serve

pytestmark = pytest.mark.numba


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    """Ends the pipeline once the function is typed (nothing lowered)."""

    _name = "stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _EarlyPipelineCompletion(state)


class _TypeOnly(compiler.CompilerBase):
    """Numba's nopython pipeline up to type inference."""

    def define_pipelines(self):
        full = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        typing = PassManager("type only")
        for pass_class, description in full.passes:
            typing.add_pass(pass_class, description)
            if pass_class is NopythonTypeInference:
                break
        typing.add_pass(_StopAfterTyping, "stop")
        typing.finalize()
        return [typing]


def _call_types(dispatcher, signature) -> dict:
    """The argument types of each call `dispatcher` makes to a compiled function, typed by
    Numba for `signature` as its compiler would (its callees compile or load on the way)."""
    flags = compiler.Flags()
    dispatcher._compiler.targetdescr.options.parse_as_flags(flags,
                                                            dispatcher._compiler.targetoptions)
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    state = _TypeOnly(cpu_target.typing_context, cpu_target.target_context, None, signature,
                      None, flags, {}).compile_extra(dispatcher.py_func)
    calls: dict = {}
    for expr, call in state.calltypes.items():
        if not (isinstance(expr, ir.Expr) and expr.op == "call"):
            continue
        callee = state.typemap[expr.func.name]
        if isinstance(callee, numba.types.Dispatcher):
            calls.setdefault(callee.dispatcher, []).append(tuple(call.args))
    return calls


def _loop_arguments() -> tuple:
    engine, requests = compile_loop._warm_up_run()
    return engine.loop_arguments(requests)


def test_the_calls_compiled_ahead_get_the_types_the_loop_passes_them():
    warm_up()  # the callees are built (or loaded), so typing the loop takes a second
    arguments = _loop_arguments()
    signature = tuple(numba.typeof(a) for a in arguments)
    assert signature in serve.signatures  # what loop_arguments gives is what a run passes
    calls = _call_types(serve, signature)
    for name, (function, call_arguments) in ahead_calls(*arguments).items():
        want = tuple(numba.typeof(a) for a in call_arguments)
        assert calls.get(function), f"the loop never calls {name}"
        assert all(types == want for types in calls[function]), name


def test_the_split_covers_each_call_once():
    names = set(ahead_calls(*_loop_arguments()))
    assert set(compile_loop.HELPER_CALLS) | set(compile_loop.OWN_CALLS) == names
    assert not set(compile_loop.HELPER_CALLS) & set(compile_loop.OWN_CALLS)


def test_the_helper_compiles_its_calls_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    helper = compile_loop._start_helper(("update",))
    assert helper.wait(timeout=600) == 0
    assert list(tmp_path.rglob("queues.update-*.nbi"))  # refimpl.sched.queues.update


@pytest.mark.parametrize(("cores", "cache", "cached", "helped"), [
    (2, True, False, True), (1, True, False, False), (2, False, False, False),
    (2, True, True, False)])
def test_a_helper_only_with_a_second_core_a_cache_and_no_loop_in_it(
        monkeypatch, cores, cache, cached, helped):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(type(serve), "caches_on_disk", lambda self: cache)
    monkeypatch.setattr(type(serve), "has_cached_build", lambda self: cache and cached)
    assert compile_loop._worth_a_helper() is helped
    monkeypatch.setattr(sys, "executable", "")  # an embedded interpreter: nothing to start
    assert compile_loop._worth_a_helper() is False


def test_a_helper_that_cannot_start_leaves_the_whole_compile_here(monkeypatch):
    def no_helper():
        raise OSError("no interpreter to start")

    compile_calls(compile_loop.OWN_CALLS)  # built already: the test looks at the fallback only
    monkeypatch.setattr(compile_loop, "loop_ready", lambda: False)
    monkeypatch.setattr(compile_loop, "_worth_a_helper", lambda: True)
    monkeypatch.setattr(compile_loop, "_start_helper", no_helper)
    assert warm_up() > 0
    assert serve.signatures


@pytest.mark.parametrize(("helper_code", "returncode"), [
    ("raise SystemExit(3)", 3), ("import time; time.sleep(120)", -signal.SIGKILL)])
def test_a_helper_that_fails_or_hangs_costs_the_loop_nothing(monkeypatch, helper_code,
                                                             returncode):
    started = []

    def start_helper():
        started.append(subprocess.Popen([sys.executable, "-c", helper_code]))
        return started[0]

    compile_calls(compile_loop.OWN_CALLS)  # built already: the test times only the helper
    monkeypatch.setattr(compile_loop, "loop_ready", lambda: False)
    monkeypatch.setattr(compile_loop, "_worth_a_helper", lambda: True)
    monkeypatch.setattr(compile_loop, "_start_helper", start_helper)
    monkeypatch.setattr(compile_loop, "HELPER_TIMEOUT_S", 2.0)
    assert warm_up() > 0
    assert serve.signatures  # the loop is built
    assert started[0].returncode == returncode  # ended, or stopped at the timeout: not left
