"""``KeysView``: a namespace's key layout as one client knows it (docs/protocol.md, *Manifest keys spread over prefixes*).

The layout is recorded in ``dataset.json`` at creation and never changes, so
it is read once, with the first ``dataset.json`` read (a reader's open does
that read anyway) or on the first key it names. Without a ``dataset.json``
(none created yet: a producer without a schema commits its epoch bump before
it creates one; or versions written by the low-level API) the layout is
unknown: writes use the one new namespaces get, reads look there and then
under the flat keys of namespaces written before spreading, and
``dataset.json`` is asked again at the next search for the newest version
(:meth:`KeysView.refresh`, once per search), until it appears or an object
is found under one layout (then that is the namespace's for good: the two
layouts share no key). So a client that starts before the namespace exists
never keeps probing keys no one writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch_tgb.manifest import keys as _keys
from torch_tgb.manifest._dataset import read_dataset
from torch_tgb.manifest.keys import FLAT, KeyLayout
from torch_tgb.manifest.records import DatasetInfo
from torch_tgb.storage import ObjectStore

__all__ = ["KeysView"]

T = TypeVar("T")


class KeysView:
    """The key layout of the namespace on ``store``: known once read from ``dataset.json`` or confirmed flat."""

    def __init__(self, store: ObjectStore, *, where: str) -> None:
        self.store = store
        self.where = where
        self._known: KeyLayout | None = None  # a plain attribute store: atomic under the GIL
        self._asked = False  # dataset.json was found absent since the last refresh()

    @property
    def known(self) -> bool:
        """Whether the layout is settled (read from dataset.json, or an object found under it)."""
        return self._known is not None

    def current(self) -> KeyLayout:
        """The layout: known, else read from ``dataset.json`` (one GET), else the one new namespaces get."""
        known = self._known
        if known is not None:
            return known
        if not self._asked:
            self.saw(read_dataset(self.store, where=self.where))
            self._asked = True
        return self._known or _keys.NEW_NAMESPACE_KEYS

    def refresh(self) -> None:
        """While the layout is unknown, ask dataset.json again at the next use (each search for the newest)."""
        self._asked = False

    def find(self, attempt: Callable[[KeyLayout], T | None]) -> T | None:
        """``attempt(layout)`` for each layout the namespace may have, until one answers (not ``None``).

        One layout once known; unknown, the new namespaces' and then the flat
        one, and the layout that answers is the namespace's from then on.
        """
        layout = self.current()
        unknown = self._known is None
        for candidate in (layout, FLAT) if unknown and layout != FLAT else (layout,):
            answer = attempt(candidate)
            if answer is not None:
                if unknown:
                    self.found(candidate)
                return answer
        return None

    def saw(self, info: DatasetInfo | None) -> DatasetInfo | None:
        """Note the layout of a ``dataset.json`` just read (``None``: none exists yet); returns ``info``."""
        if info is not None:
            self._known = info.keys
        return info

    def found(self, layout: KeyLayout) -> None:
        """An object named by ``layout`` exists: unless a dataset.json said otherwise, the namespace is ``layout``."""
        if self._known is None:
            self._known = layout
