"""YAML files with line marks and a JSON schema: what emu's file formats share.

Owns reading a YAML document so that every error is one line naming the
file, the line and the field (`FileError`, whose subclasses are each
format's: `emu.topofile.TopoFileError`, `emu.job.JobFileError`): PyYAML's
syntax errors with their marks, a key given twice in one mapping (PyYAML
keeps the last silently), a document nested deeper than MAX_DEPTH or of
more than MAX_VALUES values with aliases expanded (an alias that contains
itself, a billion-laughs document), and the schema error that comes first
in the file (jsonschema, draft-07), in words a user reads. What a schema
cannot say is each format's own reader's; `Marks` gives it the lines.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple, Union

import yaml

from emu.config import ConfigError

Path_ = Tuple[Union[str, int], ...]

# What a file may hold: an exported k=8 fat-tree is 30 KB, 5 levels deep and
# 3,000 values.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000
# A schema's "format" words, as the error says them.
FORMATS = {"ipv4": "an IPv4 address"}


class FileError(ConfigError):
    """A file of one of emu's formats that cannot be read.

    Its text is one line, ``FILE:LINE: FIELD: what is wrong``, e.g.
    ``topo.yaml:14: links[3].b: unknown node 'leaf9'``.

    Attributes:
        filename: the file as the user named it.
        line: 1-based line, or None when the error is about the whole file.
        field: the field's path (``links[3].b``, ``nodes.leaf1.kind``), or "".
        problem: what is wrong with it.
    """

    def __init__(self, filename: str, line: Optional[int], field_path: str, problem: str):
        self.filename, self.line, self.field, self.problem = filename, line, field_path, problem
        where = filename if line is None else f"{filename}:{line}"
        super().__init__(
            f"{where}: {field_path}: {problem}" if field_path else f"{where}: {problem}"
        )


def field_name(path: Path_) -> str:
    """``("links", 3, "b")`` -> ``links[3].b``; the empty path is the top level."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "top level"


# ---------------------------------------------------------------- YAML with line marks


class Marks:
    """Line numbers of a composed YAML document, looked up by field path."""

    def __init__(self, root: yaml.Node):
        self.root = root

    def _walk(self, path: Path_) -> Tuple[yaml.Node, Optional[yaml.Node]]:
        """The deepest node on `path` and, when the last step is a mapping key, its key node."""
        node, key_node = self.root, None
        for part in path:
            if isinstance(node, yaml.MappingNode):
                found = [(k, v) for k, v in node.value if k.value == part]
                if not found:
                    return node, None
                key_node, node = found[-1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if part >= len(node.value):
                    return node, None
                key_node, node = None, node.value[part]
            else:
                return node, None
        return node, key_node

    def value_line(self, path: Path_) -> int:
        """1-based line of the value at `path` (or of the nearest enclosing one)."""
        return self._walk(path)[0].start_mark.line + 1

    def key_line(self, path: Path_) -> int:
        """1-based line of the key that names `path` (its value's line for a list item)."""
        node, key_node = self._walk(path)
        return (key_node or node).start_mark.line + 1


def _first_duplicate_key(node: yaml.Node, path: Path_ = ()) -> Optional[Tuple[Path_, int, int]]:
    """(path, line, first line) of the first key given twice in one mapping, in file order."""
    if isinstance(node, yaml.MappingNode):
        seen: Dict[Any, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if isinstance(key, yaml.ScalarNode):  # a list or mapping as a key: the schema's
                if key.value in seen:
                    return path + (key.value,), line, seen[key.value]
                seen[key.value] = line
            found = _first_duplicate_key(value, path + (str(key.value),))
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _first_duplicate_key(item, path + (i,))
            if found:
                return found
    return None


def _check_size(root: yaml.Node, filename: str, error: type) -> None:
    """Refuse a document nested deeper than MAX_DEPTH or of more than MAX_VALUES values.

    Walks the composed nodes with aliases expanded, without recursion, and
    stops at the first bound it passes: an alias that contains itself is too
    deep, an alias bomb too many.
    """
    stack = [(root, 1)]
    values = 0
    while stack:
        node, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            raise error(
                filename,
                node.start_mark.line + 1,
                "",
                f"nested deeper than {MAX_DEPTH} levels (an alias that contains itself?)",
            )
        if values > MAX_VALUES:
            raise error(filename, None, "", f"more than {MAX_VALUES} values (aliases expanded)")
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += [(key, depth + 1), (value, depth + 1)]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, depth + 1) for item in node.value]


def parse(
    text: str, filename: str, error: type = FileError, expected: str = "name, nodes and links"
) -> Tuple[Any, Marks]:
    """The document in `text` and its line marks; the first thing wrong raises `error`.

    `error` is the format's FileError subclass, `expected` what the format's
    top level holds (named when the file is empty).
    """
    if len(text) > MAX_FILE_BYTES:
        raise error(
            filename,
            None,
            "",
            f"{len(text)} characters; the file may have at most {MAX_FILE_BYTES}",
        )
    try:
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                raise error(filename, 1, "", f"the file is empty; expected {expected}")
            _check_size(root, filename, error)
            duplicate = _first_duplicate_key(root)
            if duplicate:
                path, line, first = duplicate
                what = "node" if len(path) == 2 and path[0] == "nodes" else "key"
                raise error(
                    filename, line, field_name(path), f"duplicate {what} (first at line {first})"
                )
            doc = loader.construct_document(root)
        finally:
            loader.dispose()
    except FileError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        column = f" (column {mark.column + 1})" if mark else ""
        problem = f"YAML syntax: {exc.problem or exc.context or 'not YAML'}{column}"
        if exc.problem and exc.context and exc.context_mark:
            # An unclosed bracket is noticed far below: say where it was opened.
            problem += f", {exc.context} that starts at line {exc.context_mark.line + 1}"
        raise error(filename, line, "", problem) from None
    except yaml.YAMLError as exc:  # a reader error (bad bytes) carries no problem mark
        raise error(filename, None, "", f"YAML: {_one_line(exc)}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise error(
            filename, None, "", f"YAML: nested too deep (at most {MAX_DEPTH} levels)"
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A tagged or implicit value PyYAML cannot build (`2001-13-01` as a date).
        raise error(filename, None, "", f"YAML: a value cannot be read: {exc}") from None
    return doc, Marks(root)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


# ---------------------------------------------------------------- schema


def schema_error(
    doc: Any, marks: Marks, filename: str, schema: Dict[str, Any], error: type = FileError
) -> Optional[FileError]:
    """The `schema` error that comes first in the file, as an `error`; None if valid."""
    import jsonschema  # only here: the graph-only paths of emu import without it

    # Draft 7 counts 2.0 as an integer; a reader that then uses it as a count would
    # fail far from the file, so here an integer is what YAML reads as one.
    checker = jsonschema.Draft7Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    strict = jsonschema.validators.extend(jsonschema.Draft7Validator, type_checker=checker)
    validator = strict(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = [_describe(e, marks, filename, error) for e in validator.iter_errors(doc)]
    return min(errors, key=lambda e: (e.line or 0, e.field)) if errors else None


def _describe(found, marks: Marks, filename: str, error: type) -> FileError:
    path: Path_ = tuple(found.absolute_path)
    here = field_name(path)
    value = found.instance
    message = found.schema.get("x-emu-message") if isinstance(found.schema, dict) else None
    if "propertyNames" in found.absolute_schema_path:  # a node name: the key itself is wrong
        message = message or "is not an allowed name"
        return error(
            filename,
            marks.key_line(path + (value,)),
            field_name(path + (value,)),
            f"{value!r} {message}",
        )
    if message:
        # A bound's words (emu.config.Bound.allowed) follow the value as `--set`'s do.
        sep = ": " if message.startswith("must be") else " "
        return error(filename, marks.value_line(path), here, f"{show(value)}{sep}{message}")
    if found.validator == "required":
        missing = found.message.split("'")[1]
        return error(
            filename, marks.value_line(path), field_name(path + (missing,)), "missing field"
        )
    if found.validator == "additionalProperties":
        allowed = sorted(found.schema.get("properties", {}))
        extra = sorted(set(value) - set(allowed), key=str)[0]
        return error(
            filename,
            marks.key_line(path + (extra,)),
            field_name(path + (extra,)),
            f"unknown field; allowed: {', '.join(allowed)}",
        )
    if found.validator == "enum":
        allowed = ", ".join(str(v) for v in found.validator_value)
        return error(
            filename, marks.value_line(path), here, f"{show(value)} is not one of {allowed}"
        )
    if found.validator == "type":
        return error(
            filename,
            marks.value_line(path),
            here,
            f"{show(value)} is not {_a(found.validator_value)}",
        )
    if found.validator == "format":
        return error(
            filename,
            marks.value_line(path),
            here,
            f"{show(value)} is not {FORMATS.get(found.validator_value, found.validator_value)}",
        )
    if found.validator in ("minProperties", "minItems") and not value:
        return error(filename, marks.value_line(path), here, "is empty")
    return error(filename, marks.value_line(path), here, found.message)


def show(value: Any, limit: int = 40) -> str:
    """The value as the file spelled it, cut to `limit` characters (one readable line)."""
    try:
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError):  # a key json cannot write, a loop
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _a(json_type: Any) -> str:
    names = {"object": "a mapping", "array": "a list", "string": "a string"}
    names.update({"integer": "an integer", "number": "a number", "boolean": "true or false"})
    return names.get(json_type, str(json_type))
