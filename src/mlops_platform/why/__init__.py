"""``mlops-platform why NAME`` (and ``kubectl mlops why NAME``): why an InferenceService is, or is
not, serving, read from the API alone (no operator logs, no operator process needed).

Three parts, so the human output can be golden-tested without a cluster:

- :func:`read` (:mod:`~mlops_platform.why.reading`) does the I/O: GETs of the InferenceService, of
  the CRDs of the optional child kinds, of every child the operator could own, LISTs of the pods, the
  canary's EndpointSlices and the namespace's Events. Independent reads go out together (three rounds
  in all). A read the caller may not make (403) is recorded, not raised, except for the
  InferenceService itself.
- :func:`analyze` (:mod:`~mlops_platform.why.analysis`) is pure: from a :class:`Snapshot` and the
  operator's settings
  (:class:`~mlops_platform.controllers.inferenceservice.children.base.BuildContext`) it decides what
  the reconciler would change now, with the reconciler's own pure functions: ``api.decode``,
  ``traffic.choose_router``, ``traffic.rollout``, ``base.slots``, each child's ``build`` and
  ``settle``, and the subset diff of :mod:`~mlops_platform.runtime.control.childsync`
  (``diff.differences`` after the owner reference and the desired-hash annotation). It also gathers
  the conditions, the effective split (``status.traffic``), the pods' causes and the Events
  (:mod:`~mlops_platform.why.observed`) and the summary line (:mod:`~mlops_platform.why.summary`)
  into a :class:`Report` (:mod:`~mlops_platform.why.report`).
- :func:`render_text` and :func:`to_json` (:mod:`~mlops_platform.why.render`) present a
  :class:`Report`.

:func:`collect` (:mod:`~mlops_platform.why.command`) connects, reads and analyzes for the CLI.

The result depends on the operator's settings: :func:`analyze` assumes the defaults unless told
otherwise, so the options given to ``why`` (``--traffic-router``, ``--gateway``,
``--ingress-domain``) must match the operator's flags, or children show as differing that the
operator leaves alone.

This package's names below are its API (the CLI's and the tests'); the modules hold the rest.
"""

from __future__ import annotations

from mlops_platform.why.analysis import MAX_EVENTS, analyze, settings_of
from mlops_platform.why.command import WhyError, collect, default_namespace, terminal_width, use_color
from mlops_platform.why.reading import NotFound, Snapshot, read, read_rules
from mlops_platform.why.render import render_text, to_json
from mlops_platform.why.report import (
    ChildReport,
    ConditionReport,
    ContainerReport,
    EventReport,
    PodReport,
    Report,
)

__all__ = [
    "MAX_EVENTS",
    "ChildReport",
    "ConditionReport",
    "ContainerReport",
    "EventReport",
    "NotFound",
    "PodReport",
    "Report",
    "Snapshot",
    "WhyError",
    "analyze",
    "collect",
    "default_namespace",
    "read",
    "read_rules",
    "render_text",
    "settings_of",
    "terminal_width",
    "to_json",
    "use_color",
]
