"""Failures no retry cures: no credentials found, and a store that refuses connections.

obstore looks for credentials in the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``),
then asks the cloud's instance-metadata server for the machine's own.  On a machine
outside that cloud the metadata server refuses the connection, does not answer, or (behind
a proxy) answers 403: each request then fails the same way, however often it is retried.
Such a failure is told by the structured Rust error obstore prints (``Debug source:``):
the failed request went to a metadata server's credential path (the URI's path, whatever
its host: ``AWS_METADATA_ENDPOINT`` moves it), or the store found no account at all
(Azure's ``MissingAccount``).  A throttled metadata server (429, 5xx) stays a transient
failure: it runs on the cloud's machines, where the credentials are.

>>> failure = (
...     'Generic S3 error: ...\\n\\nDebug source:\\nGeneric {\\n    store: "S3",\\n'
...     '    source: RetryError(RetryErrorImpl { method: PUT,\\n uri: Some(\\n'
...     '        http://169.254.169.254/latest/api/token,\\n    ),\\n'
...     '    inner: Http(HttpError { kind: Connect, ...')
>>> _credential_store(failure)
'S3'
"""

from __future__ import annotations

import os
import re

from chute._core.errors import CredentialsNotFoundError
from chute._remote.obstore_errors import causes, rust_error

# The paths of the metadata servers' credential requests: AWS IMDS (token, role),
# GCE's service-account token, Azure's managed identity.
_CREDENTIAL_PATHS = (
    "/latest/api/token",
    "/latest/meta-data/iam/",
    "/computeMetadata/v1/instance/service-accounts/",
    "/metadata/identity/oauth2/token",
)
_STORE = re.compile(r'\bstore: "(\w+)"')
_URI = re.compile(r"\buri: Some\(\s*([^\s,)]+)")
_STATUS = re.compile(r"\bstatus: (\d{3})\b")
_MISSING_ACCOUNT = re.compile(r"\bsource: MissingAccount\b")
_REFUSED = re.compile(r"\bkind: ConnectionRefused\b")
_SCHEMES = {"S3": "s3", "GCS": "gs", "MicrosoftAzure": "az"}

HINTS = {
    "s3": (
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
        "temporary keys), or run on a machine with an instance role. A profile "
        "(AWS_PROFILE, ~/.aws/credentials) is not read by chute's S3 client: export its "
        'keys with eval "$(aws configure export-credentials --format env)"'
    ),
    "gs": (
        "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file (or run "
        "gcloud auth application-default login), or run on a machine with a service "
        "account; for the GCS emulator set STORAGE_EMULATOR_HOST"
    ),
    "az": (
        "set AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or "
        "AZURE_STORAGE_SAS_KEY, or AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and "
        "AZURE_TENANT_ID), or run on a machine with a managed identity"
    ),
}
ENDPOINTS = {
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "gs": ("STORAGE_EMULATOR_HOST",),
    "az": ("AZURE_STORAGE_ENDPOINT",),
}


def _credential_store(text: str) -> str | None:
    """The store (``"S3"``, ``"GCS"``, ``"MicrosoftAzure"``) whose credential lookup
    failed for good in the Rust error ``text``, or ``None``."""
    store = _STORE.search(text)
    if store is None:
        return None
    if _MISSING_ACCOUNT.search(text):
        return store.group(1)
    uri = _URI.search(text)
    if uri is None or not any(path in uri.group(1) for path in _CREDENTIAL_PATHS):
        return None
    status = _STATUS.search(text[uri.end() :])
    if status is not None and (int(status.group(1)) == 429 or int(status.group(1)) >= 500):
        return None  # a throttled or failing metadata server: on the cloud, retried
    return store.group(1)


def missing_credentials(exc: BaseException, what: str) -> CredentialsNotFoundError | None:
    """A ``CredentialsNotFoundError`` naming ``what`` (``"HEAD s3://b/k"``) if ``exc``,
    or an exception it was raised from, is a credential lookup that found none."""
    for failure in causes(exc):
        store = _credential_store(rust_error(failure))
        if store is not None:
            scheme = _SCHEMES.get(store, "")
            hint = HINTS.get(scheme, "set the store's credentials in the environment")
            if scheme == "s3":  # in Python, a profile can also be read through boto3
                hint += (
                    ", or pass filesystem=obstore.store.S3Store(bucket, credential_provider="
                    "obstore.auth.boto3.Boto3CredentialProvider())"
                )
            reason = str(failure).split("\n", 1)[0]
            return CredentialsNotFoundError(
                f"{what}: no credentials found for {store} ({reason}); {hint}."
            )
    return None


def is_refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it was raised from) is a connection the server refused."""
    return any(
        isinstance(failure, ConnectionRefusedError) or _REFUSED.search(rust_error(failure))
        for failure in causes(exc)
    )


def endpoint_hint(url: str) -> str:
    """What to check when the store for ``url`` refuses connections: the endpoint variables
    of its scheme, with their values."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    names = ENDPOINTS.get(scheme, ())
    set_now = [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]
    if set_now:
        return f"check the endpoint ({', '.join(set_now)}) and that its server runs"
    if names:
        return f"check the endpoint ({' or '.join(names)}, unset: the cloud's own)"
    return "check the URL's host and port, and that its server runs"
