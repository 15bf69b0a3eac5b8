"""The status of a canary analysis (``status.analysis``, a field of
:class:`~mlops_platform.api.isvc_status.InferenceServiceStatus`; their ``Meta`` descriptions are what
``kubectl explain`` shows).

The status is the analysis' only memory, so that a restarted operator resumes where the last one
was (``controllers.inferenceservice.analysis``): the phase, the step and when its interval began,
the failed evaluations so far, the spec hash it runs for, why the step holds if it does, and the
last transitions with the values that decided them. Immutable (frozen Structs, tuples), so the
state machine can compare the status it decides with the one it read: equal means no write.

Size: at most :data:`HISTORY_LIMIT` transitions, each with its values in its message, messages of
at most :data:`MAX_MESSAGE` characters, and the values of the last judged interval structured (at
most 1 + 2 + 5 measurements: requests, the built-in checks, ``MAX_QUERIES`` custom ones): under
4 KiB in the worst case (a unit test checks it; the status' budget is 16 KiB), about 1 KiB in a
usual one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

#: the phases of an analysis (``docs/progressive-delivery.md``: what each means)
Phase = Literal["Progressing", "Paused", "Promoting", "Promoted", "RollingBack", "RolledBack", "Failed"]
PHASES: tuple[Phase, ...] = (
    "Progressing",
    "Paused",
    "Promoting",
    "Promoted",
    "RollingBack",
    "RolledBack",
    "Failed",
)
#: transitions kept in ``history``, the newest last (every one is an Event too)
HISTORY_LIMIT = 5
MAX_MESSAGE = 256
#: requests, errorRatio, latency and ``v1_analysis.MAX_QUERIES`` custom checks
MAX_MEASUREMENTS = 8
_REASON = Annotated[str, Meta(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=64)]
_TIME = Annotated[str, Meta(description="RFC 3339.", extra_json_schema={"format": "date-time"})]


class _Base(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class Measurement(_Base, frozen=True):
    """One check's values over the step's window, as decided on."""

    check: Annotated[
        str,
        Meta(max_length=63, description="errorRatio, latency, requests, or a custom query's name."),
    ]
    candidate: Annotated[
        float | None, Meta(description="The candidate's value (absent: no data; requests: a count).")
    ] = None
    stable: Annotated[float | None, Meta(description="The stable model's, for a relative check.")] = None
    limit: Annotated[
        float | None,
        Meta(description="What the candidate's value was compared with (the lowest bound that applied)."),
    ] = None
    passed: Annotated[bool | None, Meta(description="Absent: not decided (no data).")] = None


class Hold(_Base, frozen=True):
    """Why the current step is not decided although its interval is over."""

    reason: Annotated[_REASON, Meta(description="PrometheusUnreachable, NotEnoughRequests or NoData.")]
    message: Annotated[str, Meta(max_length=MAX_MESSAGE, description="What is missing, in a sentence.")]
    since: Annotated[_TIME, Meta(description="When the step began to hold for this reason (RFC 3339).")]


class Transition(_Base, frozen=True):
    """One change of the analysis; its message says the values that decided it (it is an Event too)."""

    time: Annotated[_TIME, Meta(description="When it happened (RFC 3339).")]
    phase: Annotated[Phase, Meta(description="The phase it went to.")]
    reason: Annotated[_REASON, Meta(description="Why, in CamelCase (StepPassed, CheckFailed, ...).")]
    from_: Annotated[Phase | None, Meta(description="The phase it came from (absent: none).")] = (
        msgspec.field(default=None, name="from")
    )
    step_index: Annotated[int, Meta(ge=0, description="The step (0: the first) it went to.")] = 0
    weight: Annotated[int, Meta(ge=0, le=100, description="The candidate's weight it asked for.")] = 0
    message: Annotated[
        str, Meta(max_length=MAX_MESSAGE, description="What happened, with the values that decided it.")
    ] = ""


class AnalysisStatus(_Base, frozen=True):
    """Where a canary analysis is; written by the operator only."""

    phase: Annotated[Phase, Meta(description="Progressing, Paused, Promoting, Promoted, RollingBack, ...")]
    spec_hash: Annotated[
        str, Meta(max_length=64, description="The canary spec it runs for; another restarts the analysis.")
    ]
    step_index: Annotated[int, Meta(ge=0, description="The current step (0: the first).")] = 0
    weight: Annotated[
        int, Meta(ge=0, le=100, description="The candidate's share of requests the analysis asks for.")
    ] = 0
    step_start_time: Annotated[
        _TIME | None,
        Meta(description="When the current step's interval began (absent: the route has not applied it)."),
    ] = None
    failed_checks: Annotated[
        int, Meta(ge=0, description="Failed evaluations so far (failureLimit of them roll back).")
    ] = 0
    hold: Annotated[Hold | None, Meta(description="Why the current step is not decided, while so.")] = None
    measurements: Annotated[
        tuple[Measurement, ...],
        Meta(max_length=MAX_MEASUREMENTS, description="The values of the last judged interval."),
    ] = ()
    history: Annotated[
        tuple[Transition, ...],
        Meta(max_length=HISTORY_LIMIT, description="The last transitions, oldest first."),
    ] = ()


def decode(raw: Any) -> AnalysisStatus | None:
    """``status.analysis`` as read from the API (None when absent or not one: the analysis then
    starts again from its first step, which never promotes anything early)."""
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, AnalysisStatus, strict=True)
    except msgspec.ValidationError:
        return None


def encode(status: AnalysisStatus) -> dict[str, Any]:
    """``status.analysis`` as written, and as the API server returns it: every field with a schema
    default (not None) is written out, as the server would fill it in, so that the status read back
    equals the one decided and steady state writes nothing."""
    out: dict[str, Any] = _explicit(status)
    return out


def _explicit(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        out = msgspec.to_builtins(value)
        for f in msgspec.structs.fields(value):
            v = getattr(value, f.name)
            if v is not None:
                out[f.encode_name] = _explicit(v)
        return out
    if isinstance(value, tuple):
        return [_explicit(v) for v in value]
    return value
