"""One ``on_error`` vocabulary, ``"raise"`` | ``"skip"``, for sources, media stages and ``tgb produce``; the
sources' old ``"skip_and_count"`` is refused with an error that names ``"skip"``."""

from __future__ import annotations

import numpy as np
import pytest

from torch_tgb import datapipes, sources
from torch_tgb._on_error import check_on_error
from torch_tgb.cli import main as cli_main

TOKENS = np.arange(12, dtype=np.uint16)
OFFSETS = np.arange(0, 13, 3)


@pytest.mark.parametrize("value", ["raise", "skip"])
def test_on_error_has_two_words(value: str) -> None:
    assert check_on_error(value, where="here") == value


def test_check_on_error_names_the_new_word_and_the_place() -> None:
    with pytest.raises(ValueError, match=r"here: on_error='skip_and_count' is now on_error='skip'"):
        check_on_error("skip_and_count", where="here")
    with pytest.raises(ValueError, match=r"here: on_error must be one of 'raise', 'skip', got 'ignore'"):
        check_on_error("ignore", where="here")


def test_sources_and_media_stages_take_the_same_words() -> None:
    docs = sources.TokenFile(TOKENS, offsets=OFFSETS, on_error="skip")
    assert docs.on_error == "skip"
    assert datapipes.DecodeImages(docs, on_error="raise").on_error == "raise"
    for make in (lambda: sources.TokenFile(TOKENS, offsets=OFFSETS, on_error="skip_and_count"),
                 lambda: datapipes.DecodeImages(docs, on_error="skip_and_count")):
        with pytest.raises(ValueError, match=r"(TokenFile|DecodeImages): on_error='skip_and_count' is now "
                                             r"on_error='skip'"):
            make()


def test_tgb_produce_refuses_the_old_spelling(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        cli_main.main(["produce", str(tmp_path / "ns"), "--source", "token-file:x.npy", "--on-error", "skip_and_count"])
    assert "on_error='skip_and_count' is now on_error='skip'" in capsys.readouterr().err
