"""Records that cannot drift: ``stale`` lists the committed records made by other code than this tree's (their
``settings.code``), ``refresh`` reruns each with the model, split and settings it states and writes it in place.

    python -m recbole_fbsm.experiments.records stale docs/results
    python -m recbole_fbsm.experiments.records refresh docs/results/ml-100k-defaults [more folders or files]
"""

import argparse
import tempfile

from recbole_fbsm.experiments.compare import run_pair
from recbole_fbsm.quick_start import planned_settings
from recbole_fbsm.storage.run_records import read_record, record_files, stale_records, write_record


def rerun(record, checkpoint_dir):
    """A new record of the run ``record`` states (model, dataset, seed, the command's settings as it typed them; a
    data_path of the machine it ran on left out), made by this tree's code."""
    overrides = {k: v for k, v in record["settings"]["overrides"].items() if k != "data_path"}
    dataset = record["settings"]["dataset"]
    settings = planned_settings(record["model"], dataset, None, overrides)
    return run_pair(record["model"], dataset, record["seed"], checkpoint_dir, None, overrides, settings)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m recbole_fbsm.experiments.records", description=__doc__)
    parser.add_argument("action", choices=("stale", "refresh"))
    parser.add_argument("paths", nargs="+", help="record files or folders of them")
    parser.add_argument("--all", action="store_true", help="refresh: every record, not only the stale ones")
    args = parser.parse_args(argv)
    files = stale_records(args.paths) if args.action == "stale" or not args.all else record_files(args.paths)
    for path in files:
        if args.action == "stale":
            print(path)
            continue
        with tempfile.TemporaryDirectory() as checkpoints:
            record = rerun(read_record(path), checkpoints)
        write_record(path, record)
        print(
            f"{path}: {record['status']}, {record['wall_seconds']:.0f} s, test {record.get('test_result')}", flush=True
        )


if __name__ == "__main__":
    main()
