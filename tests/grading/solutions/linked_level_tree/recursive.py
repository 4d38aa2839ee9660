"""Wrong: correct links in O(1) heap space, but recursion one call per level (deep trees fail)."""


class Solution:
    """Links the children of each level from the parent level's next chain, recursively."""

    def connect(self, root):
        """Link the level below `root`'s level, then recurse into it."""
        if root is None:
            return root
        first_below, tail, node = None, None, root
        while node:
            for child in (node.left, node.right):
                if child:
                    if tail:
                        tail.next = child
                    else:
                        first_below = child
                    tail = child
            node = node.next
        self.connect(first_below)
        return root
