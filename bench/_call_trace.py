"""Run a module under a profile hook that records which product files each thread enters.

    python bench/_call_trace.py OUT.json -m landb_webhook serve

Records (thread, file relative to the package, function) for every call into ``landb_webhook``; at the
first metadata POST (``post`` in the OpenStack adapter) it writes them to OUT.json and stops recording.
Used by ``bench.footprint``; kept apart so the hook costs nothing anywhere else.
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

MARKER = ("adapters/nova.py", "post")


def install(out: Path) -> None:
    spec = importlib.util.find_spec("landb_webhook")
    assert spec is not None and spec.submodule_search_locations
    package = str(Path(next(iter(spec.submodule_search_locations))).resolve()) + "/"
    events: list[tuple[str, str, str]] = []
    done = threading.Event()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or done.is_set():
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(package):
            return
        where = (filename[len(package) :], frame.f_code.co_name)
        events.append((threading.current_thread().name, *where))
        if where == MARKER and not done.is_set():
            done.set()
            out.write_text(json.dumps({"events": events}))

    threading.setprofile(hook)
    sys.setprofile(hook)


def main() -> None:
    out, dash_m, module, *rest = sys.argv[1:]
    if dash_m != "-m":
        raise SystemExit("usage: _call_trace.py OUT.json -m MODULE [ARGS...]")
    install(Path(out))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
