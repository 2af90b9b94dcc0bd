// Design B of the CUDA Q4_K tensor-core kernel: the weights go straight from global memory into
// the registers of the one thread that uses them (16-byte loads, one super-block ahead), never
// through shared memory; only x (shared by every warp of a block) is staged, a super-block a
// stage, through a cp.async ring. Defines: N_TILES (8-token tiles), FP16, WARPS (16 rows each),
// XSTAGES (x ring depth).
//
// Thread (g, t) of a warp holds, for rows g and g + 8 and half u (0, 1) of a super-block, qs
// chunk q = 4u + t (bytes 16q .. 16q + 15: group j = 2u + t / 2, half c = t % 2 of its 32 bytes).
// Word s of the chunk holds columns 64j + 16c + 4s + e (low nibbles, sub-block 2j) and the same
// + 32 (high nibbles, sub-block 2j + 1). Bytes 0, 1 of a word go to k-slots 2t, 2t + 1 and bytes
// 2, 3 to 2t + 8, 2t + 9, so x's B fragment is its 4 columns as they are: one 16-byte shared load
// gives words s and s + 1. x's 16-byte chunks are stored XOR-swizzled (chunk k at k ^ bit 3 of k)
// and tokens 576 bytes apart: those loads are free of bank conflicts.

#define M_TILES 1  // one 16-row tile a warp

#define THREADS (WARPS * 32)
#define ROWS (WARPS * 16)
#define T_PAD (N_TILES * 8)
#define X_STRIDE 576  // bytes a token in a stage (512 used): 16 words mod 32 apart
#define STAGE_BYTES (T_PAD * X_STRIDE)

#include "q4k_mma_common.cuh"

__device__ __forceinline__ W4 load16(const unsigned char* p) {
    W4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ W2 load8(const unsigned char* p) {
    W2 v;
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

// One thread's weights of one super-block: qs chunks (rows g, g + 8; halves u) and the scale
// pairs of those chunks' sub-blocks (2j: .x, 2j + 1: .y).
struct Weights {
    W4 qs[2][2];
    W2 pairs[2][2];
};

#ifndef TILED
#define TILED 0  // 1: the weights repacked a 16-row tile and super-block at a time (`repack_tiled`)
#endif

__device__ __forceinline__ Weights load_weights(const unsigned char* const* qs_row, const unsigned char* const* pair_row,
                                                int sb) {
    Weights w;
    const int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#if TILED == 1  // qs_row[0]: the warp's tile; 2,560 bytes a super-block: 2,048 of qs in fragment order, 512 of pairs
            const unsigned char* tile = qs_row[0] + sb * 2560;
            w.qs[r][u] = load16(tile + ((2 * u + r) * 32 + lane) * 16);
            w.pairs[r][u] = load8(tile + 2048 + ((2 * u + r) * 8 + lane / 4) * 16 + (t / 2) * 8);
#elif TILED == 2  // the GGUF super-blocks of a 16-row tile side by side (`interleave_rows`)
            w.qs[r][u] = load16(qs_row[r] + sb * 2304 + 16 + 16 * (4 * u + t));
            w.pairs[r][u] = load8(pair_row[r] + sb * 512 + 8 * (2 * u + t / 2));
#else
            w.qs[r][u] = load16(qs_row[r] + sb * 144 + 16 + 16 * (4 * u + t));
            w.pairs[r][u] = load8(pair_row[r] + sb * 32 + 8 * (2 * u + t / 2));
#endif
        }
    return w;
}

// x's super-block `sb` (all T_PAD tokens; padding tokens copy the last real one) into a stage.
__device__ __forceinline__ void load_x(u32 stage, const u16* x, int sb, int num_tokens, int x_stride) {
#pragma unroll
    for (int k = 0; k < T_PAD * 32 / THREADS; ++k) {
        const int i = threadIdx.x + k * THREADS, token = i >> 5, chunk = i & 31;
        const u16* src = x + (size_t)min(token, num_tokens - 1) * x_stride + sb * 256 + 8 * chunk;
        const u32 dst = stage + token * X_STRIDE + 16 * (chunk ^ ((chunk >> 3) & 1));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
    }
}

// acc += one k16 step's fragments against x's 4 columns (word pair xw) of every token tile.
__device__ __forceinline__ void step(float (*acc)[4], u32 a0, u32 a1, u32 a2, u32 a3, const W2* xw) {
#pragma unroll
    for (int n = 0; n < N_TILES; ++n) mma(acc[n], a0, a1, a2, a3, xw[n].x, xw[n].y);
}

// acc += this thread's share of one super-block: its weights `w`, x in the stage at `xs`.
__device__ __forceinline__ void compute(float (*acc)[4], const Weights& w, const unsigned char* xs) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const u32 s_lo = prmt(w.pairs[0][u].x, 0, 0x1010), m_lo = prmt(w.pairs[0][u].x, 0, 0x3232);
        const u32 s_hi = prmt(w.pairs[0][u].y, 0, 0x1010), m_hi = prmt(w.pairs[0][u].y, 0, 0x3232);
        const u32 s8_lo = prmt(w.pairs[1][u].x, 0, 0x1010), m8_lo = prmt(w.pairs[1][u].x, 0, 0x3232);
        const u32 s8_hi = prmt(w.pairs[1][u].y, 0, 0x1010), m8_hi = prmt(w.pairs[1][u].y, 0, 0x3232);
        const u32 wg[4] = {w.qs[0][u].x, w.qs[0][u].y, w.qs[0][u].z, w.qs[0][u].w};
        const u32 wg8[4] = {w.qs[1][u].x, w.qs[1][u].y, w.qs[1][u].z, w.qs[1][u].w};
        const int j = 2 * u + t / 2, c = t & 1;
#pragma unroll
        for (int hi = 0; hi < 2; ++hi)
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {  // words 2 s2 and 2 s2 + 1: one 16-byte x load a tile
                const int chunk = 8 * j + 2 * c + 4 * hi + s2;  // x's 8-column chunk
                const unsigned char* xc = xs + g * X_STRIDE + 16 * (chunk ^ ((chunk >> 3) & 1));
                W2 xw[2][N_TILES];  // words 2 s2 and 2 s2 + 1 of each tile
#pragma unroll
                for (int n = 0; n < N_TILES; ++n) {
                    const W4 v = *(const W4*)(xc + n * 8 * X_STRIDE);
                    xw[0][n].x = v.x, xw[0][n].y = v.y, xw[1][n].x = v.z, xw[1][n].y = v.w;
                }
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int s = 2 * s2 + e, shift = 4 * hi;
                    const u32 b01 = prmt(wg[s], 0, 0x4140) >> shift, b23 = prmt(wg[s], 0, 0x4342) >> shift;
                    const u32 b01_8 = prmt(wg8[s], 0, 0x4140) >> shift, b23_8 = prmt(wg8[s], 0, 0x4342) >> shift;
                    const u32 sc = hi ? s_hi : s_lo, mn = hi ? m_hi : m_lo;
                    const u32 sc8 = hi ? s8_hi : s8_lo, mn8 = hi ? m8_hi : m8_lo;
                    step(acc, dequant_pair(b01, sc, mn), dequant_pair(b01_8, sc8, mn8), dequant_pair(b23, sc, mn),
                         dequant_pair(b23_8, sc8, mn8), xw[e]);
                }
            }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) q4k_mma(
    const unsigned char* __restrict__ w, const u32* __restrict__ pairs, const u16* __restrict__ x,
    const u16* __restrict__ bias, u16* __restrict__ out, float* __restrict__ part, int* __restrict__ counters,
    int rows, int num_sb, int num_tokens, int x_stride, int row_bytes, int pair_words, int out_stride, int has_bias,
    int split_k) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int split = blockIdx.x, row0 = blockIdx.y * ROWS;
    const int sb0 = split * num_sb / split_k, count = (split + 1) * num_sb / split_k - sb0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const unsigned char* qs_row[2];
    const unsigned char* pair_row[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = min(row0 + warp * 16 + g + 8 * r, rows - 1);  // rows past the end: never stored
#if TILED == 2  // row_bytes, pair_words: a tile's strides
        qs_row[r] = w + (size_t)(row / 16) * row_bytes + (row % 16) * 144;
        pair_row[r] = (const unsigned char*)(pairs + (size_t)(row / 16) * pair_words) + (row % 16) * 32;
#else
        qs_row[r] = TILED ? w + (size_t)(row0 / 16 + warp) * row_bytes : w + (size_t)row * row_bytes;
        pair_row[r] = (const unsigned char*)(pairs + (size_t)row * pair_words);
#endif
    }
    const u32 smem0 = shared_address(smem);
    float acc[1][N_TILES][4];  // the shared store's shape: M_TILES tiles a warp
#pragma unroll
    for (int n = 0; n < N_TILES; ++n) acc[0][n][0] = acc[0][n][1] = acc[0][n][2] = acc[0][n][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < XSTAGES - 1; ++s) {
        if (s < count) load_x(smem0 + s * STAGE_BYTES, x, sb0 + s, num_tokens, x_stride);
        asm volatile("cp.async.commit_group;");
    }
#ifndef AHEAD
#define AHEAD 1  // super-blocks of weights in flight beside the one computed (1 or 2)
#endif
    Weights cur = load_weights(qs_row, pair_row, sb0);
#if AHEAD == 2
    Weights after = load_weights(qs_row, pair_row, sb0 + min(1, count - 1));
#endif
    int read = 0, write = XSTAGES - 1;
    for (int i = 0; i < count; ++i) {
#if AHEAD == 2
        const Weights next = after;
        after = load_weights(qs_row, pair_row, sb0 + min(i + 2, count - 1));
#else
        const Weights next = load_weights(qs_row, pair_row, sb0 + min(i + 1, count - 1));
#endif
        asm volatile("cp.async.wait_group %0;" ::"n"(XSTAGES - 2));
        __syncthreads();  // x of super-block i landed; the stage of i - 1 is free to refill
        if (i + XSTAGES - 1 < count) load_x(smem0 + write * STAGE_BYTES, x, sb0 + i + XSTAGES - 1, num_tokens, x_stride);
        asm volatile("cp.async.commit_group;");
        compute(acc[0], cur, smem + read * STAGE_BYTES);
        cur = next;
        read = read == XSTAGES - 1 ? 0 : read + 1;
        write = write == XSTAGES - 1 ? 0 : write + 1;
    }
    store(acc, out, bias, part, counters, row0, rows, num_tokens, out_stride, has_bias, split, split_k);
}
