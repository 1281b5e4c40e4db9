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
    "vit_tiny": 3,
    "mlp": 1,
    "smallcnn": 1,
}
MODEL_NAMES = tuple(MODEL_CHANNELS)

# A model's own input side where it is not 224 (torchvision's), and each ViT's patch side:
# an image side must be a whole number of patches.
DEFAULT_IMAGE_SIZE: dict[str, int] = {"mlp": 28, "smallcnn": 28, "vit_tiny": 32}
# The small ViT (``vit_tiny``): torchvision's VisionTransformer cut down for small images on
# CPU hosts. Patches of 4 px: 64 tokens and the class token at 32 px.
VIT_TINY: dict[str, int] = {"patch_size": 4, "num_layers": 4, "num_heads": 4,
                            "hidden_dim": 128, "mlp_dim": 512}
PATCH_SIDE: dict[str, int] = {"vit_b_16": 16, "vit_tiny": VIT_TINY["patch_size"]}
