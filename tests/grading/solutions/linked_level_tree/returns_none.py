"""Wrong: links correctly but forgets to return the root."""

from node import Node


class Solution:
    """The reference walk, without the return."""

    def connect(self, root):
        """Link every level; return nothing."""
        level = root
        while level:
            tail = dummy = Node(0)
            node = level
            while node:
                for child in (node.left, node.right):
                    if child:
                        tail.next = tail = child
                node = node.next
            level = dummy.next
