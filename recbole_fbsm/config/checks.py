"""Value checks for settings: each takes a value and returns what was expected (a ``Problem``) or None."""

import codecs
import functools
import math
import re

from recbole_fbsm.config.paths import PACKAGE_DIR, recbole_dir
from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.runtime.openmp import usable_cores

NEG_DISTRIBUTIONS = ("uniform", "popularity", "none")
SEED_MAX = 2**32 - 1  # numpy's legacy seeding, which RecBole's init_seed uses


@functools.lru_cache(maxsize=1)
def metric_names():
    """{lower-case metric name: (display name, is a top-k metric)} of RecBole's and the plugin's metrics."""
    names = {}
    for path in (recbole_dir() / "evaluator" / "metrics.py", PACKAGE_DIR / "evaluation" / "metrics.py"):
        text = path.read_text(encoding="utf-8")
        for name, base in re.findall(r"^class (\w+)\((\w+)\)", text, re.M):
            if base.endswith("Metric") and not name.endswith("Metric"):
                names[name.lower()] = (name, base == "TopkMetric")
    return names


def as_list(value):
    """A setting that takes one value or a list of them (``topk``, ``metrics``), as a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not (isinstance(value, float) and math.isnan(value))
    )


def integer(low=None, high=None):
    named = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}
    expected = named.get(low, f"an integer >= {low}") if high is None else f"an integer from {low} to {high}"

    def check(value):
        if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            return expected

    return check


def thread_count(value):
    """``auto`` (``runtime.threads``) or 1 to the machine's cores: more threads than cores only wait on each other."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    cores = usable_cores(environ={})  # OMP_NUM_THREADS does not bind torch.set_num_threads
    if not _is_int(value) or not 1 <= value <= cores:
        hint = suggestion(value, ["auto"]) if isinstance(value, str) else ""
        return Problem(f"auto or an integer from 1 to {cores} (this machine's cores)", value, hint)


def number(low=None, strict=False):
    def check(value):
        bound = "" if low is None else f" {'>' if strict else '>='} {low:g}"
        if not _is_number(value) or not math.isfinite(value):
            return "a finite number" + bound
        if low is not None and (value < low or (strict and value == low)):
            return "a number" + bound

    return check


def unit_interval(value):
    if not _is_number(value) or not 0 <= value <= 1:
        return "a number from 0 to 1"


def flag(value):
    if not isinstance(value, bool):
        return "True or False"


class Problem(str):
    """What was expected (the text), what was found (``got``) and a hint (``did you mean``)."""

    def __new__(cls, expected, got=None, hint=""):
        problem = super().__new__(cls, expected)
        problem.got, problem.hint = got, hint
        return problem


def choice(options, case=False):
    def check(value):
        text = value.lower() if isinstance(value, str) and not case else value
        if text not in options:
            hint = suggestion(value, options) if isinstance(value, str) else ""
            return Problem("one of " + ", ".join(options), value, hint)

    return check


def optional(inner):
    def check(value):
        problem = None if value is None else inner(value)
        if problem is not None:
            return Problem(f"{problem} (or ~)", getattr(problem, "got", None), getattr(problem, "hint", ""))

    return check


def text(value):
    if not isinstance(value, str) or not value:
        return "a non-empty text"


def topk(value):
    values = as_list(value)
    if not values or not all(_is_int(v) and v >= 1 for v in values):
        return "a positive integer or a list of them, e.g. [10, 20]"


def three_positive_ratios(value):
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(_is_number(v) and v > 0 for v in value)


def split_ratios(value):
    """Three positive ratios [train, valid, test] that sum to 1, as RecBole's ``RS``."""
    if not three_positive_ratios(value) or abs(sum(value) - 1.0) > 1e-6:
        return "three positive ratios [train, valid, test] that sum to 1, e.g. [0.8, 0.1, 0.1]"


def positive_integers(value):
    if not isinstance(value, (list, tuple)) or not value or not all(_is_int(v) and v >= 1 for v in value):
        return "a list of positive integers, e.g. [200, 100]"


def metrics(value):
    values = as_list(value)
    if not values or not all(isinstance(v, str) for v in values):
        return "a list of metric names, e.g. [Recall, NDCG]"
    known = metric_names()
    for v in values:
        if v.lower() not in known:
            names = [display for display, _ in known.values()]
            return Problem(f"metric names among {', '.join(sorted(names))}", v, suggestion(v, names))


def mapping_of(key_check, value_check, example):
    def check(value):
        if not isinstance(value, dict):
            return f"a mapping like {example}"
        for key, item in value.items():
            if key_check(key) is not None:
                return Problem(f"a mapping like {example}, with field names as keys", key)
            problem = value_check(item)
            if problem is not None:
                return Problem(f"{key!r} to be {problem}", item, getattr(problem, "hint", ""))

    return check


def field_names(nonempty=False):
    """Field names, none twice (a repeated feature field counted its features twice)."""

    def check(value):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            return "a list of field names, e.g. [genre, words]"
        if nonempty and not value:
            return "at least one field name, e.g. [genre, words] (~ for every token field of the .item file)"
        if len(set(value)) < len(value):
            return "a list of distinct field names, e.g. [genre, words]"

    return check


def stop_words(value):
    """``english`` (scikit-learn's list), or a list of words."""
    if value == "english" or (isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)):
        return None
    return Problem("english or a list of words such as [the, of]", value)


def _keyed_mapping_problem(value, checks, notes=None):
    """The first key of ``value`` that ``checks`` does not list, or the first value that fails its key's check."""
    for key, item in value.items():
        if key not in checks:
            return Problem(f"keys among {', '.join(checks)}", key, suggestion(str(key), checks))
        problem = checks[key](item)
        if problem:
            note = (notes or {}).get(key, "")
            return Problem(f"{key} to be {problem}{note}", item, getattr(problem, "hint", ""))


def neg_sample_args(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        return "a mapping, e.g. {distribution: uniform, sample_num: 1}"
    checks = {
        "distribution": optional(choice(NEG_DISTRIBUTIONS)),
        "sample_num": integer(1),
        "alpha": number(),
        "dynamic": flag,
        "candidate_num": integer(0),
    }
    problem = _keyed_mapping_problem(value, checks)
    if problem is None and value.get("dynamic") and not value.get("candidate_num"):
        return Problem(
            "candidate_num >= 1 with dynamic: True (the negative is the best of candidate_num draws)",
            value.get("candidate_num"),
        )
    return problem


def clip_grad_norm(value):
    """``clip_grad_norm_``'s keywords: max_norm 0 zeroes every gradient, an unknown key fails at the first batch."""
    if not isinstance(value, dict):
        return "a mapping like {max_norm: 5, norm_type: 2}"
    checks = {
        "max_norm": number(0, strict=True),
        "norm_type": number(0, strict=True),
        "error_if_nonfinite": flag,
        "foreach": optional(flag),
    }
    problem = _keyed_mapping_problem(value, checks, {"max_norm": " (0 sets every gradient to zero)"})
    if problem is None and "max_norm" not in value:
        return Problem("a mapping with max_norm, e.g. {max_norm: 5, norm_type: 2}", value)
    return problem


_INTERVAL = re.compile(r"^\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*$")


def intervals(value):
    """RecBole's '[5,inf)' intervals (';' joins several), which it skips when malformed (the filter silently off)."""
    expected = "an interval like '[5,inf)' or '(0,10]' (several joined by ';')"
    if isinstance(value, (list, tuple)):
        value = str(list(value))
    if not isinstance(value, str) or not value.strip():
        return expected
    for part in value.split(";"):
        match = _INTERVAL.match(part)
        if not match:
            return Problem(expected, part.strip())
        try:
            low, high = float(match.group(2)), float(match.group(3))
        except ValueError:
            return Problem(expected + ", with numbers as endpoints", part.strip())
        if math.isnan(low) or math.isnan(high) or low > high:
            return Problem(expected + ", its left end not above its right end", part.strip())


def encoding_name(value):
    if not isinstance(value, str):
        return "the name of a text encoding, e.g. utf-8"
    try:
        codecs.lookup(value)
    except LookupError:
        return Problem("the name of a text encoding Python knows, e.g. utf-8 or latin-1", value)
