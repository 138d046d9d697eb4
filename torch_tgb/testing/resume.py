"""The shared resume test of a torchdata.nodes stage.

``run_resume_test(make_node, stop_after=k)`` checks the contract every stage
of the pipeline (and a user's own stage) must keep:

1. a fresh node yields some sequence ``full``;
2. a second fresh node yields ``full[:k]``; its ``state_dict()`` then is taken
   (and, with ``json_state``, must survive a JSON round trip);
3. a third fresh node reset with that state yields exactly ``full[k:]``;
4. the second node itself, reset with the same state, does the same
   (reset must discard anything it buffered ahead);
5. ``reset(None)`` starts over at ``full``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb.layout import RaggedRows

__all__ = ["items_equal", "run_resume_test"]


def items_equal(a: object, b: object) -> bool:
    """Deep equality that compares tensors by value (and dataclasses field by field).

    A ragged key's rows compare row by row, as a list or joined (``RaggedRows``).
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(items_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, RaggedRows)) and isinstance(b, (list, tuple, RaggedRows)):
        return len(a) == len(b) and all(items_equal(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b) and type(a) is type(b):
        return all(items_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare)
    if inspect.ismethod(a) and inspect.ismethod(b):  # e.g. a plan's assemble: same function, equal owner
        return a.__func__ is b.__func__ and bool(a.__self__ == b.__self__)
    return bool(a == b)


def _drain(node: BaseNode, limit: int) -> list[Any]:
    out = []
    for item in node:
        out.append(item)
        if len(out) > limit:
            raise AssertionError(f"node yielded more than {limit} items; is it infinite? pass max_items")
    return out


def run_resume_test(
    make_node: Callable[[], BaseNode],
    *,
    stop_after: int,
    json_state: bool = True,
    max_items: int = 100_000,
    equal: Callable[[Any, Any], bool] = items_equal,
    close: Callable[[BaseNode], None] | None = None,
) -> Sequence[Any]:
    """Run the resume contract on nodes from ``make_node``; returns the full sequence.

    Raises AssertionError describing the first violation.
    """
    nodes: list[BaseNode] = []

    def fresh() -> BaseNode:
        node = make_node()
        nodes.append(node)
        return node

    try:
        full = _drain(fresh(), max_items)
        if not (0 <= stop_after <= len(full)):
            raise AssertionError(f"stop_after={stop_after} outside the {len(full)} items the node yields")

        second = fresh()
        head = [next(second) for _ in range(stop_after)]
        if not all(equal(x, y) for x, y in zip(head, full)):
            raise AssertionError("a second fresh node yielded a different sequence (non-deterministic node?)")
        state = second.state_dict()
        if json_state:
            state = json.loads(json.dumps(state))

        third = fresh()
        third.reset(state)
        rest = _drain(third, max_items)
        _check(rest, full[stop_after:], equal, "a fresh node reset with the state")

        second.reset(state)
        rest = _drain(second, max_items)
        _check(rest, full[stop_after:], equal, "the same node reset with its own state")

        second.reset(None)
        again = _drain(second, max_items)
        _check(again, full, equal, "reset(None)")
        return full
    finally:
        if close is not None:
            for node in nodes:
                close(node)


def _check(got: Sequence[Any], want: Sequence[Any], equal: Callable[[Any, Any], bool], what: str) -> None:
    if len(got) != len(want):
        raise AssertionError(f"{what} yielded {len(got)} items, expected {len(want)}")
    for i, (x, y) in enumerate(zip(got, want)):
        if not equal(x, y):
            raise AssertionError(f"{what}: item {i} differs: {x!r} != {y!r}")
