"""The `attnflow` command: a thin shell over the library (`app`), its commands by group (`info`,
`sweep`, `pretrained`, `verify`), the options they share (`options`) and how it speaks (`console`:
messages and exit codes). Its modules import their work lazily, so `attnflow --help` stays fast.

The top layer: may import anything; nothing imports it.
"""

from .app import app, main

__all__ = ["app", "main"]
