"""No code path of the package may deserialize executable formats (pickle, marshal, eval...).

A manifest, footer or watermark is read by every rank; if any of them could
run code, a writable namespace would be remote code execution on the whole
training job. The scan walks the package's AST, so a new use fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch_tgb

PACKAGE = Path(torch_tgb.__file__).parent

BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib", "jsonpickle"}
BANNED_CALLS = {"eval", "exec", "compile", "__import__"}
# attribute calls: (object name, attribute) -> why
BANNED_ATTRS = {
    ("torch", "load"): "torch.load unpickles",
    ("yaml", "load"): "yaml.load builds arbitrary objects (use safe_load)",
    ("yaml", "unsafe_load"): "yaml.unsafe_load",
    ("pickle", "loads"): "pickle",
}
# np.load unpickles only with allow_pickle=True (the default is False since numpy 1.16.3)
NUMPY_NAMES = {"np", "numpy"}


def _allows_pickle(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg == "allow_pickle":
            return not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
        if kw.arg is None:  # **kwargs could carry it
            return True
    return False


def _violations(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    rel = path.relative_to(root)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in BANNED_MODULES:
                    found.append(f"{rel}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in BANNED_MODULES:
                found.append(f"{rel}:{node.lineno}: from {node.module} import ...")
            if node.module in ("torch", "yaml", "numpy") and any(a.name in ("load", "unsafe_load") for a in node.names):
                found.append(f"{rel}:{node.lineno}: from {node.module} import load")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in BANNED_CALLS:
                found.append(f"{rel}:{node.lineno}: {func.id}(...)")
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                pair = (func.value.id, func.attr)
                if pair[0] in NUMPY_NAMES and pair[1] == "load" and _allows_pickle(node):
                    found.append(f"{rel}:{node.lineno}: {pair[0]}.load(..., allow_pickle=...)")
                if pair in BANNED_ATTRS:
                    found.append(f"{rel}:{node.lineno}: {pair[0]}.{pair[1]}(...): {BANNED_ATTRS[pair]}")
                if func.attr in ("loads", "load") and func.value.id in BANNED_MODULES:
                    found.append(f"{rel}:{node.lineno}: {func.value.id}.{func.attr}(...)")
    return found


def test_package_has_no_unsafe_deserialization() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20  # the scan really sees the package
    violations = [v for f in files for v in _violations(f)]
    assert not violations, "unsafe deserialization in the package:\n" + "\n".join(violations)


def test_scanner_catches_each_banned_form(tmp_path) -> None:
    """The scanner itself must not be blind (a test that cannot fail proves nothing)."""
    samples = {
        "import pickle": 1,
        "import marshal as m": 1,
        "from pickle import loads": 1,
        "import torch\ntorch.load(f)": 1,
        "import yaml\nyaml.load(s)": 1,
        "eval('1')": 1,
        "exec('x=1')": 1,
        "import numpy as np\nnp.load(f, allow_pickle=True)": 1,
        "import numpy as np\nnp.load(f, mmap_mode='r')": 0,
        "from torch import load": 1,
        "import json\njson.loads(s)": 0,
    }
    for i, (source, expected) in enumerate(samples.items()):
        path = tmp_path / f"probe_{i}.py"
        path.write_text(source)
        assert len(_violations(path, tmp_path)) == expected, source
