"""The quality table: per quant type, file size, bits per weight, PPL, KLD against a base, speed.

For each model (`measure_model`):
1. the catalog file is widened to an F16 base with our quantizer (`quantize_file`, requantize);
2. one perplexity pass over the base saves its distributions (kld_file.BaseWriter);
3. per type: quantize the base to that type, one pass gives PPL, Δppl, mean KLD and top-1
   agreement against the base (kl_divergence), and a short llama-bench-style run in a fresh
   process gives prefill (ppN) and decode (tgN) tokens/s (bench_suite.run_localinfer).

The base is a de-quantized file, not an F16 original: whatever the catalog file's quantization
lost is lost in the base too. `BASE_STATEMENT` says so in every report.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from ..files.gguf_file import GGUFFile

DEFAULT_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0", "Q3_K_M", "Q2_K")
BASE_TYPE = "F16"

BASE_STATEMENT = (
    "**The base is not an F16 original.** No F16 originals of these models can be fetched, so the base of "
    "every KLD and Δppl here is the catalog file de-quantized: its {orig} weights widened to F16. A type at "
    "or above the original precision therefore shows ~0 loss only because the information was already lost, "
    "and quantizing from this base is not the same as quantizing an F16 original: the losses below are "
    "those of requantizing, on top of what the catalog file had already lost.")


@dataclass
class Settings:
    """What one table is measured with (the command's flags)."""
    text: str                  # the evaluation text
    n_ctx: int = 512
    n_chunks: int = 4
    threads: int = 2           # for the PPL passes and the speed runs alike
    n_prompt: int = 128        # ppN
    n_gen: int = 32            # tgN
    reps: int = 1
    kl_top_k: int | None = None


@dataclass
class Row:
    """One type's measurements; speeds are tokens/s."""
    type: str
    file_mib: float
    bpw: float
    n_params: int
    ppl: float
    ppl_err: float
    dppl: float = 0.0
    dppl_err: float = 0.0
    kld: float = 0.0
    kld_err: float = 0.0
    same_top: float = 1.0       # fraction
    same_top_err: float = 0.0
    pp_ts: float | None = None
    tg_ts: float | None = None
    quantize_s: float = 0.0


@dataclass
class ModelTable:
    name: str
    source: str                # the catalog file's basename
    source_types: str          # its weight types, e.g. "Q4_1" or "Q4_K+Q6_K+Q5_0"
    n_chunks: int = 0
    n_scored: int = 0
    rows: list[Row] = field(default_factory=list)
    source_file_type: str | None = None  # its general.file_type by llama-quantize's name, e.g. "Q4_K_M"
    embd_share: float = 0.0              # token_embd's share of the parameters


def parse_types(spec: str | list[str]) -> list[str]:
    """"F16,Q8_0,q4_k_m" -> canonical file-type names, in order; a clear error for an unknown or repeated one."""
    from ..formats import UnsupportedQuantType
    from ..quant.mixes import get_file_type

    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    out = []
    for name in names:
        if not name:
            raise ValueError(f"empty type name in {spec!r}")
        try:
            ft = get_file_type(name).name
        except UnsupportedQuantType as e:
            raise ValueError(str(e)) from None
        if ft in out:
            raise ValueError(f"type {ft} is listed twice")
        out.append(ft)
    if not out:
        raise ValueError("no types given")
    return out


def size_and_bpw(path: str | os.PathLike) -> tuple[float, float, int]:
    """(file size in MiB, bits per weight, parameter count): bpw = every tensor's bytes * 8 / every
    tensor's elements (norms and embeddings included, header and padding not)."""
    with GGUFFile(path) as f:
        nbytes = sum(t.nbytes for t in f.tensors.values())
        n_params = sum(t.n_elements for t in f.tensors.values())
    return os.path.getsize(path) / 2**20, bits_per_weight(nbytes, n_params), n_params


def bits_per_weight(tensor_bytes: int, n_params: int) -> float:
    if n_params <= 0:
        raise ValueError(f"a model with {n_params} parameters has no bits per weight")
    return tensor_bytes * 8 / n_params


def weight_types(path: str | os.PathLike) -> str:
    """The file's 2-D weight types, most common first: "Q4_1", "Q5_0+Q8_0+Q4_K+Q6_K"."""
    from collections import Counter
    with GGUFFile(path) as f:
        c = Counter(t.ggml_type.name for t in f.tensors.values() if len(t.shape) > 1)
    return "+".join(t for t, _ in c.most_common())


def source_facts(path: str | os.PathLike) -> tuple[str | None, float]:
    """(the file type named by general.file_type, or None; token_embd's share of the parameters)."""
    from ..quant.mixes import FILE_TYPES
    with GGUFFile(path) as f:
        ftype = f.metadata.get("general.file_type")
        n = sum(t.n_elements for t in f.tensors.values())
        emb = f.tensors.get("token_embd.weight")
    name = next((ft.name for ft in FILE_TYPES.values() if ft.ftype == ftype), None)
    return name, (emb.n_elements / n if emb is not None and n else 0.0)


def save_base(model, chunks, base_path: str, top_k: int | None, log: Callable[[str], None]):
    """One pass of the base model over `chunks`: its distributions go to `base_path`;
    returns its PerplexityStats."""
    from . import perplexity as P
    from .kld_file import BaseWriter, base_chunk, base_header

    header = base_header(model, chunks, top_k)
    stats = P.PerplexityStats()
    with BaseWriter(base_path, header, chunks) as w:
        keep = lambda logits, targets: w.write(base_chunk(logits, targets, header.top_k))  # noqa: E731
        for i, stats in enumerate(P.perplexity_pass(model, chunks, keep)):
            log(f"  base chunk {i + 1}/{header.n_chunk}: PPL {stats.ppl:.4f}")
    return stats


def kld_against(model, base_path: str, log: Callable[[str], None]) -> dict:
    """One pass of `model` over the base file's chunks -> KLDStats.summary()."""
    from .kl_divergence import KLDStats, kld_pass
    from .kld_file import BaseReader

    base = BaseReader(base_path)
    base.check_model(model, os.path.basename(model.path))
    chunks = base.tokens()
    stats = KLDStats()
    for i, stats in enumerate(kld_pass(model, chunks, base)):
        log(f"  chunk {i + 1}/{chunks.shape[0]}: KLD {stats.summary()['kld'][0]:.5f}")
    return stats.summary()


def speed(path: str, s: Settings) -> tuple[float | None, float | None]:
    """(ppN t/s, tgN t/s) from a llama-bench-style run in a fresh process."""
    from .bench_suite import Suite, run_localinfer

    suite = Suite([path], [s.threads], [s.n_prompt] if s.n_prompt else [], [s.n_gen] if s.n_gen else [], s.reps)
    run_localinfer(path, s.threads, suite)
    by_test = {r["test"]: r["avg_ts"] for r in suite.rows}
    return by_test.get(f"pp{s.n_prompt}"), by_test.get(f"tg{s.n_gen}")


def _quantize(src: str, dst: str, target: str, requantize: bool) -> float:
    from ..quant.quantize_file import quantize_file
    return quantize_file(src, dst, target, allow_requantize=requantize).seconds


def measure_model(name: str, types: list[str], s: Settings, work_dir: str | None = None,
                  log: Callable[[str], None] = lambda m: None,
                  on_row: Callable[[ModelTable], None] | None = None) -> ModelTable:
    """The whole table for one model (a catalog name or a .gguf path)."""
    from . import perplexity as P
    from ..files.fetch import resolve_model
    from ..model import Model

    src = str(resolve_model(name))
    table = ModelTable(name, os.path.basename(src), weight_types(src))
    table.source_file_type, table.embd_share = source_facts(src)
    stem = os.path.splitext(os.path.basename(src))[0]
    with tempfile.TemporaryDirectory(prefix="localinfer-quality-") as tmp:
        wd = work_dir or tmp
        os.makedirs(wd, exist_ok=True)
        base_path = os.path.join(wd, f"{stem}.base-F16.gguf")
        log(f"{name}: widening {table.source} ({table.source_types}) to an F16 base")
        base_s = _quantize(src, base_path, BASE_TYPE, requantize=True)

        log(f"{name}: saving the base's distributions ({s.n_chunks} chunks of {s.n_ctx})")
        base_model = Model(base_path, n_ctx=s.n_ctx, n_threads=s.threads)
        chunks = P.make_chunks(P.text_tokens(base_model, s.text), s.n_ctx, s.n_chunks)
        table.n_chunks, table.n_scored = chunks.shape[0], chunks.shape[0] * P.n_scored(s.n_ctx)
        kld_path = os.path.join(wd, f"{stem}.base-F16.kld")
        base_stats = save_base(base_model, chunks, kld_path, s.kl_top_k, log)
        del base_model

        for t in types:
            if t == BASE_TYPE:
                path, q_s = base_path, base_s  # the base itself: its row is the reference (0 loss by definition)
            else:
                path = os.path.join(wd, f"{stem}.{t}.gguf")
                log(f"{name}: quantizing the base to {t}")
                q_s = _quantize(base_path, path, t, requantize=False)
            mib, bpw, n_params = size_and_bpw(path)
            if t == BASE_TYPE:
                row = Row(t, mib, bpw, n_params, base_stats.ppl, base_stats.ppl_error)
            else:
                log(f"{name} {t}: PPL and KLD against the base")
                k = kld_against(Model(path, n_ctx=s.n_ctx, n_threads=s.threads), kld_path, log)
                row = Row(t, mib, bpw, n_params, k["ppl"], k["ppl_err"], k["diff"], k["diff_err"],
                          k["kld"][0], k["kld"][1], k["same_top"][0], k["same_top"][1])
            row.quantize_s = q_s
            if s.n_prompt or s.n_gen:
                log(f"{name} {t}: speed (pp{s.n_prompt}, tg{s.n_gen}, {s.threads} threads)")
                row.pp_ts, row.tg_ts = speed(path, s)
            table.rows.append(row)
            log(f"{name} {t}: {mib:.1f} MiB, {bpw:.2f} bpw, PPL {row.ppl:.4f}, KLD {row.kld:.5f}, "
                f"same top {100 * row.same_top:.1f} %, pp {_ts(row.pp_ts)}, tg {_ts(row.tg_ts)} t/s")
            if on_row:
                on_row(table)
            if path != base_path and not work_dir:
                os.remove(path)  # one quantized file on disk at a time
    return table


def _ts(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _ratio(x: float | None, ref: float | None) -> str:
    return "-" if x is None or not ref else f"{x / ref:.2f}"


def markdown_table(table: ModelTable, s: Settings) -> str:
    """The table of one model; ratios are against the F16 row of the same run (if measured)."""
    ref = next((r for r in table.rows if r.type == BASE_TYPE), None)
    pp, tg = f"pp{s.n_prompt}", f"tg{s.n_gen}"
    lines = [f"| type | size MiB | × F16 size | bits/weight | PPL | Δppl vs base | mean KLD | same top-1 % "
             f"| {pp} t/s | {tg} t/s | {pp} × F16 | {tg} × F16 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table.rows:
        lines.append(
            f"| {r.type} | {r.file_mib:.1f} | {_ratio(r.file_mib, ref and ref.file_mib)} | {r.bpw:.2f} "
            f"| {r.ppl:.3f} ± {r.ppl_err:.3f} | {r.dppl:+.3f} ± {r.dppl_err:.3f} "
            f"| {r.kld:.5f} ± {r.kld_err:.5f} | {100 * r.same_top:.2f} ± {100 * r.same_top_err:.2f} "
            f"| {_ts(r.pp_ts)} | {_ts(r.tg_ts)} | {_ratio(r.pp_ts, ref and ref.pp_ts)} "
            f"| {_ratio(r.tg_ts, ref and ref.tg_ts)} |")
    return "\n".join(lines)


def seeds_check(table: ModelTable) -> str:
    """The design's rule of thumb (INT8 ≈ ½ the memory of FP16 with negligible loss, INT4 ≈ ¼ with a
    small, task-dependent loss) set against this table's Q8_0 and 4-bit rows."""
    rows = {r.type: r for r in table.rows}
    ref = rows.get(BASE_TYPE)
    if ref is None:
        return ""
    parts = []
    for t in ("Q8_0", "Q4_0", "Q4_1", "Q4_K_M"):
        r = rows.get(t)
        if r:
            parts.append(f"{t} is {r.file_mib / ref.file_mib:.2f}× the F16 file ({r.bpw:.2f} bits/weight), "
                         f"mean KLD {r.kld:.4f}, Δppl {r.dppl:+.2f} ({100 * r.dppl / ref.ppl:+.1f} %)")
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    if table.embd_share:
        text += (f" Every mix keeps the token embedding (here also the output matrix) at 6–8 bits, and in a "
                 f"model this small it is {100 * table.embd_share:.0f} % of the parameters, so the 4-bit types "
                 f"come to more than ¼ of F16.")
    return text


def own_type_note(table: ModelTable) -> str:
    """The catalog file's own type re-creates (nearly) the catalog file: say why its loss is so low."""
    ft = table.source_file_type
    if ft and ft != BASE_TYPE and any(r.type == ft for r in table.rows):
        return (f"{ft} is the catalog file's own type: its weights, widened to F16, fall back onto (nearly) the "
                f"same {ft} grid, so its loss here is far below what quantizing an F16 original to {ft} would "
                f"cost, and lower than that of some types with more bits.")
    return ""


def report(tables: list[ModelTable], s: Settings, types: list[str], command: str, machine: dict,
           busy: str | None, text_name: str, load: tuple[float, float] | None = None) -> str:
    """The markdown report; `load` = the 1-minute load average at the start and now."""
    from datetime import datetime, timezone

    lines = [
        "# Quantization quality", "",
        "Generated by:", "", "```", command, "```", "",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine['cpu']}, {machine['n_cpus']} CPUs, {machine['system']}, Python {machine['python']}",
        f"- text: {text_name}, {s.n_chunks} chunks of {s.n_ctx} tokens (the second half of each scored, as "
        f"llama-perplexity does); PPL, KLD and speed with {s.threads} threads",
        f"- speed: pp{s.n_prompt} (prefill) and tg{s.n_gen} (decode) tokens/s, {s.reps} repetition(s) after one "
        f"warm-up, each type in a fresh process (`localinfer bench`'s worker)",
    ]
    if load:
        lines.append(f"- load average (1 min) at the start {load[0]:.1f}, at the end {load[1]:.1f}, "
                     f"on {machine['n_cpus']} CPUs")
    if busy or (load and max(load) > 0.75 * (machine["n_cpus"] or 1)):
        why = f" ({busy})" if busy else ""
        lines.append(f"- **speeds are from a busy machine**{why}: other work shared the CPUs, so read the × F16 "
                     f"columns (ratios within the same run) rather than the absolute tokens/s")
    lines += ["", "## The base", ""]
    for t in tables:
        lines.append(f"- {t.name}: {t.source} ({t.source_types})")
    origs = " / ".join(sorted({t.source_types for t in tables}))
    lines += ["", BASE_STATEMENT.format(orig=origs), "",
              "Columns: size is the whole file; bits/weight = tensor bytes × 8 / parameters (every tensor, norms "
              "and embeddings included). PPL ± its standard error; Δppl = PPL − PPL(base) over the same tokens; "
              "KLD = mean KL divergence from the base's next-token distribution (base top-"
              f"{s.kl_top_k or 1024} tokens plus the rest as one bucket); same top-1 = how often the most likely "
              "token is the base's. The F16 row is the base itself (its PPL is from the pass that saved the base's "
              "distributions), so its loss is 0 by definition. With this few tokens, differences smaller than "
              "the ± are noise.", ""]
    for t in tables:
        lines += [f"## {t.name}", "", f"{t.source} → F16 base → each type; {t.n_chunks} chunks, "
                  f"{t.n_scored} scored tokens.", "", markdown_table(t, s), ""]
        note = own_type_note(t)
        if note:
            lines += [note, ""]
        check = seeds_check(t)
        if check:
            lines += [f"Against the rule of thumb (INT8 ≈ ½ the memory of FP16 with negligible loss, INT4 ≈ ¼ "
                      f"with a small loss that must be evaluated per task): {check}", ""]
    return "\n".join(lines)
