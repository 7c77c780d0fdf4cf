"""``rlvr-actor config-doc``: every config option as Markdown, generated from the types.

It walks ``rlvr.cli.run_config.Config`` and every msgspec Struct reachable
from it (tagged unions give one table per variant, an optional struct gets
its own table), and prints one table per TOML section with each key's type
(bounds from ``Annotated[..., Meta(...)]``), its default *in that place*
(``[learn.sampling]`` shows the defaults ``LearnConfig`` gives it, not
``SamplingParams``' own), and its meaning.

The meaning is the comment written directly above the field in the source,
or the comment at the end of its line (both, when a field has both); a
section's text is its struct's docstring, else the comment on the field that
holds it. Types and defaults come from ``msgspec.inspect``, comments from
``tokenize`` over ``inspect.getsource``: nothing is written twice, so the
reference cannot drift from the code.

Not covered: validation across fields (``__post_init__`` rules) and the
verifier parameters that travel inside a task's ``VerifierSpec.params``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import io
import json
import textwrap
import tokenize
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi


@dataclass(frozen=True)
class FieldComment:
    text: str  # "" when the field has no comment
    where: str  # "path/to/file.py:LINE" of the field


def field_comments(cls: type) -> dict[str, FieldComment]:
    """The comment of every annotated field of ``cls`` and the Structs it
    derives from: the comment lines directly above it (no blank line
    between), then its trailing comment."""
    out: dict[str, FieldComment] = {}
    for base in reversed(cls.__mro__):
        if base is cls or (issubclass(base, msgspec.Struct) and base is not msgspec.Struct):
            out.update(_own_field_comments(base))
    return out


@functools.cache
def _own_field_comments(cls: type) -> dict[str, FieldComment]:
    lines, first = inspect.getsourcelines(cls)
    source = textwrap.dedent("".join(lines))  # a class nested in a function is indented
    path = _relative(inspect.getsourcefile(cls) or "?")
    comments: dict[int, str] = {}  # line -> comment text
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    out: dict[str, FieldComment] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and line not in code_lines:
            above.insert(0, comments[line])
            line -= 1
        trailing = [comments[i] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1) if i in comments]
        text = " ".join(t for t in above + trailing if t)
        out[node.target.id] = FieldComment(text, f"{path}:{first + node.lineno - 1}")
    return out


def _relative(path: str) -> str:
    """``path`` relative to the repository root when it lies inside it."""
    root = Path(__file__).resolve().parents[1]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def struct_doc(cls: type) -> str:
    doc = cls.__doc__
    if not doc or doc == msgspec.Struct.__doc__:
        return ""
    return " ".join(inspect.cleandoc(doc).split()).replace("``", "`")


# --- the walk ------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    type: str
    default: str
    meaning: str
    where: str = ""  # file:line of the field ("" for a tag row)
    # A section-valued field whose struct(s) carry a docstring is documented by it.
    section_doc: bool = False


@dataclass
class Section:
    path: str  # "learn.engine.loss"; "" for the top level
    variant: str  # 'kind = "hf"' for a tagged-union member, else ""
    condition: str  # the variants of enclosing sections this one lives under
    text: str
    rows: list[Row] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"[{self.path}]" if self.path else "top level"


def _struct_types(t: mi.Type) -> list[mi.StructType]:
    if isinstance(t, mi.StructType):
        return [t]
    if isinstance(t, mi.UnionType):
        return [s for s in t.types if isinstance(s, mi.StructType)]
    if isinstance(t, (mi.ListType, mi.VarTupleType)):  # [[stages]]: a table per item
        return _struct_types(t.item_type)
    return []


def _is_optional(t: mi.Type) -> bool:
    return isinstance(t, mi.UnionType) and any(isinstance(s, mi.NoneType) for s in t.types)


def walk(root: type) -> list[Section]:
    """Every section reachable from ``root`` (the run ``Config``, which the caller
    passes: this module never imports a role's config), depth first."""
    info = mi.type_info(root)
    out: list[Section] = []
    _walk(info, path="", variant="", condition="", text=struct_doc(root), instance=_default_instance(root), out=out)
    return out


def _default_instance(cls: type) -> Any:
    try:
        return cls()
    except (TypeError, ValueError, msgspec.ValidationError):  # a struct with required fields
        return None


def _walk(
    info: mi.StructType, *, path: str, variant: str, condition: str, text: str, instance: Any, out: list[Section]
) -> None:
    section = Section(path, variant, condition, text)
    out.append(section)
    comments = field_comments(info.cls)
    hints = typing.get_type_hints(info.cls, include_extras=True)
    if info.tag_field is not None:
        section.rows.append(Row(info.tag_field, _literal(info.tag), "", "selects this variant"))
    children = []
    for f in info.fields:
        value = getattr(instance, f.name) if instance is not None else _class_default(f)
        comment = comments.get(f.name, FieldComment("", ""))
        structs = _struct_types(f.type)
        declared = _literal_order(hints.get(f.name))
        section.rows.append(Row(f.name, render_type(f.type, f"{path}.{f.name}".lstrip("."), declared),
                                render_default(value, structs), comment.text, comment.where,
                                bool(structs) and all(struct_doc(x.cls) for x in structs)))
        if structs:
            children.append((f, structs, value, comment.text))
    for f, structs, value, meaning in children:
        child_path = f"{path}.{f.name}".lstrip(".")
        for s in structs:
            tagged = s.tag_field is not None
            here = f"{s.tag_field} = {_literal(s.tag)}" if tagged else ""
            inst = value if isinstance(value, s.cls) else None
            if inst is None and not (tagged or _is_optional(f.type)):
                inst = _default_instance(s.cls)
            # The holding field's comment says what the section is for here (a
            # variant's is in the parent table already); the docstring, what it is.
            texts = ([] if tagged else [meaning]) + [struct_doc(s.cls)]
            if _is_optional(f.type):
                texts.insert(0, "Optional: absent means unset.")
            note = " ".join(dict.fromkeys(t for t in texts if t))
            parent = ", ".join(x for x in (condition, f"[{path}] {variant}" if variant and path else variant) if x)
            _walk(s, path=child_path, variant=here, condition=parent, text=note, instance=inst, out=out)


def _literal_order(annotation: Any) -> list[Any]:
    """Literal values in the order the annotation declares them (msgspec sorts them)."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [v for arg in typing.get_args(annotation) for v in _literal_order(arg)]


def _class_default(f: mi.Field) -> Any:
    if f.default is not msgspec.NODEFAULT:
        return f.default
    if f.default_factory is not msgspec.NODEFAULT:
        return f.default_factory()
    return msgspec.NODEFAULT


# --- rendering -----------------------------------------------------------------------


def _literal(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)


def _bounds(t: mi.IntType | mi.FloatType) -> str:
    lo = f"[{_num(t.ge)}" if t.ge is not None else f"({_num(t.gt)}" if t.gt is not None else None
    hi = f"{_num(t.le)}]" if t.le is not None else f"{_num(t.lt)})" if t.lt is not None else None
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>=' if lo[0] == '[' else '>'} {lo[1:]}"
    if hi:
        return f" {'<=' if hi[-1] == ']' else '<'} {hi[:-1]}"
    return ""


def render_type(t: mi.Type, path: str = "", declared: list[Any] | None = None) -> str:
    """A human-readable type: ``int in [1, 256]``, ``"file" or "memory"``, ``list of string``...;
    ``declared`` orders literal values as the source wrote them."""
    order = {v: i for i, v in enumerate(declared or [])}
    match t:
        case mi.IntType() | mi.FloatType():
            return ("int" if isinstance(t, mi.IntType) else "float") + _bounds(t)
        case mi.StrType():
            return "string"
        case mi.BoolType():
            return "bool"
        case mi.NoneType():
            return "unset"
        case mi.AnyType():
            return "any"
        case mi.LiteralType():
            values = sorted(t.values, key=lambda v: order.get(v, len(order)))
            return " or ".join(_literal(v) for v in values)
        case mi.StructType():
            if t.tag_field is not None:
                return f"section [{path}] with {t.tag_field} = {_literal(t.tag)}"
            return f"section [{path}]"
        case mi.UnionType():
            structs = _struct_types(t)
            optional = " (optional)" if _is_optional(t) else ""
            if structs and all(s.tag_field for s in structs):
                kinds = " or ".join(_literal(s.tag) for s in structs)
                return f"section [{path}], {structs[0].tag_field} = {kinds}{optional}"
            rest = [render_type(s, path, declared) for s in t.types if not isinstance(s, mi.NoneType)]
            return " or ".join(rest) + optional
        case mi.VarTupleType() | mi.ListType() | mi.SetType() | mi.FrozenSetType():
            return f"list of {render_type(t.item_type, path, declared)}"
        case mi.TupleType():
            return "[" + ", ".join(render_type(x, path, declared) for x in t.item_types) + "]"
        case mi.DictType():
            return f"table of {render_type(t.value_type, path, declared)}"
    return type(t).__name__.removesuffix("Type").lower()


def render_default(value: Any, structs: list[mi.StructType] | None = None) -> str:
    """A default as one would write it in TOML; "required" when there is none."""
    if value is msgspec.NODEFAULT:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, msgspec.Struct):
        cfg = value.__struct_config__
        if cfg.tag_field is not None:
            return f"{cfg.tag_field} = {_literal(cfg.tag)}"
        return "(section below)"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(render_default(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {render_default(v)}" for k, v in value.items()) + " }"
    return _literal(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(sections: list[Section]) -> str:
    parts = [
        "# Configuration reference",
        "",
        "Generated by `rlvr-actor config-doc` from the config types and the comments on their fields. "
        "A run config is TOML; every key is optional unless its default says *required*, and an "
        "unknown key is an error that names it. A section whose type lists several `kind` (or `type`) "
        "values is a tagged variant: set that key to choose one, and only that variant's keys apply.",
    ]
    for s in sections:
        heading = s.title + (f" ({s.variant})" if s.variant else "")
        parts += ["", f"## {heading}", ""]
        if s.condition:
            parts += [f"*Applies when: {s.condition}.*", ""]
        if s.text:
            parts += [s.text, ""]
        parts += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for r in s.rows:
            default = f"`{_cell(r.default)}`" if r.default not in ("", "required", "(section below)") else r.default
            parts.append(f"| `{r.key}` | {_cell(r.type)} | {default} | {_cell(r.meaning)} |")
    return "\n".join(parts) + "\n"


DESCRIPTION = "Print every config option with its type, default and meaning (Markdown)."


class Args(msgspec.Struct, frozen=True, kw_only=True):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: Args) -> int:
    import sys

    from rlvr.cli.run_config import Config

    try:
        print(config_doc(Config))
    except BrokenPipeError:  # `rlvr-actor config-doc | head`
        sys.stderr.close()
    return 0


def config_doc(root: type) -> str:
    """The whole configuration reference of ``root``, as Markdown."""
    return render_markdown(walk(root))


def undocumented(root: type) -> list[str]:
    """``file:line key`` of every reachable config field without a comment (a
    section-valued field counts as documented when its struct has a docstring)."""
    seen: dict[str, str] = {}
    for s in walk(root):
        for r in s.rows:
            if r.where and not r.meaning and not r.section_doc:
                seen.setdefault(r.where, f"{r.where} {s.path + '.' if s.path else ''}{r.key}")
    file_line = lambda w: (w.rpartition(":")[0], int(w.rpartition(":")[2]))  # noqa: E731
    return [seen[w] for w in sorted(seen, key=file_line)]


__all__ = ["FieldComment", "Row", "Section", "config_doc", "field_comments", "render_default",
           "render_markdown", "render_type", "struct_doc", "undocumented", "walk"]
