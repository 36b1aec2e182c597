"""`localinfer bench tokenize`: rows, the comparison's bookkeeping and the report section (speed is not asserted)."""
from __future__ import annotations

import sys

from click.testing import CliRunner

from localinfer.cli.main import main
from localinfer.measure.bench_tokenize import make_texts, run_model
from localinfer.tokenizer import Tokenizer


def _fake_llama_tokenize(tmp_path, body: str):
    """A stand-in for llama-tokenize: `body` is Python run with the -f file's text as `text`."""
    path = tmp_path / "llama-tokenize"
    path.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv\n"
                    f"text = open(args[args.index('-f') + 1], encoding='utf-8').read()\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_texts_have_the_size_asked_for(tmp_path):
    book = tmp_path / "book.txt"
    book.write_text("Ça va? Oui.\n", encoding="utf-8")
    texts = make_texts(1000, [str(book)])
    assert list(texts) == ["random letters", "one letter", "book.txt"]
    assert all(len(t.encode("utf-8")) in (999, 1000) for t in texts.values())   # cut at a character


def test_rows_and_a_disagreeing_reference(smollm2_path, smollm2_metadata, tmp_path):
    texts = {"short": "Hello there, general Kenobi.\n" * 20}
    ours = Tokenizer.from_metadata(smollm2_metadata).tokenize(texts["short"], parse_special=False)
    agreeing = _fake_llama_tokenize(tmp_path, f"print({ours!r})")
    [row] = run_model(str(smollm2_path), texts, reps=2, llama_tokenize=agreeing)
    assert row["tokens"] == len(ours) and row["mb_s"] > 0 and row["memory_x"] >= 0
    assert row["same_ids"] is True and row["ratio"] > 0
    wrong = _fake_llama_tokenize(tmp_path, "print([1, 2, 3] if len(text) > 2 else [1])")
    [row] = run_model(str(smollm2_path), texts, reps=1, llama_tokenize=wrong)
    assert row["same_ids"] is False


def test_cli_writes_its_section_and_names_a_failing_reference(smollm2_path, tmp_path):
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# kept\n")
    out = CliRunner().invoke(main, ["bench", "tokenize", str(smollm2_path), "--size", "0.002", "-r", "1",
                                    "--report", str(report)])
    assert out.exit_code == 0, out.output
    text = report.read_text()
    assert text.startswith("# kept") and "<!-- localinfer:tokenize:start -->" in text and "| random letters |" in text
    failing = _fake_llama_tokenize(tmp_path, "sys.exit('no such model')")
    out = CliRunner().invoke(main, ["bench", "tokenize", str(smollm2_path), "--size", "0.002", "-r", "1",
                                    "--compare-llama-tokenize", failing])
    assert out.exit_code != 0 and "no such model" in out.output
