"""From logits to the next token: the samplers and logits processors (``samplers``), llama.cpp's
logit bias (``logit_bias``) and the log-probabilities reported beside the tokens (``logprobs``)."""
