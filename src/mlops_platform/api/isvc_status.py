"""The InferenceService status subresource, the same in every served version (v1alpha1, v1beta1 and
v1 share these types, so a status survives conversion unchanged): the conditions
(metav1.Condition), the replica counts and printer columns, the URL while the service can serve,
the rolled-out model and the effective traffic split. Written by the operator only; the CRD's
status schema is generated from them, so their ``Meta`` descriptions are what ``kubectl explain``
shows.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from mlops_platform.api import analysis_status


class Condition(msgspec.Struct, rename="camel", omit_defaults=True):
    """A metav1.Condition: one aspect of the service's observed state."""

    type: Annotated[
        str, Meta(max_length=316, description="Condition type in CamelCase, e.g. Ready or Reconciled.")
    ]
    status: Annotated[Literal["True", "False", "Unknown"], Meta(description="True, False or Unknown.")]
    reason: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=1024,
            pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            description="CamelCase reason for the last transition, e.g. CrashLoopBackOff.",
        ),
    ]
    message: Annotated[
        str, Meta(max_length=32768, description="Human-readable details of the last transition.")
    ] = ""
    last_transition_time: Annotated[
        str,
        Meta(
            description="When the status last changed (RFC 3339).",
            extra_json_schema={"format": "date-time"},
        ),
    ] = ""
    observed_generation: Annotated[
        Annotated[int, Meta(ge=0)] | None, Meta(description="The spec generation the condition was set for.")
    ] = None


class TrafficTarget(msgspec.Struct, rename="camel", omit_defaults=True):
    """One backend of the effective traffic split."""

    component: Annotated[str, Meta(max_length=63, description="predictor (stable) or canary (candidate).")]
    model_uri: Annotated[str, Meta(max_length=2048, description="The model this backend serves.")]
    percent: Annotated[
        int,
        Meta(
            ge=0, le=100, description="Share of requests it gets now (replicas router: of ready endpoints)."
        ),
    ]
    ready_replicas: Annotated[int, Meta(ge=0, description="Its ready replicas.")] = 0
    version: (
        Annotated[
            str, Meta(max_length=2048, description="The version (canaryVersion, or modelUri's last segment).")
        ]
        | None
    ) = None


class InferenceServiceStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    """The observed state, written by the operator only."""

    conditions: Annotated[
        list[Condition],
        Meta(
            description="Ready, Reconciled and one condition per child object.",
            extra_json_schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ] = msgspec.field(default_factory=list)
    replicas: Annotated[int, Meta(description="Replicas of the predictor (all pods, ready or not).")] = 0
    ready_replicas: Annotated[int, Meta(description="Predictor replicas that are Ready.")] = 0
    replicas_summary: Annotated[
        str | None, Meta(description='"ready/desired" predictor replicas, for the Replicas printer column.')
    ] = None
    url: Annotated[
        str | None, Meta(description="Cluster-local URL, set only while the service can serve.")
    ] = None
    active_version: Annotated[
        str | None, Meta(description="The model (URI) actually rolled out and serving, not merely requested.")
    ] = None
    last_reconcile_time: Annotated[str | None, Meta(description="When the operator last reconciled.")] = None
    observed_generation: Annotated[int | None, Meta(description="The generation the status describes.")] = (
        None
    )
    selector: Annotated[
        str | None, Meta(description="Label selector of the predictor pods (scale subresource).")
    ] = None
    traffic: (
        Annotated[
            list[TrafficTarget],
            Meta(
                max_length=2,
                description="The effective traffic split while a canary is asked for or still running.",
            ),
        ]
        | None
    ) = None
    analysis: Annotated[
        analysis_status.AnalysisStatus | None,
        Meta(description="The canary analysis (spec.canary.analysis): its phase, step and last transitions."),
    ] = None
