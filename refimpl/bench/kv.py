"""`refimpl bench kv`: the page pool beside a straightforward pure-Python allocator.

The baseline is what one writes first: a `deque` free list, a list of page ids per request and
a refcount list, one Python call per request. Both are timed in the same process on the same
operations: allocate-and-free cycles of whole requests (pages per second), and the append of
one decode step for a batch of 256 requests.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import numpy as np

from refimpl.bench._report import publish
from refimpl.bench._timing import best_seconds
from refimpl.kv import PagePool

PAGE_SIZE = 16
BATCH = 256
PROMPT_TOKENS = 1000  # 63 pages per request: a mid-sized prompt


class PythonPool:
    """The baseline: deque free list, lists as page tables, one request at a time."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.free = deque(range(num_pages))
        self.refcount = [0] * num_pages
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def allocate(self, request_id: int, num_tokens: int) -> None:
        """Take the pages of a new request."""
        need = -(-num_tokens // self.page_size)
        if need > len(self.free):
            raise MemoryError(request_id)
        pages = [self.free.popleft() for _ in range(need)]
        for page in pages:
            self.refcount[page] = 1
        self.tables[request_id] = pages
        self.lengths[request_id] = num_tokens

    def append(self, request_id: int) -> None:
        """Grow a request by one token, taking a page when the last one is full."""
        if self.lengths[request_id] % self.page_size == 0:
            if not self.free:
                raise MemoryError(request_id)
            page = self.free.popleft()
            self.refcount[page] = 1
            self.tables[request_id].append(page)
        self.lengths[request_id] += 1

    def release(self, request_id: int) -> None:
        """Return a request's pages."""
        for page in reversed(self.tables.pop(request_id)):
            self.refcount[page] -= 1
            if self.refcount[page] == 0:
                self.free.appendleft(page)
        del self.lengths[request_id]


def _cycle_python_api(pool, num_requests: int) -> None:
    for request_id in range(num_requests):
        pool.allocate(request_id, PROMPT_TOKENS)
    for request_id in range(num_requests):
        (pool.release if isinstance(pool, PythonPool) else pool.free)(request_id)


def _cycle_batch_api(pool: PagePool, num_requests: int) -> None:
    for request_id in range(num_requests):
        pool.allocate(request_id, 0)
    slots = np.array([pool.slot(r) for r in range(num_requests)], dtype=np.int32)
    pool.append_batch(slots, PROMPT_TOKENS)
    pool.free_batch(range(num_requests))


def _decode_steps(pool, steps: int, repeats: int = 3) -> float:
    """Seconds per decode-step append of one token to each of BATCH requests (best run)."""
    best = float("inf")
    for _ in range(repeats + 1):  # the first run warms up (compilation, page faults)
        for request_id in range(BATCH):
            pool.allocate(request_id, PROMPT_TOKENS)
        if isinstance(pool, PagePool):
            slots = np.array([pool.slot(r) for r in range(BATCH)], dtype=np.int32)
            start = time.perf_counter()
            for _ in range(steps):
                pool.append_batch(slots, 1)
            elapsed = time.perf_counter() - start
        else:
            start = time.perf_counter()
            for _ in range(steps):
                for request_id in range(BATCH):
                    pool.append(request_id)
            elapsed = time.perf_counter() - start
        best = min(best, elapsed / steps)
        for request_id in range(BATCH):
            (pool.release if isinstance(pool, PythonPool) else pool.free)(request_id)
    return best


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Measure, print and optionally write the figures; `num_threads` is unused (serial)."""
    del num_threads  # the pool is serial by design: one scheduler thread owns it
    num_requests = 64 if quick else 256
    steps = 64 if quick else 512
    pages_per_cycle = num_requests * -(-PROMPT_TOKENS // PAGE_SIZE)
    num_pages = BATCH * (-(-(PROMPT_TOKENS + steps) // PAGE_SIZE)) + 1
    ours, baseline = PagePool(num_pages, PAGE_SIZE), PythonPool(num_pages, PAGE_SIZE)
    cycle = {
        "python_api": best_seconds(lambda: _cycle_python_api(ours, num_requests), 5),
        "batch_api": best_seconds(lambda: _cycle_batch_api(ours, num_requests), 5),
        "pure_python": best_seconds(lambda: _cycle_python_api(baseline, num_requests), 5),
    }
    decode = {"ours_s": _decode_steps(ours, steps), "pure_python_s": _decode_steps(baseline, steps)}
    report = {
        "page_size": PAGE_SIZE,
        "pages_per_s": {name: pages_per_cycle / s for name, s in cycle.items()},
        "decode_append_batch": BATCH,
        "decode_append_s": decode["ours_s"],
        "decode_append_pure_python_s": decode["pure_python_s"],
        "decode_append_speedup": decode["pure_python_s"] / max(decode["ours_s"], 1e-12),
    }
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The figures as a text table."""
    rates = report["pages_per_s"]
    print(f"page pool, pages of {report['page_size']} tokens "
          f"(allocate + free of {PROMPT_TOKENS}-token requests)")
    print(f"  {'API':<28}{'Mpages/s':>10}{'vs pure Python':>16}")
    for name, label in (("python_api", "refimpl, one call per request"),
                        ("batch_api", "refimpl, batch calls"),
                        ("pure_python", "pure Python (deque, lists)")):
        ratio = rates[name] / rates["pure_python"]
        print(f"  {label:<28}{rates[name] / 1e6:>10.2f}{ratio:>15.1f}x")
    print(f"\ndecode step: append one token to each of {report['decode_append_batch']} requests")
    print(f"  refimpl append_batch   {report['decode_append_s'] * 1e6:8.1f} us")
    print(f"  pure Python loop       {report['decode_append_pure_python_s'] * 1e6:8.1f} us")
    print(f"  speed-up               {report['decode_append_speedup']:8.1f}x  (goal: <= 20 us, "
          ">= 10x)")
