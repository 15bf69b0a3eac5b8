"""Child of ``runtime_rss import``: run ONE import statement in a fresh interpreter and report its cost.

Started by path with ``-I`` (``python -I bench/import_child.py STMT``), not with ``-m``: ``-m`` runs
through ``runpy``, which loads about 20 modules (``collections``, ``functools``, ``importlib.util``,
...) that would then be counted for every target, and the throwaway venvs of the comparison packages
could not import ``bench`` anyway. Besides the statement under test it imports only ``resource`` and
``time`` (tiny C modules, loaded for every target, the bare interpreter included) and ``os`` and
``sys`` (loaded by every interpreter at startup), and no ``from __future__`` import (that would load
``__future__``).

It prints ``RESULT <pid> <ru_maxrss KiB> <len(sys.modules)> <import seconds>`` with plain string
formatting (no ``json`` import), then waits until its stdin is closed: meanwhile the parent reads its
``VmRSS`` and ``VmHWM`` (``bench._common.read_proc``) while it still holds all it imported.
"""

import os
import resource
import sys
import time


def main() -> None:
    # exec() of the string, not of compile()'s code object: compile() creates all of the ``ast``
    # module's node types (some 200 KiB) first. Parsing one statement takes some 30 µs, timed here.
    stmt = sys.argv[1]
    t0 = time.perf_counter()
    exec(stmt, globals())
    seconds = time.perf_counter() - t0
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("RESULT", os.getpid(), maxrss, len(sys.modules), repr(seconds), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
