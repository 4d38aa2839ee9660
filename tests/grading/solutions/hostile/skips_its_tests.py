"""Links nothing and skips the test that called it: a skip must not count as a pass."""

import pytest


class Solution:
    def connect(self, root):
        pytest.skip("nothing to see here")
