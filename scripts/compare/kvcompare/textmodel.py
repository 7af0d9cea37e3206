"""The model directory the side-by-side run hands to the mocks and the peers: the stand-in in
scripts/compare/model with its WordLevel vocabulary widened to every word loadgen's text mode
writes (`t<N>` for token id N, ids below 32768), so that text chat requests tokenize to the same
ids in kvrouter, sgl-router, SMG and the mocks' real-tokenizer mode (`--tokenizer-path`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# loadgen's synthetic ids are 1000..31000 (crates/sim/src/loadgen/synth.rs).
WORDS = 32768
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def ensure(stand_in: Path, dst: Path) -> Path:
    """Writes (once) `dst` = `stand_in` with a tokenizer.json whose word `t<N>` is id N."""
    tok = dst / "tokenizer.json"
    if tok.exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(stand_in / name, dst / name)
    base = json.loads((stand_in / "tokenizer.json").read_text())
    vocab = {f"t{n}": n for n in range(WORDS)}
    for i, s in enumerate(SPECIALS):
        vocab[s] = WORDS + i
    base["model"]["vocab"] = vocab
    base["added_tokens"] = [dict(a, id=vocab[a["content"]]) for a in base.get("added_tokens") or []
                            if a.get("content") in vocab]
    tmp = dst / "tokenizer.json.tmp"
    tmp.write_text(json.dumps(base))
    tmp.replace(tok)
    return dst
