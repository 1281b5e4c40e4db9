"""YAML text of the manifests, without a YAML library on the host."""
from __future__ import annotations

import json
import re

# A small emitter for the manifests (plain dicts, lists, strings, numbers, booleans): block
# style for people, every string that could read as anything else quoted as JSON, which
# YAML reads back as the same string. pyyaml is a host tool, not a runtime dependency.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _yaml(value: object, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines += _yaml(item, indent + 2)
            else:
                lines.append(f"{pad}{_scalar(key)}: {_flat(item)}")
    else:
        assert isinstance(value, list)
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _yaml(item, indent + 2)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_flat(item)}")
    return lines


def _flat(value: object) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def to_yaml(documents: list[dict], header: str = "") -> str:
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + "---\n".join("\n".join(_yaml(doc, 0)) + "\n" for doc in documents)
