"""Chat: the model's Jinja chat template rendered under a budget (`template`, `sandbox`), messages
turned into token ids with their content kept as text (`prompt`), and a multi-turn session (`session`)."""
