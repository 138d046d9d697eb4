"""The peers over the loopback S3 server: how each S3-capable loader is pointed at the endpoint.

``peers.py`` starts moto's ``ThreadedMotoServer`` on 127.0.0.1 in its own
process (``torch_tgb.testing.s3server``), uploads each peer's prepared format
(``_peers.py``) to ``s3://BUCKET/<directory>`` and runs a worker process per
pass that reads it back through the peer's own S3 support. An ``S3Peer`` is
``open(url, endpoint, cache, local) -> iterator`` of 32x512 int64 batches
(``local``: the prepared directory, for names only); ``how``
says what endpoint setting the peer takes. Peers that read a local file and
take no endpoint are in ``NO_ENDPOINT`` with the reason, never emulated.

The server counts the requests of each pass (werkzeug logs one line per
request: ``RequestCounter``). Run as ``python _peers_s3.py URL`` it writes
that S3 object to stdout: WebDataset's ``pipe:`` command for a shard.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:  # torch is imported in the openers: the ``pipe:`` cat process should start fast
    import torch

BUCKET = "tgb-peers"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@dataclass(frozen=True)
class S3Peer:
    directory: str  # what prepare() wrote under the work directory, uploaded as s3://BUCKET/<directory>
    open: Callable[[str, str, Path, Path], Iterator[torch.Tensor]]
    how: str


def _tgb_open(url: str, endpoint: str, cache: Path, local: Path) -> Iterator[torch.Tensor]:
    import torch

    import torch_tgb as tgb

    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
               "client_kwargs": {"region_name": "us-east-1"}}
    loader = tgb.DataLoader(url, mesh=tgb.Mesh(dp_rank=0, dp_size=1), num_workers=0, storage_options=options)
    return (b["input_ids"].to(torch.int64) for b in loader)


def _mds_open(url: str, endpoint: str, cache: Path, local: Path) -> Iterator[torch.Tensor]:
    import torch
    from _peers import ROWS, _import_streaming

    if os.environ.get("S3_ENDPOINT_URL") != endpoint:
        raise RuntimeError("MosaicML Streaming reads its endpoint from $S3_ENDPOINT_URL, which the driver sets")
    streaming = _import_streaming()
    ds = streaming.StreamingDataset(remote=url, local=str(cache / "mds"), batch_size=ROWS, shuffle=False,
                                    replication=None)
    loader = streaming.StreamingDataLoader(ds, batch_size=ROWS, num_workers=0)
    return (b["tokens"].to(torch.int64) for b in loader)


def _lit_open(url: str, endpoint: str, cache: Path, local: Path) -> Iterator[torch.Tensor]:
    import torch
    from _peers import ROWS, SEQ
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader
    from litdata.streaming import downloader

    # storage_options reach boto3 (index.json), but chunk GETs go through obstore, whose client refuses a
    # plain-http endpoint (reqwest BadScheme) and takes no option for it: the one setting patched here
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
    ds = StreamingDataset(url, cache_dir=str(cache / "litdata"), item_loader=TokensLoader(block_size=SEQ),
                          shuffle=False, drop_last=True, storage_options={"endpoint_url": endpoint, **CREDENTIALS})
    loader = StreamingDataLoader(ds, batch_size=ROWS, num_workers=0, drop_last=True)
    return (b.to(torch.int64) for b in loader)


def _wds_open(url: str, endpoint: str, cache: Path, local: Path) -> Iterator[torch.Tensor]:
    import numpy as np
    import torch
    import webdataset as wds
    from _peers import ROWS

    # the shard names a user would brace-expand: the same files as the local copy
    shards = [f"pipe:{sys.executable} {__file__} {url}/{p.name}" for p in sorted(local.glob("shard-*.tar"))]
    ds = wds.WebDataset(shards, shardshuffle=False, empty_check=False).decode().to_tuple("tokens.npy")
    return (torch.from_numpy(np.asarray(b[0])).to(torch.int64) for b in ds.batched(ROWS, partial=False))


S3_PEERS: dict[str, S3Peer] = {
    "torch_tgb": S3Peer("tgb_dp1", _tgb_open, "namespace URL s3://… with storage_options={endpoint_url, key, "
                        "secret} (s3fs); range reads of TGBs"),
    "mosaicml_streaming": S3Peer("mds", _mds_open, "StreamingDataset(remote='s3://…', local=cache) with "
                                 "$S3_ENDPOINT_URL (boto3); downloads whole shards into the cache"),
    "litdata": S3Peer("litdata", _lit_open, "StreamingDataset('s3://…', storage_options={endpoint_url, keys}) "
                      "(boto3 for the index, obstore for chunks; obstore needs allow_http=True for the http "
                      "loopback endpoint, which LitData does not expose: patched into its client options here, not "
                      "needed for https); downloads whole chunks into the cache"),
    "webdataset": S3Peer("wds", _wds_open, "shard URLs 'pipe:python _peers_s3.py s3://…' (boto3 with "
                         "$S3_ENDPOINT_URL, one process per shard: WebDataset has no s3 scheme of its own)"),
}
NO_ENDPOINT = {
    "floor": "slices a local np.memmap: there is no remote path to point at an endpoint",
    "dataloader_memmap": "its dataset is an np.memmap of a local file (Megatron style): no S3 path",
    "stateful_dataloader": "same np.memmap dataset as dataloader_memmap: no S3 path",
}


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)


def upload(endpoint: str, local: Path, prefix: str) -> tuple[int, int]:
    """Upload every file under ``local`` to ``s3://BUCKET/prefix/``; returns (files, bytes)."""
    client = s3_client(endpoint)
    files = nbytes = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local).as_posix()}")
        files += 1
        nbytes += path.stat().st_size
    return files, nbytes


_REQUEST_LINE = re.compile(r"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/")


class RequestCounter(logging.Handler):
    """Counts the requests moto's werkzeug server answers, by method (``GET ?list-type`` counted as LIST)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._lock_counts = threading.Lock()
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        # args[0] is the request line, wrapped in colour codes when werkzeug styles its log
        found = _REQUEST_LINE.search(str(record.args[0]) if isinstance(record.args, tuple) and record.args else "")
        if found is None:
            return
        method, path = found.groups()
        method = "LIST" if method == "GET" and "list-type" in path else method
        with self._lock_counts:
            self.counts[method] += 1

    def take(self) -> dict[str, int]:
        """The counts since the last call, then zero."""
        with self._lock_counts:
            out, self.counts = dict(self.counts), Counter()
        return out

    def install(self) -> RequestCounter:
        log = logging.getLogger("werkzeug")
        log.handlers = [self]  # werkzeug added a stderr handler on its first request
        log.setLevel(logging.INFO)
        log.propagate = False  # counted, not printed
        return self


def cat(url: str) -> None:
    parsed = urlparse(url)
    s3_client(os.environ["S3_ENDPOINT_URL"]).download_fileobj(parsed.netloc, parsed.path.lstrip("/"),
                                                              sys.stdout.buffer)


def probe_get_rate(endpoint: str, n: int = 100, size: int = 4096) -> float:
    """Sequential GETs per second of one small object: what this moto server answers one client."""
    client = s3_client(endpoint)
    client.put_object(Bucket=BUCKET, Key="probe/object", Body=b"x" * size)
    client.get_object(Bucket=BUCKET, Key="probe/object")["Body"].read()
    started = time.perf_counter()
    for _ in range(n):
        client.get_object(Bucket=BUCKET, Key="probe/object")["Body"].read()
    return n / (time.perf_counter() - started)


if __name__ == "__main__":
    cat(sys.argv[1])
