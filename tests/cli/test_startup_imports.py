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


def test_running_a_file_imports_no_other_command_and_no_download_machinery(smollm2_path):
    """`localinfer run FILE` loads the run command only (the others are imported when named), and
    resolving a path or the catalog needs neither OpenSSL's hashlib, zip files, subprocesses nor
    importlib.resources (tempfile, shutil and the compression modules behind it)."""
    code = ("import sys; from localinfer.cli.main import main, _LAZY_COMMANDS\n"
            f"try: main(['run', {str(smollm2_path)!r}, '--raw', '-p', 'Hi', '-n', '1', '--temp', '0'])\n"
            "except SystemExit: pass\n"
            "mods = [f'localinfer.cli.{m}' for m in _LAZY_COMMANDS.values()]\n"
            "mods += ['zipfile', 'subprocess', 'importlib.resources', 'localinfer.files.wheel_index']\n"
            "print(' '.join(m for m in mods if m in sys.modules), file=sys.stderr)")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert err.strip().splitlines()[-1:] in ([], [""]), f"a run of a file imported {err.strip().splitlines()[-1]}"
    code = "import sys; from localinfer.files.fetch import resolve_model; resolve_model('smollm2', download=False)"
    code += "; print(' '.join(m for m in ('hashlib', 'zipfile', 'importlib.resources') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == ""
