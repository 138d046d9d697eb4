"""Which stored tensors a reader reads, what it derives, and what it delivers.

``ReaderOptions(keys=...)`` names the keys a training step uses; a reader then
reads and checksums only the stored tensors they need (one range read per
slice, spanning them), and delivers exactly those keys (a ragged key with its
offsets). ``ReaderOptions(derive=...)`` names what to derive from the rows'
``seq_lens`` in a token-efficient namespace (``Layout.labels_from``):
``"labels"`` masks the one-token shift with -100 where a sequence ends and on
padding (a copy; without it ``labels`` is the bare shift, a view), and
``position_ids``, ``document_ids`` and ``cu_seqlens`` are computed on request.
A key the namespace stores is read, never derived (older namespaces store them).

What cannot be made is refused at open (:class:`SchemaMismatch`), as a key
the namespace neither stores nor derives is: ``derive=("cu_seqlens",)`` on a
namespace without ``seq_lens`` would otherwise deliver no ``cu_seqlens`` and
no error. ``"labels"`` is the exception, since it is the default: on a
namespace without ``seq_lens`` it means labels as stored (or the bare shift of
``labels_from``), so every older namespace reads with the default options.

A row's ``provenance`` and ``provenance_counts`` (``transforms.provenance``)
are read and delivered only when ``keys`` names them: a trainer's default batch is what it trains on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import SchemaMismatch
from torch_tgb.layout import LABELS_KEY, offsets_key
from torch_tgb.transforms.derive import DERIVABLE, SEQ_LENS_KEY
from torch_tgb.transforms.provenance import PROVENANCE_KEYS

__all__ = ["KeyPlan", "plan_keys"]


@dataclass(frozen=True)
class KeyPlan:
    """What a reader reads (``read``: stored tensor names, None: all), derives and delivers (None: all)."""

    read: frozenset[str] | None
    derive: tuple[str, ...]
    deliver: frozenset[str] | None
    #: whether ``labels`` is masked from ``seq_lens`` (else the bare shift of ``labels_from``)
    mask_labels: bool
    #: the namespace's schema (``dataset.json``) the plan was made from: what the read path holds every
    #: footer to (``format.Contract``); None: footers are held to the layout only
    schema: Mapping[str, Any] | None = None


def plan_keys(
    schema: Mapping[str, Any], labels_from: str | None, keys: tuple[str, ...] | None, derive: tuple[str, ...]
) -> KeyPlan:
    """The :class:`KeyPlan` of a namespace (its ``schema`` and layout's ``labels_from``) for ``keys``/``derive``.

    Raises :class:`SchemaMismatch` for a key the namespace neither stores nor
    can derive (asked for in ``keys`` or in ``derive``, but for ``"labels"``,
    the default, which derives only where it can), and ``ValueError`` for an
    unknown derivation.
    """
    unknown = sorted(set(derive) - set(DERIVABLE))
    if unknown:
        raise ValueError(f"cannot derive {unknown}: ReaderOptions(derive=) takes any of {list(DERIVABLE)}")
    ragged = {name for name, spec in schema.items() if isinstance(spec, Mapping) and spec.get("ragged")}
    has_lens = SEQ_LENS_KEY in ragged
    stored = set(schema)
    deliverable = stored | ({LABELS_KEY} if labels_from is not None else set())
    derivable = set(DERIVABLE) - {LABELS_KEY} if has_lens else set()
    impossible = sorted(set(derive) - {LABELS_KEY} - stored - derivable)
    if impossible:
        raise SchemaMismatch(
            f"cannot derive {impossible}: the namespace stores no {SEQ_LENS_KEY!r} (the lengths of the sequences "
            f"packed into each row, which token rows carry) and does not store them either; it stores "
            f"{sorted(stored)}. Drop them from ReaderOptions(derive=...), or write the namespace as token rows"
        )
    wanted = set(deliverable | (set(derive) & derivable)) - PROVENANCE_KEYS if keys is None else set(keys)
    missing = sorted(wanted - deliverable - derivable)
    if missing:
        raise SchemaMismatch(
            f"keys {missing} are neither stored nor derivable: the namespace stores {sorted(stored)}"
            + (f" and derives {sorted(derivable | {LABELS_KEY})}" if labels_from is not None else "")
        )
    derived = tuple(sorted((wanted & derivable) - stored))
    mask = labels_from is not None and has_lens and LABELS_KEY in wanted and LABELS_KEY in derive
    needs = set(wanted & stored)
    if LABELS_KEY in wanted and labels_from is not None:
        needs.add(labels_from)
    if derived or mask:  # from the lengths, over the rows' tokens (their width; the padding they leave)
        needs.add(SEQ_LENS_KEY)
        needs.add(labels_from if labels_from is not None else LABELS_KEY)
        needs &= stored
    read = frozenset(needs | {offsets_key(k) for k in needs & ragged})
    if keys is None and not PROVENANCE_KEYS & stored:
        return KeyPlan(None, derived, None, mask, schema)
    deliver = frozenset(wanted | {offsets_key(k) for k in wanted & ragged})
    return KeyPlan(read, derived, deliver, mask, schema)
