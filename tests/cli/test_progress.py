from __future__ import annotations

import io

from torch_tgb._progress import progress, progress_enabled


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_enabled_only_on_a_tty_outside_ci():
    assert progress_enabled(_Tty(), environ={}) is True
    assert progress_enabled(io.StringIO(), environ={}) is False
    assert progress_enabled(_Tty(), environ={"CI": "true"}) is False
    assert progress_enabled(_Tty(), environ={"GITHUB_ACTIONS": "true"}) is False
    assert progress_enabled(io.StringIO(), environ={"TGB_PROGRESS": "1"}) is True
    assert progress_enabled(_Tty(), environ={"TGB_PROGRESS": "0"}) is False


def test_disabled_bar_writes_nothing_and_still_counts():
    stream = io.StringIO()
    with progress(total=3, desc="x", stream=stream, enabled=False) as bar:
        for _ in range(3):
            bar.update(1)
    assert stream.getvalue() == ""
    assert list(progress(range(4), stream=stream, enabled=False)) == [0, 1, 2, 3]
    assert stream.getvalue() == ""


def test_enabled_bar_draws():
    stream = _Tty()
    for _ in progress(range(3), desc="drawn", stream=stream, enabled=True):
        pass
    assert "drawn" in stream.getvalue()
