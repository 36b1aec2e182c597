"""KL divergence, top-1 agreement and Δppl of a model against a saved base (kld_file.py),
with the statistics and the layout llama-perplexity prints for --kl-divergence
(tools/perplexity/perplexity.cpp, `kl_divergence()`).

Per scored position, with P the base distribution and Q the model's:
- nll = -log Q(next), nll_base = -log P(next);
- KLD = sum_i P_i (log P_i - log Q_i) over the base's top k, plus the tail outside it taken as
  one bucket: P_rest (log P_rest - log Q_rest);
- same top: argmax Q == argmax P;
- Δp = Q(next) - P(next).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .kld_file import BaseChunk
from .perplexity import ROW_BLOCK, log_softmax, scored_logits


@dataclass
class ChunkKLD:
    nll: np.ndarray       # (n,) float64
    nll_base: np.ndarray  # (n,)
    kld: np.ndarray       # (n,)
    p_diff: np.ndarray    # (n,)
    same_top: np.ndarray  # (n,) bool


def chunk_kld(logits: np.ndarray, targets: np.ndarray, base: BaseChunk) -> ChunkKLD:
    """(n, n_vocab) scored logits of the model, (n,) next tokens, the base's chunk -> ChunkKLD."""
    n = logits.shape[0]
    if base.ids.shape[0] != n or targets.shape != (n,):
        raise ValueError(f"{n} scored rows, but the base chunk has {base.ids.shape[0]} and {targets.shape} targets")
    nll = np.empty(n)
    kld = np.empty(n)
    same = np.empty(n, dtype=bool)
    for s in range(0, n, ROW_BLOCK):
        e = min(n, s + ROW_BLOCK)
        rows = np.arange(e - s)
        lq = log_softmax(logits[s:e])                                    # (b, n_vocab) float64
        ids = base.ids[s:e]
        lp = base.logp[s:e].astype(np.float64)                           # (b, k)
        lq_top = np.take_along_axis(lq, ids, axis=1)                     # (b, k)
        top_terms = (np.exp(lp) * (lp - lq_top)).sum(axis=1)
        p_rest = base.rest[s:e].astype(np.float64)
        q_rest = np.clip(1.0 - np.exp(lq_top).sum(axis=1), 1e-300, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            tail = np.where(p_rest > 0, p_rest * (np.log(p_rest) - np.log(q_rest)), 0.0)
        kld[s:e] = top_terms + tail
        nll[s:e] = -lq[rows, targets[s:e]]
        same[s:e] = lq.argmax(axis=1) == ids[:, 0]
    nll_base = -base.target.astype(np.float64)
    return ChunkKLD(nll, nll_base, kld, np.exp(-nll) - np.exp(-nll_base), same)


def mean_and_uncertainty(values: np.ndarray) -> tuple[float, float]:
    """As llama-perplexity's: mean and sqrt(var_pop / (n - 1)), the error 0 for n <= 10."""
    n = values.size
    if n < 1:
        return 0.0, 0.0
    mean = float(values.mean())
    var = float((values * values).mean()) - mean * mean
    return mean, (float(np.sqrt(var / (n - 1))) if var > 0 and n > 10 else 0.0)


def covariance(a: np.ndarray, b: np.ndarray) -> float:
    """llama-perplexity's covariance of the two means (0 below 10 values)."""
    n = a.size
    if n < 10:
        return 0.0
    return float((a * b).mean() - a.mean() * b.mean()) / (n - 1)


def percentile(sorted_values: np.ndarray, fraction: float) -> float:
    """Linear interpolation at fraction * (n - 1) of sorted values (llama-perplexity's)."""
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = fraction * (sorted_values.size - 1)
    i = int(p)
    p -= i
    return float((1 - p) * sorted_values[i] + p * sorted_values[min(i + 1, sorted_values.size - 1)])


def median(sorted_values: np.ndarray) -> float:
    n = sorted_values.size
    return float(0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]) if n % 2 == 0 else sorted_values[n // 2])


@dataclass
class KLDStats:
    """Every scored position so far; the statistics are computed from these arrays."""
    parts: list[ChunkKLD] = field(default_factory=list)

    def add(self, c: ChunkKLD) -> None:
        self.parts.append(c)

    def _all(self, name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in self.parts]) if self.parts else np.zeros(0)

    @property
    def count(self) -> int:
        return sum(p.nll.size for p in self.parts)

    def summary(self) -> dict:
        nll, nll_base, kld, p_diff = (self._all(k) for k in ("nll", "nll_base", "kld", "p_diff"))
        same = self._all("same_top").astype(bool)
        n = nll.size
        lp, lp_err = mean_and_uncertainty(nll)
        lb, lb_err = mean_and_uncertainty(nll_base)
        cov = covariance(nll, nll_base)
        ratio_err = float(np.sqrt(max(0.0, lp_err ** 2 + lb_err ** 2 - 2 * cov)))
        ppl, ppl_base = float(np.exp(lp)), float(np.exp(lb))
        ppl_err, ppl_base_err = ppl * lp_err, ppl_base * lb_err
        mse, mse_err = mean_and_uncertainty(p_diff * p_diff)
        rms = float(np.sqrt(mse))
        top = float(same.sum()) / n if n else 0.0
        s = dict(count=n, ppl=ppl, ppl_err=ppl_err, ppl_base=ppl_base, ppl_base_err=ppl_base_err,
                 cor=cov / (lp_err * lb_err) if lp_err and lb_err else 0.0,
                 ln_ratio=lp - lb, ln_ratio_err=ratio_err,
                 ratio=float(np.exp(lp - lb)), ratio_err=float(np.exp(lp - lb)) * ratio_err,
                 diff=ppl - ppl_base,
                 diff_err=float(np.sqrt(max(0.0, ppl_err ** 2 + ppl_base_err ** 2 - 2 * ppl * ppl_base * cov))),
                 kld=mean_and_uncertainty(kld), p_diff=mean_and_uncertainty(p_diff),
                 rms_p_diff=(rms, 0.5 / rms * mse_err if rms else 0.0),
                 same_top=(top, float(np.sqrt(top * (1 - top) / (n - 1))) if n > 1 else 0.0))
        ks, ps = np.sort(kld), np.sort(p_diff)
        if n:
            s["kld_quantiles"] = {q: percentile(ks, q) for q in (0.999, 0.99, 0.95, 0.9, 0.1, 0.05, 0.01, 0.001)}
            s["kld_quantiles"].update(max=float(ks[-1]), median=median(ks), min=float(ks[0]))
            s["p_diff_quantiles"] = {q: percentile(ps, q) for q in (0.999, 0.99, 0.95, 0.9, 0.75, 0.25, 0.1, 0.05,
                                                                     0.01, 0.001)}
            s["p_diff_quantiles"].update(max=float(ps[-1]), median=median(ps), min=float(ps[0]))
        return s


TABLE_HEADER = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                "Δp RMS            Same top p")


def format_row(chunk_number: int, s: dict) -> str:
    """One line of llama-perplexity's --kl-divergence table (running values)."""
    return (f"{chunk_number:4d}    {s['ppl']:9.4f} ± {s['ppl_err']:9.4f}"
            f"    {s['ln_ratio']:10.5f} ± {s['ln_ratio_err']:10.5f}"
            f"    {s['kld'][0]:10.5f} ± {s['kld'][1]:10.5f}"
            f"    {100 * s['rms_p_diff'][0]:6.3f} ± {100 * s['rms_p_diff'][1]:6.3f} %"
            f"    {100 * s['same_top'][0]:6.3f} ± {100 * s['same_top'][1]:6.3f} %")


def format_report(s: dict) -> str:
    """The closing statistics, laid out as llama-perplexity prints them."""
    kq, pq = s["kld_quantiles"], s["p_diff_quantiles"]
    lines = [
        "====== Perplexity statistics ======",
        f"Mean PPL(Q)                   : {s['ppl']:10.6f} ± {s['ppl_err']:10.6f}",
        f"Mean PPL(base)                : {s['ppl_base']:10.6f} ± {s['ppl_base_err']:10.6f}",
        f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * s['cor']:6.2f}%",
        f"Mean ln(PPL(Q)/PPL(base))     : {s['ln_ratio']:10.6f} ± {s['ln_ratio_err']:10.6f}",
        f"Mean PPL(Q)/PPL(base)         : {s['ratio']:10.6f} ± {s['ratio_err']:10.6f}",
        f"Mean PPL(Q)-PPL(base)         : {s['diff']:10.6f} ± {s['diff_err']:10.6f}",
        "",
        "====== KL divergence statistics ======",
        f"Mean    KLD: {s['kld'][0]:10.6f} ± {s['kld'][1]:10.6f}",
        f"Maximum KLD: {kq['max']:10.6f}",
    ]
    for q in (0.999, 0.99, 0.95, 0.9):
        lines.append(f"{_pct(q)}   KLD: {kq[q]:10.6f}")
    lines.append(f"Median  KLD: {kq['median']:10.6f}")
    for q in (0.1, 0.05, 0.01, 0.001):
        lines.append(f"{_pct(q)}   KLD: {kq[q]:10.6f}")
    lines += [f"Minimum KLD: {kq['min']:10.6f}", "", "====== Token probability statistics ======",
              f"Mean    Δp: {100 * s['p_diff'][0]:6.3f} ± {100 * s['p_diff'][1]:5.3f} %",
              f"Maximum Δp: {100 * pq['max']:6.3f}%"]
    for q in (0.999, 0.99, 0.95, 0.9, 0.75):
        lines.append(f"{_pct(q)}   Δp: {100 * pq[q]:6.3f}%")
    lines.append(f"Median  Δp: {100 * pq['median']:6.3f}%")
    for q in (0.25, 0.1, 0.05, 0.01, 0.001):
        lines.append(f"{_pct(q)}   Δp: {100 * pq[q]:6.3f}%")
    lines += [f"Minimum Δp: {100 * pq['min']:6.3f}%",
              f"RMS Δp    : {100 * s['rms_p_diff'][0]:6.3f} ± {100 * s['rms_p_diff'][1]:5.3f} %",
              f"Same top p: {100 * s['same_top'][0]:6.3f} ± {100 * s['same_top'][1]:5.3f} %"]
    return "\n".join(lines)


def _pct(q: float) -> str:
    return f"{100 * q:4.1f}%"


def kld_pass(model, chunks: np.ndarray, base) -> Iterator[KLDStats]:
    """Scores `model` on the chunks against the base file's chunks (a kld_file.BaseReader),
    yielding the running stats after each chunk."""
    stats = KLDStats()
    for i, (logits, targets) in enumerate(scored_logits(model, chunks)):
        stats.add(chunk_kld(logits, targets, base.chunk(i)))
        yield stats
