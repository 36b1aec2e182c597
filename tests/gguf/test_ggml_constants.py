"""localinfer's own copy of GGML's and GGUF's numbers (formats/ggml.py) is gguf-py's, name for name,
and reading a model never imports gguf-py (its import was ~50 ms of every start)."""
import subprocess
import sys

import gguf
from gguf.constants import GGML_QUANT_SIZES

from localinfer.formats import ggml


def test_tensor_types_and_block_sizes_are_gguf_pys():
    assert {t.name: t.value for t in ggml.GGMLType} == {t.name: t.value for t in gguf.GGMLQuantizationType}
    assert {int(t): s for t, s in ggml.QUANT_SIZES.items()} == {int(t): s for t, s in GGML_QUANT_SIZES.items()}
    assert ggml.GGMLType.Q4_K == gguf.GGMLQuantizationType.Q4_K
    assert {gguf.GGMLQuantizationType.Q6_K: 1}[ggml.GGMLType.Q6_K] == 1   # the same dict key


def test_value_types_token_types_file_types_and_keys_are_gguf_pys():
    assert {t.name: t.value for t in ggml.GGUFValueType} == {t.name: t.value for t in gguf.GGUFValueType}
    assert {t.name: t.value for t in ggml.TokenType} == {t.name: t.value for t in gguf.TokenType}
    assert ggml.FILE_TYPE_NAMES == {t.value: t.name.removeprefix("MOSTLY_").removeprefix("ALL_")
                                    for t in gguf.LlamaFileType}
    keys = {k: v for k, v in vars(ggml.TokenizerKeys).items() if k.isupper()}
    assert keys == {k: getattr(gguf.Keys.Tokenizer, k) for k in keys}


def test_a_model_loads_and_answers_without_gguf_py(smollm2_path):
    code = ("import sys, localinfer; m = localinfer.load(sys.argv[1]); m.generate('Hi', max_tokens=1, "
            "temperature=0); print('gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(smollm2_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
