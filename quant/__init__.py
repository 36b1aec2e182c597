"""Offline tools that write GGUF files: the weight quantizers (``quantizers``, ``quantize_kquants``,
the i-quants), the mix policy (``mixes``), the file pipeline (``quantize_file``), the converters
from Hugging Face checkpoints and the synthetic models.

They import the runtime (``localinfer.formats`` for the block layouts, ``localinfer.files.gguf_file`` to
read), never the reverse, and need numba, which inference does not.
"""
