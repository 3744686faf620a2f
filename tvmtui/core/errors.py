"""Errors the user can act on: printed as one line, exit code 2."""


class UserError(Exception):
    """Bad input: the message names the problem and what to do about it."""
