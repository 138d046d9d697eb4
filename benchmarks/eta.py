"""ETA of `tgb produce`: how close the bar's estimate after 10% of a token file is to the time actually left.

A token file of ``--tokens`` tokens (default 100 M, uint16, documents of
200..2000 tokens with their offsets) is produced with ``tgb produce --source
token-file:...`` as a user runs it (a subprocess, ``TGB_PROGRESS=1``,
``--stats-interval 1``). The parent timestamps every line of its stderr as it
arrives; each stats line says the share done and the ETA. For each
checkpoint share (10%, 25%, 50%) the first line at or past it gives the
predicted time left, compared with the time the run actually took from that
line to its end: ``error = |predicted - actual| / actual`` (goal: <= 20% from
10% on). The run's own figures (seconds, tokens/s) are kept beside.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_results_arg, machine, results_dir, save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_STATS = re.compile(r"(\d+\.\d)% of [\d.]+\w? tok, ETA [\d:]+ \| ([\d.]+)([kMG]?) tok/s")
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def write_corpus(directory: Path, tokens: int, seed: int = 0) -> tuple[Path, Path]:
    """A flat uint16 token file of ``tokens`` tokens and its document offsets (.npy)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(200, 2000, size=tokens // 200 + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    offsets = offsets[offsets < tokens]
    offsets = np.append(offsets, tokens).astype(np.int64)
    path, idx = directory / "corpus.npy", directory / "corpus.idx.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(tokens,))
    step = 1 << 24
    for start in range(0, tokens, step):
        stop = min(tokens, start + step)
        array[start:stop] = (np.arange(start, stop) % 50_000).astype(np.uint16)
    array.flush()
    del array
    np.save(idx, offsets)
    return path, idx


def _predicted(match: re.Match[str], tokens: int) -> float:
    """The ETA the line shows, from its share and rate (the text's mm:ss rounds to whole seconds)."""
    share, rate = float(match.group(1)), float(match.group(2)) * _SCALE[match.group(3)]
    return (100.0 - share) / 100.0 * tokens / rate

def run(corpus: Path, idx: Path, ns: Path, *, tokens: int, global_batch: int, seq_len: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TGB_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "torch_tgb.cli", "produce", str(ns), "--source", f"token-file:{corpus}",
           "--offsets", str(idx), "--global-batch", str(global_batch), "--seq-len", str(seq_len),
           "--stats-interval", "0.25"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[tuple[float, str]] = []
    buf = b""
    assert proc.stderr is not None
    while True:
        chunk = proc.stderr.read1(1 << 16)
        if not chunk:
            break
        buf += chunk
        *done, buf = re.split(rb"[\r\n]", buf)
        now = time.monotonic()
        lines += [(now, part.decode(errors="replace")) for part in done if part.strip()]
    out = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait()
    ended = time.monotonic()
    if proc.returncode != 0:
        raise SystemExit(f"tgb produce failed ({proc.returncode}): {lines[-5:]}")
    stats = [(t, m) for t, line in lines if (m := _STATS.search(line))]
    # the work ends when the bar reaches its total (closing the producer and the process come after)
    ended = next((t for t, line in lines if re.search(r"100%\||100\.0% of", line)), ended)
    checks = {}
    for share in (10.0, 25.0, 50.0):
        first = next(((t, m) for t, m in stats if float(m.group(1)) >= share), None)
        if first is None:
            continue
        t, m = first
        predicted, actual = _predicted(m, tokens), ended - t
        checks[f"{share:.0f}%"] = {"at_share": float(m.group(1)),
                                   "predicted_s": round(predicted, 2), "actual_s": round(actual, 2),
                                   "error": round(abs(predicted - actual) / actual, 3) if actual > 0 else None}
    return {"seconds": round(time.monotonic() - started, 2), "work_s": round(ended - started, 2),
            "summary": out.strip().splitlines()[-2:], "checks": checks, "stats_lines": len(stats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3, help="runs over the same corpus (a fresh namespace each)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the corpus and namespace go (default: tmp)")
    add_results_arg(parser)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        corpus, idx = write_corpus(work, args.tokens)
        written = time.monotonic() - t0
        for r in range(args.rounds):
            rounds.append({"load_avg_1m": round(os.getloadavg()[0], 2),
                           **run(corpus, idx, work / f"ns{r}", tokens=args.tokens, global_batch=args.global_batch,
                                 seq_len=args.seq_len)})
    errors = {share: sorted(r["checks"][share]["error"] for r in rounds if share in r["checks"])
              for share in ("10%", "25%", "50%")}
    median = {share: e[len(e) // 2] for share, e in errors.items() if e}
    payload = {"machine": machine(), "tokens": args.tokens, "global_batch": args.global_batch, "seq_len": args.seq_len,
               "corpus_written_s": round(written, 2), "rounds": rounds, "median_error": median}
    print(save(results_dir(args), "eta", payload))
    for r, result in enumerate(rounds):
        for share, check in result["checks"].items():
            print(f"round {r}, after {share}: ETA {check['predicted_s']} s, took {check['actual_s']} s: "
                  f"error {check['error']:.1%} (load {result['load_avg_1m']})")
    print("median error: " + ", ".join(f"after {share} {e:.1%}" for share, e in median.items()))


if __name__ == "__main__":
    main()
