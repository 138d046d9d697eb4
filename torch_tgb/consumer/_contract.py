"""The trainer's data contract: what it expects of a namespace's metadata, checked before step 0.

Producers record what made a namespace in ``dataset.json``'s ``metadata``
(``Producer(metadata=...)``, ``tgb produce``: packing, ``seq_len``, ...; a
pipeline adds its tokenizer, vocabulary size, ...). A trainer states what it
was built for with ``expect={"tokenizer": ..., "vocab_size": ...}`` on
``TGBDataset``/``tgb.DataLoader``: every key must be in the metadata with an
equal value, or the reader raises :class:`~torch_tgb.errors.SchemaMismatch`
naming each difference before it delivers a step (the seed's "silent
tokenizer-version skew ... mismatch = refuse to start").

Values compare as JSON, as ``dataset.json`` stores them: a tuple equals the
list with the same items, ``1`` does not equal ``1.0`` or ``True``. The
expectation rides in the reader's state (``"tgb_expect"``), so a checkpoint
resumed against another namespace, or one whose metadata changed, is refused
the same way; a loader's own ``expect=`` and a loaded state's must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from torch_tgb.errors import SchemaMismatch

__all__ = ["EXPECT_KEY", "check_contract", "contract_differences", "merge_expectations", "normalise_expect",
           "saved_expectation"]

#: key of the expectation in a reader's state
EXPECT_KEY = "tgb_expect"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def normalise_expect(expect: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``expect`` as ``dataset.json`` would hold it (a JSON round trip); TypeError for anything JSON cannot hold."""
    if expect is None:
        return None
    if not isinstance(expect, Mapping) or not all(isinstance(k, str) for k in expect):
        raise TypeError(f"expect= is a mapping of metadata key names to values, got {expect!r:.200}")
    try:
        out: dict[str, Any] = json.loads(json.dumps(dict(expect), allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"expect= must hold JSON values (dataset.json's metadata is JSON): {e}") from e
    return out


def contract_differences(expect: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[str]:
    """One line per key of ``expect`` that ``metadata`` lacks or holds with another value (sorted by key)."""
    out = []
    for key in sorted(expect):
        if key not in metadata:
            out.append(f"{key!r}: expected {_canonical(expect[key])}, missing from the namespace's metadata")
        elif _canonical(metadata[key]) != _canonical(expect[key]):
            out.append(f"{key!r}: expected {_canonical(expect[key])}, the namespace has {_canonical(metadata[key])}")
    return out


def check_contract(expect: Mapping[str, Any] | None, metadata: Mapping[str, Any], *, namespace: str) -> None:
    """Raise :class:`SchemaMismatch` naming every difference between ``expect`` and the namespace's ``metadata``."""
    if not expect:
        return
    differences = contract_differences(expect, metadata)
    if differences:
        keys = ", ".join(sorted(metadata)) or "none"
        raise SchemaMismatch(
            f"{namespace}: the namespace does not hold the data this trainer expects "
            f"({len(differences)} of {len(expect)} expected keys differ):\n  " + "\n  ".join(differences)
            + f"\nits metadata has the keys: {keys} (`tgb inspect` prints them). Read the namespace written with "
            "these settings, or change expect= if the trainer really takes this data; a checkpoint's expectation "
            "comes with its state, so resume it only on data of the same contract"
        )


def saved_expectation(readers: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The expectation carried by the reader states of a checkpoint (their union; None if none carries one)."""
    found: dict[str, Any] | None = None
    for reader in readers:
        saved = reader.get(EXPECT_KEY)
        if saved is None:
            continue
        if not isinstance(saved, Mapping):
            raise ValueError(f"malformed {EXPECT_KEY} in a reader state: {saved!r:.200}")
        found = merge_expectations(found, saved, what="the reader states of one checkpoint")
    return found


def merge_expectations(
    own: Mapping[str, Any] | None, saved: Mapping[str, Any] | None, *, what: str = "the loaded state"
) -> dict[str, Any] | None:
    """``own`` and ``saved`` together; :class:`SchemaMismatch` where both name a key with different values."""
    if own is None and saved is None:
        return None
    conflicts = [
        f"{key!r}: {_canonical(own[key])} here, {_canonical(saved[key])} in {what}"
        for key in sorted(set(own or {}) & set(saved or {}))
        if own is not None and saved is not None and _canonical(own[key]) != _canonical(saved[key])
    ]
    if conflicts:
        raise SchemaMismatch(
            f"this reader's expect= and the data contract of {what} disagree:\n  " + "\n  ".join(conflicts)
            + "\nthe checkpoint was trained on data of another contract: resume it with the expect= it was "
            "trained with, or start this run without its data state"
        )
    return {**dict(saved or {}), **dict(own or {})}
