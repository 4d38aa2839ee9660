"""Your solution to the linked-level tree exercise: fill in `Solution.connect`."""

from __future__ import annotations

from node import Node


class Solution:
    """Links every node of a binary tree to its right neighbour on the same level."""

    def connect(self, root: Node | None) -> Node | None:
        """Set each node's `next` to the node on its right in the same level (or None).

        Work in place on the given nodes, use O(1) extra space (no queue, no recursion),
        and return `root`.
        """
        raise NotImplementedError("connect: not written yet")
