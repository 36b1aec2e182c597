"""A Context is one sequence being processed: its KV cache and the tokens stored in it.

`evaluate(tokens)` makes the context hold exactly `tokens` and returns the logits of the last
one. Whatever prefix is already cached is reused (the second turn of a chat, a repeated system
prompt), only the rest is computed: prefill for many tokens, decode for one.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .kv.cache import ContextFullError, KVCache

# Tokens per forward pass (llama.cpp's n_ubatch): a longer prompt is computed in passes of this
# many. A pass's activations take ~144 KiB a token at 1B (~264 KiB at 8B), so a 4096-token prompt
# in one pass held 0.6-1 GiB beyond the weights; at 256 the weights are still read once per 256
# tokens, a small share of the prefill's time.
N_UBATCH = 256

# The C kernels take another summation order for a few rows than for many: the matmul below
# csrc/core/matmul.c LI_GEMM_MIN_M (6) rows is a GEMV (and a repacked matrix's 16-row kernels run
# decode steps of several sequences), and attention below csrc/core/attention.c LI_ATTN_BATCH (16)
# queries sums P.V key after key. So the rows of a prompt this long are computed batched
# (kernels.batched_rows: the many-row paths for any row count, where each row's result is
# independent of the others): the part of a prompt past a cached prefix, or the last of its passes,
# however few its rows, gives the logits of the whole prompt computed at once, bit for bit, and a
# seed repeats. A shorter prompt keeps the GEMV (its time to the first token) and is computed whole.
MIN_PREFILL_ROWS = 16


def prefills_batched(n_tokens: int) -> bool:
    """Whether a prompt of n_tokens is computed batched: the one rule that Context, Model.logits,
    the engine's prefill, prompt logprobs and the llama-cpp-python layer follow alike."""
    return n_tokens >= MIN_PREFILL_ROWS


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64)
    return int(differ.argmax()) if differ.any() else n


class Context:
    def __init__(self, model, n_ctx: int, kv_dtype=np.float16):
        self.model = model  # an architecture model: forward(tokens, cache) -> logits
        self.cache: KVCache = model.new_cache(n_ctx, kv_dtype)
        self.tokens: list[int] = []  # tokens whose K/V are in the cache, in order
        self.last_n_computed = 0  # tokens computed by the last evaluate() (the rest was reused)
        self.identity: str | None = None  # the model file's hash (kv/session_state.py), set by Model
        self.n_vocab: int | None = None

    @property
    def n_ctx(self) -> int:
        return self.cache.n_ctx

    def common_prefix(self, tokens: Sequence[int]) -> int:
        return common_prefix(self.tokens, tokens)

    def evaluate(self, tokens: Sequence[int], batched: bool = True) -> np.ndarray:
        """Hold exactly `tokens`; returns the logits (n_vocab,) after the last one. A prompt of
        MIN_PREFILL_ROWS tokens or more is computed batched (the bits of the whole prompt at once,
        whatever was cached); batched=False: not (a draft model catching up a few tokens)."""
        if not len(tokens):
            raise ValueError("cannot evaluate an empty token sequence")
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"the prompt has {len(tokens)} tokens, but the context holds "
                                   f"{self.n_ctx} (raise n_ctx / --ctx-size, or shorten the prompt)")
        keep = min(self.common_prefix(tokens), len(tokens) - 1)  # the last token must be computed
        if not self.cache.can_trim_to(keep):
            keep = 0  # a sliding-window cache no longer holds the keys the token after `keep` needs
        self.truncate(keep)
        batched = batched and prefills_batched(len(tokens))
        return self.append(tokens[keep:], last_only=True, batched=batched)[-1]

    def append(self, tokens: Sequence[int], last_only: bool = False, batched: bool = False) -> np.ndarray:
        """Run `tokens` after what is cached; returns their logits (n, n_vocab), or (1, n_vocab)
        for the last token only (all a prompt needs: the output matmul is skipped for the rest).
        batched: each row with the bits of a pass of many rows, however few there are (prompt rows;
        not decode steps, which keep the GEMV)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        # passes of equal size: no short last pass, which a GEMV would compute with other roundings
        n_passes = max(1, -(-len(tokens) // N_UBATCH))
        bounds = [len(tokens) * i // n_passes for i in range(n_passes + 1)]
        parts = []
        for i, (start, end) in enumerate(zip(bounds, bounds[1:])):
            logits = self.model.forward(tokens[start:end], self.cache, last_only=last_only, batched=batched)
            if not last_only or i == n_passes - 1:
                parts.append(logits)
            self.tokens.extend(tokens[start:end].tolist())
        logits = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.last_n_computed = len(tokens)
        return logits

    def truncate(self, n_keep: int) -> None:
        self.cache.trim(n_keep)
        del self.tokens[n_keep:]

    def reset(self) -> None:
        self.truncate(0)

    def save(self, path) -> None:
        """Writes the tokens and KV cache to `path` (atomically): kv/session_state.py."""
        from .kv.session_state import save_context
        save_context(self, path)

    def load(self, path) -> None:
        """Holds what `save` wrote, checked against this model, cache and n_ctx (StateFileError /
        StateMismatchError, ValueErrors, otherwise; the context is then unchanged)."""
        from .kv.session_state import load_context
        load_context(self, path)
