"""An honest no-op: returns the tree unlinked. Every hostile solution must score no more."""


class Solution:
    def connect(self, root):
        return root
