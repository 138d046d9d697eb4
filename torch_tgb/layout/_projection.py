"""Projection: which slices a reader's mesh needs from a written layout, and how to join them.

Written ``(D, C)``, read by a mesh ``(D', C')`` -- no data is ever rewritten:

* ``D' == D``: consumer step ``t`` reads TGB ``t``, slice ``dp_rank``.
* ``D' == k*D``: a consumer step consumes ``k`` TGBs; rank ``r`` reads TGB
  ``t*k + r // D``, slice ``r % D``.
* ``D' == D/k``: rank ``r`` needs slices ``r*k .. r*k+k-1`` of a TGB.
  ``dp_split="merge"`` concatenates them (dim 0) into one batch per TGB;
  ``"spread"`` gives one per consumer step: step ``t`` reads TGB ``t // k``,
  slice ``(t % k) * D' + r`` (so each consumer step is a contiguous block of
  the global batch).
* ``C' != C`` (or another ``cp_order``): each wanted token range is cut from
  the written cp slices that hold it, as fractions of the sequence; a piece
  is read whole (one range read of its slice) and sliced as a view, so a
  split reads ``C'/C`` times the seq bytes it uses (``ReadPlan.seq_amplification``).

Steps are relative to the TGB step the plan starts at. A consumer keeps its
cursor in TGB units: ``position(step) -> (tgb_offset, sub_step)``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch

from torch_tgb.errors import LayoutError
from torch_tgb.layout._cp import CP_ORDERS, cp_ranges
from torch_tgb.layout._layout import LABELS_KEY, Layout
from torch_tgb.layout._mesh import Mesh
from torch_tgb.layout._ragged import join_ragged, offsets_key

__all__ = ["DP_SPLITS", "Piece", "ReadPlan", "Segment", "StepReads", "plan_reads"]

DP_SPLITS = ("merge", "spread")


@dataclass(frozen=True)
class Piece:
    """One slice to read: TGB ``tgb`` steps after the plan's start, slice ``(dp, cp)``."""

    tgb: int
    dp: int
    cp: int


@dataclass(frozen=True)
class Segment:
    """Tokens ``[lo, hi)`` (fractions of the piece's sequence length) of piece ``piece``."""

    piece: int
    lo: Fraction
    hi: Fraction


@dataclass(frozen=True)
class StepReads:
    """What one consumer step reads, and how the pieces form this rank's batch.

    ``parts`` are the dim-0 parts of the batch in order; each is the list of
    seq segments in token order. Non-seq tensors of a part come from the
    piece of its first segment (every cp slice repeats them). ``ragged``: the
    ragged keys; joining parts joins their values and shifts their offsets.
    """

    pieces: tuple[Piece, ...]
    parts: tuple[tuple[Segment, ...], ...]
    seq_keys: tuple[str, ...]
    ragged: tuple[str, ...] = ()
    #: the written layout's ``labels_from`` key (delivered as it and ``labels``) and its chunks per cp slice
    labels_from: str | None = None
    chunks: int = 1

    def assemble(self, tensors: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """This rank's batch from the pieces' tensors (same order as ``pieces``). Pure.

        A single whole piece is returned as is (no copy); token sub-ranges are
        views; only joining several pieces concatenates.
        """
        if len(tensors) != len(self.pieces):
            raise LayoutError(f"assemble needs {len(self.pieces)} pieces, got {len(tensors)}")
        if self.whole_rows:
            return self._rows(tensors[0])
        parts = [self._part(segments, tensors) for segments in self.parts]
        if len(parts) == 1:
            return parts[0]
        out = {}
        for name in parts[0]:
            if name in self.ragged:
                out[name], out[offsets_key(name)] = join_ragged(parts, name)
            elif name not in out:
                out[name] = torch.cat([p[name] for p in parts], dim=0)
        return out

    @functools.cached_property
    def whole_rows(self) -> bool:
        """One piece read whole, of a ``labels_from`` layout with one chunk: the common token-rows step.

        Its batch is the piece's tensors with the rows split into two views
        (:meth:`_rows`): a reader that casts the rows as it reads them casts
        once for both.
        """
        return (self.labels_from is not None and self.chunks == 1 and len(self.parts) == 1
                and self.parts[0] == (Segment(0, Fraction(0), Fraction(1)),))

    def _rows(self, piece: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """:meth:`_part` of a :attr:`whole_rows` step: the rows' tokens and their shift, two views."""
        name = self.labels_from
        assert name is not None  # whole_rows
        rows = piece.get(name)
        if rows is None or rows.dim() < 2 or rows.shape[1] < 2:
            return self._part(self.parts[0], [piece])  # it names the problem
        out = dict(piece)
        if rows.dim() == 2:  # as_strided: the same two views as rows[:, :-1] and rows[:, 1:], at half the cost
            shape, stride, at = (rows.shape[0], rows.shape[1] - 1), rows.stride(), rows.storage_offset()
            out[name] = rows.as_strided(shape, stride, at)
            out[LABELS_KEY] = rows.as_strided(shape, stride, at + stride[1])
        else:
            out[name], out[LABELS_KEY] = rows[:, :-1], rows[:, 1:]
        return out

    def _part(
        self, segments: tuple[Segment, ...], tensors: Sequence[Mapping[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        base = tensors[segments[0].piece]
        out = {}
        for name, t in base.items():
            if name not in self.seq_keys:
                out[name] = t
                continue
            views = []
            for seg in segments:
                piece = tensors[seg.piece]
                if name not in piece:
                    raise LayoutError(f"piece {self.pieces[seg.piece]} has no tensor {name!r}")
                if name == self.labels_from:
                    views.append(_tokens_and_next(piece[name], seg, name, self.pieces[seg.piece], self.chunks))
                else:
                    views.append(_tokens(piece[name], seg, name, self.pieces[seg.piece]))
            if name == self.labels_from:  # each view holds its tokens and the one after: two shifted views
                out[name] = _join([v[:, :-1] for v in views])
                out[LABELS_KEY] = _join([v[:, 1:] for v in views])
            else:
                out[name] = _join(views)
        return out


def _join(views: list[torch.Tensor]) -> torch.Tensor:
    return views[0] if len(views) == 1 else torch.cat(views, dim=1)


def _tokens_and_next(t: torch.Tensor, seg: Segment, name: str, piece: Piece, chunks: int) -> torch.Tensor:
    """Tokens ``[lo, hi)`` of a ``labels_from`` piece plus the token after them (a view).

    The piece stores ``chunks`` cp chunks of ``m`` tokens, each followed by the
    token after it (``m + 1`` stored); a segment lies inside one chunk.
    """
    bounds = _next_bounds(seg.lo, seg.hi, chunks, int(t.shape[1])) if t.dim() >= 2 else None
    if bounds is None:
        raise LayoutError(
            f"labels_from key {name!r} of {piece} has shape {tuple(t.shape)}: not {chunks} chunks of tokens that "
            f"can be cut at fractions {seg.lo}..{seg.hi} (sequence length not divisible for this cp projection)"
        )
    return t[:, bounds[0] : bounds[1]]


@functools.lru_cache(maxsize=1024)
def _next_bounds(lo: Fraction, hi: Fraction, chunks: int, width: int) -> tuple[int, int] | None:
    """Columns ``[start, stop)`` of :func:`_tokens_and_next` (None: it cannot be cut so); the same every step."""
    if width % chunks:
        return None
    m = width // chunks - 1
    k = int(lo * chunks)  # the chunk the segment lies in
    a, b = (lo * chunks - k) * m, (hi * chunks - k) * m
    if m < 1 or a.denominator != 1 or b.denominator != 1 or b > m:
        return None
    base = k * (m + 1)
    return base + int(a), base + int(b) + 1


def _tokens(t: torch.Tensor, seg: Segment, name: str, piece: Piece) -> torch.Tensor:
    if seg.lo == 0 and seg.hi == 1:
        return t
    if t.dim() < 2:
        raise LayoutError(f"seq key {name!r} of {piece} has no sequence dim (shape {tuple(t.shape)})")
    n = t.shape[1]
    lo, hi = seg.lo * n, seg.hi * n
    if lo.denominator != 1 or hi.denominator != 1:
        raise LayoutError(
            f"seq key {name!r} of {piece}: {n} tokens cannot be cut at fractions {seg.lo}..{seg.hi} "
            "(sequence length not divisible for this cp projection)"
        )
    return t[:, int(lo) : int(hi)]


@dataclass(frozen=True)
class ReadPlan:
    """How a mesh reads a written layout, step by step. Build with :func:`plan_reads`."""

    written: Layout
    mesh: Mesh
    dp_split: str
    cp_order: str
    #: TGB steps one consumer step consumes (``k`` when ``D' = k*D``)
    tgbs_per_step: int
    #: consumer steps one TGB spans (``k`` when ``D' = D/k`` with ``"spread"``)
    steps_per_tgb: int
    #: seq-token segments this cp rank takes, per written cp slice index
    _cp_segments: tuple[tuple[int, Fraction, Fraction], ...]
    #: the ragged keys of the namespace's schema (joined as values + offsets)
    ragged: tuple[str, ...] = ()

    def position(self, step: int) -> tuple[int, int]:
        """``(tgb_offset, sub_step)`` of consumer ``step`` (cursor in TGB units)."""
        if step < 0:
            raise LayoutError(f"negative consumer {step=}")
        return (step // self.steps_per_tgb) * self.tgbs_per_step, step % self.steps_per_tgb

    def step_at(self, tgb_offset: int, sub_step: int = 0) -> int:
        """The consumer step at TGB offset ``tgb_offset`` and ``sub_step`` (inverse of ``position``)."""
        if tgb_offset < 0 or tgb_offset % self.tgbs_per_step or not (0 <= sub_step < self.steps_per_tgb):
            raise LayoutError(
                f"cursor ({tgb_offset=}, {sub_step=}) is not a step boundary of this plan "
                f"(tgbs_per_step={self.tgbs_per_step}, steps_per_tgb={self.steps_per_tgb})"
            )
        return (tgb_offset // self.tgbs_per_step) * self.steps_per_tgb + sub_step

    def reads(self, step: int) -> StepReads:
        """The pieces consumer ``step`` reads and how to assemble them."""
        if step < 0:
            raise LayoutError(f"negative consumer {step=}")
        w, m = self.written, self.mesh
        if m.dp_size == w.dp:
            dp_parts = [(step, m.dp_rank)]
        elif m.dp_size > w.dp:
            k = m.dp_size // w.dp
            dp_parts = [(step * k + m.dp_rank // w.dp, m.dp_rank % w.dp)]
        elif self.dp_split == "merge":
            k = w.dp // m.dp_size
            dp_parts = [(step, m.dp_rank * k + i) for i in range(k)]
        else:
            k = w.dp // m.dp_size
            dp_parts = [(step // k, (step % k) * m.dp_size + m.dp_rank)]
        # O(pieces read): a dict keeps first-seen order and gives each piece its index
        # (the layout's bounds keep dp_parts at most MAX_DP long, in merge mode only).
        index: dict[Piece, int] = {}
        parts = []
        for tgb, dp in dp_parts:
            segments = []
            for cp, lo, hi in self._cp_segments:
                segments.append(Segment(index.setdefault(Piece(tgb, dp, cp), len(index)), lo, hi))
            parts.append(tuple(segments))
        w = self.written
        chunks = 2 if w.cp > 1 and w.cp_order == "zigzag" else 1
        return StepReads(tuple(index), tuple(parts), w.seq_keys, self.ragged, w.labels_from, chunks)

    def token_ranges(self, seq_len: int) -> tuple[tuple[int, int], ...]:
        """The token positions ``[lo, hi)`` of a row this rank's seq keys hold, in delivery order (all: cp 1)."""
        if not self.written.seq_keys or self.mesh.cp_size == 1:
            return ((0, seq_len),)
        return tuple((int(lo * seq_len), int(hi * seq_len))
                     for lo, hi in cp_ranges(self.mesh.cp_size, self.cp_order)[self.mesh.cp_rank])

    def seq_len_of(self, delivered: int) -> int:
        """A row's sequence length, from the ``delivered`` tokens of a seq key on this rank."""
        if not self.written.seq_keys or self.mesh.cp_size == 1:
            return delivered
        share = sum(hi - lo for lo, hi in cp_ranges(self.mesh.cp_size, self.cp_order)[self.mesh.cp_rank])
        return int(delivered / share)

    @property
    def seq_amplification(self) -> float:
        """Seq bytes read per seq byte used by this rank (1.0 = no waste)."""
        used: dict[int, Fraction] = {}
        for cp, lo, hi in self._cp_segments:
            used[cp] = used.get(cp, Fraction(0)) + (hi - lo)
        return float(len(used) / sum(used.values()))


def _cp_segments(
    written: Layout, cp_size: int, cp_rank: int, cp_order: str
) -> tuple[tuple[int, Fraction, Fraction], ...]:
    """(written cp index, local lo, local hi) for each token range cp rank ``cp_rank`` wants, in order."""
    if not written.seq_keys:
        # nothing is split along the sequence: any cp slice holds everything
        return ((cp_rank % written.cp, Fraction(0), Fraction(1)),)
    held = cp_ranges(written.cp, written.cp_order)
    # (global lo, global hi, written cp, local lo, local hi), sorted by global position
    pieces = []
    for j, ranges in enumerate(held):
        for k, (lo, hi) in enumerate(ranges):
            share = Fraction(1, len(ranges))
            pieces.append((lo, hi, j, k * share, (k + 1) * share))
    pieces.sort()
    out: list[tuple[int, Fraction, Fraction]] = []
    for want_lo, want_hi in cp_ranges(cp_size, cp_order)[cp_rank]:
        for lo, hi, j, llo, lhi in pieces:
            a, b = max(lo, want_lo), min(hi, want_hi)
            if a >= b:
                continue
            scale = (lhi - llo) / (hi - lo)
            seg = (j, llo + (a - lo) * scale, llo + (b - lo) * scale)
            # contiguous in the same piece: one view, unless a labels_from piece stores the two
            # chunks apart (each with the token after it)
            if out and out[-1][0] == j and out[-1][2] == seg[1] and (written.labels_from is None or len(held[j]) == 1):
                out[-1] = (j, out[-1][1], seg[2])
            else:
                out.append(seg)
    return tuple(out)


def plan_reads(
    written: Layout, mesh: Mesh, *, dp_split: str = "merge", cp_order: str | None = None,
    ragged: Sequence[str] = (),
) -> ReadPlan:
    """The :class:`ReadPlan` of ``mesh`` reading TGBs written with ``written``.

    ``cp_order`` is the token arrangement this reader's model expects
    (default: the written one); ``ragged`` names the schema's ragged keys.
    Raises :class:`LayoutError` when the dp sizes are not multiples of each other.
    """
    if dp_split not in DP_SPLITS:
        raise LayoutError(f"dp_split must be one of {DP_SPLITS}, got {dp_split!r}")
    order = written.cp_order if cp_order is None else cp_order
    if order not in CP_ORDERS:
        raise LayoutError(f"cp_order must be one of {CP_ORDERS}, got {order!r}")
    d_w, d_r = written.dp, mesh.dp_size
    tgbs_per_step = steps_per_tgb = 1
    if d_r > d_w:
        if d_r % d_w:
            raise LayoutError(f"reader dp_size={d_r} is not a multiple of the written dp={d_w}")
        tgbs_per_step = d_r // d_w
    elif d_r < d_w:
        if d_w % d_r:
            raise LayoutError(f"written dp={d_w} is not a multiple of the reader dp_size={d_r}")
        if dp_split == "spread":
            steps_per_tgb = d_w // d_r
    segments = _cp_segments(written, mesh.cp_size, mesh.cp_rank, order)
    return ReadPlan(written, mesh, dp_split, order, tgbs_per_step, steps_per_tgb, segments, tuple(ragged))
