"""What every section of ``report.py`` writes its figures with: rates in millions, ranges of a spread, run dates,
verdicts."""

from __future__ import annotations

from typing import Any


def m(x: float, unit: float = 1e6, digits: int = 1) -> str:
    """``x`` in ``unit`` (millions by default), with thousands separators."""
    return f"{x / unit:,.{digits}f}"


def rng_m(s: dict[str, float], unit: float = 1e6, digits: int = 1) -> str:
    """``median (min–max)`` of a spread in ``unit`` (see :func:`m`), or a dash."""
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


def rng(s: dict[str, Any] | None, scale: float = 1.0, digits: int = 2) -> str:
    """``median (min–max)`` of a spread, or a dash."""
    if not s or not s.get("n"):
        return "–"
    f = f"{{:.{digits}f}}"
    if s["n"] == 1 or s["min"] == s["max"]:
        return f.format(s["median"] * scale)
    return f"{f.format(s['median'] * scale)} ({f.format(s['min'] * scale)}–{f.format(s['max'] * scale)})"


def med(s: dict[str, Any] | None) -> float:
    """The median of a spread, NaN where there is none."""
    return float(s["median"]) if s and s.get("n") else float("nan")
