"""The operator's lint process (see linter.py): reads one JSON line of setup objects at a time from
standard input, answers one JSON line of LintResult on standard output; exits at end of input."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from .linter import LintResult, analyse_setup, result_to_wire

NICENESS = 10


def main() -> None:
    with contextlib.suppress(OSError):
        os.nice(NICENESS)  # the scheduler comes first on a shared core
    for line in sys.stdin:
        try:
            result = analyse_setup(json.loads(line))
        except Exception as exc:  # one bad setup must not end the process
            result = LintResult(error=f"the analysis failed: {exc!r}")
        sys.stdout.write(json.dumps(result_to_wire(result), separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
