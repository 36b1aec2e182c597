"""The optional CUDA path, written with numba.cuda (the `cuda` extra: numba-cuda), whose simulator
(NUMBA_ENABLE_CUDASIM=1) runs the same kernel code on the CPU, so every kernel is tested in CI
without a GPU. Nothing here is imported unless a CUDA device is asked for.

    kernels.py   the device kernels and their host wrappers (bounds checked before a launch)
    weights.py   a GGUF matrix uploaded once in the layout its GEMV reads coalesced
    layers.py    the first N decoder layers of any model whose layers it can run (llama.cpp's -ngl N),
                 executed from the same DecoderLayer data as the CPU path, with a device mirror of the KV cache
    device.py    where numba.cuda comes from, and the errors when it cannot run
"""
