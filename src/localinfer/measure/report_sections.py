"""BENCHMARKS.md is written by more than one tool: each owns a section between marker comments

    <!-- localinfer:NAME:start -->  ...  <!-- localinfer:NAME:end -->

and replaces only its own, leaving the others as they were."""
from __future__ import annotations

import os
import re


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- localinfer:{name}:start -->", f"<!-- localinfer:{name}:end -->"


def replace_section(text: str, name: str, content: str, first: bool = False) -> str:
    """`text` with section `name` holding `content`; a new section is appended (or put first)."""
    start, end = _markers(name)
    block = f"{start}\n{content.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    if not text.strip():
        return block + "\n"
    return block + "\n\n" + text.lstrip() if first else text.rstrip() + "\n\n" + block + "\n"


def write_section(path: str | os.PathLike, name: str, content: str, first: bool = False) -> None:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    with open(path, "w") as f:
        f.write(replace_section(text, name, content, first))
