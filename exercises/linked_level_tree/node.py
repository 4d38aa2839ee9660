"""The tree node of the linked-level tree exercise: `val`, `left`, `right` and `next`.

Tests, the starter and solutions all import it as `from node import Node` (pytest puts this
folder on `sys.path`, both when run in place and under `refimpl grade`). `__slots__` keeps the
100,000-node trees of the space test small and stops stray attributes such as `node.seen`.
"""

from __future__ import annotations


class Node:
    """A binary-tree node with a pointer to its right neighbour on the same level."""

    __slots__ = ("left", "next", "right", "val")

    def __init__(
        self,
        val: int = 0,
        left: Node | None = None,
        right: Node | None = None,
        next: Node | None = None,  # shadows the builtin: the name the problem uses
    ) -> None:
        self.val = val
        self.left = left
        self.right = right
        self.next = next

    def __repr__(self) -> str:
        return f"Node({self.val})"
