"""What two processes can gain on this machine at most: the same single-threaded work in one process, then
in two at once, for three kinds of work (dense matmuls, plain Python, random row gathers from a 512 MiB
table, as FBSM's steps gather rows of F, F_U and V). Throughput of two = 2 x (one alone) / (each of two).

    python benchmarks/bench_cores.py
"""

import os
import subprocess
import sys

WORK = {
    "dense matmul": "import torch, time; torch.set_num_threads(1); a = torch.randn(1000, 1000); "
    "t = time.perf_counter(); "
    "[a @ a for _ in range(60)]; print(time.perf_counter() - t)",
    "plain Python": "import time; t = time.perf_counter(); s = 0\nfor i in range(6_000_000): s += i * i\n"
    "print(time.perf_counter() - t)",
    "row gathers": "import torch, time; torch.set_num_threads(1); x = torch.randn(2_000_000, 64); "
    "i = torch.randint(0, 2_000_000, (200_000,)); t = time.perf_counter(); "
    "[x.index_select(0, i) for _ in range(40)]; print(time.perf_counter() - t)",
}


def main():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    print("| work | one process s | each of two at once s | throughput of two |\n|---|---:|---:|---:|")
    for name, code in WORK.items():
        one = float(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        )
        both = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)
        ]
        two = max(float(process.communicate()[0]) for process in both)
        print(f"| {name} | {one:.2f} | {two:.2f} | {2 * one / two:.2f} |")


if __name__ == "__main__":
    main()
