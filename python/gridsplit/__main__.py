"""`python -m gridsplit` is the `gridsplit` command."""

from .cli import main

main()
