"""The wall around RecBole's internals (recbole_fbsm/recbole_compat.py): every private behaviour the plugin
overrides or relies on is listed there, pinned to RecBole's source, and nowhere else."""

import hashlib
import importlib
import inspect
import pkgutil

import pytest
import recbole

import recbole_fbsm
from recbole_fbsm import recbole_compat
from recbole_fbsm.recbole_compat import OVERRIDDEN, RELIED_ON, routes

LISTED = (
    recbole_compat.CONFIG
    + recbole_compat.DATASET
    + recbole_compat.SAMPLER
    + recbole_compat.TRAIN_LOADER
    + recbole_compat.EVAL_LOADER
    + recbole_compat.TRAINER
    + RELIED_ON
)


def resolve(owner, name):
    parts = owner.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for part in parts[k:]:
            obj = getattr(obj, part)
        break
    if name:
        obj = vars(obj)[name]
    return obj.fget if isinstance(obj, property) else obj


@pytest.mark.parametrize("private", LISTED, ids=lambda p: f"{p.owner.rsplit('.', 1)[-1]}.{p.name}".rstrip("."))
def test_recbole_still_has_what_each_override_relies_on(private):
    """A RecBole (or torch) release that changes one of these fails here, naming it, before a run breaks."""
    source = inspect.getsource(resolve(private.owner, private.name))
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    assert digest == private.digest, (
        f"{private.owner}.{private.name} changed in this RecBole/torch (digest {digest}, pinned {private.digest}); "
        f"the plugin relies on it: {private.relies_on}. Re-read it, adapt recbole_fbsm, then update the digest."
    )


def plugin_classes():
    for info in pkgutil.walk_packages(recbole_fbsm.__path__, "recbole_fbsm."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == module.__name__ and module is not recbole_compat:
                yield obj
    from recbole.data.dataloader import FullSortEvalDataLoader, TrainDataLoader
    from recbole.trainer import Trainer
    from recbole.utils import ModelType

    from recbole_fbsm.data.device_batches import device_batches
    from recbole_fbsm.data.eval_loader import vectorised_eval_loader
    from recbole_fbsm.data.user_batches import user_grouped
    from recbole_fbsm.training.trainer import get_trainer

    yield from (
        user_grouped(TrainDataLoader),
        device_batches(user_grouped(TrainDataLoader)),
        vectorised_eval_loader(FullSortEvalDataLoader),
        get_trainer(ModelType.GENERAL, "BPR"),
        Trainer,
    )


def test_no_plugin_class_defines_a_private_name_of_recbole_itself():
    """Overrides go through the routes of recbole_compat (``plugin_<name>``), never by RecBole's private name."""
    offenders = []
    for cls in plugin_classes():
        if cls.__module__.startswith("recbole."):
            continue
        for name in vars(cls):
            if not name.startswith("_") or name.startswith("__"):
                continue
            for base in cls.__mro__[1:]:
                if (
                    base.__module__.startswith("recbole.") or base.__module__.startswith("torch.utils.data")
                ) and name in vars(base):
                    offenders.append(f"{cls.__module__}.{cls.__qualname__}.{name} (RecBole's {base.__name__}.{name})")
                    break
    assert not offenders, "\n".join(offenders)


def test_every_route_reaches_the_plugin_and_the_chain_ends_in_recboles_own():
    class RecBoleLike:
        def _step(self, x):
            return [f"recbole {x}"]

        @property
        def _batches(self):
            return "recbole batches"

    privates = (
        recbole_compat.Private("x.RecBoleLike", "_step", "", ""),
        recbole_compat.Private("x.RecBoleLike", "_batches", "", "", is_property=True),
    )
    Routes = routes("Routes", privates)

    class Outer:
        def plugin_step(self, x):
            return ["outer"] + super().plugin_step(x)

    class Plugin(Outer, Routes, RecBoleLike):
        def plugin_batches(self):
            return "plugin " + super().plugin_batches()

    assert Plugin()._step(1) == ["outer", "recbole 1"]  # RecBole's call reaches the plugin's chain, then RecBole
    assert Plugin()._batches == "plugin recbole batches"
    assert type("Plain", (Routes, RecBoleLike), {})()._step(2) == ["recbole 2"]  # no override: RecBole's own


def test_the_count_of_overrides_is_the_listed_one():
    assert len(OVERRIDDEN) == len({(p.owner, p.name) for p in OVERRIDDEN}) == 24


def test_another_recbole_release_is_named_in_a_warning(monkeypatch):
    monkeypatch.setattr(recbole, "__version__", "1.3.0")
    with pytest.warns(RuntimeWarning, match=r"written for RecBole 1.2.1 .* RecBole 1.3.0 is installed"):
        recbole_compat.check_version()
