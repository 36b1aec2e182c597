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


def test_a_raw_prompt_needs_no_template_engine(smollm2_path):
    """jinja2 and the template sandbox are imported by a chat template's first use, not by a load."""
    code = (f"import sys, localinfer; m = localinfer.load({str(smollm2_path)!r}, n_ctx=64); "
            "m.generate('Hi', max_tokens=1, temperature=0); print('jinja2' in sys.modules, end=' '); "
            "m.chat_tokens([{'role': 'user', 'content': 'Hi'}]); print('jinja2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
