"""Baseline scheduling policies: those of production engines, and deadline-aware ones."""
