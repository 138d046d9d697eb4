"""A reader's state as one value, and the canonical state of any consumer state.

``TGBDataset.state_dict()`` is :meth:`ReaderState.to_json`::

    {"mesh": [dp_rank, dp_size, cp_rank, cp_size], "dp_split": ..., "worker": w, "num_workers": W,
     "tgb_cursor": <next TGB step>, "origin": <cursor counting starts at>,
     "index": i, "plan": {"tgbs_per_step": k, "steps_per_tgb": m},        # once it counts steps
     "tgb_epochs": {"cursor": <position>, "shuffle": ..., ...}}          # epochs reads only

In an epochs read ``tgb_cursor`` is step 0 (any TGB may be read again, so a
watermark protects them all) and the position is under ``tgb_epochs``
(``consumer/_epochs.py``). A state taken in the same setting (mesh, dp_split,
worker, worker count, plan) restores exactly, also inside a TGB; any other
continues from the canonical cursor, the smallest one among the reader states
of a loader's state (:func:`torch_tgb.cursor.reader_states` finds them by path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.consumer._contract import EXPECT_KEY, saved_expectation
from torch_tgb.consumer._epochs import EPOCHS_KEY, EpochOrder
from torch_tgb.consumer._identity import SOURCE_KEY, merge_sources
from torch_tgb.cursor import CURSOR_KEY, Cursor, cursor_of, reader_states
from torch_tgb.datapipes.read import Position
from torch_tgb.errors import LayoutError
from torch_tgb.layout import Mesh

__all__ = ["ReaderState", "Setting", "canonical_state", "epochs_position", "next_step_of"]


@dataclass(frozen=True)
class Setting:
    """What an exact restore must match: the mesh, dp_split and the worker's place."""

    mesh: tuple[int, int, int, int]
    dp_split: str
    worker: int
    num_workers: int

    @classmethod
    def of(cls, mesh: Mesh, dp_split: str, worker: int, num_workers: int) -> Setting:
        return cls((mesh.dp_rank, mesh.dp_size, mesh.cp_rank, mesh.cp_size), dp_split, worker, num_workers)

    def to_json(self) -> dict[str, Any]:
        return {"mesh": list(self.mesh), "dp_split": self.dp_split, "worker": self.worker,
                "num_workers": self.num_workers}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Setting | None:
        try:
            mesh = tuple(int(x) for x in d["mesh"])
            return cls((mesh[0], mesh[1], mesh[2], mesh[3]), str(d["dp_split"]), int(d["worker"]),
                       int(d["num_workers"]))
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # not an exact state: it restores from its cursor alone


@dataclass(frozen=True)
class ReaderState:
    """Where a reader stands (``at.cursor``: the next step, a position in an epochs read) and how it counts.

    ``exact``: ``at``'s origin, index and plan are the ones the reader counted
    with (it has started counting); without it only ``at.cursor`` and
    ``at.origin`` mean anything. ``order``: the epochs read's settings.
    """

    setting: Setting
    at: Position
    exact: bool
    order: EpochOrder | None = None
    num_steps: int = 0  # N of an epochs read
    source: Mapping[str, Any] | None = None  # what it read (``consumer/_identity.py``)

    def to_json(self) -> dict[str, Any]:
        state = self.setting.to_json()
        if self.source is not None:
            state[SOURCE_KEY] = dict(self.source)
        cursor = self.at.cursor
        if self.order is not None:
            state[EPOCHS_KEY] = self.order.to_json(cursor, self.num_steps)
            cursor = Cursor(0, cursor.version)  # every TGB may be read again in a later epoch
        state[CURSOR_KEY] = cursor.to_json()
        state["origin"] = self.at.origin.to_json()
        if self.exact:
            state["index"] = self.at.index
            state["plan"] = self.at.plan
        return state

    def restores(self, setting: Setting, plan: Mapping[str, int]) -> Position | None:
        """The exact position to continue from in ``setting`` under ``plan``; None: continue from the cursor."""
        return self.at if self.exact and self.setting == setting and self.at.plan == dict(plan) else None

    @classmethod
    def from_json(cls, state: Mapping[str, Any]) -> ReaderState | None:
        """The exact state of a reader's own ``state_dict()``; None for anything that restores from its cursor."""
        setting = Setting.from_json(state)
        if setting is None or not all(k in state for k in (CURSOR_KEY, "origin", "index", "plan")):
            return None
        try:
            plan = state["plan"]
            found = epochs_position(state)
            cursor = Cursor.from_json(state[CURSOR_KEY]) if found is None else found[0]
            at = Position(cursor, Cursor.from_json(state["origin"]), int(state["index"]),
                          int(plan["tgbs_per_step"]), int(plan["steps_per_tgb"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed reader state {dict(state)!r:.300}: {e}") from e
        return cls(setting, at, True)


def epochs_position(state: Mapping[str, Any]) -> tuple[Cursor, Mapping[str, Any]] | None:
    """The smallest epochs-read position among the reader states of ``state``, with its saved order; None if none."""
    best: tuple[Cursor, Mapping[str, Any]] | None = None
    for reader in reader_states(state):
        saved = reader.get(EPOCHS_KEY)
        if saved is None:
            continue
        try:
            cursor = Cursor.from_json(saved["cursor"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed {EPOCHS_KEY} state {saved!r:.300}: {e}") from e
        if best is None or cursor < best[0]:
            best = (cursor, saved)
    return best


def start_of(state: Mapping[str, Any], order: EpochOrder | None) -> tuple[Cursor, EpochOrder | None]:
    """Where a reader reading with ``order`` (None: a stream) continues from any consumer ``state``.

    A stream continues from the smallest cursor; an epochs read from the
    smallest position, in the epoch it was taken in. A stream reader also
    continues an unshuffled epochs position: that is where a stream of a sealed
    namespace goes on after its first pass (``consumer/_passes.py``), in the
    manifest order either way. Any other mix, or another shuffle order, is
    refused: the positions would name other TGBs.
    """
    found = epochs_position(state)
    if order is None:
        if found is None:
            return cursor_of(state), None
        passes = EpochOrder.from_saved(found[1])
        if passes.shuffle:
            raise LayoutError(
                f"the state was taken reading shuffled epochs ({dict(found[1])}); pass the same shuffle/epochs "
                "settings"
            )
        return found[0], passes
    if found is None:
        raise LayoutError("the state was taken reading a stream; an epochs read cannot continue from it")
    cursor, saved = found
    order.check_same_order(saved)
    return cursor, order.starting_at(int(saved.get("first_epoch", 0)))


def canonical_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The rank- and worker-independent part of any consumer state: all that ``load_state_dict`` needs.

    The smallest ``tgb_cursor`` in ``state`` (the first step not yet delivered), for
    an epochs read the smallest ``tgb_epochs`` position with its order settings,
    the data contract (``tgb_expect``, ``consumer/_contract.py``) if the reader has one,
    and what it read (``tgb_source``, ``consumer/_identity.py``). The
    ranks of a synchronous job hold the same one at a checkpoint (``DataState`` saves it
    under one key that loads on any world size).
    """
    out: dict[str, Any] = {CURSOR_KEY: cursor_of(state).to_json()}
    found = epochs_position(state)
    if found is not None:
        out[EPOCHS_KEY] = dict(found[1])
    expect = saved_expectation(reader_states(state))
    if expect is not None:
        out[EXPECT_KEY] = expect
    source = merge_sources(reader_states(state))
    if source is not None:
        out[SOURCE_KEY] = source
    return out


def next_step_of(state: Mapping[str, Any]) -> int:
    """The next step a reader in ``state`` delivers (through the epochs for an epochs read)."""
    found = epochs_position(state)
    return (cursor_of(state) if found is None else found[0]).step
