"""Wrong: to find a child's right neighbour it scans for the next parent with children, but
the scan never moves on, so it spins forever when a parent's neighbour is childless."""


class Solution:
    """Links each child to the nearest child of the parents to its right."""

    def connect(self, root):
        """Link level by level, starting each level at its first node with a child."""
        leftmost = root
        while leftmost:
            head = leftmost
            while head:
                if head.left or head.right:
                    far = head.next
                    while far and not (far.left or far.right):
                        far = head.next  # the bug: should be far.next
                    nearest = (far.left or far.right) if far else None
                    if head.left:
                        head.left.next = head.right or nearest
                    if head.right:
                        head.right.next = nearest
                head = head.next
            while leftmost and not (leftmost.left or leftmost.right):
                leftmost = leftmost.next
            leftmost = (leftmost.left or leftmost.right) if leftmost else None
        return root
