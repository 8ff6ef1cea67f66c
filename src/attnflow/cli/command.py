"""How every `attnflow` command prints its help: arguments and values named in plain capitals
(`DIR`, `FILE...`, `--beta NUMBER`), never Python's types (`<list[Path]>`, `{directory}`).

Each command is registered with `cls=Command`. An argument shows its metavar (default: its name in
capitals); an option that takes a value shows its metavar or a word for its type (INTEGER,
NUMBER, TEXT, PATH, or its choices).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand

__all__ = ["TYPE_WORDS", "Command", "metavar"]

#: the names of a parameter's type (click's, or Typer's `<int>`) -> the word shown for its value
TYPE_WORDS = {
    "integer": "INTEGER",
    "int": "INTEGER",
    "integer range": "INTEGER",
    "int range": "INTEGER",
    "float": "NUMBER",
    "float range": "NUMBER",
    "text": "TEXT",
    "str": "TEXT",
    "path": "PATH",
    "file": "FILE",
    "filename": "FILE",
    "boolean": "BOOLEAN",
    "bool": "BOOLEAN",
}


def _type_name(param: Any, ctx: Any) -> str:
    """The name of param's type: click's (`param.type`) or Typer's display without the brackets."""
    kind = getattr(param, "type", None)
    if kind is not None:
        choices = getattr(kind, "choices", None)
        return "|".join(map(str, choices)) if choices else str(getattr(kind, "name", ""))
    display = getattr(param, "display_type", None)
    return str(display(ctx) or "").strip("<>") if callable(display) else ""


def metavar(param: Any, ctx: Any = None) -> str:
    """What stands for the value of `param` in the help: its metavar, else a word for its type
    (an argument: its name in capitals), with "..." when it takes several."""
    word = param.metavar
    if word is None and param.param_type_name == "argument":
        word = (param.name or "value").upper()
    if word is None:
        name = _type_name(param, ctx)
        word = name if "|" in name else TYPE_WORDS.get(name, "VALUE")
    return f"{word}..." if param.nargs == -1 else word


class Command(TyperCommand):
    """A Typer command whose usage line and help name every value by `metavar`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                word = metavar(param)
                pieces.append(word if param.required else f"[{word}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                arguments.append((metavar(param), _argument_help(param)))
            elif param.param_type_name == "option" and not getattr(param, "hidden", False):
                takes_value = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
                if param.metavar is None and takes_value:
                    param.metavar = metavar(param, ctx)
                record = param.get_help_record(ctx)
                if record is not None:
                    options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_help(param: Any) -> str:
    text = getattr(param, "help", None) or ""
    if param.default is not None and not param.required:
        text += f"  [default: {param.default}]"
    return text
