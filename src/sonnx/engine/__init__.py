"""The autograd engine: the operator contract, backward, tracing for graph mode, host values."""
