"""refimpl's test suite.

A package, so that its folders named after refimpl's parts (`kernels`, `model`, ...) are
imported as `tests.kernels` and never shadow an installed package of the same name:
transformers 5 imports Hugging Face's `kernels`, which `tests/kernels` used to stand in for.
"""
