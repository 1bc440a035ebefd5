"""User-facing errors.

Anything a user can cause (a bad file, a missing tool, a lab in the wrong state)
raises GridsplitError with one line that says what is wrong and how to fix it; the
CLI prints that line and exits non-zero, never a traceback.
"""


class GridsplitError(Exception):
    """An error whose message is fit to show the user as is."""

    exit_code = 2


class FidelityError(GridsplitError):
    """The lab cannot be trusted: a measurement missed its fidelity bound."""

    exit_code = 3
