"""No import cycles among localinfer's modules, and the layers import only downwards.

The graph is read from the source with `ast`, not by importing anything: every module under
src/localinfer/, cli/, quant/ and models/ (installed as localinfer.cli, .quant, .models), and
every `import` / `from ... import` in it that names a localinfer module, at module level or
inside a function. A function-level (lazy) import counts like any other: it only delays the
import to a keeper of cheap start-up, and two modules that need each other are one tangle
whenever they are imported. Imports under `if TYPE_CHECKING:` do not count: they are never
executed and only name types for annotations.

Importing a submodule runs its package's __init__ first; that implicit edge is left out (a
package re-exporting its modules' names is not a cycle), so an __init__ is a module like the others.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {  # folder -> the package it is installed as (pyproject.toml's package-dir)
    ROOT / "src" / "localinfer": "localinfer",
    ROOT / "cli": "localinfer.cli",
    ROOT / "quant": "localinfer.quant",
    ROOT / "models": "localinfer.models",
}
CORE_NEVER_IMPORTS = ("localinfer.serve", "localinfer.measure", "localinfer.cli")
TOOLS = ("localinfer.quant", "localinfer.cli", "localinfer.measure")   # offline tools and the command line


def _modules() -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)"""
    out = {}
    for folder, package in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            out[".".join([package, *parts])] = (path, is_init)
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, except those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node) and child in node.body:
                continue
            stack.append(child)


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_init) in modules.items():
        package = name if is_init else name.rpartition(".")[0]
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                # `from pkg import name`: the submodule pkg.name when there is one, else pkg itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` imports a.b.c, a module of ours or not
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    graph = import_graph()
    assert "localinfer.model" in graph["localinfer.chat.session"] or "localinfer.generate" in graph["localinfer.chat.session"]
    assert "localinfer.cli.common" in graph["localinfer.cli.serve"]
    assert "localinfer.files.gguf_file" in graph["localinfer.quant.quantize_file"]  # across the namespace
    assert "localinfer.formats.registry" in graph["localinfer.quant.quantizers"]


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (each line: modules that import each other, directly or not):\n" + \
        "\n".join("  " + " <-> ".join(c) for c in cycles)


def test_find_cycles_sees_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_runtime_never_imports_the_server_the_tools_or_the_cli():
    """The core (everything but serve/, measure/ and the command line) is imported by them, never the reverse."""
    graph = import_graph()
    core = [m for m in graph if not m.startswith(CORE_NEVER_IMPORTS)]
    bad = sorted((m, t) for m in core for t in graph[m] if t.startswith(CORE_NEVER_IMPORTS))
    assert not bad, bad


def test_the_runtime_never_imports_the_offline_quant_tools():
    """quant/ (quantizers, mixes, converters) builds on the runtime's formats, never the reverse: what
    inference needs of a format (its layout, dequantizer, the KV cache's quantizers) is in formats/.
    Only the tools (measure/'s perplexity and quality runs, the command line) drive quant/."""
    graph = import_graph()
    runtime = [m for m in graph if not m.startswith(TOOLS)]
    bad = sorted((m, t) for m in runtime for t in graph[m] if t.startswith("localinfer.quant"))
    assert not bad, bad


def test_the_runtime_folder_is_a_map():
    """src/localinfer/ holds at most 8 modules beside its packages (kv/, backend/, files/, formats/,
    sampling/, arch/ ...): a newcomer reads the folder names, not 30 files."""
    top = sorted(p.name for p in (ROOT / "src" / "localinfer").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top


def test_the_readme_names_every_architecture():
    """The README's map of src/localinfer/arch/ lists every architecture the loader knows (arch.ARCHITECTURES
    and its aliases): one source, checked."""
    from localinfer.arch import ALIASES, ARCHITECTURES
    row = next(line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `src/localinfer/arch/` |"))
    missing = sorted(name for name in (*ARCHITECTURES, *ALIASES) if name not in row)
    assert not missing, f"README's arch/ row does not name {missing}"
