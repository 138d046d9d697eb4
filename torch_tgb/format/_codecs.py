"""Codecs of tensors stored compressed at rest: what a spec names, how bytes are encoded and, bounded, decoded.

A codec is chosen per key by the producer (``Producer(codecs={"pixel_values":
"zstd+delta:3x14x14"})``) and named in the footer by its spec (``docs/format.md``,
*Version 4*)::

    spec   = name [":" level] ["+delta:" size ("x" size)*]
    "zstd"                    zstd at its default level (3)
    "zstd:1"                  zstd level 1
    "zstd:1+delta:3x14x14"    each item viewed as [3, 14, 14] and differenced along each axis first (_delta.py)

A coded tensor's stored bytes are one zstd frame (content size in its header,
a content checksum at its end) of the item bytes, filtered; its CRC32C is over
the stored bytes (checked as the reader's verify policy says), the frame's
checksum over the decoded ones (checked at every decode, whatever the policy:
a corrupt frame that still decodes to the right size is refused, never handed
out as tensors); its shape
(the footer's dims) says how many bytes it decodes to. Decoding is bounded
by that shape, never by anything the frame says: a frame that declares
another size, decodes to more or fewer bytes, ends early or carries bytes
after its end, carries no checksum or fails it is a
:class:`~torch_tgb.errors.CorruptObject`, found with at
most the shape's bytes allocated. A shape may claim at most
:attr:`Backend.max_ratio` decoded bytes per stored byte (zstd cannot do
better: a 128 KiB block takes at least 4 bytes), so a hostile footer cannot
make a reader allocate more than that for a small object.

``zstandard`` is imported by this module only, when a codec first encodes or
decodes (the ``compress`` extra: ``pip install 'torch-tgb[compress]'``).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from torch_tgb._lazy import require
from torch_tgb.errors import CorruptObject
from torch_tgb.format._delta import delta_decode, delta_encode, delta_problem
from torch_tgb.format._spec import CODEC_VERSION
from torch_tgb.format._zstd_frame import frame_size

__all__ = ["CODECS", "MAX_CODECS", "Backend", "Codec", "codec_table", "parse_codec"]

#: most codecs one footer may name (its tensor rows number them in a u16; a real TGB names one or two)
MAX_CODECS = 255
_SPEC = re.compile(r"^([a-z0-9]+)(?::(-?\d+))?(?:\+delta:(\d+(?:x\d+)*))?$")


@dataclass(frozen=True)
class Backend:
    """A compressor known to this reader: its levels, and the most bytes one stored byte can decode to."""

    name: str
    levels: range
    default_level: int
    max_ratio: int
    module: str
    extra: str

    def library(self) -> ModuleType:
        return require(self.module, self.extra)


#: the codecs this torch_tgb reads and writes, by name (lz4 was measured and not taken: benchmarks/compression.py)
CODECS: dict[str, Backend] = {
    # an RLE block of 128 KiB costs 3 + 1 bytes: no zstd frame decodes to more than 32768 bytes per stored byte
    "zstd": Backend("zstd", range(1, 23), 3, 1 << 15, "zstandard", "compress"),
}


@dataclass(frozen=True)
class Codec:
    """How one key's tensors are stored: a backend, its level, and an optional delta block (``_delta.py``)."""

    name: str
    level: int | None = None
    delta: tuple[int, ...] = ()

    @property
    def spec(self) -> str:
        """The canonical spec string (what the footer records and :func:`parse_codec` reads)."""
        level = "" if self.level is None else f":{self.level}"
        delta = "" if not self.delta else "+delta:" + "x".join(str(d) for d in self.delta)
        return f"{self.name}{level}{delta}"

    @property
    def backend(self) -> Backend:
        return CODECS[self.name]

    def problem(self, dtype: np.dtype, trailing: tuple[int, ...]) -> str | None:
        """What keeps tensors of ``dtype`` with items of shape ``trailing`` from this codec; None: nothing."""
        return delta_problem(self.delta, dtype, trailing) if self.delta else None

    def size_problem(self, stored: int, decoded: int) -> str | None:
        """What is impossible about ``stored`` bytes that decode to ``decoded`` (a shape's bytes); None: nothing."""
        if stored < 1:
            return f"a {self.name} tensor stores {stored} bytes"
        if decoded > stored * self.backend.max_ratio:
            return (f"its shape needs {decoded} bytes from {stored} stored: more than {self.name} can decode "
                    f"({self.backend.max_ratio} per stored byte)")
        return None

    def encode(self, array: np.ndarray) -> bytes:
        """The stored bytes of ``array`` (contiguous ``[n, ...]``; filtered on a copy when there is a delta)."""
        zstd = self.backend.library()
        if self.delta:
            array = np.array(array, copy=True, order="C")
            delta_encode(array, self.delta)
        level = self.backend.default_level if self.level is None else self.level
        # content size in the frame header: a reader compares it with the shape before it decodes a byte;
        # the checksum (4 bytes, xxh64 of the decoded bytes): a corrupt frame never decodes to wrong tensors
        compressor = zstd.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
        data: bytes = compressor.compress(array.reshape(-1).view(np.uint8).data)
        return data

    def decode_into(self, src: memoryview, dst: memoryview, *, dtype: np.dtype, shape: tuple[int, ...],
                    where: str) -> None:
        """Decode ``src`` (stored bytes) into ``dst`` (exactly the shape's bytes), or raise :class:`CorruptObject`.

        Decoded straight into ``dst`` (no intermediate bytes), and the delta filter undone there in place. At
        most ``len(dst)`` bytes are decoded: a frame declaring another size, or with bytes before or after it
        (``_zstd_frame.py``), is refused before decoding, and one that decodes to more is refused at its first
        byte beyond ``len(dst)``. A frame without a content checksum is
        refused (every writer writes one), and zstd checks it: decoded bytes that differ from those encoded
        are a :class:`CorruptObject`, whatever the CRC policy let through.
        """
        zstd = self.backend.library()
        try:
            declared = zstd.frame_content_size(src)
            checksummed = zstd.get_frame_parameters(src).has_checksum
        except zstd.ZstdError as e:
            raise CorruptObject(f"{where}: its {self.name} frame header is unreadable ({e})") from e
        if declared != len(dst):
            said = "no size" if declared < 0 else f"{declared} bytes"
            raise CorruptObject(f"{where}: its {self.name} frame declares {said}; its shape {list(shape)} of "
                                f"{dtype} is {len(dst)} bytes")
        if not checksummed:
            raise CorruptObject(f"{where}: its {self.name} frame carries no content checksum (a torch_tgb writer "
                                "always writes one): rewrite the object")
        size = frame_size(src, zstd.frame_header_size(src))
        if isinstance(size, str):
            raise CorruptObject(f"{where}: {self.name} frame does not decode to its {len(dst)} bytes ({size})")
        if size != len(src):
            raise CorruptObject(f"{where}: its {self.name} frame ends at byte {size} of its {len(src)} stored bytes: "
                                f"{len(src) - size} bytes of unused data after it")
        try:
            # straight into ``dst`` (no intermediate bytes, no copy): at most len(dst) bytes are written, and
            # the read after them must find the frame's end (where zstd checks its checksum)
            reader = _decompressor(zstd).stream_reader(src, read_size=len(src))
            done = 0
            while done < len(dst):
                n = reader.readinto(dst[done:])
                if n <= 0:
                    break
                done += n
            more = reader.read(1)
        except zstd.ZstdError as e:
            raise CorruptObject(f"{where}: {self.name} frame does not decode to its {len(dst)} bytes ({e})") from e
        if done != len(dst) or more:
            said = f"{done} bytes" if done != len(dst) else "more bytes"
            raise CorruptObject(f"{where}: {self.name} frame does not decode to its {len(dst)} bytes: it decoded "
                                f"to {said}")
        if self.delta:
            delta_decode(np.frombuffer(dst, dtype=dtype).reshape(shape), self.delta)


_THREAD = threading.local()


def _decompressor(zstd: ModuleType) -> Any:
    """This thread's ``ZstdDecompressor`` (a decoding context is not shared between threads; made once per thread)."""
    dctx = getattr(_THREAD, "dctx", None)
    if dctx is None:
        dctx = _THREAD.dctx = zstd.ZstdDecompressor()
    return dctx


@functools.lru_cache(maxsize=64)
def parse_codec(spec: str) -> Codec:
    """The :class:`Codec` a spec names; ``ValueError`` saying what is wrong (an unknown name: the names known)."""
    if not isinstance(spec, str):
        raise ValueError(f"a codec spec is a string such as 'zstd' or 'zstd:1+delta:3x14x14', not {spec!r}")
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(f"codec spec {spec!r} is not NAME[:LEVEL][+delta:AxBx...] (e.g. 'zstd:1+delta:3x14x14')")
    name, level, delta = m.group(1), m.group(2), m.group(3)
    backend = CODECS.get(name)
    if backend is None:
        raise ValueError(f"codec {name!r} is unknown to this torch_tgb (it knows {sorted(CODECS)}): written by a "
                         "newer torch_tgb? upgrade torch_tgb to read it")
    if level is not None and int(level) not in backend.levels:
        raise ValueError(f"codec spec {spec!r}: {name} level {level} is outside "
                         f"{backend.levels.start}..{backend.levels.stop - 1}")
    block = tuple(int(d) for d in delta.split("x")) if delta else ()
    if block and (any(d < 1 for d in block) or math.prod(block) > 1 << 24):
        raise ValueError(f"codec spec {spec!r}: delta block sizes must be positive, at most 2**24 values in all")
    return Codec(name, None if level is None else int(level), block)


def codec_table(specs: object, version: int) -> tuple[Codec, ...] | str:
    """A footer meta's ``"codecs"`` (``version`` 4: up to :data:`MAX_CODECS` specs; before: none), or what is wrong."""
    if specs is None:
        return ()
    if version < CODEC_VERSION:
        return f"footer of format version {version} names codecs (they need version {CODEC_VERSION})"
    if not isinstance(specs, list) or not 0 < len(specs) <= MAX_CODECS or not all(isinstance(c, str) for c in specs):
        return f"a version-{CODEC_VERSION} footer names 1 to {MAX_CODECS} codecs as strings, not {specs!r:.200}"
    try:
        return tuple(parse_codec(spec) for spec in specs)
    except ValueError as e:
        return f"footer names {e}"
