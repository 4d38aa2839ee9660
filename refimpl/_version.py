"""The package version, read by pyproject.toml and exposed as refimpl.__version__."""

__version__ = "0.2.0"
