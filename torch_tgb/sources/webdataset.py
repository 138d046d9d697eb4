"""WebDataset: documents from tar shards, one sample (files sharing a key) per document.

Tokens come from a ``.npy`` member (``field="tokens.npy"``: a 1-D integer
array, loaded without pickle) or from a text member (``text_field="txt"``,
UTF-8; a ``json`` member's ``caption`` or ``text`` string) tokenized with
``tokenizer=``. Units of sharding are the tar shards
(``urls``: one or a list, each expanded: ``{000..009}`` brace ranges, a
local directory (its tar files, sorted), a local glob pattern). Local
paths are opened directly, URLs with a scheme through fsspec
(``storage_options``); the tar stream is split into samples by
``webdataset``'s ``tar_file_iterator`` and ``group_by_keys``. A tar cannot
seek to a sample: resuming inside a shard streams it again from its start,
skipping samples without decoding them. ``extra`` names members to carry
along as bytes (``"__key__"`` is the sample key). A member larger than
``max_member_bytes`` (1 GiB) is never read: its sample is a bad record
(``on_error``), and its bytes are skipped in bounded reads that stop at the
real end of the data. A member whose header claims more bytes than an
uncompressed shard holds (a pax ``size`` of 10**12, a GNU base-256 size of
2**88) is a corrupt shard: raised at once, whatever ``on_error`` (nothing
after it can be found). ``tarfile``'s own skip would loop over the claimed
size, past the end of the file, for hours or forever. Needs the
``webdataset`` extra.

**Media samples.** A sample with an image or video member (extension
``jpg``/``jpeg``/``png``/``webp``, ``mp4``/``webm``/``mkv``/``mov``, audio
``flac``/``wav``/``mp3``/``opus``/``ogg``/``m4a``; also
``0.jpg``, ``1.jpg`` for several) is yielded undecoded: each such member's
raw bytes under its extension key, ``"__key__"``, ``"__url__"`` and
``"tokens"``, the caption's tokens (``text_field`` + ``tokenizer``, or the
``field`` member; empty when the sample has no caption). Decoding is left to
``datapipes.DecodeImages`` / ``DecodeVideos`` / ``DecodeAudio``. A sample whose only media
member has an extension that is recognised but not decoded (``gif``,
``bmp``, ``tiff``, ``avi``, ...) is a bad record (``on_error``); a caption
without any media member is a text document, which ``DecodeImages``
refuses (``"no_image"``).
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import torch

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, ReadOptions, UnitSource, require
from torch_tgb.sources._inputs import Tokenizer, as_tokens, glob_matches, tokenize
from torch_tgb.sources._tar_count import count_samples, is_empty_tar
from torch_tgb.transforms.audio import AUDIO_EXTS
from torch_tgb.transforms.media import IMAGE_EXTS, OTHER_MEDIA_EXTS, VIDEO_EXTS, media_keys

if TYPE_CHECKING:
    from typing_extensions import Unpack

wds_tar = require("webdataset.tariterators", "webdataset")

__all__ = ["WebDataset"]


class WebDataset(UnitSource):
    """Documents of the samples of WebDataset tar shards; units are shards.

    ``batch_size`` samples are decoded (and tokenized) together; ``**options``
    are the ``ReadOptions`` every source takes. An empty tar (no members) is
    one bad record (``on_error``), like any shard that yields nothing usable.
    """

    RECORD_NAME, UNIT_NAME = "sample", "tar"

    def __init__(
        self,
        urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        field: str = "tokens.npy",
        text_field: str | None = None,
        tokenizer: Tokenizer | None = None,
        extra: Sequence[str] = (),
        batch_size: int = 64,
        max_member_bytes: int = 1 << 30,
        storage_options: dict[str, Any] | None = None,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        self.urls = _expand(urls)
        if text_field is None and not field.endswith(".npy"):
            raise SourceError(f"{self.urls[0] if self.urls else urls}: field {field!r} must be a .npy member; "
                              "use text_field= and tokenizer= for text")
        if text_field is not None and tokenizer is None:
            raise SourceError(f"{self.urls[0] if self.urls else urls}: text_field={text_field!r} needs tokenizer=")
        self.field, self.text_field, self.tokenizer = field, text_field, tokenizer
        self.extra = tuple(extra)
        self.batch_size = batch_size
        if max_member_bytes < 1:
            raise ValueError(f"max_member_bytes must be at least 1, got {max_member_bytes}")
        self.max_member_bytes = max_member_bytes
        self.storage_options = dict(storage_options or {})
        for url in self.urls:
            if "://" not in url and not os.path.isfile(url):
                raise SourceError(f"{url}: no such tar shard")
        self._set_num_units(len(self.urls), f"WebDataset({urls!r})")

    def _unit_name(self, unit: int) -> str:
        return self.urls[unit]

    def _unit_records(self, unit: int) -> int | None:
        # progress only: samples counted from a local shard's headers, unless there are many shards to walk
        return count_samples(self.urls[unit]) if self.num_units <= COUNTED_SHARDS else None

    def _open(self, url: str) -> Any:
        if "://" in url:
            fsspec = require("fsspec", "webdataset")
            return fsspec.open(url, "rb", **self.storage_options).open()
        return open(url, "rb")

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        url = self.urls[unit]
        with self._open(url) as stream:
            if is_empty_tar(stream.read(tarfile.BLOCKSIZE)):  # a valid tar without members: one bad record
                if start == 0:
                    yield SourceError(f"{url}: an empty tar (no members)")
                return
            stream.seek(0)
            size = None if _check_tar(stream, url) else _known_size(stream)
            samples = wds_tar.group_by_keys(_members(stream, url, self.max_member_bytes, size))
            batch: list[tuple[int, dict[str, Any]]] = []
            for index, sample in enumerate(samples):
                if index < start:
                    continue
                batch.append((index, sample))
                if len(batch) >= self.batch_size:
                    yield from self._decode(url, batch)
                    batch = []
            yield from self._decode(url, batch)

    def _decode(self, url: str, batch: list[tuple[int, dict[str, Any]]]) -> Iterator[Document | SourceError]:
        def where(i: int) -> str:
            index, sample = batch[i]
            return f"{url} sample {index} (key {sample.get('__key__')!r})"

        tokens: list[Any] = [None] * len(batch)
        media = [media_keys(sample, MEDIA_EXTS) for _, sample in batch]
        for i, (_, sample) in enumerate(batch):  # before anything reads a member: an unread one has no bytes
            big = [(k, int(v)) for k, v in sample.items() if isinstance(v, _Oversized)]
            if big:
                tokens[i] = SourceError(f"{where(i)}: member {big[0][0]!r} has {big[0][1]} bytes > "
                                        f"max_member_bytes={self.max_member_bytes}")
        if self.text_field is not None and self.tokenizer is not None:  # both or neither (__init__)
            texts: dict[int, str] = {}
            for i, (_, sample) in enumerate(batch):
                if tokens[i] is not None:
                    continue
                if media[i] and self.text_field not in sample:
                    tokens[i] = torch.zeros(0, dtype=torch.int64)  # an image without a caption
                    continue
                try:
                    texts[i] = _text(bytes(sample[self.text_field]), self.text_field)
                except KeyError:
                    tokens[i] = SourceError(f"{where(i)}: no member {self.text_field!r}")
                except (UnicodeDecodeError, ValueError) as e:
                    tokens[i] = SourceError(f"{where(i)}: {self.text_field!r} is not UTF-8 text: {e}")
            order = list(texts)
            for i, out in zip(order, tokenize([texts[i] for i in order], self.tokenizer, lambda k: where(order[k]))):
                tokens[i] = out
        else:
            tokens = [tokens[i] if tokens[i] is not None
                      else torch.zeros(0, dtype=torch.int64) if media[i] and self.field not in sample
                      else _load_npy(sample, self.field, where(i)) for i, (_, sample) in enumerate(batch)]
        for i, out in enumerate(tokens):
            sample = batch[i][1]
            other = media_keys(sample, OTHER_MEDIA_EXTS)
            if other and not media[i]:
                yield SourceError(f"{where(i)}: unknown media extension {other[0].rsplit('.', 1)[-1]!r} (decoded: "
                                  f"{', '.join(MEDIA_EXTS)})")
                continue
            if isinstance(out, SourceError):
                yield out
                continue
            missing = [name for name in self.extra if name not in sample]
            if missing:
                yield SourceError(f"{where(i)}: no member {missing[0]!r}")
            elif media[i]:
                yield {"tokens": out, "__key__": sample.get("__key__"), "__url__": url,
                       **{name: sample[name] for name in (*media[i], *self.extra)}}
            else:
                yield {"tokens": out, **{name: sample[name] for name in self.extra}}


#: a WebDataset of at most this many shards counts their samples for progress (one header read per member)
COUNTED_SHARDS = 256

#: members yielded raw in a media sample
MEDIA_EXTS = IMAGE_EXTS + VIDEO_EXTS + AUDIO_EXTS


def _load_npy(sample: dict[str, Any], field: str, where: str) -> Any:
    if field not in sample:
        return SourceError(f"{where}: no member {field!r}")
    try:
        array = np.load(io.BytesIO(sample[field]), allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        return SourceError(f"{where}: {field!r} is not a valid .npy array: {e}")
    return as_tokens(array, where)


def _text(data: bytes, field: str) -> str:
    """A text member as a string; a ``json`` member is an object whose ``caption`` (or ``text``) is taken."""
    text = data.decode("utf-8")
    if not field.endswith("json"):
        return text
    obj = json.loads(text)
    value = obj.get("caption", obj.get("text")) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise ValueError("a json caption must be an object with a string 'caption' or 'text'")
    return value


class _Oversized(int):
    """The size of a member that was not read: larger than ``max_member_bytes``."""


def _members(stream: Any, url: str, max_bytes: int, size: int | None) -> Iterator[dict[str, Any]]:
    """The regular files of a tar stream as webdataset's ``{"fname", "data", "__url__"}`` dicts.

    A member larger than ``max_bytes`` is not read (its data is an ``_Oversized`` size): its
    sample becomes a bad record, and no allocation follows a size written in a tar header.
    ``size``: the bytes of an uncompressed shard (None when compressed or unknown); a member
    whose data would end past it is refused before anything is skipped.

    Like ``webdataset.tariterators.tar_file_iterator``, plus the checks it lacks:
    ``tarfile`` ends a stream silently when it is cut at a member boundary, so
    the end-of-archive block must have been read, or the shard is truncated; and
    every byte not read is skipped here (:func:`_skip_data`), not by ``tarfile``.
    """
    tar = tarfile.open(fileobj=stream, mode="r|*")
    for info in tar:
        if info.size < 0 or (size is not None and tar.offset > size):  # where the next header would start
            where = "a negative size" if info.size < 0 else f"past the end of the file ({size} bytes)"
            raise SourceError(f"{url}: member {info.name!r} at byte {info.offset} claims {info.size} bytes, "
                              f"{where}: a corrupt or truncated tar shard")
        if info.isreg() and not info.name.startswith("__"):
            if info.size > max_bytes:
                yield {"fname": info.name, "data": _Oversized(info.size), "__url__": url}
            else:
                member = tar.extractfile(info)
                if member is not None:
                    yield {"fname": info.name, "data": member.read(), "__url__": url}
        _skip_data(tar, info, url)
        tar.members = []  # type: ignore[attr-defined]  # tarfile keeps every header otherwise: a long stream grows
    if tar.fileobj is None or tar.fileobj.tell() < tar.offset + tarfile.BLOCKSIZE:
        raise SourceError(f"{url}: truncated tar file (no end-of-archive block after byte {tar.offset})")


_SKIP_CHUNK = 1 << 20


def _skip_data(tar: tarfile.TarFile, info: tarfile.TarInfo, url: str) -> None:
    """Read and drop what is left of ``info``'s data, in bounded reads that stop at the end of the stream.

    ``tarfile`` in stream mode skips by reading ``size`` bytes in blocks and
    never notices that the data ended: a header claiming 2**88 bytes keeps it
    looping forever. Here the first empty read is a truncated shard.
    """
    fileobj = tar.fileobj
    if fileobj is None:
        return
    left = tar.offset - fileobj.tell()
    while left > 0:
        got = len(fileobj.read(min(left, _SKIP_CHUNK)))
        if got == 0:
            raise SourceError(f"{url}: truncated tar file (member {info.name!r} claims {info.size} bytes; "
                              f"the data ends at byte {fileobj.tell()})")
        left -= got


def _known_size(stream: Any) -> int | None:
    """The bytes of ``stream`` when they are known (a local file, an fsspec file), else None."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        size = getattr(stream, "size", None)
        return size if isinstance(size, int) and size >= 0 else None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _check_tar(stream: Any, url: str) -> bool:
    """Refuse a file that is not a tar before webdataset streams it (its error says little); True: compressed."""
    head = stream.read(512)
    compressed = head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00"
    if not compressed and (len(head) < 512 or (head[257:262] != b"ustar" and not _is_v7_header(head))):
        raise SourceError(f"{url}: not a tar file")
    stream.seek(0)
    return compressed


def _is_v7_header(head: bytes) -> bool:
    """An old-style (pre-POSIX) header: its checksum field matches the header's bytes."""
    try:
        stored = int(head[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(head[:148]) + 8 * 32 + sum(head[156:512])


def _expand(urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shards of ``urls`` (one or a list), each expanded: ``{a..b}`` ranges, a local directory's tar files and a
    local glob pattern's matches (``*``, ``?``, ``[...]``), the last two in sorted order."""
    items = [urls] if isinstance(urls, (str, os.PathLike)) else list(urls)
    return [shard for item in items for shard in _expand_one(os.fspath(item))]


def _expand_one(url: str) -> list[str]:
    if "://" not in url and os.path.isdir(url):
        found = sorted(name for name in os.listdir(url) if name.endswith(_TAR_SUFFIXES))
        if not found:
            raise SourceError(f"{url}: no tar shards ({', '.join('*' + s for s in _TAR_SUFFIXES)}) in the directory")
        return [os.path.join(url, name) for name in found]
    braceexpand = require("braceexpand", "webdataset")
    out: list[str] = []
    for one in braceexpand.braceexpand(url):
        matched = glob_matches(one, "tar shard")
        out += [one] if matched is None else matched
    return out


#: what a directory of shards is read for (``tarfile`` opens each, compressed or not)
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
