"""Certificates of a webhook served over self-managed TLS: the pure plan of their rotation.

Everything here is pure (no I/O, time passed in): :func:`plan` decides, from the stored
:class:`CertState` and the time, what the next state is. The key pairs it issues are built and read
by :mod:`.keypairs`.

Rotation (the invariant: at every instant the serving certificate chains to a CA of the published
bundle, even for consumers that see the bundle or the serving pair up to ``overlap`` late):

1. *steady*: the bundle holds the signing CA ``ca``; ``serving`` is signed by it and is re-issued by
   the same CA once ``renew_at`` of its lifetime has elapsed.
2. *publishing*: once ``renew_at`` of the CA's lifetime has elapsed, a new CA (``next_ca``) joins the
   bundle; the serving certificate stays signed by the old CA.
3. *retiring*: ``overlap`` after the bundle with ``next_ca`` was published, the serving certificate
   is re-issued by ``next_ca``, which becomes ``ca``; the old CA stays in the bundle (``retired_ca``).
4. ``overlap`` later (or at the old CA's expiry, if sooner) the old CA leaves the bundle: steady.

Only an unusable state (none, the signing CA expired, keys not matching their certificates) starts
afresh: a new CA, bundle and serving certificate at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mlops_platform.runtime.webhook import keypairs
from mlops_platform.runtime.webhook.keypairs import KeyPair

__all__ = ["CertState", "Change", "Plan", "RotationPolicy", "plan"]


@dataclasses.dataclass(frozen=True)
class RotationPolicy:
    """How long certificates live and when they are replaced.

    - ``renew_at``: the fraction of a certificate's lifetime after which it is replaced (2/3: a
      30-day serving certificate is re-issued after 20 days; a CA's rotation starts then);
    - ``overlap``: how long a new CA is trusted before it signs, and an old one still trusted after
      it stopped signing. It must exceed the time for every consumer to see a change: the
      replicas' reload period plus the time until clients (the API server) use a new CA bundle;
    - ``backdate``: ``not_before`` is this much before issuance (clients whose clocks lag).
    """

    ca_validity: datetime.timedelta = datetime.timedelta(days=365)
    cert_validity: datetime.timedelta = datetime.timedelta(days=30)
    renew_at: float = 2 / 3
    overlap: datetime.timedelta = datetime.timedelta(hours=1)
    backdate: datetime.timedelta = datetime.timedelta(minutes=5)

    def __post_init__(self) -> None:
        zero = datetime.timedelta(0)
        if not 0 < self.renew_at < 1:
            raise ValueError("renew_at is a fraction of the lifetime, strictly between 0 and 1")
        if self.ca_validity <= zero or self.cert_validity <= zero:
            raise ValueError("validities must be positive")
        if self.overlap < zero or self.backdate < zero:
            raise ValueError("overlap and backdate must not be negative")
        # a CA starts rotating once renew_at of its life elapsed, and no earlier than the retirement of
        # its predecessor (2 overlaps after that one's rotation began); both steps of its own rotation
        # (switch, retire) must then end before it expires
        if self.ca_validity * (1 - self.renew_at) <= 2 * self.overlap or self.ca_validity <= 4 * self.overlap:
            raise ValueError(
                "the CA must outlive its rotation: need ca_validity * (1 - renew_at) > 2 * overlap "
                "and ca_validity > 4 * overlap"
            )

    def renew_time(self, cert: x509.Certificate) -> datetime.datetime:
        """When ``cert`` is due for replacement: ``renew_at`` of its (not backdated) lifetime."""
        not_after = cert.not_valid_after_utc
        start = min(cert.not_valid_before_utc + self.backdate, not_after)
        return start + (not_after - start) * self.renew_at


class Change(enum.Enum):
    """What a plan changed."""

    CREATED = "created"  # a new CA, bundle and serving certificate (no usable state before)
    CA_PUBLISHED = "ca-published"  # a new CA joined the bundle (it does not sign yet)
    CA_SWITCHED = "ca-switched"  # the serving certificate was re-issued by the new CA
    CA_RETIRED = "ca-retired"  # the old CA left the bundle
    SERVING_RENEWED = "serving-renewed"  # the serving certificate was re-issued by the same CA


_SERVING_CHANGES = frozenset({Change.CREATED, Change.CA_SWITCHED, Change.SERVING_RENEWED})


@dataclasses.dataclass(frozen=True)
class CertState:
    """What is stored: the CA signing ``serving``, at most one more CA in the bundle, and when the
    current rotation step began (``next_ca`` published, or the switch away from ``retired_ca``)."""

    ca: KeyPair
    serving: KeyPair
    step_since: datetime.datetime
    next_ca: KeyPair | None = None  # publishing: trusted, not signing yet
    retired_ca: x509.Certificate | None = None  # retiring: trusted, no longer signing

    def __post_init__(self) -> None:
        if self.next_ca is not None and self.retired_ca is not None:
            raise ValueError("a state has at most one CA besides the signing one")

    @property
    def phase(self) -> str:
        """``steady``, ``publishing`` (next_ca trusted, not signing) or ``retiring``."""
        if self.next_ca is not None:
            return "publishing"
        return "retiring" if self.retired_ca is not None else "steady"

    @property
    def bundle(self) -> bytes:
        """The trusted CAs, oldest first."""
        retired = [self.retired_ca.public_bytes(serialization.Encoding.PEM)] if self.retired_ca else []
        nxt = [self.next_ca.cert_pem] if self.next_ca else []
        return keypairs.bundle(*retired, self.ca.cert_pem, *nxt)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The next state, what changed on the way there, and when to plan again at the latest."""

    state: CertState
    changes: frozenset[Change]
    next_check: datetime.datetime
    bundle_changed: bool  # the trusted CAs differ from the previous state's
    serving_changed: bool  # the serving pair differs from the previous state's


@dataclasses.dataclass(frozen=True)
class _Issuer:
    """Issues the CA and serving key pairs a plan needs, all at the plan's ``now``."""

    now: datetime.datetime
    policy: RotationPolicy
    dns_names: Sequence[str]
    ip_addresses: Sequence[str]
    ca_name: str

    def serving(self, ca: KeyPair) -> KeyPair:
        return keypairs.new_serving(
            ca,
            dns_names=self.dns_names,
            ip_addresses=self.ip_addresses,
            validity=self.policy.cert_validity,
            now=self.now,
            backdate=self.policy.backdate,
        )

    def fresh_ca(self) -> KeyPair:
        return keypairs.new_ca(
            self.ca_name, validity=self.policy.ca_validity, now=self.now, backdate=self.policy.backdate
        )


def plan(
    state: CertState | None,
    *,
    now: datetime.datetime,
    policy: RotationPolicy,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    ca_name: str = "webhook-ca",
) -> Plan:
    """The state that should be stored at ``now`` (see the module docstring for the steps).

    At most one step of the CA rotation is taken per call, so consumers see each bundle before the
    serving certificate relies on it; the serving certificate is re-issued when due, when its SANs
    differ from ``dns_names``/``ip_addresses``, or when it is not valid any more."""
    now = keypairs.utc(now)
    issue = _Issuer(now, policy, dns_names, ip_addresses, ca_name)
    before = state
    state, changes = _ca_step(state, now, policy, issue)

    if state.phase == "steady" and now >= policy.renew_time(state.ca.cert) and Change.CREATED not in changes:
        state = dataclasses.replace(state, next_ca=issue.fresh_ca(), step_since=now)
        changes.add(Change.CA_PUBLISHED)

    if not changes & _SERVING_CHANGES and _serving_stale(state, now, policy, dns_names, ip_addresses):
        state = dataclasses.replace(state, serving=issue.serving(state.ca))
        changes.add(Change.SERVING_RENEWED)

    return Plan(
        state,
        frozenset(changes),
        _next_check(state, policy),
        bundle_changed=before is None or before.bundle != state.bundle,
        serving_changed=before is None or before.serving != state.serving,
    )


def _ca_step(
    state: CertState | None, now: datetime.datetime, policy: RotationPolicy, issue: _Issuer
) -> tuple[CertState, set[Change]]:
    """The CA rotation's step due at ``now``, if any: start afresh (no usable state), switch to the
    published CA, or retire the old one."""
    if state is None or not _usable(state, now):
        ca = issue.fresh_ca()
        return CertState(ca=ca, serving=issue.serving(ca), step_since=now), {Change.CREATED}
    if state.next_ca is not None:
        if now >= state.step_since + policy.overlap or now >= state.ca.not_after:
            old = state.ca.cert
            retired = old if now < old.not_valid_after_utc else None
            switched = CertState(
                ca=state.next_ca, serving=issue.serving(state.next_ca), step_since=now, retired_ca=retired
            )
            return switched, {Change.CA_SWITCHED}
    elif state.retired_ca is not None and (
        now >= state.step_since + policy.overlap or now >= state.retired_ca.not_valid_after_utc
    ):
        return dataclasses.replace(state, retired_ca=None, step_since=now), {Change.CA_RETIRED}
    return state, set()


def _usable(state: CertState, now: datetime.datetime) -> bool:
    pairs = [state.ca] + ([state.next_ca] if state.next_ca else [])
    if not all(p.matches() for p in pairs):
        return False
    if now < state.ca.not_after:
        return True
    # the signing CA expired: only a still valid next CA can take over (the switch happens at once)
    return state.next_ca is not None and now < state.next_ca.not_after


def _serving_stale(
    state: CertState,
    now: datetime.datetime,
    policy: RotationPolicy,
    dns_names: Iterable[str],
    ip_addresses: Iterable[str],
) -> bool:
    cert = state.serving.cert
    wanted = (frozenset(dns_names), frozenset(str(ipaddress.ip_address(a)) for a in ip_addresses))
    return (
        now >= policy.renew_time(cert)
        or not state.serving.matches()
        or not keypairs.issued_by(cert, state.ca.cert)
        or keypairs.sans(cert) != wanted
    )


def _next_check(state: CertState, policy: RotationPolicy) -> datetime.datetime:
    times = [policy.renew_time(state.serving.cert)]
    if state.next_ca is not None:
        times += [state.step_since + policy.overlap, state.ca.not_after]
    elif state.retired_ca is not None:
        times += [state.step_since + policy.overlap, state.retired_ca.not_valid_after_utc]
    else:
        times.append(policy.renew_time(state.ca.cert))
    return min(times)
