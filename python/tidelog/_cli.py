"""The `tidelog` console script: the Rust command, run inside this interpreter.

The wheel has no benchmark: `tidelog bench` says in one line how to run it from a checkout.
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    # Behave like the native binary: Ctrl-C stops it, and a closed pipe (`| head`) ends it
    # quietly instead of raising in Python.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    from tidelog._native import cli

    sys.exit(cli(["tidelog", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
