"""S3 multipart uploads that were started and never completed: partial writes on S3.

s3fs writes an object of ``2 x 50 MiB`` or more (a large producer segment)
as a multipart upload: the parts are stored, and billed, as they arrive, but
the object exists only once ``CompleteMultipartUpload`` succeeds. s3fs aborts
the upload when a part fails; a writer killed in between (SIGKILL, a lost
node) leaves it open, invisible to every listing of objects, until someone
aborts it. A bucket lifecycle rule (``AbortIncompleteMultipartUpload``) does
that after some days; :func:`open_uploads` and :func:`abort_uploads` let the
Reclaimer do it as soon as the manifest shows the writer is gone
(docs/operations.md, *Partial writes*). Smaller objects are one ``PUT``:
nothing is left of a killed one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from torch_tgb.storage._writer import PartialObject

__all__ = ["abort_uploads", "open_uploads"]


def open_uploads(fs: Any, root: str, prefix: str) -> list[PartialObject]:
    """The open multipart uploads of keys under ``prefix`` of the namespace at ``root`` (``bucket/path``).

    ``fs``: an s3fs file system (``call_s3``). Each upload's size is the sum
    of its parts so far (one ListParts per upload: there are few).
    """
    bucket, _, path = root.partition("/")
    base = f"{path}/" if path else ""
    found = []
    markers: dict[str, str] = {}
    while True:
        page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=base + prefix, **markers)
        for upload in page.get("Uploads") or []:
            key = str(upload["Key"])[len(base) :]
            size = _uploaded_bytes(fs, bucket, str(upload["Key"]), str(upload["UploadId"]))
            found.append(PartialObject(key, str(upload["UploadId"]), size, _seconds(upload.get("Initiated"))))
        if not page.get("IsTruncated"):
            return sorted(found, key=lambda p: (p.key or "", p.name))
        markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}


def abort_uploads(fs: Any, root: str, partials: Iterable[PartialObject]) -> None:
    """Abort these uploads (their parts are deleted); one already completed or aborted is no error."""
    bucket, _, path = root.partition("/")
    base = f"{path}/" if path else ""
    for partial in partials:
        if partial.key is None:
            continue  # S3 names every upload's key: never one of ours
        try:
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=base + partial.key, UploadId=partial.name)
        except Exception as e:
            if _code(e) not in ("NoSuchUpload", "404"):
                raise


def _uploaded_bytes(fs: Any, bucket: str, key: str, upload_id: str) -> int | None:
    size = 0
    marker: dict[str, int] = {}
    while True:
        try:
            page = fs.call_s3("list_parts", Bucket=bucket, Key=key, UploadId=upload_id, **marker)
        except Exception as e:
            if _code(e) in ("NoSuchUpload", "404"):
                return 0  # completed or aborted since the listing
            raise
        size += sum(int(part.get("Size", 0)) for part in page.get("Parts") or [])
        if not page.get("IsTruncated"):
            return size
        marker = {"PartNumberMarker": int(page["NextPartNumberMarker"])}


def _seconds(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, (int, float)) else 0.0


def _code(error: BaseException) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (or what s3fs translated it into)."""
    for e in (error, error.__cause__, error.__context__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code"))
    if isinstance(error, FileNotFoundError):
        return "404"
    return None
