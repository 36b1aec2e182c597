"""The `localinfer` command (installed as localinfer.cli): main.py is the group and the small commands,
one module per larger command, common.py what several of them share."""
