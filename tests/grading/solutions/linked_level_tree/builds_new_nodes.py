"""Wrong: links a copy of the tree and returns the copy; the given nodes stay unlinked."""

from _level_walk import link_levels
from node import Node


class Solution:
    """Copies the tree, then links the copy level by level in O(1) extra space."""

    def connect(self, root):
        """Return a linked copy of `root`."""
        if root is None:
            return None
        copy = Node(root.val)
        stack = [(root, copy)]
        while stack:
            original, new = stack.pop()
            for side in ("left", "right"):
                child = getattr(original, side)
                if child:
                    setattr(new, side, Node(child.val))
                    stack.append((child, getattr(new, side)))
        link_levels(copy)
        return copy
