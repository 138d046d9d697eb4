"""Install ``tests/_plugin_pkg`` into a directory as pip would lay it out, without pip and without a download.

:func:`install` copies the package and writes its ``.dist-info`` (``METADATA``
and ``entry_points.txt``) from the package's own ``pyproject.toml``; a test
puts the directory on ``sys.path`` (``monkeypatch.syspath_prepend``), and
``importlib.metadata`` then finds the entry points like those of any
installed distribution. :func:`write_dist` writes a distribution's metadata
alone (entry points given), for the registry's own tests.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_dist(target: Path, name: str, version: str, entry_points: Mapping[str, Mapping[str, str]]) -> Path:
    """``target/<name>-<version>.dist-info`` declaring ``entry_points`` (group -> {name: "module:attr"})."""
    dist = target / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines: list[str] = []
    for group, points in entry_points.items():
        lines += [f"[{group}]", *(f"{key} = {value}" for key, value in points.items()), ""]
    (dist / "entry_points.txt").write_text("\n".join(lines))
    return dist


def install(target: Path) -> Path:
    """The plugin package and its dist-info in ``target`` (created); returns ``target``."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(HERE / "tgb_plugin_demo", target / "tgb_plugin_demo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    write_dist(target, project["name"], project["version"], project["entry-points"])
    return target
