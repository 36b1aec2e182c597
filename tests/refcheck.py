"""Comparing our logits with llama.cpp's recorded ones (refdata logits-*.json), for every model."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def recorded_positions(case: dict) -> list[tuple[int, dict]]:
    """(position, record) for each position llama.cpp recorded: every one for per_position
    cases, else the last."""
    if case.get("per_position"):
        return [(p["pos"], p) for p in case["per_position"]]
    return [(case["n_tokens"] - 1, case["last"])]


@dataclass
class Agreement:
    agree: int  # positions whose argmax is llama.cpp's top-1
    total: int
    deltas: np.ndarray  # |ours - llama.cpp| on llama.cpp's top-20 at every recorded position
    mean_diff: list[float]  # per case, |mean over the vocabulary| difference at the last position
    std_diff: list[float]

    @property
    def top1(self) -> float:
        return self.agree / self.total

    def summary(self) -> str:
        return (f"top-1 agreement {self.agree}/{self.total} = {self.top1:.3f}; |delta| on reference top-20: "
                f"median {np.median(self.deltas):.3f}, max {np.max(self.deltas):.3f}")


def agreement(logit_cases: list[tuple[dict, np.ndarray]], n_vocab: int) -> Agreement:
    agree, total, deltas, mean_diff, std_diff = 0, 0, [], [], []
    for case, logits in logit_cases:
        assert logits.shape == (len(case["tokens"]), n_vocab) and logits.dtype == np.float32
        for pos, rec in recorded_positions(case):
            total += 1
            agree += int(np.argmax(logits[pos]) == rec["top_ids"][0])
            deltas.extend(np.abs(logits[pos][rec["top_ids"]] - np.array(rec["top_logits"])))
        # the whole distribution, not only its top: population mean and std over the vocabulary
        mean_diff.append(abs(float(np.mean(logits[-1])) - case["last"]["mean"]))
        std_diff.append(abs(float(np.std(logits[-1])) - case["last"]["std"]))
    return Agreement(agree, total, np.array(deltas), mean_diff, std_diff)


def disagreement_margins(logit_cases: list[tuple[dict, np.ndarray]]) -> list[tuple[str, int, float]]:
    """(case, position, llama.cpp's own top-2 margin) wherever our argmax differs from its top-1."""
    return [(case["id"], pos, rec["top_logits"][0] - rec["top_logits"][1])
            for case, logits in logit_cases for pos, rec in recorded_positions(case)
            if np.argmax(logits[pos]) != rec["top_ids"][0]]


def argmax_departure_margins(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """At each row where the two argmaxes differ, how far apart the two tokens are: the larger of
    the gaps between them in either array. Two computations of the same logits that differ only
    by rounding disagree only where these gaps are of the size of their noise."""
    rows = np.flatnonzero(ours.argmax(-1) != theirs.argmax(-1))
    a, b = ours[rows].argmax(-1), theirs[rows].argmax(-1)
    return np.maximum(ours[rows, a] - ours[rows, b], theirs[rows, b] - theirs[rows, a])
