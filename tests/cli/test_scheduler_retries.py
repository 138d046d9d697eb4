"""What mixing.md and cli.md tell retrying schedulers (issue 40, "Docs that did not hold").

A finished, sealed non-shard `tgb produce` rerun exits 1 (the namespace is
sealed), which a scheduler that retries takes for a failure; the same mixed
pipeline run as `--shard 0/1` exits 0 when rerun, writing nothing.
"""

from __future__ import annotations

import numpy as np

import torch_tgb.cli.main as cli_main


def test_a_retried_mixed_producer_exits_0_only_as_a_shard_job(tmp_path, capsys) -> None:
    corpus = tmp_path / "t.npy"
    np.save(corpus, np.arange(3000, dtype=np.uint16))
    mix = ["--source", f"a=token-file:{corpus}", "--source", f"b=token-file:{corpus}", "--mix", "a=0.5,b=0.5",
           "--global-batch", "4", "--seq-len", "16", "--seal"]
    plain, sharded = str(tmp_path / "plain"), str(tmp_path / "sharded")
    assert cli_main.main(["produce", plain, *mix]) == 0
    capsys.readouterr()
    assert cli_main.main(["produce", plain, *mix]) == 1
    assert "namespace is sealed" in capsys.readouterr().err
    assert cli_main.main(["produce", sharded, *mix, "--shard", "0/1"]) == 0
    capsys.readouterr()
    assert cli_main.main(["produce", sharded, *mix, "--shard", "0/1"]) == 0
    assert capsys.readouterr().out.startswith("shard 0/1 already complete (offsets 0..")
