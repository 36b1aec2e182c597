"""A broken model file or a mistaken option: `localinfer run` / `info` end with one line on stderr,
never a traceback, and the library raises the error that line comes from.

The files are synthetic_gguf's tiny random llama with one-character tokens (so text tokenizes),
each with one thing wrong; the checks happen at load or before the first token, so they are fast.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

import localinfer
import synthetic_gguf as sg
from localinfer.cli.main import main
from terminal import CMD

CHARS = [chr(c) for c in range(33, 127)] + ["\u0120"]  # printable ASCII and byte-level BPE's space


def write_model(path, tokenizer_model="gpt2", tokens=None, chat_template=None, nan_output_norm=False):
    """The tiny llama with these tokenizer keys; nan_output_norm: every logit is NaN."""
    def more(w):
        if tokens is not None:  # not an array
            w.add_string("tokenizer.ggml.tokens", tokens)
        if isinstance(chat_template, str):
            w.add_chat_template(chat_template)
        elif chat_template is not None:  # not a string
            w.add_uint32("tokenizer.chat_template", chat_template)

    overrides = {"output_norm.weight": np.full(sg.N_EMBD, np.nan, np.float32)} if nan_output_norm else None
    sg.write(path, overrides=overrides, tokenizer_model=None if tokens is not None else tokenizer_model,
             more=more if tokens is None else _with_tokenizer(tokenizer_model, more),
             tokens=CHARS + [f"t{i}" for i in range(len(CHARS), sg.N_VOCAB)], merges=["t 1"])
    return path


def _with_tokenizer(tokenizer_model, more):
    """The tokenizer keys without a token list (a file whose tokens are not an array)."""
    def keys(w):
        w.add_tokenizer_model(tokenizer_model)
        w.add_token_merges(["t 1"])
        more(w)
    return keys


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {
        "good": write_model(d / "good.gguf"),
        "empty_render": write_model(d / "empty_render.gguf", chat_template="{% if false %}x{% endif %}"),
        "tokens_string": write_model(d / "tokens_string.gguf", tokens="abc"),
        "spm_over_bpe": write_model(d / "spm_over_bpe.gguf", tokenizer_model="llama"),
        "template_int": write_model(d / "template_int.gguf", chat_template=5),
        "nan": write_model(d / "nan.gguf", nan_output_norm=True),
    }


def _fails_in_one_line(args) -> str:
    """Runs the command in this process; it must exit 1 with one "Error: " line on stderr."""
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.output
    return r.stderr


def test_the_good_model_answers(models):
    r = CliRunner().invoke(main, ["run", str(models["good"]), "-p", "hi", "-n", "3", "--temp", "0"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name, args, says", [
    ("empty_render", [], "the chat template rendered the conversation as '', no prompt at all"),
    ("tokens_string", [], "tokenizer.ggml.tokens must be an array, got str 'abc'"),
    ("spm_over_bpe", [], "tokenizer.ggml.model = 'llama' (SentencePiece) does not fit this vocabulary"),
    ("nan", ["--temp", "0.8"], "the model produced non-finite logits (NaN or infinity)"),
    ("nan", ["--temp", "0"], "the model produced non-finite logits (NaN or infinity)"),
    ("good", ["-n", "-5"], "-n/--max-tokens must be -1 (until the context is full) or >= 0, got -5"),
    ("good", ["-c", "1000000000000"], "a context of 1000000000000 tokens needs 4096000000000000 bytes"),
    ("good", ["-ngl", "2", "--device", "cpu"], "n_gpu_layers=2 asks for the GPU and device='cpu' for none"),
])
def test_run_fails_in_one_line(models, name, args, says):
    assert says in _fails_in_one_line(["run", models[name], "-p", "hi", "-n", "2", *args])


def test_run_on_a_too_large_context_suggests_a_smaller_one(models):
    message = _fails_in_one_line(["run", models["good"], "-p", "hi", "-c", "1000000000000"])
    assert "of memory available: use a smaller context (n_ctx / --ctx-size)" in message


@pytest.mark.parametrize("name, says", [
    ("template_int", "template_int.gguf: tokenizer.chat_template = 5: must be a string"),
    ("tokens_string", "tokens_string.gguf: tokenizer.ggml.tokens = 'abc': must be an array"),
])
def test_info_fails_in_one_line(models, name, says):
    assert says in _fails_in_one_line(["info", models[name]])


def test_minus_one_tokens_runs_until_the_context_is_full(models):
    r = CliRunner().invoke(main, ["run", str(models["good"]), "--raw", "-p", "hi", "-n", "-1", "-c", "24",
                                  "--temp", "0"])
    assert r.exit_code == 0, r.output
    assert "context full" in r.stderr
    with localinfer.load(str(models["good"]), n_ctx=24) as m:
        result = m.generate("hi", max_tokens=-1, temperature=0)
        assert result.finish_reason == "context_full" and len(result.tokens) == 24 - 2
        for bad in (-2, -5):
            with pytest.raises(ValueError, match=rf"max_tokens must be -1 \(until the context is full\) or >= 0, "
                                                 rf"got {bad}"):
                m.generate("hi", max_tokens=bad)


def test_a_context_past_the_trained_length_warns_in_one_line(models):
    with pytest.warns(UserWarning, match="n_ctx 256 is more than the 128 tokens .* was trained on"):
        localinfer.load(str(models["good"]), n_ctx=256).close()
    r = subprocess.run(CMD + ["run", str(models["good"]), "--raw", "-p", "hi", "-n", "1", "-c", "256", "--temp", "0"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("Warning: n_ctx 256 is more than the 128 tokens") and r.stderr.count("\n") == 1


def test_the_server_names_the_cause(models):
    from localinfer.serve.app import BackgroundServer
    from serve_helpers import raw
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with localinfer.load(str(models["nan"]), n_ctx=64) as m, BackgroundServer(m, "nan", port=0, n_slots=1,
                                                                              n_ctx=64) as s:
        for temperature in (0.0, 0.8):
            status, _, body = raw(s.url, "POST", "/v1/chat/completions", {**chat, "temperature": temperature})
            assert status == 500 and "the model produced non-finite logits" in body["error"]["message"], body
    with localinfer.load(str(models["empty_render"]), n_ctx=64) as m, BackgroundServer(m, "empty", port=0, n_slots=1,
                                                                                      n_ctx=64) as s:
        status, _, body = raw(s.url, "POST", "/v1/chat/completions", chat)
        assert status == 400 and body["error"]["param"] == "messages", body
        assert body["error"]["message"].startswith("the chat template rendered the conversation as ''")
        status, _, body = raw(s.url, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": -5})
        assert status == 400 and "must be -1 (until the context is full) or between 0" in body["error"]["message"]
        status, _, body = raw(s.url, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": -1, "temperature": 0})
        assert status == 200 and body["usage"]["total_tokens"] == 64, body  # OpenAI's "length": the context is full


def test_the_interactive_chat_reports_non_finite_logits_and_goes_on(models, monkeypatch, capsys):
    from localinfer.cli import chat_loop
    with localinfer.load(str(models["nan"]), n_ctx=64) as m:
        session = m.chat_session(temperature=0.8)
        monkeypatch.setattr("builtins.input", lambda prompt: "hi")
        assert chat_loop._turn(chat_loop._Chat(session, verbose=False)) is True
        assert capsys.readouterr().err.startswith("Error: the model produced non-finite logits")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_speculative_decoding_refuses_non_finite_logits_too(models, temperature):
    """The target's verified rows and a draft model's own logits are checked as plain decoding's are:
    a broken model is the one-line error, not token 0 (argmax of NaN) or numpy's complaint about p."""
    from localinfer.sampling.samplers import NonFiniteLogitsError
    prompt = "hi hi hi hi hi hi hi hi"   # prompt lookup finds its n-grams: drafts are verified
    for target, options in ((models["nan"], dict(lookup_ngram=2)), (models["nan"], dict(draft=str(models["good"]))),
                            (models["good"], dict(draft=str(models["nan"])))):
        with localinfer.load(str(target), n_ctx=64, **options) as m:
            with pytest.raises(NonFiniteLogitsError, match="non-finite logits"):
                m.generate(prompt, max_tokens=8, temperature=temperature, seed=1)
