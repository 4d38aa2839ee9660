"""Issue 16's checklist: every bad input it names (and more), what refimpl does with each.

Each case runs in a forked child with a time limit, so a hang shows as HANG instead of
stopping the list. Prints one line per case: its name and what came back (a `RefimplError`
subclass and its message, another exception, or the clean result). Not a test: the tests
under tests/ pin each behaviour; this is the survey they came from.

    NUMBA_CACHE_DIR=/tmp/nb REFIMPL_CACHE_DIR=/tmp/rc python tools/trust_checklist.py [filter]
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np

from refimpl.engine import simulate, warm_up
from refimpl.errors import RefimplError
from refimpl.kv.pool import PagePool
from refimpl.sched.request import Request

TIME_LIMIT_S = 60.0
CASES: dict[str, Callable[[], object]] = {}


def case(name: str):
    """Register a case."""
    def add(fn):
        CASES[name] = fn
        return fn
    return add


def req(i=0, arrival=0.0, prompt=8, new=4, **kw) -> Request:
    """A small request."""
    return Request(request_id=i, arrival_s=arrival, prompt_tokens=prompt, max_new_tokens=new,
                   **kw)


def served(requests, policy="vllm", **kw) -> str:
    """Simulate and say how each request ended."""
    result = simulate(requests, policy, **kw)
    r = result.requests
    return (f"ran: {len(result.steps)} steps; " + ", ".join(
        f"{i}:{s}/{why}/gen={g}" for i, s, why, g in zip(
            r.request_id.tolist(), r.status, r.reason, r.num_generated.tolist(), strict=True)))


for policy in ("vllm", "slo"):
    for label, kw in {"arrival nan": {"arrival": math.nan},
                      "arrival inf": {"arrival": math.inf},
                      "arrival -1": {"arrival": -1.0},
                      "arrival '0'": {"arrival": "0"},
                      "prompt -3": {"prompt": -3}, "prompt 0": {"prompt": 0},
                      "prompt 2.5": {"prompt": 2.5}, "prompt True": {"prompt": True},
                      "prompt 2**70": {"prompt": 2**70}, "prompt 2**40": {"prompt": 2**40},
                      "max_new 0": {"new": 0}, "max_new 10**12": {"new": 10**12},
                      "weight -1": {"weight": -1.0}, "weight nan": {"weight": math.nan},
                      "priority -1": {"priority": -1}, "priority 1.5": {"priority": 1.5},
                      "slo 'interactive' (a str)": {"slo": "interactive"},
                      "slo_class 3": {"slo_class": 3},
                      "request_id 'a'": {"i": "a"}, "request_id -1": {"i": -1},
                      "num_computed 5 on entry": {"num_computed": 5},
                      }.items():
        CASES[f"Request {label} [{policy}]"] = (
            lambda kw=kw, policy=policy: served([req(**kw)], policy))
    CASES[f"duplicate ids [{policy}]"] = lambda policy=policy: served([req(0), req(0)], policy)
    CASES[f"unsorted arrivals [{policy}]"] = lambda policy=policy: served(
        [req(0, 1.0), req(1, 0.0)], policy)
    CASES[f"empty request list [{policy}]"] = lambda policy=policy: served([], policy)


@case("same Request list to a second simulate")
def _reuse():
    reqs = [req(i, 0.01 * i, 64, 20) for i in range(5)]
    first = simulate(reqs, "vllm")
    second = simulate(reqs, "vllm")
    return (f"first {len(first.steps)} steps gen={first.requests.num_generated.tolist()}; "
            f"second {len(second.steps)} steps gen={second.requests.num_generated.tolist()}")


CASES["prompt 2**62 + max_new 2**62 (sum overflows)"] = lambda: served(
    [req(prompt=2**62, new=2**62)])
for label, params in {"kv_watermark=1.5": {"kv_watermark": 1.5}, "ladder='x'": {"ladder": "x"},
                      "cost_table='x'": {"cost_table": "x"}, "value_mode=7": {"value_mode": 7},
                      "max_batch=True": {"max_batch": True}}.items():
    CASES[f"policy_params slo {label}"] = lambda params=params: served(
        "azure-conv-like", "slo", num_requests=3, policy_params=params)


@case("Python policy that never computes (preempts forever)")
def _no_progress():
    from refimpl.sched import Policy, StepPlan

    class Stuck(Policy):
        def schedule(self, now_s):
            return StepPlan(preempt=(0,))

    return served([req()], Stuck)


@case("Python step model returning nan")
def _nan_step():
    from refimpl.config import HardwareSpec, ModelConfig
    from refimpl.costmodel.step import RooflineStepModel

    class NaNSteps(RooflineStepModel):
        def step_time_parts(self, *counts):
            return math.nan

    model = ModelConfig.preset("llama-3-8b")
    return served([req(0), req(1, 1.0)], step_model=NaNSteps(model, HardwareSpec.preset(
        "h100-sxm")))


CASES["workload [1, 2] (not Requests)"] = lambda: served([1, 2])
CASES["SLO(-1, 0.1)"] = lambda: __import__("refimpl").config.SLO(-1, 0.1)
for label, kw in {"page_size=0": {"page_size": 0}, "page_size=-1": {"page_size": -1},
                  "page_size=2.5": {"page_size": 2.5}, "seed=-1": {"seed": -1},
                  "seed='abc'": {"seed": "abc"}, "seed=1.5": {"seed": 1.5},
                  "num_requests=0": {"num_requests": 0}, "num_requests=-1": {"num_requests": -1},
                  "rate=0": {"rate": 0.0}, "rate=nan": {"rate": math.nan},
                  "rate=-1": {"rate": -1.0}, "rate=inf": {"rate": math.inf},
                  "admission='yes'": {"admission": "yes"}, "model='nope'": {"model": "nope"},
                  "hardware='nope'": {"hardware": "nope"}}.items():
    CASES[f"simulate {label}"] = lambda kw=kw: served(
        "azure-conv-like", **{"num_requests": 3, **kw})
CASES["simulate workload='nope'"] = lambda: served("nope")
CASES["simulate policy=123"] = lambda: served("azure-conv-like", 123, num_requests=3)
for policy in ("slo", "vllm", "sarathi", "prefill-first", "edf", "sarathi-edf"):
    for label, params in {"bogus=1": {"bogus": 1}, "max_num_seqs=0": {"max_num_seqs": 0},
                          "token_budget='x'": {"token_budget": "x"},
                          "token_budget=-5": {"token_budget": -5}}.items():
        CASES[f"policy_params {policy} {label}"] = (
            lambda policy=policy, params=params: served(
                "azure-conv-like", policy, num_requests=3, policy_params=params))
CASES["PagePool(0, 16)"] = lambda: PagePool(0, 16)
CASES["PagePool(8, -1)"] = lambda: PagePool(8, -1)
CASES["PagePool(8.0, 16)"] = lambda: PagePool(8.0, 16)


def _pool_with_one():
    pool = PagePool(64, 16)
    pool.allocate(7, 4)
    return pool


@case("append_batch int64 [2**32 + 5]")
def _append_wrap():
    pool = _pool_with_one()
    pool.append_batch(np.array([pool.slot(7)]), np.array([2**32 + 5], np.int64))
    return f"appended: length now {pool.length(7)}"


@case("append_batch scalar 2**32 + 5")
def _append_wrap_scalar():
    pool = _pool_with_one()
    pool.append_batch(np.array([pool.slot(7)]), 2**32 + 5)
    return f"appended: length now {pool.length(7)}"


@case("append_batch float [2.7]")
def _append_float():
    pool = _pool_with_one()
    pool.append_batch(np.array([pool.slot(7)]), np.array([2.7]))
    return f"appended: length now {pool.length(7)}"


@case("append(7, 2**32 + 5)")
def _append_one():
    pool = _pool_with_one()
    pool.append(7, 2**32 + 5)
    return f"appended: length now {pool.length(7)}"


def _attention(scale: float, which: str) -> str:
    from refimpl.kernels import decode_attention, prefill_attention, reference_attention

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 8, 16)).astype(np.float32) for _ in range(3))
    q, k = q * np.float32(scale), k * np.float32(scale)
    if which == "prefill":
        out = prefill_attention(q, k, v)
        ref = reference_attention(q, k, v)
    else:
        cache_k = k[0].transpose(1, 0, 2)[None].copy()  # (1 page, 8 tokens, 2 heads, 16)
        cache_v = v[0].transpose(1, 0, 2)[None].copy()
        out = decode_attention(q[:, :, -1], cache_k, cache_v, np.array([[0]]), np.array([8]))
        ref = reference_attention(q[:, :, -1:], k, v)[:, :, 0]
    return (f"kernel finite={bool(np.isfinite(out).all())}, oracle finite="
            f"{bool(np.isfinite(ref).all())}, max err={float(np.nanmax(np.abs(out - ref))):.3g}")


CASES["prefill q,k ~1e19"] = lambda: _attention(1e19, "prefill")
CASES["decode q,k ~1e19"] = lambda: _attention(1e19, "decode")
CASES["prefill q,k ~1e3 (control)"] = lambda: _attention(1e3, "prefill")


def cli(*argv: str) -> str:
    """Run `refimpl ...` and report the exit status and the last line of stderr."""
    done = subprocess.run([sys.executable, "-m", "refimpl", *argv], capture_output=True,
                          text=True, timeout=TIME_LIMIT_S, check=False)
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    traceback = "Traceback" in done.stderr
    return f"exit {done.returncode}{' TRACEBACK' if traceback else ''}: {tail[:160]}"


SMALL = ("--num-requests", "3")
read_only = tempfile.mkdtemp()
os.chmod(read_only, 0o500)
a_file = tempfile.mkstemp()[1]
CASES["cli simulate --seed -1"] = lambda: cli("simulate", *SMALL, "--seed", "-1")
CASES["cli simulate --json /"] = lambda: cli("simulate", *SMALL, "--json", "/")
CASES["cli simulate --json /nonexistent/x.json"] = lambda: cli(
    "simulate", *SMALL, "--json", "/nonexistent/x.json")
CASES["cli simulate --json read-only/x.json"] = lambda: cli(
    "simulate", *SMALL, "--json", f"{read_only}/x.json")
CASES["cli simulate --json a-file/x.json"] = lambda: cli(
    "simulate", *SMALL, "--json", f"{a_file}/x.json")
CASES["cli simulate --json /sys/x.json (read-only fs)"] = lambda: cli(
    "simulate", *SMALL, "--json", "/sys/x.json")
CASES["cli simulate --out /sys/plots"] = lambda: cli("simulate", *SMALL, "--out", "/sys/plots")
CASES["cli demo --out /sys/plots"] = lambda: cli("demo", *SMALL, "--out", "/sys/plots")
CASES["cli bench kv --json /sys/x.json"] = lambda: cli(
    "bench", "kv", "--quick", "--json", "/sys/x.json")
CASES["cli simulate --out read-only"] = lambda: cli("simulate", *SMALL, "--out", read_only)
CASES["cli simulate --out a-file"] = lambda: cli("simulate", *SMALL, "--out", a_file)
CASES["cli simulate --rate nan"] = lambda: cli("simulate", *SMALL, "--rate", "nan")
CASES["cli simulate --num-requests 0"] = lambda: cli("simulate", "--num-requests", "0")
CASES["cli demo --out read-only"] = lambda: cli("demo", *SMALL, "--out", read_only)
CASES["cli demo --json /"] = lambda: cli("demo", *SMALL, "--json", "/")
CASES["cli bench kv --json /"] = lambda: cli("bench", "kv", "--quick", "--json", "/")
CASES["cli bench kv --json read-only/x"] = lambda: cli(
    "bench", "kv", "--quick", "--json", f"{read_only}/x.json")


def _child(fn, conn) -> None:
    try:
        conn.send(f"ok: {fn()}")
    except RefimplError as error:
        conn.send(f"{type(error).__name__}: {error}")
    except BaseException as error:  # the survey records whatever happens
        conn.send(f"UNCAUGHT {type(error).__name__}: {str(error)[:200]}")


def main(pattern: str = "") -> None:
    """Run every case whose name contains `pattern`."""
    warm_up()
    for name, fn in CASES.items():
        if pattern not in name:
            continue
        parent, child = mp.Pipe()
        process = mp.get_context("fork").Process(target=_child, args=(fn, child))
        process.start()
        if parent.poll(TIME_LIMIT_S):
            outcome = parent.recv()
        else:
            outcome = f"HANG (over {TIME_LIMIT_S:.0f} s)"
        process.kill()
        process.join()
        print(f"{name:<48} {outcome}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
