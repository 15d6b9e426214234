import numpy as np
import pytest
import torch

import sonnx.autograd as autograd


@pytest.fixture(autouse=True)
def _isolate_global_state():
    """Each test starts in inference mode with fixed seeds and leaves the flag as it found it."""
    previous = autograd.training
    autograd.training = False
    torch.manual_seed(0)
    np.random.seed(0)
    yield
    autograd.training = previous
