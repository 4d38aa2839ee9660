"""Reference solution: a deque of free page ids and a list of counts, as in vLLM's block pool.

The deque gives O(1) at both ends, so allocate and free cost O(pages asked for), never
O(pool size). Every check runs before any change, so a refused call leaves the pool as it was.
"""

from __future__ import annotations

from collections import Counter, deque


class PageAllocator:
    """A pool of KV-cache pages 0 .. num_pages - 1 with reference counts."""

    def __init__(self, num_pages: int) -> None:
        """An empty pool of `num_pages` free pages."""
        if num_pages < 1:
            raise ValueError(f"num_pages={num_pages!r}: must be at least 1")
        self._free = deque(range(num_pages))  # front: handed out next; back: freed last
        self._counts = [0] * num_pages  # holders per page id

    @property
    def num_free(self) -> int:
        """Pages in the free queue."""
        return len(self._free)

    def refcount(self, page: int) -> int:
        """Holders of `page` (0 if it is free)."""
        return self._counts[page]

    def allocate(self, num: int) -> list[int] | None:
        """`num` pages from the front of the free queue, or None (taking nothing)."""
        if num < 0:
            raise ValueError(f"num={num!r}: must be at least 0")
        if num > len(self._free):
            return None
        pages = [self._free.popleft() for _ in range(num)]
        for page in pages:
            self._counts[page] = 1
        return pages

    def _check_held(self, pages: list[int], times: Counter[int]) -> None:
        for page, count in times.items():
            if not 0 <= page < len(self._counts) or self._counts[page] < count:
                raise ValueError(f"page={page!r}: not allocated (or freed more often than held)")

    def share(self, pages: list[int]) -> None:
        """One more holder for each of `pages`."""
        self._check_held(pages, Counter({page: 1 for page in pages}))
        for page in pages:
            self._counts[page] += 1

    def free(self, pages: list[int]) -> None:
        """One holder fewer for each of `pages`; pages reaching 0 go to the back of the queue."""
        self._check_held(pages, Counter(pages))
        for page in pages:
            self._counts[page] -= 1
            if self._counts[page] == 0:
                self._free.append(page)
