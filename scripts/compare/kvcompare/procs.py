"""Child processes the harness starts: each in its own process group, logged to a file,
killed (group-wide, TERM then KILL) when stopped, when the harness exits, on Ctrl-C/SIGTERM,
and by the kernel if the harness itself dies (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import ctypes
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

_LIVE: list["Proc"] = []
_LOCK = threading.Lock()
_PR_SET_PDEATHSIG = 1
_READY_RE = re.compile(r"listening on (http://\S+)")


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux; else the IANA one)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 49152, 65535


def _bindable(port: int) -> bool:
    """Whether `port` can be bound on every address right now (the mock's ZMQ sockets bind `*`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port that was free a moment ago, chosen below the kernel's ephemeral range: a port
    from that range (what binding port 0 returns) can be taken, between this check and the
    child's bind, as the local port of any outgoing connection on the machine (a fault case lost
    a mock's ZMQ port that way for 30 s of retries). Falls back to the kernel's pick."""
    lo, _ = _ephemeral_range()
    if lo > 11_000:
        for _ in range(64):
            port = random.randrange(10_000, lo)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup() -> None:
    # New session = new process group, so one killpg reaches helpers the child spawns.
    os.setsid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


class ProcError(RuntimeError):
    pass


class Proc:
    """One started process. `ready_url` is set once its readiness line was seen."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None,
                 cwd: str | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.ready_url: str | None = None
        self._ready = threading.Event()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)
        self._log.write(("$ " + " ".join(argv) + "\n").encode())
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
                env=full_env, cwd=cwd, preexec_fn=_child_setup, close_fds=True)
        except OSError as e:
            self._log.close()
            raise ProcError(f"cannot start {name}: {argv[0]}: {e}") from e
        self.pid = self.popen.pid
        with _LOCK:
            _LIVE.append(self)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for raw in iter(self.popen.stdout.readline, b""):
            try:
                self._log.write(raw)
            except ValueError:  # log closed during shutdown
                break
            if not self._ready.is_set():
                m = _READY_RE.search(raw.decode("utf-8", "replace"))
                if m:
                    self.ready_url = m.group(1).rstrip("/")
                    self._ready.set()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_listening(self, timeout: float) -> str:
        """Waits for the `listening on URL` stdout line; raises if the process exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.05):
                return self.ready_url or ""
            if not self.alive():
                raise ProcError(f"{self.name} exited with {self.popen.returncode} before it was ready; "
                                f"log: {self.log_path}\n{self.tail()}")
        raise ProcError(f"{self.name} not ready after {timeout:.0f} s; log: {self.log_path}\n{self.tail()}")

    def wait_exit(self, timeout: float) -> int:
        """Waits for the process to exit and returns its exit code; stops it and raises on timeout."""
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired as e:
            self.stop(grace=1.0)
            raise ProcError(f"{self.name} timed out after {timeout:.0f} s; log: {self.log_path}\n{self.tail()}") from e
        self._reader.join(2)
        return rc

    def tail(self, n: int = 15) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + line for line in lines[-n:])

    def stop(self, grace: float = 3.0) -> None:
        """TERM the whole process group, KILL it after `grace` seconds, reap."""
        if self.alive():
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left in the group (the leader or helpers it spawned) goes now.
        _signal_group(self.pid, signal.SIGKILL)
        try:
            self.popen.wait(2)
        except subprocess.TimeoutExpired:
            pass
        with _LOCK:
            if self in _LIVE:
                _LIVE.remove(self)
        try:
            self._log.close()
        except OSError:
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(argv: list[str], log_path: Path, timeout: float, env: dict | None = None,
        cwd: str | None = None) -> int:
    """Runs a command to completion in its own group (stdout+stderr to the log); kills it on timeout."""
    p = Proc(argv[0].rsplit("/", 1)[-1], argv, log_path, env=env, cwd=cwd)
    try:
        return p.wait_exit(timeout)
    finally:
        p.stop(grace=1.0)


def stop_all() -> None:
    """Stops every process still running, newest first (routers before the fleet they use)."""
    with _LOCK:
        live = list(reversed(_LIVE))
    for p in live:
        p.stop()


def install_signal_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP unwind the harness (finally-blocks run, children are stopped)."""
    def handler(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
