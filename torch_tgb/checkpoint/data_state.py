"""``DataState``: carry each rank's data cursor through ``torch.distributed.checkpoint``.

DCP saves non-tensor values with ``torch.save`` and loads them back with
``torch.load(weights_only=False)`` — pickle, which a checkpoint written by
someone else must not be able to exploit. So the state travels as a
fixed-capacity ``uint8`` tensor holding JSON (a fixed size because DCP loads a
tensor only into a destination of the same shape, and the load-time state is
not known before it is read)::

    bytes 0..7    magic  b"TGBDS\\x001\\x00"
    bytes 8..15   payload length, little-endian uint64
    bytes 16..    UTF-8 JSON {"rank", "world_size", "state"}, then zeros

Keys. DCP loads exactly the keys the destination ``state_dict()`` asks for,
and asks before it has read the checkpoint, so a key that only some world
sizes write cannot be asked for safely. For a ``TGBDataset`` or
``tgb.DataLoader`` the state therefore lives under one rank-independent key,
``cursor``: the canonical state (the first TGB step not yet delivered, in
TGB-step units, and for an epochs read the epochs position; the same on
every rank of a synchronous job at a checkpoint), plus the saving rank and
world size for the record. Plain
tensors with one key on several ranks are deduplicated by DCP, so one copy
is stored; every rank of any new world size loads it with the same
``DataState(loader)`` and re-projects it onto its own mesh. That is all the
loaders use on load: they continue from the canonical cursor in any setting.

Any other stateful target (a plain ``StatefulDataLoader``), or an explicit
``rank=``, keeps the exact per-rank state under ``rank_<r>``; every rank then
reads its own key, so such a checkpoint loads only on the same ranks (or
with ``rank=`` naming a saved one). Checkpoints written before the ``cursor``
key existed hold only ``rank_<r>`` keys: load them with
``DataState(loader, rank=0)``.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Protocol

import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.layout import resolve_rank_world

__all__ = ["CURSOR_STATE_KEY", "DataState", "decode_state", "encode_state"]

#: the rank-independent DCP key of a TGB consumer's canonical cursor
CURSOR_STATE_KEY = "cursor"

_MAGIC = b"TGBDS\x001\x00"
_HEADER = struct.Struct("<8sQ")
DEFAULT_CAPACITY = 64 * 1024


class _HasState(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class DataState:
    """DCP ``Stateful`` wrapper of a ``TGBDataset``, ``tgb.DataLoader`` or ``StatefulDataLoader``.

    ``dcp.save({"model": ..., "data": DataState(loader)}, checkpoint_id=...)``
    stores the loader's position; ``dcp.load`` with the same structure
    restores it, on any world size for a TGB loader (see the module
    docstring). ``capacity`` (bytes) must be the same at save and load;
    ``rank`` switches to the exact per-rank state of that rank (``rank_<r>``).
    """

    def __init__(self, dataset_or_loader: _HasState, *, capacity: int = DEFAULT_CAPACITY, rank: int | None = None):
        if not (callable(getattr(dataset_or_loader, "state_dict", None))
                and callable(getattr(dataset_or_loader, "load_state_dict", None))):
            raise TypeError(f"DataState needs an object with state_dict/load_state_dict, got {type(dataset_or_loader).__name__}")
        if capacity < _HEADER.size + 2:
            raise ValueError(f"DataState: capacity={capacity} is too small")
        if rank is not None and rank < 0:
            raise ValueError(f"DataState: rank={rank} must be >= 0")
        self.target = dataset_or_loader
        self.capacity = capacity
        self._rank = rank

    @property
    def per_rank(self) -> bool:
        """Whether the exact state of one rank is kept under ``rank_<r>`` (else the shared cursor)."""
        return self._rank is not None or not _has_canonical_cursor(self.target)

    @property
    def key(self) -> str:
        return f"rank_{self._rank_world()[0]}" if self.per_rank else CURSOR_STATE_KEY

    def state_dict(self) -> dict[str, torch.Tensor]:
        # DCP calls this at load time too (to get destinations): the tensor is then overwritten.
        state = self.target.state_dict()
        if not self.per_rank:
            from torch_tgb.consumer._state import canonical_state

            state = canonical_state(state)
        rank, world_size = self._rank_world()
        payload = {"rank": rank, "world_size": world_size, "state": state}
        return {self.key: encode_state(payload, capacity=self.capacity)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        key = self.key
        if key not in state_dict:
            raise CorruptObject(f"DataState: checkpoint has no data state for {key!r} (keys: {sorted(state_dict)})")
        payload = decode_state(state_dict[key], what=key)
        if not isinstance(payload, dict) or "state" not in payload:
            raise CorruptObject(f"DataState: {key!r} does not hold a data state")
        self.target.load_state_dict(payload["state"])

    def _rank_world(self) -> tuple[int, int]:
        """This process's rank (``rank=`` if given) and world size, resolved as a reader's mesh resolves them."""
        rank, world_size = resolve_rank_world()
        return (rank if self._rank is None else self._rank), world_size

    def __repr__(self) -> str:
        return f"DataState({type(self.target).__name__}, capacity={self.capacity})"


def _has_canonical_cursor(target: object) -> bool:
    """A TGB consumer (TGBDataset or tgb.DataLoader): it loads from its canonical state alone."""
    from torch_tgb.consumer import DataLoader, TGBDataset

    return isinstance(target, (TGBDataset, DataLoader))


def encode_state(value: object, *, capacity: int = DEFAULT_CAPACITY) -> torch.Tensor:
    """JSON-encode ``value`` (tuples and non-string keys kept) into a ``uint8`` tensor of ``capacity`` bytes."""
    try:
        body = json.dumps(_tag(value), sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"DataState: the data state is not JSON-serialisable: {e}") from e
    if _HEADER.size + len(body) > capacity:
        raise ValueError(
            f"DataState: encoded state is {len(body)} bytes, over capacity={capacity}; "
            "pass a larger DataState(..., capacity=...) (the same at save and load)"
        )
    out = torch.zeros(capacity, dtype=torch.uint8)
    blob = _HEADER.pack(_MAGIC, len(body)) + body
    out[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    return out


def decode_state(tensor: torch.Tensor, *, what: str = "data state") -> object:
    """Inverse of :func:`encode_state`; :class:`CorruptObject` if the bytes are not one."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.uint8 or tensor.dim() != 1:
        raise CorruptObject(f"DataState: {what} is not a 1-D uint8 tensor")
    raw = tensor.detach().cpu().numpy().tobytes()
    if len(raw) < _HEADER.size:
        raise CorruptObject(f"DataState: {what} is truncated ({len(raw)} bytes)")
    magic, length = _HEADER.unpack_from(raw)
    if magic != _MAGIC or _HEADER.size + length > len(raw):
        raise CorruptObject(f"DataState: {what} has a bad header (magic={magic!r}, {length=})")
    try:
        return _untag(json.loads(raw[_HEADER.size : _HEADER.size + length]))
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        # ValueError covers bad JSON and UnicodeDecodeError; TypeError/KeyError come from
        # tags holding the wrong shapes (an unhashable key, a tuple tag over a number);
        # RecursionError from nesting deeper than the interpreter allows.
        raise CorruptObject(f"DataState: {what} is not a valid data state ({type(e).__name__}: {str(e)[:200]})") from e


# JSON turns tuples into lists and int keys into strings; loader states round-trip
# exactly only if both survive, so they are tagged.
_TUPLE = "__tgb_tuple__"
_ITEMS = "__tgb_items__"


def _tag(value: object) -> object:
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TUPLE not in value and _ITEMS not in value:
            return {k: _tag(v) for k, v in value.items()}
        return {_ITEMS: [[_tag(k), _tag(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [_tag(v) for v in value]}
    if isinstance(value, list):
        return [_tag(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} value {value!r:.80}")


def _untag(value: object) -> object:
    if isinstance(value, dict):
        if set(value) == {_TUPLE}:
            return tuple(_untag(v) for v in value[_TUPLE])
        if set(value) == {_ITEMS}:
            return {_hashable(_untag(k)): _untag(v) for k, v in value[_ITEMS]}
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value


def _hashable(key: object) -> object:
    if isinstance(key, (dict, list)):
        raise ValueError(f"unhashable dict key {key!r:.80}")
    return key
