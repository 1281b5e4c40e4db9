"""The accuracy grid: the workloads ``scripts/prediction_accuracy.py --grid`` measures the
prediction on (issue 29), one per line of a grid file.

  # name                 model     batch  shape  links        hooks          set
  resnet18-b8-5gbit      resnet18  8      32     5gbit        none,powersgd  dev
  mlp512x8-b64-5gbit     mlp       64     512x8  5gbit        none,powersgd  dev
  smallcnn-b16-5gbit     smallcnn  16     -      5gbit        fp16,powersgd  held-out

Fields are separated by spaces or tabs; ``#`` starts a comment. ``name`` becomes the
workload's directory under ``--out``: one plain name, unique. ``shape`` is the input side in
pixels for an image model (``-``: the model's own), WIDTHxDEPTH for the MLP. ``set`` is
``dev`` (the workloads the model may be developed on) or ``held-out`` (kept out of
development, checked last). Every value is checked before anything runs: a bad one is a
``ConfigError`` naming the file, the line and the field. Host side: no torch.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bench.config import COMM_HOOKS, ModelConfig
from bench.options import ConfigError, require_range
from bench.topology import parse_choices, shown, shown_path
from bench.units import parse_rate

SETS = ("dev", "held-out")
FIELDS = ("name", "model", "batch", "shape", "links", "hooks", "set")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MLP_SHAPE = re.compile(r"([1-9][0-9]{0,6})x([1-9][0-9]{0,4})")
_SIDE = re.compile(r"[1-9][0-9]{0,4}")
# The grid's field for a setting ModelConfig names its own way (--image-size, --mlp-width...).
_FIELD_OF = (("image", "shape"), ("mlp", "shape"), ("model", "model"))
# A grid file is a short list written by hand: anything larger is not one.
MAX_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    """One line of the grid: a workload, the links and hooks it is measured on."""

    name: str
    model: str
    batch_size: int
    image_size: int | None        # None: the model's own side
    mlp_width: int | None         # the MLP's only
    mlp_depth: int | None
    links: tuple[str, ...]
    hooks: tuple[str, ...]
    held_out: bool
    line: int

    @property
    def label(self) -> str:
        """The workload as a table names it: resnet18 32 px, batch 8."""
        shape = (f" {self.mlp_width}x{self.mlp_depth}" if self.model == "mlp"
                 else f" {self.image_size} px" if self.image_size else "")
        return f"{self.model}{shape}, batch {self.batch_size}"


def parse_line(text: str, line: int, where: str) -> Workload | None:
    """One line of a grid file: a workload, or None for a blank or comment line."""
    words = text.split("#", 1)[0].split()
    if not words:
        return None
    at = f"{where}:{line}"
    if len(words) != len(FIELDS):
        raise ConfigError(at, shown(" ".join(words)),
                          f"a workload is {len(FIELDS)} fields ({' '.join(FIELDS)}), "
                          f"not {len(words)}")
    name, model, batch, shape, links, hooks, kind = words
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{at}: name", shown(name), "one plain name of up to 64 letters, "
                          "digits and . _ -, not starting with . _ or -: it is the "
                          "workload's directory")
    if not re.fullmatch(r"[1-9][0-9]{0,5}", batch):
        raise ConfigError(f"{at}: batch", shown(batch), "a whole number of samples, 1-4096")
    batch_size = int(batch)
    width = depth = side = None
    if model == "mlp":
        mlp = _MLP_SHAPE.fullmatch(shape)
        if not mlp:
            raise ConfigError(f"{at}: shape", shown(shape),
                              "the MLP's WIDTHxDEPTH, e.g. 1024x4")
        width, depth = int(mlp[1]), int(mlp[2])
    elif shape != "-":
        if not _SIDE.fullmatch(shape):
            raise ConfigError(f"{at}: shape", shown(shape), "the input side in pixels, e.g. "
                              "32, or - for the model's own")
        side = int(shape)
    if kind not in SETS:
        raise ConfigError(f"{at}: set", shown(kind), f"choose from {', '.join(SETS)}")
    try:
        require_range(batch_size, "batch", 1, 4096)
        # The trainer's own checks: a known model, a side it takes, the MLP's bounds.
        if width is not None and depth is not None:
            ModelConfig(model=model, image_size=side, mlp_width=width, mlp_depth=depth)
        else:
            ModelConfig(model=model, image_size=side)
        rates = [parse_rate(link, "links") for link in links.split(",")]
        chosen = parse_choices(hooks, COMM_HOOKS, "hooks")
    except ConfigError as error:   # named as the grid file names the field
        field = next((name for key, name in _FIELD_OF if key in error.flag), error.flag)
        raise ConfigError(f"{at}: {field}", error.value, error.allowed) from None
    if len(set(rates)) != len(rates) or len(set(chosen)) != len(chosen):
        raise ConfigError(f"{at}: links/hooks", shown(f"{links} {hooks}"),
                          "name each link rate and each hook once")
    return Workload(name, model, batch_size, side, width, depth, tuple(links.split(",")),
                    tuple(chosen), kind == "held-out", line)


def parse(text: str, where: str) -> list[Workload]:
    """Every workload of a grid file's text; ``where`` names the file in errors."""
    found: list[Workload] = []
    for number, line in enumerate(text.splitlines(), 1):
        workload = parse_line(line, number, where)
        if workload is None:
            continue
        clash = next((w for w in found if w.name == workload.name), None)
        if clash:
            raise ConfigError(f"{where}:{number}: name", workload.name,
                              f"line {clash.line} has it already: each workload's "
                              "directory is its own")
        found.append(workload)
    if not found:
        raise ConfigError("--grid", where, "holds no workload: one per line, "
                          f"{' '.join(FIELDS)}")
    return found


def load(path: Path) -> list[Workload]:
    """The grid file at ``path``, every value checked (ConfigError names the first bad one)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise ConfigError("--grid", shown_path(path), f"cannot be read ({error.strerror})") \
            from None
    if len(raw) > MAX_BYTES:
        raise ConfigError("--grid", shown_path(path), f"is over {MAX_BYTES} bytes: not a grid file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("--grid", shown_path(path), "is not UTF-8 text") from None
    return parse(text, shown_path(path))


def chosen(grid: list[Workload], names: str | None) -> list[Workload]:
    """The workloads ``names`` (comma-separated) picks, in the grid's order; all for None."""
    if names is None:
        return grid
    wanted = parse_choices(names, tuple(w.name for w in grid), "--workloads")
    return [w for w in grid if w.name in wanted]
