"""Value checks for settings: each takes a value and returns what was expected (a ``Problem``) or None."""

import codecs
import functools
import math
import re

from recbole_fbsm.config.paths import PACKAGE_DIR, recbole_dir
from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.runtime.openmp import usable_cores

SEED_MAX = 2**32 - 1  # numpy's legacy seeding, which RecBole's init_seed uses


@functools.lru_cache(maxsize=1)
def metric_names():
    """{lower-case metric name: (display name, is a top-k metric)} of RecBole's and the plugin's metrics."""
    names = {}
    for path in (recbole_dir() / "evaluator" / "metrics.py", PACKAGE_DIR / "evaluation" / "metrics.py"):
        for name, base in re.findall(r"^class (\w+)\((\w+)\)", path.read_text(encoding="utf-8"), re.M):
            if base.endswith("Metric") and not name.endswith("Metric"):
                names[name.lower()] = (name, base == "TopkMetric")
    return names


def as_list(value):
    """A setting that takes one value or a list of them (``topk``, ``metrics``), as a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def encoding_name(value):
    """A codec Python knows: an unknown one is otherwise a LookupError traceback deep in the data reader."""
    try:
        codecs.lookup(value)
    except (LookupError, TypeError):
        return Problem("the name of a text encoding Python knows, e.g. utf-8 or latin-1", value)


class Problem(str):
    """What was expected (the text), what was found (``got``) and a hint (``did you mean``)."""

    def __new__(cls, expected, got=None, hint=""):
        problem = super().__new__(cls, expected)
        problem.got, problem.hint = got, hint
        return problem


def number(low=None, high=None, integer=False, strict=False):
    """A finite number (an integer with ``integer``) from ``low`` to ``high``, both excluded with ``strict``."""
    kind = "an integer" if integer else "a number" if low is not None else "a finite number"
    bound = (
        f" from {low} to {high}" + (" (exclusive)" if strict else "")
        if high is not None
        else ("" if low is None else f" {'>' if strict else '>='} {low}")
    )
    named = {0: "a non-negative integer", 1: "a positive integer"} if integer and high is None else {}
    expected = named.get(low, kind + bound)

    def check(value):
        fits = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
        if (
            not fits
            or not (isinstance(value, int) or math.isfinite(value))
            or (low is not None and value < low)
            or (high is not None and value > high)
            or (strict and value in (low, high))
        ):
            return expected

    return check


def flag(value):
    if not isinstance(value, bool):
        return "True or False"


def unchecked(value):
    """Any value: RecBole reads it and says what it expected."""


def text(value):
    if not isinstance(value, str) or not value:
        return "a non-empty text"


def thread_count(value):
    """``auto`` (``runtime.threads``) or 1 to the machine's cores: more threads than cores only wait on each other."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    cores = usable_cores(environ={})  # OMP_NUM_THREADS does not bind torch.set_num_threads
    if number(1, cores, integer=True)(value):
        hint = suggestion(value, ["auto"]) if isinstance(value, str) else ""
        return Problem(f"auto or an integer from 1 to {cores} (this machine's cores)", value, hint)


def choice(options, case=False):
    def check(value):
        if (value.lower() if isinstance(value, str) and not case else value) not in options:
            return Problem("one of " + ", ".join(options), value, suggestion(value, options))

    return check


def optional(inner):
    def check(value):
        problem = None if value is None else inner(value)
        if problem is not None:
            return Problem(f"{problem} (or ~)", getattr(problem, "got", None), getattr(problem, "hint", ""))

    return check


def list_of(item, expected, single=False, empty=False, length=None, total=None):
    """A list (``empty`` may be) whose every element passes ``item`` (``single``: or one element alone), of ``length``
    elements summing to ``total``; ``expected`` otherwise (or the element's own ``Problem``)."""

    def check(value):
        values = [value] if single and not isinstance(value, (list, tuple)) else value
        if not isinstance(values, (list, tuple)) or not (values or empty) or length not in (None, len(values)):
            return expected
        problems = [item(v) for v in values if item(v)]
        if problems:
            return problems[0] if getattr(problems[0], "got", None) is not None else expected
        if total is not None and abs(sum(values) - total) > 1e-6:
            return expected

    return check


def metric(value):
    """One of RecBole's or the plugin's metric names (any case)."""
    if isinstance(value, str) and value.lower() not in metric_names():
        names = sorted(display for display, _ in metric_names().values())
        return Problem(f"metric names among {', '.join(names)}", value, suggestion(value, names))
    return None if isinstance(value, str) else "a metric name"


def field_names(nonempty=False):
    """Field names, none twice (a repeated feature field counted its features twice)."""

    def check(value):
        if value == [] and nonempty:
            return "at least one field name, e.g. [genre, words] (~ for every token field of the .item file)"
        if list_of(text, "-", empty=True)(value):
            return "a list of field names, e.g. [genre, words]"
        if len(set(value)) < len(value):
            return "a list of distinct field names, e.g. [genre, words]"

    return check


def mapping_of(value_check, example, keys=None):
    """A mapping like ``example`` of ``value_check``'s values; with ``keys``, only these (each with its own check)."""

    def check(value):
        if not isinstance(value, dict):
            return f"a mapping like {example}"
        for key, item in value.items():
            if keys is not None and key not in keys:
                return Problem(f"keys among {', '.join(keys)}", key, suggestion(str(key), keys))
            problem = (keys[key] if keys else value_check)(item) if isinstance(key, str) else "a field name as key"
            if problem:
                return Problem(f"{key!r} to be {problem}", getattr(problem, "got", item), getattr(problem, "hint", ""))

    return check


def stop_words(value):
    """``english`` (scikit-learn's list), or a list of words."""
    if value != "english" and list_of(text, "-", empty=True)(value):
        return Problem("english or a list of words such as [the, of]", value)


# RecBole's '[5,inf)' intervals (';' joins several), which it skips when malformed (the filter silently off)
_ONE = r"\s*[\[(]\s*[-+]?(?:inf|[\d.]+(?:e[-+]?\d+)?)\s*,\s*[-+]?(?:inf|[\d.]+(?:e[-+]?\d+)?)\s*[\])]\s*"
_INTERVAL = re.compile(rf"{_ONE}(?:;{_ONE})*", re.I)


def intervals(value):
    if not _INTERVAL.fullmatch(str(list(value)) if isinstance(value, (list, tuple)) else str(value)):
        return Problem("an interval like '[5,inf)' or '(0,10]' (several joined by ';')", value)
