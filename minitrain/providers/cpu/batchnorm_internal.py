"""CPU kernel of BatchNormInternal: BatchNormalization's own kernel, which yields the saved
statistics too."""
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .normalization import batch_normalization

register_kernel("BatchNormInternal", domain=MS_DOMAIN)(batch_normalization)
