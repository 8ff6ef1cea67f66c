"""`python -m attnflow.cli`: the `attnflow` command."""

from .app import main

main()
