"""The names and settings of an InferenceService's alerts (pure): the alert names (stable: users
route and silence by them), the Prometheus labels the rules select by, and :class:`AlertSettings`,
the thresholds, durations and windows, which validate themselves (``ValueError`` naming the
setting). :func:`parse_duration` reads Prometheus durations, the grammar of
:data:`~mlops_platform.api.internal.DURATION_PATTERN`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from mlops_platform.api import internal

NO_READY_REPLICA = "InferenceServiceNoReadyReplica"
BELOW_MIN_REPLICAS = "InferenceServiceBelowMinReplicas"
HIGH_ERROR_RATIO = "InferenceServiceHighErrorRatio"
HIGH_LATENCY = "InferenceServiceHighLatency"
ALERTS = (NO_READY_REPLICA, BELOW_MIN_REPLICAS, HIGH_ERROR_RATIO, HIGH_LATENCY)
CANARY_ERROR_RATIO = "InferenceServiceCanaryErrorRatioAboveStable"
#: the alerts added while a canary runs (after :data:`ALERTS`)
CANARY_ALERTS = (CANARY_ERROR_RATIO,)

#: Prometheus label names of the pod labels the ServiceMonitor copies (``podTargetLabels``).
ISVC_LABEL = "mlops_platform_inferenceservice"
COMPONENT_LABEL = "mlops_platform_component"
#: values of :data:`COMPONENT_LABEL` (the ``mlops.platform/component`` pod label, ``labels``)
STABLE_COMPONENT = "predictor"
CANARY_COMPONENT = "canary"

DURATION_PATTERN = internal.DURATION_PATTERN
_DURATION = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)  # y w d h m s ms


def parse_duration(text: object) -> float:
    """Seconds in a Prometheus duration (``90s``, ``1h30m``, ``0``); ``ValueError`` if it is not one."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) and text else None
    if match is None:
        raise ValueError(f"must be a Prometheus duration such as 30s, 5m or 1h30m, got {text!r}")
    amounts = match.groups()[2::2]  # the digits of each unit
    return float(sum(int(n) * unit for n, unit in zip(amounts, _UNIT_SECONDS, strict=True) if n))


def _number(value: object) -> float | None:
    """``value`` as a finite float, None when it is not a number (bools are not)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _check_ratio(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and 0 < x <= 1 else f"must be a number in (0, 1], got {value!r}"


def _check_seconds(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and x > 0 else f"must be a number of seconds > 0, got {value!r}"


def _check_quantile(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and 0 < x < 1 else f"must be a number in (0, 1), got {value!r}"


def _check_duration(value: object) -> str | None:
    try:
        parse_duration(value)
    except ValueError as e:
        return str(e)
    return None


def _check_window(value: object) -> str | None:
    error = _check_duration(value)
    if error is None and parse_duration(value) == 0:
        return f"must be a duration > 0, got {value!r}"
    return error


def _check_url(value: object) -> str | None:
    if value is None or (isinstance(value, str) and re.fullmatch(r"https?://\S+", value)):
        return None
    return f"must be an http(s) URL, got {value!r}"


@dataclasses.dataclass(frozen=True, slots=True)
class AlertSettings:
    """Thresholds of the alerts (operator defaults, overridden per InferenceService)."""

    error_ratio: float = 0.05
    """Fraction of failed inference requests, 0 < x <= 1."""
    latency_seconds: float = 1.0
    """Request latency: the mean, and for MLServer's REST histogram the ``latency_quantile``."""
    for_: str = "5m"
    """How long a request or no-replica condition must hold (Prometheus duration)."""
    below_min_for: str = "15m"
    """How long fewer than ``minReplicas`` (but some) replicas must be available."""
    rate_window: str = "5m"
    """The ``rate()`` range: at least 4 scrape intervals (the ServiceMonitor scrapes every 30s)."""
    latency_quantile: float = 0.95
    """The quantile compared with ``latency_seconds`` where a server exports a histogram."""
    runbook_base_url: str | None = None
    """Where ``docs/monitoring.md`` is served; alerts then get ``runbook_url: <base>#<alert>``."""
    canary_error_margin: float = 0.01
    """How far (absolute, 0 < x <= 1) the canary's error ratio must exceed the stable's: the
    default 0.01 is one percentage point (see :func:`alerts._canary_rules` for why additive)."""

    def __post_init__(self) -> None:
        for field, check in _FIELD_CHECKS.items():
            error = check(getattr(self, field))
            if error is not None:
                raise ValueError(f"AlertSettings.{field}: {error}")


_FIELD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "error_ratio": _check_ratio,
    "latency_seconds": _check_seconds,
    "for_": _check_duration,
    "below_min_for": _check_duration,
    "rate_window": _check_window,
    "latency_quantile": _check_quantile,
    "runbook_base_url": _check_url,
    "canary_error_margin": _check_ratio,
}
