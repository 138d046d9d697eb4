"""The dataset card of a namespace, generated from its manifest and its lineage index (``tgb card``).

Nothing is kept beside them: the card reads ``dataset.json`` (layout,
schema, the contract: tokenizer, pipeline version, git SHA as producers
recorded them in its metadata), the newest manifest state (steps, seal,
producers, replacements), the lineage index's summaries (tokens, documents
and spans per source, the realised mixture per step range, rows), the
sources' records and the excisions' audit trail. Versions the index does
not hold yet are read from their TGBs first (``Lineage.fill``), so the card
counts every committed step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from torch_tgb.lineage._runs import MIX_STEPS, decode_run, merge_summaries
from torch_tgb.lineage.query import Lineage
from torch_tgb.storage import ObjectStore

__all__ = ["CONTRACT_KEYS", "dataset_card", "mixture_ranges"]

#: metadata keys the card shows as the data contract (whatever producers recorded)
CONTRACT_KEYS = ("tokenizer", "vocab_size", "pipeline", "pipeline_version", "git_sha", "git", "source")
#: step ranges the realised mixture is shown over (at most)
RANGES = 8


def dataset_card(ns: str | ObjectStore, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The card of ``ns`` as a JSON-able dict (``tgb card --json`` prints it; ``tgb card`` renders it)."""
    with Lineage(ns, storage_options=storage_options) as lineage:
        info = lineage.manifest.dataset()
        head = lineage.manifest.head()
        state = lineage.index.state()
        summaries = [r.summary for r in state.catalog.runs]
        summaries += [decode_run(lineage.store.get(key), what=key)[1] for _, key in sorted(state.deltas.items())]
        summaries += [summary for _, summary in lineage.fill(state.missing(head.version)).values()]
        total = merge_summaries(summaries)
        sources = lineage.sources()
        excisions = lineage.excisions()
        layout = dict(info.layout) if info is not None else {}
        schema = dict(info.schema) if info is not None else {}
        seq_len = _seq_len(schema, layout)
        tokens = sum(int(c["tokens"]) for c in total["sources"].values())
        names = {f"{sid:08x}": s.name for sid, s in sources.items()}
        metadata = dict(info.metadata) if info is not None else {}
        return {
            "namespace": lineage.store.url,
            "dataset": None if info is None else {
                "identity": hashlib.sha256(info.encode()).hexdigest(), "fingerprint": info.fingerprint,
                "created_at": info.created_at, "layout": layout, "schema": schema,
                "contract": {k: metadata[k] for k in CONTRACT_KEYS if k in metadata}, "metadata": metadata,
            },
            "manifest": {"version": head.version, "steps": head.num_steps, "sealed": head.sealed,
                         "producers": len(head.producers), "replaced_steps": head.replaced.steps if head.replaced else 0},
            "sources": [
                {"id": sid, "name": names.get(sid, sid), "kind": sources[int(sid, 16)].kind if int(sid, 16) in sources
                 else "?", "units": len(sources[int(sid, 16)].units) if int(sid, 16) in sources else 0,
                 "documents": c["documents"], "spans": c["spans"], "tokens": c["tokens"],
                 "share": c["tokens"] / tokens if tokens else 0.0}
                for sid, c in sorted(total["sources"].items())
            ],
            "mixture": mixture_ranges(total["mix"], names, head.num_steps),
            "packing": {"tgbs": total["tgbs"], "rows": total["rows"], "seq_len": seq_len, "tokens": tokens,
                        "efficiency": tokens / (total["rows"] * seq_len) if total["rows"] and seq_len else None},
            "lineage": {"indexed_through": state.indexed, "catalog": state.catalog.generation,
                        "runs": len(state.catalog.runs), "deltas": len(state.deltas), "head": head.version},
            "excisions": [{"version": e.version, "who": e.who, "when": e.when, "reason": e.reason,
                           "records": len(e.records), "steps": len(e.steps), "spans": e.spans, "tokens": e.tokens}
                          for e in excisions],
        }


def _seq_len(schema: Mapping[str, Any], layout: Mapping[str, Any]) -> int | None:
    spec = schema.get("input_ids")
    if not isinstance(spec, Mapping) or not spec.get("shape"):
        return None
    stored = int(spec["shape"][0])
    return stored - 1 if layout.get("labels_from") == "input_ids" else stored


def mixture_ranges(mix: Mapping[str, Mapping[str, int]], names: Mapping[str, str], steps: int) -> list[dict[str, Any]]:
    """The realised mixture (share of tokens per source) over at most :data:`RANGES` step ranges."""
    if not mix or steps <= 0:
        return []
    blocks = -(-steps // MIX_STEPS)
    per = -(-blocks // RANGES)
    out = []
    for lo in range(0, blocks, per):
        counts: dict[str, int] = {}
        for b in range(lo, min(blocks, lo + per)):
            for sid, n in mix.get(str(b), {}).items():
                counts[sid] = counts.get(sid, 0) + int(n)
        total = sum(counts.values())
        out.append({"steps": [lo * MIX_STEPS, min(steps, (lo + per) * MIX_STEPS)], "tokens": total,
                    "shares": {names.get(sid, sid): n / total for sid, n in sorted(counts.items())} if total else {}})
    return out
