"""Weights are held once: a matrix the C backend stacks (q|k|v, gate|up) is a copy, and the mapped
pages it was copied from leave the process's memory."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import localinfer
from localinfer import kernels

pytestmark = [pytest.mark.skipif(not kernels.available(), reason="C kernels not built"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")]

STACKED = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "ffn_gate.weight", "ffn_up.weight")


def _mapped_rss(path: Path) -> int:
    """Bytes of `path`'s mappings resident in this process."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = line.endswith(str(path))
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_stacked_weights_are_not_held_twice(name, request):
    path = Path(request.getfixturevalue(f"{name}_path")).resolve()
    model = localinfer.load(str(path), backend="c")
    model.logits(model.tokenize("Hello"))
    stacked = sum(model.gguf.tensors[n].nbytes for n in model.gguf.released)
    assert model.gguf.released and all(n.endswith(STACKED) for n in model.gguf.released)
    assert stacked > path.stat().st_size // 8  # most of a layer's weights are stacked
    # what stays mapped is at most the file less the stacked tensors (a page each side at most)
    assert _mapped_rss(path) <= path.stat().st_size - stacked + 2 * 4096 * len(model.gguf.tensors)
