"""The doctor: checks -> report (text or JSON), run by users and, in the engine's environment, by the daemon."""

from .report import Check, CheckStatus, Report
from .runner import CHECKS, run_doctor

__all__ = ["CHECKS", "Check", "CheckStatus", "Report", "run_doctor"]
