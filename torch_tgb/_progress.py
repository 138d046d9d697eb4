"""Progress bars that show on a terminal and stay silent in logs and CI.

Long work (the demo, verify, convert, produce) wraps its loops in
:func:`progress`. A bar is drawn only when the stream is a TTY and no CI
variable is set, so redirected output and CI logs never fill with carriage
returns. ``TGB_PROGRESS=1`` forces bars on, ``TGB_PROGRESS=0`` forces them off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Protocol, TypeVar, overload

__all__ = ["CI_VARIABLES", "ProgressBar", "progress", "progress_enabled"]

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
