"""Dataset names, before torch is imported: the one table of what ``recbole-fbsm download`` fetches, the names a run
can mean, and the error for a missing dataset folder."""

import os
import shlex
from dataclasses import dataclass

import yaml

from recbole_fbsm.config.paths import recbole_dir
from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.errors import ColdStartError

# The one table of what `download` fetches: each source's base URL and, for every file a conversion reads,
# its size in bytes and SHA-256 as published (--mirror reads the same file names under another base URL).
# citeulike-t: github.com/js05212/citeulike-t, branch master, pinned to its last commit (4f103c6).
SOURCES = {
    "citeulike-t": {
        "url": "https://raw.githubusercontent.com/js05212/citeulike-t/4f103c6ea0fe407b23be230837b65517e613c34a/",
        "files": {
            "users.dat": (770_649, "02d5d429b2c0362e0ed79f6ef204666b4092563d21493abf4dfb521e8a7078bf"),
            "mult.dat": (3_722_706, "5ed81e6fdbf8d475122d4a18d622202571ac80f27be017e194a1957da585283d"),
            "vocabulary.dat": (192_679, "d58f0e6ce40da9e57c7ad6bbb2d0f1351730e3ecfcbbdf14eec07d493ce539e1"),
            "tag-item.dat": (1_731_579, "e2b80fc0e023780b63c00a397a2d0934eff6dbaf8a1b918778698361dae7ce6b"),
            "tags.dat": (717_243, "2f1e6dd94fe216a4453caf67e337c45f73938373b21d2aa3b6d2696387449e76"),
        },
    },
}


@dataclass(frozen=True)
class Downloadable:
    """A dataset ``download`` writes: the source it comes from and the files of it the conversion reads."""

    source: str
    files: tuple
    about: str


DATASETS = {
    "citeulike-t": Downloadable(
        "citeulike-t",
        ("users.dat", "mult.dat", "vocabulary.dat"),
        "CiteULike libraries (7,947 users, 25,584 articles, 134,860 likes), the articles' words",
    ),
    "citeulike-tags": Downloadable(
        "citeulike-t",
        ("users.dat", "mult.dat", "vocabulary.dat", "tag-item.dat", "tags.dat"),
        "the same likes; the articles' words and the tags users gave them",
    ),
}
DEFAULT_DATA_PATH = "dataset"  # RecBole's data_path: the folder holding one folder per dataset


def recbole_downloadable():
    """{name: zip URL} of the datasets RecBole publishes (its properties/dataset/url.yaml; {} when unreadable)."""
    try:
        with open(recbole_dir() / "properties" / "dataset" / "url.yaml", encoding="utf-8") as f:
            table = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError, ColdStartError):
        return {}
    return {str(name): str(url) for name, url in table.items()} if isinstance(table, dict) else {}


def known_datasets(data_path=DEFAULT_DATA_PATH):
    """Every name a run can mean: ml-100k, RecBole's downloadable datasets, ours, the folders under ``data_path``."""
    folder = os.path.expanduser(str(data_path))
    present = os.scandir(folder) if os.path.isdir(folder) else []
    present = [entry.name for entry in present if entry.is_dir() and not entry.name.startswith(".")]
    return sorted({"ml-100k", *recbole_downloadable(), *DATASETS, *present})


def run_command(name, out=DEFAULT_DATA_PATH):
    """The command that trains FBSM on dataset ``name`` written under the folder ``out``."""
    return f"recbole-fbsm run --model=FBSM --dataset={name}" + (
        "" if _is_default(out) else f" --data_path={shlex.quote(str(out))}"
    )


def missing_dataset_message(name, data_path=DEFAULT_DATA_PATH):
    """The error for a missing folder ``data_path/name`` (its download command, or a close name); else None."""
    name, data_path = str(name), str(data_path)
    folder = os.path.join(os.path.expanduser(data_path), name)
    if name == "ml-100k" or "/" in name or "\\" in name or os.path.isdir(folder):
        return None
    if name in DATASETS:
        out = "" if _is_default(data_path) else f" --out {shlex.quote(data_path)}"
        return (
            f"dataset {name!r}: folder {folder} not found; download and convert it with: "
            f"recbole-fbsm download {name}{out}"
        )
    hint = None if name in recbole_downloadable() else suggestion(name, known_datasets(data_path))
    return f"dataset {name!r}: folder {folder} not found (data_path={data_path!r}){hint}" if hint else None


def unknown_download_message(name, data_path=DEFAULT_DATA_PATH):
    """Why ``download NAME`` cannot write ``name``, with the closest known name."""
    recbole_urls = recbole_downloadable()
    hint = (
        f"; {name!r} is one of RecBole's datasets, published by RecBole at {recbole_urls[name]}."
        if name in recbole_urls
        else suggestion(name, known_datasets(data_path)) or "."
    )
    return f"no download for dataset {name!r} (downloadable here: {', '.join(DATASETS)}){hint}"


def _is_default(folder):
    return os.path.normpath(os.path.expanduser(str(folder))) == DEFAULT_DATA_PATH
