"""The models the trainer can run, by name, and the input each takes: the one list.

Torch-free, so the head (matrix, config checks, tables) can name models without importing
torch; ``bench.rank.models`` builds each of these and must cover exactly this list.
"""
from __future__ import annotations

# Model name -> input channels (3: RGB image models; 1: the grayscale models).
MODEL_CHANNELS: dict[str, int] = {
    "resnet18": 3,
    "resnet50": 3,
    "resnet152": 3,
    "vit_b_16": 3,
    "mlp": 1,
    "smallcnn": 1,
}
MODEL_NAMES = tuple(MODEL_CHANNELS)
