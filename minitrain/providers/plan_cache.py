"""The cache of kernel plans (tables, launch geometry, index ranges worked out from a node's
shapes and attributes) that the providers' pooling, slicing and splitting kernels share:
bounded, see minitrain/caches.py."""
from ..caches import LRUCache

_PLANS = LRUCache("kernel plans")


def cached_plan(ctx, kind, signature, build):
    """build() -> plan, cached by (provider, kind, signature, attributes); errors are raised,
    not cached; an attribute value that cannot be hashed skips the cache."""
    try:
        key = (ctx.provider.name, kind, signature, ctx.frozen_attrs())
    except TypeError:
        return build()
    return _PLANS.get_or_build(key, build)
