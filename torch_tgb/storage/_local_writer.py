"""A local object written in place: :meth:`LocalStore.open_writer`.

Each ``write_at`` goes straight into a temporary file beside the target
(``pwritev``: one copy, into the page cache). ``commit`` is ``put``'s
commit point: ``fsync`` the file, rename it over the key, ``fsync`` the
directory. Until then the object does not exist under its key, and a crash
leaves only a ``.tgb-tmp.*`` file, which no listing shows.

Temp files are named ``.tgb-tmp.<16 hex>.<target>``, ``<target>`` the name
the file gets on commit (:func:`temp_name`). A producer's segment key names
its producer, epoch and first offset, so a temp file left by a killed writer
says which incarnation owned it: :func:`partial_files` lists them as
:class:`~torch_tgb.storage.PartialObject` values with that key, and the
Reclaimer (or the producer's next incarnation) judges from the manifest
whether the owner may still be writing. A name too long for the file system
with the target appended keeps only the token (its key is then unknown).

The kernel would leave a segment's pages dirty until that ``fsync`` (its
writeback starts seconds later, or at a share of memory), so the whole
object would go to the disk at the commit, with the caller waiting. Instead,
every :data:`WRITEBACK_BYTES` written, a thread of the writer's own syncs
what is there (``fdatasync``) while the caller goes on encoding: the commit's
``fsync`` waits only for the last stretch. The commit still syncs the whole
file, so durability does not depend on those syncs (an error in one fails
the commit).
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from torch_tgb.errors import InvalidKey
from torch_tgb.storage._errors import translate
from torch_tgb.storage._writer import Buffer, ObjectWriter, PartialObject

__all__ = ["TMP_PREFIX", "FileWriter", "partial_files", "remove_partial_files", "temp_name", "temp_target",
           "unlink_quietly", "walk_files"]

#: the first characters of every temp file's name; keys never have a segment starting with them
TMP_PREFIX = ".tgb-tmp."
_TOKEN_HEX = 16
_NAME_MAX = 255  # bytes in one file name (ext4, xfs, NFS)

#: buffers handed to one ``pwritev`` (below every platform's IOV_MAX)
_IOV_BATCH = 512

#: bytes written between two background syncs of an object being written (the commit syncs the rest)
WRITEBACK_BYTES = 8 << 20


class FileWriter(ObjectWriter):
    """Writes ``key`` into the temp file ``tmp`` (open as ``fd``); ``commit`` syncs it and calls ``publish``.

    ``url``: the namespace (for errors); ``fsync``: whether to sync the file
    before publishing; ``publish()``: gives the temp file its final name
    (``LocalStore._publish``: rename, then sync the directory).
    """

    def __init__(self, url: str, key: str, tmp: str, fd: int, *, fsync: bool, publish: Callable[[], None]) -> None:
        self.url = url
        self.key = key
        self._tmp, self._fd = tmp, fd
        self._fsync = fsync
        self._publish = publish
        self._size = 0
        self._synced = 0  # bytes up to which a background sync was started
        self._syncing: threading.Thread | None = None
        self._sync_error: OSError | None = None

    def write_at(self, offset: int, buffers: Sequence[Buffer]) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.url}: {self.key!r} was committed or aborted; nothing more can be written")
        views = [memoryview(b).cast("B") for b in buffers]
        views = [v for v in views if len(v)]
        try:
            for first in range(0, len(views), _IOV_BATCH):
                offset = _pwrite_all(self._fd, views[first : first + _IOV_BATCH], offset)
        except OSError as e:
            self.abort()  # a full disk: nothing of this object is kept
            raise translate(e, url=self.url, op="put", key=self.key) from e
        self._size = max(self._size, offset)
        if self._fsync and self._size - self._synced >= WRITEBACK_BYTES and not self._sync_running():
            self._synced = self._size
            self._syncing = threading.Thread(target=self._sync_in_background, args=(self._fd,),
                                             name="tgb-writeback", daemon=True)
            self._syncing.start()
        return offset

    def _sync_running(self) -> bool:
        return self._syncing is not None and self._syncing.is_alive()

    def _sync_in_background(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError as e:  # kept for the commit, which syncs again and fails with it
            self._sync_error = e

    def _join_sync(self) -> None:
        """Wait for the background sync (before the fd is synced for good or closed)."""
        if self._syncing is not None:
            self._syncing.join()
            self._syncing = None

    def commit(self) -> None:
        if self._fd < 0:
            raise ValueError(f"{self.url}: {self.key!r} was committed or aborted already")
        fd, self._fd = self._fd, -1
        self._join_sync()
        try:
            if self._sync_error is not None:
                raise self._sync_error
            if os.fstat(fd).st_size < self._size:  # a gap at the end reads as zeros: give the file its size
                os.ftruncate(fd, self._size)
            if self._fsync:
                os.fsync(fd)
        except OSError as e:
            os.close(fd)
            unlink_quietly(self._tmp)
            raise translate(e, url=self.url, op="put", key=self.key) from e
        os.close(fd)
        self._publish()

    def abort(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            self._join_sync()
            os.close(fd)
            unlink_quietly(self._tmp)

    @property
    def size(self) -> int:
        return self._size

    def __del__(self) -> None:  # dropped without commit or abort (an exception on the way): no temp file left
        if getattr(self, "_fd", -1) >= 0:
            self.abort()


def _pwrite_all(fd: int, views: list[memoryview], offset: int) -> int:
    """Write every byte of ``views`` from ``offset`` (a write may stop short); returns the offset after them."""
    at = 0  # the first view not written completely
    while at < len(views):
        n = os.pwritev(fd, views[at:], offset)
        if n <= 0:
            raise OSError(f"pwritev wrote {n} bytes")
        offset += n
        while at < len(views) and n >= len(views[at]):
            n -= len(views[at])
            at += 1
        if n:
            views[at] = views[at][n:]
    return offset


def unlink_quietly(path: str) -> None:
    """Remove ``path``; nothing if it is gone already or cannot be removed (a temp file's best effort)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def temp_name(target: str) -> str:
    """A fresh temp file name for an object to be published as ``target`` (a file name, no directory)."""
    token = secrets.token_hex(_TOKEN_HEX // 2)
    name = f"{TMP_PREFIX}{token}.{target}"
    return name if len(name.encode()) <= _NAME_MAX else f"{TMP_PREFIX}{token}"


def temp_target(name: str) -> str | None:
    """The file name the temp file ``name`` would have been published as; ``None`` if its name does not say."""
    token, dot, target = name[len(TMP_PREFIX) :].partition(".")
    if not dot or not target or len(token) != _TOKEN_HEX or token.strip("0123456789abcdef"):
        return None
    return target


def partial_files(
    directory: str, base: str, prefix: str, inside: Callable[[str], bool], *, url: str
) -> list[PartialObject]:
    """Temp files under ``directory`` (key prefix ``base``) whose key, or path if unknown, starts with ``prefix``.

    ``inside(real_path)``: whether a symlinked directory stays in the
    namespace (one that leads out is not followed). Sorted by name.
    """
    found = []
    try:
        entries = list(walk_files(directory, base, inside, temps=True))
    except OSError as e:
        raise translate(e, url=url, op="list_partial", key=prefix) from e
    for rel, entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # published or removed since the scan
        if not stat.S_ISREG(st.st_mode):
            continue
        folder, _, name = rel.rpartition("/")
        target = temp_target(name)
        key = None if target is None else f"{folder}/{target}" if folder else target
        if (key or rel).startswith(prefix):
            found.append(PartialObject(key, rel, st.st_size, st.st_mtime))
    return sorted(found, key=lambda p: p.name)


def remove_partial_files(partials: Iterable[PartialObject], folder_path: Callable[[str], str], *, url: str) -> None:
    """Unlink the temp files ``partials`` name; ``folder_path(folder)``: the checked path of a key's folder.

    A name that is not a temp file's is refused: objects go by ``delete``.
    """
    for partial in partials:
        folder, _, name = partial.name.rpartition("/")
        if not name.startswith(TMP_PREFIX) or name == TMP_PREFIX:
            raise InvalidKey(f"{url}: {partial.name!r} is not a temp file of an unfinished write")
        try:
            os.unlink(f"{folder_path(folder)}/{name}")
        except FileNotFoundError:
            continue  # published or removed meanwhile
        except OSError as e:
            raise translate(e, url=url, op="delete_partial", key=partial.name) from e


def walk_files(
    directory: str, base: str, inside: Callable[[str], bool], *, temps: bool = False
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Files under ``directory`` as ``(key, entry)`` (``base``: the directory's key prefix), in no order.

    Objects, or with ``temps`` the temp files of unfinished writes (never
    both: a temp file is never an object). A symlink is followed only if
    ``inside(its real path)`` says it stays in the namespace; temp files are
    never links.
    """
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        temp = entry.name.startswith(TMP_PREFIX)
        if entry.is_symlink() and (temp or not inside(os.path.realpath(entry.path))):
            continue  # a link out of the namespace is not an object of it
        if temp:
            if temps:
                yield f"{base}{entry.name}", entry
        elif entry.is_dir():
            yield from walk_files(entry.path, f"{base}{entry.name}/", inside, temps=temps)
        elif entry.is_file() and not temps:
            yield f"{base}{entry.name}", entry
