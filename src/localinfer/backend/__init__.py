"""What runs the layers: the checked bindings to the C kernels (``kernels``), the layer ops on them
(``ops``), the same ops in numpy as the oracle (``ops_reference``), and numpy's BLAS threads kept
out of the C pool's way (``blas_threads``)."""
