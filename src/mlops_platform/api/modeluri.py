"""What a model URI says: its scheme, where (bucket, claim or host) and the path in it.

The one parser of ``spec.predictor.model.uri`` (v1alpha1 ``spec.modelUri``) and the canary's model
URI: the API's validation calls it (an error names the field), the Deployment builder reads it to
wire the pod (an init container for a remote store, a read-only claim for ``pvc://``, nothing for
``file://``) and the storage initializer parses with it too. Schemes (``docs/model-delivery.md``):

- ``s3://<bucket>/<key or prefix>``: any S3-compatible store (``spec.predictor.model.storage``
  gives a custom endpoint and region);
- ``gs://<bucket>/<key or prefix>``: Google Cloud Storage;
- ``http://`` / ``https://<host>/<path>``: one file (an archive unpacks);
- ``pvc://<claim>/<path>``: a PersistentVolumeClaim of the namespace, mounted read-only at the
  model directory (``<path>`` in it, already laid out for the runtime; empty: the claim's root);
- ``file:///<absolute path>``: a path inside the model server's image (no copy, no volume).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal
from urllib.parse import urlsplit

Scheme = Literal["s3", "gs", "http", "https", "pvc", "file"]
#: the schemes the storage initializer fetches (into an emptyDir, before the server starts)
REMOTE: frozenset[str] = frozenset({"s3", "gs", "http", "https"})
#: a bucket name: up to 63 lowercase letters, digits, '.', '_', '-' (the stores ask for 3 or more; the
#: store's own answer says so, an S3-compatible store may differ)
_BUCKET = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
#: a PersistentVolumeClaim name: a DNS-1123 subdomain
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ModelURIError(ValueError):
    """A model URI the operator cannot serve; the message says why (the caller names the field)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ModelURI:
    """A parsed model URI: ``location`` is the bucket (s3, gs), the claim (pvc) or the host and
    port (http, https; empty for file); ``path`` has no leading slash, except for ``file`` where it
    is the absolute path in the image."""

    scheme: Scheme
    location: str
    path: str

    @property
    def remote(self) -> bool:
        """Fetched by the storage initializer (s3, gs, http, https)."""
        return self.scheme in REMOTE

    @property
    def is_prefix(self) -> bool:
        """Says a directory (ends in '/', or names a bucket's or a claim's root)."""
        return self.path == "" or self.path.endswith("/")


def parse(uri: str) -> ModelURI:
    """Parse ``uri``; :class:`ModelURIError` says what is wrong with it."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise ModelURIError(f"{uri!r} is not a URI (expected s3://, gs://, http(s)://, pvc:// or file://)")
    if scheme not in ("s3", "gs", "http", "https", "pvc", "file"):
        raise ModelURIError(f"{uri!r}: unknown scheme {scheme!r} (s3, gs, http, https, pvc or file)")
    if any(c.isspace() for c in uri):
        raise ModelURIError(f"{uri!r}: white space in a URI")
    if scheme == "file":
        if not rest.startswith("/") or rest.strip("/") == "":
            raise ModelURIError(f"{uri!r}: file:// takes an absolute path in the image (file:///models/x)")
        if _has_dot_segment(rest):
            raise ModelURIError(f"{uri!r}: '.' and '..' segments are not allowed")
        return ModelURI("file", "", rest)
    if scheme in ("http", "https"):
        try:  # a malformed IPv6 host ("https://[x/m") is a ValueError of urllib, not ours
            parts = urlsplit(uri)
            host = parts.hostname
        except ValueError as e:
            raise ModelURIError(f"{uri!r}: {e}") from None
        if not parts.netloc or host is None:
            raise ModelURIError(f"{uri!r}: no host")
        if not parts.path.strip("/"):
            raise ModelURIError(f"{uri!r}: no file path (http(s) serves one file or archive)")
        path = parts.path.lstrip("/") + (f"?{parts.query}" if parts.query else "")
        return ModelURI(scheme, parts.netloc, path)  # type: ignore[arg-type]
    location, _, path = rest.partition("/")
    if _has_dot_segment(path):
        raise ModelURIError(f"{uri!r}: '.' and '..' segments are not allowed")
    if scheme == "pvc":
        if len(location) > 253 or not _CLAIM.match(location):
            raise ModelURIError(
                f"{uri!r}: {location!r} is not a PersistentVolumeClaim name (pvc://<claim>/<path>)"
            )
        return ModelURI("pvc", location, path.strip("/"))
    if not _BUCKET.match(location):
        raise ModelURIError(
            f"{uri!r}: {location!r} is not a bucket name (lowercase letters, digits, '.', '_', '-')"
        )
    return ModelURI(scheme, location, path.lstrip("/"))  # type: ignore[arg-type]


def _has_dot_segment(path: str) -> bool:
    return any(seg in (".", "..") for seg in path.split("/"))


#: white space as :meth:`str.isspace` sees it, in RE2 (the API server's CEL ``matches``)
_WHITE_SPACE_RE2 = r"[\t\n\v\f\r\x{1c}-\x{1f}\x{85}\p{Z}]"
#: an http(s) URI :func:`parse` accepts: a host (after any user info, before any port) and a path
#: with more than slashes, as :func:`urllib.parse.urlsplit` reads them
_HTTP_RE2 = r"^https?://([^/?#\[\]]*@)?([^/?#@:\[\]]+|\[[0-9A-Za-z:.%]+\])(:[^/?#]*)?/[^?#]*[^/?#]"


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One thing :func:`parse` checks, as RE2 regexes (CEL ``matches``: found anywhere): a URI that
    matches ``when`` (None: every URI) must match each of ``must`` and must not match ``must_not``."""

    message: str
    when: str | None = None
    must: tuple[str, ...] = ()
    must_not: str | None = None

    def cel(self, value: str) -> str:
        """The CEL expression of this check on the string ``value``."""
        parts = [f"{value}.matches(r'{regex}')" for regex in self.must]
        if self.must_not is not None:
            parts.append(f"!{value}.matches(r'{self.must_not}')")
        check = " && ".join(parts)
        return check if self.when is None else f"!{value}.matches(r'{self.when}') || ({check})"


#: what :func:`parse` checks beyond the scheme (the schema's ``pattern``), for the API server
CHECKS = (
    Check("a model URI has no white space", must_not=_WHITE_SPACE_RE2),
    Check(
        "the bucket of an s3:// or gs:// model URI: lowercase letters, digits, '.', '_' and '-', up to 63 "
        "(s3://<bucket>/<key or prefix>)",
        when="^(s3|gs)://",
        must=(r"^(s3|gs)://[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?(/|$)",),
    ),
    Check(
        "the claim of a pvc:// model URI is a PersistentVolumeClaim name (pvc://<claim>/<path>)",
        when="^pvc://",
        must=(
            "^pvc://[^/]{1,253}(/|$)",
            r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(/|$)",
        ),
    ),
    Check(
        "'.' and '..' segments are not allowed in a model URI's path",
        must_not=r"^(s3|gs|pvc|file)://[^/]*/(.*/)?\.\.?(/|$)",
    ),
    Check(
        "file:// takes an absolute path in the image (file:///models/x)",
        when="^file://",
        must=("^file:///.*[^/]",),
    ),
    Check(
        "an http(s):// model URI names a host and a file (https://<host>/<path>)",
        when="^https?://",
        must=(_HTTP_RE2,),
    ),
)


def cel_rules() -> list[dict[str, str]]:
    """The CEL rules (``x-kubernetes-validations``) of a string field holding a model URI: on the
    API server, what :func:`parse` says (:data:`CHECKS`); the schema's ``pattern`` checks the scheme."""
    return [{"rule": c.cel("self"), "message": c.message, "reason": "FieldValueInvalid"} for c in CHECKS]


def cel_condition(value: str) -> str:
    """One CEL condition: the string ``value`` passes every check of :data:`CHECKS`."""
    return " && ".join(f"({c.cel(value)})" for c in CHECKS)
