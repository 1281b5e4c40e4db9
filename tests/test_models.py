"""The networks of ``bench.catalog``: each builds on its own input, and the small ViT is the
transformer the accuracy grid runs on CPU hosts (issue 29)."""
from __future__ import annotations

import pytest
import torch

from bench.catalog import DEFAULT_IMAGE_SIZE, MODEL_NAMES, PATCH_SIDE, VIT_TINY
from bench.config import ModelConfig
from bench.options import ConfigError
from bench.rank.models import build_model, flops_per_sample, input_shape, parameter_count


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_takes_its_own_input_on_the_meta_device(name):
    cfg = ModelConfig(model=name, mlp_width=16, mlp_depth=2)
    assert cfg.image_size == DEFAULT_IMAGE_SIZE.get(name, 224)
    with torch.device("meta"):
        out = build_model(cfg, 7)(torch.empty(2, *input_shape(cfg)))
    assert tuple(out.shape) == (2, 7)


def test_the_small_vit_trains_a_step_at_32_px():
    cfg = ModelConfig(model="vit_tiny")
    torch.manual_seed(0)
    model = build_model(cfg, 10)
    inputs = torch.randn(4, *input_shape(cfg))
    loss = torch.nn.functional.cross_entropy(model(inputs), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    params = list(model.parameters())
    # Every tensor gets a gradient (DDP's buckets would wait forever on one that did not),
    # and there are no buffers: DDP broadcasts none before a forward.
    assert params and all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    assert list(model.buffers()) == []
    # Its shape is the catalog's: the width and depth there, 64 patches of 4 px at 32 px.
    assert model.hidden_dim == VIT_TINY["hidden_dim"]
    assert len(model.encoder.layers) == VIT_TINY["num_layers"]
    assert model.seq_length == (32 // VIT_TINY["patch_size"]) ** 2 + 1
    # Small enough for the grid's CPU hosts: under a tenth of vit_b_16's 86 M parameters,
    # and torch counts its FLOPs.
    assert parameter_count(model) < 8_600_000
    assert (flops_per_sample(cfg, 10) or 0) > 0


@pytest.mark.parametrize("name", sorted(PATCH_SIDE))
def test_a_vit_refuses_an_image_side_that_is_not_whole_patches(name):
    side = PATCH_SIDE[name] * 3 + 1
    with pytest.raises(ConfigError) as error:
        ModelConfig(model=name, image_size=side)
    assert str(side) in str(error.value) and str(PATCH_SIDE[name]) in str(error.value)
    assert ModelConfig(model=name, image_size=PATCH_SIDE[name] * 3).image_size == \
        PATCH_SIDE[name] * 3
