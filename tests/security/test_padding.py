"""Padding bytes are covered by no CRC; ``tgb verify`` checks them as zeros (issue 13 audit)."""

from __future__ import annotations

import pytest
from _tamper import Tamper

import torch_tgb.cli.main as cli_main
from torch_tgb.cli._verify_impl import verify_namespace
from torch_tgb.errors import CorruptObject
from torch_tgb.format import check_padding, padding_ranges, read_footer, read_slice
from torch_tgb.storage import LocalStore
from torch_tgb.testing.version_json import get_entry


def _first_object(tamper: Tamper):  # type: ignore[no-untyped-def]
    entry = get_entry(tamper.version(3), 0)
    store = LocalStore(tamper.ns)
    footer = read_footer(store, entry["key"], size=entry["size"], footer_offset=entry["footer_offset"],
                         footer_length=entry["footer_length"])
    return store, entry["key"], footer


def test_padding_ranges_are_every_byte_no_tensor_covers(tamper: Tamper) -> None:
    store, key, footer = _first_object(tamper)
    tensors = sum(t.length for s in footer.slices() for t in s.tensors)
    gaps = padding_ranges(footer)
    assert gaps and tensors + sum(b - a for a, b in gaps) == footer.footer_offset
    assert check_padding(store.get(key), footer, key=key) == sum(b - a for a, b in gaps)


def test_a_non_zero_padding_byte_is_found_by_verify(tamper: Tamper, capsys) -> None:
    store, key, footer = _first_object(tamper)
    start, end = padding_ranges(footer)[-1]
    data = bytearray(store.get(key))
    data[start] = 0x5A  # a byte hidden in the padding: no CRC covers it
    tamper.write(key, bytes(data))
    assert [t.shape for t in read_slice(store, key, footer, footer.slice(0)).values()]  # readers do not notice ...
    with pytest.raises(CorruptObject, match=f"offset {start}"):
        check_padding(bytes(data), footer, key=key)
    report = verify_namespace(tamper.ns)  # ... tgb verify does
    assert not report.ok and any(key in str(p) and "padding" in str(p) for p in report.problems)
    assert cli_main.main(["verify", tamper.ns]) != 0
