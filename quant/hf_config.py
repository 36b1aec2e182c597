"""What a Hugging Face conversion reads and hands around: config.json with clear errors for
missing keys, the error type, and a tensor already in its GGUF encoding."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType


class ConversionError(ValueError):
    pass


@dataclass(frozen=True)
class Encoded:
    """A tensor already in its GGUF encoding (gpt-oss's MXFP4 experts), written as it is."""
    data: np.ndarray  # the type's bytes, (..., row_bytes) uint8
    qtype: GGMLQuantizationType


class Config:
    """config.json with clear errors for missing keys."""

    def __init__(self, path: Path):
        try:
            self.d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConversionError(f"{path.parent}: no config.json") from None
        except ValueError as e:
            raise ConversionError(f"{path}: not valid JSON ({e})") from None
        self.path = path

    def need(self, key: str):
        if key not in self.d or self.d[key] is None:
            raise ConversionError(f"{self.path}: missing required key {key!r}")
        return self.d[key]

    def get(self, key: str, default=None):
        v = self.d.get(key)
        return default if v is None else v

    def rope(self) -> dict:
        """rope_theta and the scaling parameters: transformers 5 writes them together as
        rope_parameters, transformers 4 as rope_theta + rope_scaling."""
        params = dict(self.get("rope_scaling", {}))
        params.update(self.get("rope_parameters", {}))
        if "rope_theta" not in params and "rope_theta" in self.d:
            params["rope_theta"] = self.d["rope_theta"]
        if "type" in params and "rope_type" not in params:
            params["rope_type"] = params["type"]
        return params
