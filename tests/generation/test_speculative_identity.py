"""Greedy speculative decoding gives the tokens plain decoding gives, bit for bit: with a draft
model and with prompt lookup, in a context and through the batched engine, on SmolLM2 and gemma3
(whose sliding-window layers roll back a ring cache). The drafts are quantized from the catalog
files on first use (measure/bench_spec.py, into the user cache)."""
from __future__ import annotations

import pytest

import localinfer
from localinfer.measure.bench_spec import demo_file
from localinfer.speculative import VocabMismatchError

PROMPTS = [
    "Rewrite this sentence in simpler words: the committee deferred the expensive proposal until next year, "
    "when more information about costs would be available.",
    "List the days of the week, then the months of the year, one per line.",
    "Write a short story about a robot who learns to paint.",
]
N_TOKENS = 80


@pytest.fixture(scope="module")
def smollm2_draft(smollm2_path):
    return str(demo_file("smollm2", "Q4_0"))


@pytest.fixture(scope="module")
def smollm2_models(smollm2_path, smollm2_draft):
    path = str(smollm2_path)
    models = {"plain": localinfer.load(path, n_ctx=512, n_parallel=1),
              "draft": localinfer.load(path, n_ctx=512, n_parallel=1, draft=smollm2_draft, draft_max=8),
              "lookup": localinfer.load(path, n_ctx=512, n_parallel=1, lookup_ngram=3, draft_max=10)}
    yield models
    for m in models.values():
        m.close()


@pytest.fixture(scope="module")
def smollm2_plain(smollm2_models):
    """The plain greedy answer of a prompt, in a context or through the engine: computed once for
    both speculative modes."""
    done = {}

    def plain(prompt: str, in_context: bool):
        if (prompt, in_context) not in done:
            done[prompt, in_context] = _greedy(smollm2_models["plain"], prompt, in_context)
        return done[prompt, in_context]
    return plain


def _greedy(model, prompt, in_context: bool, n_tokens=N_TOKENS):
    kwargs = dict(max_tokens=n_tokens, temperature=0)
    if in_context:
        kwargs["context"] = model.new_context(model.n_ctx)
    return model.chat([{"role": "user", "content": prompt}], **kwargs)


@pytest.mark.parametrize("in_context", [True, False], ids=["context", "engine"])
@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_smollm2_greedy_tokens_are_unchanged(smollm2_models, smollm2_plain, mode, in_context):
    drafted = 0
    for prompt in PROMPTS:
        plain = smollm2_plain(prompt, in_context)
        spec = _greedy(smollm2_models[mode], prompt, in_context)
        assert spec.tokens == plain.tokens, prompt
        drafted += spec.timings.draft_tokens
        assert 0 <= spec.timings.draft_accepted <= spec.timings.draft_tokens
    assert drafted > 0  # the drafts were verified, not skipped


@pytest.mark.slow
def test_gemma3_greedy_tokens_are_unchanged(gemma3_path):
    """The draft in a context, lookup through the engine. The prompt and answer pass 576 positions:
    the 512-token sliding window's ring (512 + 64 slots) has wrapped when drafts are rolled back."""
    draft = str(demo_file("gemma3", "Q4_0"))
    path = str(gemma3_path)
    plain = localinfer.load(path, n_ctx=1024, n_parallel=1)
    spec = {"draft": localinfer.load(path, n_ctx=1024, n_parallel=1, draft=draft, draft_max=8),
            "lookup": localinfer.load(path, n_ctx=1024, n_parallel=1, lookup_ngram=3)}
    prompt = "Copy this list exactly, then stop: " + ", ".join(f"item {i}" for i in range(110))
    try:
        for mode, in_context in (("draft", True), ("lookup", False)):
            want = _greedy(plain, prompt, in_context, n_tokens=160)
            got = _greedy(spec[mode], prompt, in_context, n_tokens=160)
            assert got.tokens == want.tokens, mode
            assert got.timings.draft_tokens > 0
        assert len(want.prompt_tokens) + len(want.tokens) > 576
    finally:
        for m in (plain, *spec.values()):
            m.close()


def test_a_draft_with_another_vocabulary_is_refused(smollm2_path, gemma3_path):
    with pytest.raises(VocabMismatchError, match="vocabulary"):
        localinfer.load(str(smollm2_path), draft=str(gemma3_path))


def test_sampling_with_speculation_repeats_with_a_seed(smollm2_models):
    """In a context (the engine would replay the second from its completion cache)."""
    for mode in ("draft", "lookup"):
        m = smollm2_models[mode]
        a, b = (m.generate(PROMPTS[0], max_tokens=40, temperature=0.8, seed=7, context=m.new_context(256))
                for _ in range(2))
        assert a.tokens == b.tokens and len(a.tokens) > 0 and a.timings.draft_tokens > 0


def test_chat_session_turns_with_a_draft_match_plain_turns(smollm2_models):
    """The draft model's context follows the session's from turn to turn (rolled back and extended)."""
    answers = {}
    for mode in ("plain", "draft"):
        chat = smollm2_models[mode].chat_session(temperature=0, max_tokens=30)
        answers[mode] = [chat.send(text).tokens for text in ("Name a colour.", "And another one?")]
    assert answers["draft"] == answers["plain"]
