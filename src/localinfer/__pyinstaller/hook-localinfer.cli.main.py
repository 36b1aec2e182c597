"""The command line's commands other than run/pull/list/info are imported by name when asked for
(cli/main.py's _LazyGroup), where PyInstaller's import scan does not see them: a bundle of the
`localinfer` program takes them all. An app that embeds the library alone never loads this hook."""
from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules("localinfer.cli")
