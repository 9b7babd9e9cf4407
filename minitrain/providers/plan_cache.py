"""A bounded cache of kernel plans (tables and launch geometry worked out from a node's shapes
and attributes), shared by the providers' pooling kernels."""

_PLANS = {}
_MAX_PLANS = 256


def cached_plan(ctx, kind, signature, build):
    """build() -> plan, cached by (provider, kind, signature, attributes); errors are raised,
    not cached; the cache is emptied when full."""
    try:
        key = (ctx.provider.name, kind, signature, tuple(sorted(
            (k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in ctx.attrs.items())))
        plan = _PLANS.get(key)
    except TypeError:           # an unhashable attribute value: no caching
        return build()
    if plan is None:
        plan = build()
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan
