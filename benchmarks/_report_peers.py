"""The sections of ``report.py`` that compare torch_tgb with other loaders and systems: the peer loaders (local and
over S3), the GetBatch analogue and the Redis Streams baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _report_common import rng_m

# issue 15 "Measured": one process, warm cache, 16M uint32 tokens, quiet 16-core machine (not this run)
REFERENCE_16CORE = {"floor": "1,385–1,698 M", "dataloader_memmap": "104–108 M", "torch_tgb": "46–71 M",
                    "litdata": "31–50 M", "webdataset": "3.5 M", "mosaicml_streaming": "2.4–2.5 M"}


def peers_section(r: dict[str, Any], plots: Path) -> list[str]:
    out = ["## 1. Against the loaders people use (`peers.py`)", "",
           f"Corpus: {r['tokens']:,} uint32 tokens; batches of 32×512 delivered as int64; every loader in its own "
           f"fresh process, {r['rounds']} interleaved rounds (min–max in brackets), at most "
           f"{r.get('max_seconds_per_pass', '?')} s per pass. {r.get('partitioning', '')}.", ""]
    for name, p in r["peers"].items():
        out.append(f"- `{name}`: {p['note']}")
    for name, pip in r.get("not_installed", {}).items():
        out.append(f"- **{name}: not installed** (`{pip}`)")
    out += ["", "Peers are installed from `benchmarks/requirements-peers.txt` with `benchmarks/constraints.txt` "
            "(torch pinned to the CPU build; MosaicML Streaming and LitData with `--no-deps`). MosaicML Streaming "
            "imports its vision and text modules and `transformers` at import: the benchmark puts stand-in modules "
            "for `streaming.vision`, `streaming.text` and `transformers` in `sys.modules` (only its MDS reader is "
            "used). Over the loopback S3 server: the next section (`peers_s3.json`).", ""]
    for world in map(str, r["worlds"]):
        out += [f"### {world} rank process{'es' if world != '1' else ''}", "",
                "| loader | M tok/s per rank | × floor | p50 / p95 / p99 µs | first batch ms | peak RSS MB |"
                + (" 16-core reference (issue 15) |" if world == "1" else ""),
                "|---|---|---|---|---|---|" + ("---|" if world == "1" else "")]
        for name, p in r["peers"].items():
            w = p["worlds"].get(world)
            if w is None or not w["tokens_per_s_per_rank"].get("n"):
                out.append(f"| {name} | failed: {w and w['errors']} |")
                continue
            ref = f" {REFERENCE_16CORE.get(name, '–')} |" if world == "1" else ""
            failed = f" ({len(w['errors'])} round(s) failed: {w['errors'][0][:80]})" if w["errors"] else ""
            out.append(f"| {name}{failed} | {rng_m(w['tokens_per_s_per_rank'])} | {rng_m(w['ratio_to_floor'], 1, 3)} | "
                       f"{w['p50_us']['median']:.0f} / {w['p95_us']['median']:.0f} / {w['p99_us']['median']:.0f} | "
                       f"{w['ttfb_s']['median'] * 1e3:.0f} | {w['peak_rss_mb']['median']:.0f} |{ref}")
        out.append("")
    out += ["### Resume", "", f"Resume at step {r['resume_step']} (construct + load state + first batch); "
            "`exact`: the next 8 batches equal the uninterrupted run's.", "",
            "| loader | method | resume ms | exact |", "|---|---|---|---|"]
    for name, p in r["peers"].items():
        res = p["resume"]
        if isinstance(res, str):
            out.append(f"| {name} | failed: {res} | | |")
        else:
            method = {"state_dict": "state_dict / load_state_dict", "offset": "index / sampler offset",
                      "replay": "no state: replays N batches"}[res["method"]]
            out.append(f"| {name} | {method} | {res['resume_s'] * 1e3:.1f} | {res['exact']} |")
    out.append("")
    ratio_plot(r, plots / "peers.png")
    out += ["![peers](benchmarks/peers.png)", ""]
    peers = r["peers"]

    def med(name: str, world: str = "1") -> float | None:
        try:
            return peers[name]["worlds"][world]["tokens_per_s_per_rank"]["median"]
        except (KeyError, TypeError):
            return None

    tgb, dl, floor = med("torch_tgb"), med("dataloader_memmap"), med("floor")
    token_rows = "token rows" in str((peers.get("torch_tgb") or {}).get("note", ""))  # issue 28's layout
    reading = ["**Reading.**"]
    if tgb and floor:
        if token_rows:
            reading.append(f"torch_tgb delivers {tgb / floor:.3f}× the raw memmap floor here: as users run it, "
                           "through tgb.DataLoader, with int64 `labels` beside the tokens (derived from the same "
                           "uint32 bytes, -100 at row ends), each slice CRC32C-checked on its first read "
                           "(`verify=\"first\"`), which the floor does not do. The token-rows section below "
                           "compares it with a floor that delivers labels too.")
        else:
            reading.append(f"torch_tgb delivers {tgb / floor:.3f}× the raw memmap floor here: as users run it, "
                           "through tgb.DataLoader, with `labels` (int64) and `document_ids` (int32) beside the uint32 "
                           "tokens, each CRC32C-checked on its first read (`verify=\"first\"`): four times the floor's "
                           "bytes checksummed per step, which the floor neither reads nor checks. Issue 15's ≥ 0.67× "
                           "goal is for the dataset at the bare token shape, measured in the hot-path section below.")
    if tgb and dl:
        word = "faster than" if tgb > dl else "slower than"
        reading.append(f"It is {max(tgb, dl) / min(tgb, dl):.2f}× {word} a plain DataLoader over np.memmap.")
    faster = [n for n in peers if n not in ("floor", "torch_tgb") and med(n) and tgb and med(n) > tgb]
    if faster:
        reading.append(f"Loaders faster than torch_tgb here: {', '.join(faster)} — torch_tgb loses to them on "
                       "this static, local, single-node corpus, where its transactional log buys nothing.")
    slower = [n for n in peers if n not in ("floor", "torch_tgb") and med(n) and tgb and med(n) < tgb]
    if slower:
        reading.append(f"Slower: {', '.join(slower)}.")
    reading.append("First-batch time includes construction (torch_tgb reads its manifest log). With 4 rank "
                   "processes on 2 cores every loader is CPU-starved and the floor's short passes swing widely, so "
                   "the 4-rank ratios are rough. Resume: every loader with a state (and the offset-based ones) "
                   "resumes exactly; WebDataset has no state and must replay, which costs O(N). Peak RSS counts the "
                   "mapped file pages a process touched" + (
                       ": torch_tgb's namespace stores each token once (uint32) with each row's lengths." if token_rows
                       else ": torch_tgb's namespace (`write_dataset`, packing='none') holds int64 `labels` and int32 "
                       "`document_ids` beside the uint32 `input_ids`, four times the corpus's bytes, and "
                       "tgb.DataLoader delivers all of them, which is most of its larger RSS."))
    return [*out, " ".join(reading), ""]


def peers_s3_section(r: dict[str, Any]) -> list[str]:
    title = "## 1b. The same loaders over a loopback S3 server (`peers.py`, `peers_s3.json`)"
    if "skipped" in r:
        return [title, "", f"Skipped: {r['skipped']}", ""]
    probe = r["moto_small_gets_per_s"]
    probe_text = f"{probe:.0f}" if isinstance(probe, (int, float)) else f"not measured ({probe})"
    out = [title, "", f"{r['server']}. Corpus: the first {r['tokens']:,} tokens of the same corpus, each peer's own "
           f"format uploaded to the bucket and read back through the peer's S3 path; 1 rank; {r['rounds']} interleaved "
           f"round(s) of at most {r['max_batches_per_pass']} batches or {r['max_seconds_per_pass']:.0f} s per pass. "
           f"Requests are counted by the server (everything the pass asked for, index and listing included). One "
           f"client's sequential 4 KiB GETs against this server in this run: {probe_text} per second.", "",
           "| loader | how it is pointed at the endpoint | M tok/s | p50 / p95 ms | first batch ms | requests per "
           "batch | requests in one pass | batches equal the local copy's |", "|---|---|---|---|---|---|---|---|"]
    for name, p in r["peers"].items():
        if not p.get("tokens_per_s", {}).get("n"):
            out.append(f"| {name} | {p['how']} | failed: {'; '.join(p['errors'])[:200]} | | | | | |")
            continue
        passes = p["requests_per_pass"]
        one = ", ".join(f"{k} {v}" for k, v in sorted(passes[0].items())) if passes else "–"
        failed = f" ({len(p['errors'])} pass(es) failed: {p['errors'][0][:80]})" if p["errors"] else ""
        out.append(f"| {name}{failed} | {p['how']} | {rng_m(p['tokens_per_s'], 1e6, 2)} | "
                   f"{p['p50_us']['median'] / 1e3:.1f} / {p['p95_us']['median'] / 1e3:.1f} | "
                   f"{p['ttfb_s']['median'] * 1e3:.0f} | {p['requests_per_batch']['median']:.2f} | {one} | "
                   f"{p['matches_local']} |")
    for name, why in r.get("no_endpoint", {}).items():
        out.append(f"| {name} | **no endpoint**: {why} | | | | | | |")
    for name, pip in r.get("not_installed", {}).items():
        out.append(f"| {name} | **not installed** (`{pip}`) | | | | | | |")
    ok = {n: p for n, p in r["peers"].items() if p.get("tokens_per_s", {}).get("n")}
    ranged = {n: p for n, p in ok.items() if p["requests_per_batch"]["median"] >= 0.5}
    whole = [n for n in ok if n not in ranged]
    reading = ["**Reading.** moto is the bottleneck of this section, not the loaders: one Python process answers "
               "every request, so it shows how many requests each loader makes and whether the batches are right "
               "more than how fast each would be against real S3."]
    for name, p in ranged.items():
        per_batch = p["requests_per_batch"]["median"]
        rate = per_batch * p["tokens_per_s"]["median"] / (32 * 512)
        reading.append(f"{name} reads with range GETs as it goes and keeps no local copy: {per_batch:.2f} requests "
                       f"per batch, {rate:.0f} requests/s while reading"
                       + (f" against the {probe:.0f}/s one client gets from this server, so its tokens/s here is "
                          "moto's request rate divided by requests per batch" if isinstance(probe, (int, float))
                          else "") + "; against real S3 it is bound by request latency and parallelism instead, "
                       "which this run does not show.")
    if whole:
        reading.append(f"{', '.join(whole)} download whole shards or chunks into a local cache and then read "
                       "locally: a handful of requests per pass (per shard, not per batch), so moto's request rate "
                       "does not bind them; their first batch waits for a whole shard (small here, the corpus is "
                       "small) and their speed after it is their local decode.")
    bad = [n for n, p in ok.items() if not p["matches_local"]]
    reading.append("Every loader delivered over S3 exactly the batches it delivers from its local copy."
                   if not bad else f"Batches over S3 differ from the local copy's for: {', '.join(bad)}.")
    return [*out, "", " ".join(reading), ""]


def ratio_plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = [n for n in r["peers"] if n != "floor"]
    width = 0.8 / max(1, len(r["worlds"]))
    for k, world in enumerate(map(str, r["worlds"])):
        vals = [r["peers"][n]["worlds"][world]["tokens_per_s_per_rank"].get("median") or 0 for n in names]
        ax.bar([i + k * width for i in range(len(names))], [v / 1e6 for v in vals], width, label=f"{world} rank(s)")
    ax.set_xticks([i + width * (len(r["worlds"]) - 1) / 2 for i in range(len(names))], names, rotation=20,
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("M tokens/s per rank (log)")
    ax.set_title("Same corpus, 32×512 int64 batches (floor omitted)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def getbatch_section(r: dict[str, Any], plots: Path) -> list[str]:
    out = ["## 2. GetBatch analogue (seed 003 Table 1) (`getbatch.py`)", "",
           "Ordered batched `get_ranges` vs individual `get_range` calls one after another.", "",
           "| store | object | batch | individual GiB/s | batched GiB/s | speed-up | paper |", "|---|---|---|---|---|---|---|"]
    for store, s in r["stores"].items():
        for row in s["rows"]:
            out.append(f"| {store} | {row['object_bytes'] // 1024} KiB | {row['batch']} | "
                       f"{row['individual_gib_s']['median']:.3f} | {row['batched_gib_s']['median']:.3f} | "
                       f"{rng_m(row['speedup'], 1, 1)}× | {row['paper_speedup']}× |")
    out += ["", "Stores: " + "; ".join(f"{k}: {v['describe']}" for k, v in r["stores"].items()), "",
            "**Reading.** The paper's GET baseline is itself concurrent (aisloader workers) and its large-object "
            "ratio is bound by the cluster's bandwidth, so its speed-up falls from 9–15× to 1.5–1.7× as objects "
            "grow. Our individual baseline is strictly sequential and the latency model gives every stream its own "
            "100 MB/s, so our ratio stays near min(batch, streams in flight) at every size: it shows that "
            "`get_ranges` overlaps round trips, not that we match AIStore's server-side batching. On moto the "
            "server is the bottleneck (one Python process), so the ratio there is about 1×.", ""]
    return out


def redis_section(r: dict[str, Any], amp: list[dict[str, Any]] | None) -> list[str]:
    if "skipped" in r:
        return ["## 4. Message-queue baseline: Redis Streams (`redis_queue.py`)", "", f"Skipped: {r['skipped']}", ""]
    out = ["## 4. Message-queue baseline: Redis Streams (`redis_queue.py`)", "",
           f"One stream message = one global batch of {r['batch_bytes'] / 2**20:.0f} MiB; {r['server']}; {r['tgb']}.",
           "", "| producers | Redis XADD MB/s | tgb.Producer MB/s |", "|---|---|---|"]
    for row in r["producers"]:
        out.append(f"| {row['producers']} | {rng_m(row['redis_MBps'], 1, 0)} | {rng_m(row['tgb_MBps'], 1, 0)} |")
    out += ["", "| consumers | read amplification | delivery p50 ms | p95 ms |", "|---|---|---|---|"]
    for row in r["consumers"]:
        out.append(f"| {row['consumers']} | {row['read_amplification']:.1f}× | {row['latency_p50_ms']:.1f} | "
                   f"{row['latency_p95_ms']:.1f} |")
    tgb_amp = ""
    if amp:
        vals = {(a["world"], a["mode"]): a["read_amplification"] for a in amp if a.get("mode") == "range"}
        if vals:
            tgb_amp = " torch_tgb's range reads in consumer_read: " + ", ".join(
                f"world {w}: {v:.2f}×" for (w, _), v in sorted(vals.items())) + "."
    out += ["", "**Reading.** Redis on loopback ingests far faster than torch_tgb's producers on this box (an "
            "in-memory server with no durability against a file-system commit log), so on producer throughput "
            "torch_tgb loses. A stream delivers whole messages, so each of C consumers reads the whole batch: "
            f"amplification C, as the paper says of Kafka.{tgb_amp} Paper (Kafka): 0.11 steps/s end to end and "
            "0.061 MB/s per rank at 128 consumers.", ""]
    return out
