"""Search spaces for ``run_hyper.py``: RecBole's params files (``NAME TYPE RANGE``, docs/tune.md) and yaml grids
(``KEY: [values]``) as Optuna distributions; ``quniform`` gives integers when its three numbers are (RecBole's
hyperopt gives 64.0, which an embedding size cannot be)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from recbole_fbsm.config.cold_start_config import PROPERTIES_DIR
from recbole_fbsm.config.settings import convert_value
from recbole_fbsm.errors import ColdStartError

KINDS = ("choice", "uniform", "loguniform", "quniform")


def _label(value):
    """What Optuna stores for a choice: a plain scalar itself, else its Python literal text."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


@dataclass(frozen=True)
class Param:
    """One searched setting: ``values`` of a choice, or a range's ``numbers`` as written (LOW, HIGH[, Q];
    loguniform bounds are natural logs)."""

    name: str
    kind: str
    values: tuple = ()
    numbers: tuple = ()

    @property
    def labels(self):
        return tuple(map(_label, self.values))

    def distribution(self):
        if self.kind == "choice":
            return CategoricalDistribution(self.labels)
        low, high, q = (*self.numbers, 0.0)[:3]
        if self.kind == "loguniform":
            return FloatDistribution(math.exp(low), math.exp(high), log=True)
        if self.kind == "quniform" and all(float(v).is_integer() for v in self.numbers):
            return IntDistribution(int(low), int(high), step=int(q))
        return FloatDistribution(low, high, step=q or None)

    def value_of(self, stored):
        """The setting's value for a value Optuna stored (a choice's label back to the value)."""
        return self.values[self.labels.index(stored)] if self.kind == "choice" else stored

    def line(self):
        """This parameter as a params-file line."""
        rest = repr(list(self.values)) if self.kind == "choice" else ",".join(f"{x:g}" for x in self.numbers)
        return f"{self.name} {self.kind} {rest}"


def parse_line(text, where):
    """One params-file line (not blank, not a comment) -> Param."""
    name, kind, rest = (text.split(None, 2) + ["", ""])[:3]
    if kind not in KINDS or not rest:
        raise ColdStartError(f"{where}: expected NAME TYPE RANGE (TYPE one of {', '.join(KINDS)}); got {text!r}")
    if kind == "choice":
        values = convert_value(rest)  # a Python literal, else YAML ([sgd, adam])
        # 1, 1.0 and True are one value to Optuna too
        if not isinstance(values, (list, tuple)) or not values or len(set(map(_label, values))) != len(values):
            raise ColdStartError(
                f"{where}: {name} choice expects a non-empty list like [1, 2] or ['a', 'b'], no value twice; "
                f"got {rest!r}"
            )
        return Param(name, kind, values=tuple(values))
    count = 3 if kind == "quniform" else 2
    try:
        numbers = tuple(float(part) for part in rest.split(","))
    except ValueError:
        numbers = ()
    if (
        len(numbers) != count
        or not all(map(math.isfinite, numbers))
        or numbers[0] >= numbers[1]
        or 0 >= min(numbers[2:] or [1])
    ):
        raise ColdStartError(
            f"{where}: {name} {kind}: expected {count} numbers {'LOW,HIGH,Q' if count == 3 else 'LOW,HIGH'} "
            f"with LOW < HIGH (and a step Q > 0); got {rest!r}"
        )
    return Param(name, kind, numbers=numbers)


def parse_params_text(text, source="params file"):
    params = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.strip().startswith("#"):
            param = parse_line(line.strip(), f"{source} line {number}")
            if param.name in params:
                raise ColdStartError(f"{source} line {number}: {param.name} is given twice")
            params[param.name] = param
    if not params:
        raise ColdStartError(f"{source}: no parameter to search (expected lines NAME TYPE RANGE)")
    return list(params.values())


def read_search_space(path):
    """The Params of a params file, or of a yaml grid (``.yaml`` / ``.yml``)."""
    path = Path(path)
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        text = path.read_text(encoding="utf-8")
        grid = yaml.safe_load(text) if is_yaml else None
    except (OSError, yaml.YAMLError) as error:
        raise ColdStartError(f"params file {path}: cannot be read ({error})") from None
    if is_yaml:
        if not isinstance(grid, dict) or not grid:
            raise ColdStartError(f"{path}: expected a mapping KEY: [values, ...]")
        text = "\n".join(f"{key} choice {v if isinstance(v, list) else [v]!r}" for key, v in grid.items())
    return parse_params_text(text, str(path))


def default_params_file(model):
    """``properties/grids/MODEL.hyper``, else the yaml grid ``MODEL.yaml`` there."""
    for path in (PROPERTIES_DIR / "grids" / f"{model}{suffix}" for suffix in (".hyper", ".yaml")):
        if path.is_file():
            return path
    raise ColdStartError(f"no --params_file given and no properties/grids/{model}.hyper or .yaml for model {model!r}")


def is_grid(params):
    return all(p.kind == "choice" for p in params)


def grid_size(params):
    return math.prod(len(p.values) for p in params)


def settings_of_trial(params, stored):
    """{name: setting value} for the values Optuna stored for a trial."""
    return {p.name: p.value_of(stored[p.name]) for p in params if p.name in stored}
