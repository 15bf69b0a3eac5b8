"""What the canary analysis says (:mod:`.analysis`): the message of each transition (with the values
that decided it, when a judgement did) and the situation in a sentence (a condition's message: no
measured values, so it stays the same while the status does). Pure."""

from __future__ import annotations

from mlops_platform.api import analysis_status, internal
from mlops_platform.api.analysis_status import AnalysisStatus
from mlops_platform.controllers.inferenceservice import analysis_checks as checks


def bounded(text: str) -> str:
    limit = analysis_status.MAX_MESSAGE
    return text if len(text) <= limit else text[: limit - 3] + "..."


def transition(reason: str, a: internal.Analysis, index: int, weight: int, v: checks.Verdict | None) -> str:
    n = len(a.steps)
    what = {
        "Started": f"analysis started: step 1 of {n}, {weight} % to the candidate",
        "SpecChanged": f"the canary spec changed: the analysis starts again at step 1 of {n} ({weight} %)",
        "ManualPromote": "promoted by hand",
        "ManualRollback": "rolled back by hand",
        "Promoted": "the candidate is promoted",
        "RolledBack": "the candidate is rolled back: no traffic",
        "Paused": f"paused at step {index + 1} of {n} ({weight} %)",
        "Resumed": f"resumed: step {index + 1} of {n} starts again ({weight} %)",
        "ChecksInvalid": "the analysis cannot run: the candidate gets no traffic",
        "ChecksFailed": f"rolled back after {a.failure_limit} failed evaluation(s)",
        "CheckFailed": f"step {index + 1} of {n} failed a check: its interval starts again",
        "StepPassed": f"step {index} of {n} passed: step {index + 1} of {n}, {weight} % to the candidate",
        "AllStepsPassed": f"all {n} steps passed: promoting the candidate",
    }[reason]
    return f"{what}: {v.message}" if v is not None and v.message else what


def situation(a: internal.Analysis, s: AnalysisStatus) -> str:
    """The status in a sentence (no measured values: it stays the same while the status does)."""
    n = len(a.steps)
    if s.phase == "Progressing":
        if s.step_start_time is None:
            return f"step {s.step_index + 1} of {n}: waiting for the route to give the candidate {s.weight} %"
        return f"step {s.step_index + 1} of {n}: {s.weight} % to the candidate since {s.step_start_time}"
    if s.phase == "Paused":
        return f"paused at step {s.step_index + 1} of {n} ({s.weight} %)"
    last = s.history[-1].message if s.history else ""
    return f"{s.phase}: {last}" if last else s.phase
