"""Write docs/api.md: the public API of torch_tgb, from its docstrings.

    python docs/gen_api.py            # writes docs/api.md next to this script
    python docs/gen_api.py --check    # exit 1 if docs/api.md is out of date

For each public module (its ``__all__``, in the order below) every name gets
its signature and docstring; classes also list their public methods and
properties, and dataclasses their fields with defaults. The torch_tgb of
this checkout is documented (its root goes first on ``sys.path``), not an
installed copy. Nothing is imported that the package does not import
itself; a module that fails to import is listed with the error instead of
stopping the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

#: the checkout this script lives in: its torch_tgb is the one documented, never an installed copy
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (module, one-line role) in reading order
MODULES = [
    ("torch_tgb", "top level: the names most users need"),
    ("torch_tgb.layout", "how a global batch is cut, and where a rank sits"),
    ("torch_tgb.producer", "producers and commit policies"),
    ("torch_tgb.consumer", "TGBDataset, DataLoader, cursors"),
    ("torch_tgb.checkpoint", "DCP state, watermarks, reclamation"),
    ("torch_tgb.offline", "static corpora: packing, shuffling, write_dataset, LLMBATCH"),
    ("torch_tgb.sources", "data sources: token files, WebDataset (text or media), Lance, Parquet, Videos"),
    ("torch_tgb.transforms", "pure functions: shuffle orders, partitions, packing, masks, balancing, mixing, vision"),
    ("torch_tgb.transforms.media", "decoding images and video from bytes (extras: images, video)"),
    ("torch_tgb.datapipes", "pipeline stages as torchdata.nodes: read path, Mix, Pack, media stages, GlobalBatches"),
    ("torch_tgb.storage", "object stores"),
    ("torch_tgb.format", "the TGB object format"),
    ("torch_tgb.manifest", "the manifest log and commit protocol"),
    ("torch_tgb.lineage", "provenance: which steps hold a record, excision, the dataset card (docs/provenance.md)"),
    ("torch_tgb.distributed", "cross-rank helpers"),
    ("torch_tgb.integrations.ray", "producer fleets on Ray (extra: torch-tgb[ray])"),
    ("torch_tgb.integrations.lightning", "PyTorch Lightning: exact resume under read-ahead (extra: torch-tgb[lightning])"),
    ("torch_tgb.integrations.torchtitan", "torchtitan's data loader contract (docs/frameworks.md)"),
    ("torch_tgb.observability", "stats logging and Prometheus export"),
    ("torch_tgb.errors", "the error hierarchy"),
]


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


def _signature(name: str, obj: Any) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return name
    return f"{name}{sig}"


def _is_own(member: Any, cls: type) -> bool:
    qual = getattr(member, "__qualname__", "")
    return qual.startswith(cls.__name__ + ".")


def _private_bases(cls: type) -> list[type]:
    """Unexported bases in private torch_tgb modules (``_name.py``): their members document ``cls``."""
    hidden = []
    for base in cls.__mro__[1:]:
        package, _, module = base.__module__.rpartition(".")
        exported = getattr(sys.modules.get(package), "__all__", ())
        if package.startswith("torch_tgb") and module.startswith("_") and base.__name__ not in exported:
            hidden.append(base)
    return hidden


def _class_section(name: str, cls: type, out: list[str]) -> None:
    hidden = _private_bases(cls)
    bases = [b.__name__ for b in cls.__bases__ if b is not object and b not in hidden]
    header = f"class {_signature(name, cls)}" + (f"  — bases: {', '.join(bases)}" if bases else "")
    out.append(f"### `{name}`\n\n```python\n{header}\n```\n")
    doc = _doc(cls)
    if doc:
        out.append(doc + "\n")
    if dataclasses.is_dataclass(cls):
        rows = []
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = "(factory)"
            else:
                default = "required"
            rows.append(f"| `{f.name}` | `{f.type}` | `{default}` |")
        if rows:
            out.append("| field | type | default |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    members = []
    own = [cls, *hidden]
    merged = {attr: (klass, member) for klass in reversed(own) for attr, member in vars(klass).items()}
    for attr, (klass, member) in sorted(merged.items()):
        if attr.startswith("_") or not (callable(member) or isinstance(member, (property, classmethod, staticmethod))):
            continue
        if isinstance(member, property):
            members.append((attr, f"property `{attr}`", _doc(member)))
            continue
        func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if not callable(func) or not _is_own(func, klass):
            continue
        kind = "classmethod " if isinstance(member, classmethod) else "staticmethod " if isinstance(member, staticmethod) else ""
        members.append((attr, f"{kind}`{_signature(attr, func)}`", _doc(func)))
    for _attr, title, doc in members:
        out.append(f"- {title}" + (f"\n\n  " + doc.replace("\n", "\n  ") + "\n" if doc else "\n"))
    out.append("")


def _section(module_name: str, role: str, out: list[str]) -> None:
    out.append(f"## `{module_name}`\n\n*{role}*\n")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - document the failure, keep going
        out.append(f"(not importable in this build: `{type(e).__name__}: {e}`)\n")
        return
    doc = _doc(module)
    if doc:
        out.append(doc + "\n")
    names = list(getattr(module, "__all__", []))
    for name in names:
        try:
            obj = getattr(module, name)
        except Exception as e:  # noqa: BLE001
            out.append(f"### `{name}`\n\n(unavailable: `{type(e).__name__}: {e}`)\n")
            continue
        if module_name != "torch_tgb" and getattr(obj, "__module__", "").startswith("torch_tgb") is False:
            continue  # re-exported third-party names
        if inspect.isclass(obj):
            _class_section(name, obj, out)
        elif inspect.ismodule(obj):
            out.append(f"### `{name}`\n\nsubmodule `{obj.__name__}` (see its section)\n")
        elif callable(obj):
            out.append(f"### `{name}`\n\n```python\n{_signature(name, obj)}\n```\n")
            doc = _doc(obj)
            if doc:
                out.append(doc + "\n")
        else:
            out.append(f"### `{name}`\n\n```python\n{name} = {obj!r}\n```\n")


def render() -> str:
    out = [
        "# API reference",
        "",
        "Generated by `python docs/gen_api.py` from the docstrings; do not edit by hand.",
        "Concepts: [concepts.md](concepts.md). Format and protocol specifications:",
        "[format.md](format.md), [protocol.md](protocol.md).",
        "",
        "Modules: " + ", ".join(f"[`{m}`](#{m.replace('.', '')})" for m, _ in MODULES),
        "",
    ]
    for module_name, role in MODULES:
        _section(module_name, role, out)
    text = "\n".join(out)
    # the same text wherever it is generated: no memory addresses
    import re

    return re.sub(r" at 0x[0-9a-f]+", "", text).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/api.md from the docstrings of torch_tgb.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md differs from what would be written")
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "api.md"))
    args = parser.parse_args(argv)
    text = render()
    target = Path(args.output)
    if args.check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            import difflib

            diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), "api.md", "generated", n=0, lineterm=""))
            print(f"{target} is out of date: run python docs/gen_api.py ({len(diff)} diff lines; first:)", file=sys.stderr)
            print("\n".join(diff[:20]), file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
