"""The recipe's defaults and bounds that modules beside the recipe model read without loading it (a leaf:
no pydantic, no YAML). The model's fields default to these values, and the deployment record, status,
warmup, doctor's fixes, the canary and verify use the same ones for what a recipe leaves unsaid."""

from __future__ import annotations

MAX_CONTEXT = 16_777_216  # the largest context_length a recipe may give, and the largest max_model_len believed
HEALTH_PATH = "/health"  # engine.health_path
# what a health path may be, for the recipe and for the client that probes it: a path on the endpoint, never
# "//host/..." (a network-path reference: the probe would go to another host than the endpoint's)
HEALTH_PATH_PATTERN = r"^/([A-Za-z0-9._-][A-Za-z0-9._/-]*)?$"  # no look-ahead: pydantic's regex has none
WARMUP_BUDGET_S = 1800  # service.warmup_budget_s: becomes TimeoutStartSec
RESTART_SEC = 10  # service.restart_sec
STOP_TIMEOUT_S = 120  # service.stop_timeout_s: the engine's own stop timeout (podman --stop-timeout)
STOP_GRACE_S = 30  # the unit's TimeoutStopSec is the stop timeout plus this
REQUEST_TIMEOUT_S = 60  # verification.request_timeout_s
# service.liveness_window_s: an engine with requests running and no new token for this long is killed by its
# health check (render.liveness). Not shorter: a long prompt's prefill yields no token for tens of seconds, and
# the stall the check waits for is half the window.
LIVENESS_WINDOW_S = 180
LIVENESS_MIN_WINDOW_S = 36  # 2 * (the health check's 5 retries + 1) checks, each 1 s apart and 2 s late


def stop_wait_s(stop_timeout_s: float) -> float:
    """How long rigctl waits for `systemctl stop` of a unit whose engine has ``stop_timeout_s``: past the
    unit's own TimeoutStopSec (``stop_timeout_s + STOP_GRACE_S``), so that systemd gives up first."""
    return stop_timeout_s + STOP_GRACE_S + 30
