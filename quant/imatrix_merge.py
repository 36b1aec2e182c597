"""Combine importance matrices: ``localinfer imatrix --in-file A.gguf --in-file B.gguf -o AB.gguf``.

What llama-imatrix does with several ``--in-file`` and no text (tools/imatrix/imatrix.cpp,
``load_imatrix`` then ``save_imatrix``), so that the result is the matrix of the texts together:

* per entry, the sums and the token counts are added, file by file in the order given, the sums
  in float32 (as llama.cpp's ``std::vector<float>`` accumulates them);
* an entry that only some files have is kept with what those files hold;
* a legacy ``.dat`` file stores ``sums / count * ncall`` and ``ncall``: it counts as sums
  ``value * chunk_size`` over ``ncall * chunk_size`` tokens (its chunks assumed full);
* an entry with one count (a legacy one) meeting a per-expert one takes that count for every
  expert; other differences in shape are an error (the files are for different models);
* ``imatrix.datasets`` is every file's list, one after the other; ``imatrix.chunk_count`` is
  the largest token count of any entry divided by the chunk size (not the sum of the files'
  chunk counts: llama.cpp recomputes it so), and ``imatrix.chunk_size`` is the chunk size.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .imatrix_file import Imatrix, ImatrixEntry, ImatrixError, check_imatrix_path


def merge_imatrices(parts: Sequence[tuple[str, Imatrix]], chunk_size: int = 512) -> Imatrix:
    """(name for errors, Imatrix) pairs -> their sum. `chunk_size`: llama-imatrix's -c (tokens per
    chunk), which scales legacy files and divides the largest count into the chunk count."""
    if chunk_size <= 0:
        raise ImatrixError(f"chunk size must be positive, got {chunk_size}")
    if not parts:
        raise ImatrixError("no imatrix files to combine")
    sums: dict[str, np.ndarray] = {}  # name -> (n_values,) float32
    counts: dict[str, np.ndarray] = {}  # name -> (n_mat,) int64
    datasets: list[str] = []
    cs = np.float32(chunk_size)
    for label, im in parts:
        for name, e in im.entries.items():
            if im.is_legacy:
                add_sums, add_counts = e.sums.reshape(-1) * cs, e.counts[:1] * chunk_size
            else:
                add_sums, add_counts = e.sums.reshape(-1), e.counts
            add_sums = add_sums.astype(np.float32)
            if name not in sums:
                sums[name] = np.zeros(add_sums.size, np.float32)
                counts[name] = np.zeros(len(add_counts), np.int64)
            if sums[name].size != add_sums.size:
                raise ImatrixError(f"{label}: entry {name!r} has {add_sums.size} values, the files before it "
                                   f"{sums[name].size}: are they for the same model?")
            c = counts[name]
            if im.is_legacy:  # one count, added to every expert's
                c += add_counts[0]
            else:
                if len(c) == 1 and len(add_counts) > 1:
                    c = counts[name] = np.full(len(add_counts), c[0], np.int64)
                if len(c) != len(add_counts):
                    raise ImatrixError(f"{label}: entry {name!r} has {len(add_counts)} counts, the files before it "
                                       f"{len(c)}: are they for the same model?")
                c += add_counts
            sums[name] += add_sums  # float32, one file at a time
        datasets += im.datasets
    entries = {}
    for name in sorted(sums):
        n_mat = len(counts[name])
        if sums[name].size % n_mat:
            raise ImatrixError(f"entry {name!r}: {sums[name].size} values do not split into {n_mat} matrices")
        entries[name] = ImatrixEntry(sums[name].reshape(n_mat, -1), counts[name])
    max_count = max((int(c.max()) for c in counts.values() if len(c)), default=0)
    return Imatrix(entries, datasets, max_count // chunk_size, chunk_size)


def merge_imatrix_files(paths: Sequence[str | os.PathLike], chunk_size: int = 512) -> Imatrix:
    """Read each file (GGUF or legacy .dat) and merge them; ImatrixError names the file at fault."""
    parts = []
    for p in paths:
        try:
            parts.append((os.fspath(p), check_imatrix_path(p)))
        except OSError as e:
            raise ImatrixError(f"cannot read {p}: {e}") from e
        except ImatrixError as e:
            raise ImatrixError(f"{p}: {e}" if os.fspath(p) not in str(e) else str(e)) from e
    return merge_imatrices(parts, chunk_size)
