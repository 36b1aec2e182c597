"""A BERT WordPiece tokenizer folder made without a hub: `tokenizers`' WordPiece trainer on a small
multilingual sample, saved by transformers' BertTokenizer (vocab.txt, tokenizer.json,
tokenizer_config.json) beside a config.json, as a Hugging Face BERT checkpoint has them.

    write_bert_tokenizer(folder, vocab_size=600, n_vocab=None) -> folder

Needs tokenizers and transformers (the `oracle` extra); callers importorskip them.
"""
from __future__ import annotations

import json
from pathlib import Path

# Text the trainer learns from and the tests tokenize: every script here is one where llama.cpp's
# WordPiece and Hugging Face's agree (see src/localinfer/tokenizer/wpm.py for where they differ).
SAMPLE = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, isn't it? We'll see what they've done (again).",
    "Embeddings, re-rankers and classifiers serve well on a CPU: 12,345 texts/s at 3.5 GHz!",
    "Café crème, naïve façade, résumé, coöperate, jalapeño, Ångström, Øresund, Straße, Łódź.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein; ÄÖÜ äöü ß.",
    "¿Dónde está la biblioteca? ¡Aquí mismo! São Paulo, coração, ação, pão.",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. ΟΔΟΣ, Άλφα, ΐ.",
    "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА, йод.",
    "Українська: Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "中文：我想在苹果公司工作一千三百一十四天。东京、北京和上海都是大城市。",
    "日本語のテキスト：ひらがな、カタカナ、漢字を混ぜて書きます。",
    "Emoji 🙂🚀 and symbols $5 + 3 = 8 < 9 > 7 ^ ` | ~ @ # % & * _ \\ / [x] {y}",
    "Numbers 0 1 22 333 4444 3.14159 1e-9 −42 ½ ² ³ and dates 2024-12-31.",
    "Quotes “double” ‘single’ «guillemets» — dashes – and … ellipses • bullets.",
    "URLs like https://example.com/path?query=1&b=2 and e-mail user@example.org.",
    "tab\tseparated\tvalues\nnew line\r\nwindows line\u00a0no-break\u2003em\u3000ideographic space",
    "ALL CAPS SHOUTING and MiXeD CaSe WoRdS, CamelCaseIdentifiers and snake_case_names.",
    "Zero\u200bwidth\u200djoiner and soft\u00adhyphen inside words; control\x07bell.",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 (decomposed) versus é à ö ñ (composed).",
    "Vietnamese: Tiếng Việt có dấu, Phở bò, Hà Nội, Đà Nẵng, người.",
    "Turkish: İstanbul, IĞDIR, ıslak, şeker, çiçek, öğrenci, üzüm.",
    "Polish and Czech: zażółć gęślą jaźń; Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "العربية: مرحبا بالعالم، كيف حالك؟ עברית: שלום עולם.",
]

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_bert_tokenizer(folder: str | Path, vocab_size: int = 600, n_vocab: int | None = None,
                         lowercase: bool = True) -> Path:
    """A trained WordPiece vocabulary in `folder` (created). n_vocab: config.json's vocab_size, at
    least the tokenizer's (the rows past it are padding)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("tokenizer.json", "tokenizer_config.json"):   # from_pretrained would prefer them to vocab.txt
        (folder / stale).unlink(missing_ok=True)
    trainer_side = BertWordPieceTokenizer(lowercase=lowercase)
    trainer_side.train_from_iterator(SAMPLE * 4, vocab_size=vocab_size, min_frequency=1, limit_alphabet=500,
                                     special_tokens=SPECIALS, show_progress=False)
    trainer_side.save_model(str(folder))
    tok = BertTokenizer.from_pretrained(str(folder), do_lower_case=lowercase)   # a local folder: no hub
    tok.save_pretrained(str(folder))
    size = len(tok.get_vocab())
    config = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": n_vocab or size,
              "type_vocab_size": 2, "pad_token_id": 0}
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return folder
