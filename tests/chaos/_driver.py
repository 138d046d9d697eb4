"""The chaos driver: one seeded trial of producers, consumers and a reclaimer under SIGKILL.

A trial (``run_trial(seed, ...)``):

1. forks 2 producers (``p0``, ``p1``), 2 consumers (dp ranks 0 and 1) and a
   reclaimer (grace period ``grace``), all against one local namespace,
   optionally each behind its own seeded FaultyStore;
2. while producers work, sleeps a random while, SIGKILLs a random live
   process and starts it again (producers with the same id, consumers from
   their checkpoint file, the reclaimer afresh), or SIGSTOPs a producer: either
   a *zombie* (a new incarnation starts beside it) or a *stall* of the live
   incarnation, resumed after 1.5-3 grace periods (issue 13: its uncommitted
   objects must survive); on half the seeds the reclaimer's clock runs 4000 s
   ahead; meanwhile the driver itself follows the log as the *reference
   reader* (holding its own watermark);
3. seals the namespace once both producers finished, lets consumers finish,
   runs a last reclaimer pass (grace 0: every orphan goes) and checks:

   * exactly-once: the reference step sequence holds every offset of every
     producer exactly once;
   * every consumer delivered, for every step, the code of the reference's
     entry (its slice content checked in the consumer: never torn or mixed);
     each incarnation started at its checkpoint and went on step by step;
   * no partially visible TGB: consumers verify CRC32C and content, so a
     consumer exiting with an error fails the trial;
   * no live-referenced gap: every step at or above the smallest live
     watermark still has its version and object, and its footer parses.

Everything random comes from ``random.Random(seed)``; the failure message
names the seed (``TGB_CHAOS_SEEDS=<seed>`` replays it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from torch_tgb.errors import TGBError
from torch_tgb.manifest.watermarks import live_checkpoints, record_watermark, retire
from torch_tgb.format import read_footer
from torch_tgb.manifest import Manifest
from torch_tgb.storage import LocalStore, open_store

from _roles import FENCED_EXIT
from _roles import code as code_of

HERE = os.path.dirname(os.path.abspath(__file__))


class Zygote:
    """Client of ``_zygote.py``: spawn, poll, kill forked role processes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "_zygote.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env=env,
        )

    def _ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"chaos zygote died (exit {self.proc.poll()})")
        return json.loads(line)

    def spawn(self, role: str, args: dict[str, Any], log: str) -> int:
        return int(self._ask(op="spawn", role=role, args=args, log=log)["pid"])

    def poll(self, pid: int) -> int | None:
        return self._ask(op="poll", pid=pid)["code"]

    def kill(self, pid: int) -> int:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        return self.wait(pid, 30.0)

    def wait(self, pid: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            code = self.poll(pid)
            if code is not None:
                return code
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {pid} still running after {timeout}s")
            time.sleep(0.02)

    def ping(self) -> None:
        """Block until the server has imported everything (keeps startup out of trial timings)."""
        self._ask(op="ping")

    def kill_all(self) -> None:
        self._ask(op="kill_all")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Proc:
    name: str
    role: str
    args: dict[str, Any]
    pid: int = 0
    incarnations: int = 0
    done: bool = False
    kills: int = 0


@dataclass
class TrialReport:
    seed: int
    faulty: bool
    steps: int = 0
    kills: Counter = field(default_factory=Counter)
    restarts: int = 0
    consumer_lines: int = 0
    seconds: float = 0.0
    reclaimed_below: int = 0
    phases: dict = field(default_factory=dict)
    paused: int = 0  # producers SIGSTOPped while a new incarnation started (zombies)
    stalled: int = 0  # live producers SIGSTOPped past the grace period, then resumed
    skewed: bool = False  # the reclaimer's clock ran 4000 s ahead
    fenced: int = 0  # incarnations that stopped with FencedError
    faults: Counter = field(default_factory=Counter)  # injected, as reported by processes that ended normally


class TrialFailure(AssertionError):
    pass


#: symptoms of bugs already pinned by strict-xfail deterministic replays
#: (tests/chaos/test_reclaim_races.py); a trial failing with one of them is reported as
#: that known bug (pytest xfail with the full failure text) instead of a new failure.
KNOWN_BUGS: dict[str, tuple[str, ...]] = {
    # B9 and B10 were listed here ("goes back from epoch", "already reclaimed (no live
    # checkpoint protected them)") until they were fixed; add an entry only together with a
    # strict-xfail deterministic replay of the bug.
}


def known_bug(failure: BaseException) -> str | None:
    text = str(failure)
    for name, symptoms in KNOWN_BUGS.items():
        if any(s in text for s in symptoms):
            return name
    return None


@dataclass(frozen=True)
class TrialConfig:
    offsets: int = 24  # per producer
    kill_budget: int = 6  # kills while producers run
    every: int = 3  # consumer checkpoint interval (steps)
    grace: float = 0.5  # reclaimer orphan grace period (s): shorter than the stalls and commit gaps
    deadline: float = 90.0  # a trial taking longer is a hang
    pause: float = 0.3  # chance that a producer "kill" is a SIGSTOP (zombie) plus a new incarnation
    stall: float = 0.3  # chance that a producer "kill" is a SIGSTOP of the live incarnation, resumed later
    stall_grace: tuple[float, float] = (1.5, 3.0)  # a stall lasts this many grace periods (past the grace)
    skew: float = 0.5  # chance that the reclaimer's clock runs 4000 s ahead (beyond any grace period)
    poll_max: float = 0.05  # consumers' longest wait between manifest polls (s)
    reclaim_interval: float = 0.1  # pause between reclaimer passes (s)


def _logs_of(tmp: str) -> str:
    out = []
    for name in sorted(os.listdir(tmp)):
        if name.endswith(".log"):
            with open(os.path.join(tmp, name)) as f:
                text = f.read()
            if "Error" in text or "Traceback" in text:
                out.append(f"--- {name} ---\n{text[-3000:]}")
    return "\n".join(out)


def run_trial(
    zygote: Zygote,
    seed: int,
    tmp: str,
    *,
    faulty: bool,
    config: TrialConfig = TrialConfig(),
    s3: tuple[str, dict[str, Any]] | None = None,
) -> TrialReport:
    """One trial on a local namespace under ``tmp``, or on ``s3 = (url, storage_options)``."""
    rng = random.Random(seed)
    started = time.monotonic()
    if s3 is None:
        root, options = os.path.join(tmp, "ns"), None
        os.makedirs(root)
    else:
        root, options = s3
    report = TrialReport(seed, faulty)
    policy = rng.choice(["naive", "fixed:3", "dac", "aimd"])
    fault_counter = iter(range(seed * 1000, seed * 1000 + 1000))

    def fseed() -> int | None:
        return next(fault_counter) if faulty else None

    stop_file = os.path.join(tmp, "stop-reclaimer")
    procs = [Proc(f"p{i}", "producer", {"root": root, "pi": i, "n": config.offsets, "policy": policy, "options": options})
             for i in range(2)]
    procs += [
        Proc(f"c{r}", "consumer", {"root": root, "rank": r, "ckpt": os.path.join(tmp, f"c{r}.ckpt"),
                                    "out": os.path.join(tmp, f"c{r}.out"), "every": config.every, "options": options,
                                    "poll_max": config.poll_max})
        for r in range(2)
    ]
    # The grace period is shorter than producer stalls and than DAC/AIMD commit gaps, and the
    # reclaimer's clock may run far ahead: an uncommitted object must survive by the manifest's
    # proof alone (issue 13; bugs.md B11 needed grace > every write-to-commit delay).
    skew = 4000.0 if rng.random() < config.skew else 0.0
    report.skewed = skew > 0
    procs.append(Proc("rec", "reclaimer", {"root": root, "stop": stop_file, "grace": config.grace,
                                           "options": options, "interval": config.reclaim_interval, "skew": skew}))
    by_name = {p.name: p for p in procs}

    def start(p: Proc) -> None:
        args = dict(p.args, fault_seed=fseed())
        p.incarnations += 1
        p.pid = zygote.spawn(p.role, args, os.path.join(tmp, f"{p.name}.log"))

    def fail(msg: str) -> TrialFailure:
        return TrialFailure(
            f"chaos trial seed={seed} faulty={faulty} policy={policy} failed (replay: TGB_CHAOS_SEEDS={seed}): "
            f"{msg}\n{_logs_of(tmp)}"
        )

    def reap(p: Proc) -> None:
        """Note a finished process; a failure (not our kill) fails the trial."""
        code = zygote.poll(p.pid)
        if code is None:
            return
        if code == FENCED_EXIT and p.role == "producer":  # a resumed zombie took over: take it back
            report.fenced += 1
            start(p)
            return
        if code != 0:
            raise fail(f"{p.name} (incarnation {p.incarnations}) exited with {code}")
        p.done = True

    zombies: list[tuple[int, str, bool]] = []  # (pid, name, resumed)
    stalls: dict[int, float] = {}  # pid of a stopped live producer -> when to resume it

    def tend_stalls(final: bool) -> None:
        for pid, due in list(stalls.items()):
            if final or time.monotonic() >= due:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                del stalls[pid]

    def tend_zombies(final: bool) -> None:
        """Resume paused old incarnations now and then; a resumed one must end fenced or done."""
        for i, (pid, name, resumed) in enumerate(list(zombies)):
            if not resumed and (final or rng.random() < 0.5):
                os.kill(pid, signal.SIGCONT)
                zombies[i] = (pid, name, True)
        for pid, name, resumed in list(zombies):
            if not resumed:
                continue
            code = zygote.wait(pid, 30) if final else zygote.poll(pid)
            if code is None:
                continue
            zombies.remove((pid, name, resumed))
            if code == FENCED_EXIT:
                report.fenced += 1
            elif code != 0:
                raise fail(f"old incarnation of {name} (pid {pid}, paused then resumed) exited with {code}")

    store = LocalStore(root, fsync=False) if s3 is None else open_store(root, options)
    manifest = Manifest(store)
    reference: list[tuple[str, int]] = []
    ref_mark: list[str] = []

    def follow() -> None:
        try:
            _follow()
        except TGBError as e:
            raise fail(f"the reference reader failed: {type(e).__name__}: {e}") from e

    def _follow() -> None:
        """The driver's own reader: append new entries to the reference, move its watermark."""
        if manifest.dataset() is None:
            return
        head = manifest.head()
        if head.num_steps > len(reference):
            for e in manifest.entries(len(reference), head.num_steps):
                reference.append((e.producer, e.offset))
        cid = f"ref-{len(reference)}-{head.version}"
        if not ref_mark or ref_mark[-1] != cid:
            record_watermark(store, cid, {"tgb_cursor": {"step": len(reference), "version": head.version}})
            for old in ref_mark:
                retire(store, old)
            ref_mark[:] = [cid]

    # the reference reader's watermark exists before any consumer or reclaimer runs
    # (and so do the consumers': the job's "initial checkpoint", retired by their first one)
    for name in ("ref-0", "c0-init", "c1-init"):
        record_watermark(store, name, {"tgb_cursor": {"step": 0, "version": 0}})
    ref_mark.append("ref-0")
    try:
        for p in procs:
            start(p)
        kills_left = config.kill_budget
        while not (by_name["p0"].done and by_name["p1"].done):
            if time.monotonic() - started > config.deadline:
                raise fail("producers did not finish before the deadline (hang?)")
            time.sleep(rng.uniform(0.05, 0.3))
            follow()
            for p in procs:
                if not p.done:
                    reap(p)
            alive = [p for p in procs if not p.done]
            tend_zombies(final=False)
            tend_stalls(final=False)
            if kills_left and alive and rng.random() < 0.7:
                weights = [{"producer": 3, "consumer": 2, "reclaimer": 1}[p.role] for p in alive]
                victim = rng.choices(alive, weights)[0]
                producers = [p for p in alive if p.role == "producer" and p.pid not in stalls]
                if not report.stalled and producers and config.stall:
                    victim = rng.choice(producers)  # every trial stalls a producer past the grace at least once
                if victim.role == "producer" and victim.pid not in stalls and (
                    not report.stalled or rng.random() < config.stall
                ):
                    # not dead, not replaced: the same incarnation resumes past the grace period
                    os.kill(victim.pid, signal.SIGSTOP)
                    stalls[victim.pid] = time.monotonic() + config.grace * rng.uniform(*config.stall_grace)
                    report.stalled += 1
                    kills_left -= 1
                    continue
                if victim.role == "producer" and rng.random() < config.pause:
                    stalls.pop(victim.pid, None)
                    os.kill(victim.pid, signal.SIGSTOP)  # not dead: a zombie that will wake up later
                    zombies.append((victim.pid, victim.name, False))
                    report.paused += 1
                    kills_left -= 1
                    start(victim)
                    report.restarts += 1
                    continue
                stalls.pop(victim.pid, None)  # SIGKILL ends a stopped process too
                code = zygote.kill(victim.pid)
                if code == -9:
                    victim.kills += 1
                    report.kills[victim.role] += 1
                    kills_left -= 1
                elif code == FENCED_EXIT and victim.role == "producer":
                    report.fenced += 1
                elif code != 0:
                    raise fail(f"{victim.name} exited with {code} before it was killed")
                else:
                    victim.done = True
                    continue
                time.sleep(rng.uniform(0, 0.1))
                start(victim)
                report.restarts += 1
        tend_stalls(final=True)
        tend_zombies(final=True)
        for p in procs[:2]:  # a zombie may have fenced the main incarnation meanwhile
            while not p.done:
                if time.monotonic() - started > config.deadline:
                    raise fail(f"{p.name} did not finish before the deadline (hang?)")
                reap(p)
                time.sleep(0.02)
        report.phases["produced"] = round(time.monotonic() - started, 2)
        sealer = Proc("sealer", "sealer", {"root": root, "options": options})
        start(sealer)
        if (code := zygote.wait(sealer.pid, 60)) != 0:
            raise fail(f"sealer exited with {code}")
        # one more consumer kill after the seal: restart from a checkpoint near the end
        consumers = [by_name["c0"], by_name["c1"]]
        victim = rng.choice(consumers)
        if not victim.done:
            reap(victim)
        if not victim.done:
            if zygote.kill(victim.pid) == -9:
                victim.kills += 1
                report.kills["consumer"] += 1
            start(victim)
            report.restarts += 1
        for c in consumers:
            while not c.done:
                code = zygote.wait(c.pid, max(5.0, config.deadline - (time.monotonic() - started)))
                if code != 0:
                    raise fail(f"{c.name} exited with {code}")
                c.done = True
        report.phases["consumed"] = round(time.monotonic() - started, 2)
        follow()
        open(stop_file, "w").close()
        rec = by_name["rec"]
        if not rec.done and zygote.wait(rec.pid, 30) != 0:
            raise fail("reclaimer failed")
        report.phases["stopped"] = round(time.monotonic() - started, 2)
        _check(fail, store, manifest, reference, config, tmp, report)
    finally:
        zygote.kill_all()
    report.seconds = time.monotonic() - started
    for name in os.listdir(tmp):
        if name.endswith(".log"):
            with open(os.path.join(tmp, name)) as f:
                for line in f:
                    if line.startswith("FAULTS "):
                        report.faults.update(json.loads(line[7:]))
    return report


def _check(fail, store, manifest, reference, config, tmp, report) -> None:  # type: ignore[no-untyped-def]
    head = manifest.head()
    if not head.sealed:
        raise fail("namespace not sealed at the end")
    if len(reference) != head.num_steps:
        raise fail(f"reference holds {len(reference)} steps, the log {head.num_steps}")
    report.steps = head.num_steps
    # exactly-once
    counts = Counter(reference)
    dupes = sorted(k for k, n in counts.items() if n > 1)
    if dupes:
        raise fail(f"offsets committed more than once: {dupes[:10]}")
    for pi in range(2):
        got = sorted(o for p, o in reference if p == f"p{pi}")
        if got != list(range(config.offsets)):
            missing = sorted(set(range(config.offsets)) - set(got))
            raise fail(f"producer p{pi}: offsets missing from the step sequence: {missing}")
    expected = [code_of(int(p[1:]), o) for p, o in reference]
    # consumers: every delivered step carries the reference's code; restarts resume at the checkpoint
    for r in range(2):
        seen: dict[int, int] = {}
        next_step = None
        resumable = {0}  # steps a restart may legitimately resume at
        with open(os.path.join(tmp, f"c{r}.out")) as f:
            lines = f.read().splitlines()
        report.consumer_lines += len(lines)
        for line in lines:
            kind, *rest = line.split()
            if kind == "start":
                step = int(rest[0])
                if step not in resumable:
                    raise fail(f"consumer c{r} restarted at step={step}, its last checkpoints were {sorted(resumable)}")
                next_step = step
            elif kind == "step":
                step, c = int(rest[0]), int(rest[1])
                if step != next_step:
                    raise fail(f"consumer c{r} delivered step={step}, expected {next_step}")
                if step >= len(expected) or c != expected[step]:
                    raise fail(f"consumer c{r} step={step} read code {c}, reference "
                               f"{expected[step] if step < len(expected) else None}")
                seen[step] = c
                next_step = step + 1
            elif kind == "saving":
                resumable = resumable | {int(rest[0])}
            elif kind == "ckpt":
                resumable = {int(rest[0])}
            elif kind == "end":
                if int(rest[0]) != len(expected):
                    raise fail(f"consumer c{r} ended at {rest[0]}, the log has {len(expected)} steps")
        if sorted(seen) != list(range(len(expected))):
            raise fail(f"consumer c{r} never delivered steps {sorted(set(range(len(expected))) - set(seen))[:10]}")
    # final reclamation (every process is stopped: orphans of any age may go), then no live gap
    from torch_tgb.checkpoint import Reclaimer

    Reclaimer(store, grace_period=0).run_once()
    fresh = Manifest(store)
    live = live_checkpoints(store)
    safe = min((m.step for m in live), default=0)
    boundary = fresh.gc_boundary()
    report.reclaimed_below = boundary.step
    if boundary.step > safe:
        raise fail(f"GC boundary step={boundary.step} is above the smallest live watermark {safe}")
    data = set(store.list("data/"))
    for step in range(safe, head.num_steps):
        entry = fresh.entry(step)
        if entry.key not in data:
            raise fail(f"live step={step} lost its object {entry.key!r}")
        read_footer(store, entry.key, size=entry.size, footer_offset=entry.footer_offset,
                    footer_length=entry.footer_length)
    named = {fresh.entry(s).key for s in range(boundary.step, head.num_steps)}
    leftovers = sorted(data - named)
    if leftovers:
        raise fail(f"orphans survived a grace-0 reclaim pass: {leftovers[:5]}")
