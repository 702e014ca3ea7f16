"""Preflight: small checks over (recipe, host facts), run by one runner; GPU layout choice."""

from rigctl.preflight.finding import Check, Finding, Severity
from rigctl.preflight.layout import Choice, ChosenGpu, choose_gpus
from rigctl.preflight.registry import CHECKS, PreflightReport, run_preflight

__all__ = ["CHECKS", "Check", "Choice", "ChosenGpu", "Finding", "PreflightReport", "Severity", "choose_gpus",
           "run_preflight"]
