"""CUDA kernel of BatchNormInternal: BatchNormalization's own kernel, which yields the saved
statistics too."""
from ...ops.schema import FLOAT_TYPES, MS_DOMAIN
from ...registry import register_kernel
from .normalization import batch_normalization

register_kernel("BatchNormInternal", domain=MS_DOMAIN, provider="cuda", dtypes=FLOAT_TYPES)(batch_normalization)
