"""The router's view of a block set, computed on the harness side: the sequence hashes
kvrouter keys its index by, and the per-unit digest ``GET /debug/index`` reports.

Mirrors (read, not imported) ``crates/index/src/tokens/hash.rs`` (page hash xxh3-64 seed
1337 over little-endian u32 tokens; chain = xxh3-64 seed 1337 over le(parent) ++ le(local)),
``tokens/namespace.rs`` (the namespace key is the first page's virtual parent) and
``index/residency/names.rs`` ``digest`` (XOR of the resident sequence hashes). So "the router's
index equals the engine's tree by content" is: same block count and same digest per unit.
"""

from __future__ import annotations

import struct

import xxhash

SEED = 1337
NAMESPACE_TAG = b"kvrouter-kv-namespace-v1"
MASK = (1 << 64) - 1


def local_hash(page) -> int:
    return xxhash.xxh3_64_intdigest(struct.pack(f"<{len(page)}I", *page), seed=SEED)


def chain(parent: int, local: int) -> int:
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent & MASK, local & MASK), seed=SEED)


def namespace_key(cache_salt=None, lora=None, extra_key=None, lora_id=None):
    """``NamespaceParts::key``: None for the default namespace."""
    parts = [p if p else None for p in (cache_salt, lora, extra_key)]
    if all(p is None for p in parts) and lora_id is None:
        return None
    buf = bytearray(NAMESPACE_TAG)
    for p in parts:
        if p is None:
            buf += b"\x00"
        else:
            b = p.encode()
            buf += b"\x01" + struct.pack("<Q", len(b)) + b
    if lora_id is None:
        buf += b"\x00"
    else:
        buf += b"\x01" + struct.pack("<q", lora_id)
    return xxhash.xxh3_64_intdigest(bytes(buf), seed=SEED)


def seq_hashes(tokens, page_size, parent=None):
    out = []
    for i in range(0, len(tokens) - len(tokens) % page_size, page_size):
        local = local_hash(tokens[i:i + page_size])
        parent = local if parent is None else chain(parent, local)
        out.append(parent)
    return out


def digest(seqs) -> int:
    d = 0
    for s in seqs:
        d ^= s
    return d


class Unit:
    """One unit's expected content: a set of sequence hashes."""

    def __init__(self):
        self.seqs = set()

    def view(self):
        return {"blocks": len(self.seqs), "digest": f"{digest(self.seqs):016x}"}
