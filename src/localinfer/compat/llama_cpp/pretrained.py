"""Llama.from_pretrained: a GGUF file of a Hugging Face repository, found by a glob and fetched
through huggingface_hub (its cache, login token, HF_ENDPOINT), as llama-cpp-python does. The
repository is listed once (its files with their LFS SHA-256s, as files/hf.py lists them) and each
file fetched is checked against the Hub's SHA-256 before it is used."""
from __future__ import annotations

import fnmatch
import os
from pathlib import PurePosixPath
from typing import Sequence

from ...files.cache import FetchError, cache_dir, read_stamp, sha256_file, stamp_key, write_stamp


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise ImportError("Llama.from_pretrained requires the huggingface-hub package: "
                          "pip install huggingface_hub (or localinfer[hf])") from None
    return huggingface_hub


def _one(files: dict, repo_id: str, pattern: str) -> str:
    matches = [f for f in files if fnmatch.fnmatch(f, pattern)]
    if len(matches) != 1:
        how = "No file found" if not matches else "Multiple files found"
        raise ValueError(f"{how} in {repo_id} that match {pattern}\n\nAvailable Files:\n{sorted(files)}")
    return matches[0]


def download(repo_id: str, filename: str, additional_files: Sequence[str] | None = None,
             local_dir: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None) -> str:
    """The local path of the model file (the additional ones, other parts of a split model, beside it)."""
    hub = _hub()
    from huggingface_hub.utils import validate_repo_id
    validate_repo_id(repo_id)
    info = hub.HfApi().model_info(repo_id, files_metadata=True)
    files = {s.rfilename: (s.lfs.sha256 if s.lfs else None) for s in info.siblings or []}
    wanted = [_one(files, repo_id, filename)] + [_one(files, repo_id, p) for p in additional_files or ()]
    paths = []
    for name in wanted:
        parent = str(PurePosixPath(name).parent)
        path = hub.hf_hub_download(repo_id, PurePosixPath(name).name, subfolder=None if parent == "." else parent,
                                   revision=info.sha, local_dir=local_dir, cache_dir=cache_dir)
        if files[name]:
            _check(path, files[name], f"{repo_id}/{name}")
        paths.append(path)
    return paths[0]


def _check(path: str, sha: str, what: str) -> None:
    """The file against the Hub's SHA-256, hashed once: the stamp files/hf.py keeps for that hash
    (cache_dir()/hf/<sha>.verified) spares the hash while the file is the one checked."""
    stamp = cache_dir() / "hf" / f"{sha}.verified"
    key = stamp_key(os.stat(path), sha)
    if read_stamp(stamp) == key:
        return
    if sha256_file(path) != sha:
        raise FetchError(f"{what}: the downloaded file does not match the Hub's SHA-256 {sha}")
    os.makedirs(stamp.parent, exist_ok=True)
    write_stamp(stamp, key)
