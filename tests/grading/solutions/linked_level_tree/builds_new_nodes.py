"""Wrong: links a copy of the tree and returns the copy; the given nodes stay unlinked."""

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
        level = copy
        while level:
            tail = dummy = Node(0)
            node = level
            while node:
                for child in (node.left, node.right):
                    if child:
                        tail.next = tail = child
                node = node.next
            level = dummy.next
        return copy
