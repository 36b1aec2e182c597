"""`localinfer embed` on encoders (every pooling, llama-embedding's --pooling) and `localinfer rerank`:
what they print is the library's Model.embed / Model.rerank on the same file (tests/tiny_encoders.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import localinfer
from localinfer.cli.main import main

from tiny_encoders import sentences, tiny_encoder

QUERY = "bako zurimo tefa"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    tiny_encoder("tiny-bert", root)
    tiny_encoder("tiny-rerank", root)
    return root


@pytest.fixture(scope="module")
def texts(root):
    return sentences(root / "tiny-bert", 5, 10)


def _run(*args, input=None):
    r = CliRunner().invoke(main, [str(a) for a in args], input=input)
    return r.exit_code, r.output


def test_embed_on_an_encoder_with_each_pooling(root, texts):
    path = root / "tiny-bert" / "m-f32.gguf"
    with localinfer.load(str(path)) as m:
        for pooling in ("cls", "mean", "last"):
            code, out = _run("embed", path, *texts, "--pooling", pooling)
            assert code == 0, out
            # 7 decimals as llama-embedding prints them: 5e-8, and the float64 parse
            np.testing.assert_allclose(np.array(json.loads(out)), m.embed(texts, pooling=pooling), atol=6e-8, rtol=0)
        code, out = _run("embed", path, *texts[:2], "--pooling", "none", "--format", "raw")
        assert code == 0, out
        blocks = out.strip("\n").split("\n\n")  # a blank line after each text's token vectors
        want = m.embed(texts[:2], pooling="none")
        assert len(blocks) == 2
        for block, w in zip(blocks, want):
            rows = np.array([[float(x) for x in line.split()] for line in block.splitlines()])
            assert rows.shape == w.shape == (10, 64)
            np.testing.assert_allclose(rows, w, atol=6e-8, rtol=0)


def test_embed_rank_prints_the_head_scores(root, texts):
    path = root / "tiny-rerank" / "m-f32.gguf"
    with localinfer.load(str(path)) as m:
        code, out = _run("embed", path, *texts, "--pooling", "rank", "--format", "json")
        assert code == 0, out
        got = np.array([d["embedding"] for d in json.loads(out)["data"]])
        np.testing.assert_allclose(got, m.embed(texts, pooling="rank"), atol=6e-8, rtol=0)
    code, out = _run("embed", path, *texts)  # its pooling is rank: embed says what to do instead
    assert code != 0 and "re-ranker" in out and "rerank" in out


def test_rerank_prints_index_score_document_best_first(root, texts, tmp_path):
    path = root / "tiny-rerank" / "m-f32.gguf"
    with localinfer.load(str(path)) as m:
        want = m.rerank(QUERY, texts)
    code, out = _run("rerank", path, "--query", QUERY, *texts)
    assert code == 0, out
    lines = [line.split("\t") for line in out.strip().splitlines()]
    assert [(int(i), d) for i, _, d in lines] == [(w.index, w.document) for w in want]
    np.testing.assert_allclose([float(s) for _, s, _ in lines], [w.relevance_score for w in want], atol=5e-7, rtol=0)
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(texts) + "\n\n", encoding="utf-8")  # blank lines are not documents
    code, out = _run("rerank", path, "-q", QUERY, "-f", docs, "-n", "2", "--json")
    assert code == 0, out
    assert json.loads(out) == {"results": [{"index": w.index, "relevance_score": w.relevance_score,
                                            "document": {"text": w.document}} for w in want[:2]]}
    code, out = _run("rerank", path, "-q", QUERY, input="\n".join(texts))  # stdin
    assert code == 0 and len(out.strip().splitlines()) == len(texts)


def test_rerank_errors_are_messages(root, smollm2_path):
    code, out = _run("rerank", root / "tiny-bert" / "m-f32.gguf", "-q", QUERY, "a document")
    assert code != 0 and "no classification head" in out
    code, out = _run("rerank", smollm2_path, "-q", QUERY, "a document")
    assert code != 0 and "need an encoder" in out
    code, out = _run("rerank", root / "tiny-rerank" / "m-f32.gguf", "-q", QUERY, input="")
    assert code != 0 and "nothing to rank" in out
    code, out = _run("rerank", root / "tiny-rerank" / "m-f32.gguf", "a document")
    assert code != 0 and "--query" in out
