"""Options that several commands share, defined once (Typer `Annotated` types).

A command declares e.g. `pdf: PdfOption = False`; the flag, its short form and its help live here.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["AnimationOption", "PdfOption", "SetOption"]

PdfOption = Annotated[
    bool, typer.Option("--pdf", help="also write every figure as PDF (vector, for a paper)")
]
AnimationOption = Annotated[
    bool,
    typer.Option("--animation/--no-animation", help="also write the token animation (GIF; MP4 with ffmpeg)"),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="override a parameter (of the base config, for a sweep): key=value, value a TOML literal; "
        "repeatable",
    ),
]
