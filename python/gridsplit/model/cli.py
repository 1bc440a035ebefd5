"""The `gridsplit model` command group (being written this session)."""

import click


@click.group()
def model() -> None:
    """(in progress)"""
