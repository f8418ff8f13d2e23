"""Command line: ``python run_recbole.py --model=FBSM --dataset=ml-100k [--config_files="a.yaml b.yaml"] [--key=value ...]``.

Any RecBole setting can be given as ``--key=value`` (values are parsed like RecBole parses them).
The model name, the config files and every setting are checked before torch and RecBole are imported.
"""

import argparse
import sys

from recbole_fbsm.cli import settings_from_args
from recbole_fbsm.errors import ColdStartError


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", "-m", default="FBSM", help="model name (plugin models first, then RecBole's)")
    parser.add_argument("--dataset", "-d", default="ml-100k", help="dataset name")
    parser.add_argument("--config_files", default=None, help="space-separated yaml files")
    args, rest = parser.parse_known_args(argv)
    overrides = settings_from_args(parser, rest)
    return args, overrides


def _plain(result):
    return {key: round(float(value), 4) for key, value in (result or {}).items()}


def main(argv=None):
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    config_files = args.config_files.split() if args.config_files else None
    try:
        from recbole_fbsm.settings import precheck

        precheck(args.model, config_files, overrides)  # a typo fails here, before the heavy imports
        from recbole_fbsm.quick_start import run

        # RecBole converts the strings ('0.01', '[10, 20]', 'True') as it does for its own command line.
        result = run(args.model, args.dataset, config_file_list=config_files, config_dict=overrides)
    except ColdStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if result.get("kept_summary"):
        print(result["kept_summary"])
    print(f"best valid: {_plain(result['best_valid_result'])}")
    print(f"test result: {_plain(result['test_result'])}")
    if result.get("saved_model_file"):
        print(f"saved model: {result['saved_model_file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
