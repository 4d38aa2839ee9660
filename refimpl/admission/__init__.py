"""Admission control: the gate protocol, and a controller with rolling-window p95 predictions."""

from refimpl.admission.controller import REASONS, AdmissionConfig, AdmissionController
from refimpl.admission.gate import Action, Decision, Gate
from refimpl.admission.predict import LoadPredictor, Prediction
from refimpl.admission.window import RollingWindow

__all__ = [
    "REASONS",
    "Action",
    "AdmissionConfig",
    "AdmissionController",
    "Decision",
    "Gate",
    "LoadPredictor",
    "Prediction",
    "RollingWindow",
]
