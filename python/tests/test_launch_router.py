"""The wheel's launcher as miles and slime use it, run by ``scripts/test`` against the
installed wheel (not the source tree): ``RouterArgs`` keeps sgl-router 0.3.2's fields and flags,
``launch_router(RouterArgs(...))`` in a ``multiprocessing`` spawn process serves a real
``sglang-mock`` (``KVROUTER_MOCK_BIN``) and exits 0 on ``terminate()``, the router's exit status
reaches ``Process.exitcode``, and the bundled binary is stripped.

Run: ``KVROUTER_MOCK_BIN=target/debug/sglang-mock VENV/bin/python -m unittest discover -s python/tests``
"""

import argparse
import json
import multiprocessing
import os
import socket
import struct
import subprocess
import threading
import time
import unittest
import urllib.request

import kvrouter
from kvrouter.command_line import to_argv
from kvrouter.launch_router import RouterArgs, launch_router

DEADLINE_SECS = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: object = None) -> "tuple[int, bytes]":
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_healthy(url: str, proc: multiprocessing.Process) -> None:
    deadline = time.monotonic() + DEADLINE_SECS
    while True:
        try:
            if http(f"{url}/health")[0] == 200:
                return
        except OSError:
            pass
        if not proc.is_alive():
            raise AssertionError(f"the router exited with {proc.exitcode} before /health")
        if time.monotonic() > deadline:
            raise AssertionError(f"{url}/health not 200 within {DEADLINE_SECS} s")
        time.sleep(0.05)


def elf_section_names(path: str) -> "list[str]":
    """Section names of a 64-bit little-endian ELF file."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "64-bit LE ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i: int) -> "tuple[int, int]":
        base = shoff + i * shentsize
        name, = struct.unpack_from("<I", data, base)
        offset, = struct.unpack_from("<Q", data, base + 0x18)
        return name, offset
    strtab = header(shstrndx)[1]
    names = []
    for i in range(shnum):
        name = header(i)[0]
        end = data.index(b"\0", strtab + name)
        names.append(data[strtab + name:end].decode())
    return names


class RouterArgsShape(unittest.TestCase):
    def test_fields_and_defaults_are_sgl_routers(self):
        a = RouterArgs()
        self.assertEqual(a.policy, "cache_aware")
        self.assertEqual((a.host, a.port), ("0.0.0.0", 30000))
        self.assertEqual(a.max_tree_size, 2**26)
        self.assertEqual(a.worker_startup_timeout_secs, 1800)
        self.assertIsNone(a.prometheus_port)
        a.worker_urls.append("http://x")
        self.assertEqual(RouterArgs().worker_urls, [], "mutable defaults are per instance")

    def test_unknown_fields_warn_and_do_not_fail(self):
        with self.assertLogs("kvrouter", "WARNING") as logs:
            a = RouterArgs(port=1, eviction_interval=5)
        self.assertEqual(a.eviction_interval, 5)
        self.assertIn("eviction_interval", "".join(logs.output))
        a.not_a_field = 1
        _, warnings = to_argv(a)
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("not_a_field", warnings[0])

    def test_miles_prefixed_flags_round_trip(self):
        parser = argparse.ArgumentParser()
        RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
        ns = parser.parse_args(
            ["--router-health-check-interval-secs", "15", "--router-balance-abs-threshold", "0",
             "--router-dp-aware", "--router-policy", "round_robin"]
        )
        a = RouterArgs.from_cli_args(ns, use_router_prefix=True)
        self.assertEqual((a.health_check_interval_secs, a.balance_abs_threshold), (15, 0))
        self.assertTrue(a.dp_aware)
        self.assertEqual((a.prometheus_port, a.log_level), (29000, "info"), "CLI defaults")
        a.host, a.port = "10.0.0.1", 3000
        cmd, _ = to_argv(a)
        for flag in ["--host=10.0.0.1", "--port=3000", "--policy=round_robin", "--dp-aware",
                     "--health-check-interval-secs=15", "--balance-abs-threshold=0",
                     "--prometheus-port=29000"]:
            self.assertIn(flag, cmd)
        self.assertNotIn("--retry-max-retries=5", cmd, "defaults are the router's")

    def test_fields_without_an_equivalent_are_dropped_with_a_warning(self):
        a = RouterArgs(tokenizer_cache_enable_l0=True, selector={"app": "sglang"})
        cmd, warnings = to_argv(a)
        self.assertFalse([c for c in cmd if "tokenizer-cache" in c or "selector" in c], cmd)
        text = "".join(warnings)
        self.assertIn("tokenizer_cache_enable_l0", text)
        self.assertIn("selector", text)


class SpawnedLauncher(unittest.TestCase):
    """miles' launch shape against a real mock worker."""

    @classmethod
    def setUpClass(cls):
        mock = os.environ.get("KVROUTER_MOCK_BIN")
        if not mock:
            raise unittest.SkipTest("KVROUTER_MOCK_BIN (the sglang-mock binary) is not set")
        cls.mock = subprocess.Popen(
            [mock, "--host", "127.0.0.1", "--port", "0", "--speedup", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for line in cls.mock.stdout:
            if line.startswith("listening on "):
                cls.mock_url = line.split()[-1]
                break
        else:
            raise AssertionError("sglang-mock did not print its address")
        # Keep reading its stdout so that it never blocks on a full pipe.
        threading.Thread(target=cls.mock.stdout.read, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.mock.terminate()
        cls.mock.wait(timeout=DEADLINE_SECS)

    def test_launch_router_in_a_spawn_process_serves_and_exits_0_on_terminate(self):
        port = free_port()
        args = RouterArgs(host="127.0.0.1", port=port, worker_urls=[self.mock_url])
        args.prometheus_port = free_port()
        args.log_level = "warn"
        args.request_timeout_secs = 14400
        args.policy = "round_robin"
        args.balance_abs_threshold = 0
        proc = multiprocessing.get_context("spawn").Process(target=launch_router, args=(args,))
        proc.start()
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc)
            deadline = time.monotonic() + DEADLINE_SECS
            while True:  # the worker registers in the background: 503 until it is healthy
                status, body = http(
                    f"{url}/generate",
                    {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 2}},
                )
                if status != 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 200, body)
            self.assertIn("meta_info", json.loads(body))
            status, _ = http(f"http://127.0.0.1:{args.prometheus_port}/metrics")
            self.assertEqual(status, 200)
        finally:
            proc.terminate()
            proc.join(DEADLINE_SECS)
        self.assertEqual(proc.exitcode, 0, "the router's own exit status after SIGTERM")

    def test_the_routers_exit_status_reaches_the_parent(self):
        # An option the router refuses: it exits 2 with its message, in the child's place.
        args = RouterArgs(host="127.0.0.1", port=free_port(), service_discovery=True)
        proc = multiprocessing.get_context("spawn").Process(target=launch_router, args=(args,))
        proc.start()
        proc.join(DEADLINE_SECS)
        self.assertEqual(proc.exitcode, 2)


class BundledBinary(unittest.TestCase):
    def test_is_stripped(self):
        names = elf_section_names(kvrouter.binary())
        # `.debug_gdb_scripts` is an allocated section that strip keeps; symbols and DWARF go.
        self.assertFalse([n for n in names if n in (".symtab", ".debug_info", ".debug_line")], names)


if __name__ == "__main__":
    unittest.main()
