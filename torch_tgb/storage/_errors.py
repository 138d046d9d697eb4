"""The one place where backend exceptions become torch_tgb errors.

Backends (builtin ``OSError``, fsspec, s3fs, botocore, aiohttp, the Google
Cloud Storage and Azure Blob clients) report the same
conditions in many shapes. :func:`translate` maps them onto the hierarchy of
:mod:`torch_tgb.errors` so that retry decisions and user messages depend on
one table:

==========================================  =================================
``FileNotFoundError``, ``NoSuchKey``, 404   :class:`ObjectNotFound`
``ENOSPC``, ``EDQUOT``, ``EFBIG``           :class:`StorageFull`
``PermissionError``, 403, ``AccessDenied``  :class:`StorageError` (permanent)
timeouts, 5xx, ``SlowDown``, 409, EBUSY     :class:`TransientStorageError`
a timeout after a write was sent            :class:`AmbiguousWriteError`
anything else                               :class:`StorageError`
==========================================  =================================

Messages name the (credential-free) namespace URL, the operation and the key;
``storage_options`` are never formatted into them.
"""

from __future__ import annotations

import errno

from torch_tgb.errors import (
    AmbiguousWriteError,
    ObjectNotFound,
    StorageError,
    StorageFull,
    TGBError,
    TransientStorageError,
)

__all__ = ["is_transient", "translate", "translate_hidden"]

_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EBUSY,
        errno.EAGAIN,
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        getattr(errno, "EREMOTEIO", errno.EIO),
    }
)
# S3 error codes (ClientError.response["Error"]["Code"]) that are worth a retry.
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        "ConditionalRequestConflict",
        "RequestLimitExceeded",
        "409",
        "429",
        "500",
        "502",
        "503",
        "504",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
# Exception class names (from libraries we do not import here) that mean
# "the connection failed or timed out".
_NETWORK_NAMES = frozenset(
    {
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ConnectTimeout",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ServerTimeoutError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientConnectionError",
        "ClientPayloadError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ReadTimeout",  # requests (google-cloud-storage)
        "ConnectionError",  # requests' own, not the builtin (which is handled by isinstance)
        "ServiceRequestError",  # azure-core: the request could not be sent
        "ServiceResponseError",  # azure-core: sent, but no (complete) reply
        "DataCorruption",  # google-resumable-media: a download failed its checksum in transit
    }
)
# Of those, the ones that may strike after the request body went out.
_AFTER_SEND_NAMES = frozenset(
    {
        "ReadTimeoutError",
        "ServerTimeoutError",
        "ServerDisconnectedError",
        "ConnectionClosedError",
        "ReadTimeout",
        "ServiceResponseError",
    }
)


def _client_error_code(exc: BaseException) -> str | None:
    """The S3 error code of ``exc`` or of a botocore error it was translated from."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response: object = getattr(current, "response", None)
        if isinstance(response, dict):
            err = response.get("Error") or {}
            code = err.get("Code")
            if code:
                return str(code)
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if status:
                return str(status)
        current = current.__cause__ or current.__context__
    return None


def _http_status(exc: BaseException) -> str | None:
    """The HTTP status of a Google (``exc.code``) or Azure (``exc.status_code``) client error."""
    for name in ("status_code", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return str(value)
    return None


def _chain_names(exc: BaseException) -> set[str]:
    names: set[str] = set()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.update(cls.__name__ for cls in type(current).__mro__)
        current = current.__cause__ or current.__context__
    return names


def _is_timeout(exc: BaseException, names: set[str]) -> bool:
    return isinstance(exc, TimeoutError) or "TimeoutError" in names or bool(names & _NETWORK_NAMES)


def is_transient(exc: BaseException) -> bool:
    """True if ``exc`` (translated or not) is worth retrying."""
    if isinstance(exc, TGBError):
        return isinstance(exc, TransientStorageError)
    return isinstance(translate(exc, url="", op="", key=None), TransientStorageError)


def translate(
    exc: BaseException,
    *,
    url: str,
    op: str,
    key: str | None,
    write_sent: bool = False,
    redact: tuple[str, ...] = (),
) -> TGBError:
    """Map ``exc`` to the most specific torch_tgb storage error.

    ``write_sent`` says the operation was a write whose request may have
    reached the store: a timeout then means the outcome is unknown and
    becomes :class:`AmbiguousWriteError`. Strings in ``redact`` (secrets the
    backend might echo) are replaced by ``***`` in the message. A
    :class:`TGBError` is returned unchanged. The caller raises the result
    ``from exc``.
    """
    if isinstance(exc, TGBError):
        return exc
    where = f"{url}: {op} {key!r}" if key is not None else f"{url}: {op}"
    detail = f"{type(exc).__name__}: {exc}"
    for secret in redact:
        if secret:
            detail = detail.replace(secret, "***")
    code = _client_error_code(exc) or _http_status(exc)
    names = _chain_names(exc)
    err_no = getattr(exc, "errno", None)

    if isinstance(exc, FileNotFoundError) or code in _NOT_FOUND_CODES:
        return ObjectNotFound(f"{where}: no such object")
    if err_no in _FULL_ERRNOS:
        return StorageFull(f"{where}: store is full ({detail})")
    if isinstance(exc, PermissionError) or code in ("AccessDenied", "401", "403"):
        return StorageError(f"{where}: permission denied ({detail})")
    timeout = _is_timeout(exc, names)
    if timeout and write_sent and (isinstance(exc, TimeoutError) or names & _AFTER_SEND_NAMES):
        return AmbiguousWriteError(f"{where}: no reply after the write was sent ({detail})")
    if timeout or code in _TRANSIENT_CODES or err_no in _TRANSIENT_ERRNOS or isinstance(exc, ConnectionError):
        return TransientStorageError(f"{where}: transient failure ({detail})")
    return StorageError(f"{where}: failed ({detail})")


def translate_hidden(
    exc: BaseException,
    *,
    url: str,
    op: str,
    key: str | None,
    write_sent: bool = False,
    redact: tuple[str, ...] = (),
) -> TGBError:
    """:func:`translate`, chained to ``exc`` unless ``exc`` (or its causes) would print a secret.

    Backends raise the result as it is (``raise translate_hidden(...)``): the
    chain is already set, and dropped with ``__suppress_context__`` where a
    traceback would show a secret from ``redact``.
    """
    error = translate(exc, url=url, op=op, key=key, write_sent=write_sent, redact=redact)
    if error is exc:
        return error
    if any(secret and secret in _chain_text(exc) for secret in redact):
        error.__cause__ = None
        error.__suppress_context__ = True  # the traceback must not print the secret
    else:
        error.__cause__ = exc
    return error


def _chain_text(exc: BaseException) -> str:
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(parts) < 16:
        parts.append(f"{current!r} {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)
