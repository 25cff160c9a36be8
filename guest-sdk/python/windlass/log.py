"""Logging into the host's log, tagged with the plugin's name.

Inside the component (once `windlass.export` has run) the lines go through the WIT `log`
import; natively, in unit tests, they go to stderr as `[level] message`.
"""

import sys

_LEVELS = ("debug", "info", "warn", "error")

# Set by the WIT glue to a function of (level index, message); None natively.
_sink = None


def _log(level: int, message: str) -> None:
    if _sink is not None:
        _sink(level, str(message))
    else:
        print(f"[{_LEVELS[level]}] {message}", file=sys.stderr)


def debug(message: str) -> None:
    """A debug line."""
    _log(0, message)


def info(message: str) -> None:
    """An info line."""
    _log(1, message)


def warn(message: str) -> None:
    """A warning."""
    _log(2, message)


def error(message: str) -> None:
    """An error."""
    _log(3, message)
