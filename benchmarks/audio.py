"""Audio producers: DecodeAudio's decode + resample against PyAV's own, side by side in one run.

One producer process, one thread (``torch.set_num_threads(1)``). The same
encoded clips (sine sweeps with noise, 2-12 s, WAV 16-bit / FLAC / MP3 /
Opus, recorded at 16, 22.05, 44.1 and 48 kHz, mono and stereo; made locally
by ``torch_tgb.testing.audio``, nothing downloaded) go through

- ``pyav``: PyAV's own decode of each file with ``av.AudioResampler(format="flt",
  layout="mono", rate=16000)`` and the chunks joined into one array
  (``testing.audio.reference_decode``: the baseline);
- ``stages``: ``datapipes.DecodeAudio(sample_rate=16000, layout="mono")``
  over an in-memory source of the same bytes (header checks, bad-input
  policy, the ragged ``audio_values`` / ``audio_lengths`` tensors);
- ``stages_logmel``: the same with ``features=LogMel()`` (80 mels, Whisper's
  front end) added, for what features cost on the producer (not part of the
  goal).

Rounds alternate the runs (``_common.interleave``); each figure is the median
over ``--rounds`` rounds: clips/s, seconds of audio per second (x realtime),
MB/s of encoded input, and the ratio to ``pyav`` in the same round (goal:
``stages`` >= 0.8x). Also per format, for the stages and PyAV.

Run:  python benchmarks/audio.py            (5 rounds x 80 clips)
      python benchmarks/audio.py --quick    (3 rounds x 24 clips)
Writes audio.json into --results-dir (default ./tgb-bench-results).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb import datapipes
from torch_tgb.testing.audio import encode_audio, reference_decode, sweep
from torch_tgb.transforms import LogMel

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, interleave, results_dir, save, spread

FORMATS = ("wav", "flac", "mp3", "opus")
RATES = (16000, 22050, 44100, 48000)


class Clips(BaseNode[dict[str, Any]]):
    """The benchmark's encoded clips as samples (``{ext: bytes, "tokens", "__key__"}``), from memory."""

    def __init__(self, clips: list[tuple[str, bytes]]) -> None:
        super().__init__()
        self.clips, self._i = clips, 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._i = 0 if initial_state is None else int(initial_state["i"])

    def next(self) -> dict[str, Any]:
        if self._i >= len(self.clips):
            raise StopIteration
        ext, data = self.clips[self._i]
        self._i += 1
        return {"__key__": str(self._i), ext: data, "tokens": torch.zeros(0, dtype=torch.int64)}

    def get_state(self) -> dict[str, Any]:
        return {"i": self._i}


def make_clips(n: int, seed: int) -> list[tuple[str, bytes, float]]:
    """``(format, bytes, seconds)`` of ``n`` clips, formats and rates in turn, lengths log-uniform 2-12 s."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        fmt, rate = FORMATS[k % len(FORMATS)], RATES[(k // len(FORMATS)) % len(RATES)]
        seconds = float(np.exp(rng.uniform(np.log(2), np.log(12))))
        channels = 2 if k % 3 == 2 else 1
        clip = sweep(seconds, rate, channels=channels, f0=float(rng.uniform(80, 300)),
                     f1=float(rng.uniform(1000, 6000)), seed=seed * 10_007 + k)
        out.append((fmt, encode_audio(clip, rate, fmt), seconds))
    return out


def pyav_pass(clips: list[tuple[str, bytes]]) -> int:
    return sum(int(reference_decode(data, sample_rate=16000, layout="mono").shape[0]) for _, data in clips)


def stages_pass(clips: list[tuple[str, bytes]], features: LogMel | None) -> int:
    stage = datapipes.DecodeAudio(Clips(clips), sample_rate=16000, layout="mono", features=features, on_error="raise")
    return sum(int(d["audio_lengths"].sum()) for d in stage)


def timed(fn: Callable[[], int]) -> Callable[[], tuple[float, int]]:
    def run() -> tuple[float, int]:
        t = time.perf_counter()
        samples = fn()
        return time.perf_counter() - t, samples
    return run


def compare(clips: list[tuple[str, bytes, float]], rounds: int, *, features: bool = True) -> dict[str, Any]:
    """The runs over ``clips``, interleaved ``rounds`` times: medians and ratios to ``pyav`` per round."""
    pairs = [(fmt, data) for fmt, data, _ in clips]
    runs = {"pyav": timed(lambda: pyav_pass(pairs)), "stages": timed(lambda: stages_pass(pairs, None))}
    if features:
        runs["stages_logmel"] = timed(lambda: stages_pass(pairs, LogMel()))
    got = interleave(runs, rounds)
    samples = {name: values[0][1] for name, values in got.items()}
    if len(set(samples.values())) != 1:
        raise SystemExit(f"the runs decoded different sample counts: {samples}")
    audio_s = sum(s for _, _, s in clips)
    bytes_in = sum(len(d) for _, d, _ in clips)
    out: dict[str, Any] = {}
    for name, values in got.items():
        seconds = [s for s, _ in values]
        median = statistics.median(seconds)
        ratios = [p[0] / s for (p, s) in zip(got["pyav"], seconds)]
        out[name] = {"clips_per_s": len(clips) / median, "x_realtime": audio_s / median,
                     "mb_in_per_s": bytes_in / median / 1e6, "seconds": spread(seconds),
                     "ratio_to_pyav": statistics.median(ratios), "ratio_to_pyav_rounds": ratios}
    return {"clips": len(clips), "audio_seconds": audio_s, "bytes_in": bytes_in, "samples_out": samples["pyav"],
            "runs": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds x 24 clips")
    ap.add_argument("--clips", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    add_results_arg(ap)
    args = ap.parse_args()
    n, rounds = (24, 3) if args.quick else (args.clips, args.rounds)
    torch.set_num_threads(1)
    clips = make_clips(n, args.seed)
    overall = compare(clips, rounds)
    print(f"decode + resample to 16 kHz mono, {n} clips ({overall['audio_seconds']:.0f} s of audio, "
          f"{overall['bytes_in'] / 1e6:.1f} MB encoded), 1 thread, median of {rounds} rounds")
    for name, r in overall["runs"].items():
        print(f"  {name:<14} {r['clips_per_s']:7.1f} clips/s  {r['x_realtime']:7.0f}x realtime  "
              f"in {r['mb_in_per_s']:6.2f} MB/s  x{r['ratio_to_pyav']:.2f} of pyav")
    by_format = {}
    for fmt in FORMATS:
        part = [c for c in clips if c[0] == fmt]
        by_format[fmt] = compare(part, rounds, features=False)
        r = by_format[fmt]["runs"]
        print(f"  {fmt:<5} stages {r['stages']['x_realtime']:7.0f}x realtime, pyav {r['pyav']['x_realtime']:7.0f}x: "
              f"x{r['stages']['ratio_to_pyav']:.2f}")
    goal = overall["runs"]["stages"]["ratio_to_pyav"] >= 0.8
    print(f"goal stages >= 0.8x pyav: {'met' if goal else 'NOT met'}")
    save(results_dir(args), "audio", {"quick": args.quick, "rounds": rounds, "threads": 1, "overall": overall,
                                      "by_format": by_format, "goal_ratio": 0.8, "goal_met": goal})


if __name__ == "__main__":
    main()
