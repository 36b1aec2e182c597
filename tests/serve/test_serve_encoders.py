"""Encoders on a real server: /v1/embeddings (the openai client, many texts per call), Ollama's embed
routes, /v1/rerank and its aliases in llama-server's, Jina's, Cohere's and TEI's shapes, and the
400s for what an encoder cannot do.

The models are tiny random-weight encoders written as Hugging Face folders (a bge-shaped embedder,
a bge-reranker-shaped cross-encoder, with a WordPiece vocab.txt: tests/tiny_encoders.py) and
converted by our converter: no hub, no torch. What the server answers is compared with the library's
Model.embed / Model.rerank on the same file: the same passes over the same tokens, so equal bits.
"""
from __future__ import annotations

import numpy as np
import openai
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer
from localinfer.serve.rerank import MAX_DOCUMENTS, MAX_QUERY_WORK

from serve_helpers import raw
from tiny_encoders import sentences, tiny_encoder

QUERY = "bako zurimo tefa"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("encoders")


@pytest.fixture(scope="module")
def embedder(root):
    with localinfer.load(str(tiny_encoder("tiny-bert", root))) as m:
        yield m


@pytest.fixture(scope="module")
def reranker(root):
    with localinfer.load(str(tiny_encoder("tiny-rerank", root))) as m:
        yield m


@pytest.fixture(scope="module")
def texts(root, embedder):
    return sentences(root / "tiny-bert", 40, 12)


@pytest.fixture(scope="module")
def embed_server(embedder):
    with BackgroundServer(embedder, "bge-tiny", port=0, n_slots=1) as s:
        yield s


@pytest.fixture(scope="module")
def rerank_server(reranker):
    with BackgroundServer(reranker, "rerank-tiny", port=0, n_slots=1) as s:
        yield s


def test_openai_client_embeds_many_texts_per_call(embed_server, embedder, texts):
    client = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = client.embeddings.create(model="bge-tiny", input=texts)
    assert r.object == "list" and r.model == "bge-tiny" and [d.index for d in r.data] == list(range(len(texts)))
    np.testing.assert_array_equal(np.array([d.embedding for d in r.data], np.float32), embedder.embed(texts))
    assert r.usage.prompt_tokens == r.usage.total_tokens == len(texts) * 12


def test_many_texts_share_forward_passes(embed_server, embedder, root, monkeypatch):
    """The server plans its passes as Model.embed does (up to 2048 padded tokens each): 150 texts of 12
    tokens are 1800 tokens, one pass whose every matmul sees all 1800 rows."""
    from localinfer.encoder_tasks import plan_passes
    widths = []
    pooled = embedder.serialized.pooled

    def counted(batch, pooling):
        widths.append(batch.tokens.size)
        return pooled(batch, pooling)

    monkeypatch.setattr(embedder.serialized, "pooled", counted)
    many = sentences(root / "tiny-bert", 150, 12)
    status, _, body = raw(embed_server.url, "POST", "/v1/embeddings", {"input": many})
    assert status == 200, body
    assert len(widths) == len(plan_passes([12] * 150)) == 1 and widths == [1800]


def test_ollama_embed_routes_on_an_encoder(embed_server, embedder, texts):
    status, _, body = raw(embed_server.url, "POST", "/api/embed", {"model": "bge-tiny", "input": texts[:3]})
    assert status == 200, body
    np.testing.assert_array_equal(np.array(body["embeddings"], np.float32), embedder.embed(texts[:3]))
    assert body["prompt_eval_count"] == 36
    status, _, body = raw(embed_server.url, "POST", "/api/embeddings", {"model": "bge-tiny", "prompt": texts[0]})
    assert status == 200, body  # Ollama's older route: not normalized
    np.testing.assert_array_equal(np.array(body["embedding"], np.float32), embedder.embed(texts[0], normalize=False)[0])
    status, _, body = raw(embed_server.url, "POST", "/api/show", {"model": "bge-tiny"})
    assert status == 200 and body["capabilities"] == ["embedding"]


def test_rerank_in_llama_server_jina_and_cohere_shape(rerank_server, reranker, texts):
    docs = texts[:6]
    want = reranker.rerank(QUERY, docs)
    n_tokens = sum(len(reranker.tokenize(QUERY)) + len(reranker.tokenize(d)) - 1 for d in docs)  # one [CLS]
    for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking"):
        status, _, body = raw(rerank_server.url, "POST", path, {"model": "rerank-tiny", "query": QUERY, "documents": docs})
        assert status == 200, body
        assert body["model"] == "rerank-tiny" and body["object"] == "list"
        assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
        assert [(r["index"], r["relevance_score"]) for r in body["results"]] == [(w.index, w.relevance_score)
                                                                                  for w in want]
        assert all("document" not in r for r in body["results"])
    # Cohere's documents as {"text": ...} objects, top_n, the documents returned
    status, _, body = raw(rerank_server.url, "POST", "/v1/rerank", {
        "query": QUERY, "documents": [{"text": d} for d in docs], "top_n": 2, "return_documents": True})
    assert status == 200, body
    assert [(r["index"], r["document"]) for r in body["results"]] == [(w.index, {"text": w.document}) for w in want[:2]]


def test_rerank_in_tei_shape(rerank_server, reranker, texts):
    """A body with "texts" is TEI's request (as llama-server tells them apart): a bare list, "score"."""
    want = reranker.rerank(QUERY, texts[:4], top_n=3)
    status, _, body = raw(rerank_server.url, "POST", "/rerank", {"query": QUERY, "texts": texts[:4], "top_n": 3,
                                                                 "return_text": True})
    assert status == 200, body
    assert body == [{"index": w.index, "score": w.relevance_score, "text": w.document} for w in want]


@pytest.mark.parametrize("body, param, words", [
    ({"documents": ["a"]}, "query", "'query' must be a string"),
    ({"query": 5, "documents": ["a"]}, "query", "'query' must be a string"),
    ({"query": "q"}, "documents", "non-empty list"),
    ({"query": "q", "documents": []}, "documents", "non-empty list"),
    ({"query": "q", "documents": "a"}, "documents", "non-empty list"),
    ({"query": "q", "documents": [1, 2]}, "documents", "documents[0] must be a string"),
    ({"query": "q", "documents": ["a", {"title": "b"}]}, "documents", "documents[1] is an object without"),
    ({"query": "q", "texts": ["a", None]}, "texts", "texts[1] must be a string"),
    ({"query": "q", "texts": ["a"], "documents": ["a"]}, "texts", "not both"),
    ({"query": "q", "documents": ["a"], "top_n": -1}, "top_n", "non-negative integer"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n", "non-negative integer"),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, "return_documents", "true or false"),
    ({"query": "q", "documents": ["a"] * (MAX_DOCUMENTS + 1)}, "documents", f"at most {MAX_DOCUMENTS}"),
    ({"query": "q " * 200, "documents": ["a"]}, "query", "takes at most 128 tokens"),
    ({"query": "q", "documents": ["a", "word " * 200]}, "documents", "documents[1] and the query are"),
    ({"query": "q" * (MAX_QUERY_WORK // 1000 + 1), "documents": ["a"] * 1000}, "query", "fewer documents"),
])
def test_bad_rerank_requests_are_400_naming_the_field(rerank_server, body, param, words):
    status, _, answer = raw(rerank_server.url, "POST", "/v1/rerank", body)
    assert status == 400, answer
    assert answer["error"]["param"] == param and words in answer["error"]["message"], answer


def test_what_a_model_cannot_do_is_a_400_saying_what_it_can(embed_server, rerank_server, smollm2_model):
    status, _, body = raw(embed_server.url, "POST", "/v1/rerank", {"query": "q", "documents": ["a"]})
    assert status == 400 and "embedder" in body["error"]["message"] and body["error"]["param"] == "model"
    status, _, body = raw(rerank_server.url, "POST", "/v1/embeddings", {"input": "a"})
    assert status == 400 and "re-ranker" in body["error"]["message"] and "/v1/rerank" in body["error"]["message"]
    for server in (embed_server, rerank_server):
        for path, request in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                              ("/v1/completions", {"prompt": "hi"}), ("/completion", {"prompt": "hi"})):
            status, _, body = raw(server.url, "POST", path, request)
            assert status == 400 and body["error"]["param"] == "model", (path, body)
            assert "is an encoder" in body["error"]["message"] and "/v1/embeddings" in body["error"]["message"]
        for path, request in (("/api/generate", {"model": "m", "prompt": "hi"}),
                              ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})):
            status, _, body = raw(server.url, "POST", path, request)
            assert status == 400 and "is an encoder" in body["error"], (path, body)  # Ollama's shape
    with BackgroundServer(smollm2_model, "smollm2", port=0, n_slots=1, n_ctx=64) as decoder:
        status, _, body = raw(decoder.url, "POST", "/v1/rerank", {"query": "q", "documents": ["a"]})
        assert status == 400 and "not a re-ranker" in body["error"]["message"]


def test_embeddings_longer_than_the_encoder_takes_are_a_400(embed_server):
    status, _, body = raw(embed_server.url, "POST", "/v1/embeddings", {"input": ["a", "bako " * 600]})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "input[1]" in body["error"]["message"] and "this encoder takes at most 512" in body["error"]["message"]
