// ruccl-cuda kernels, part 1 of 3: element types and operators.
//
// The three parts (common.cuh, fold.cu, mean.cu) are concatenated, in that order, into one
// translation unit: by the crate (src/kernels.rs, for NVRTC at run time) and by
// scripts/gen-ptx.sh (for the PTX shipped in kernels/ruccl_kernels.ptx). They include no header,
// so NVRTC (which has no include path here) and nvcc compile exactly the same text.
//
// Storage types are the bits the host sees (f16 and bf16 as 16-bit patterns); every operator
// works on a compute type: f16 and bf16 widen to f32, which rounds each sum or product once,
// correctly (f32 carries more than 2p + 2 bits for both), like the host reference.
// Integers (i8, i32, i64, u8, u32, u64) wrap on overflow, modulo 2^bits of their own width (two's
// complement, as NCCL and Rust's wrapping ops), and min and max compare them in their own order
// (unsigned types as unsigned); floating min and max return the other operand when one is NaN
// (IEEE minNum, as C's fmin and Rust's f32::min).

typedef unsigned long long ruccl_u64;
typedef signed char ruccl_i8;
typedef unsigned char ruccl_u8;
typedef unsigned int ruccl_u32;
typedef unsigned short ruccl_f16_bits;
typedef unsigned short ruccl_bf16_bits;

__device__ __forceinline__ float ruccl_f16_to_f32(ruccl_f16_bits bits) {
    float value;
    asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
    return value;
}

__device__ __forceinline__ ruccl_f16_bits ruccl_f32_to_f16(float value) {
    ruccl_f16_bits bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
    return bits;
}

__device__ __forceinline__ float ruccl_bf16_to_f32(ruccl_bf16_bits bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// Round to nearest, ties to even; a NaN stays a (quiet) NaN with its sign.
__device__ __forceinline__ ruccl_bf16_bits ruccl_f32_to_bf16(float value) {
    unsigned int word = __float_as_uint(value);
    if ((word & 0x7fffffffu) > 0x7f800000u) {
        return (ruccl_bf16_bits)((word >> 16) | 0x0040u);
    }
    unsigned int bias = 0x7fffu + ((word >> 16) & 1u);
    return (ruccl_bf16_bits)((word + bias) >> 16);
}

// One struct per element type: its storage, compute type, and the two conversions.
struct RucclF32 {
    typedef float Storage;
    typedef float Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclF64 {
    typedef double Storage;
    typedef double Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclF16 {
    typedef ruccl_f16_bits Storage;
    typedef float Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return ruccl_f16_to_f32(v); }
    static __device__ __forceinline__ Storage store(Compute v) { return ruccl_f32_to_f16(v); }
};
struct RucclBF16 {
    typedef ruccl_bf16_bits Storage;
    typedef float Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return ruccl_bf16_to_f32(v); }
    static __device__ __forceinline__ Storage store(Compute v) { return ruccl_f32_to_bf16(v); }
};
struct RucclI32 {
    typedef int Storage;
    typedef int Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclI64 {
    typedef long long Storage;
    typedef long long Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclI8 {
    typedef ruccl_i8 Storage;
    typedef ruccl_i8 Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclU8 {
    typedef ruccl_u8 Storage;
    typedef ruccl_u8 Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclU32 {
    typedef ruccl_u32 Storage;
    typedef ruccl_u32 Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};
struct RucclU64 {
    typedef ruccl_u64 Storage;
    typedef ruccl_u64 Compute;
    static __device__ __forceinline__ Compute load(Storage v) { return v; }
    static __device__ __forceinline__ Storage store(Compute v) { return v; }
};

// Operators on compute types. Integer sums and products go through unsigned arithmetic, which
// wraps by definition (signed overflow is undefined in C++); 8-bit operands are promoted to int
// by C++ first, so their results are computed in 32 bits and narrowed back to 8. Narrowing to an
// unsigned type keeps the low bits by definition; narrowing to a signed type keeps them too
// (two's complement: guaranteed since C++20, and what NVRTC and nvcc have always done).
__device__ __forceinline__ float ruccl_sum(float a, float b) { return a + b; }
__device__ __forceinline__ double ruccl_sum(double a, double b) { return a + b; }
__device__ __forceinline__ int ruccl_sum(int a, int b) {
    return (int)((unsigned int)a + (unsigned int)b);
}
__device__ __forceinline__ long long ruccl_sum(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}
__device__ __forceinline__ ruccl_i8 ruccl_sum(ruccl_i8 a, ruccl_i8 b) {
    return (ruccl_i8)((unsigned int)a + (unsigned int)b);
}
__device__ __forceinline__ ruccl_u8 ruccl_sum(ruccl_u8 a, ruccl_u8 b) {
    return (ruccl_u8)((unsigned int)a + (unsigned int)b);
}
__device__ __forceinline__ ruccl_u32 ruccl_sum(ruccl_u32 a, ruccl_u32 b) { return a + b; }
__device__ __forceinline__ ruccl_u64 ruccl_sum(ruccl_u64 a, ruccl_u64 b) { return a + b; }

__device__ __forceinline__ float ruccl_prod(float a, float b) { return a * b; }
__device__ __forceinline__ double ruccl_prod(double a, double b) { return a * b; }
__device__ __forceinline__ int ruccl_prod(int a, int b) {
    return (int)((unsigned int)a * (unsigned int)b);
}
__device__ __forceinline__ long long ruccl_prod(long long a, long long b) {
    return (long long)((unsigned long long)a * (unsigned long long)b);
}
__device__ __forceinline__ ruccl_i8 ruccl_prod(ruccl_i8 a, ruccl_i8 b) {
    return (ruccl_i8)((unsigned int)a * (unsigned int)b);
}
__device__ __forceinline__ ruccl_u8 ruccl_prod(ruccl_u8 a, ruccl_u8 b) {
    return (ruccl_u8)((unsigned int)a * (unsigned int)b);
}
__device__ __forceinline__ ruccl_u32 ruccl_prod(ruccl_u32 a, ruccl_u32 b) { return a * b; }
__device__ __forceinline__ ruccl_u64 ruccl_prod(ruccl_u64 a, ruccl_u64 b) { return a * b; }

__device__ __forceinline__ float ruccl_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double ruccl_min(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ int ruccl_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ long long ruccl_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ ruccl_i8 ruccl_min(ruccl_i8 a, ruccl_i8 b) { return a < b ? a : b; }
__device__ __forceinline__ ruccl_u8 ruccl_min(ruccl_u8 a, ruccl_u8 b) { return a < b ? a : b; }
__device__ __forceinline__ ruccl_u32 ruccl_min(ruccl_u32 a, ruccl_u32 b) { return a < b ? a : b; }
__device__ __forceinline__ ruccl_u64 ruccl_min(ruccl_u64 a, ruccl_u64 b) { return a < b ? a : b; }

__device__ __forceinline__ float ruccl_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double ruccl_max(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ int ruccl_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ long long ruccl_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ ruccl_i8 ruccl_max(ruccl_i8 a, ruccl_i8 b) { return a > b ? a : b; }
__device__ __forceinline__ ruccl_u8 ruccl_max(ruccl_u8 a, ruccl_u8 b) { return a > b ? a : b; }
__device__ __forceinline__ ruccl_u32 ruccl_max(ruccl_u32 a, ruccl_u32 b) { return a > b ? a : b; }
__device__ __forceinline__ ruccl_u64 ruccl_max(ruccl_u64 a, ruccl_u64 b) { return a > b ? a : b; }

struct RucclOpSum {
    template <class C> static __device__ __forceinline__ C apply(C a, C b) { return ruccl_sum(a, b); }
};
struct RucclOpProd {
    template <class C> static __device__ __forceinline__ C apply(C a, C b) { return ruccl_prod(a, b); }
};
struct RucclOpMin {
    template <class C> static __device__ __forceinline__ C apply(C a, C b) { return ruccl_min(a, b); }
};
struct RucclOpMax {
    template <class C> static __device__ __forceinline__ C apply(C a, C b) { return ruccl_max(a, b); }
};

// Grid-stride loops: any grid size covers any n, so the host caps the grid at what fills the GPU.
#define RUCCL_FOR_EACH_INDEX(i, n)                                                  \
    for (ruccl_u64 i = (ruccl_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);   \
         i += (ruccl_u64)blockDim.x * gridDim.x)
