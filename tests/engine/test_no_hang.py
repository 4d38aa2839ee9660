"""No input hangs a run: each case runs in a child process with a time limit on the call.

A compiled loop that spins holds the interpreter, so a thread could not be timed out; a
child process can. The loop is compiled (or loaded) here first, so the child only loads it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from refimpl.engine import warm_up
from refimpl.engine.loop import MAX_IDLE_STEPS

TIME_LIMIT_S = 120  # loading the cached loop takes seconds; a hang would take forever

CASES = {
    "a policy that only preempts": (
        "class Stuck(Policy):\n"
        "    def schedule(self, now_s):\n"
        "        return StepPlan(preempt=(0,))\n"
        "simulate([Request(0, 0.0, 8, 4)], Stuck)",
        f"SchedulingError: plan='steps': policy 'custom''s plan made no progress: it computed "
        f"no token and ended no request in {MAX_IDLE_STEPS} steps in a row"),
    "a step model that returns NaN": (
        "class NaNSteps(RooflineStepModel):\n"
        "    def step_time_parts(self, *counts):\n"
        "        return float('nan')\n"
        "model = ModelConfig.preset('llama-3-8b')\n"
        "steps = NaNSteps(model, HardwareSpec.preset('h100-sxm'))\n"
        "simulate([Request(0, 0.0, 8, 4), Request(1, 5.0, 8, 4)], 'vllm', step_model=steps)",
        "ConfigError: step_model='NaNSteps': returned a step time of nan s"),
    "a NaN arrival": (
        "simulate([Request(0, float('nan'), 8, 4)], 'slo')",
        "ConfigError: request 0: arrival_s=nan: must be a finite time >= 0"),
}


def _run_in_child(body: str) -> str:
    """Run `body` in a fresh interpreter within the time limit; returns its last line."""
    script = textwrap.dedent("""
        from refimpl import simulate
        from refimpl.config import HardwareSpec, ModelConfig
        from refimpl.costmodel.step import RooflineStepModel
        from refimpl.errors import RefimplError
        from refimpl.sched import Policy, Request, StepPlan
        try:
        {body}
        except RefimplError as error:
            print(f"{{type(error).__name__}}: {{error}}")
        else:
            print("no error")
    """).format(body=textwrap.indent(body, "    "))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=TIME_LIMIT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module", autouse=True)
def _loop_compiled():
    warm_up()


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_a_run_that_could_never_end_is_refused_within_a_time_limit(name):
    body, expected = CASES[name]
    assert _run_in_child(body).startswith(expected)
