#!/usr/bin/env python3
"""Records the KV-event bytes Dynamo's own publisher puts on the wire.

Runs Dynamo's `KvEventPublisher` (package `ai-dynamo-runtime`, pinned in
requirements.txt) standalone with in-memory discovery, in a child process per
scenario, and records every message it emits into
crates/kvrouter/tests/data/dynamo-1.6.1/{nats,zmq,relay}.jsonl:

* nats:  `DistributedRuntime(loop, "mem", "tcp", event_plane="nats")` with
         `NATS_SERVER` pointing at a private nats-server; a raw NATS client
         subscribed to `>` records subject + payload of every message.
* zmq:   the default event plane (no `event_plane`, no `DYN_EVENT_PLANE`): the
         publisher binds `tcp://0.0.0.0:<ephemeral>` (port read from its log
         line "ZMQ PUB transport bound ... endpoint=..."); a SUB socket records
         every multipart message's frames.
* relay: `KvEventPublisher(zmq_endpoint=...)` subscribed to an SGLang stream
         produced by SGLang's own `ZmqEventPublisher` (SGLang's kv_events.py
         loaded from conformance/install.sh's venv, $SGLANG_DIR, without the rest), relayed
         on the ZMQ event plane (default) and recorded as for `zmq`.

Usage (see README.md beside this file):
    python conformance/dynamo/capture.py [--out DIR] [--only nats,zmq,relay]

Each output line is one message: {"plane", "subject" | "frames", "hex" (the
envelope bytes), "decoded" (for reading only: msgpack decode, bytes as hex),
"step" (what the scenario did)}.  Tests use "subject"/"frames"/"hex" only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "crates", "kvrouter", "tests", "data", "dynamo-1.6.1")
# SGLang's package dir: $SGLANG_DIR, else the one conformance/install.sh installs 0.5.23 into.
SGLANG_DIR = os.environ.get("SGLANG_DIR") or next(
    iter(__import__("glob").glob(os.path.join(REPO, "target", "conformance-venv-0.5.23", "lib", "python3*",
                                              "site-packages", "sglang"))),
    "sglang")

NAMESPACE, COMPONENT, ENDPOINT = "kvtest", "backend", "generate"
BLOCK = 16  # kv_block_size; the router's --page-size in the replay test


def tokens(start: int, blocks: int) -> list[int]:
    return list(range(start, start + blocks * BLOCK))


# ---------------------------------------------------------------- child side


def child_manual(plane: str) -> None:
    """Manual publisher: the steps of worker 1 then worker 2 (same process)."""
    from dynamo.llm import KvEventPublisher
    from dynamo.runtime import DistributedRuntime

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if plane == "nats":
            drt = DistributedRuntime(loop, "mem", "tcp", event_plane="nats")
        else:
            drt = DistributedRuntime(loop, "mem", "tcp")
        endpoint = drt.endpoint(f"{NAMESPACE}.{COMPONENT}.{ENDPOINT}")
        w1 = KvEventPublisher(endpoint, worker_id=1, kv_block_size=BLOCK)
        w2 = KvEventPublisher(endpoint, worker_id=2, kv_block_size=BLOCK)
        ready_and_wait()
        steps = [
            # worker 1: A = 2 blocks, B = 2 more blocks chained on A, C = lora
            ("w1 stored A (tokens 1000.., 2 blocks)", lambda: w1.publish_stored(
                tokens(1000, 2), [BLOCK, BLOCK], [0x1000, 0x1001], None)),
            ("w1 stored B (tokens 1032.., 2 blocks) child of A[1]", lambda: w1.publish_stored(
                tokens(1032, 2), [BLOCK, BLOCK], [0x2000, 0x2001], 0x1001)),
            ("w1 removed B[1]", lambda: w1.publish_removed([0x2001])),
            ("w1 stored D (tokens 1000.., 1 block) lora_name=adapterA", lambda: w1.publish_stored(
                tokens(1000, 1), [BLOCK], [0x3000], None, lora_name="adapterA")),
            # worker 2: E = 3 blocks, then a removal of all of them
            ("w2 stored E (tokens 5000.., 3 blocks)", lambda: w2.publish_stored(
                tokens(5000, 3), [BLOCK, BLOCK, BLOCK], [0x5000, 0x5001, 0x5002], None)),
            ("w2 removed E[2]", lambda: w2.publish_removed([0x5002])),
        ]
        for label, step in steps:
            step()
            print(f"step {label}", flush=True)
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.0)
        print("done", flush=True)
        sys.stdin.readline()

    asyncio.run(main())


def load_sglang_kv_events():
    """SGLang's own kv_events module, without importing the rest of SGLang
    (whose package __init__ pulls torch/numpy): bare package stubs whose
    __path__ is the real directory, and a runtime_context stub (only the
    scheduler-side rank selection uses it)."""
    for name, sub in [("sglang", ""), ("sglang.srt", "/srt"),
                      ("sglang.srt.utils", "/srt/utils"),
                      ("sglang.srt.disaggregation", "/srt/disaggregation")]:
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [SGLANG_DIR + sub]
            sys.modules[name] = module
    rc = types.ModuleType("sglang.srt.runtime_context")

    def get_parallel():  # pragma: no cover - never called by the publisher
        raise RuntimeError("no scheduler in the capture harness")

    rc.get_parallel = get_parallel
    sys.modules.setdefault("sglang.srt.runtime_context", rc)
    from sglang.srt.disaggregation import kv_events

    return kv_events


def child_relay(plane: str, sglang_endpoint: str) -> None:
    """Relay publisher: Dynamo subscribes to an SGLang ZMQ PUB and republishes."""
    from dynamo.llm import KvEventPublisher
    from dynamo.runtime import DistributedRuntime

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if plane == "nats":
            drt = DistributedRuntime(loop, "mem", "tcp", event_plane="nats")
        else:
            drt = DistributedRuntime(loop, "mem", "tcp")
        endpoint = drt.endpoint(f"{NAMESPACE}.{COMPONENT}.{ENDPOINT}")
        _pub = KvEventPublisher(
            endpoint, worker_id=3, kv_block_size=BLOCK, zmq_endpoint=sglang_endpoint
        )
        ready_and_wait()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    asyncio.run(main())


def ready_and_wait() -> None:
    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "go":
        sys.exit(0)


# --------------------------------------------------------------- parent side


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """A child process running one scenario; stdout lines are its protocol,
    stderr (Dynamo's log) is scanned for the ZMQ bind line."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "child", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        self.bound: list[str] = []
        self.log: list[str] = []
        self._bound_cv = threading.Condition()
        threading.Thread(target=self._scan_stderr, daemon=True).start()

    def _scan_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            clean = re.sub(r"\x1b\[[0-9;]*m", "", line)
            self.log.append(clean)
            m = re.search(r"ZMQ PUB transport bound.*endpoint=(tcp://\S+)", clean)
            if m:
                with self._bound_cv:
                    self.bound.append(m.group(1))
                    self._bound_cv.notify_all()

    def wait_bound(self, count: int, timeout: float = 30) -> list[str]:
        """The first `count` ZMQ endpoints the child's publishers bound."""
        with self._bound_cv:
            if not self._bound_cv.wait_for(lambda: len(self.bound) >= count, timeout):
                raise RuntimeError("publisher did not log its ZMQ bind:\n" + "".join(self.log[-30:]))
            return list(self.bound[:count])

    def expect(self, word: str, timeout: float = 60) -> list[str]:
        """Reads stdout lines until one equals `word`; returns the ones before it."""
        assert self.proc.stdout is not None
        seen = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("child exited:\n" + "".join(self.log[-30:]))
            line = line.strip()
            if line == word:
                return seen
            seen.append(line)
        raise RuntimeError(f"child did not say {word!r}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            self.send("exit")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class NatsRecorder:
    """Minimal core-NATS client subscribed to `>`: records (subject, headers, payload)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.messages: list[tuple[str, bytes | None, bytes]] = []
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
                          b"SUB > 1\r\nPING\r\n")
        while self._line() != b"PONG":
            pass
        self.lock = threading.Lock()
        self.sock.settimeout(None)
        threading.Thread(target=self._read, daemon=True).start()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read(self) -> None:
        try:
            while True:
                line = self._line()
                parts = line.split(b" ")
                if parts[0] == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                elif parts[0] == b"MSG":
                    data = self._take(int(parts[-1]))
                    with self.lock:
                        self.messages.append((parts[1].decode(), None, data))
                elif parts[0] == b"HMSG":
                    hlen, total = int(parts[-2]), int(parts[-1])
                    data = self._take(total)
                    with self.lock:
                        self.messages.append((parts[1].decode(), data[:hlen], data[hlen:]))
        except (EOFError, OSError):
            return


class ZmqRecorder:
    """SUB socket on every endpoint the publisher bound, subscribed to everything."""

    def __init__(self, endpoints: list[str]):
        import zmq
        import zmq.utils.monitor as monitor

        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        mon = self.sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        for endpoint in endpoints:
            self.sub.connect(endpoint.replace("0.0.0.0", "127.0.0.1"))
        for _ in endpoints:
            if not mon.poll(10_000):
                raise RuntimeError("ZMQ recorder: no handshake with the publisher")
            monitor.recv_monitor_message(mon)
        self.sub.disable_monitor()
        mon.close(linger=0)
        # PUB filters on the publisher side: give the SUBSCRIBE frame a moment
        # to arrive after the handshake (no readiness signal exists for it).
        time.sleep(0.5)
        self.messages: list[list[bytes]] = []
        self.lock = threading.Lock()
        self._run = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import zmq

        while self._run:
            if self.sub.poll(100):
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
                with self.lock:
                    self.messages.append(frames)

    def close(self) -> None:
        self._run = False
        time.sleep(0.2)
        self.sub.close(linger=0)
        self.ctx.term()


def readable(value):
    """msgpack value -> JSON-able (bytes become msgpack-decoded or hex)."""
    import msgpack

    if isinstance(value, bytes):
        try:
            return {"msgpack": readable(msgpack.unpackb(value, raw=False, strict_map_key=False))}
        except Exception:
            return {"hex": value.hex()}
    if isinstance(value, dict):
        return {str(k): readable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [readable(v) for v in value]
    return value


def decode_envelope(data: bytes):
    import msgpack

    try:
        return readable(msgpack.unpackb(data, raw=False, strict_map_key=False))
    except Exception as e:  # recorded, not fatal: the fixture keeps the bytes
        return {"error": str(e)}


def settle(get_count, quiet: float = 1.0, timeout: float = 15) -> None:
    """Waits until no new message arrived for `quiet` seconds."""
    deadline = time.time() + timeout
    last, since = get_count(), time.time()
    while time.time() < deadline:
        time.sleep(0.1)
        now = get_count()
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= quiet:
            return


def steps_of(lines: list[str]) -> list[str]:
    return [line[len("step "):] for line in lines if line.startswith("step ")]


def capture_nats(out: str) -> None:
    server = shutil.which("nats-server") or os.path.join(os.path.dirname(sys.executable), "nats-server")
    port = free_port()
    nats = subprocess.Popen([server, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while True:
            try:
                recorder = NatsRecorder(port)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        env = dict(os.environ, NATS_SERVER=f"nats://127.0.0.1:{port}")
        env.pop("DYN_EVENT_PLANE", None)
        child = Child(["manual", "nats"], env)
        child.expect("ready")
        child.send("go")
        steps = steps_of(child.expect("done"))
        settle(lambda: len(recorder.messages))
        child.stop()
        with recorder.lock:
            messages = list(recorder.messages)
        rows = []
        for subject, headers, payload in messages:
            row = {"plane": "nats", "subject": subject, "hex": payload.hex()}
            if headers is not None:
                row["headers"] = headers.decode(errors="replace")
            row["decoded"] = decode_envelope(payload)
            rows.append(row)
        write(out, "nats.jsonl", rows, steps)
    finally:
        nats.terminate()
        nats.wait()


def capture_zmq(out: str) -> None:
    env = dict(os.environ)
    env.pop("DYN_EVENT_PLANE", None)
    env.pop("NATS_SERVER", None)
    child = Child(["manual", "zmq"], env)
    child.expect("ready")
    recorder = ZmqRecorder(child.wait_bound(2))  # workers 1 and 2
    child.send("go")
    steps = steps_of(child.expect("done"))
    settle(lambda: len(recorder.messages))
    child.stop()
    recorder.close()
    rows = [zmq_row(frames) for frames in recorder.messages]
    write(out, "zmq.jsonl", rows, steps)


def zmq_row(frames: list[bytes]) -> dict:
    row = {"plane": "zmq", "frames": [f.hex() for f in frames]}
    last = frames[-1]
    # 0x01 + u32 BE length + envelope (Dynamo's zmq_transport frame 4)
    if len(last) >= 5 and last[0] == 1 and int.from_bytes(last[1:5], "big") == len(last) - 5:
        row["hex"] = last[5:].hex()
        row["decoded"] = decode_envelope(last[5:])
    return row


def capture_relay(out: str) -> None:
    kv_events = load_sglang_kv_events()
    sg_port = free_port()
    sg_endpoint = f"tcp://127.0.0.1:{sg_port}"
    sglang = kv_events.ZmqEventPublisher(attn_dp_rank=0, endpoint=sg_endpoint, bind=True)
    env = dict(os.environ)
    env.pop("DYN_EVENT_PLANE", None)
    env.pop("NATS_SERVER", None)
    child = Child(["relay", "zmq", sg_endpoint], env)
    try:
        child.expect("ready")
        recorder = ZmqRecorder(child.wait_bound(1))
        child.send("go")
        # The relay's SUB to SGLang's PUB has no readiness signal either; SGLang
        # numbers its batches, so a batch lost to a late subscription would show
        # as a missing event in the fixture (the README's counts catch that).
        time.sleep(1.5)
        B = kv_events
        batches = [
            ("sglang stored F (tokens 7000.., 2 pages, GPU)", [B.BlockStored(
                block_hashes=[0x7000, 0x7001], parent_block_hash=None,
                token_ids=tokens(7000, 2), block_size=BLOCK, lora_id=None)]),
            ("sglang stored G (tokens 7032.., 1 page) child of F[1], medium GPU", [B.BlockStored(
                block_hashes=[0x7002], parent_block_hash=0x7001,
                token_ids=tokens(7032, 1), block_size=BLOCK, lora_id=None, medium="GPU")]),
            ("sglang stored H (tokens 8000.., 1 page) medium CPU_PINNED", [B.BlockStored(
                block_hashes=[0x8000], parent_block_hash=None,
                token_ids=tokens(8000, 1), block_size=BLOCK, lora_id=None, medium="CPU_PINNED")]),
            ("sglang removed G", [B.BlockRemoved(block_hashes=[0x7002])]),
            ("sglang AllBlocksCleared", [B.AllBlocksCleared()]),
            ("sglang stored F again after the clear", [B.BlockStored(
                block_hashes=[0x7000, 0x7001], parent_block_hash=None,
                token_ids=tokens(7000, 2), block_size=BLOCK, lora_id=None)]),
        ]
        steps = []
        for label, events in batches:
            sglang.publish(B.KVEventBatch(ts=time.time(), events=events))
            steps.append(label)
            time.sleep(0.3)
        settle(lambda: len(recorder.messages), quiet=1.5)
    finally:
        child.stop()
        sglang.shutdown()
    recorder.close()
    rows = [zmq_row(frames) for frames in recorder.messages]
    write(out, "relay.jsonl", rows, steps)


def write(out: str, name: str, rows: list[dict], steps: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"{name}: {len(rows)} messages for {len(steps)} steps -> {path}")
    for step in steps:
        print(f"  step: {step}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        kind, plane = sys.argv[2], sys.argv[3]
        if kind == "manual":
            child_manual(plane)
        else:
            child_relay(plane, sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--only", default="nats,zmq,relay")
    args = parser.parse_args()
    for kind in args.only.split(","):
        {"nats": capture_nats, "zmq": capture_zmq, "relay": capture_relay}[kind](args.out)


if __name__ == "__main__":
    main()
