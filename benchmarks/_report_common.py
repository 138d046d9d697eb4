"""What every section of ``report.py`` writes its figures with: rates in millions, ranges, run dates, verdicts."""

from __future__ import annotations

from typing import Any


def m(x: float, unit: float = 1e6, digits: int = 1) -> str:
    return f"{x / unit:,.{digits}f}"


def rng_m(s: dict[str, float], unit: float = 1e6, digits: int = 1) -> str:
    if not s or s.get("n", 1) == 0:
        return "–"
    return f"{m(s['median'], unit, digits)} ({m(s['min'], unit, digits)}–{m(s['max'], unit, digits)})"


def when(r: dict[str, Any]) -> str:
    mach = r.get("machine") or {}
    if not mach.get("date_utc"):
        return "run date not recorded (an earlier run)"
    gpus = mach.get("gpus")
    return f"run {mach['date_utc']}" + (f" on {gpus[0]} ({mach['cores']} cores)" if gpus else "")


def section_run(report: dict[str, Any], name: str) -> dict[str, Any]:
    """Where the date of a list-valued section of consumer_read.json is kept (``sections_run``)."""
    return {"machine": (report.get("sections_run") or {}).get(name)}


def verdict(ok: bool) -> str:
    return "met" if ok else "not met"
