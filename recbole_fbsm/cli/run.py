"""``recbole-fbsm run`` (``run_recbole.py``): one model trained and tested, its settings checked before torch and
RecBole load; ``recbole-fbsm models``: every model a run accepts, read from the sources."""

import ast
import re
import shlex
import sys
import textwrap

from recbole_fbsm.cli.options import parser
from recbole_fbsm.config.cli import parse_with_settings
from recbole_fbsm.config.datasets import DEFAULT_DATA_PATH, missing_dataset_message
from recbole_fbsm.config.registry import PLUGIN_MODELS, recbole_model_files
from recbole_fbsm.config.settings import precheck
from recbole_fbsm.errors import ColdStartError


def _rounded(result):
    return {key: round(float(value), 4) for key, value in (result or {}).items()}


def run(argv, prog="recbole-fbsm run"):
    args, overrides = parse_with_settings(parser("run", prog), argv)
    config_files = args.config_files.split() if args.config_files else None
    try:
        settings = precheck(args.model, config_files, overrides)  # a typo fails here, before the heavy imports
        # a missing dataset folder: ours names its download command, a mistyped name the closest known one
        message = missing_dataset_message(args.dataset, settings.get("data_path") or DEFAULT_DATA_PATH)
        if message:
            raise ColdStartError(message)
        from recbole_fbsm.quick_start import run

        # RecBole converts the strings ('0.01', '[10, 20]', 'True') as it does for its own command line.
        distributed = {key: getattr(args, key) for key in ("nproc", "world_size", "ip", "port", "group_offset")}
        result = run(args.model, args.dataset, config_file_list=config_files, config_dict=overrides, **distributed)
    except ColdStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if result is None:  # a machine of a multi-machine run without rank 0: rank 0 reports
        print(f"ranks {args.group_offset}..{args.group_offset + args.nproc - 1} done; rank 0 reports the results.")
        return 0
    groups = [
        (f"{phase} {group} items", f"{phase}_result_{group}")
        for phase in ("valid", "test")
        for group in ("cold", "warm")
    ]
    lines = [
        f"best valid: {_rounded(result['best_valid_result'])}",
        f"test result: {_rounded(result['test_result'])}",
        *(f"{label}: {_rounded(result[key])}" for label, key in groups if key in result),  # the hybrid scenario
        *audience_lines(result.get("audience")),
        *[f"saved model: {path}" for path in [result.get("saved_model_file")] if path],
        *[
            f"model artifact: {artifact} (serve it: recbole-fbsm serve http {artifact})"
            for artifact in [result.get("artifact_file")]
            if artifact
        ],
        *kept_start_lines(args, config_files, result),
    ]
    print("\n".join(lines))
    return 0


def audience_lines(audience):
    """The users direction: who should see a new item (evaluation/audience.py)."""
    if not audience:
        return []
    key = audience["chosen_on"].split()[-1]
    return [
        f"who should see a new item (test {key} over the users who liked it): {audience['test_calibrated'][key]:.4f} "
        f"with scores / |I_u|^{audience['alpha']} (alpha chosen on validation), raw sum {audience['test_raw'][key]:.4f}"
    ]


# --------------------------------------------------------------------------------- recbole-fbsm models
# One line per model of this plugin (a new model adds its line: tests/convert/test_download.py checks every one has it).
PLUGIN_MODEL_LINES = {
    "FBSM": "learns a bilinear feature similarity D + V'V on top of BM25 (Sharma, Zhou, Hu, Karypis, SDM 2015)",
    "UFSM": "per-user mixtures of learned linear feature similarities (Elbadrawy & Karypis; the paper's baseline)",
    "CoSim": "sum of tf-idf cosine similarities to the user's liked items; nothing learned (the paper's baseline)",
    "ItemKNNCBF": "content item neighbourhood: BM25 or tf-idf, shrunk cosine and others, k neighbours; nothing learned",
    "Random": "independent random scores for every user and item: the honest floor",
    "DropoutNet": "preference and content towers trained with input dropout on a warm BPR-MF (NeurIPS 2017)",
    "Heater": "a mixture of experts mapping content into a warm BPR-MF's embedding space (SIGIR 2020)",
    "ALDI": "a content-to-embedding generator distilled from a warm BPR-MF (SIGIR 2023)",
    "HybridBlend": "hybrid scenario: a warm RecBole model and a content model, z-scored, mixed on validation",
    "EASE": "RecBole's EASE (Steck, WWW 2019) in float32 on the run's device, at about a third of its memory",
    "LightGCN": "RecBole's LightGCN (SIGIR 2020), its graph built with scipy's public API (RecBole's fails)",
    "NGCF": "RecBole's NGCF (SIGIR 2019), its graph built with scipy's public API (RecBole's fails)",
}
LINE_WIDTH = 110  # RecBole's descriptions are cut at a word to keep one line per model
RECBOLE_GROUPS = {
    "context_aware_recommender": "RecBole's context-aware models (new items scored from their features when "
    "item_id is not one of their fields)",
    "general_recommender": "RecBole's general models (collaborative only: no signal for a new item; sanity floors)",
}


def _docstring_line(path, class_name):
    """The first sentence of the class's docstring, else its module's 'Reference:' (RecBole's name the paper)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    paragraph = ((ast.get_docstring(classes[0]) if classes else None) or "").strip().split("\n\n")[0]
    lines = (ast.get_docstring(tree) or "").splitlines()
    reference = next((lines[k + 1].strip() for k, line in enumerate(lines[:-1]) if line.strip() == "Reference:"), "")
    text = re.split(r"(?<=\S\.)\s", paragraph, maxsplit=1)[0] or reference or "(no description in its source)"
    return textwrap.shorten(text, LINE_WIDTH, placeholder=" …", break_on_hyphens=False)


def models(argv, prog="recbole-fbsm models"):
    """``recbole-fbsm models``: RecBole's described by their docstrings, read from the source (no torch imported)."""
    parser("models", prog).parse_args(argv)
    plugin = [(name, PLUGIN_MODEL_LINES.get(name, "(no description yet)")) for name in PLUGIN_MODELS]
    groups = {"this plugin's item cold-start models (new items scored from their features)": plugin}
    recbole = sorted(recbole_model_files().items(), key=lambda name_path: name_path[0].lower())
    for folder, title in RECBOLE_GROUPS.items():
        models = [(name, path) for name, path in recbole if path.parent.name == folder and name not in PLUGIN_MODELS]
        groups[title] = [(name, _docstring_line(path, name)) for name, path in models]
    for title, models in groups.items():
        width = max(len(name) for name, _ in models)
        print(f"{title}:", *(f"  {name:<{width}}  {line}" for name, line in models), "", sep="\n")
    print("details of this plugin's models: docs/models.md; RecBole's: https://recbole.io/model_list.html")
    return 0


def kept_start_lines(args, config_files, result):
    """When validation kept the untrained start: what the kept model is, and the command that compares it (else
    the trainer's line on the epoch it kept)."""
    start = result.get("untrained_start")
    if result.get("best_epoch") != -1 or not start:
        return [result["kept_summary"]] if result.get("kept_summary") else []
    metric = (result.get("record") or {}).get("valid_metric") or "the validation metric"
    compare = ["recbole-fbsm", "compare", f"--dataset={args.dataset}", "--models", args.model, "ItemKNNCBF", "CoSim"]
    if config_files:
        compare[3:3] = [f"--config_files={' '.join(config_files)}"]
    return [
        f"kept the untrained start: no training epoch beat it on validation ({metric} "
        f"{float(result['best_valid_score']):.4f}).",
        f"{args.model} starts as {start}, so the model kept is that fixed similarity, not a learned one.",
        f"side by side with the baselines: {shlex.join(compare)}",
    ]
