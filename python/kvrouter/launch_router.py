"""``launch_router(args)``: sgl-router's in-process launcher, for kvrouter.

miles and slime start their router with
``from sglang_router.launch_router import RouterArgs, launch_router`` and run
``launch_router(router_args)`` in a ``multiprocessing`` (spawn) process. With kvrouter that
import becomes ``from kvrouter.launch_router import RouterArgs, launch_router``; nothing else
changes. ``launch_router`` replaces the calling process with the bundled ``router`` binary
(``os.execv``: same pid, so the parent's ``Process.terminate()`` reaches the router, which drains
and exits, and ``Process.exitcode`` is the router's exit status) with the equivalent command line
(``command_line.py``). ``KVROUTER_*`` environment variables reach the router too (every router
option has one, e.g. ``KVROUTER_INSECURE_ADMIN``, ``KVROUTER_PAGE_SIZE``). Also runnable as
``python -m kvrouter.launch_router`` with sgl-router's flags.
"""

import argparse
import logging
import os
import subprocess
import sys
from typing import List

from kvrouter import binary
from kvrouter.command_line import to_argv
from kvrouter.router_args import RouterArgs

logger = logging.getLogger("kvrouter")

__all__ = ["RouterArgs", "launch_router", "parse_router_args", "router_command"]


def router_command(args: "RouterArgs | argparse.Namespace") -> List[str]:
    """The ``router`` argv (binary first) that ``launch_router(args)`` runs; logs a warning for
    every field it leaves out."""
    router_args = args if isinstance(args, RouterArgs) else RouterArgs.from_cli_args(args)
    argv, warnings = to_argv(router_args)
    for w in warnings:
        logger.warning("kvrouter: %s", w)
    return [binary(), *argv]


def launch_router(args: "RouterArgs | argparse.Namespace") -> None:
    """Runs the router in this process's place (see module docs); does not return on POSIX.
    ``args`` is a ``RouterArgs`` or a namespace parsed with ``RouterArgs.add_cli_args``."""
    cmd = router_command(args)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(cmd[0], cmd)
    sys.exit(subprocess.call(cmd))


def parse_router_args(argv: List[str]) -> "RouterArgs":
    """sgl-router's ``parse_router_args``: the unprefixed flags into a ``RouterArgs``."""
    parser = argparse.ArgumentParser(
        prog="python -m kvrouter.launch_router",
        description="Start kvrouter from sgl-router 0.3.2 launch flags (docs/migration.md).",
    )
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)


def main() -> None:
    launch_router(parse_router_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
