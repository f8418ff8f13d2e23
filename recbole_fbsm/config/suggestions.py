"""Did-you-mean suggestions for names the user mistyped (settings, models, fields)."""

import difflib


def suggestion(word, choices):
    """``; did you mean 'x'?`` for the closest of ``choices`` (case-insensitive), or nothing."""
    choices = sorted(set(map(str, choices)))
    lowered = {c.lower(): c for c in choices}
    if str(word).lower() in lowered:
        return f"; did you mean {lowered[str(word).lower()]!r}?"
    prefixed = [c for c in lowered if len(str(word)) >= 3 and c.startswith(str(word).lower())]
    if len(prefixed) == 1:
        return f"; did you mean {lowered[prefixed[0]]!r}?"
    close = difflib.get_close_matches(str(word).lower(), list(lowered), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?"
