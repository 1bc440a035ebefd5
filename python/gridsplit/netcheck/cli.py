"""The `gridsplit netcheck` command group (being written this session)."""

import click


@click.group()
def netcheck() -> None:
    """(in progress)"""
