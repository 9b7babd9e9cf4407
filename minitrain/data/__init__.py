"""Data loading: datasets, a seeded DataLoader, the ShardSampler of data-parallel runs, and two
built-in datasets that need no network (scikit-learn's 8x8 digits, shipped in the package, and
MNIST-1D, generated procedurally)."""
from .digits import Split, load_digits
from .loader import ArrayDataset, DataLoader, Dataset
from .mnist1d import load_mnist1d, make_mnist1d
from .sharding import ShardSampler

__all__ = ["Dataset", "ArrayDataset", "DataLoader", "ShardSampler", "Split", "load_digits", "load_mnist1d",
           "make_mnist1d"]
