"""The wall around RecBole's internals (recbole_fbsm/recbole_compat.py): every RecBole method the plugin
overrides, every private name of RecBole's it calls or reads and every RecBole text it matches is listed
there, pinned to RecBole's source."""

import ast
import hashlib
import importlib
import inspect
import pathlib
import pkgutil
import textwrap

import pytest
import recbole
import torch.utils.data.dataloader

import recbole_fbsm
from recbole_fbsm import recbole_compat
from recbole_fbsm.recbole_compat import OVERRIDDEN, PUBLIC_OVERRIDDEN, RELIED_ON, SPEED_ONLY, TEXTS, WALL

PACKAGE = pathlib.Path(recbole_fbsm.__file__).parent


def resolve(path):
    """The object at ``module.Class.attribute`` as its owner defines it (a property's getter)."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
            break
        except ModuleNotFoundError:
            continue
    for part in parts[k:]:
        obj = vars(obj)[part] if isinstance(obj, type) else getattr(obj, part)
    return obj.fget if isinstance(obj, property) else obj


def source_of(obj):
    return inspect.getsource(obj) if callable(obj) or inspect.ismodule(obj) else repr(sorted(obj))


def private_name(pin):
    return pin.name or pin.source.rsplit(".", 1)[1]


@pytest.mark.parametrize("pin", WALL, ids=lambda p: f"{p.source.split('.', 2)[-1]}:{p.name}".rstrip(":"))
def test_recbole_still_has_what_the_plugin_relies_on(pin):
    """A RecBole (or torch, pandas) release that changes one of these fails here, naming it, before a run breaks."""
    digest = hashlib.sha256(source_of(resolve(pin.source)).encode()).hexdigest()[:12]
    assert digest == pin.digest, (
        f"{pin.source} changed in this release (digest {digest}, pinned {pin.digest}); the plugin relies on it: "
        f"{pin.relies_on}. Re-read it, adapt recbole_fbsm, then update the digest."
    )


@pytest.mark.parametrize("pin", TEXTS, ids=lambda p: p.name)
def test_recbole_still_writes_the_texts_the_plugin_matches(pin):
    assert pin.name in inspect.getsource(resolve(pin.source))


def test_no_module_but_the_wall_matches_recboles_texts():
    phrases = ("loss is nan", "best eval result", "evaluating [", "training [")
    for path in PACKAGE.rglob("*.py"):
        if path.name == "recbole_compat.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = (ast.Module, ast.ClassDef, ast.FunctionDef)
        docstrings = {n.body[0].value for n in ast.walk(tree) if isinstance(n, scopes) and ast.get_docstring(n)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node not in docstrings:
                assert not any(p in node.value.lower() for p in phrases), f"{path}:{node.lineno}: {node.value!r}"


def plugin_classes():
    for info in pkgutil.walk_packages(recbole_fbsm.__path__, "recbole_fbsm."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == module.__name__:
                yield obj
    from recbole.data.dataloader import FullSortEvalDataLoader, TrainDataLoader
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
    )


def is_hook(function):
    """A RecBole method whose body only raises (``calculate_loss``, ``predict``): made to be overridden."""
    body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def overridden():
    """module.Class.name of each RecBole (or torch DataLoader) function a plugin class (or mixin) defines again."""
    found = set()
    for cls in plugin_classes():
        mro = cls.__mro__
        theirs = [c for c in mro if c.__module__.startswith(("recbole.", "torch.utils.data"))]
        for mine in (c for c in mro if c.__module__.startswith("recbole_fbsm.")):
            for name in (n for n in vars(mine) if not n.startswith("__")):
                owner = next((c for c in theirs if name in vars(c)), None)
                if owner is None or mro.index(owner) < mro.index(mine):
                    continue
                function = vars(owner)[name]
                function = function.fget if isinstance(function, property) else function
                if inspect.isfunction(function) and not is_hook(function):
                    found.add(f"{owner.__module__}.{owner.__qualname__}.{name}")
    return found


def test_every_override_of_recbole_is_listed_and_every_listed_one_is_made():
    listed = {pin.source for pin in OVERRIDDEN + PUBLIC_OVERRIDDEN + SPEED_ONLY}
    found = overridden()
    assert not found - listed, f"overrides missing from recbole_compat.py: {sorted(found - listed)}"
    assert not listed - found, f"listed in recbole_compat.py but no longer overridden: {sorted(listed - found)}"


def defined_private_names(root):
    """The private names a package's source defines: methods and functions, and attributes assigned."""
    names = set()
    for path in pathlib.Path(root).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return {n for n in names if private(n)}


def private(name):
    return name.startswith("_") and not name.startswith("__")


def test_every_private_name_of_recbole_the_plugin_uses_is_listed():
    """A private name of RecBole's (or torch's DataLoader) that the plugin defines in a class, calls or reads
    (``loader._dataset``), and any name imported from a private module (``pandas._libs``), is in the wall."""
    recboles = defined_private_names(pathlib.Path(recbole.__file__).parent)
    recboles |= defined_private_names(pathlib.Path(torch.utils.data.dataloader.__file__).parent)
    used = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "recbole_compat.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        methods = {f for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in recboles:
                used.setdefault(node.attr, f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.FunctionDef) and node in methods and node.name in recboles:
                used.setdefault(node.name, f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and any(private(p) for p in (node.module or "").split(".")):
                used.update({alias.name: f"{path.name}:{node.lineno}" for alias in node.names})
    listed = {private_name(pin) for pin in WALL if pin not in TEXTS + RELIED_ON}
    listed = {n for n in listed if private(n) or n.isupper()}
    missing = {name: where for name, where in used.items() if name not in listed}
    assert not missing, f"private names of RecBole's used but not listed in recbole_compat.py: {missing}"
    assert not listed - set(used), f"listed in recbole_compat.py but no longer used: {sorted(listed - set(used))}"


def test_another_recbole_release_is_named_in_a_warning(monkeypatch):
    monkeypatch.setattr(recbole, "__version__", "1.3.0")
    with pytest.warns(RuntimeWarning, match=r"written for RecBole 1.2.1 .* RecBole 1.3.0 is installed"):
        recbole_compat.check_version()
