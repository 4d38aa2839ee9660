"""Wrong: the classic solution for perfect trees only; gaps break it."""


class Solution:
    """Assumes every node above the last level has two children."""

    def connect(self, root):
        """Link left to right child, and right child to the next node's left child."""
        leftmost = root
        while leftmost and leftmost.left:
            head = leftmost
            while head:
                head.left.next = head.right
                if head.next:
                    head.right.next = head.next.left
                head = head.next
            leftmost = leftmost.left
        return root
