"""PyInstaller's hook for localinfer, found through the ``pyinstaller40`` entry point in
pyproject.toml, so that ``pyinstaller app.py`` bundles a working localinfer with no extra flags."""
from __future__ import annotations

import os


def get_hook_dirs() -> list[str]:
    return [os.path.dirname(os.path.abspath(__file__))]
