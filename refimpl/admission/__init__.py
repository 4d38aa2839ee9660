"""Admission control: the gate protocol, and a compiled gate that admits what can be served."""

from refimpl.admission.controller import GATE_REASONS, AdmissionConfig, AdmissionController
from refimpl.admission.gate import Action, Decision, Gate

__all__ = ["GATE_REASONS", "Action", "AdmissionConfig", "AdmissionController", "Decision", "Gate"]
