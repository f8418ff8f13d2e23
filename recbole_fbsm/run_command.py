"""Train and test one model: ``recbole-fbsm run --model=FBSM --dataset=ml-100k [--config_files="a.yaml b.yaml"]
[--key=value ...]`` (the same as the repository's ``python run_recbole.py ...``).

Any RecBole setting can be given as ``--key=value`` (values are parsed like RecBole parses them).
The model name, the config files and every setting are checked before torch and RecBole are imported.

Data-parallel training, with RecBole's flags: ``--nproc=2`` starts two processes on this machine (gloo on
the CPU, nccl on GPUs); over machines, each machine runs ``--world_size=W --ip=HOST_OF_RANK_0 --port=P
--nproc=N --group_offset=K`` (K: its first rank). See docs/distributed.md.
"""

import argparse
import sys

from recbole_fbsm.config.cli import settings_from_args
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.runtime.openmp import prefer_passive_wait


def parse_args(argv, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", "-m", default="FBSM", help="model name (plugin models first, then RecBole's)")
    parser.add_argument("--dataset", "-d", default="ml-100k", help="dataset name")
    parser.add_argument("--config_files", default=None, help="space-separated yaml files")
    parser.add_argument("--nproc", type=int, default=1, help="processes on this machine (data-parallel)")
    parser.add_argument("--world_size", type=int, default=-1, help="processes on all machines (default: nproc)")
    parser.add_argument("--ip", default="localhost", help="address of the machine of rank 0")
    parser.add_argument("--port", default=None, help="its port (default: a free one on one machine, 5678 on several)")
    parser.add_argument("--group_offset", type=int, default=0, help="rank of this machine's first process")
    args, rest = parser.parse_known_args(argv)
    overrides = settings_from_args(parser, rest)
    return args, overrides


def _rounded(result):
    return {key: round(float(value), 4) for key, value in (result or {}).items()}


def main(argv=None, prog=None):
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv, prog)
    config_files = args.config_files.split() if args.config_files else None
    try:
        from recbole_fbsm.config.settings import precheck

        settings = precheck(args.model, config_files, overrides)  # a typo fails here, before the heavy imports
        prefer_passive_wait(settings.get("torch_threads"))  # before torch loads OpenMP (runtime.openmp)
        from recbole_fbsm.quick_start import run

        # RecBole converts the strings ('0.01', '[10, 20]', 'True') as it does for its own command line.
        result = run(args.model, args.dataset, config_file_list=config_files, config_dict=overrides,
                     nproc=args.nproc, world_size=args.world_size, ip=args.ip, port=args.port,
                     group_offset=args.group_offset)
    except ColdStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if result is None:  # a machine of a multi-machine run without rank 0: rank 0 reports
        print(f"ranks {args.group_offset}..{args.group_offset + args.nproc - 1} done; rank 0 reports the results.")
        return 0
    print(f"best valid: {_rounded(result['best_valid_result'])}")
    print(f"test result: {_rounded(result['test_result'])}")
    for phase in ("valid", "test"):  # the hybrid scenario: the cold and warm groups beside "all"
        for group in ("cold", "warm"):
            if f"{phase}_result_{group}" in result:
                print(f"{phase} {group} items: {_rounded(result[f'{phase}_result_{group}'])}")
    if result.get("saved_model_file"):
        print(f"saved model: {result['saved_model_file']}")
    if result.get("artifact_file"):
        print(f"model artifact: {result['artifact_file']} (serve it: recbole-fbsm serve http {result['artifact_file']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
