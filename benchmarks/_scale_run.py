"""Run one scale section in this (child) process: ``python _scale_run.py <section> '<json params>'``.

``scale.py`` starts one child per section so that each measures a fresh interpreter (RSS, caches).
The read-side sections live in ``_scale_sections.py``; ``_scale_write.py`` adds the write side.
"""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _scale_write  # every section, read side and write side

    name = sys.argv[1]
    params = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    out = _scale_write.SECTIONS[name](params)
    print("RESULT " + json.dumps(out, default=str), flush=True)
    os._exit(0)  # threads of readers left behind do not hold the child
