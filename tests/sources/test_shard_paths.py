"""Naming a WebDataset's shards: a list, brace ranges, a local directory or a local glob pattern."""

from __future__ import annotations

import pytest

from tests.sources._corpus import make_docs, write_tars
from torch_tgb import sources
from torch_tgb.errors import SourceError

pytest.importorskip("webdataset")


def _tokens(source: sources.WebDataset) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in d["tokens"]) for d in source]


def test_a_directory_or_a_glob_names_the_shards_of_the_list_in_its_order(tmp_path):
    paths = write_tars(tmp_path, make_docs(20), per_tar=3)  # shard-0000.tar .. shard-0006.tar
    (tmp_path / "README.txt").write_text("not a shard")
    listed = _tokens(sources.WebDataset(paths, seed=4))
    for named in (str(tmp_path), tmp_path, str(tmp_path / "*.tar"), str(tmp_path / "shard-000[0-6].tar"),
                  str(tmp_path / "shard-{0000..0006}.tar")):
        source = sources.WebDataset(named, seed=4)
        assert source.urls == paths, named
        assert _tokens(source) == listed
    assert sources.WebDataset(str(tmp_path / "shard-000[01].tar")).urls == paths[:2]
    # each item of a list is expanded the same way (tgb produce --source webdataset:A,B passes a list)
    assert sources.WebDataset([str(tmp_path / "shard-000[01].tar"), paths[5]]).urls == [*paths[:2], paths[5]]


def test_a_directory_without_shards_or_a_pattern_that_matches_nothing_is_refused(tmp_path):
    (tmp_path / "README.txt").write_text("not a shard")
    with pytest.raises(SourceError, match=r"no tar shards \(\*\.tar, .*\) in the directory"):
        sources.WebDataset(str(tmp_path))
    with pytest.raises(SourceError, match=r"shard-\*\.tar: no tar shard matches the pattern"):
        sources.WebDataset(str(tmp_path / "shard-*.tar"))
    with pytest.raises(SourceError, match="no such tar shard"):
        sources.WebDataset(str(tmp_path / "shard-0000.tar"))


def test_a_shard_whose_name_has_a_bracket_is_taken_as_named(tmp_path):
    (path,) = write_tars(tmp_path, make_docs(3), per_tar=3)
    odd = tmp_path / "shard[1].tar"
    (tmp_path / path.rsplit("/", 1)[1]).rename(odd)
    assert sources.WebDataset([str(odd)]).urls == [str(odd)]
    assert len(_tokens(sources.WebDataset(str(odd)))) == 3
