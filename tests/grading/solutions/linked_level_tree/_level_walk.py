"""The correct O(1)-space level walk, shared by the wrong solutions whose bug lies elsewhere.

Solutions may import modules beside their own file (the grader puts that folder on the path).
"""

from node import Node


def link_levels(root):
    """Link every level of the tree under `root` through `next`, using the level above."""
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
