"""Lance: documents from a Lance dataset, by fragment.

``column`` is a list-of-integers token column or a string column read with
``tokenizer=``. Units of sharding are the dataset's fragments (in fragment-id
order) of the version current when the source is made, or of ``version=``;
the version is pinned so that a copy sent to a worker sees the same
fragments. A unit is read with ``LanceFragment.to_batches(offset=...)``, so
resuming inside a fragment starts at the record itself. Lance is not
fork-safe: read it in ``spawn``/``forkserver`` DataLoader workers (a copy
reopens the dataset); a forked worker gets a :class:`SourceError` saying so.
Needs the ``lance`` extra (pylance).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import require

lance = require("lance", "lance")

from torch_tgb.sources._arrow import ArrowOptions, ArrowSource  # noqa: E402  (after the extra check)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Lance"]


class Lance(ArrowSource):
    """Documents of the rows of a Lance dataset; units are fragments.

    ``column`` defaults to ``"tokens"``; the other keywords are ``ArrowOptions``.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        column: str = "tokens",
        version: int | None = None,
        **options: Unpack[ArrowOptions],
    ) -> None:
        super().__init__(column=column, **options)
        self.uri = os.fspath(uri)
        self.version = version
        dataset = self._dataset()
        self.version = int(dataset.version)
        self._check_schema(dataset.schema, self.uri)
        self._fragment_ids = sorted(int(f.fragment_id) for f in dataset.get_fragments())
        self._set_num_units(len(self._fragment_ids), self.uri)

    def _after_fork(self) -> None:
        """Refuse to read in a forked process: Lance is not fork-safe.

        Its Rust runtime's threads do not survive a fork, so the child crashes
        or hangs, whether it uses the inherited dataset or opens it again
        (both seen, timing-dependent). A copy sent to a ``spawn``/``forkserver``
        worker (pickled: ``__getstate__`` drops the handle) opens its own.
        """
        if os.getpid() != self._pid:
            raise SourceError(
                f"{self.uri}: sources.Lance made in process {self._pid} is read in forked process {os.getpid()}; "
                "Lance is not fork-safe (a forked worker crashes or hangs): use "
                "DataLoader(..., multiprocessing_context='spawn') or 'forkserver', whose workers open their own copy"
            )

    def _dataset(self) -> Any:
        if "dataset" not in self._handles:
            if "://" not in self.uri and not os.path.exists(self.uri):
                raise SourceError(f"{self.uri}: no such Lance dataset")
            try:
                self._handles["dataset"] = lance.dataset(
                    self.uri, version=self.version, storage_options=self.storage_options or None
                )
            except Exception as e:  # lance raises ValueError / OSError for a directory that is not a dataset
                raise SourceError(f"{self.uri}: not a Lance dataset: {e}") from e
        return self._handles["dataset"]

    def _unit_name(self, unit: int) -> str:
        return f"{self.uri} fragment {self._fragment_ids[unit]}"

    def _batches(self, unit: int, start: int, batch_size: int) -> tuple[Iterator[Any], int]:
        fragment = self._dataset().get_fragment(self._fragment_ids[unit])
        if fragment is None:
            raise SourceError(f"{self._unit_name(unit)}: fragment not found in version {self.version}")
        return fragment.to_batches(columns=self.columns, batch_size=batch_size, offset=start or None), 0
