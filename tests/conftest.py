import numpy as np
import pytest
import torch

import sonnx.autograd as autograd


@pytest.fixture(autouse=True)
def _isolate_global_state(tmp_path_factory, monkeypatch):
    """Each test starts in inference mode with fixed seeds and leaves the flag as it found it,
    and compiles into an empty inductor cache: a graph another test (or an earlier run on
    this machine) compiled is not loaded from disk, so compile counts are the test's own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    previous = autograd.training
    autograd.training = False
    torch.manual_seed(0)
    np.random.seed(0)
    yield
    autograd.training = previous
