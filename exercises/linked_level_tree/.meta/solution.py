"""Reference solution, as in the seed: walk each level through the `next` links already set
on it and thread the level below behind a dummy head, so no queue and O(1) extra space."""

from __future__ import annotations

from node import Node


class Solution:
    """Links every node of a binary tree to its right neighbour on the same level."""

    def connect(self, root: Node | None) -> Node | None:
        """Set each node's `next` to the node on its right in the same level (or None)."""
        level = root  # leftmost node of the level being walked; its `next` chain is complete
        while level is not None:
            dummy = Node(0)  # sits before the first node of the level below
            tail = dummy  # last node linked so far on the level below
            node = level
            while node is not None:
                for child in (node.left, node.right):
                    if child is not None:
                        tail.next = child
                        tail = child
                node = node.next
            level = dummy.next
        return root
