"""Tiny random-weight encoders converted by our converter, for the serving and command-line tests:
a bge-shaped embedder ("tiny-bert") and a bge-reranker-shaped cross-encoder ("tiny-rerank"), each a
Hugging Face folder with a WordPiece vocab.txt (quant/synthetic_encoder.py). No hub, no torch.

    path = tiny_encoder("tiny-rerank", tmp_path)     # tmp_path/tiny-rerank/m.gguf (f32)
    texts = sentences(tmp_path / "tiny-bert", 8, 12)  # made-up words, 12 tokens each
"""
from __future__ import annotations

from pathlib import Path

from localinfer.quant.convert_hf import convert_hf
from localinfer.quant.synthetic_encoder import get_encoder_shape, sentences, write_folder  # noqa: F401


def tiny_encoder(name: str, root: Path, outtype: str = "f32") -> Path:
    folder = root / name
    if not folder.is_dir():
        write_folder(get_encoder_shape(name), folder)
    return convert_hf(folder, folder / f"m-{outtype}.gguf", outtype)
