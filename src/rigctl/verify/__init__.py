"""verify: prove the served model is right, not just up.

Entry points: ``run_checks`` (runner), ``detect_repetition`` (repetition), ``match_signatures``
(signatures, shared with deploy and logs), ``Endpoint``/``Expectations`` (report). The checks themselves
and ``REGISTRY``, the one list of them, are in ``checks``."""

from rigctl.verify.client import Endpoint
from rigctl.verify.repetition import RepetitionFinding, detect_repetition
from rigctl.verify.report import CheckResult, Expectations, VerifyReport, endpoint_for
from rigctl.verify.runner import check_ids, run_checks, run_checks_async
from rigctl.verify.signatures import SignatureMatch, match_signatures

__all__ = [
    "CheckResult",
    "Endpoint",
    "Expectations",
    "RepetitionFinding",
    "SignatureMatch",
    "VerifyReport",
    "check_ids",
    "detect_repetition",
    "endpoint_for",
    "match_signatures",
    "run_checks",
    "run_checks_async",
]
