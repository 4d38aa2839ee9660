"""Baseline scheduling policies that mirror production engines."""
