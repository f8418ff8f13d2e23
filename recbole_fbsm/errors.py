"""One exception type for user mistakes, so that the CLI can print it without a traceback."""


class ColdStartError(ValueError):
    """A bad dataset, file or setting. The message names it and says what was expected."""
