"""One exception type for user mistakes, so that the CLI can print it without a traceback."""

import sys
import warnings


class ColdStartError(ValueError):
    """A bad dataset, file or setting. The message names it and says what was expected."""


def exit_status(work, interrupted):
    """``work()``'s exit status: a ColdStartError is one ``error:`` line (2), Ctrl-C the line ``interrupted`` (130);
    RecBole 1.2.1's warnings about its own code on pandas 2 / torch 2 are silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return work()
        except ColdStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(interrupted, file=sys.stderr)
            return 130
