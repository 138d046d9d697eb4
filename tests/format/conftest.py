"""Fixtures for format tests: an in-memory store, and one whose objects are local files."""

from __future__ import annotations

import os
import uuid

from torch_tgb.storage import MemoryStore


class FileBackedStore(MemoryStore):
    """A MemoryStore that also mirrors every object to a file, so ``local_path`` can be mmapped."""

    def __init__(self, root: str) -> None:
        super().__init__(f"files-{uuid.uuid4().hex}")
        self.root = root

    def put(self, key: str, data: bytes | memoryview) -> None:
        super().put(key, data)
        path = os.path.join(self.root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def local_path(self, key: str) -> str | None:
        return os.path.join(self.root, key)


def memory_store() -> MemoryStore:
    return MemoryStore(f"fmt-{uuid.uuid4().hex}")


import pytest  # noqa: E402


@pytest.fixture
def mem_store() -> MemoryStore:
    return memory_store()


@pytest.fixture
def file_store(tmp_path) -> FileBackedStore:
    return FileBackedStore(str(tmp_path))


@pytest.fixture(params=["memory", "file"])
def any_store(request, tmp_path) -> MemoryStore:
    return memory_store() if request.param == "memory" else FileBackedStore(str(tmp_path))
