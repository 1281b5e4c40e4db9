"""A JSON Schema checker for the record schemas, in the standard library alone.

``compile_schema`` turns a schema into nested closures, once: it implements the JSON Schema
2020-12 keywords the two record schemas use (``format`` is an annotation, as jsonschema has
it by default) and gives jsonschema's verdicts (tests/test_readers.py checks both on valid
and broken records). It exists because readers check every line of a results file: it is
over ten times faster than jsonschema (~50 us against ~750 us for a real record), and the
trainer image, which reads results too, has no jsonschema. A schema that came to use a
keyword it lacks raises UnsupportedSchema (``bench.record`` then falls back to jsonschema).
"""
from __future__ import annotations

import re


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."

_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description",
                          "format", "default", "examples", "deprecated", "readOnly",
                          "writeOnly"})
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}
_is_number = _TYPES["number"]


class UnsupportedSchema(ValueError):
    """The schema uses a keyword ``compile_schema`` does not implement."""


def _equal(a, b) -> bool:
    """JSON equality, as jsonschema has it: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def compile_schema(root: dict, strict: bool = True):
    """A function value -> None when ``value`` is valid against ``root``, else (path,
    message) of its first problem, the path innermost first (collected on the way out).
    ``strict``: UnsupportedSchema on a keyword it does not know (else it is left unchecked)."""
    compiled: dict[int, object] = {}

    def resolve(ref: str) -> object:
        if not ref.startswith("#"):
            raise UnsupportedSchema(f"$ref {ref}: only local references")
        target = root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target[int(part)] if isinstance(target, list) else target[part]
        return target

    def build(schema) -> object:
        if schema is True or schema == {}:
            return lambda v: None
        if schema is False:
            return lambda v: ([], "False schema does not allow " + _short(repr(v), 80))
        key = id(schema)
        if key in compiled:
            return compiled[key]
        checks: list = []

        def all_checks(v):
            for check in checks:
                problem = check(v)
                if problem:
                    return problem
            return None

        # Registered before its parts are built: a schema that refers to itself works.
        compiled[key] = all_checks
        unknown = schema.keys() - _KEYWORDS - _ANNOTATIONS - {"then", "else"}
        if unknown and strict:
            raise UnsupportedSchema(", ".join(sorted(unknown)))
        for keyword in _KEYWORDS:
            if keyword in schema:
                made = _KEYWORDS[keyword](schema, build, resolve)
                if made is not None:
                    checks.append(made)
        if len(checks) == 1:  # skip the loop of one
            compiled[key] = checks[0]
        return compiled[key]

    return build(root)


def _k_ref(schema, build, resolve):
    return build(resolve(schema["$ref"]))


# The Python types json.loads makes for each JSON type: the quick test of ``type``.
_PY_TYPES = {"object": (dict,), "array": (list,), "string": (str,), "null": (type(None),),
             "boolean": (bool,), "number": (int, float), "integer": (int,)}


def _k_type(schema, build, resolve):
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    quick = frozenset(t for n in names for t in _PY_TYPES[n])
    tests = tuple(_TYPES[n] for n in names)
    shown = ", ".join(map(repr, names))

    def check(v):
        if type(v) in quick or any(t(v) for t in tests):  # any(): 1.0 as an integer
            return None
        return [], f"{_short(repr(v), 80)} is not of type {shown}"
    return check


def _k_const(schema, build, resolve):
    const = schema["const"]
    return lambda v: None if _equal(v, const) else ([], f"{const!r} was expected")


def _k_enum(schema, build, resolve):
    options = schema["enum"]
    return lambda v: None if any(_equal(v, o) for o in options) else \
        ([], f"{_short(repr(v), 80)} is not one of {options!r}")


def _bound(keyword: str, fails, says: str):
    def make(schema, build, resolve):
        limit = schema[keyword]
        return lambda v: ([], f"{v!r} {says} {limit}") if _is_number(v) and fails(v, limit) \
            else None
    return make


def _length(keyword: str, kind, fails, says: str):
    def make(schema, build, resolve):
        limit = schema[keyword]
        return lambda v: ([], f"{_short(repr(v), 80)} {says}") \
            if isinstance(v, kind) and fails(len(v), limit) else None
    return make


def _k_pattern(schema, build, resolve):
    pattern = re.compile(schema["pattern"])
    return lambda v: ([], f"{_short(repr(v), 80)} does not match {pattern.pattern!r}") \
        if isinstance(v, str) and not pattern.search(v) else None


def _k_items(schema, build, resolve):
    item = build(schema["items"])

    def check(v):
        if isinstance(v, list):
            for index, element in enumerate(v):
                problem = item(element)
                if problem:
                    problem[0].append(index)
                    return problem
        return None
    return check


def _k_required(schema, build, resolve):
    names = tuple(schema["required"])

    def check(v):
        if isinstance(v, dict):
            for name in names:
                if name not in v:
                    return [], f"{name!r} is a required property"
        return None
    return check


def _k_properties(schema, build, resolve):
    properties = {name: build(sub) for name, sub in schema["properties"].items()}

    def check(v):
        if isinstance(v, dict):
            for name, value in v.items():
                sub = properties.get(name)
                if sub is not None:
                    problem = sub(value)
                    if problem:
                        problem[0].append(name)
                        return problem
        return None
    return check


def _k_additional(schema, build, resolve):
    extra, known = build(schema["additionalProperties"]), schema.get("properties", {})

    def check(v):
        if isinstance(v, dict):
            for name in v:
                if name not in known:
                    problem = extra(v[name])
                    if problem:
                        problem[0].append(name)
                        return problem
        return None
    return check


def _k_property_names(schema, build, resolve):
    name_check = build(schema["propertyNames"])

    def check(v):
        if isinstance(v, dict):
            for name in v:
                problem = name_check(name)
                if problem:
                    problem[0].append(name)
                    return problem
        return None
    return check


def _k_all_of(schema, build, resolve):
    parts = [build(s) for s in schema["allOf"]]

    def check(v):
        for part in parts:
            problem = part(v)
            if problem:
                return problem
        return None
    return check


def _k_any_of(schema, build, resolve):
    parts = [build(s) for s in schema["anyOf"]]
    return lambda v: None if any(c(v) is None for c in parts) else \
        ([], f"{_short(repr(v), 80)} is not valid under any of the given schemas")


def _k_one_of(schema, build, resolve):
    parts = [build(s) for s in schema["oneOf"]]
    return lambda v: None if sum(c(v) is None for c in parts) == 1 else \
        ([], f"{_short(repr(v), 80)} is not valid under exactly one of the given schemas")


def _k_not(schema, build, resolve):
    part = build(schema["not"])
    return lambda v: ([], f"{_short(repr(v), 80)} should not be valid under "
                          f"{_short(repr(schema['not']), 80)}") if part(v) is None else None


def _k_if(schema, build, resolve):
    condition = build(schema["if"])
    then = build(schema.get("then", True))
    otherwise = build(schema.get("else", True))
    return lambda v: then(v) if condition(v) is None else otherwise(v)


# In the order they are checked, as jsonschema reports the first problem it meets.
_KEYWORDS = {
    "$ref": _k_ref,
    "type": _k_type,
    "const": _k_const,
    "enum": _k_enum,
    "minimum": _bound("minimum", lambda v, m: v < m, "is less than the minimum of"),
    "maximum": _bound("maximum", lambda v, m: v > m, "is greater than the maximum of"),
    "exclusiveMinimum": _bound("exclusiveMinimum", lambda v, m: v <= m,
                               "is less than or equal to the minimum of"),
    "exclusiveMaximum": _bound("exclusiveMaximum", lambda v, m: v >= m,
                               "is greater than or equal to the maximum of"),
    "minLength": _length("minLength", str, lambda n, m: n < m, "is too short"),
    "maxLength": _length("maxLength", str, lambda n, m: n > m, "is too long"),
    "pattern": _k_pattern,
    "minItems": _length("minItems", list, lambda n, m: n < m, "is too short"),
    "maxItems": _length("maxItems", list, lambda n, m: n > m, "is too long"),
    "maxProperties": _length("maxProperties", dict, lambda n, m: n > m,
                             "has too many properties"),
    "items": _k_items,
    "required": _k_required,
    "properties": _k_properties,
    "additionalProperties": _k_additional,
    "propertyNames": _k_property_names,
    "allOf": _k_all_of,
    "anyOf": _k_any_of,
    "oneOf": _k_one_of,
    "not": _k_not,
    "if": _k_if,
}
