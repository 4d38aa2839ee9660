"""Your solution to the page-allocator exercise: fill in `PageAllocator`."""

from __future__ import annotations


class PageAllocator:
    """A pool of KV-cache pages 0 .. num_pages - 1 with reference counts.

    Free pages wait in a queue, first 0, 1, 2, ... in order. `allocate` takes pages from the
    front of the queue; a page whose count drops to 0 rejoins the queue at the back.
    """

    def __init__(self, num_pages: int) -> None:
        """An empty pool of `num_pages` free pages (ValueError naming num_pages if < 1)."""
        raise NotImplementedError("PageAllocator: not written yet")

    @property
    def num_free(self) -> int:
        """Pages in the free queue."""
        raise NotImplementedError("num_free: not written yet")

    def refcount(self, page: int) -> int:
        """Holders of `page` (0 if it is free)."""
        raise NotImplementedError("refcount: not written yet")

    def allocate(self, num: int) -> list[int] | None:
        """`num` pages from the front of the free queue, each with count 1; None, taking
        nothing, if fewer are free. ValueError naming num if num < 0."""
        raise NotImplementedError("allocate: not written yet")

    def share(self, pages: list[int]) -> None:
        """One more holder for each of `pages` (all must be allocated, else ValueError)."""
        raise NotImplementedError("share: not written yet")

    def free(self, pages: list[int]) -> None:
        """One holder fewer for each of `pages`, in order; a page reaching 0 goes to the back
        of the free queue. ValueError, changing nothing, if any page is not allocated."""
        raise NotImplementedError("free: not written yet")
