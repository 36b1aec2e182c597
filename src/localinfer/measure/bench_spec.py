"""Speculative decoding measured: decode tokens/s without speculation, with a draft model and with
prompt lookup, in the same run and process, with the draft acceptance rate.

The demo pairs are made from the catalog files (`demo_pair`): no F16 originals can be fetched here,
so a "F16" target is the catalog file widened to F16 (as measure/quality.py's base) and its drafts
are quantized from that. They live in ~/.cache/localinfer/spec, made on first use.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# A rewrite-this-paragraph request: the answer repeats much of the input, where both drafts help.
REWRITE_PROMPT = (
    "Rewrite this paragraph in simpler words, keeping every fact: The committee, having deliberated at length "
    "over the proposal submitted by the regional office, concluded that the projected benefits did not justify "
    "the considerable expenditure required, and therefore recommended that the matter be deferred until the next "
    "fiscal year, when additional information regarding costs and outcomes would be available. The regional "
    "office was asked to prepare a revised estimate, including a breakdown of staffing costs, equipment "
    "purchases and the expected savings over five years, and to submit it to the committee by the end of March.")

PAIRS = {  # name -> (catalog model, target type, draft type)
    "smollm2": ("smollm2", "F16", "Q4_0"),
    "gemma3": ("gemma3", "Q8_0", "Q4_0"),
}


def spec_dir() -> Path:
    from ..files.fetch import cache_dir
    d = cache_dir() / "spec"
    d.mkdir(parents=True, exist_ok=True)
    return d


def demo_file(name: str, file_type: str) -> Path:
    """The catalog model `name` in `file_type` (F16 widened from the catalog file, others quantized
    from that F16), made once into spec_dir()."""
    from ..files.fetch import resolve_model
    from ..quant.quantize_file import quantize_file
    out = spec_dir() / f"{name}.{file_type}.gguf"
    if out.exists():
        return out
    base = spec_dir() / f"{name}.F16.gguf"
    if not base.exists():
        quantize_file(resolve_model(name), base, "F16", allow_requantize=True)
    if file_type != "F16":
        quantize_file(base, out, file_type)
    return out


def demo_pair(pair: str) -> tuple[Path, Path]:
    """(target, draft) paths of a PAIRS entry."""
    name, target, draft = PAIRS[pair]
    return demo_file(name, target), demo_file(name, draft)


@dataclass
class SpecRow:
    mode: str  # "plain", "draft", "lookup"
    tokens: int
    decode_tps: float
    drafted: int = 0
    accepted: int = 0
    same_tokens: bool = True  # the same tokens as plain decoding

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def bench_pair(target: str, draft: str | None, n_tokens: int = 256, threads: int = 2, lookup_ngram: int = 4,
               draft_max: int = 8, draft_p_min: float = 0.75, reps: int = 2, prompt: str = REWRITE_PROMPT,
               log=print) -> list[SpecRow]:
    """Greedy decode of `prompt` (chat template) with each mode; every mode's best of `reps` runs.
    Modes alternate run by run so that a noisy machine affects them alike."""
    from ..model import Model
    models = {"plain": Model(target, n_threads=threads, n_parallel=1)}
    if draft:
        models["draft"] = Model(target, n_threads=threads, n_parallel=1, draft=draft, draft_max=draft_max,
                                draft_p_min=draft_p_min)
    if lookup_ngram:
        models["lookup"] = Model(target, n_threads=threads, n_parallel=1, lookup_ngram=lookup_ngram,
                                 draft_max=draft_max)
    for m in models.values():   # measured as the models stay, not while they repack (arch/deferred_repack.py)
        m.wait_repacked()
        if m.draft_model is not None:
            m.draft_model.wait_repacked()
    messages = [{"role": "user", "content": prompt}]
    best: dict[str, SpecRow] = {}
    plain_tokens = None
    for rep in range(reps):
        for mode, m in models.items():
            ctx = m.new_context(m.n_ctx)
            r = m.chat(messages, max_tokens=n_tokens, temperature=0, context=ctx)
            drafted, accepted = r.timings.draft_tokens, r.timings.draft_accepted
            if mode == "plain":
                plain_tokens = r.tokens
            row = SpecRow(mode, len(r.tokens), r.timings.decode_tps, drafted, accepted, r.tokens == plain_tokens)
            log(f"  rep {rep + 1} {mode:6s} {row.tokens} tok {row.decode_tps:6.1f} tok/s "
                f"accepted {row.accepted}/{row.drafted}")
            if mode not in best or row.decode_tps > best[mode].decode_tps:
                best[mode] = row
    for m in models.values():
        m.close()
    return list(best.values())


def markdown(pair: str, target: str, draft: str | None, rows: list[SpecRow], threads: int, cpu: str,
             settings: str = "") -> str:
    plain = next(r for r in rows if r.mode == "plain")
    lines = [f"**{pair}**: target `{Path(target).name}`, draft `{Path(draft).name if draft else '-'}`; "
             f"{threads} threads, temperature 0, {cpu}; {settings}", "",
             "| mode | tokens | decode tok/s | × plain | drafted | accepted | acceptance | same tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.mode} | {r.tokens} | {r.decode_tps:.1f} | {r.decode_tps / plain.decode_tps:.2f} | "
                     f"{r.drafted} | {r.accepted} | {100 * r.acceptance:.0f}% | {'yes' if r.same_tokens else 'NO'} |")
    return "\n".join(lines)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
