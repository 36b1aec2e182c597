"""Speculative decoding in the server: slots verify drafts inside the continuous batch, /metrics
counts them, answers are those of plain decoding (greedy), with a grammar too; the CLI's flags."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import localinfer
from localinfer.cli.main import main
from localinfer.serve.app import BackgroundServer

from serve_helpers import metric, raw

LIST_PROMPT = "Copy this list exactly: " + ", ".join(f"apple {i}" for i in range(12))


@pytest.fixture(scope="module")
def models(smollm2_path):
    plain = localinfer.load(str(smollm2_path), n_ctx=512)
    lookup = localinfer.load(str(smollm2_path), n_ctx=512, lookup_ngram=3)
    yield plain, lookup
    plain.close()
    lookup.close()


def _counter(text: str, name: str) -> int:
    return int(metric(text, f"localinfer_{name}"))


def _complete(url, prompt, **extra):
    status, _, body = raw(url, "POST", "/v1/completions",
                          {"prompt": prompt, "max_tokens": 60, "temperature": 0, **extra})
    assert status == 200, body
    return body["choices"][0]["text"]


def test_metrics_count_drafted_and_accepted_tokens(models):
    plain, lookup = models
    with BackgroundServer(plain, "plain", port=0, n_slots=2, n_ctx=512) as a, \
            BackgroundServer(lookup, "lookup", port=0, n_slots=2, n_ctx=512) as b:
        assert _complete(b.url, LIST_PROMPT) == _complete(a.url, LIST_PROMPT)
        metrics = raw(b.url, "GET", "/metrics")[2]
        drafted, accepted = _counter(metrics, "draft_tokens_total"), _counter(metrics, "draft_tokens_accepted_total")
        assert 0 < accepted <= drafted
        assert (drafted, accepted) == (b.engine.metrics.counters["draft_tokens"],
                                       b.engine.metrics.counters["draft_tokens_accepted"])
        assert _counter(raw(a.url, "GET", "/metrics")[2], "draft_tokens_total") == 0


def test_grammar_requests_verify_drafts_against_the_matcher(models):
    """Drafted tokens go through the grammar mask row by row: the answer is the one without drafts."""
    plain, lookup = models
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
              "required": ["items"]}
    prompt = "Copy this list as JSON: " + ", ".join(f"apple {i}" for i in range(5))
    answers = [m.generate(prompt, max_tokens=120, temperature=0, json_schema=schema)
               for m in (plain, lookup)]
    assert answers[0].tokens == answers[1].tokens
    json.loads(answers[1].text)
    assert answers[1].timings.draft_tokens > 0


def test_run_takes_the_speculative_flags(smollm2_path):
    runner = CliRunner()
    args = ["run", str(smollm2_path), "--raw", "-p", LIST_PROMPT, "-n", "20", "--temp", "0"]
    plain = runner.invoke(main, args)
    lookup = runner.invoke(main, args + ["--lookup-ngram", "3", "--draft-max", "6"])
    assert plain.exit_code == 0 and lookup.exit_code == 0, lookup.output
    assert lookup.output == plain.output
    bad = runner.invoke(main, args + ["--draft-max", "4", "--draft-min", "5", "--lookup-ngram", "2"])
    assert bad.exit_code != 0 and "draft_min (5) is larger than draft_max (4)" in bad.output
    bad = runner.invoke(main, args + ["--draft-max", "0"])
    assert bad.exit_code != 0 and "--draft-max" in bad.output


def test_concurrent_slots_verify_drafts_beside_other_prompts(models):
    """Several requests at once: slots verifying drafts share steps with slots still prefilling
    (forward_batch's n_last gives each its rows); every request ends with its whole answer."""
    import threading
    _, lookup = models
    prompts = [LIST_PROMPT, "Count from one to twenty in words: one, two, three,",
               "Repeat after me three times: the quick brown fox."]
    results = [None] * len(prompts)

    def go(i):
        results[i] = lookup.generate(prompts[i], max_tokens=40, temperature=0)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(r is not None and len(r.tokens) > 0 for r in results)
    assert all(r.finish_reason in ("length", "stop") for r in results)
    assert sum(r.timings.draft_tokens for r in results) > 0
