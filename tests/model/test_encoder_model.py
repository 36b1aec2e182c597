"""The library calls on encoders, text in: Model.embed, Model.rerank and Model.classify on tiny
random BERT-family models with a WordPiece vocabulary, converted by our converter, against torch
fed with the `tokenizers` library's own ids and token types; and the errors a caller can meet
(generation on an encoder, re-ranking with an embedder or a decoder).

Tolerances as tests/model/test_encoder_oracle.py (GELU's form; cos >= 0.9999 in f32).
Needs the `oracle` extra (torch, transformers, tokenizers).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from encoder_oracle import (CLASSIFY_LABELS, SENTENCES, make_encoder, make_wordpiece_tokenizer,  # noqa: E402
                            torch_hidden, torch_scores)
from localinfer import Model  # noqa: E402
from localinfer.arch.encoder import EncoderOnlyError, NoHeadError  # noqa: E402
from localinfer.encoder_tasks import RerankResult  # noqa: E402
from localinfer.quant.convert_hf import convert_hf  # noqa: E402

QUERY = "which fox jumps over the dog?"
DOCUMENTS = ["The quick brown fox jumps over the lazy dog.", "Numbers like 12345 stay words.",
             "Café and résumé lose their accents.", "the re-ranker reads the query and the document together",
             "东京 and 北京", "short"]


@pytest.fixture(scope="module")
def tokenizer():
    return make_wordpiece_tokenizer()


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    """family -> (torch model, Model on the converted f32 GGUF), made once."""
    made = {}

    def get(family):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            torch_model = make_encoder(family, folder, seed=3, tokenizer=tokenizer)
            made[family] = torch_model, Model(convert_hf(folder, folder / "model.gguf", "f32"), backend="c")
        return made[family]
    yield get
    for _, m in made.values():
        m.close()


def _cos(a, b):
    a, b = np.atleast_2d(a).astype(np.float64), np.atleast_2d(b).astype(np.float64)
    return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("family", ["bert", "nomic", "jina"])
def test_embed_texts_matches_torch_on_the_reference_tokenization(models, tokenizer, family):
    torch_model, m = models(family)
    assert m.is_encoder
    for text in SENTENCES:
        assert m.tokenize(text) == tokenizer.encode(text).ids, text  # [CLS] ... [SEP]
    got = m.embed(SENTENCES)  # mean (the file names no pooling), normalized
    want = np.stack([torch_hidden(family, torch_model, tokenizer.encode(t).ids).mean(0) for t in SENTENCES])
    assert got.shape == want.shape and _cos(got, want).min() >= 0.9999
    cls = m.embed(SENTENCES[0], pooling="cls", normalize=False)
    assert cls.shape == (1, want.shape[1])
    assert _cos(cls, torch_hidden(family, torch_model, tokenizer.encode(SENTENCES[0]).ids)[0])[0] >= 0.9999
    tokens = m.embed(SENTENCES[:2], pooling="none", normalize=False)
    assert [t.shape[0] for t in tokens] == [len(tokenizer.encode(s).ids) for s in SENTENCES[:2]]


def test_rerank_orders_documents_as_bert_for_sequence_classification(models, tokenizer):
    torch_model, m = models("bert_rerank")
    want = []
    for doc in DOCUMENTS:
        enc = tokenizer.encode(QUERY, doc)  # [CLS] query [SEP] doc [SEP], types 0.. then 1..
        want.append(torch_scores(torch_model, enc.ids, enc.type_ids)[0])
    results = m.rerank(QUERY, DOCUMENTS)
    assert all(isinstance(r, RerankResult) for r in results)
    tol = 2e-3 * np.abs(want).max()
    order = [r.index for r in results]
    assert sorted(order) == list(range(len(DOCUMENTS)))
    # torch's order, except that two documents whose scores lie within the tolerance may come either
    # way (the trained vocabulary differs between runs, so near-ties happen: 4, 2, 3, 0 for 4, 2, 0, 3)
    for a, b in zip(order, order[1:]):
        assert want[a] >= want[b] - tol, (order, want)
    assert [r.document for r in results] == [DOCUMENTS[r.index] for r in results]
    for r in results:
        assert abs(r.relevance_score - want[r.index]) < tol
    top = m.rerank(QUERY, DOCUMENTS, top_n=2)
    assert top == results[:2]
    assert m.rerank(QUERY, []) == []


def test_classify_names_the_labels(models, tokenizer):
    torch_model, m = models("bert_classify")
    results = m.classify(SENTENCES)
    for text, r in zip(SENTENCES, results):
        enc = tokenizer.encode(text)
        logits = torch_scores(torch_model, enc.ids, enc.type_ids)
        assert r.label == CLASSIFY_LABELS[int(np.argmax(logits))]
        assert r.labels == tuple(CLASSIFY_LABELS.values())
        np.testing.assert_allclose(r.logits, logits, atol=2e-3 * np.abs(logits).max())
        assert abs(r.probabilities.sum() - 1) < 1e-5 and r.score == r.probabilities.max()


def test_an_encoder_refuses_to_generate(models):
    _, m = models("bert")
    for call in (lambda: m.generate("hello"), lambda: m.chat([{"role": "user", "content": "hi"}]),
                 m.new_context, lambda: m.logits([2, 3])):
        with pytest.raises(EncoderOnlyError, match=r"encoder model \(bert\): use embed/rerank"):
            call()


def test_an_encoder_is_not_offloaded_to_the_cuda_path(models):
    _, m = models("bert")
    with pytest.raises(ValueError, match="the CUDA path runs decoder layers"):
        Model(m.path, n_gpu_layers=2)


def test_rerank_and_classify_need_a_head(models):
    _, embedder = models("bert")
    with pytest.raises(NoHeadError, match="no classification head"):
        embedder.rerank(QUERY, DOCUMENTS)
    with pytest.raises(NoHeadError, match="no classification head"):
        embedder.classify("a text")
    _, reranker = models("bert_rerank")
    with pytest.raises(ValueError, match="re-ranker .* use rerank"):
        reranker.embed("a text")  # the file's pooling is rank: embed() asks for an explicit pooling
    assert reranker.embed("a text", pooling="cls").shape == (1, 64)
    with pytest.raises(TypeError, match="a query string and a list of document strings"):
        reranker.rerank(QUERY, "one document")
    with pytest.raises(ValueError, match="top_n must be a non-negative integer"):
        reranker.rerank(QUERY, DOCUMENTS, top_n=-1)


def test_rerank_on_a_decoder_is_refused(smollm2_path):
    with Model(smollm2_path, n_ctx=256) as m:
        with pytest.raises(TypeError, match="need an encoder with a classification head .* 'llama'"):
            m.rerank(QUERY, DOCUMENTS)
