"""`localinfer` run from another checkout's source tree: `python checkout_main.py ROOT ARGS...`.

`bench serve --compare-checkout ROOT` serves a baseline build beside this one with it. The caller
puts ROOT/src first on PYTHONPATH, so `localinfer` is ROOT's; the checkout's cli/, quant/ and
models/ folders, which an install maps under the localinfer namespace (setuptools' package-dir),
are registered here by hand, as that mapping does.
"""
import importlib.util
import os
import sys


def main() -> None:
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]   # run by path, this folder would come first and shadow top-level modules
    root = sys.argv.pop(1)
    import localinfer  # noqa: F401 (ROOT's: the namespace the folders go under)

    for name in ("cli", "quant", "models"):
        init = os.path.join(root, name, "__init__.py")
        if os.path.exists(init):
            spec = importlib.util.spec_from_file_location("localinfer." + name, init,
                                                          submodule_search_locations=[os.path.join(root, name)])
            module = importlib.util.module_from_spec(spec)
            sys.modules["localinfer." + name] = module
            spec.loader.exec_module(module)
    from localinfer.cli.main import main as cli_main

    sys.argv[0] = "localinfer"
    cli_main()


if __name__ == "__main__":
    main()
