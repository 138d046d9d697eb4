"""Object names of provenance in a namespace: sources, the lineage index, excisions (docs/provenance.md).

Numbers are zero-padded so that a lexicographic LIST is numeric order.
"""

from __future__ import annotations

import re

__all__ = [
    "CATALOG_PREFIX",
    "DELTA_PREFIX",
    "EXCISIONS_PREFIX",
    "LINEAGE_PREFIX",
    "RUNS_PREFIX",
    "SOURCES_PREFIX",
    "catalog_key",
    "delta_key",
    "excision_key",
    "number_in",
    "run_key",
    "source_key",
]

LINEAGE_PREFIX = "_tgb/lineage/"
SOURCES_PREFIX = "_tgb/lineage/sources/"
DELTA_PREFIX = "_tgb/lineage/delta/"
RUNS_PREFIX = "_tgb/lineage/runs/"
CATALOG_PREFIX = "_tgb/lineage/catalog/"
EXCISIONS_PREFIX = "_tgb/excisions/"

_NUMBER = re.compile(r"([0-9]{20})(?:-[0-9a-f]{8})?\.(?:lin|json)")


def source_key(source_id: int) -> str:
    """The record of source ``source_id`` (its name, kind and unit names)."""
    return f"{SOURCES_PREFIX}{source_id:08x}.json"


def delta_key(version: int) -> str:
    """The lineage entries of the steps manifest version ``version`` added (written by its committer)."""
    return f"{DELTA_PREFIX}{version:020d}.lin"


def run_key(level: int, lo: int, hi: int, token: str) -> str:
    """A merged run of level ``level`` covering versions ``lo .. hi``, written by one compaction."""
    return f"{RUNS_PREFIX}{level:02d}-{lo:020d}-{hi:020d}-{token[:8]}.lin"


def catalog_key(generation: int) -> str:
    """Generation ``generation`` of the lineage catalog (created once, conditionally)."""
    return f"{CATALOG_PREFIX}{generation:020d}.json"


def excision_key(version: int, token: str) -> str:
    """The audit record of the excision committed as replacement version ``version`` by the attempt ``token``."""
    return f"{EXCISIONS_PREFIX}{version:020d}-{token[:8]}.json"


def number_in(key: str, prefix: str) -> int | None:
    """The number a key under ``prefix`` names (a delta's version, a catalog's generation); None if not ours."""
    match = _NUMBER.fullmatch(key[len(prefix) :]) if key.startswith(prefix) else None
    return None if match is None else int(match.group(1))
