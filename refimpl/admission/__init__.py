"""Admission control: rolling-window p95 predictions, a KV watermark, four actions."""

from refimpl.admission.controller import (
    REASONS,
    Action,
    AdmissionConfig,
    AdmissionController,
    Decision,
)
from refimpl.admission.predict import LoadPredictor, Prediction
from refimpl.admission.window import RollingWindow

__all__ = [
    "REASONS",
    "Action",
    "AdmissionConfig",
    "AdmissionController",
    "Decision",
    "LoadPredictor",
    "Prediction",
    "RollingWindow",
]
