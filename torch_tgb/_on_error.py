"""``on_error``: the one vocabulary for what a producer-side stage does with a bad input.

``"raise"`` stops the pipeline with the typed error that names the input;
``"skip"`` drops it and counts it under its reason in the stage's
``stats()``, and ``tgb.produce`` reports and warns about every skip at the
end of a run: a skip is never silent. The defaults say what a bad input
means where: ``"raise"`` for sources (a record of a corpus that cannot be
read is a broken corpus), ``"skip"`` for the media stages (an undecodable
image is expected in web data). Sources (``sources.*``),
media stages (``datapipes.DecodeImages``, ...) and ``tgb produce --on-error``
take the same two words. ``"skip_and_count"``, the sources' spelling in 0.1,
is refused with an error naming ``"skip"``.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ON_ERROR", "OnError", "check_on_error"]

OnError = Literal["raise", "skip"]
#: the values of ``on_error``, the default first
ON_ERROR: tuple[OnError, ...] = ("raise", "skip")
#: spellings of earlier releases -> the word that replaced them
_RENAMED = {"skip_and_count": "skip"}


def check_on_error(value: object, *, where: str) -> OnError:
    """``value`` if it is an ``on_error`` word, else a ``ValueError`` naming ``where`` and the words there are."""
    if value == "raise" or value == "skip":
        return value
    if isinstance(value, str) and value in _RENAMED:
        raise ValueError(f"{where}: on_error={value!r} is now on_error={_RENAMED[value]!r} (skips are always "
                         f"counted; renamed after 0.1, see CHANGELOG.md)")
    raise ValueError(f"{where}: on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {value!r}")
