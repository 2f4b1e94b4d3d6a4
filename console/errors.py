"""Errors a user caused and can fix: shown as one line, never as a traceback."""


class UserError(Exception):
    """Bad input (a plan file, an argument, a target): the message says what, where and what was expected."""

    exit_code = 2
