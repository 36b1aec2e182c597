"""A draft model proposes token ids the target reads as its own: both vocabularies must be one."""
from __future__ import annotations


class VocabMismatchError(ValueError):
    """The draft model's vocabulary is not the target's (size, or the text of some token)."""


def check_same_vocab(target, draft, target_name: str = "the model", draft_name: str = "the draft model") -> None:
    """target, draft: Tokenizers. Same size and the same text for every token id, else VocabMismatchError
    naming the first difference (llama.cpp also compares the special tokens; a differing text covers them)."""
    if target.n_vocab != draft.n_vocab:
        raise VocabMismatchError(f"{draft_name} has {draft.n_vocab} tokens, {target_name} {target.n_vocab}: "
                                 f"a draft model must share the target's vocabulary")
    a, b = target.vocab.tokens, draft.vocab.tokens
    if a != b:
        i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        raise VocabMismatchError(f"token {i} is {b[i]!r} in {draft_name} but {a[i]!r} in {target_name}: "
                                 f"a draft model must share the target's vocabulary")
