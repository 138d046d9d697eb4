"""A corpus 3x larger than a memory bound, written by ``write_dataset`` in a subprocess: peak RSS stays under the bound.

The corpus is a sparse 360 MB int32 token file (created instantly), memory-
mapped. The child first writes a tiny corpus (so every module the write uses,
and the libraries they load, are imported: their size is not the corpus's),
reports its resident set then (the baseline) and its peak (``VmHWM``) after the
big write; the growth must stay below a third of the corpus. The old
implementation held the whole corpus at ~12x its size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

CORPUS_BYTES = 360 * 1024 * 1024
BOUND_BYTES = CORPUS_BYTES // 3

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch
    from torch_tgb.layout import Layout
    from torch_tgb.offline import write_dataset

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(field)

    tokens_path, offsets_path, ns = sys.argv[1:4]
    tokens = np.load(tokens_path, mmap_mode="r")
    offsets = np.load(offsets_path, mmap_mode="r")
    write_dataset(ns + "-warm", (np.arange(1, 65, dtype=np.int32), np.array([0, 64])), layout=Layout(dp=2),
                  global_batch_size=16, seq_len=8192, packing=None, token_dtype=torch.int32, progress=False)
    base = status("VmRSS")
    summary = write_dataset(ns, (tokens, offsets), layout=Layout(dp=2), global_batch_size=16, seq_len=8192,
                            packing=None, token_dtype=torch.int32, progress=False)
    print(json.dumps({"base": base, "peak": status("VmHWM"), "tokens": summary["tokens"],
                      "batches": summary["batches"]}))
    """
)


@pytest.mark.slow
def test_corpus_three_times_the_bound_streams_in_bounded_memory(tmp_path) -> None:
    tokens_path = tmp_path / "tokens.npy"
    n = CORPUS_BYTES // 4
    mapped = np.lib.format.open_memmap(tokens_path, mode="w+", dtype=np.int32, shape=(n,))  # sparse: zeros
    mapped[::1_000_003] = 7  # a few real pages
    mapped.flush()
    del mapped
    offsets = np.append(np.arange(0, n, 1000, dtype=np.int64), n)
    np.save(tmp_path / "offsets.npy", offsets)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tokens_path), str(tmp_path / "offsets.npy"), str(tmp_path / "ns")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tokens"] == n
    growth = out["peak"] - out["base"]
    print(f"corpus {CORPUS_BYTES / 2**20:.0f} MiB: baseline RSS {out['base'] / 2**20:.0f} MiB, peak {out['peak'] / 2**20:.0f} MiB")
    assert growth < BOUND_BYTES, f"peak RSS grew by {growth / 2**20:.0f} MiB for a {CORPUS_BYTES / 2**20:.0f} MiB corpus"
