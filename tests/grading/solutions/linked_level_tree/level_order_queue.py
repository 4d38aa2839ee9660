"""Wrong: correct links, but a breadth-first queue holds a whole level (O(width) space)."""

from collections import deque


class Solution:
    """Level-order walk with a queue."""

    def connect(self, root):
        """Link each level from a queue of its nodes."""
        queue = deque([root] if root else [])
        while queue:
            previous = None
            for _ in range(len(queue)):
                node = queue.popleft()
                if previous is not None:
                    previous.next = node
                previous = node
                queue.extend(child for child in (node.left, node.right) if child)
        return root
