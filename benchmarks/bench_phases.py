"""Peak memory of each phase of one ``run_recbole.py`` run: the files' checks, RecBole's dataset and the
split, the fitted inputs with the model and training, and the test evaluation with the artifact.

The run is started as a subprocess (its output at the default log level); its RSS (``/proc/PID/status``) is
polled every few milliseconds, and each poll is assigned to the phase whose log line came last:
"torch threads" (checks done), "[Item split]" (dataset and split done), "Loading model structure" (the
kept checkpoint: the test evaluation and the artifact follow). Linux only.

    python benchmarks/bench_phases.py -- --model=FBSM --dataset=<10^7 data> --data_path=<folder> \\
        --epochs=1 --eval_user_sample=2000 --torch_threads=1
"""

import argparse
import subprocess
import sys
import threading
import time

from benchlib import REPO_ROOT, current_rss_mib

PHASES = [  # (the log text that ends the phase before, the phase it starts)
    (None, "files' checks"),
    ("torch threads", "RecBole's dataset and the split"),
    ("[Item split]", "fitted inputs, model and training"),
    ("Loading model structure", "test evaluation and artifact"),
]


def run(arguments, interval=0.005):
    """{phase: peak RSS MiB} and the run's output lines."""
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run_recbole.py"), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    phase = [0]
    peaks = {}

    def poll():
        while process.poll() is None:
            rss = current_rss_mib(process.pid)
            if rss:
                name = PHASES[phase[0]][1]
                peaks[name] = max(peaks.get(name, 0), rss)
            time.sleep(interval)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        for index, (marker, _) in enumerate(PHASES):
            if marker and marker in line and index > phase[0]:
                phase[0] = index
    process.wait()
    poller.join(1)
    return process.returncode, peaks, lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="run_recbole.py's arguments, after --")
    args = parser.parse_args(argv)
    arguments = [a for a in args.arguments if a != "--"]
    code, peaks, lines = run(arguments)
    if code != 0:
        print("\n".join(lines[-20:]), file=sys.stderr)
        return code
    print("| phase | peak RSS MiB |\n|---|---:|")
    for _, name in PHASES:
        if name in peaks:
            print(f"| {name} | {peaks[name]:,.0f} |")
    print(f"| **whole run** | **{max(peaks.values()):,.0f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
