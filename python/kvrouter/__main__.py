"""``kvrouter`` / ``python -m kvrouter``: run the bundled router with this process's arguments."""

import os
import subprocess
import sys

from kvrouter import binary


def main() -> None:
    exe = binary()
    args = [exe, *sys.argv[1:]]
    if os.name == "posix":
        os.execv(exe, args)  # the router takes over this process: same pid, signals, exit status
    sys.exit(subprocess.call(args))


if __name__ == "__main__":
    main()
