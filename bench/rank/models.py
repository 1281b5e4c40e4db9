"""The networks the trainer can run, and how to count their FLOPs.

``bench.catalog`` is the one list of names (the config's ``--model`` choices); ``MODELS``
builds each.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from bench.catalog import MODEL_CHANNELS, VIT_TINY


class DeepWideMLP(nn.Module):
    """A plain MLP whose width and depth are flags, so it can be made too big for one device."""

    def __init__(self, in_features: int, width: int, depth: int, num_classes: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten(), nn.Linear(in_features, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Two conv blocks and a classifier: the small model for 28x28 grayscale images."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            # Adaptive pooling keeps the classifier's size independent of --image-size.
            nn.AdaptiveAvgPool2d(7),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                                        nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _vit_tiny(image_size: int, num_classes: int, cfg) -> nn.Module:
    """The small ViT of ``bench.catalog.VIT_TINY``: unlike the CNNs and MLPs in its kernels
    (attention, LayerNorm, GELU) and in its many small parameter tensors; about 0.94 M
    parameters with 1000 classes (937,064)."""
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=image_size, num_classes=num_classes, **VIT_TINY)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSpec:
    """How to build a model and what input it takes."""

    in_channels: int
    build: Callable[..., nn.Module]  # (image_size, num_classes, cfg) -> nn.Module


def _torchvision(name: str) -> Callable[..., nn.Module]:
    def build(image_size: int, num_classes: int, cfg) -> nn.Module:
        import torchvision.models as tvm

        kwargs = {"num_classes": num_classes, "weights": None}
        if name == "vit_b_16":
            kwargs["image_size"] = image_size
        return getattr(tvm, name)(**kwargs)

    return build


_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": _torchvision("resnet18"),
    "resnet50": _torchvision("resnet50"),
    "resnet152": _torchvision("resnet152"),
    "vit_b_16": _torchvision("vit_b_16"),
    "vit_tiny": _vit_tiny,
    "mlp": lambda size, classes, cfg: DeepWideMLP(size * size, cfg.mlp_width, cfg.mlp_depth,
                                                  classes),
    "smallcnn": lambda size, classes, cfg: SmallCNN(1, classes),
}
# The catalogue (bench.catalog) names the models and their inputs; this builds them.
assert set(_BUILDERS) == set(MODEL_CHANNELS), "bench.catalog and bench.rank.models disagree"
MODELS: dict[str, ModelSpec] = {name: ModelSpec(MODEL_CHANNELS[name], _BUILDERS[name])
                                for name in MODEL_CHANNELS}


def input_shape(cfg) -> tuple[int, int, int]:
    """(channels, height, width) of one sample for the configured model."""
    return (MODELS[cfg.model].in_channels, cfg.image_size, cfg.image_size)


def build_model(cfg, num_classes: int) -> nn.Module:
    return MODELS[cfg.model].build(cfg.image_size, num_classes, cfg)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flops_per_sample(cfg, num_classes: int) -> int | None:
    """Forward + backward FLOPs for one sample, counted by torch on the meta device.

    The meta device gives shapes without memory or arithmetic, so this costs nothing even
    for models too large for the machine. Returns None where torch cannot count.
    """
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            model = build_model(cfg, num_classes)
            sample = torch.empty((2, *input_shape(cfg)))
        counter = FlopCounterMode(display=False)
        with counter:
            model(sample).sum().backward()
        total = counter.get_total_flops()
    except Exception:  # noqa: BLE001 - an uncountable model is recorded as null, not fatal
        return None
    return int(total // 2) if total else None
