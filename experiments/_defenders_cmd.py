"""``medmis defenders``: every registered defender with its options' types, allowed values,
defaults and descriptions.

A description comes from the option's ``Field(description=...)`` or else from the
``Attributes:`` section of the options class docstring (Google style, as the built-ins
document them).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from medmis.tools import json_file

__all__ = ["OptionInfo", "describe_options", "format_type", "load_run_plugins", "run"]


@dataclass(frozen=True)
class OptionInfo:
    """One defender option as the listing shows it."""

    name: str
    type: str
    default: str
    description: str


def format_type(annotation: Any) -> str:
    """A readable type: ``int``, ``str or null``, ``one of 'model', 'sentences'``."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        parts = [format_type(a) for a in typing.get_args(annotation) if a is not type(None)]
        nullable = type(None) in typing.get_args(annotation)
        return " or ".join(parts) + (" or null" if nullable else "")
    if origin is not None:
        args = ", ".join(format_type(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _bounds(info: FieldInfo) -> str:
    shown = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"),
                           ("min_length", "length >="), ("max_length", "length <=")):
            value = getattr(meta, attr, None)
            if value is not None:
                shown.append(f"{sign} {value}")
    return f" ({', '.join(shown)})" if shown else ""


def _docstring_attributes(cls: type) -> dict[str, str]:
    """``Attributes:`` entries of a Google-style class docstring (``a, b: text`` names both)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = klass.__doc__ or ""
        match = re.search(r"^\s*Attributes:\s*$(.*?)(?:^\s*\w[\w ]*:\s*$|\Z)", doc, re.M | re.S)
        if not match:
            continue
        current: list[str] = []
        for line in match.group(1).splitlines():
            head = re.match(r"^\s{4,8}([A-Za-z_][\w, ]*):\s*(.*)$", line)
            if head and not line.startswith(" " * 12):
                current = [n.strip() for n in head.group(1).split(",") if n.strip()]
                for name in current:
                    out[name] = head.group(2).strip()
            elif line.strip() and current:
                for name in current:
                    out[name] = f"{out[name]} {line.strip()}".strip()
    return out


def describe_options(options: type[BaseModel]) -> list[OptionInfo]:
    """The options of a defender's options class, in declaration order."""
    docs = _docstring_attributes(options)
    rows = []
    for name, info in options.model_fields.items():
        default = repr(info.get_default(call_default_factory=True))
        if len(default) > 60:
            default = default[:56] + "...'"
        rows.append(OptionInfo(
            name=name,
            type=format_type(info.annotation) + _bounds(info),
            default=default,
            description=info.description or docs.get(name, ""),
        ))
    return rows


def run(plugins: Sequence[str] = ()) -> int:
    """Print the listing, local plug-in files' defenders included; exit status 0."""
    from medmis.defenses import list_defenders, load_plugins

    load_plugins(plugins)
    for spec in list_defenders():
        tags = [t for t, on in (("uses web tools", spec.uses_tools), ("control", spec.control),
                                ("single call: --batch", spec.single_call),
                                ("deterministic: --batch rounds", spec.deterministic and not spec.single_call)) if on]
        print(spec.name + (f"  [{', '.join(tags)}]" if tags else ""))
        if spec.description:
            print(f"    {spec.description}")
        if spec.source:
            print(f"    source: {spec.source}")
        # what `medmis run --answer-format open` accepts (DefenderSpec.answer_formats)
        print("    answers: " + ("multiple choice and open-ended" if spec.works_with("open")
                                   else "multiple choice only (needs the options)"))
        for opt in describe_options(spec.options):
            print(f"    --defender-option {spec.name}.{opt.name}=<{opt.type}>  (default {opt.default})")
            if opt.description:
                print(f"        {opt.description}")
    return 0


def load_run_plugins(run_dir: Path, notice: Callable[[str], None]) -> None:
    """A run folder's local plug-in files (``--plugin``, recorded in its manifest), loaded
    before its report is rewritten so the verdict knows their controls; a file no longer there
    is said in one line and its defenders are reported without it."""

    from medmis.defenses import load_plugins

    try:
        config = json_file(run_dir / "manifest.json").get("config") or {}
    except (OSError, ValueError, AttributeError):
        return
    for path in config.get("plugins") or []:
        if Path(path).is_file():
            load_plugins([path])
        else:
            notice(f"plug-in {path} (recorded in {run_dir / 'manifest.json'}) is not there; "
                   "its defenders are reported without it")
