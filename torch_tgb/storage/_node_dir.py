"""The node-local directory of a :class:`~torch_tgb.storage.NodeSharedStore`: answers, locks, pruning.

One directory per namespace URL, shared by every reader process of a node::

    <base>/torch_tgb-<euid>/                 0700, owned by us (base: /dev/shm, else the temp dir)
      <sha256(url, boot id)[:24]>/           one namespace on this node since boot (0700)
        lock/<00..3f>, lock/own-<hash>       flock stripes (one fetch of a key at a time on the node), the fence's lock
        tmp/<pid>-<random>                   an answer being written (never read)
        <name>                               answers about the namespace itself (its dataset.json)
        <incarnation>/<name>                 answers about one incarnation of the namespace
      prune.lock                             one pruning process at a time

    answer = payload | "TGBN" | flags u32 | stamp f64 | crc32c u32 | len(payload) u64   (little-endian)

``flags`` bit 0: the object was absent (no payload). ``stamp``: the
``CLOCK_MONOTONIC`` time at which the request that got this answer was sent
(the clock is one per machine, so stamps compare across processes; the boot
id in the directory's name keeps a previous boot's stamps out). The CRC
covers the payload, the flags and the stamp.

Every directory is opened with ``O_NOFOLLOW`` and checked (a directory, ours,
no access for others) before anything is read or written in it, and every
file operation is relative to such a descriptor: a symlink planted in the
directory is never followed, a FIFO or device never opened for longer than a
non-blocking ``open`` (it is not a regular file: discarded), a file larger
than the limit never read. An answer is written to ``tmp/`` and renamed into
place, so a reader sees a whole answer or none; one that fails its checks is
deleted and treated as missing. Locks are ``flock`` stripes, released by the
kernel when their holder dies.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import struct
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import NamedTuple

import google_crc32c

__all__ = ["Answer", "NodeDir", "UnsafeDirectory", "default_base"]

_TRAILER = struct.Struct("<4sIdIQ")
_MAGIC = b"TGBN"
_ABSENT = 1
_STRIPES = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_STALE_TMP = 60.0  # seconds: a temporary file this old belongs to a dead writer
_STALE_NAMESPACE = 86400.0  # seconds: a namespace directory unused this long is removed whole
_TOUCH_EVERY = 10.0  # seconds between mtime updates of an answer read (its LRU age)


class UnsafeDirectory(OSError):
    """A directory of the node share is not ours alone (another owner, open to others, or a symlink)."""


class Answer(NamedTuple):
    """What one request learned: the object's bytes, or ``None`` if it was absent; ``stamp``: when it was asked."""

    payload: bytes | None
    stamp: float


def default_base() -> str:
    """``/dev/shm`` where it exists (memory, gone at reboot), else the temp dir."""
    import tempfile

    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class NodeDir:
    """The directory of one namespace URL under ``base`` (see the module docstring). Thread-safe.

    ``max_bytes`` bounds everything under ``<base>/torch_tgb-<euid>`` (all
    namespaces; least recently used answers go first); ``max_answer`` bounds
    one answer's payload.
    """

    def __init__(self, base: str, url: str, *, max_bytes: int, max_answer: int) -> None:
        if max_bytes <= 0 or max_answer <= 0:
            raise ValueError(f"max_bytes and max_answer must be positive, got {max_bytes=}, {max_answer=}")
        self.base = os.path.abspath(base)
        self.home = os.path.join(self.base, f"torch_tgb-{os.geteuid()}")
        self.name = hashlib.sha256(f"{url}\n{_boot_id()}".encode()).hexdigest()[:24]
        self.path = os.path.join(self.home, self.name)
        self.max_bytes = max_bytes
        self.max_answer = min(max_answer, max_bytes // 4)
        self._fds: dict[str, int] = {}  # "" (the namespace dir), "lock", "tmp", incarnations -> checked descriptors
        self._written = 0  # bytes written since the last prune
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def __getstate__(self) -> dict[str, object]:  # descriptors stay in their process: reopened on first use
        state = dict(self.__dict__)
        state["_fds"] = {}
        del state["_finalizer"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def close(self) -> None:
        self._finalizer()

    # --- directories ----------------------------------------------------------------

    def _dir(self, sub: str) -> int:
        """A checked descriptor of ``sub`` ("" = the namespace directory), created on first use."""
        fd = self._fds.get(sub)
        if fd is not None:
            return fd
        if sub:
            fd = _open_checked(sub, self._dir(""))
        else:
            os.makedirs(self.base, exist_ok=True)
            base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                home = _open_checked(os.path.basename(self.home), base)
            finally:
                os.close(base)
            try:
                fd = _open_checked(self.name, home)
            finally:
                os.close(home)
        # setdefault: a thread that raced us keeps its descriptor, ours is closed
        kept = self._fds.setdefault(sub, fd)
        if kept != fd:
            os.close(fd)
        return kept

    # --- answers --------------------------------------------------------------------

    def read(self, sub: str, name: str) -> Answer | None:
        """The answer stored as ``sub/name``, or None (absent, or failed a check: then it is deleted)."""
        where = self._dir(sub)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=where)
        except FileNotFoundError:
            return None
        except OSError:  # a symlink (ELOOP), a file we may not read: not an answer of ours
            self._discard(where, name)
            return None
        try:
            answer = self._parse(fd)
        finally:
            os.close(fd)
        if answer is None:
            self._discard(where, name)
        return answer

    def _parse(self, fd: int) -> Answer | None:
        st = os.fstat(fd)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not (
                _TRAILER.size <= size <= self.max_answer + _TRAILER.size):
            return None
        chunks, got = [], 0
        while got < size:
            chunk = os.read(fd, size - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        if len(data) != size:
            return None
        magic, flags, stamp, crc, length = _TRAILER.unpack_from(data, size - _TRAILER.size)
        payload = data[: size - _TRAILER.size]
        if magic != _MAGIC or length != len(payload) or crc != _crc(payload, flags, stamp) or (
                flags & _ABSENT and length) or flags & ~_ABSENT:
            return None
        if time.time() - st.st_mtime > _TOUCH_EVERY:
            with contextlib.suppress(OSError):
                os.utime(fd)  # least recently used goes first when pruning
        return Answer(None if flags & _ABSENT else payload, stamp)

    def write(self, sub: str, name: str, answer: Answer) -> bool:
        """Store ``answer`` as ``sub/name`` (temporary file, then rename); False if it could not be stored."""
        payload = answer.payload or b""
        flags = _ABSENT if answer.payload is None else 0
        if len(payload) > self.max_answer:
            return False
        blob = payload + _TRAILER.pack(_MAGIC, flags, answer.stamp, _crc(payload, flags, answer.stamp), len(payload))
        tmp_dir, where = self._dir("tmp"), self._dir(sub)
        tmp = f"{os.getpid()}-{uuid.uuid4().hex}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=tmp_dir)
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            # atomic: readers see the whole answer or the one before; a symlink or FIFO at `name` is replaced
            os.replace(tmp, name, src_dir_fd=tmp_dir, dst_dir_fd=where)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=tmp_dir)
            if e.errno == errno.EISDIR or e.errno == errno.ENOTEMPTY:
                self._discard(where, name)  # a directory planted at the name: removed if empty
            raise
        self._written += len(blob)
        if self._written > self.max_bytes // 16:
            self.prune()
        return True

    def drop(self, sub: str, name: str) -> None:
        """Forget the answer ``sub/name`` (if any)."""
        self._discard(self._dir(sub), name)

    @staticmethod
    def _discard(where: int, name: str) -> None:
        try:
            os.unlink(name, dir_fd=where)
        except IsADirectoryError:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=where)
        except OSError:
            pass

    # --- locks ----------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, name: str, *, timeout: float, own: bool = False) -> Iterator[bool]:
        """Hold the node-wide lock stripe of ``name`` for the block; yields False if ``timeout`` passed first.

        ``own``: a lock file of ``name``'s own instead of a stripe shared with
        other names, for a lock taken while a stripe is held (no stripe is
        ever waited for by its own holder).

        ``flock``: the kernel releases it when its holder dies, so a killed
        process never blocks the others for longer than its death. A holder
        stuck alive (stopped, or in a request that hangs) delays the others
        by ``timeout`` at most: they then go on without it.
        """
        digest = hashlib.sha256(name.encode()).hexdigest()
        stripe = f"own-{digest[:16]}" if own else f"{int(digest[:8], 16) % _STRIPES:02x}"
        fd = os.open(stripe, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._dir("lock"))
        try:
            held = _flock(fd, timeout)
            try:
                yield held
            finally:
                if held:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    # --- bounds ---------------------------------------------------------------------

    def prune(self) -> None:
        """Delete dead temporary files, namespaces unused for a day, then least recently used answers to 90%.

        One process at a time (a non-blocking lock: a busy pruner is enough).
        Walks only directories (never a symlink) under our own checked home.
        """
        self._written = 0
        try:
            fd = os.open(os.path.join(self.home, "prune.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except OSError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return
            self._prune_locked()
        finally:
            os.close(fd)

    def _prune_locked(self) -> None:
        now = time.time()
        answers: list[tuple[float, int, str]] = []
        for ns in _subdirs(self.home):
            files = list(_files(ns.path, depth=2))
            newest = max((st.st_mtime for _, st in files), default=ns.stat(follow_symlinks=False).st_mtime)
            if ns.name != self.name and now - newest > _STALE_NAMESPACE:
                _remove_tree(ns.path)
                continue
            for path, st in files:
                parent = os.path.basename(os.path.dirname(path))
                if parent == "tmp":
                    if now - st.st_mtime > _STALE_TMP:
                        _unlink(path)  # a writer that died
                elif parent != "lock":
                    answers.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in answers)
        if total <= self.max_bytes:
            return
        for _, size, path in sorted(answers):
            if total <= self.max_bytes * 0.9:
                break
            _unlink(path)
            total -= size


def _open_checked(name: str, parent: int) -> int:
    """``parent/name`` as a directory descriptor, created 0700 if missing; refused unless ours alone."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectory(f"{name!r} is a symlink or not a directory") from e
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise UnsafeDirectory(f"{name!r} belongs to uid {st.st_uid} with mode {stat.filemode(st.st_mode)}; "
                              f"the node share needs a directory of uid {os.geteuid()} closed to others (0700)")
    return fd


def _flock(fd: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _crc(payload: bytes, flags: int, stamp: float) -> int:
    return int(google_crc32c.extend(google_crc32c.value(payload), struct.pack("<Id", flags, stamp)))


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def _subdirs(root: str) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _files(root: str, *, depth: int) -> Iterator[tuple[str, os.stat_result]]:
    """Files (anything not a directory, symlinks included, never followed) up to ``depth`` levels below ``root``."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth > 1:
                    yield from _files(entry.path, depth=depth - 1)
            else:
                yield entry.path, entry.stat(follow_symlinks=False)
        except OSError:
            continue


def _remove_tree(root: str) -> None:
    for path, _ in _files(root, depth=2):
        _unlink(path)
    for sub in _subdirs(root):
        with contextlib.suppress(OSError):
            os.rmdir(sub.path)
    with contextlib.suppress(OSError):
        os.rmdir(root)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
