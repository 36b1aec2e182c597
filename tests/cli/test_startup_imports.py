"""The command line starts without the heavy parts: building its commands and options (their
defaults come from the config dataclasses) imports no numpy, no engine and no web framework.
Each command imports what it runs when it runs."""
import subprocess
import sys

HEAVY = ("numpy", "starlette", "uvicorn", "jinja2", "localinfer.batching.engine", "localinfer.serve.asgi")


def test_building_the_command_line_imports_nothing_heavy():
    code = "import sys; import localinfer.cli.main; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    loaded = [name for name in HEAVY if name in out]
    assert not loaded, f"importing the command line loads {loaded}"
