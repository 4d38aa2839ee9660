"""Wrong: treats each level as a circular list, linking its last node back to its first
(its own walk stops when it comes round again, so it finishes; the links form cycles)."""

from node import Node


class Solution:
    """The reference walk, closing every level below the root into a ring."""

    def connect(self, root):
        """Link every level into a ring."""
        level = root
        while level:
            tail = dummy = Node(0)
            node = level
            while True:
                for child in (node.left, node.right):
                    if child:
                        tail.next = tail = child
                node = node.next
                if node is None or node is level:
                    break
            if tail is not dummy:
                tail.next = dummy.next  # the bug: the last node points back to the first
            level = dummy.next
        return root
