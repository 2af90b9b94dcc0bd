// Shared by q4k_mma.cu (design a) and q4k_mma_b.cu (designs b-d): types, the half type's
// constants and asm (dequantization, mma.sync, conversions), and the output store with split K.
// The includer defines N_TILES, T_PAD, M_TILES (1 where a warp has one tile) and FP16 first.

typedef unsigned int u32;
typedef unsigned short u16;
struct __align__(16) W4 {
    u32 x, y, z, w;
};
struct __align__(8) W2 {
    u32 x, y;
};

#if FP16
#define HTYPE "f16"
#define MAGIC 0x64006400u
#define ONE 0x3C003C00u
#define MINUS 0xE400E400u
#else
#define HTYPE "bf16"
#define MAGIC 0x43004300u
#define ONE 0x3F803F80u
#define MINUS 0xC300C300u
#endif

__device__ __forceinline__ u32 shared_address(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Nibbles at bits 0-3 and 16-19 of `bits` as a half pair, times the scale pair plus the -min pair.
__device__ __forceinline__ u32 dequant_pair(u32 bits, u32 scale2, u32 neg_min2) {
    u32 q, v, w;
    const u32 one = ONE, minus = MINUS;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(q) : "r"(bits), "n"(MAGIC));
    asm("fma.rn." HTYPE "x2 %0, %1, %2, %3;" : "=r"(v) : "r"(q), "r"(one), "r"(minus));
    asm("fma.rn." HTYPE "x2 %0, %1, %2, %3;" : "=r"(w) : "r"(v), "r"(scale2), "r"(neg_min2));
    return w;
}

__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." HTYPE "." HTYPE ".f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u16 to_half(float v) {
    u16 h;
    asm("cvt.rn." HTYPE ".f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ float from_half(u16 h) {
#if FP16
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(((u32)h) << 16));
    return f;
#endif
}

// Calls f(row, token, m, n, v) for each of this thread's outputs that exist: acc[m][n][2h + e] is
// row 16m + g + 8h of the warp's rows, token 8n + 2t + e.
template <typename F>
__device__ __forceinline__ void each_output(int row0, int rows, int num_tokens, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < M_TILES; ++m)
#pragma unroll
        for (int n = 0; n < N_TILES; ++n)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int row = row0 + warp * 16 * M_TILES + 16 * m + g + 8 * (v >> 1);
                const int token = 8 * n + 2 * t + (v & 1);
                if (row < rows && token < num_tokens) f(row, token, m, n, v);
            }
}

// The block's outputs (+ bias) in x's dtype. With split K every block writes its fp32 partial and
// the last of a row tile to arrive adds them in split order.
__device__ __forceinline__ void store(float (*acc)[N_TILES][4], u16* out, const u16* bias, float* part,
                                      int* counters, int row0, int rows, int num_tokens, int out_stride,
                                      int has_bias, int split, int split_k) {
    __shared__ int last;
    if (split_k > 1) {
        float* mine = part + (size_t)split * T_PAD * rows;
        each_output(row0, rows, num_tokens, [&](int row, int token, int m, int n, int v) {
            mine[(size_t)token * rows + row] = acc[m][n][v];
        });
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(counters + blockIdx.y, 1) == split_k - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        each_output(row0, rows, num_tokens, [&](int row, int token, int m, int n, int v) {
            float sum = 0.0f;
            for (int s = 0; s < split_k; ++s) {
                float p;
                asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(p) : "l"(part + ((size_t)s * T_PAD + token) * rows + row));
                sum += p;
            }
            acc[m][n][v] = sum;
        });
        if (threadIdx.x == 0) counters[blockIdx.y] = 0;  // ready for the next launch
    }
    each_output(row0, rows, num_tokens, [&](int row, int token, int m, int n, int v) {
        const float b = has_bias ? from_half(bias[row]) : 0.0f;
        out[(size_t)token * out_stride + row] = to_half(acc[m][n][v] + b);
    });
}
