"""Two facts every part of the course asks of a model: where it lives and whether it trains.

    dev = model_device(model)          # the device of its parameters
    with eval_mode(model):             # evaluation (dropout off), then back as it was
        logits = model(x)

Kept in ``modeling`` (the bottom layer) so that models, recipes, checks and the runtime share
one definition; :mod:`course_utils.runtime.devices` re-exports :func:`model_device`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn as nn

__all__ = ["eval_mode", "model_device"]


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); the CPU for a model with neither."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode for the ``with`` block, then restore the training flag it had
    (also when the block raises). Gradients are untouched: add ``torch.no_grad()`` as needed.

    Only the top module's flag is remembered (``model.train(flag)`` sets every submodule), as
    the blocks this replaces did.
    """
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
