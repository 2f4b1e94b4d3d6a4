"""`capcon bench --write-plan`: put a measured capacity into the plan file, everything else left as it was.

The file is read with a round-trip YAML parser (ruamel.yaml) only to find where
`capacity`'s keys and values are; the new values are then spliced into the original
text at those places, so every comment, blank line, flow list and indent of the rest
of the file stays byte for byte (a dump would reflow lists and re-indent). Keys
`capacity` lacks are added under it; a plan without `capacity` gets the block at
its end. The result must load as a plan with the new figure, or nothing is written;
the file is replaced atomically, keeping its permissions.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from console.errors import UserError
from console.plan.model import Capacity, Plan
from console.plan.schema import load_plan, parse_plan

KEYS = ("rps_per_replica", "source", "note", "throughput_tokens_per_second", "throughput_source")
_NUMBERS = ("rps_per_replica", "throughput_tokens_per_second")


class PlanWriteError(UserError):
    pass


def _number(value: float) -> str:
    text = f"{value:.4g}"
    return text if "e" not in text else f"{value:.6f}".rstrip("0").rstrip(".")


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9 ._/-]*[A-Za-z0-9]")
_YAML_WORDS = {"yes", "no", "on", "off", "true", "false", "null", "y", "n"}


def _value_text(key: str, value: float | str) -> str:
    if key in _NUMBERS:
        return _number(float(value))
    text = str(value)
    if key in ("source", "throughput_source") and _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text  # a plain name reads as plainly as `source: manual` does
    return _double_quoted(text)


def _double_quoted(text: str) -> str:
    """A YAML double-quoted scalar: quotes and backslashes escaped, anything unprintable as \\x, \\u or \\U."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _inline_comment(rest: str) -> str:
    """The ` # ...` that follows a one-line scalar (outside quotes), with its spacing; "" when none."""
    quote = None
    for index, char in enumerate(rest):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'" and (index == 0 or rest[index - 1] in " :"):
            quote = char
        elif char == "#" and index > 0 and rest[index - 1] in " \t":
            start = index
            while start > 0 and rest[start - 1] in " \t":
                start -= 1
            return rest[start:]
    return ""


def _aligned(prefix: str, old_line: str, comment: str) -> str:
    """`prefix` and the line's old inline comment, which stays in its column when the new value leaves room."""
    if not comment:
        return prefix + "\n"
    column = len(old_line) - len(comment.lstrip())
    padding = max(1, column - len(prefix)) if len(prefix) < column else max(1, len(comment) - len(comment.lstrip()))
    return f"{prefix}{' ' * padding}{comment.lstrip()}\n"


def _value_end(lines: list[str], line: int, key_indent: int) -> int:
    """The index after the last line of the value that starts on `line` (continuations are indented deeper)."""
    end = line + 1
    while end < len(lines):
        text = lines[end]
        if text.strip() and _indent(text) <= key_indent:
            break
        end += 1
    # Trailing blank or comment lines belong to what follows, not to the value.
    while end > line + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def spliced(text: str, source: str, values: dict[str, float | str]) -> str:
    """`text` with capacity's keys set to `values`; PlanWriteError when the file cannot be edited in place."""
    try:
        data = YAML(typ="rt").load(text)
    except YAMLError as error:
        raise PlanWriteError(f"{source}: not readable YAML ({' '.join(str(error).split())[:120]})") from None
    if not isinstance(data, CommentedMap):
        raise PlanWriteError(f"{source}: not a plan (the top level is not a mapping)")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    capacity = data.get("capacity")
    if "capacity" not in data or capacity is None:
        block = ["capacity:\n"] + [f"  {key}: {_value_text(key, values[key])}\n" for key in KEYS if key in values]
        if "capacity" in data:  # `capacity:` with nothing under it
            line = data.lc.key("capacity")[0]
            lines[line : line + 1] = block
        else:
            lines += (["\n"] if lines and lines[-1].strip() else []) + block
        return "".join(lines)
    if not isinstance(capacity, CommentedMap) or capacity.fa.flow_style():
        line = data.lc.key("capacity")[0] + 1
        raise PlanWriteError(
            f"{source}:{line}: capacity is not a block mapping; expected capacity's keys on lines of their own "
            "to edit in place"
        )
    key_lines = {key: capacity.lc.key(key) for key in capacity}
    # Edit from the bottom up, so the line numbers of what is above stay true.
    edits: list[tuple[int, int, list[str]]] = []
    key_indent = min(col for _, col in key_lines.values())
    for key in KEYS:
        if key not in values or key not in capacity:
            continue
        line, col = key_lines[key]
        value_line, value_col = capacity.lc.value(key)
        end = _value_end(lines, line, key_indent)
        if value_line != line:  # the value starts on a line of its own
            head = lines[line].rstrip("\r\n")
            comment = _inline_comment(head[col + len(str(key)) + 1 :])
            new = _aligned(f"{head[: col + len(str(key)) + 1]} {_value_text(key, values[key])}", head, comment)
        else:
            head = lines[line].rstrip("\r\n")
            comment = _inline_comment(head[value_col:]) if end == line + 1 else ""
            new = _aligned(f"{head[:value_col]}{_value_text(key, values[key])}", head, comment)
        edits.append((line, end, [new]))
    missing = [key for key in KEYS if key in values and key not in capacity]
    if missing:
        last = max(line for line, _ in key_lines.values())
        after = _value_end(lines, last, key_indent)
        added = [f"{' ' * key_indent}{key}: {_value_text(key, values[key])}\n" for key in missing]
        edits.append((after, after, added))
    for start, end, new_lines in sorted(edits, key=lambda edit: edit[0], reverse=True):
        lines[start:end] = new_lines
    return "".join(lines)


def _provisional(draft: Plan) -> Capacity:
    """Check the file as a plan without estimating its capacity (a sweep the edit does not need)."""
    return draft.capacity


def write_capacity(path: str | Path, rps: float, source: str, note: str) -> str:
    """Write the capacity into the plan at `path`; the new text. PlanError / PlanWriteError if it cannot be."""
    return _write(path, {"rps_per_replica": rps, "source": source, "note": note})


def write_throughput(path: str | Path, tokens_per_second: float, source: str) -> str:
    """Write one replica's offline throughput (output tokens/s) into the plan's capacity, the rest kept."""
    return _write(path, {"throughput_tokens_per_second": tokens_per_second, "throughput_source": source})


def _write(path: str | Path, values: dict[str, float | str]) -> str:
    # The file must be a plan before it is edited (and its errors are the loader's).
    plan = load_plan(path, estimate=_provisional)
    new_text = spliced(plan.source_text, str(path), values)
    written = parse_plan(new_text, str(path), estimate=_provisional).capacity
    back: dict[str, float | str | None] = {
        "rps_per_replica": written.rps_per_replica,
        "source": written.source,
        "note": written.note,
        "throughput_tokens_per_second": written.throughput_tokens_per_second,
        "throughput_source": written.throughput_source,
    }
    for key, value in values.items():
        got = back[key]
        if key in _NUMBERS:
            same = isinstance(got, float) and abs(got - float(_number(float(value)))) <= 1e-9 * max(1.0, got)
        else:
            same = got == value or key == "note"  # a note may be cut to the loader's length
        if not same:
            raise PlanWriteError(f"{path}: the edited plan does not read back the new {key}; nothing written")
    target = Path(path)
    target = Path(path)
    mode = target.stat().st_mode & 0o7777
    temporary = ""
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
            handle.write(new_text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as error:
        if temporary:
            Path(temporary).unlink(missing_ok=True)
        raise PlanWriteError(f"{path}: cannot be written ({error.strerror}); nothing changed") from None
    return new_text
