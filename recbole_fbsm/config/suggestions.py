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
    close = [c for c in difflib.get_close_matches(str(word).lower(), list(lowered), n=3, cutoff=0.6) if _near(word, c)]
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?"


def _near(word, choice):
    """A typo, not a shared prefix: at most 2 characters (a quarter of a long word) edited (LightFM is no LightGCN)."""
    opcodes = difflib.SequenceMatcher(None, str(word).lower(), choice).get_opcodes()
    edited = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal")
    return edited <= max(2, len(str(word)) // 4)
