"""A model URI and the mounted credentials to an obstore store (S3-compatible, GCS, HTTP(S)).

The credentials directory is a mounted Secret, one file per key (``CREDENTIAL_KEYS``); missing keys
are fine, unknown files are ignored. Without a directory the library's own chain applies: the
environment (``AWS_*``, ``GOOGLE_*``), IRSA web identity, ECS/EC2 or GCE metadata.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from obstore import store as obs_store

from mlops_platform.api import modeluri
from mlops_platform.storage import failure

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

#: the keys of the credentials Secret, per scheme
S3_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
)
GCS_KEYS = ("GOOGLE_SERVICE_ACCOUNT_KEY",)
HTTP_KEYS = ("HTTP_AUTHORIZATION",)
CREDENTIAL_KEYS = S3_KEYS + GCS_KEYS + HTTP_KEYS

#: the store's own retries of one request: 5xx, connection errors, timeouts, and a body that breaks
#: off mid-way (obstore re-requests the rest with a range); ``transfer`` retries on top of it
RETRY: RetryConfig = {
    "max_retries": 6,
    "retry_timeout": timedelta(minutes=3),
    "backoff": {"init_backoff": timedelta(milliseconds=200), "max_backoff": timedelta(seconds=15), "base": 2},
}


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Where and how to reach the store: ``endpoint`` and ``region`` as given on the command line
    (None: the Secret's ``AWS_ENDPOINT_URL``/``AWS_REGION``, else the library's default)."""

    credentials: Mapping[str, str] = dataclasses.field(default_factory=dict)
    endpoint: str | None = None
    region: str | None = None


def read_credentials(directory: Path | None) -> dict[str, str]:
    """The known keys present in a mounted Secret ``directory`` (values without surrounding white
    space: a Secret written with ``echo`` ends in a newline)."""
    if directory is None:
        return {}
    if not directory.is_dir():
        raise failure.DownloadFailed(f"credentials directory {directory} does not exist")
    found: dict[str, str] = {}
    for key in CREDENTIAL_KEYS:
        path = directory / key
        try:
            value = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise failure.DownloadFailed(f"cannot read credential {key} in {directory}: {e}") from e
        if value:
            found[key] = value
    return found


def client_options(*, allow_http: bool, headers: Mapping[str, str] | None = None) -> ClientConfig:
    """HTTP client options: no overall deadline (a large model takes long), but a stalled read or
    connect fails (and is retried)."""
    options: ClientConfig = {
        "allow_http": allow_http,
        "connect_timeout": timedelta(seconds=15),
        "read_timeout": timedelta(seconds=60),
        "timeout": timedelta(hours=24),
    }
    if headers:
        options["default_headers"] = dict(headers)
    return options


def _check_endpoint(endpoint: str) -> None:
    if not endpoint.startswith(("http://", "https://")):
        raise failure.DownloadFailed(f"endpoint {endpoint!r} is not an http:// or https:// URL")


def s3(uri: modeluri.ModelURI, settings: Settings) -> obs_store.S3Store:
    """An S3-compatible store of the URI's bucket; path-style requests to a custom endpoint."""
    creds = settings.credentials
    config: dict[str, Any] = {}
    endpoint = settings.endpoint or creds.get("AWS_ENDPOINT_URL")
    if endpoint:
        _check_endpoint(endpoint)
        config["endpoint"] = endpoint
    region = settings.region or creds.get("AWS_REGION")
    if region:
        config["region"] = region
    for key, option in (
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
        ("AWS_SESSION_TOKEN", "session_token"),
    ):
        if key in creds:
            config[option] = creds[key]
    if endpoint and "access_key_id" not in config and not _aws_chain_configured():
        config["skip_signature"] = True  # an S3-compatible store and no credentials: anonymous
    if ("access_key_id" in config) != ("secret_access_key" in config):
        raise failure.DownloadFailed(
            "credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together (one is missing)"
        )
    return obs_store.S3Store(
        uri.location,
        config=config,  # type: ignore[arg-type]
        client_options=client_options(allow_http=bool(endpoint and endpoint.startswith("http://"))),
        retry_config=RETRY,
    )


#: environment variables that give the AWS credential chain something other than instance metadata
_AWS_CHAIN_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_PROFILE",
)


def _aws_chain_configured() -> bool:
    return any(os.environ.get(name) for name in _AWS_CHAIN_ENV)


def emulator_key(endpoint: str) -> str:
    """A service-account key that points object_store's GCS client at ``endpoint`` without OAuth
    (``gcs_base_url`` and ``disable_oauth``: object_store's emulator settings)."""
    return json.dumps(
        {
            "gcs_base_url": endpoint,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
    )


def gcs(uri: modeluri.ModelURI, settings: Settings) -> obs_store.GCSStore:
    """A GCS store of the URI's bucket; with an endpoint (an emulator) and no key, no OAuth."""
    key = settings.credentials.get("GOOGLE_SERVICE_ACCOUNT_KEY")
    config: dict[str, Any] = {}
    key_base_url = ""
    if key is not None:
        try:
            parsed_key = json.loads(key)
        except ValueError as e:
            raise failure.DownloadFailed(f"credentials: GOOGLE_SERVICE_ACCOUNT_KEY is not JSON ({e})") from e
        if isinstance(parsed_key, dict):  # an emulator's key may name a plain-HTTP endpoint
            key_base_url = str(parsed_key.get("gcs_base_url") or "")
        config["service_account_key"] = key
    if settings.endpoint:
        _check_endpoint(settings.endpoint)
        config["base_url"] = settings.endpoint.rstrip("/")
        if key is None:
            config["service_account_key"] = emulator_key(settings.endpoint.rstrip("/"))
    allow_http = (settings.endpoint or key_base_url).startswith("http://")
    return obs_store.GCSStore(
        uri.location,
        config=config,  # type: ignore[arg-type]
        client_options=client_options(allow_http=allow_http),
        retry_config=RETRY,
    )


def http(url: str, settings: Settings) -> obs_store.HTTPStore:
    """A store of exactly ``url`` (its object is the empty path, so a query string is kept), with the
    Secret's ``HTTP_AUTHORIZATION`` as the Authorization header."""
    authorization = settings.credentials.get("HTTP_AUTHORIZATION")
    headers = {"Authorization": authorization} if authorization else None
    return obs_store.HTTPStore(
        url,
        client_options=client_options(allow_http=url.startswith("http://"), headers=headers),
        retry_config=RETRY,
    )


def build(uri: str, parsed: modeluri.ModelURI, settings: Settings) -> obs_store.ObjectStore:
    """The store that serves ``uri`` (its parse: ``parsed``)."""
    try:
        if parsed.scheme == "s3":
            return s3(parsed, settings)
        if parsed.scheme == "gs":
            return gcs(parsed, settings)
        if parsed.scheme in ("http", "https"):
            return http(uri, settings)
    except failure.DownloadFailed:
        raise
    except Exception as e:  # obstore's configuration errors (a bad endpoint URL, a bad key)
        raise failure.DownloadFailed(f"{uri}: cannot configure the store: {failure.summary(e)}") from e
    raise failure.DownloadFailed(f"{uri}: the storage initializer does not fetch {parsed.scheme}://")
