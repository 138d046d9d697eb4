"""A namespace in a local directory (also a shared POSIX file system).

Atomicity
---------
No reader ever sees a partial object under its final name: every write goes
to a temporary file in the target's directory (same file system), is written
completely and ``fsync``-ed, and only then gets its final name.

* ``put`` publishes with ``os.replace`` (atomic rename over any old object).
* ``open_writer`` (an object written in parts: a producer's segment) writes
  each part into the temp file as it comes and publishes like ``put``.
* ``put_if_absent`` publishes with ``os.link(temp, final)``: the kernel
  creates the link only if ``final`` does not exist, in one step, so among
  concurrent writers exactly one link succeeds and every other gets
  ``EEXIST`` and returns ``False``. (fsspec's ``pipe_file(mode="create")``
  checks, then writes: two writers can both "win" and a reader can see a
  half-written file. It is not used.)
* After publishing, the directory is ``fsync``-ed so the name survives a crash.

Temporary files are named ``.tgb-tmp.<random>.<target name>`` next to their
target; keys with a segment starting with ``.tgb-tmp.`` are refused and
``list`` skips such files, so leftovers of a crashed writer are never seen
as objects; ``list_partial`` / ``delete_partial`` see and remove them.

Reads open without blocking (``O_NONBLOCK``) and check the open descriptor
with ``fstat``: anything but a regular file (a FIFO, socket or device planted
in the namespace) is refused with :class:`InvalidKey` naming the key, never
waited on. ``storage/_regular.py`` does the same for the reader's mmap path.

Containment: a key is a relative path (see ``_keys``) and its resolved real
path (symlinks followed) must lie inside the namespace root, so a symlink in
the directory cannot lead a read or write out of the namespace. The path is
resolved on every call, so a directory swapped for a symlink later is caught
too (a check-then-use window of one syscall remains).
"""

from __future__ import annotations

import builtins
import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from torch_tgb.errors import AmbiguousWriteError, ConditionalWriteUnsupported, InvalidKey, ObjectNotFound
from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore, PartialObject, RangeFailure, RangeRequest
from torch_tgb.storage._errors import translate
from torch_tgb.storage._keys import validate_key, validate_prefix
from torch_tgb.storage._regular import open_nonblocking, require_regular
from torch_tgb.storage._local_writer import TMP_PREFIX as _TMP_PREFIX
from torch_tgb.storage._local_writer import (
    FileWriter,
    partial_files,
    remove_partial_files,
    temp_name,
    unlink_quietly,
    walk_files,
)
from torch_tgb.storage._writer import ObjectWriter

__all__ = ["LocalStore"]

#: Linux exposes each descriptor's real path: the containment check runs after open
_PROC_FD = os.path.isdir("/proc/self/fd")
# get_ranges batches up to this many bytes are read sequentially (see there)
_SEQUENTIAL_BYTES = 16 << 20
# Errors from os.link that mean "this file system has no hard links".
_NO_LINK_ERRNOS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS})


#: writes of a put whose temp file another process removed before it was published (then it is written again)
_TEMP_ATTEMPTS = 3
_T = TypeVar("_T")


class _TempVanished(Exception):
    """A put's temp file was removed before its rename: nothing was published, so the put may be written again."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class LocalStore(ObjectStore):
    """Objects are files under ``root``; keys are their relative paths.

    ``fsync=False`` skips the file and directory syncs (faster, still atomic
    for readers, not crash-durable): for scratch namespaces and benchmarks.
    """

    writes_in_place = True

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        root = os.fspath(root)
        if root.startswith("file://"):
            root = root[len("file://") :]
        self.root = os.path.realpath(os.path.expanduser(root))
        self.url = f"file://{self.root}"
        self.fsync = fsync
        self._root_slash = self.root.rstrip(os.sep) + os.sep

    # --- keys and paths ------------------------------------------------------

    def _path(self, key: str) -> str:
        """The absolute path of ``key``; refuses anything that resolves outside the root.

        Every call checks the path again: a directory that was inside the root
        a moment ago may since have been swapped for a symlink pointing
        elsewhere, so no earlier answer is trusted. The root itself is
        resolved once; below it each existing component is ``lstat``-ed (one
        syscall per key segment, cheaper than a full ``realpath``), and only a
        path that really contains a symlink pays for resolving it.
        """
        joined = self._joined(key)
        path = self.root
        for part in key.split("/"):
            path = f"{path}/{part}"
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                break  # nothing exists from here on: nothing to follow
            if stat.S_ISLNK(mode):
                if not self._inside(os.path.realpath(f"{self.root}/{key}")):
                    raise InvalidKey(f"{self.url}: key {key!r} resolves outside the namespace (symlink)")
                break
        return joined

    def _joined(self, key: str) -> str:
        """The path of a validated ``key`` under the root, not yet checked for symlinks."""
        key = validate_key(key, namespace=self.url)
        if any(p.startswith(_TMP_PREFIX) for p in key.split("/")):
            raise InvalidKey(f"{self.url}: key {key!r} uses the reserved prefix {_TMP_PREFIX!r}")
        return f"{self.root}/{key}"

    def _open_for_read(self, key: str, op: str) -> int:
        """Open ``key`` read-only and prove that the file opened lies inside the root.

        On Linux the check reads the descriptor's own path (``/proc/self/fd``)
        after opening: no window between check and use, and one ``readlink``
        instead of an ``lstat`` per key segment. Elsewhere the path is checked
        first (:meth:`_path`).
        """
        path = self._joined(key) if _PROC_FD else self._path(key)
        try:
            fd = open_nonblocking(path)
        except FileNotFoundError as e:
            self._path(key)  # a dangling link out of the namespace is a bad key, not a missing object
            raise translate(e, url=self.url, op=op, key=key) from e
        except OSError as e:
            raise translate(e, url=self.url, op=op, key=key) from e
        if _PROC_FD:
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                real = os.path.realpath(path)
            if not self._inside(real):
                os.close(fd)
                raise InvalidKey(f"{self.url}: key {key!r} resolves outside the namespace (symlink)")
        require_regular(fd, key, f"{self.url}: {op}")
        return fd

    def _inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self._root_slash)

    def local_path(self, key: str) -> str | None:
        return self._path(key)

    # --- reads -----------------------------------------------------------------

    def get(self, key: str) -> bytes:
        fd = self._open_for_read(key, "get")
        try:
            with open(fd, "rb") as f:  # owns and closes fd
                return f.read()
        except IsADirectoryError:
            raise ObjectNotFound(f"{self.url}: get {key!r}: no such object (a directory)") from None
        except OSError as e:
            raise translate(e, url=self.url, op="get", key=key) from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if not (0 <= start <= end):
            raise ValueError(f"{self.url}: invalid byte range [{start}, {end}) for key {key!r}")
        fd = self._open_for_read(key, "get_range")
        try:
            length = end - start
            data = os.pread(fd, length, start)
            if len(data) == length or not data:
                return data
            # A short read before the end of file: keep reading (rare, large reads).
            chunks = [data]
            got = len(data)
            while got < length:
                more = os.pread(fd, length - got, start + got)
                if not more:
                    break
                chunks.append(more)
                got += len(more)
            return b"".join(chunks)
        except IsADirectoryError:
            raise ObjectNotFound(f"{self.url}: get_range {key!r}: no such object (a directory)") from None
        except OSError as e:
            raise translate(e, url=self.url, op="get_range", key=key) from e
        finally:
            os.close(fd)

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = os.stat(path)
        except OSError as e:
            raise translate(e, url=self.url, op="stat", key=key) from e
        if not stat.S_ISREG(st.st_mode):
            raise ObjectNotFound(f"{self.url}: stat {key!r}: no such object (not a file)")
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def _listed(self, prefix: str) -> tuple[str, str, str]:
        """(validated prefix, the deepest directory it names completely, that directory's key prefix)."""
        prefix = validate_prefix(prefix, namespace=self.url)
        head = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, *head.split("/")) if head else self.root
        if not self._inside(os.path.realpath(start)):
            raise InvalidKey(f"{self.url}: prefix {prefix!r} resolves outside the namespace (symlink)")
        return prefix, start, f"{head}/" if head else ""

    def list(self, prefix: str = "") -> list[str]:
        prefix, start, base = self._listed(prefix)  # walk only the deepest directory the prefix names
        try:
            keys = [k for k, _ in walk_files(start, base, self._inside) if k.startswith(prefix)]
        except OSError as e:
            raise translate(e, url=self.url, op="list", key=prefix) from e
        return sorted(keys)

    def list_partial(self, prefix: str = "") -> builtins.list[PartialObject]:
        prefix, start, base = self._listed(prefix)  # matched against the key each temp file was to become
        return partial_files(start, base, prefix, self._inside, url=self.url)

    def delete_partial(self, partials: Iterable[PartialObject]) -> None:
        remove_partial_files(partials, lambda folder: self._path(folder) if folder else self.root, url=self.url)

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """Small batches are read in this thread: from the page cache a ``pread``
        takes microseconds, less than handing it to a pool (3x faster for 256 x
        64 KiB on 2 cores). Large batches use the pool so a cold disk sees
        several requests at once."""
        if sum(r.length for r in requests) <= _SEQUENTIAL_BYTES:
            return [self._read_one(r, continue_on_error) for r in requests]
        return super().get_ranges(requests, continue_on_error=continue_on_error)

    # --- writes ----------------------------------------------------------------

    def _create_temp(self, path: str, key: str, op: str) -> tuple[str, int]:
        """A fresh temp file beside ``path`` (never seen as an object): its path and a write descriptor."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, temp_name(os.path.basename(path)))
        try:
            os.makedirs(directory, exist_ok=True)
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            raise translate(e, url=self.url, op=op, key=key) from e

    def _write_temp(self, path: str, data: Buffer, key: str, op: str) -> str:
        """Write ``data`` completely to a fresh temp file beside ``path``; return its path."""
        tmp, fd = self._create_temp(path, key, op)
        try:
            view = memoryview(data).cast("B")
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
        except BaseException as e:
            os.close(fd)
            unlink_quietly(tmp)
            if isinstance(e, OSError):
                raise translate(e, url=self.url, op=op, key=key) from e
            raise
        os.close(fd)
        return tmp

    def _sync_dir(self, path: str) -> None:
        if not self.fsync:
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, data: Buffer) -> None:
        path = self._path(key)
        self._write_and_publish(path, data, key, "put", lambda tmp: self._publish(tmp, path, key, "put"))

    def _write_and_publish(self, path: str, data: Buffer, key: str, op: str, publish: Callable[[str], _T]) -> _T:
        """Write ``data`` to a temp file beside ``path`` and ``publish`` it; written again when the temp file
        vanished before it was published (``_TempVanished``, see :meth:`_publish`), a few times at most."""
        for attempt in range(_TEMP_ATTEMPTS):
            tmp = self._write_temp(path, data, key, op)
            try:
                return publish(tmp)
            except _TempVanished as e:
                if attempt + 1 == _TEMP_ATTEMPTS:
                    raise translate(e.error, url=self.url, op=op, key=key) from e.error
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _publish(self, tmp: str, path: str, key: str, op: str) -> None:
        """Give the written, synced temp file ``tmp`` its final name ``path`` (``put``'s commit point).

        ``_TempVanished`` if ``tmp`` was removed before the rename (a reclaimer
        whose clock runs far ahead took it for a killed writer's leftover):
        ``put`` writes it again, as nothing was published.
        """
        try:
            os.replace(tmp, path)  # atomic: readers see the old or the new object
            self._sync_dir(path)
        except OSError as e:
            unlink_quietly(tmp)
            if isinstance(e, FileNotFoundError) and os.path.isdir(os.path.dirname(path)):
                raise _TempVanished(e) from e
            raise translate(e, url=self.url, op=op, key=key) from e

    def open_writer(self, key: str, *, size_hint: int = 0) -> ObjectWriter:
        """Written in place: a temp file beside the target takes every ``write_at``; ``commit`` renames it."""
        path = self._path(key)  # validated and contained, as put checks it
        tmp, fd = self._create_temp(path, key, "put")
        return FileWriter(self.url, key, tmp, fd, fsync=self.fsync, publish=lambda: self._publish_written(tmp, path, key))

    def _publish_written(self, tmp: str, path: str, key: str) -> None:
        """An ``open_writer``'s commit: its bytes are gone with a removed temp file, so that is the writer's error."""
        try:
            self._publish(tmp, path, key, "put")
        except _TempVanished as e:
            raise translate(e.error, url=self.url, op="put", key=key) from e.error

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        path = self._path(key)
        if os.path.lexists(path):
            return False  # already taken: skip writing a temp file (linearisable: it existed during the call)
        if not self._write_and_publish(path, data, key, "put_if_absent", lambda tmp: self._link(tmp, path, key)):
            return False
        try:
            self._sync_dir(path)
        except OSError as e:
            # Published, durability unknown: ambiguous, so a retry reads it back.
            raise AmbiguousWriteError(
                f"{self.url}: put_if_absent {key!r}: created, but syncing its directory failed ({e})"
            ) from e
        return True

    def _link(self, tmp: str, path: str, key: str) -> bool:
        """``put_if_absent``'s commit point: link(2) fails with EEXIST if the name exists (then False)."""
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except FileNotFoundError as e:  # the temp file was removed (see _publish): nothing was published
            if not os.path.isdir(os.path.dirname(path)):
                raise translate(e, url=self.url, op="put_if_absent", key=key) from e
            raise _TempVanished(e) from e
        except OSError as e:
            if e.errno in _NO_LINK_ERRNOS:
                raise ConditionalWriteUnsupported(
                    f"{self.url}: put_if_absent {key!r}: the file system refuses hard links "
                    f"({e.strerror}); atomic create-if-absent is impossible here"
                ) from e
            raise translate(e, url=self.url, op="put_if_absent", key=key) from e
        finally:
            unlink_quietly(tmp)

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        paths = [(k, self._path(k)) for k in keys]
        for key, path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except IsADirectoryError:
                continue  # a "directory" is a prefix, not an object: nothing to delete
            except OSError as e:
                if e.errno == errno.EPERM and os.path.isdir(path):  # macOS reports EPERM
                    continue
                raise translate(e, url=self.url, op="delete", key=key) from e
