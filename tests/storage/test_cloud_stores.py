"""GCS and Azure Blob specifics: URLs, missing extras, missing containers, secrets, an emulator that fakes the precondition.

The full ObjectStore contract runs on both in test_contract.py.
"""

from __future__ import annotations

import subprocess
import sys
import traceback

import pytest

from torch_tgb.errors import ConditionalWriteUnsupported, MissingExtra, ObjectNotFound, TGBError
from torch_tgb.storage import AzureBlobStore, GCSStore, ensure_conditional_writes, open_store


def _block_imports(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``import module`` fail as if it were not installed (a None entry in sys.modules)."""
    monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize(
    "url,module,extra",
    [("gs://bucket/ns", "google.cloud.storage", "gcs"), ("az://container/ns", "azure.storage.blob", "azure"),
     ("abfs://container/ns", "azure.storage.blob", "azure")],
)
def test_a_missing_extra_is_one_line_naming_it(monkeypatch, url, module, extra):
    _block_imports(monkeypatch, module)
    with pytest.raises(MissingExtra) as info:
        open_store(url)
    message = str(info.value)
    assert f'pip install "torch-tgb[{extra}]"' in message and url in message and "\n" not in message
    assert isinstance(info.value, ImportError) and isinstance(info.value, TGBError)


def test_the_cli_names_the_missing_extra_in_one_line():
    code = (
        "import sys\n"
        "sys.modules['google.cloud.storage'] = None  # as if the gcs extra were not installed\n"
        "from torch_tgb.cli.main import main\n"
        "sys.exit(main(['inspect', 'gs://bucket/ns']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and 'pip install "torch-tgb[gcs]"' in proc.stderr


def test_urls_and_options_are_parsed_without_a_request():
    gcs = GCSStore("gcs://user:pw@bucket/a/b/", {"token": "anon"})
    assert (gcs.url, gcs.container, gcs.prefix) == ("gcs://bucket/a/b", "bucket", "a/b")
    az = AzureBlobStore("abfs://data@myaccount.dfs.core.windows.net/run1", {"anon": True})
    assert (az.container, az.prefix, az._options["account_name"]) == ("data", "run1", "myaccount")
    with pytest.raises(ValueError, match=r"\['endpoint'\] do not apply to GCS"):
        GCSStore("gs://bucket/ns", {"endpoint": "x"})
    with pytest.raises(ValueError, match=r"\['key'\] do not apply to Azure Blob"):
        AzureBlobStore("az://c/ns", {"key": "secret-value"})


@pytest.mark.gcs
def test_missing_gcs_bucket_fails_at_open_naming_it(gcs_server):
    store = open_store("gs://no-such-bucket-x/ns", gcs_server.storage_options)
    with pytest.raises(ObjectNotFound, match="bucket 'no-such-bucket-x' does not exist"):
        ensure_conditional_writes(store)


@pytest.mark.azure
def test_missing_azure_container_fails_at_open_naming_it(azure_server):
    store = open_store("az://no-such-container-x/ns", azure_server.storage_options)
    with pytest.raises(ObjectNotFound, match="container 'no-such-container-x' does not exist"):
        ensure_conditional_writes(store)


@pytest.mark.azure
def test_azure_account_key_never_in_errors(azure_server):
    """The connection string carries the account key: it is a secret option."""
    key = "c2VudGluZWwtYXp1cmUta2V5LXZhbHVl"  # a wrong key: every request fails authentication
    options = {"connection_string": azure_server.connection_string.replace(
        azure_server.connection_string.split("AccountKey=")[1].split(";")[0], key)}
    store = open_store(azure_server.url + "/ns", options)
    with pytest.raises(TGBError) as info:
        store.put("k", b"v")
    text = "\n".join([str(info.value), repr(info.value), *traceback.format_exception(info.value)])
    assert key not in text and "AccountKey" not in text
    assert "az://tgb-test/ns" in str(info.value) and "permission denied" in str(info.value)


@pytest.mark.gcs
def test_gcs_probe_passes_on_fake_gcs_server(gcs_namespace):
    store = open_store(*gcs_namespace)
    ensure_conditional_writes(store)
    assert store.exists("_tgb/capabilities.json")


@pytest.mark.gcs
def test_an_emulator_that_ignores_the_precondition_is_refused(tmp_path):
    """gcp-storage-emulator accepts ``ifGenerationMatch=0`` on an existing object and overwrites it.

    The capability probe must refuse it, as it refuses S3 clones that ignore ``If-None-Match``.
    """
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")
    from torch_tgb.testing._emulator import EmulatorProcess

    process = EmulatorProcess("gcp-storage-emulator")
    process.start(
        lambda port: [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                      "--port", str(port), "--in-memory", "--default-bucket", "tgb-test"],
        "/",
    )
    try:
        options = {"endpoint_url": f"http://127.0.0.1:{process.port}", "token": "anon", "project": "test"}
        store = open_store("gs://tgb-test/ns", options)
        with pytest.raises(ConditionalWriteUnsupported, match="second create ACCEPTED"):
            ensure_conditional_writes(store)
    finally:
        process.stop()


@pytest.mark.gcs
def test_fake_gcs_server_itself_enforces_generation_zero(gcs_server):
    from torch_tgb.testing.precondition_check import check_gcs

    assert check_gcs(gcs_server.endpoint_url, gcs_server.container)["holds"]


@pytest.mark.azure
def test_azurite_itself_enforces_if_none_match(azure_server):
    from torch_tgb.testing.precondition_check import check_azure

    assert check_azure(azure_server.connection_string, azure_server.container)["holds"]
