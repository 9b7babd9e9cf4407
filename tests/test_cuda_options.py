"""The CUDA provider's convolution search options: a session option (a dict or a
ConvSearchOptions), checked when given, importable and usable without pycuda."""
import subprocess
import sys

import numpy as np
import pytest

from minitrain.providers.cuda_options import ConvSearchOptions


def test_options_from_a_dict_a_copy_or_none():
    options = ConvSearchOptions.of({"mode": "fixed", "algorithm": "direct", "workspace_limit": 1 << 20})
    assert (options.mode, options.algorithm, options.workspace_limit) == ("fixed", "direct", 1 << 20)
    copy = ConvSearchOptions.of(options)
    assert copy == options and copy is not options
    assert ConvSearchOptions.of(None) == ConvSearchOptions()


@pytest.mark.parametrize("value, error, words", [
    ({"mode": "fastest"}, ValueError, "'fastest'"),
    ({"workspace": 10}, ValueError, "['workspace']"),
    ("heuristic", TypeError, "str"),
])
def test_bad_options_are_refused_by_name(value, error, words):
    with pytest.raises(error) as info:
        ConvSearchOptions.of(value)
    assert words in str(info.value)


def test_the_documented_options_import_without_pycuda():
    """The README's way to set the search needs no pycuda until a CUDA session is made."""
    code = ("import sys; sys.modules['pycuda'] = None\n"
            "from minitrain.providers import get_provider\n"
            "from minitrain.providers.cuda_options import ConvSearchOptions\n"
            "from minitrain.training import TrainingSession\n"
            "print(ConvSearchOptions.of({'mode': 'heuristic'}).mode)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "heuristic"


@pytest.mark.cuda
def test_a_session_takes_its_own_search_options(rng):
    from minitrain import nn, optim
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.conv import search
    from minitrain.training import TrainingSession
    default = get_provider("cuda").conv_search
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Relu(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(lr=0.1), input_shape=(1, 8, 8),
                              device="cuda", conv_search={"mode": "heuristic"}, capture=False)
    provider = session._provider
    assert provider.conv_search.mode == "heuristic" and get_provider("cuda").conv_search is default
    search.clear_cache()
    session.train_step(rng.standard_normal((4, 1, 8, 8)).astype(np.float32), np.array([0, 1, 2, 1]))
    counters = search.stats(provider)
    assert counters.searches > 0 and counters.timed == 0     # heuristic: nothing timed
