"""Where the plugin's and RecBole's files are (found without importing RecBole)."""

import importlib.util
from pathlib import Path

from recbole_fbsm.errors import ColdStartError

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # recbole_fbsm/
# the plugin's property files: an installed wheel carries them as recbole_fbsm/properties/ (setup.py), a checkout
# holds them in its top-level properties/ folder
PROPERTIES_DIR = PACKAGE_DIR / "properties"
if not (PROPERTIES_DIR / "overall.yaml").is_file():
    PROPERTIES_DIR = PACKAGE_DIR.parent / "properties"
LOCAL_PROPERTIES_DIR = Path("properties")  # the working directory's, where ``hyper --write`` writes by default


def recbole_dir():
    spec = importlib.util.find_spec("recbole")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ColdStartError("RecBole is not installed: pip install recbole==1.2.1.")
    return Path(list(spec.submodule_search_locations)[0])
