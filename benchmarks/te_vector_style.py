"""Which vector style should the tensor-expression C code generator emit?

The same register-tiled matmul micro-kernel (an MR x NR accumulator tile held across the
whole k loop, B rows loaded as vectors, A elements broadcast) written two ways:
  omp-simd     plain arrays, `#pragma omp simd` on the NR loop, `#pragma GCC unroll` on MR
               (what tensortune.backends.c_codegen emits)
  vector-ext   GCC vector extensions: `float __attribute__((vector_size(64)))` accumulators
Both are compiled with the flags the code generator uses and timed interleaved.

    .venv/bin/python benchmarks/te_vector_style.py --size 768 --rounds 9 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from tensortune.backends import CCompiler, load_function
from tensortune.backends.c_codegen import FLAGS
from tensortune.measure import Timer, check_close

COMMON = """
#define STR_(x) #x
#define STR(x) STR_(x)
"""

OMP_SIMD = COMMON + """
void mm(const float* restrict A, const float* restrict B, float* restrict C, int M, int N, int K) {
  #pragma omp parallel for schedule(static)
  for (int t = 0; t < (M / MR) * (N / NR); t++) {
    int io = t / (N / NR), jo = t % (N / NR);
    float acc[MR * NR] __attribute__((aligned(64)));
    _Pragma(STR(GCC unroll MR))
    for (int i = 0; i < MR; i++) {
      #pragma omp simd
      for (int j = 0; j < NR; j++) acc[i * NR + j] = 0.0f;
    }
    for (int k = 0; k < K; k++) {
      _Pragma(STR(GCC unroll MR))
      for (int i = 0; i < MR; i++) {
        #pragma omp simd
        for (int j = 0; j < NR; j++)
          acc[i * NR + j] = acc[i * NR + j] + A[(io * MR + i) * K + k] * B[k * N + jo * NR + j];
      }
    }
    for (int i = 0; i < MR; i++) {
      #pragma omp simd
      for (int j = 0; j < NR; j++) C[(io * MR + i) * N + jo * NR + j] = acc[i * NR + j];
    }
  }
}
"""

VECTOR_EXT = COMMON + """
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
void mm(const float* restrict A, const float* restrict B, float* restrict C, int M, int N, int K) {
  #pragma omp parallel for schedule(static)
  for (int t = 0; t < (M / MR) * (N / NR); t++) {
    int io = t / (N / NR), jo = t % (N / NR);
    v16 acc[MR][NR / 16];
    _Pragma(STR(GCC unroll MR))
    for (int i = 0; i < MR; i++)
      _Pragma("GCC unroll 16")
      for (int v = 0; v < NR / 16; v++) acc[i][v] = (v16){0};
    for (int k = 0; k < K; k++) {
      _Pragma(STR(GCC unroll MR))
      for (int i = 0; i < MR; i++) {
        float a = A[(io * MR + i) * K + k];
        _Pragma("GCC unroll 16")
        for (int v = 0; v < NR / 16; v++) acc[i][v] += a * *(const v16u*)&B[k * N + jo * NR + v * 16];
      }
    }
    _Pragma(STR(GCC unroll MR))
    for (int i = 0; i < MR; i++)
      _Pragma("GCC unroll 16")
      for (int v = 0; v < NR / 16; v++) *(v16u*)&C[(io * MR + i) * N + jo * NR + v * 16] = acc[i][v];
  }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args()
    n = args.size
    tiles = [(6, 64), (8, 32), (12, 32)]
    cc = CCompiler()
    fns = {}
    for style, src in (("omp-simd", OMP_SIMD), ("vector-ext", VECTOR_EXT)):
        for mr, nr in tiles:
            if n % mr or n % nr:
                continue
            lib = cc.compile(src, {"MR": mr, "NR": nr}, FLAGS)
            fns[f"{style} {mr}x{nr}"] = load_function(lib, "mm", ["float32*"] * 3 + ["int"] * 3)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    for name, fn in fns.items():
        fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, n, n)
        check_close(c, a @ b, 1e-3, 1e-3)
    calls = {name: (lambda fn=fn: fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, n, n)) for name, fn in fns.items()}
    calls["numpy"] = lambda: np.matmul(a, b, out=c)
    timer = Timer(warmup_seconds=0.02, min_repeats=3, budget_seconds=0.1)
    per_round: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            per_round[name].append(float(np.median(timer.time(fn))))
    flops = 2.0 * n ** 3
    res = {k: float(np.median(v)) for k, v in per_round.items()}
    print(f"float32 matmul {n}^3, {args.rounds} interleaved rounds, {time.strftime('%Y-%m-%d')}")
    print(f"{'kernel':22s} {'GFLOP/s':>8s}")
    for name, t in res.items():
        print(f"{name:22s} {flops / t / 1e9:8.1f}")
    for mr, nr in tiles:
        x, y = f"omp-simd {mr}x{nr}", f"vector-ext {mr}x{nr}"
        if x in res and y in res:
            print(f"{mr}x{nr}: omp-simd / vector-ext time ratio {res[x] / res[y]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "seconds": res}, f, indent=1)


if __name__ == "__main__":
    main()
