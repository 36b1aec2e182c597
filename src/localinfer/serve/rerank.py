"""/v1/rerank and /rerank (also /v1/reranking, /reranking): a re-ranker's relevance scores of
documents for a query, in the shape llama-server, Jina and Cohere answer.

    {"model": ..., "query": "text", "documents": ["text" | {"text": "text"}, ...], "top_n": n,
     "return_documents": false}
 -> {"model": ..., "object": "list", "usage": {"prompt_tokens": n, "total_tokens": n},
     "results": [{"index": i, "relevance_score": s, "document": {"text": ...}}, ...]}     best first

`document` is there only with "return_documents": true (Cohere's default; llama-server never sends
it). A body with "texts" instead of "documents" is Hugging Face TEI's request, as llama-server tells
them apart, and gets TEI's answer: a bare list [{"index", "score", "text"?}] ("return_text": true
adds the text). The score is the re-ranker's head output over "[CLS] query [SEP] document [SEP]"
as it is (a logit), as llama-server reports it -- also in TEI's shape, where TEI itself would apply
a sigmoid unless asked for raw_scores.

The pairs are laid out by encoder_tasks.pair_tokens and scored a forward pass at a time
(encoder_tasks.score_passes) in a worker thread under the model's lock, so the route stops between
passes when its client goes, as /v1/embeddings does. Bounds: at most MAX_DOCUMENTS documents, each
pair at most the positions the model takes, MAX_TOTAL_TOKENS tokens of pairs in all, and since
the query is tokenized again with each document, query bytes x documents at most MAX_QUERY_WORK.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..tokenizer import TooManyTokensError
from .api import bad
from .embeddings import MAX_INPUTS as MAX_DOCUMENTS, MAX_TOTAL_TOKENS, longest_input

MAX_QUERY_WORK = 8 << 20  # bytes of query tokenized in all (len(query) x documents): ~2 s of tokenizing


class RerankJob:
    """A validated request: its pairs' tokens, then (after run) their scores and the answer."""

    def __init__(self, token_lists: list[list[int]], type_lists: list[list[int]], documents: list[str],
                 top_n: int | None, with_text: bool, tei: bool, model_name: str):
        self.token_lists, self.type_lists, self.documents = token_lists, type_lists, documents
        self.top_n, self.with_text, self.tei, self.model_name = top_n, with_text, tei, model_name
        self.scores: list[float | None] = [None] * len(token_lists)

    def run(self, model, n_batch: int | None = None) -> Iterator[None]:
        """One step per forward pass (under the model's lock): stop iterating to give up."""
        from ..encoder_tasks import DEFAULT_N_BATCH, score_passes
        model._check_open()
        for finished in score_passes(model.serialized, self.token_lists, self.type_lists, n_batch or DEFAULT_N_BATCH):
            for i, v in finished:
                self.scores[i] = float(np.asarray(v).reshape(-1)[0])  # the head's first output, as llama-server
            yield

    def response(self) -> dict | list:
        order = sorted(range(len(self.scores)), key=lambda i: -self.scores[i])  # stable: ties keep their order
        if self.top_n is not None:
            order = order[:self.top_n]
        label = "score" if self.tei else "relevance_score"
        results = []
        for i in order:
            r = {"index": i, label: self.scores[i]}
            if self.with_text:
                r["text" if self.tei else "document"] = self.documents[i] if self.tei else {"text": self.documents[i]}
            results.append(r)
        if self.tei:
            return results
        n = sum(len(t) for t in self.token_lists)
        return {"model": self.model_name, "object": "list", "usage": {"prompt_tokens": n, "total_tokens": n},
                "results": results}


def check_reranker(model, model_name: str) -> None:
    """A 400 unless `model` is an encoder with a classification head (a cross-encoder)."""
    if not getattr(model, "is_encoder", False):
        raise bad(f"the model '{model_name}' is a text generator ({model.architecture}), not a re-ranker: "
                  f"re-ranking needs an encoder with a classification head (a cross-encoder such as "
                  f"bge-reranker)", "model", "model_not_supported")
    if not model.serialized.n_cls_out:
        raise bad(f"the model '{model_name}' is an embedder ({model.architecture} without a classification head), "
                  f"not a re-ranker: use /v1/embeddings, or a cross-encoder to re-rank", "model",
                  "model_not_supported")


def parse_rerank(body: dict, model, model_name: str, n_ctx: int) -> RerankJob:
    check_reranker(model, model_name)
    tei = "texts" in body
    if tei and "documents" in body:
        raise bad("give 'documents' (Jina's and Cohere's request) or 'texts' (TEI's), not both", "texts")
    field = "texts" if tei else "documents"
    query = body.get("query")
    if not isinstance(query, str):
        raise bad(f"'query' must be a string, got {type(query).__name__}", "query")
    documents = _documents(body.get(field), field)
    top_n = body.get("top_n")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0):
        raise bad(f"'top_n' must be a non-negative integer, got {str(top_n)[:40]}", "top_n")
    with_text = _flag(body, "return_text" if tei else "return_documents")
    if len(query.encode()) * len(documents) > MAX_QUERY_WORK:
        raise bad(f"the query ({len(query.encode())} bytes) is read with each of the {len(documents)} documents: "
                  f"{MAX_QUERY_WORK} bytes in all at most; shorten the query or send fewer documents", "query")
    n_ctx = longest_input(model, n_ctx)
    try:  # a query that leaves no room for a document is the query's fault, said once
        n_query = len(model.tokenize(query, add_special=False, parse_special=False, max_tokens=n_ctx))
    except TooManyTokensError as e:
        n_query = e.at_least
    if n_query >= n_ctx:
        raise bad(f"the query is {n_query} tokens long, but this re-ranker takes at most {n_ctx} tokens of query "
                  f"and document together", "query", "context_length_exceeded")
    from ..encoder_tasks import pair_tokens
    token_lists, type_lists, total = [], [], 0
    for i, doc in enumerate(documents):
        ids, types = pair_tokens(model.tokenizer, query, doc)
        if len(ids) > n_ctx:
            raise bad(f"{field}[{i}] and the query are {len(ids)} tokens together, but this re-ranker takes at most "
                      f"{n_ctx}: shorten them", field, "context_length_exceeded")
        total += len(ids)
        if total > MAX_TOTAL_TOKENS:
            raise bad(f"the query and documents are more than {MAX_TOTAL_TOKENS} tokens together (the query counts "
                      f"once per document); one request may have at most that", field)
        token_lists.append(ids)
        type_lists.append(types)
    return RerankJob(token_lists, type_lists, documents, top_n, with_text, tei, model_name)


def _documents(value, field: str) -> list[str]:
    """The documents' texts: strings, or (Cohere) objects with a "text" string."""
    if not isinstance(value, list) or not value:
        raise bad(f"'{field}' must be a non-empty list of strings" + (" or {\"text\": ...} objects" if field ==
                                                                      "documents" else ""), field)
    if len(value) > MAX_DOCUMENTS:
        raise bad(f"'{field}' has {len(value)} items; one request may rank at most {MAX_DOCUMENTS}", field)
    texts = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and field == "documents":
            item = item.get("text")
            if not isinstance(item, str):
                raise bad(f"documents[{i}] is an object without a \"text\" string", field)
        if not isinstance(item, str):
            raise bad(f"{field}[{i}] must be a string, got {type(item).__name__}", field)
        texts.append(item)
    return texts


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(f"'{name}' must be true or false, got {type(value).__name__}", name)
    return value
