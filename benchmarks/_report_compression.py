"""Section 11 of ``report.py``: compression at rest, the decoding's CPU and the trainer's read, plain vs compressed
(``end_to_end_compressed.json``: ``end_to_end.py --sweep-only`` with its ``b_zstd`` setup; ``decode_path.json``)."""

from __future__ import annotations

from typing import Any

from _report_common import med, rng, verdict, when


def compression_section(e2e: dict[str, Any] | None, decode: dict[str, Any] | None) -> list[str]:
    out = ["## 12. Compression at rest: decoding, and the trainer's read plain vs compressed "
           "(`decode_path.py`, `end_to_end.py`)", ""]
    if decode is None and e2e is None:
        return out + ["No `decode_path.json` or `end_to_end_compressed.json` in the results directory: not run.", ""]
    if decode is not None:
        out += _decode(decode)
    if e2e is not None:
        out += _e2e(e2e)
    return out


def _decode(r: dict[str, Any]) -> list[str]:
    out = [f"**Decoding one step** ({when(r)}; load average {r['load_before'][0]:.1f} on 2 cores at the start; "
           f"{r['config']['rounds']} interleaved rounds, CPU ms of the decoding thread per step, median (min–max)):",
           "", "| step | at rest | before (decompress + copy + filter) | after (into the buffer + filter) | "
           "of which zstd | of which delta filter (numpy adds alone) | CRC32C | lz4 / lz4 + delta (ratio) | 2 threads / 1 (wall) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for kind in ("image", "video"):
        k = r[kind]
        c = k["cpu_ms_per_step"]
        lz = k.get("lz4") or {}
        lz4 = (f"{rng(c['lz4'], 1, 1)} / {rng(c['lz4+delta'], 1, 1)} ({lz['ratio']:.2f}× / {lz['ratio_delta']:.2f}×)"
               if "lz4" in c else lz.get("note", "–"))
        out.append(f"| {kind} {k['shape']} uint8, {k['bytes'] / 1e6:.1f} MB | {k['ratio']:.2f}× (`{k['spec']}`) | "
                   f"{rng(c['before'], 1, 1)} | {rng(c['after'], 1, 1)} | {rng(c['zstd'], 1, 1)} | "
                   f"{rng(c['delta'], 1, 1)} ({rng(c.get('delta_numpy'), 1, 1)}) | {rng(c['crc'], 1, 2)} | {lz4} | "
                   f"{rng(k['threads']['two_over_one'], 1, 2)} |")
    return out + [""]


def _e2e(r: dict[str, Any]) -> list[str]:
    setups = " ".join(r["nodes"]["pinning"])
    out = [f"**The trainer's read** (`end_to_end.py`, resolutions {', '.join(map(str, r['config']['resolutions']))}, "
           f"setups {setups}{', sweep only' if r.get('sweep_only') else ''}; {when(r)}; "
           f"{r['machine_note']}; load {r['load']['start'][0]:.1f} at the start, {r['load']['end'][0]:.1f} at the end; "
           f"{r['config']['rounds']} interleaved rounds, median (min–max)). T = core {r['nodes']['T']} holds the "
           "trainer and its reader (the decoding runs on T); `b` and `b_zstd` are the same producers on P, "
           "`b_zstd` storing `pixel_values` as `zstd:1+delta:3x14x14`. The calibration reads a namespace written "
           "beforehand, plain and compressed (order alternating by round), with the trainer's step fed by "
           "`tgb.DataLoader` on T: the reader's share alone.", "",
           "| resolution | bytes at rest, plain / compressed | T's CPU per step, model + the rest: `b` → `b_zstd` | "
           "decoding on T per step | steps/s on a quiet T, from the CPU: `b_zstd` / `b` | D plain → compressed "
           "(producer CPU per step) | `b` steps/s | `b_zstd` steps/s | `b_zstd` / `b` (wall) | "
           "calibration's read, compressed / plain (wall) | wait per step `b` / `b_zstd` |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    cpu_ratios: list[tuple[str, float]] = []
    for res, s in r["summary"].items():
        c = s.get("compressed") or {}
        b, z = s["setups"].get("b", {}), s["setups"].get("b_zstd", {})
        mb, rb = med(b.get("compute_cpu_ms_per_step")), med(b.get("reader_cpu_ms_per_step"))
        mz, rz = med(z.get("compute_cpu_ms_per_step")), med(z.get("reader_cpu_ms_per_step"))
        quiet = (mb + rb) / (mb + rz)  # the same model step on a core of its own: what the reads add to it
        cpu_ratios.append((res, quiet))
        out.append(
            f"| {res} | {rng(c.get('at_rest_ratio'), 1, 2)}× | {mb:.1f} + {rb:.1f} → {mz:.1f} + {rz:.1f} ms | "
            f"{rz - rb:.1f} ms | {quiet:.2f} | {rng(s['D_s'], 1e3, 0)} → {rng(c.get('D_zstd_s'), 1e3, 0)} ms | "
            f"{rng(b.get('steps_per_s'), 1, 2)} | {rng(z.get('steps_per_s'), 1, 2)} | "
            f"{rng(s['ratios'].get('b_zstd_over_b'), 1, 2)} | {rng(c.get('reader_zstd_over_plain'), 1, 2)} | "
            f"{rng(b.get('wait_ms_per_step'), 1, 1)} / {rng(z.get('wait_ms_per_step'), 1, 1)} ms |")
    met = [res for res, x in cpu_ratios if x >= 0.9]
    missed = [res for res, x in cpu_ratios if x < 0.9]
    out += ["", f"Goal (issue 48): the compressed namespace's steps/s ≥ 0.9× the plain one's with the trainer on its "
            f"own core: from the CPU figures, {', '.join(f'{x:.2f}× at {res}' for res, x in cpu_ratios)}: "
            f"{verdict(not missed)}{f' (met at {chr(44).join(met)})' if met and missed else ''}, with the trainer's "
            "core also decoding; the wall-time ratios moved with other jobs' load. "
            + (f"Earlier run ({r['earlier_run']['commit']}): {r['earlier_run']['note']}. " if r.get("earlier_run")
               else "") +
            "A step costs S + the decoding on T, so the ratio is at best "
            "S / (S + decode): ≥ 0.9× only where S is ≥ 9× the decoding (docs/multimodal.md, *Compression at "
            "rest*).", ""]
    return out
