"""Weights are held once: a matrix copied out of the mapping (repacked, or stacked q|k|v and gate|up
where those are concatenated) releases the mapped pages it was copied from; stacked matrices that are
not repacked are read where they are mapped."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import localinfer
from localinfer.backend import kernels

pytestmark = [pytest.mark.skipif(not kernels.available(), reason="C kernels not built"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")]

STACKED = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "ffn_gate.weight", "ffn_up.weight")


def _mapped_rss(mapping) -> int:
    """Bytes of this mmap resident in the process (other models of the same file aside)."""
    start = np.frombuffer(mapping, np.uint8).ctypes.data
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            inside = lo <= start < hi
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_copied_weights_are_not_held_twice(name, request):
    path = Path(request.getfixturevalue(f"{name}_path")).resolve()
    model = localinfer.load(str(path), backend="c")
    model.logits(model.tokenize("Hello"))
    assert model.wait_repacked(timeout=600)   # those repacked after load too
    stacked = sum(model.gguf.tensors[n].nbytes for n in model.gguf.released)
    # released: the matrices copied into a repacked layout (any name: SmolLM2's embedding is its output
    # matrix too, whose looked-up rows fault back in); stacked ones only where they were repacked
    assert model.gguf.released == set(model.runtime.repacked_tensors)
    assert stacked > path.stat().st_size // 8  # a good part of the weights
    # what stays mapped is at most the file less the stacked tensors: a page each side of every tensor,
    # and Linux's fault-around (a read fault also maps the cached pages of its 64 KiB window, so a
    # released range next to a tensor still read may come back as far as that window reaches) -- or of
    # the large folio the page is in, where the page cache holds the file in larger pieces: counted at
    # 1 MiB, it still stays far short of the copied bytes (asserted below). Measured on gemma3 (Linux,
    # a virtio disk with 8 MiB readahead): each Q4_K ffn_down (720 KiB, repacked, released) came back
    # whole once its neighbours, q|k|v and gate|up read in place, were read; a PROT_NONE on its range
    # showed no reader: only the folios around its edges, mapped by the faults next to them
    fault_around = 1 << 20
    slack = 2 * 4096 * len(model.gguf.tensors) + 2 * fault_around * len(model.gguf.released)
    assert slack < stacked  # still short of holding the stacked weights twice
    assert _mapped_rss(model.gguf._mmap) <= path.stat().st_size - stacked + slack


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_looking_up_tokens_does_not_bring_the_embedding_table_in(name, request):
    """The table's rows are read from the file (gguf_file.RowReader): through the mapping, each row
    brought the pages around it too, most of a 205 MiB table after one 512-token prompt at 1B."""
    path = Path(request.getfixturevalue(f"{name}_path")).resolve()
    model = localinfer.load(str(path), backend="c")
    model.logits(model.tokenize("Hello"))
    before = _mapped_rss(model.gguf._mmap)
    ids = np.random.default_rng(0).choice(model.n_vocab, 200, replace=False).tolist()
    ctx = model.new_context(256)
    ctx.evaluate(ids)
    table = model.gguf.tensors["token_embd.weight"]
    assert table.nbytes > 20 << 20
    # a row and a page each side at most, where 200 rows with 64 KiB each around them were 12+ MiB
    assert _mapped_rss(model.gguf._mmap) - before <= 200 * 3 * 4096
    model.close()


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def test_close_gives_the_memory_back(smollm2_path):
    import gc
    # a first load and close pays the one-time costs (imports, the kernels' pool threads and scratch)
    with localinfer.load(str(smollm2_path)) as warm:
        warm.generate("hi", max_tokens=4, temperature=0)
    gc.collect()
    before = _rss()
    model = localinfer.load(str(smollm2_path))
    model.generate("hi", max_tokens=16, temperature=0)
    mem = model.memory()
    assert mem["weights_mapped"] + mem["weight_copies"] >= path_size(smollm2_path) * 0.9
    assert mem["kv_cache"] >= model.runtime.new_cache(model.n_ctx).nbytes  # the engine slot's cache
    assert _rss() > before + mem["weight_copies"] // 2  # there was something to give back
    engine_thread = model.engine._thread
    model.close()
    gc.collect()
    assert not engine_thread.is_alive()
    # closed but still referenced, the model keeps its tokenizer and metadata (tokenize still works);
    # the weights, their copies and the caches are gone
    assert _rss() < before + (mem["weight_copies"] + mem["kv_cache"]) / 4
    assert model.tokenize("hi")
    del model
    gc.collect()
    assert _rss() <= before * 1.1 + (8 << 20)


_LIFECYCLE = r"""
import asyncio, gc, json, sys, time
from pathlib import Path
import localinfer

def rss():
    return next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines()
                if l.startswith("VmRSS:"))

def threads():
    return len(list(Path("/proc/self/task").iterdir()))

def idle_cpu():  # share of a CPU the whole process uses while nobody asks for anything
    time.sleep(0.1)  # past the kernels' pool spin window (0.2 ms)
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(0.5)
    return (time.process_time() - c0) / (time.perf_counter() - t0)

def use(model):
    asyncio.run(model.agenerate("hi", max_tokens=16, temperature=0))
    model.generate("Hello there", max_tokens=16)

path = sys.argv[1]
with localinfer.load(path) as warm:  # one-time costs: imported code, the kernels' pool threads
    use(warm)
del warm
gc.collect()
out = {"before": rss(), "threads_before": threads()}
model = localinfer.load(path)
use(model)
out.update(loaded=rss(), idle_open=idle_cpu(), threads_open=threads())
model.close()
del model
gc.collect()
out.update(after=rss(), idle_closed=idle_cpu(), threads_closed=threads())
print(json.dumps(out))
"""


def test_a_closed_model_gives_back_memory_threads_and_cpu(smollm2_path):
    """In a fresh process (no other test's heap): load, generate (async and sync), close. VmRSS
    gives back all but a tenth of what the model took (what stays is the allocators' retention:
    tracemalloc sees no Python object left); the engine thread is gone and the kernels' pool threads
    stay, parked (they serve every model of the process; a next load reuses them), using no CPU --
    nor does an open model between requests."""
    import json
    import subprocess
    run = subprocess.run([sys.executable, "-c", _LIFECYCLE, str(smollm2_path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    m = json.loads(run.stdout.splitlines()[-1])
    print(m, file=sys.stderr)
    assert m["loaded"] > m["before"] + (32 << 20)  # the weights and caches were resident
    # in the model's own terms, not the process's: a bound of 10% of the RSS before the load shrank
    # with what the process imports (5.6 MiB less once loading stopped importing gguf-py), while the
    # allocators keep 3-6 MiB of a 120 MiB model either way
    assert m["after"] - m["before"] <= (m["loaded"] - m["before"]) / 10
    assert m["threads_open"] > m["threads_before"] == m["threads_closed"]  # the engine's thread came and went
    assert m["idle_open"] < 0.05 and m["idle_closed"] < 0.05


def test_load_progress_rises_to_ready(smollm2_path):
    seen = []
    localinfer.load(str(smollm2_path), progress=lambda fraction, stage: seen.append((fraction, stage))).close()
    fractions, stages = [f for f, _ in seen], [s for _, s in seen]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and seen[-1] == (1.0, "ready")
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == ["mapping", "tokenizer", "weights",
                                                                                  "ready"]
    assert len({f for f, s in seen if s == "weights"}) > 10  # the bar moves while the weights load


def test_load_progress_errors(smollm2_path):
    with pytest.raises(TypeError, match="progress must be a callable"):
        localinfer.load(str(smollm2_path), progress=0.5)

    class Abort(Exception):
        pass

    def abort(fraction, stage):  # a splash screen's cancel button
        if stage == "weights":
            raise Abort
    with pytest.raises(Abort):
        localinfer.load(str(smollm2_path), progress=abort)


def path_size(path) -> int:
    return Path(path).stat().st_size


def test_a_closed_model_says_so(smollm2_path):
    from localinfer.model import ModelClosedError
    with localinfer.load(str(smollm2_path)) as model:
        chat = model.chat_session()
        ctx = model.new_context(64)
    assert model.closed
    for call in (lambda: model.generate("hi", max_tokens=1), lambda: model.logits([1]),
                 lambda: model.new_context(), lambda: model.memory(), lambda: chat.send("hi"),
                 lambda: ctx.append([1])):
        with pytest.raises(ModelClosedError, match="closed"):
            call()
    model.close()  # twice is fine


def test_import_is_lazy():
    """`import localinfer` alone imports none of numba, jinja2, gguf, the kernels or the server."""
    import subprocess
    code = ("import sys, localinfer; heavy = [m for m in ('numba', 'jinja2', 'localinfer.serve', "
            "'localinfer.model', 'localinfer.quant', 'localinfer._kernels', 'gguf') if m in sys.modules]; "
            "print(heavy); localinfer.Model; print('numba' in sys.modules, 'localinfer.serve' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "False False"  # loading the Model class does not import numba or the server either


def test_load_progress_calls_back_once_per_percent(smollm2_path):
    seen = []
    localinfer.load(str(smollm2_path), progress=lambda fraction, stage: seen.append((fraction, stage))).close()
    assert len(seen) <= 100 + 4  # a call per percent at most, and one per stage
    rises = [b - a for (a, s), (b, t) in zip(seen, seen[1:]) if s == t]
    assert all(step >= 0.01 for step in rises), rises
