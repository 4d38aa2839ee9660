"""Turning results into text, JSON and plots for people."""
