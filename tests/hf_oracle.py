"""Tiny random Hugging Face models of each supported architecture, written as a HF folder
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json), for comparing the
converter + our forward pass with transformers' own forward pass (the oracle).

Needs torch, transformers and tokenizers (the `oracle` extra); callers importorskip them.
"""
from __future__ import annotations

import json
from pathlib import Path

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! Hello again, world; numbers 12345 and 678 follow.",
    "It's a truth universally acknowledged, isn't it? We'll see what they've done.",
    "Pride and Prejudice: a novel by Jane Austen, 1813.\n\nChapter 1",
    "Tokens, merges and bytes: café, naïve, 東京, emoji 🙂.",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
N_TOKENIZER = 300  # the trained tokenizer's size; configs ask for more rows (padding, as qwen2 does)
N_VOCAB = 320

# HF Split regexes (the ones hf_tokenizer recognises) per pre-tokenizer.
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
SPLITS = {
    "llama-bpe": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

SMALL = dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
             tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=None)

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

# name -> (config class, model class, extra config, pre-tokenizer)
ARCHS = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(rope_parameters=LLAMA3_ROPE, attention_bias=True, mlp_bias=True),
               "llama-bpe"),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=None, tie_word_embeddings=True), "gpt-2"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
              "qwen2"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32), "qwen2"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(partial_rotary_factor=0.5, original_max_position_embeddings=256, sliding_window=None), "gpt-2"),
    # longrope: prompts here are longer than 16 tokens and caches hold 64, so the long factors apply
    "phi3_longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        partial_rotary_factor=0.5, max_position_embeddings=64, original_max_position_embeddings=16,
        sliding_window=None, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                              "short_factor": [1.0, 1.3, 1.9, 2.6], "long_factor": [1.1, 2.5, 4.0, 9.0]}),
        "gpt-2"),
    # 8 experts, 2 per token: routing differs between tokens, so every expert path is exercised
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(head_dim=32, num_experts=8, num_experts_per_tok=2,
                                                             moe_intermediate_size=48, norm_topk_prob=True), "qwen2"),
    # a shared expert (intermediate 80) beside the routed ones; norm_topk_prob false, as the real models
    "qwen2moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
                                                             shared_expert_intermediate_size=80, norm_topk_prob=False), "qwen2"),
    # q/k norms over the whole projections; experts intermediate_size wide; chosen weights not renormalised
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(num_experts=8, num_experts_per_tok=2, norm_topk_prob=False), "gpt-2"),
    # sinks, window 4 on layer 0 (prompts are longer), biases everywhere, softmax after the top-k, clamped
    # SwiGLU; YaRN with the ramp inside the rotated dimensions, unrounded (truncate false, as gpt-oss's config)
    "gptoss": ("GptOssConfig", "GptOssForCausalLM", dict(
        num_local_experts=8, num_experts_per_tok=2, head_dim=32, sliding_window=4,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}), "gpt-2"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2,
                                                          sliding_window=None), "gpt-2"),
}


def make_tokenizer(pre: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=N_TOKENIZER, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 4, trainer)
    return tok


def randomize(model, seed: int) -> None:
    """Weights of order 1 (HF initialises with std 0.02, which would hide layout mistakes):
    matrices ~ N(0, 1/fan_in) (stacked experts (n_expert, out, in) too), norms 1 + N(0, 0.2), biases N(0, 0.5), embeddings N(0, 1)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "embed_tokens" in name:
                p.copy_(r)
            elif p.ndim >= 2:
                p.copy_(r / p.shape[-1] ** 0.5)
            elif name.endswith("bias"):
                p.copy_(0.5 * r)
            else:
                p.copy_(1.0 + 0.2 * r)


def make_hf_model(name: str, folder: Path, seed: int = 0):
    """Writes a tiny random `name` model into `folder`; returns (the model, the HF tokenizer)."""
    import torch
    import transformers
    config_cls, model_cls, extra, pre = ARCHS[name]
    config = getattr(transformers, config_cls)(**{**SMALL, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    randomize(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    tok = make_tokenizer(pre)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "add_bos_token": False,
         "chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"}))
    return model, tok


def hf_logits(model, tokens) -> "np.ndarray":
    import torch
    with torch.no_grad():
        return model(torch.tensor([list(tokens)])).logits[0].float().numpy()
