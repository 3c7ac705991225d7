// A 2D convolution (cross-correlation, as in image filtering) of a padded fp32 image with
// a FILTER_H x FILTER_W filter held in constant memory, written for tuning: the macros
// below are the tuning parameters (the same names and meanings as Kernel Tuner's
// convolution_milo space, so replays of both can be compared and models transferred).
//
//   BLOCK_X, BLOCK_Y  threads of a block
//   TILE_X, TILE_Y    outputs per thread, strided by the block size (coalesced stores)
//   READ_ONLY         global loads through the read-only data cache (__ldg)
//   USE_SHMEM         stage the block's input window in shared memory first
//   USE_PADDING       (with USE_SHMEM) pad the shared rows so that a warp spanning two
//                     rows hits distinct banks
//
// output[y][x] = sum_{i,j} input[y + i][x + j] * filter[i][j], for an IMAGE_H x IMAGE_W
// output and an (IMAGE_H + FILTER_H - 1) x (IMAGE_W + FILTER_W - 1) input.

#ifndef IMAGE_W
#define IMAGE_W 4096
#endif
#ifndef IMAGE_H
#define IMAGE_H 4096
#endif
#ifndef FILTER_W
#define FILTER_W 15
#endif
#ifndef FILTER_H
#define FILTER_H 15
#endif
#define INPUT_W (IMAGE_W + FILTER_W - 1)
#define INPUT_H (IMAGE_H + FILTER_H - 1)

#if READ_ONLY
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif

__constant__ float d_filter[FILTER_H * FILTER_W];

extern "C" __global__ void __launch_bounds__(BLOCK_X * BLOCK_Y)
convolution(float *output, const float *input) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * BLOCK_X * TILE_X;
    const int y0 = blockIdx.y * BLOCK_Y * TILE_Y;
    float acc[TILE_Y][TILE_X];
#pragma unroll
    for (int i = 0; i < TILE_Y; i++)
#pragma unroll
        for (int j = 0; j < TILE_X; j++) acc[i][j] = 0.0f;

#if USE_SHMEM
#define SH_W (BLOCK_X * TILE_X + FILTER_W - 1)
#define SH_H (BLOCK_Y * TILE_Y + FILTER_H - 1)
#if USE_PADDING
#define SH_STRIDE ((SH_W + 31) / 32 * 32 + BLOCK_X % 32)
#else
#define SH_STRIDE SH_W
#endif
    __shared__ float window[SH_H * SH_STRIDE];
    for (int i = ty; i < SH_H; i += BLOCK_Y)
        for (int j = tx; j < SH_W; j += BLOCK_X) {
            const int gy = y0 + i, gx = x0 + j;
            window[i * SH_STRIDE + j] = (gy < INPUT_H && gx < INPUT_W) ? LOAD(input + gy * INPUT_W + gx) : 0.0f;
        }
    __syncthreads();
    for (int fy = 0; fy < FILTER_H; fy++) {
#pragma unroll
        for (int fx = 0; fx < FILTER_W; fx++) {
            const float f = d_filter[fy * FILTER_W + fx];
#pragma unroll
            for (int i = 0; i < TILE_Y; i++)
#pragma unroll
                for (int j = 0; j < TILE_X; j++)
                    acc[i][j] += window[(ty + i * BLOCK_Y + fy) * SH_STRIDE + tx + j * BLOCK_X + fx] * f;
        }
    }
#else
    for (int fy = 0; fy < FILTER_H; fy++) {
#pragma unroll
        for (int fx = 0; fx < FILTER_W; fx++) {
            const float f = d_filter[fy * FILTER_W + fx];
#pragma unroll
            for (int i = 0; i < TILE_Y; i++) {
                // rows past the image are clamped (their outputs are not stored)
                const int y = min(y0 + ty + i * BLOCK_Y, IMAGE_H - 1) + fy;
#pragma unroll
                for (int j = 0; j < TILE_X; j++) {
                    const int x = min(x0 + tx + j * BLOCK_X, IMAGE_W - 1) + fx;
                    acc[i][j] += LOAD(input + y * INPUT_W + x) * f;
                }
            }
        }
    }
#endif

#pragma unroll
    for (int i = 0; i < TILE_Y; i++)
#pragma unroll
        for (int j = 0; j < TILE_X; j++) {
            const int y = y0 + ty + i * BLOCK_Y, x = x0 + tx + j * BLOCK_X;
            if (y < IMAGE_H && x < IMAGE_W) output[y * IMAGE_W + x] = acc[i][j];
        }
}
