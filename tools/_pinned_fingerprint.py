"""pytest plugin for tools/mutate.py: refimpl's source fingerprint pinned to the base tree's.

Loaded (`-p _pinned_fingerprint`) for a mutant of a pure-Python file, whose compiled kernels
are those of the unmutated tree: they load from the base cache instead of compiling again.
"""

from __future__ import annotations

import os

import refimpl._numba

_PINNED = os.environ["REFIMPL_PINNED_FINGERPRINT"]
refimpl._numba.sources_fingerprint = lambda root=None: _PINNED
