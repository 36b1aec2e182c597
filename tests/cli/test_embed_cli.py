"""`localinfer embed`: Model.embed's vectors, printed as llama-embedding prints them (%1.7f)."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from localinfer.cli.main import main

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Embeddings map a text to one vector per sentence."]


def test_embed_prints_model_embed(smollm2_model, smollm2_path):
    want = smollm2_model.embed(TEXTS, pooling="last")
    r = CliRunner().invoke(main, ["embed", str(smollm2_path), *TEXTS, "--pooling", "last"])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.array(json.loads(r.output)), want, atol=6e-8, rtol=0)  # 7 decimals: 5e-8, and the float64 parse
    r = CliRunner().invoke(main, ["embed", str(smollm2_path), "--format", "raw", "--no-normalize"],
                           input="\n".join(TEXTS) + "\n")  # stdin: one text per line
    assert r.exit_code == 0, r.output
    rows = np.array([[float(x) for x in line.split()] for line in r.output.splitlines()])
    np.testing.assert_allclose(rows, smollm2_model.embed(TEXTS, normalize=False), atol=6e-8, rtol=0)


def test_embed_errors_are_messages(smollm2_path):
    r = CliRunner().invoke(main, ["embed", str(smollm2_path), "-c", "16", "word " * 40])
    assert r.exit_code != 0 and "context holds 16" in r.output and r.exception.__class__ is SystemExit
    r = CliRunner().invoke(main, ["embed", str(smollm2_path)], input="")
    assert r.exit_code != 0 and "nothing to embed" in r.output
