"""A fork server for the chaos suite: import torch once, fork a child per role.

Importing torch costs 1-2 s per process; a chaos trial starts and kills about
ten processes, so each child is forked from this pre-imported process instead
(~10 ms). Protocol: one JSON object per line on stdin, one reply per line on
stdout. The server is single-threaded and reaps a child only when asked
(``poll``/``wait``), so a pid the driver holds can never be reused under it.

    {"op": "spawn", "role": "producer", "args": {...}, "log": "/path"}  -> {"pid": 123}
    {"op": "poll", "pid": 123}                                          -> {"code": null | int}
    {"op": "kill_all"}                                                  -> {"killed": n}
    {"op": "ping"}                                                      -> {"ok": true}

``code`` is the exit status (negative: killed by that signal). A child's
stdout and stderr go to its ``log`` file; the child never returns into the
server loop (``os._exit``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import traceback

import torch  # noqa: F401  - the point of this process: imported once, shared by every fork

import _roles  # noqa: E402  - sibling module (sys.path[0] is this directory)


def _child(role: str, args: dict, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    random.seed()
    code = 1
    try:
        code = int(_roles.ROLES[role](**args) or 0)
    except SystemExit as e:
        code = int(e.code or 0)
    except BaseException:  # noqa: BLE001 - the log is the report
        traceback.print_exc()
        code = 3
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    children: set[int] = set()
    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "spawn":
            out.flush()
            pid = os.fork()
            if pid == 0:
                _child(req["role"], req["args"], req["log"])
            children.add(pid)
            reply: dict = {"pid": pid}
        elif op == "poll":
            pid = req["pid"]
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                reply = {"code": None}
            else:
                children.discard(pid)
                reply = {"code": os.waitstatus_to_exitcode(status)}
        elif op == "ping":
            reply = {"ok": True}
        elif op == "kill_all":
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
            reply = {"killed": len(children)}
            children.clear()
        else:
            reply = {"error": f"unknown op {op!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    for pid in children:  # the driver went away: leave nothing behind
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


if __name__ == "__main__":
    main()
