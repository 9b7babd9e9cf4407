"""The process-wide settings (cache limit, tensor limit): their setters and environment
variables take counts >= 1 and refuse anything else, naming the setting."""
import pytest

import minitrain
from minitrain.env import count_from_env

SETTERS = [minitrain.set_cache_limit, minitrain.set_max_tensor_bytes]


@pytest.mark.parametrize("setter", SETTERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True])
def test_setters_refuse_what_is_not_a_count(setter, bad):
    with pytest.raises(ValueError, match=setter.__name__):
        setter(bad)


@pytest.mark.parametrize("name", ["MINITRAIN_CACHE_LIMIT", "MINITRAIN_MAX_TENSOR_BYTES"])
def test_counts_from_the_environment(monkeypatch, name):
    monkeypatch.setenv(name, " 37 ")
    assert count_from_env(name, 5) == 37
    monkeypatch.setenv(name, "")
    assert count_from_env(name, 5) == 5
    monkeypatch.delenv(name)
    assert count_from_env(name, 5) == 5
    for bad in ("lots", "-1", "0", "1.5"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=name):
            count_from_env(name, 5)
