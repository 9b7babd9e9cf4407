"""The CUDA convolutions: the Conv, ConvTranspose and gradient kernels with minitrain's own
algorithms (kernels.py), the tiled direct kernels (tiled.py), the bias and its gradient
(bias.py), and the per-shape algorithm search among them and cuDNN's (search.py), with its
on-disk cache (search_disk.py)."""
