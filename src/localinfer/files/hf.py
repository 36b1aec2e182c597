"""Models by their Hugging Face name, as llama.cpp's `-hf USER/REPO[:QUANT]` and Ollama's
`pull hf.co/USER/REPO:QUANT` take them, through huggingface_hub (the `hf` extra): its cache, its
token (HF_TOKEN or `hf auth login`), its resumed downloads and HF_ENDPOINT.

    hf.co/USER/REPO[:QUANT]   (also huggingface.co/..., or USER/REPO[:QUANT] given to -hf)

The repository's .gguf files are listed with their sizes and LFS SHA-256s. QUANT picks the file whose
name holds it as a word (`:Q4_K_M` -> `model.Q4_K_M.gguf` or `model-q4_k_m.gguf`); without one, Q4_K_M
is taken where the repository has it (llama.cpp's and the Hub's default), else Q4_0, else the only
file. Multimodal projectors (mmproj) are never the model. A model split in parts (-00001-of-00003)
is fetched whole, and opens by its first part. Each downloaded file's SHA-256 is checked against the
Hub's before first use, and a stamp (files/cache.py) spares the hash afterwards.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from .cache import FetchError, ModelNotFoundError, cache_dir, read_stamp, sha256_file, stamp_key, write_stamp

PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")
DEFAULT_QUANTS = ("Q4_K_M", "Q4_0")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def is_hf_name(name) -> bool:
    return isinstance(name, str) and name.lower().startswith(PREFIXES)


def parse(name: str) -> tuple[str, str | None]:
    """'hf.co/USER/REPO[:QUANT]' (or without the prefix) -> (USER/REPO, QUANT or None)."""
    rest = name
    for prefix in PREFIXES:
        if rest.lower().startswith(prefix):
            rest = rest[len(prefix):]
            break
    repo, _, tag = rest.partition(":")
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise ModelNotFoundError(f"{name!r} is not a Hugging Face model name: give hf.co/USER/REPO[:QUANT]")
    if tag and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", tag):
        raise ModelNotFoundError(f"{name!r}: the quantization tag {tag!r} is not one (e.g. Q4_K_M)")
    return repo, tag or None


def _word(tag: str, filename: str) -> bool:
    stem = Path(filename).name[:-len(".gguf")]
    return re.search(rf"(^|[-._]){re.escape(tag)}($|[-._])", stem, re.IGNORECASE) is not None


def choose(files: dict[str, tuple[int, str | None]], repo: str, tag: str | None) -> list[str]:
    """The .gguf file of `files` ({name: (size, sha256)}) that `tag` names, as the module says: one
    name, or a split model's parts in order."""
    models = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in Path(f).name.lower())
    if not models:
        raise ModelNotFoundError(f"hf.co/{repo} has no .gguf model file")
    wanted = [tag] if tag else [q for q in DEFAULT_QUANTS if any(_word(q, f) for f in models)]
    if not tag and not wanted and len({_SPLIT.sub("", f) for f in models}) > 1:   # a split model is one
        raise ModelNotFoundError(f"hf.co/{repo} has several .gguf files; name one with :QUANT "
                                 f"(files: {', '.join(Path(f).name for f in models)})")
    picked = [f for f in models if _word(wanted[0], f)] if wanted else models
    if not picked:
        raise ModelNotFoundError(f"hf.co/{repo} has no .gguf file for {tag!r} "
                                 f"(files: {', '.join(Path(f).name for f in models)})")
    models_named = {_SPLIT.sub("", f) for f in picked}   # a split model's parts are one model
    if len(models_named) > 1:
        raise ModelNotFoundError(f"hf.co/{repo}:{wanted[0] if wanted else ''} names several models: "
                                 f"{', '.join(picked)}")
    split = [(_SPLIT.search(f), f) for f in picked]
    if not split[0][0]:
        return picked
    count = int(split[0][0][2])
    parts = sorted(f for m, f in split if m and int(m[2]) == count)
    if [int(_SPLIT.search(f)[1]) for f in parts] != list(range(1, count + 1)):
        raise FetchError(f"hf.co/{repo}: {Path(parts[0]).name} is a model in {count} parts, and the repository "
                         f"does not hold all of them")
    return parts


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise FetchError("models from Hugging Face need huggingface_hub: pip install 'localinfer[hf]'") from None
    return huggingface_hub


def _listing(hub, repo: str) -> tuple[dict[str, tuple[int, str | None]], str]:
    """{file: (size, LFS sha256)} of the repository, and its commit."""
    try:
        info = hub.HfApi().model_info(repo, files_metadata=True)
    except hub.errors.RepositoryNotFoundError:
        raise ModelNotFoundError(f"hf.co/{repo}: no such repository (or it is private: log in with `hf auth login`)") \
            from None
    except (hub.errors.HfHubHTTPError, OSError) as e:
        raise FetchError(f"hf.co/{repo}: the Hub could not be reached: {e}") from None
    files = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings or []}
    return files, info.sha


def fetch(name: str, *, download: bool = True, force: bool = False,
          progress: Callable[[int, int], None] | None = None) -> Path:
    """The local path of hf.co/USER/REPO[:QUANT], downloaded into huggingface_hub's cache when it is not
    there (download=False: ModelNotFoundError instead) and checked against the Hub's SHA-256."""
    repo, tag = parse(name)
    hub = _hub()
    files, commit = _listing(hub, repo)
    paths = []
    for filename in choose(files, repo, tag):
        size, sha = files[filename]
        try:
            path = Path(hub.hf_hub_download(repo, filename, revision=commit, force_download=force,
                                            local_files_only=not download))
        except hub.errors.LocalEntryNotFoundError:
            raise ModelNotFoundError(f"hf.co/{repo}/{filename} is not in the cache; run `localinfer pull {name}`") \
                from None
        except (hub.errors.HfHubHTTPError, OSError) as e:
            raise FetchError(f"hf.co/{repo}/{filename}: download failed: {e}") from None
        if sha:
            _check(path, size, sha, f"hf.co/{repo}/{filename}")
        if progress:
            progress(size, size)
        paths.append(path)
    return paths[0]  # a split model opens by its first part; the others lie beside it (files/gguf_file.py)


def _check(path: Path, size: int, sha: str, what: str) -> None:
    stamp = cache_dir() / "hf" / f"{sha}.verified"
    st = path.stat()
    key = stamp_key(st, sha)
    if read_stamp(stamp) == key:
        return
    actual = sha256_file(path) if st.st_size == size else f"(size {st.st_size}, expected {size})"
    if actual != sha:
        raise FetchError(f"{what}: the downloaded file does not match the Hub's checksum: sha256 {actual}, "
                         f"expected {sha}; `localinfer pull --force hf.co/...` fetches it again")
    os.makedirs(stamp.parent, exist_ok=True)
    write_stamp(stamp, key)
