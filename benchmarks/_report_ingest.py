"""Section 7 of ``report.py`` (issue 28): ingest from each source kind against its library's own read, the I/O
floor, bytes at rest, the segment commit and labels derived on read."""

from __future__ import annotations

from typing import Any

from _report_common import verdict, when


def ingest_floor_reading(floor: dict[str, Any]) -> str:
    """The I/O floor of a shuffled token-file read (``ingest_floor.py``), against numpy's sequential read."""
    med, ratio = floor["median_tok_per_s"], floor["median_ratio_to_numpy_disk"]
    text = (f"**The I/O floor** (`ingest_floor.py`, the same corpus: {floor['tokens'] / 1e6:.0f} M tokens, "
            f"{floor['docs']:,} documents; {when(floor)}; median of {len(floor['rounds'])} cold rounds). numpy reads "
            f"the file at {med['numpy_disk'] / 1e6:.0f} M tok/s from the disk ({med['numpy_cache'] / 1e6:.0f} from the "
            "page cache) in one sequential pass. Reading its documents in a shuffled order, one `pread` each, and "
            "writing them to a file with an fsync, no format and no packing: "
            f"{med['floor_shuffled'] / 1e6:.0f} M tok/s ({ratio['floor_shuffled']:.3f}× numpy's read from the disk); "
            f"in file order {med['floor_in_order'] / 1e6:.0f} ({ratio['floor_in_order']:.2f}×).")
    if "floor_warmed" in med:
        text += (f" After one sequential pass over the file (timed with it): {med['floor_warmed'] / 1e6:.0f} M tok/s "
                 f"({ratio['floor_warmed']:.2f}×). So from a cold cache a shuffled order, not the format, bounds a "
                 "token file's ingest here; a file that fits the page cache could be read sequentially first, and "
                 "then the producer's own per-batch work (its warm rate) is the bound.")
    return text


def token_rows_section(ingest: dict[str, Any] | None, cr: dict[str, Any] | None,
                       floor: dict[str, Any] | None = None, storage: dict[str, Any] | None = None) -> list[str]:
    """Issue 28: ingest from each source kind against its library's own read; bytes at rest; labels on read."""
    out = ["## 7. Token-efficient TGBs: ingest and reading (`ingest.py`, `consumer_read.py --only labels`)", ""]
    points = (ingest or {}).get("points") or []
    if points and "ratio_to_disk_read" in points[0]:
        c = ingest["corpus"]  # type: ignore[index]
        against = ingest.get("against") if all("speedup" in p for p in points) else None  # type: ignore[union-attr]
        cached = all("tgb_cached_tok_per_s" in p for p in points)  # ingest.json of before the cached runs: without
        out += [f"One corpus of {c['tokens'] / 1e6:.0f} M uint16 tokens ({c['docs']:,} documents of 50–3000 tokens) "
                f"as a token file, Parquet, Lance and WebDataset tars; each point a fresh process: the format's own "
                f"library reads it from the disk (page cache dropped) and from the page cache, then `tgb.produce` "
                f"(token rows, uint16, {ingest['segment_bytes'] >> 20} MiB segments, every segment fsynced) writes "
                f"it from the disk into a local namespace, seq_len {ingest['seq_len']}, global batch "
                f"{ingest['global_batch']} ({when(ingest)}). Goals (issue 28): ≥ 50 M tok/s and ≥ 0.25× numpy's "
                "read for the token file, ≥ 0.3× for Parquet and Lance, ≤ 2.2 B/token at rest.", "",
                "| source | packing | tgb M tok/s | library read from disk M tok/s | × | from cache M tok/s | × | "
                + ("tgb from cache M tok/s | × the library's from cache | " if cached else "")
                + "B/token at rest | peak RSS MiB |" + (" before M tok/s | speed-up |" if against else ""),
                "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if cached else "") + ("---|---|" if against else "")]
        for p in points:
            out.append(f"| {p['source']} | {p['packing']} | {p['tgb_tok_per_s'] / 1e6:.1f} | "
                       f"{p['library_read_disk_tok_per_s'] / 1e6:.0f} | {p['ratio_to_disk_read']:.3f} | "
                       f"{p['library_read_cached_tok_per_s'] / 1e6:.0f} | {p['ratio_to_cached_read']:.3f} | "
                       + (f"{p['tgb_cached_tok_per_s'] / 1e6:.1f} | {p['cached_ratio_to_cached_read']:.3f} | "
                          if cached else "")
                       + f"{p['bytes_per_token']:.3f} | {p['peak_rss_mb']:.0f} |"
                       + (f" {p['against_tok_per_s'] / 1e6:.1f} | {p['speedup']:.2f}× |" if against else ""))
        if against:
            out += ["", f"Each point is the median of {ingest['rounds']} rounds; every round also ran the same point "
                    f"with the torch_tgb of commit {against.get('commit') or '?'} (`--against`), interleaved: "
                    "\"before\" is its median, the speed-up the ratio of the two."]
        elif (rounds := (ingest or {}).get("rounds", 1)) > 1:
            out += ["", f"Each point is the median of {rounds} rounds: of the rates, and of each round's ratios (a "
                    "round's figures are measured side by side in one process)."]
        out += ["", ingest_reading(points, (against or {}).get("commit") or "?"), ""]
        if storage and "segment_64mib_commit_ms_none" in storage:
            out += [segment_commit_reading(storage), ""]
        if floor and "median_tok_per_s" in floor:
            out += [ingest_floor_reading(floor), ""]
    else:
        out += ["No `ingest.json` of this format in the results directory: run `python benchmarks/ingest.py`.", ""]
    labels = (cr or {}).get("labels")
    if labels:
        rest = labels["bytes_per_token_at_rest"]
        out += [f"**Labels on read** ({labels['steps']} steps of {labels['rows']}×{labels['seq_len']} uint16 tokens, "
                f"one rank, delivered as int64 `input_ids` + `labels`; {when(labels)}). The floor casts each step's "
                "tokens once and hands out a slice and its shift; torch_tgb reads the `write_dataset` namespace "
                "(token rows, labels derived with -100 at row ends, a CRC32C check per slice). At rest: "
                f"{rest['tokens']:.2f} B/token for token rows, {rest['arrays']:.2f} for per-token arrays. Goal "
                f"(issue 28): ≥ {labels['goal_ratio']}× the floor through `tgb.DataLoader`.", "",
                "| reader | M tokens/s | steps/s | × floor |", "|---|---|---|---|"]
        for r in labels["results"]:
            out.append(f"| {r['reader']} | {r['tokens_per_s'] / 1e6:.1f} | {r['steps_per_s']:,.0f} | "
                       f"{r['ratio_to_baseline']:.3f} |")
        out += ["", labels_reading(labels), ""]
    ragged = (cr or {}).get("ragged")
    if ragged:
        out += [f"**Ragged keys on read** (issue 27: a VLM-shaped namespace, {ragged['steps']} steps of "
                f"{ragged['rows']} rows, {ragged['bytes_per_step'] / 1e6:.1f} MB per step, one rank; "
                f"{when(ragged)}; goal ≥ {ragged['goal_ratio']}× a raw memmap of the same bytes; "
                f"{ragged['data_requests_per_step']:.2f} range requests per step):", "",
                "| reader | GB/s | steps/s | × floor |", "|---|---|---|---|"]
        for r in ragged["results"]:
            out.append(f"| {r['reader']} | {r['bytes_per_s'] / 1e9:.2f} | {r['steps_per_s']:,.0f} | "
                       f"{r['ratio_to_baseline']:.3f} |")
        out.append("")
    return out


def _speedups(points: list[dict[str, Any]], source: str) -> list[float]:
    return [p["speedup"] for p in points if p["source"] == source and p.get("speedup")]


def _ratios(points: list[dict[str, Any]], key: str) -> str:
    return f"{min(p[key] for p in points):.3f}–{max(p[key] for p in points):.3f}×"


def _arrow_goal(arrow: list[dict[str, Any]]) -> str:
    """Parquet and Lance against issue 28's 0.3x: each cache state like for like, and the mixed one."""
    disk, mixed = min(p["ratio_to_disk_read"] for p in arrow), min(p["ratio_to_cached_read"] for p in arrow)
    text = (f"Parquet and Lance (goal ≥ 0.3× their library's own read): from the disk, both: "
            f"{_ratios(arrow, 'ratio_to_disk_read')} ({verdict(disk >= 0.3)})")
    if all("cached_ratio_to_cached_read" in p for p in arrow):
        cache = min(p["cached_ratio_to_cached_read"] for p in arrow)
        cores = max(p.get("library_read_cached_cores", 0.0) for p in arrow)
        text += (f"; from the page cache, both: {_ratios(arrow, 'cached_ratio_to_cached_read')} "
                 f"({verdict(cache >= 0.3)}; the library's cached read used up to {cores:.1f} cores, Arrow decoding "
                 "on its own threads, where the source decodes on one thread and packs and writes on another)")
    return (text + f"; tgb from the disk against the library from the cache: {_ratios(arrow, 'ratio_to_cached_read')} "
            f"({verdict(mixed >= 0.3)}).")


def segment_commit_reading(storage: dict[str, Any]) -> str:
    """What the background writeback saves a producer at a segment's commit (``test_bench_storage.py``)."""
    return (f"**A segment's commit** (`benchmarks/test_bench_storage.py`, a 64 MiB segment written in 256 KiB parts "
            f"through `LocalStore.open_writer`, a CRC32C of each part first, then committed with its fsync; best of "
            f"5 interleaved rounds): the commit waits {storage['segment_64mib_commit_ms_writeback']:.1f} ms with a "
            f"background sync every {storage['segment_64mib_writeback_bytes'] >> 20} MiB written, "
            f"{storage['segment_64mib_commit_ms_none']:.1f} ms without (the whole segment written back at the "
            f"commit); the segment's whole write {storage['segment_64mib_total_ms_writeback']:.1f} against "
            f"{storage['segment_64mib_total_ms_none']:.1f} ms.")


def _rounds_note(points: list[dict[str, Any]]) -> str:
    """The token file's points round by round: each ratio beside the read of numpy's it divides by.

    numpy's read "from the disk" moves several-fold between rounds on this VM
    (its disk is served by the host, from the host's memory at one time and
    from its disks at another). Where the rounds' reads fall into two groups
    (sorted, the largest step between neighbours is above 2×), each group's
    ratios are stated.
    """
    rounds = [(read, ratio) for p in points if p["source"] in ("token-file", "token-file-units", "write_dataset")
              for read, ratio in zip(p.get("rounds_library_read_disk_tok_per_s", []),
                                     p.get("rounds_ratio_to_disk_read", []))]
    if len(rounds) < 2:
        return ""
    rounds.sort()
    reads = [read for read, _ in rounds]
    text = (f" Round by round, over the {len(rounds)} rounds of the token file's points (the token file, by units, "
            f"`write_dataset`; each ratio side by side in one process), numpy's read from the disk ran at "
            f"{reads[0] / 1e6:.0f}–{reads[-1] / 1e6:.0f} M tok/s")
    step, at = max((b / a, i + 1) for i, (a, b) in enumerate(zip(reads, reads[1:])))
    if step <= 2:
        ratios = [ratio for _, ratio in rounds]
        return text + f" and the producer made {min(ratios):.3f}–{max(ratios):.3f}× of it."
    slow, fast = [r for _, r in rounds[:at]], [r for _, r in rounds[at:]]
    return (text + f", in two groups: in the {len(slow)} rounds of reads at {reads[0] / 1e6:.0f}–"
            f"{reads[at - 1] / 1e6:.0f} M tok/s the producer made {min(slow):.3f}–{max(slow):.3f}× of it "
            f"(≥ 0.25× in {sum(r >= 0.25 for r in slow)}), in the {len(fast)} of reads at {reads[at] / 1e6:.0f}–"
            f"{reads[-1] / 1e6:.0f} M tok/s {min(fast):.3f}–{max(fast):.3f}× (≥ 0.25× in "
            f"{sum(r >= 0.25 for r in fast)}). This VM's disk is served by its host, at times from the host's memory"
            + (": the producer keeps 0.25× of the first kind of read, not of the second."
               if min(slow) >= 0.25 > max(fast) else "."))


def ingest_reading(points: list[dict[str, Any]], against_commit: str = "?") -> str:
    """What the ingest table says against issue 28's goals, from its own figures."""
    by = {(p["source"], p["packing"]): p for p in points}
    parts = ["**Reading.**"]
    rest = max(p["bytes_per_token"] for p in points)
    parts.append(f"At rest at most {rest:.2f} B/token ({verdict(rest <= 2.2)}: ≤ 2.2): each token once at its own "
                 "width plus each row's lengths and the format's page alignment (a dp slice starts on a 4 KiB page, "
                 "so slices of a few tens of KiB pay up to 4 KiB more); per-token arrays took 20–28.")
    tf = [by[k] for k in (("token-file", "none"), ("token-file", "bfd")) if k in by]
    if tf:
        low = min(p["tgb_tok_per_s"] for p in tf)
        parts.append(f"The token file, packing none and bfd: at least {low / 1e6:.0f} M tok/s ({verdict(low >= 50e6)}: "
                     f"≥ 50 M), {min(p['ratio_to_disk_read'] for p in tf):.3f}–"
                     f"{max(p['ratio_to_disk_read'] for p in tf):.3f}× numpy's read from the disk and "
                     f"{max(p['ratio_to_cached_read'] for p in tf):.3f}× at most of its read from the page cache "
                     f"(goal ≥ 0.25×: {verdict(min(p['ratio_to_disk_read'] for p in tf) >= 0.25)} against the disk)."
                     + _rounds_note(points))
    units = [p for p in points if p["source"] == "token-file-units"]
    if units:
        parts.append(f"Read by units of adjacent documents (`TokenFile(docs_per_unit=64)`: the order shuffled by "
                     f"unit, each unit one span): {min(p['tgb_tok_per_s'] for p in units) / 1e6:.0f}–"
                     f"{max(p['tgb_tok_per_s'] for p in units) / 1e6:.0f} M tok/s, "
                     f"{min(p['ratio_to_disk_read'] for p in units):.3f}–"
                     f"{max(p['ratio_to_disk_read'] for p in units):.3f}× numpy's read from the disk.")
    arrow = [p for p in points if p["source"] in ("parquet", "lance")]
    if arrow:
        parts.append(_arrow_goal(arrow))
    parts.append(
        "Where the time goes (cProfile of `tgb.produce` over the token file): the source reads a window's "
        "documents in one bulk call (one `pread` per run of adjacent documents, into one array) and keeps the "
        "kernel reading up to 32 MiB ahead of it (`POSIX_FADV_WILLNEED`): a shuffled order reads the file at "
        "random places, so from a cold page cache the disk would otherwise serve one document at a time; a file "
        "of at most 128 MiB (this one) is advised by 256 KiB blocks in the order the shuffle needs them, each "
        "block once per epoch (a cold advice costs the kernel 7–38 µs here, so one per document bounded the "
        "ingest). The packers are numpy over a window and "
        "hand `GlobalBatches` a batch of rows at once (`Pack.take_rows`: one gather per field, no dict per row), "
        "which joins and reorders them through numpy on the producer's own thread (`datapipes/produce/_one_thread.py`: "
        "torch's `cat`/`index_select` of a batch's rows ran on its intra-op pool, which on a busy machine waited "
        "about 16 ms per call for a pool thread and then spun a core; the process used 1.9× the CPU of its main "
        "thread, now 1.0×). "
        "Each TGB's bytes go straight into its segment's file as it is appended (`ObjectStore.open_writer`: one "
        "copy, into the page cache; publishing a segment is an fsync and a rename, in the background while the "
        "next fills; every 8 MiB written a thread of the writer's own syncs what is there, so the last segment's "
        "fsync waits for its last stretch only: 31 → 5 ms of the producer's main thread on this corpus, "
        "cProfile, 2026-11-27), so no write of the whole corpus waits after the last batch, and the rows' "
        "`seq_lens` reach "
        "the producer joined (`RaggedRows`: no tensor per row). What is left: the advice and read syscalls (one "
        "per document of a shuffled order), the packers' and `GlobalBatches`' copies, the CRC32C, the pipeline "
        "state encoded with each batch, and the kernel's page-cache allocation for the written bytes (its speed "
        "moves a lot between runs on this VM). The Arrow sources decode their next record batches on a thread "
        "of their own (`decode_ahead`), so the decode overlaps packing and writing; the library's own read "
        "decodes on every core (here 2) and does nothing else."
        + (f" Against commit {against_commit}: Parquet {min(pq_up):.2f}–{max(pq_up):.2f}×, Lance "
           f"{min(lance_up):.2f}–{max(lance_up):.2f}×, the token file "
           f"{min(tf_up):.2f}–{max(tf_up):.2f}× in the same run."
           if (pq_up := _speedups(points, "parquet")) and (lance_up := _speedups(points, "lance"))
           and (tf_up := _speedups(points, "token-file")) else "")
        + " Tried and measured without a gain here: advising merged extents "
        "(sorted by offset, the kernel reads in file order while the shuffle needs them in another; 20–30% "
        "slower from a cold cache), and advising the whole file at the first read (the same, worse: 0.60–0.65× "
        "of the block advice, 2026-11-27); and, interleaved side by side on the same 30 M tokens from a cold cache "
        "(2026-11-27, token rows, packing none): reading a file that fits in memory whole first (one sequential read, "
        "then the documents gathered from memory) took 0.40–0.45 s against 0.35–0.39 s; a thread reading the "
        "advised blocks ahead of the packer, 0.37–0.43 s against 0.32–0.42 s; encoding and writing each TGB on the "
        "segment's thread, 0.48–0.55 s against 0.36–0.45 s. On two shared cores the added thread contends for the "
        "GIL and finds no idle core. A token file's own read is one "
        "sequential copy (GB/s from the page cache"
        + (f", {min(disk) * 2 / 1e9:.1f}–{max(disk) * 2 / 1e9:.1f} GB/s from this machine's disk in this run"
           if (disk := [p["library_read_disk_tok_per_s"] for p in points if p["source"] in ("token-file", "write_dataset")])
           else "")
        + "), so a ratio to it is bounded by the per-document and per-batch Python above. The issue's baseline "
        "(303 M tok/s) matches numpy reading a file just written, whose pages were still being written back; both "
        "reads here are stated.")
    return " ".join(parts)


def _spread(row: dict[str, Any]) -> str:
    """A reader's ratio per round, as a range."""
    per = row.get("ratio_per_round") or [row["ratio_to_baseline"]]
    return f"{min(per):.2f}–{max(per):.2f} per round" if len(per) > 1 else "one round"


def labels_reading(labels: dict[str, Any]) -> str:
    by = {r["reader"]: r for r in labels["results"]}
    goal = labels["goal_ratio"]
    text = "**Reading.**"
    views, loader = by.get("tgb_loader_views"), by.get("tgb_loader")
    if views:
        text += (f" The floor's tensors (a slice and its shift of one int64 copy) through `tgb.DataLoader`: "
                 f"{views['ratio_to_baseline']:.2f}× the floor, the median of its rounds "
                 f"({_spread(views)}; `derive=()`, goal ≥ {goal}×: "
                 f"{verdict(views['ratio_to_baseline'] >= goal)}). The reader maps the slice, checks its CRC32C and "
                 "casts the rows to int64 once as it views them; `input_ids` and `labels` are two views of that "
                 "copy, as the floor's are, and the -100 at sequence ends is the training step's "
                 "(`transforms.derive.mask_labels` on the device).")
    if loader:
        text += (f" With the labels masked on read (the default): {loader['ratio_to_baseline']:.2f}× the floor. "
                 "Masked labels are written into, so they get their own copy (two int64 copies per step where "
                 "the floor makes one: about 0.5× at this size at best), and the rows' lengths are read, "
                 "checked and turned into the -100 positions on the CPU.")
    derived, arrays4 = by.get("tgb_loader_derived"), by.get("tgb_loader_arrays4")
    rest = labels["bytes_per_token_at_rest"]
    if derived and arrays4:
        text += (f" Labels, `position_ids` and `document_ids` all derived from the rows' lengths (numpy over the "
                 f"step): {derived['ratio_to_baseline']:.2f}× the floor, "
                 f"{derived['tokens_per_s'] / arrays4['tokens_per_s']:.2f}× the same four keys read as stored "
                 f"per-token arrays ({arrays4['ratio_to_baseline']:.2f}× the floor), which hold "
                 f"{rest['arrays'] / rest['tokens']:.1f}× the bytes at rest.")
    floor = by.get("floor")
    step = f"{1e6 / floor['steps_per_s']:.0f} µs" if floor and floor.get("steps_per_s") else "short"
    return text + (" These rows are unpacked, alike every step, so the reader judges their lengths and derives from "
                   "them once and copies the result per step; packed rows differ per step and pay the numpy "
                   "derivation each time. What separates the views from the floor is Python per step (the run "
                   "path's iteration, the slice's views, the loader's own step): a few microseconds against the "
                   f"floor's {step} step at 32×512 in this run, less on larger steps. The floor's own rate moves "
                   "between runs on this shared VM more than the reader's, so these ratios do too.")
