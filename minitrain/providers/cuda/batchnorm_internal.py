"""CUDA kernel of BatchNormInternal: BatchNormalization's own kernel, which yields the saved
statistics too."""
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES
from .normalization import batch_normalization

register_kernel("BatchNormInternal", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(batch_normalization)
