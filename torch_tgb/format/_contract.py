"""A namespace's contract (``_tgb/dataset.json``: layout and schema) and the check of every footer against it.

A footer is untrusted input twice over: its bytes may be corrupt (the footer
CRC and the table checks of ``_footer.py`` catch that), and a CRC-valid
footer may still describe other tensors than the namespace promises (a
buggy or older writer, an object copied from another namespace, a tampered
one). A reader that trusted it would deliver int16 ``[4, 8]`` in an int32
``[4, 4]`` namespace, or ragged rows as a dense tensor with their offsets
unchecked. :class:`Contract` is what the namespace promises; a reader holds
one and judges each footer with it:

- :meth:`Contract.footer_problem`, once per parsed footer: the slice grid
  (dp, cp), the layout the writer recorded (if any), the stored tensor names
  and which of them are ragged, and the dtypes of the schema the footer
  records;
- :meth:`Contract.slice_problem`, once per slice (when a reader first asks
  for it, with the slice's other per-tensor checks in ``Footer.slice``):
  every tensor of the schema once, each with the namespace's dtype, number of
  dims and trailing shape (a seq key's dim 1 as its cp chunk; ``-1`` in the
  schema matches any size), a ragged key's offsets int64 ``[rows + 1]``, and
  the dense tensors on the same rows.

Both return what is wrong (None: nothing); the reader raises
:class:`~torch_tgb.errors.CorruptObject` with it, naming object and slice
(and the step, where the reader knows it). Pure: no I/O, no state beyond the
expectations worked out once at construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import LayoutError, ManifestError
from torch_tgb.layout import Layout, cp_ranges, offsets_key

if TYPE_CHECKING:
    from torch_tgb.format._footer_view import Footer, TensorInfo

__all__ = ["Contract"]

#: (dtype name, trailing dims with -1 for any size (None: any shape), whether any dim is -1) of one stored tensor
_Spec = tuple[str, "tuple[int, ...] | None", bool]


class Contract:
    """What every TGB of a namespace holds: ``layout`` and ``schema`` as ``dataset.json`` records them.

    ``layout`` None: the grid and seq widths are not checked (dtypes, names and
    number of dims are); ``schema`` None: only the layout is. A schema entry
    that is not ``{"dtype", "shape"?, "ragged"?}`` is a :class:`ManifestError`.
    """

    def __init__(self, layout: Layout | Mapping[str, Any] | None = None,
                 schema: Mapping[str, Any] | None = None) -> None:
        self.layout = layout if layout is None or isinstance(layout, Layout) else Layout.from_json(layout)
        for name, spec in (schema or {}).items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("shape", []), (list, tuple)) or not all(
                    isinstance(d, int) for d in spec.get("shape", [])):
                raise ManifestError(f"the namespace's schema gives tensor {name!r} as {spec!r}: expected "
                                    '{"dtype": ..., "shape": [ints]} (a corrupt or hand-edited dataset.json)')
        self.schema = None if schema is None else {name: dict(spec) for name, spec in schema.items()}
        self.ragged: frozenset[str] = frozenset(
            name for name, spec in (self.schema or {}).items() if spec.get("ragged"))
        #: the tensor names a slice stores: the schema's, and each ragged key's offsets
        self.stored: frozenset[str] = frozenset(self.schema or ()) | {offsets_key(k) for k in self.ragged}
        self._dense = frozenset(self.schema or ()) - self.ragged
        cps = 1 if self.layout is None else self.layout.cp
        self._specs: list[dict[str, _Spec]] = [self._specs_of(c) for c in range(cps)]

    def _specs_of(self, cp: int) -> dict[str, _Spec]:
        """Per stored tensor of a slice of cp index ``cp``: what it must be."""
        specs: dict[str, _Spec] = {}
        for name, spec in (self.schema or {}).items():
            shape = spec.get("shape")
            trailing = None if shape is None else tuple(int(d) for d in shape)  # None: any shape (a bare schema)
            if self.layout is not None and name in self.layout.seq_keys and self.layout.cp > 1 and trailing:
                trailing = (_chunk_width(self.layout, name, trailing[0], cp), *trailing[1:])
            specs[name] = (str(spec.get("dtype")), trailing, trailing is not None and -1 in trailing)
            if name in self.ragged:
                specs[offsets_key(name)] = ("int64", (), False)
        return specs

    def footer_problem(self, footer: Footer) -> str | None:
        """What ``footer`` (parsed, its tables checked) holds that the namespace does not allow; None: nothing."""
        layout = self.layout
        if layout is not None:
            if (footer.dp, footer.cp) != (layout.dp, layout.cp):
                return (f"holds dp={footer.dp} x cp={footer.cp} slices; the namespace's layout is "
                        f"dp={layout.dp} x cp={layout.cp}")
            if footer.layout is not None:
                try:
                    same = Layout.from_json(footer.layout) == layout
                except LayoutError:
                    same = False
                if not same:
                    return f"was written with layout {footer.layout}; the namespace's layout is {layout.to_json()}"
        if self.schema is None:
            return None
        ragged = set(footer.ragged)
        if ragged != self.ragged:
            dense = sorted(self.ragged - ragged)
            if dense:
                return (f"tensor {dense[0]!r} is stored dense (a footer without its ragged list, or of format "
                        "version 1); the namespace's schema has it ragged: its offsets would go unchecked")
            return f"tensor {sorted(ragged - self.ragged)[0]!r} is stored ragged; the namespace's schema has it dense"
        if set(footer.names) != self.stored:
            return f"holds tensors {sorted(set(footer.names))}; the namespace stores {sorted(self.stored)}"
        for name, spec in footer.schema.items():
            want = self.schema.get(name)
            got = spec.get("dtype") if isinstance(spec, Mapping) else spec
            if want is None or got != want.get("dtype"):
                return (f"tensor {name!r} is {got} in the footer's schema; the namespace's schema says "
                        f"{'nothing of it' if want is None else want.get('dtype')}")
        return None

    def slice_problem(self, cp: int, tensors: Sequence[TensorInfo]) -> str | None:
        """What the tensors of a slice of cp index ``cp`` hold that the namespace does not allow; None: nothing."""
        if self.schema is None:
            return None
        specs = self._specs[cp if cp < len(self._specs) else 0]
        dense = self._dense
        checked = self.layout is not None
        seen = set()
        rows: tuple[str, int] | None = None
        for t in tensors:
            spec = specs.get(t.name)
            if spec is None or t.name in seen:
                return (f"holds tensors {[u.name for u in tensors]}; the namespace stores each of "
                        f"{sorted(self.stored)} once")
            seen.add(t.name)
            dtype, trailing, loose = spec
            shape = t.shape
            if t.dtype != dtype or (trailing is not None and (
                    len(shape) != len(trailing) + 1 or (checked and not _same(shape, trailing, loose)))):
                want = "" if trailing is None else " [" + ", ".join(["n", *("any" if d < 0 else str(d) for d in trailing)]) + "]"
                return f"tensor {t.name!r} is stored as {t.dtype} {list(shape)}; the namespace says {dtype}{want}"
            if t.name in dense:
                if rows is None:
                    rows = (t.name, shape[0])
                elif shape[0] != rows[1]:
                    return (f"tensor {t.name!r} holds {shape[0]} rows and tensor {rows[0]!r} {rows[1]}: "
                            "the namespace's layout cuts every dense tensor of a slice on the same rows")
        if len(seen) != len(self.stored):
            return f"holds tensors {sorted(seen)}; the namespace stores {sorted(self.stored)}"
        return None


def _same(shape: tuple[int, ...], trailing: tuple[int, ...], loose: bool) -> bool:
    """Whether ``shape[1:]`` is ``trailing`` (a ``-1`` there matches any size)."""
    if not loose:
        return shape[1:] == trailing
    return all(w == -1 or g == w for g, w in zip(shape[1:], trailing))


def _chunk_width(layout: Layout, name: str, width: int, cp: int) -> int:
    """Dim 1 of seq key ``name`` (``width`` tokens a row; -1: any) in the slice of cp index ``cp``, as ``Layout.cut`` cuts it."""
    if width < 0:
        return -1
    n = layout.seq_len_of(name, width)
    more = int(name == layout.labels_from)  # each chunk keeps the token after it
    return sum(int(hi * n) - int(lo * n) + more for lo, hi in cp_ranges(layout.cp, layout.cp_order)[cp])
