"""Context-parallel token ranges: which fractions of a sequence each cp rank holds.

``contiguous``: cp rank ``i`` of ``C`` holds ``[i/C, (i+1)/C)``. ``zigzag``:
``2*C`` chunks, rank ``i`` holds chunks ``i`` and ``2*C-1-i`` (balances
causal-attention work). Pure; ``Layout`` and the read projection share it.
"""

from __future__ import annotations

from fractions import Fraction

from torch_tgb.errors import LayoutError

__all__ = ["CP_ORDERS", "cp_ranges"]

CP_ORDERS = ("contiguous", "zigzag")


def cp_ranges(cp: int, cp_order: str) -> list[list[tuple[Fraction, Fraction]]]:
    """Per cp rank, the token ranges it holds (fractions of the sequence), in storage order."""
    if cp_order not in CP_ORDERS:
        raise LayoutError(f"cp_order must be one of {CP_ORDERS}, got {cp_order!r}")
    if cp_order == "contiguous" or cp == 1:
        return [[(Fraction(i, cp), Fraction(i + 1, cp))] for i in range(cp)]
    n = 2 * cp
    return [[(Fraction(i, n), Fraction(i + 1, n)), (Fraction(n - 1 - i, n), Fraction(n - i, n))] for i in range(cp)]
