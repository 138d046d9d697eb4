"""A namespace that cannot exist is one error with one name everywhere: ``NamespaceNotFound`` (issue 40).

The README promised ``NamespaceNotFound`` for a mistyped S3 bucket, but the
bucket check raised its parent ``ObjectNotFound`` (quickstart.md said that),
while a local path under a missing directory raised ``NamespaceNotFound``.
Now every store's root check raises ``NamespaceNotFound`` (still an
``ObjectNotFound``, so older ``except`` clauses keep working), for readers,
producers and the command line alike.
"""

from __future__ import annotations

import pytest

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb.errors import NamespaceNotFound, ObjectNotFound
from torch_tgb.storage import ensure_conditional_writes, open_store

LAYOUT = tgb.Layout(dp=1)
MISSING = "s3://no-such-bucket-40/ns"


def test_a_reader_of_a_mistyped_bucket_gets_namespace_not_found(s3_server):
    options = s3_server.namespace("unused")[1]
    loader = tgb.DataLoader(MISSING, mesh=tgb.Mesh(0, 1), storage_options=options, timeout=30)
    with pytest.raises(NamespaceNotFound, match="bucket 'no-such-bucket-40' does not exist") as raised:
        next(iter(loader))
    assert isinstance(raised.value, ObjectNotFound)


def test_a_producer_on_a_mistyped_bucket_gets_namespace_not_found(s3_server):
    options = s3_server.namespace("unused")[1]
    with pytest.raises(NamespaceNotFound, match="bucket 'no-such-bucket-40' does not exist"):
        tgb.Producer(MISSING, producer_id="p0", layout=LAYOUT, storage_options=options)


def test_the_command_line_names_the_error(s3_server, capsys):
    opts = s3_server.namespace("unused")[1]
    so = ["-o", f"endpoint_url={opts['endpoint_url']}", "-o", f"key={opts['key']}", "-o", f"secret={opts['secret']}",
          "-o", f"client_kwargs.region_name={opts['client_kwargs']['region_name']}"]
    code = cli_main.main(["--debug", "inspect", MISSING, *so])
    err = capsys.readouterr().err
    assert code == 1 and "NamespaceNotFound" in err and "no-such-bucket-40" in err


def test_a_local_path_under_a_missing_directory_is_the_same_error(tmp_path):
    with pytest.raises(NamespaceNotFound, match="does not exist"):
        next(iter(tgb.TGBDataset(str(tmp_path / "typo" / "ns"), mesh=tgb.Mesh(0, 1), timeout=30)))


@pytest.mark.gcs
def test_a_missing_gcs_bucket_is_namespace_not_found(gcs_server):
    with pytest.raises(NamespaceNotFound, match="bucket 'no-such-bucket-x' does not exist"):
        ensure_conditional_writes(open_store("gs://no-such-bucket-x/ns", gcs_server.storage_options))


@pytest.mark.azure
def test_a_missing_azure_container_is_namespace_not_found(azure_server):
    with pytest.raises(NamespaceNotFound, match="container 'no-such-container-x' does not exist"):
        ensure_conditional_writes(open_store("az://no-such-container-x/ns", azure_server.storage_options))
