"""Wrong: links correctly but forgets to return the root."""

from _level_walk import link_levels


class Solution:
    """The reference walk, without the return."""

    def connect(self, root):
        """Link every level; return nothing."""
        link_levels(root)
