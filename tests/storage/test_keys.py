"""Key validation: whatever the key, it is refused or it stays inside the namespace."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import InvalidKey
from torch_tgb.storage import LocalStore, MemoryStore, validate_key

_ALPHABET = st.sampled_from(["a", "b", ".", "..", "/", "\\", "~", ":", "\x00", " ", "\u00fc", "s3:", "//"])
keys = st.lists(_ALPHABET, min_size=0, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(key=keys)
def test_any_key_is_refused_or_contained(tmp_path_factory, key):
    root = tmp_path_factory.getbasetemp() / "keys-ns"
    store = LocalStore(root, fsync=False)
    try:
        validate_key(key)
    except InvalidKey as e:
        assert repr(key)[1:-1][:20] in str(e) or not key
        return
    path = store.local_path(key)
    assert path is not None
    real = os.path.realpath(path)
    assert real.startswith(store.root + os.sep)
    segments = key.split("/")
    assert ".." not in segments and "." not in segments and "" not in segments
    assert not key.startswith(("/", "~"))


@settings(max_examples=100, deadline=None)
@given(key=keys)
def test_memory_and_local_agree_on_validity(tmp_path_factory, key):
    local = LocalStore(tmp_path_factory.getbasetemp() / "agree-ns", fsync=False)
    memory = MemoryStore("agree")
    outcomes = []
    for store in (local, memory):
        try:
            store.exists(key)
            outcomes.append(True)
        except InvalidKey:
            outcomes.append(False)
    assert outcomes[0] == outcomes[1]
