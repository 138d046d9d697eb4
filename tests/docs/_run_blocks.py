"""Run one page's Python snippets in order in this process, as a reader pasting them into a session would.

``python _run_blocks.py BLOCKS.json``: ``{"prelude": code, "blocks": [{"where": "docs/x.md:12", "code": ...}]}``.
Each block is compiled under its doc location, so a traceback names the page and line.
"""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    exec(compile(spec["prelude"], "<prelude>", "exec"), globals())
    for block in spec["blocks"]:
        print(f"--- {block['where']}", flush=True)
        exec(compile(block["code"], block["where"], "exec"), globals())
    print("--- all snippets ran", flush=True)
