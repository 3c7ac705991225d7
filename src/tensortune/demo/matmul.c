/* A tunable float32 matrix multiplication, C = A * B, row-major.
 * Tuned by -D defines: tile sizes, loop order within a tile, B packing,
 * unrolling and threads. Tails (sizes that tiles do not divide) are handled. */
#include <stdlib.h>
#include <string.h>

#ifndef TILE_M
#define TILE_M 32
#endif
#ifndef TILE_N
#define TILE_N 32
#endif
#ifndef TILE_K
#define TILE_K 32
#endif
#ifndef ORDER            /* 0: i-k-j inside a tile, 1: k-i-j */
#define ORDER 0
#endif
#ifndef PACK_B           /* copy the B tile into a contiguous buffer first */
#define PACK_B 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef THREADS
#define THREADS 1
#endif

#define STR_(x) #x
#define STR(x) STR_(x)
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void matmul(const float *restrict A, const float *restrict B, float *restrict C, int M, int N, int K) {
    int tiles_m = (M + TILE_M - 1) / TILE_M, tiles_n = (N + TILE_N - 1) / TILE_N;
    #pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int t = 0; t < tiles_m * tiles_n; t++) {
        int i0 = (t / tiles_n) * TILE_M, j0 = (t % tiles_n) * TILE_N;
        int mi = MIN(TILE_M, M - i0), nj = MIN(TILE_N, N - j0);
        float acc[TILE_M][TILE_N] __attribute__((aligned(64)));
#if PACK_B
        float bp[TILE_K][TILE_N] __attribute__((aligned(64)));
#endif
        memset(acc, 0, sizeof acc);
        for (int k0 = 0; k0 < K; k0 += TILE_K) {
            int kk = MIN(TILE_K, K - k0);
#if PACK_B
            for (int k = 0; k < kk; k++) {
                memcpy(bp[k], &B[(size_t)(k0 + k) * N + j0], sizeof(float) * nj);
                for (int j = nj; j < TILE_N; j++) bp[k][j] = 0.0f;
            }
#define BROW(k) (bp[k])
#else
#define BROW(k) (&B[(size_t)(k0 + (k)) * N + j0])
#endif
#if ORDER == 0
            for (int i = 0; i < mi; i++)
                for (int k = 0; k < kk; k++) {
                    float a = A[(size_t)(i0 + i) * K + k0 + k];
                    const float *b = BROW(k);
                    _Pragma(STR(GCC unroll UNROLL))
                    for (int j = 0; j < (PACK_B ? TILE_N : nj); j++) acc[i][j] += a * b[j];
                }
#else
            for (int k = 0; k < kk; k++) {
                const float *b = BROW(k);
                for (int i = 0; i < mi; i++) {
                    float a = A[(size_t)(i0 + i) * K + k0 + k];
                    _Pragma(STR(GCC unroll UNROLL))
                    for (int j = 0; j < (PACK_B ? TILE_N : nj); j++) acc[i][j] += a * b[j];
                }
            }
#endif
#undef BROW
        }
        for (int i = 0; i < mi; i++)
            memcpy(&C[(size_t)(i0 + i) * N + j0], acc[i], sizeof(float) * nj);
    }
}
