"""The help formatter of gradstream's command lines: every option's default in its help."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`ArgumentDefaultsHelpFormatter` that says nothing where the default is no value (None,
    an empty list, an unset flag): such an option's help says in words what happens
    without it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""  # argparse calls this only for an action with help
        default = action.default
        if (
            "%(default)" in text
            or default is argparse.SUPPRESS
            or default is None
            or default == []
            or (action.nargs == 0 and default is False)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"
