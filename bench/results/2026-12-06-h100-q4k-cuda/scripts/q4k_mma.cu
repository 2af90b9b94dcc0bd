// Q4_K weights x 1-64 tokens on the tensor cores (mma.sync m16n8k16), each weight byte streamed
// once through a cp.async pipeline: kvspill/kernels/q4k_mma_cuda.py builds it with NVRTC and
// defines N_TILES (8-token tiles), M_TILES (16-row tiles a warp), FP16 (x is fp16, else bf16),
// WARPS and STAGES.
//
// Layout (no repacking of the GGUF file): the weights are the A operand (16 rows a warp) and the
// tokens the B operand. Thread (g, t) of a warp (g = lane / 4, t = lane % 4) reads one 32-bit word
// of qs a row for rows g and g + 8: bytes 4t .. 4t + 3 of a 16-byte chunk, i.e. the 4 low nibbles
// of columns c0 + 4t .. c0 + 4t + 3 and the 4 high nibbles of the same columns + 32 (ggml's Q4_K:
// byte l of 32-byte group j holds weights 64 j + l and 64 j + 32 + l). A mask pair 0x000F000F
// takes bytes 0 and 2 (columns 4t and 4t + 2) as one register pair, a shift by 8 bytes 1 and 3: so
// k-slots (2t, 2t + 1) are columns (4t, 4t + 2) and slots (2t + 8, 2t + 9) columns (4t + 1, 4t + 3).
// x's B fragment follows the same order: one 8-byte load of columns 4t .. 4t + 3 and two prmt.
// Every weight is dequantized once by a mantissa OR (128 + q in bf16, 1024 + q in fp16), one fma
// that takes the magic back out exactly and one that applies the sub-block's scale pair
// (kernels/gguf_mma_words.pack_scales: d*sc and -dmin*m in x's dtype): the same rounding as the
// Triton words form.
//
// Split K: blockIdx.x is the split, blockIdx.y the row tile. With more than one split each block
// writes fp32 partials; the last to arrive (a counter per row tile, reset by that block) adds them
// in split order, so results do not depend on which block finished first.

#define THREADS (WARPS * 32)
#define ROWS (WARPS * 16 * M_TILES)  // a warp's rows: M_TILES tiles of 16
#define T_PAD (N_TILES * 8)
#define QS_STRIDE 144    // bytes a row in shared memory (128 used): rows 4 banks apart, no conflicts
#define PAIR_STRIDE 48   // bytes a row of scale pairs (32 used): 12 words apart, no conflicts
#define X_STRIDE 544     // bytes a token (512 used): 8 words apart, 8-byte loads without conflicts
#define QS_BYTES (ROWS * QS_STRIDE)
#define PAIR_BYTES (ROWS * PAIR_STRIDE)
#ifndef X_GLOBAL
#define X_GLOBAL 0  // 1: x's fragments read from global memory (L1 / L2), not staged
#endif
#define STAGE_BYTES (QS_BYTES + PAIR_BYTES + (X_GLOBAL ? 0 : T_PAD * X_STRIDE))

#include "q4k_mma_common.cuh"

__device__ __forceinline__ void copy16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}

#define QS_COPIES (4 * M_TILES)          // 16-byte copies a thread a stage: ROWS * 8 / THREADS
#define X_COPIES (T_PAD * 32 / THREADS)  // T_PAD / WARPS (WARPS <= 8)

// A thread's share of each stage's copies: sources at super-block 0 (a stage adds sb times the
// super-block's bytes), destinations as offsets in a stage. Set once: the loop adds one offset.
struct Copies {
    const unsigned char* qs[QS_COPIES];
    u32 qs_dst[QS_COPIES];
    const unsigned char* pairs[M_TILES];
    u32 pairs_dst[M_TILES];
    const unsigned char* x[X_COPIES];
    u32 x_dst[X_COPIES];
    int x_bytes[X_COPIES];  // 16, or 0 for padding tokens (zero-filled)
};

__device__ __forceinline__ Copies plan_copies(const unsigned char* w, const u32* pairs, const u16* x, int row0,
                                              int rows, int row_bytes, int pair_words, int num_tokens,
                                              int x_stride) {
    Copies c;
    const int tid = threadIdx.x;
#pragma unroll
    for (int k = 0; k < QS_COPIES; ++k) {
        const int i = tid + k * THREADS, r = i >> 3, chunk = i & 7;
        const int row = min(row0 + r, rows - 1);  // rows past the end read the last one, never stored
        c.qs[k] = w + (size_t)row * row_bytes + 16 + 16 * chunk;
        c.qs_dst[k] = r * QS_STRIDE + 16 * chunk;
    }
#pragma unroll
    for (int k = 0; k < M_TILES; ++k) {
        const int i = tid + k * THREADS, r = i >> 1, chunk = i & 1;
        const int row = min(row0 + r, rows - 1);
        c.pairs[k] = (const unsigned char*)(pairs + (size_t)row * pair_words + 4 * chunk);
        c.pairs_dst[k] = QS_BYTES + r * PAIR_STRIDE + 16 * chunk;
    }
#pragma unroll
    for (int k = 0; k < X_COPIES; ++k) {
        const int i = tid + k * THREADS, token = i >> 5, chunk = i & 31;
        const bool real = token < num_tokens;
        c.x[k] = (const unsigned char*)(x + (size_t)(real ? token : 0) * x_stride + 8 * chunk);
        c.x_dst[k] = QS_BYTES + PAIR_BYTES + token * X_STRIDE + 16 * chunk;
        c.x_bytes[k] = real ? 16 : 0;
    }
    return c;
}

// Super-block `sb` of the block's rows (qs and scale pairs) and of x's tokens into the stage at
// shared address `stage`.
__device__ __forceinline__ void load_stage(const Copies& c, u32 stage, int sb) {
#pragma unroll
    for (int k = 0; k < QS_COPIES; ++k) copy16(stage + c.qs_dst[k], c.qs[k] + sb * 144, 16);
#pragma unroll
    for (int k = 0; k < M_TILES; ++k) copy16(stage + c.pairs_dst[k], c.pairs[k] + sb * 32, 16);
#pragma unroll
    for (int k = 0; k < (X_GLOBAL ? 0 : X_COPIES); ++k) copy16(stage + c.x_dst[k], c.x[k] + sb * 512, c.x_bytes[k]);
}

// A thread's weights of one 16-row tile and 64-column group: rows g and g + 8, scale pairs (d*sc,
// -dmin*m) of the group's two sub-blocks doubled into half pairs.
struct TileScales {
    u32 s_lo, m_lo, s_hi, m_hi, s8_lo, m8_lo, s8_hi, m8_hi;
};

__device__ __forceinline__ TileScales tile_scales(const unsigned char* pr, int j) {
    const W2 p = *(const W2*)(pr + 8 * j), p8 = *(const W2*)(pr + 8 * PAIR_STRIDE + 8 * j);
    TileScales s;
    s.s_lo = prmt(p.x, 0, 0x1010), s.m_lo = prmt(p.x, 0, 0x3232);
    s.s_hi = prmt(p.y, 0, 0x1010), s.m_hi = prmt(p.y, 0, 0x3232);
    s.s8_lo = prmt(p8.x, 0, 0x1010), s.m8_lo = prmt(p8.x, 0, 0x3232);
    s.s8_hi = prmt(p8.y, 0, 0x1010), s.m8_hi = prmt(p8.y, 0, 0x3232);
    return s;
}

// The A fragments of one word of rows g and g + 8 (bytes b0..b3 of columns 4t .. 4t + 3): the low
// nibbles (`high` 0) or the high ones (`high` 4). Bytes 0, 1 go to slots 2t, 2t + 1 and bytes 2, 3
// to 2t + 8, 2t + 9, so x's B fragment is its 8 bytes as they are.
__device__ __forceinline__ void fragments(u32* a, u32 b01, u32 b23, u32 b01_8, u32 b23_8, int high, u32 s, u32 m,
                                          u32 s8, u32 m8) {
    a[0] = dequant_pair(b01 >> high, s, m);
    a[1] = dequant_pair(b01_8 >> high, s8, m8);
    a[2] = dequant_pair(b23 >> high, s, m);
    a[3] = dequant_pair(b23_8 >> high, s8, m8);
}

// acc += one k16 step: the M_TILES tiles' fragments `a` times x's columns at `xs` (8 tokens a tile).
__device__ __forceinline__ void step(float (*acc)[N_TILES][4], u32 (*a)[4], const unsigned char* const* xs, int off) {
#pragma unroll
    for (int n = 0; n < N_TILES; ++n) {
        const W2 xv = *(const W2*)(xs[n] + off);
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) mma(acc[m][n], a[m][0], a[m][1], a[m][2], a[m][3], xv.x, xv.y);
    }
}

// acc += this warp's M_TILES x 16 rows of one super-block (in `stage`) times its x.
__device__ __forceinline__ void compute_stage(float (*acc)[N_TILES][4], const unsigned char* stage,
                                              const unsigned char* const* xs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int row = warp * 16 * M_TILES + g;
    const unsigned char* qs = stage + row * QS_STRIDE + 4 * t;
    const unsigned char* pr = stage + QS_BYTES + row * PAIR_STRIDE;
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // 64-column group j: sub-blocks 2j (low nibbles) and 2j + 1
        TileScales sc[M_TILES];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) sc[m] = tile_scales(pr + m * 16 * PAIR_STRIDE, j);
#pragma unroll
        for (int c = 0; c < 2; ++c) {  // the group's two 16-byte chunks: columns 16c .. 16c + 15 (+ 32)
            u32 b01[M_TILES], b23[M_TILES], b01_8[M_TILES], b23_8[M_TILES];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const unsigned char* q = qs + m * 16 * QS_STRIDE + 32 * j + 16 * c;
                const u32 w = *(const u32*)q, w8 = *(const u32*)(q + 8 * QS_STRIDE);
                b01[m] = prmt(w, 0, 0x4140), b23[m] = prmt(w, 0, 0x4342);  // bytes 0, 1 (2, 3) to bits 0, 16
                b01_8[m] = prmt(w8, 0, 0x4140), b23_8[m] = prmt(w8, 0, 0x4342);
            }
            const int col = 64 * j + 16 * c;
            u32 a[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m)
                fragments(a[m], b01[m], b23[m], b01_8[m], b23_8[m], 0, sc[m].s_lo, sc[m].m_lo, sc[m].s8_lo, sc[m].m8_lo);
            step(acc, a, xs, 2 * col);
#pragma unroll
            for (int m = 0; m < M_TILES; ++m)
                fragments(a[m], b01[m], b23[m], b01_8[m], b23_8[m], 4, sc[m].s_hi, sc[m].m_hi, sc[m].s8_hi, sc[m].m8_hi);
            step(acc, a, xs, 2 * (col + 32));
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) q4k_mma(
    const unsigned char* __restrict__ w,  // [rows, row_bytes]: the GGUF Q4_K rows
    const u32* __restrict__ pairs,        // [rows, pair_words]: (d*sc, -dmin*m) a sub-block, x's dtype
    const u16* __restrict__ x,            // [num_tokens, x_stride]
    const u16* __restrict__ bias,         // [rows] when has_bias
    u16* __restrict__ out,                // [num_tokens, out_stride]
    float* __restrict__ part,             // [split_k, T_PAD, rows] when split_k > 1
    int* __restrict__ counters,           // [row tiles], zero between launches
    int rows, int num_sb, int num_tokens, int x_stride, int row_bytes, int pair_words, int out_stride,
    int has_bias, int split_k) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int split = blockIdx.x, row0 = blockIdx.y * ROWS;
    const int sb0 = split * num_sb / split_k, sb1 = (split + 1) * num_sb / split_k, count = sb1 - sb0;
    const Copies copies = plan_copies(w, pairs, x, row0, rows, row_bytes, pair_words, num_tokens, x_stride);
    const u32 smem0 = shared_address(smem);
    float acc[M_TILES][N_TILES][4];
#pragma unroll
    for (int m = 0; m < M_TILES; ++m)
#pragma unroll
        for (int n = 0; n < N_TILES; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < count) load_stage(copies, smem0 + s * STAGE_BYTES, sb0 + s);
        asm volatile("cp.async.commit_group;");
    }
    int read = 0, write = STAGES - 1;  // the stages computed and refilled this iteration
    for (int i = 0; i < count; ++i) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2));
        __syncthreads();  // stage i landed for every thread; stage i - 1 is free to refill
        if (i + STAGES - 1 < count) load_stage(copies, smem0 + write * STAGE_BYTES, sb0 + i + STAGES - 1);
        asm volatile("cp.async.commit_group;");
        const unsigned char* xs[N_TILES];  // token 8n + g's columns 4t.. of this super-block
#pragma unroll
        for (int n = 0; n < N_TILES; ++n) {
            const int token = 8 * n + (threadIdx.x & 31) / 4, quad = 8 * (threadIdx.x & 3);
            if (X_GLOBAL)  // padding tokens read the last one: their outputs are never stored
                xs[n] = (const unsigned char*)(x + (size_t)min(token, num_tokens - 1) * x_stride) + (sb0 + i) * 512 + quad;
            else
                xs[n] = smem + read * STAGE_BYTES + QS_BYTES + PAIR_BYTES + token * X_STRIDE + quad;
        }
        compute_stage(acc, smem + read * STAGE_BYTES, xs);
        read = read == STAGES - 1 ? 0 : read + 1;
        write = write == STAGES - 1 ? 0 : write + 1;
    }
    store(acc, out, bias, part, counters, row0, rows, num_tokens, out_stride, has_bias, split, split_k);
}
