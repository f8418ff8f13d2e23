"""Did-you-mean suggestions for names the user mistyped (settings, models, fields)."""

import difflib


def suggestion(word, choices):
    """``; did you mean 'x'?`` for the closest of ``choices`` (case-insensitive), or nothing."""
    word = str(word).lower()
    lowered = {c.lower(): c for c in sorted(set(map(str, choices)))}
    prefixed = [c for c in lowered if len(word) >= 3 and c.startswith(word)]
    close = difflib.get_close_matches(word, list(lowered), n=3, cutoff=0.6)
    close = [word] if word in lowered else prefixed if len(prefixed) == 1 else [c for c in close if _near(word, c)]
    return "; did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?" if close else ""


def _near(word, choice):
    """A typo, not a shared prefix: at most 2 characters (a quarter of a long word) edited (LightFM is no LightGCN)."""
    opcodes = difflib.SequenceMatcher(None, word, choice).get_opcodes()
    edited = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal")
    return edited <= max(2, len(word) // 4)
