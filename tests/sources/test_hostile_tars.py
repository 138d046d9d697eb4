"""Tar headers that lie about a member's size: refused in bounded time, never a hang or a huge allocation.

``tarfile`` in stream mode skips an unread member by reading its claimed size
block by block, past the end of the data: a header claiming 10**12 bytes (a
pax ``size`` record) or 2**88 (GNU base-256) kept ``sources.WebDataset`` in
that loop for hours or forever. A member claiming more bytes than the file
holds is a corrupt shard (raised whatever ``on_error``: nothing after it can
be found); one over ``max_member_bytes`` is a bad record whose bytes are
skipped in bounded reads that end at the real end of the data.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tests.sources._corpus import _npy
from torch_tgb import sources
from torch_tgb.errors import SourceError

pytestmark = pytest.mark.timeout(60)  # before the fix each case below ran for hours or forever

GOOD = np.arange(5, dtype=np.int32)


def _header(name: bytes, size_field: bytes, typeflag: bytes = b"0") -> bytes:
    """One ustar header block written field by field (tarfile refuses to write a lying one)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = h[116:124] = b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _octal(n: int) -> bytes:
    return b"%011o\0" % n


def _base256(n: int) -> bytes:
    """GNU's binary size: 0x80, then the size in the 11 bytes that follow (big-endian)."""
    return b"\x80" + n.to_bytes(11, "big")


def _member(name: bytes, data: bytes) -> bytes:
    return _header(name, _octal(len(data))) + data + bytes(-len(data) % 512)


def _pax_size(n: int) -> bytes:
    """A pax extended header whose ``size`` record overrides the next member's size field."""
    body = b"size=%d\n" % n
    total = next(t for t in range(len(body) + 2, len(body) + 12) if len(b"%d " % t) + len(body) == t)
    record = b"%d %s" % (total, body)  # a record counts its own length, digits included
    return _header(b"PaxHeaders/b", _octal(len(record)), b"x") + record + bytes(-len(record) % 512)


def _hostile(path: Path, claim: str, *, name: bytes = b"b.tokens.npy", typeflag: bytes = b"0",
             compress: bool = False) -> str:
    """A good sample ``a``, then ``name`` claiming a huge size over 4 KiB of data, then the end of the archive."""
    if claim == "pax 10**12":
        hostile = _pax_size(10**12) + _header(name, _octal(0), typeflag)
    elif claim == "base-256 2**88-1":
        hostile = _header(name, _base256(2**88 - 1), typeflag)
    elif claim == "base-256 10**12":
        hostile = _header(name, _base256(10**12), typeflag)
    else:
        raise AssertionError(claim)
    raw = _member(b"a.tokens.npy", _npy(GOOD)) + hostile + bytes(4096) + bytes(1024)
    if compress:
        raw = gzip.compress(raw)
    path.write_bytes(raw)
    return str(path)


def test_the_crafted_headers_say_what_they_claim(tmp_path):
    for claim, size in (("pax 10**12", 10**12), ("base-256 2**88-1", 2**88 - 1), ("base-256 10**12", 10**12)):
        with tarfile.open(_hostile(tmp_path / "h.tar", claim), "r|") as tar:
            assert [(m.name, m.size) for m in _first_two(tar)] == [("a.tokens.npy", len(_npy(GOOD))),
                                                                   ("b.tokens.npy", size)]


def _first_two(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    out = []
    for m in tar:
        out.append(m)
        if len(out) == 2:
            return out
    return out


CLAIMS = ["pax 10**12", "base-256 2**88-1", "base-256 10**12"]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("claim", CLAIMS)
def test_a_member_claiming_more_than_the_file_is_refused_before_any_skip(tmp_path, claim, on_error):
    path = _hostile(tmp_path / "h.tar", claim)
    with pytest.raises(SourceError, match=r"h.tar: member 'b.tokens.npy' .* past the end of the file"):
        list(sources.WebDataset(path, on_error=on_error))


@pytest.mark.parametrize("claim", CLAIMS)
@pytest.mark.parametrize("member", ["unread name", "unknown type"])
def test_a_member_the_source_never_reads_is_held_to_the_file_too(tmp_path, claim, member):
    """Members skipped without a read (``__``-names, types tarfile does not know) are skipped by tarfile too."""
    name, typeflag = (b"__meta__", b"0") if member == "unread name" else (b"b.tokens.npy", b"Z")
    path = _hostile(tmp_path / "h.tar", claim, name=name, typeflag=typeflag)
    with pytest.raises(SourceError, match="past the end of the file"):
        list(sources.WebDataset(path, on_error="skip"))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("claim", CLAIMS)
def test_a_compressed_shard_skips_an_oversized_member_only_as_far_as_its_data(tmp_path, claim, on_error):
    """A .tar.gz has no size to compare with: skipping the member ends where its data ends, a truncated shard."""
    path = _hostile(tmp_path / "h.tar.gz", claim, compress=True)
    with pytest.raises(SourceError, match=r"h.tar.gz: truncated tar file \(member 'b.tokens.npy' claims"):
        list(sources.WebDataset(path, on_error=on_error))


def test_an_oversized_member_inside_the_file_is_still_a_bad_record_and_the_shard_goes_on(tmp_path):
    big = _member(b"b.tokens.npy", bytes(5000))
    raw = _member(b"a.tokens.npy", _npy(GOOD)) + big + _member(b"c.tokens.npy", _npy(GOOD + 1)) + bytes(1024)
    for path, data in ((tmp_path / "ok.tar", raw), (tmp_path / "ok.tar.gz", gzip.compress(raw))):
        path.write_bytes(data)
        node = sources.WebDataset(str(path), on_error="skip", max_member_bytes=1000)
        assert [d["tokens"].tolist() for d in node] == [GOOD.tolist(), (GOOD + 1).tolist()]
        assert node.stats().skipped == 1


def test_a_negative_base256_size_is_refused(tmp_path):
    raw = _member(b"a.tokens.npy", _npy(GOOD)) + _header(b"b.tokens.npy", b"\xff" * 12) + bytes(2048)
    (tmp_path / "neg.tar").write_bytes(raw)
    with pytest.raises(SourceError, match="neg.tar: member 'b.tokens.npy' at byte 1024 claims -1 bytes, a negative"):
        list(sources.WebDataset(str(tmp_path / "neg.tar"), on_error="skip"))


def test_max_member_bytes_must_be_positive(tmp_path):
    path = tmp_path / "ok.tar"
    path.write_bytes(_member(b"a.tokens.npy", _npy(GOOD)) + bytes(1024))
    with pytest.raises(ValueError, match="max_member_bytes"):
        sources.WebDataset(str(path), max_member_bytes=0)
    assert [d["tokens"].tolist() for d in sources.WebDataset(str(path), max_member_bytes=io.DEFAULT_BUFFER_SIZE)] \
        == [GOOD.tolist()]
