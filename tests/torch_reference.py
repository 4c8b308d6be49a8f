"""What the tests that compare the book's modules with PyTorch's share."""

from __future__ import annotations

import warnings
from typing import Any, TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def nudge(module: M, seed: int = 0) -> M:
    """Add noise to every parameter of module, in place, and return it.

    PyTorch starts biases at zero, LayerNorms at the identity and the layers of a stack as
    clones of one another: a weight copied to the wrong place would go unnoticed in a comparison.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return module


def random_transformers_model(model_class: str, config_class: str, **settings: Any) -> nn.Module:
    """transformers' model_class built from config_class(**settings): random weights drawn by transformers
    (nothing downloaded), nudged, in float64 and eval mode."""
    with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns where ipywidgets is missing
        warnings.simplefilter("ignore")
        import transformers
    torch.manual_seed(0)
    model: nn.Module = getattr(transformers, model_class)(getattr(transformers, config_class)(**settings))
    return nudge(model).double().eval()
