"""FIFOs planted in a local namespace must fail fast, never hang a reader, producer or reclaimer (issue 13 item 2).

Opening a FIFO for reading blocks until a writer appears: a plain
``open(path)`` in LocalStore (or the reader's mmap path) used to hang every
process of the job, before any containment check ran. Each action runs in a
watchdog thread; a hang fails the test (and the FIFO is then opened for
writing so the stuck thread can finish).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _tamper import LAYOUT, Tamper
from _watchdog import within

import torch_tgb as tgb
from torch_tgb.errors import InvalidKey, TGBError
from torch_tgb.manifest.keys import GC_BOUNDARY_KEY, boundary_key, version_key
from torch_tgb.storage import LocalStore
from torch_tgb.testing.version_json import get_entry_field
from torch_tgb.storage._regular import open_regular

pytestmark = pytest.mark.timeout(300)

HANG_S = 30.0


def _outcome(action: Callable[[], object], fifos: list[Path]) -> BaseException | None:
    """What ``action`` raised (None if it returned); a hang fails the test."""

    def release() -> None:  # let the stuck open() return
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

    result = within(HANG_S, action, release)
    return result if isinstance(result, BaseException) else None


def _fifo_at(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _consumer(tamper: Tamper) -> Callable[[], object]:
    return lambda: list(tgb.TGBDataset(tamper.ns, mesh=tgb.Mesh(0, 1), timeout=10))


def _producer(tamper: Tamper) -> Callable[[], object]:
    return lambda: tgb.Producer(tamper.ns, producer_id="p9", layout=LAYOUT, commit_policy="naive").close()


def _reclaimer(tamper: Tamper) -> Callable[[], object]:
    return lambda: tgb.Reclaimer(tamper.ns, grace_period=0).run_once()


def test_fifo_as_tgb_object(tamper: Tamper) -> None:
    key = get_entry_field(tamper.version(3), 0, "key")
    fifo = _fifo_at(tamper.path(key))
    error = _outcome(_consumer(tamper), [fifo])
    assert isinstance(error, TGBError) and key in str(error), error
    error = _outcome(lambda: LocalStore(tamper.ns).get(key), [fifo])
    assert isinstance(error, InvalidKey) and "FIFO" in str(error) and key in str(error), error
    error = _outcome(lambda: LocalStore(tamper.ns).get_range(key, 0, 8), [fifo])
    assert isinstance(error, InvalidKey), error


def test_mmap_open_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = _fifo_at(tmp_path / "obj.tgb")
    error = _outcome(lambda: open_regular(str(fifo), "data/p0/obj.tgb"), [fifo])
    assert isinstance(error, InvalidKey) and "data/p0/obj.tgb" in str(error), error


@pytest.mark.parametrize("role", ["consumer", "producer", "reclaimer"])
def test_fifo_as_manifest_version(tamper: Tamper, role: str) -> None:
    fifo = _fifo_at(tamper.path(version_key(3)))
    error = _outcome({"consumer": _consumer, "producer": _producer, "reclaimer": _reclaimer}[role](tamper), [fifo])
    assert isinstance(error, TGBError), error


@pytest.mark.parametrize("role", ["consumer", "producer", "reclaimer"])
def test_fifo_as_gc_boundary(tamper: Tamper, role: str) -> None:
    tamper.without_boundary_generations()
    fifo = _fifo_at(tamper.path(GC_BOUNDARY_KEY))
    error = _outcome({"consumer": _consumer, "producer": _producer, "reclaimer": _reclaimer}[role](tamper), [fifo])
    assert isinstance(error, TGBError) and "gc_boundary" in str(error), error


@pytest.mark.parametrize("role", ["consumer", "producer", "reclaimer"])
def test_fifo_named_as_a_boundary_generation_is_not_one(tamper: Tamper, role: str) -> None:
    """Generations are found by LIST and never opened; a FIFO is not a regular file, so not listed."""
    fifo = _fifo_at(tamper.path(boundary_key(9, 9)))
    error = _outcome({"consumer": _consumer, "producer": _producer, "reclaimer": _reclaimer}[role](tamper), [fifo])
    assert error is None or isinstance(error, tgb.errors.NamespaceSealed), error  # (the producer: sealed)


@pytest.mark.parametrize("role", ["consumer", "producer", "reclaimer"])
def test_version_symlinked_to_a_fifo_outside(tamper: Tamper, tmp_path: Path, role: str) -> None:
    fifo = _fifo_at(tmp_path / "outside-fifo")
    path = tamper.path(version_key(3))
    path.unlink()
    os.symlink(fifo, path)
    error = _outcome({"consumer": _consumer, "producer": _producer, "reclaimer": _reclaimer}[role](tamper), [fifo])
    assert isinstance(error, TGBError), error
