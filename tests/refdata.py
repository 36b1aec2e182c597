"""Where llama.cpp's reference data is: ../shared/refdata next to the checkout, or $LOCALINFER_REFDATA.
A module (not only conftest's fixture) because parametrize needs the case ids at collection time."""
from __future__ import annotations

import json
import os
from pathlib import Path


def refdata_root() -> Path | None:
    env = os.environ.get("LOCALINFER_REFDATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "refdata")
    for c in candidates:
        if (c / "public").is_dir():
            return c
    return None


def ref_case_ids(kind: str, model: str) -> list[str]:
    """The case ids of public/{kind}-{model}.json; none without the reference data (the tests skip)."""
    root = refdata_root()
    if root is None:
        return []
    return [c["id"] for c in json.loads((root / "public" / f"{kind}-{model}.json").read_text())["cases"]]
