"""What PyInstaller's import scan cannot see in localinfer (read by PyInstaller, never imported by
localinfer itself)."""
from PyInstaller.utils.hooks import collect_data_files, collect_submodules

# _kernels is a cffi module: it imports _cffi_backend from C, where the scan does not look. Without
# it the bundle still runs, on the numpy path (the warning says why), many times slower.
hiddenimports = ["localinfer._kernels", "_cffi_backend"]
# The architectures are imported by name when a file of theirs loads (arch/__init__.py's registry).
hiddenimports += collect_submodules("localinfer.arch")
# The model catalog (localinfer/models/catalog.json, read beside the package's __init__) and any
# other package data files.
datas = collect_data_files("localinfer")
