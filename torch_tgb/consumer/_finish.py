"""A step as read -> the step handed out: derived keys, only the keys asked for, the one host-side cast.

:class:`Finish` is what every read path applies to each step
(``consumer/_paths.py``). It derives from the rows' ``seq_lens``
(:mod:`torch_tgb.transforms.derive`): masked ``labels`` (``-100`` where a
sequence ends and on padding) and the keys ``ReaderOptions(derive=)`` names,
after judging the stored lengths (untrusted bytes), keeps the keys asked for
(``keys=``) and casts as ``ReaderOptions.dtype`` says (:class:`IntegerCast`).

The common step of a token-rows namespace, one whole slice whose rows hold
the tokens and the one after them (``StepReads.whole_rows``), has its own
entry, :meth:`Finish.rows`: the rows are split into ``input_ids`` (a view) and
their shift, and the masked labels are made from the shift in one pass, the
copy that casts and the copy that masks being the same ``np.copyto``; then 32
indices are set to -100. What the rows' lengths imply (which labels are
ignored, the derived keys, where padding lies) is computed once per distinct
rows (unpacked and concat-and-chunk rows are alike every step).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from torch_tgb.consumer._keys import KeyPlan
from torch_tgb.errors import CorruptObject
from torch_tgb.format import DTYPES, KEEP, WIDEN, IntegerCast, SliceInfo
from torch_tgb.layout import LABELS_KEY, ReadPlan, offsets_key
from torch_tgb.transforms.derive import (
    SEQ_LENS_KEY,
    derived_arrays,
    ignored_labels,
    padding_at,
    padding_problem,
    seq_lens_problem,
)
from torch_tgb.transforms.packing import IGNORE_INDEX

__all__ = ["Batch", "Finish", "uncast_keys"]

Batch = dict[str, torch.Tensor]

#: torch label dtypes whose masked copy numpy makes (bfloat16 and the like have no numpy twin: torch makes it)
_NUMPY_LABELS = {torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
                 torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}

#: the stored dtypes by the name a footer gives them
_TORCH_DTYPES = {d.name: d.torch_dtype for d in DTYPES}

#: what the rows' lengths imply: (key, ignored labels, derived keys, padding positions)
_Rows = tuple[tuple[int, bytes, bytes], "np.ndarray | None", dict[str, np.ndarray],
              "tuple[np.ndarray, np.ndarray, np.ndarray] | None"]


def uncast_keys(plan: ReadPlan) -> frozenset[str]:
    """What a ``dtype`` cast leaves alone: ragged keys and their offsets (the cast is for dense token ids)."""
    return frozenset(plan.ragged) | {offsets_key(k) for k in plan.ragged}


class Finish:
    """Turns steps as read into steps handed out, for one read plan, dtype and :class:`KeyPlan`.

    :attr:`step` finishes a step as read; :attr:`cast_step` one whose stored
    tensors were cast as read (None: such a step is handed out as it is);
    :meth:`rows` a whole-rows piece (one slice of token rows, cast as read or
    needing no cast: see the module docstring).
    """

    def __init__(self, plan: ReadPlan, dtype: torch.dtype | None, keys: KeyPlan) -> None:
        self.plan = plan
        self.keys = keys
        self.derives = keys.mask_labels or bool(keys.derive)
        self.label_dtype = torch.int64 if dtype is None else dtype
        if keys.mask_labels and (not self.label_dtype.is_signed or self.label_dtype == torch.bool):
            raise ValueError(f"dtype={dtype} cannot hold the -100 of masked labels; pass a signed dtype "
                             "(e.g. torch.int64) or ReaderOptions(derive=()) for the bare shift")
        keep = uncast_keys(plan)
        # masked labels are made at the delivered dtype already (derive): the cast leaves them alone
        uncast = keep | {LABELS_KEY} if keys.mask_labels and self.label_dtype == dtype else keep
        #: the one host-side cast (None: no dtype)
        self.cast = None if dtype is None else IntegerCast(dtype, uncast)
        #: nothing derived or dropped: a step as read needs only the cast
        self.plain = not self.derives and keys.deliver is None
        #: a step as read -> the step handed out (:meth:`finish_step`, or just its cast where that is all it does)
        self.step: Callable[[Batch], Batch] = self.finish_step
        if self.plain and self.cast is not None:
            self.step = self.cast
        #: a step already cast as read (a run path's one slice) -> the step handed out (None: as it is)
        self.cast_step: Callable[[Batch], Batch] | None = (
            None if self.plain else self._finish_cast if self.derives else self.select)
        self._numpy_label = _NUMPY_LABELS.get(self.label_dtype)
        self._numpy_cast = None if dtype is None else _NUMPY_LABELS.get(dtype)
        self._lens_offsets = offsets_key(SEQ_LENS_KEY)
        self.tokens_key = plan.written.labels_from or LABELS_KEY
        #: whether the tokens the rows' lengths call padding are judged (rows of tokens: labels_from)
        self._padded = plan.written.labels_from is not None
        #: delivered tokens per row -> (the rows' seq_len, the token ranges this rank holds)
        self._geometry: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        self._last_rows: _Rows | None = None

    # --- steps as assembled --------------------------------------------------

    def finish_step(self, tensors: Batch) -> Batch:
        """Derived keys, only the keys asked for, the cast: a step as read -> the step handed out."""
        if self.derives:
            tensors = self.derive(tensors)
        if self.keys.deliver is not None:
            tensors = self.select(tensors)
        return tensors if self.cast is None else self.cast(tensors)

    def _finish_cast(self, tensors: Batch) -> Batch:
        """:meth:`finish_step` of a step whose stored tensors were cast as read: only the derived keys are left to cast.

        Derivation reads ``seq_lens`` (never cast) and the tokens' shape only, so
        it does not mind whether the tokens were cast; masked labels are copied
        at the labels' dtype either way.
        """
        tensors = self.derive(tensors)
        return self._cast_derived(tensors)

    def _cast_derived(self, tensors: Batch) -> Batch:
        if self.keys.derive and self.cast is not None:
            tensors.update(self.cast({name: tensors[name] for name in self.keys.derive}))
        return tensors if self.keys.deliver is None else self.select(tensors)

    def select(self, tensors: Batch) -> Batch:
        """Only the keys asked for (``ReaderOptions(keys=)``)."""
        deliver = self.keys.deliver
        return tensors if deliver is None else {k: v for k, v in tensors.items() if k in deliver}

    def derive(self, tensors: Batch) -> Batch:
        """Masked ``labels`` and the keys asked for, from the rows' ``seq_lens`` (:mod:`torch_tgb.transforms.derive`).

        :class:`CorruptObject` if the stored lengths cannot be the rows' (:func:`seq_lens_problem`), or
        call tokens padding that are not (:func:`padding_problem`).
        """
        tokens = tensors[self.tokens_key]
        ignored, derived = self._judged(tensors, int(tokens.shape[1]), tokens.numpy)
        out = dict(tensors)
        if ignored is not None:
            out[LABELS_KEY] = self._masked(tensors[LABELS_KEY], ignored)
        for name, array in derived.items():  # a copy each step: a training step may write into what it got
            out[name] = torch.from_numpy(array.copy())
        return out

    # --- a whole slice of token rows -------------------------------------------

    def takes_rows(self, info: SliceInfo) -> bool:
        """Whether :meth:`rows` makes the steps of slices like ``info`` (read as stored, not cast).

        Its tokens are 2-d rows of at least two columns, and the cast asked for, if
        any, widens them (no value needs checking) to a dtype numpy has.
        """
        tokens = next((t for t in info.tensors if t.name == self.tokens_key), None)
        if tokens is None or len(tokens.shape) != 2 or tokens.shape[1] < 2:
            return False
        if self.cast is None:
            return True
        rule = self.cast.rule(tokens.name, _TORCH_DTYPES[tokens.dtype])
        return rule == KEEP or (rule == WIDEN and self._numpy_cast is not None)

    def rows(self, piece: Batch) -> Batch:
        """The step of one whole slice of token rows (``StepReads.whole_rows``) as handed out.

        ``piece`` is the slice as read, as stored (:meth:`takes_rows`). Each copy
        is one pass from the stored rows: the tokens cast (a view when no cast is
        asked for) and the masked labels cast; a bare shift with a cast is the
        rows cast once, the tokens and the shift two views of it. The same tensors
        as :attr:`step` of the assembled step, but the tokens contiguous.
        """
        name = self.tokens_key
        out = dict(piece)
        array = out.pop(name).numpy()
        ignored, derived = self._judged(piece, array.shape[1] - 1, lambda: array[:, :-1])
        target = self._numpy_cast
        if self.cast is not None and not out.keys() <= self.cast.skip:  # seq_lens and its offsets are never cast
            out = self.cast(out)
        if ignored is not None:
            out[LABELS_KEY] = self._masked_array(array[:, 1:], ignored)
            out[name] = torch.from_numpy(array[:, :-1] if target is None else array[:, :-1].astype(target))
        else:  # the bare shift: two views of the rows (cast once)
            rows = torch.from_numpy(array if target is None or array.dtype == target else array.astype(target))
            out[name], out[LABELS_KEY] = rows[:, :-1], rows[:, 1:]
        for key, values in derived.items():
            out[key] = torch.from_numpy(values.copy())
        return self._cast_derived(out)

    # --- the rows' lengths ----------------------------------------------------

    def _judged(
        self, tensors: Batch, width: int, tokens: Callable[[], np.ndarray]
    ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """The labels the rows' lengths ignore (None: not masked) and the keys derived, the lengths judged.

        ``width``: tokens per row delivered; ``tokens()``: those tokens, looked at only where the lengths
        leave padding.
        """
        lengths, offsets = tensors[SEQ_LENS_KEY].numpy(), tensors[self._lens_offsets].numpy()
        geometry = self._geometry.get(width)
        if geometry is None:
            seq_len = self.plan.seq_len_of(width)
            geometry = self._geometry[width] = (seq_len, self.plan.token_ranges(seq_len))
        seq_len, ranges = geometry
        key = (seq_len, lengths.tobytes(), offsets.tobytes())
        last = self._last_rows
        if last is None or last[0] != key:
            last = self._last_rows = self._rows_implied(key, lengths, offsets, seq_len, ranges)
        padding = last[3]
        if padding is not None and len(padding[0]):
            problem = padding_problem(tokens(), padding, self.tokens_key)
            if problem is not None:
                raise CorruptObject(f"stored {SEQ_LENS_KEY!r}: {problem}")
        return last[1], last[2]

    def _rows_implied(
        self, key: tuple[int, bytes, bytes], lengths: np.ndarray, offsets: np.ndarray, seq_len: int,
        ranges: tuple[tuple[int, int], ...],
    ) -> _Rows:
        """The rows' lengths judged (:func:`seq_lens_problem`), and what they imply (see :data:`_Rows`)."""
        problem = seq_lens_problem(lengths, offsets, seq_len)
        if problem is not None:
            raise CorruptObject(f"stored {SEQ_LENS_KEY!r}: {problem}")
        ignored = ignored_labels(lengths, offsets, seq_len, ranges) if self.keys.mask_labels else None
        derived = derived_arrays(lengths, offsets, seq_len, ranges, self.keys.derive) if self.keys.derive else {}
        padding = padding_at(lengths, offsets, seq_len, ranges) if self._padded else None
        return key, ignored, derived, padding

    def _masked(self, shift: torch.Tensor, ignored: np.ndarray) -> torch.Tensor:
        """``shift`` as the labels' dtype with -100 at ``ignored`` (flat indices): a fresh tensor."""
        if shift.dtype.is_floating_point and shift.dtype not in _NUMPY_LABELS:  # bfloat16 has no numpy twin
            labels = shift.to(self.label_dtype, memory_format=torch.contiguous_format, copy=True)
            labels.view(-1).index_fill_(0, torch.from_numpy(ignored), IGNORE_INDEX)
            return labels
        return self._masked_array(shift.numpy(), ignored)

    def _masked_array(self, shift: np.ndarray, ignored: np.ndarray) -> torch.Tensor:
        """:meth:`_masked` of a numpy ``shift``: one pass that casts and copies, then the -100s."""
        if self._numpy_label is None:  # bfloat16 labels: torch casts
            labels_t = torch.from_numpy(shift).to(self.label_dtype, memory_format=torch.contiguous_format, copy=True)
            labels_t.view(-1).index_fill_(0, torch.from_numpy(ignored), IGNORE_INDEX)
            return labels_t
        labels = shift.astype(self._numpy_label)  # Tensor.to's cast (astype beats copyto into np.empty by ~2x)
        labels.reshape(-1)[ignored] = IGNORE_INDEX
        return torch.from_numpy(labels)
