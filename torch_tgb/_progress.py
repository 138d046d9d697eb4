"""Progress bars that show on a terminal and stay silent in logs and CI.

Long work (the demo, verify, convert, produce) wraps its loops in
:func:`progress`. A bar is drawn only when the stream is a TTY and no CI
variable is set, so redirected output and CI logs never fill with carriage
returns. ``TGB_PROGRESS=1`` forces bars on, ``TGB_PROGRESS=0`` forces them off.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Protocol, TypeVar, overload

__all__ = [
    "CI_VARIABLES", "ProgressBar", "bar_logging", "count_text", "progress", "progress_enabled", "rate_text", "say",
    "share_text",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: environment variables whose presence means "running under CI"
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION")


def progress_enabled(stream: IO[str] | None = None, *, environ: Mapping[str, str] | None = None) -> bool:
    """True when a progress bar should be drawn on ``stream`` (stderr by default)."""
    env = os.environ if environ is None else environ
    forced = env.get("TGB_PROGRESS", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    if any(env.get(name) for name in CI_VARIABLES):
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed stream
        return False


class ProgressBar(Protocol[T_co]):
    """What :func:`progress` returns (a ``tqdm`` bar, drawn or not): iterate it, or update it by hand."""

    def __iter__(self) -> Iterator[T_co]: ...

    def __enter__(self) -> ProgressBar[T_co]: ...

    def __exit__(self, *exc: object) -> None: ...

    def update(self, n: float = 1) -> bool | None: ...

    def set_postfix(self, ordered_dict: Mapping[str, object] | None = None, refresh: bool = True,
                    **kwargs: object) -> None: ...

    def close(self) -> None: ...

    def refresh(self) -> None: ...

    def reset(self, total: float | None = None) -> None: ...

    def set_description_str(self, desc: str | None = None, refresh: bool = True) -> None: ...

    n: float
    initial: float
    total: float | None


@overload
def progress(
    iterable: Iterable[T],
    *,
    total: int | float | None = None,
    desc: str | None = None,
    unit: str = "it",
    stream: IO[str] | None = None,
    enabled: bool | None = None,
    **kwargs: object,
) -> ProgressBar[T]: ...


@overload
def progress(
    iterable: None = None,
    *,
    total: int | float | None = None,
    desc: str | None = None,
    unit: str = "it",
    stream: IO[str] | None = None,
    enabled: bool | None = None,
    **kwargs: object,
) -> ProgressBar[object]: ...


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | float | None = None,
    desc: str | None = None,
    unit: str = "it",
    stream: IO[str] | None = None,
    enabled: bool | None = None,
    **kwargs: object,
) -> ProgressBar[T] | ProgressBar[object]:
    """A ``tqdm`` bar over ``iterable`` (or a manual bar with ``total``), disabled off-terminal.

    The returned object always supports ``update``, ``set_postfix`` and
    ``close`` and works as a context manager, whether drawn or not.
    """
    from tqdm.auto import tqdm

    stream = sys.stderr if stream is None else stream
    show = progress_enabled(stream) if enabled is None else enabled
    bar: ProgressBar[T] = tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=stream,
        disable=not show,
        leave=False,
        dynamic_ncols=True,
        **kwargs,
    )
    return bar


@contextlib.contextmanager
def bar_logging(enabled: bool = True) -> Iterator[None]:
    """While open, log records of the root logger's console handlers are written above the bar (tqdm.write).

    Without it a ``logging`` line (``--stats-interval``, a warning) lands in the
    middle of the bar's line. ``enabled=False`` (no bar drawn): nothing changes.
    """
    if not enabled:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():
        yield


def say(message: str, *, stream: IO[str] | None = None) -> None:
    """Write one line to stderr (or ``stream``) above any bar being drawn, which is redrawn below it."""
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr if stream is None else stream)


#: the units count_text and rate_text abbreviate, and their short forms
_UNIT_TEXT = {"token": "tok", "tokens": "tok", "batch": "batches", "sample": "samples", "row": "rows",
              "document": "docs", "step": "steps", "TGB": "TGBs"}


def count_text(value: float, unit: str = "") -> str:
    """``1234567, "token"`` -> ``'1.23M tok'``: three significant digits, SI prefixes, the unit's short form."""
    from tqdm import tqdm

    value = float(value)
    if abs(value) >= 999.5:
        number = tqdm.format_sizeof(value, divisor=1000)
    else:
        number = f"{value:.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.3g}"
    short = _UNIT_TEXT.get(unit, unit)
    return f"{number.strip()} {short}".strip()


def rate_text(per_s: float, unit: str = "") -> str:
    """``350000, "token"`` -> ``'350k tok/s'``."""
    return f"{count_text(per_s, unit)}/s" if unit else f"{count_text(per_s)}/s"


def share_text(done: float, total: float | None) -> str:
    """``done`` of ``total`` as ``'42.0%'`` (``'?'`` without a total)."""
    if not total:
        return "?"
    return f"{100.0 * min(done, total) / total:.1f}%"
