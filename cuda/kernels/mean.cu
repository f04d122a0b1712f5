// ruccl-cuda kernels, part 3 of 3: mean, the final scaling of ReduceOperation::Mean.
//
// ruccl_mean_<type>(data, n, world): data[i] = data[i] / world, computed as
// - floating types: one IEEE division in the compute type (f32 for f16 and bf16, f64 for f64),
//   correctly rounded (NVRTC and nvcc divide with --prec-div=true unless told otherwise, and the
//   crate never tells them otherwise), then one rounding back to storage — what the simulated
//   device's reference computes, so Mean agrees with it bit for bit;
// - integers: the (wrapped) sum divided by world, truncating toward zero, as C, Rust's `/` and
//   NCCL's ncclAvg do; unsigned types divide as unsigned. The quotient's magnitude is at most the
//   sum's, so it fits the type again (even i8's -128 over one rank).

__device__ __forceinline__ float ruccl_scale(float v, unsigned int world) {
    return v / (float)world;
}
__device__ __forceinline__ double ruccl_scale(double v, unsigned int world) {
    return v / (double)world;
}
__device__ __forceinline__ int ruccl_scale(int v, unsigned int world) {
    return v / (int)world;
}
__device__ __forceinline__ long long ruccl_scale(long long v, unsigned int world) {
    return v / (long long)world;
}
__device__ __forceinline__ ruccl_i8 ruccl_scale(ruccl_i8 v, unsigned int world) {
    return (ruccl_i8)((int)v / (int)world);
}
__device__ __forceinline__ ruccl_u8 ruccl_scale(ruccl_u8 v, unsigned int world) {
    return (ruccl_u8)((unsigned int)v / world);
}
__device__ __forceinline__ ruccl_u32 ruccl_scale(ruccl_u32 v, unsigned int world) {
    return v / world;
}
__device__ __forceinline__ ruccl_u64 ruccl_scale(ruccl_u64 v, unsigned int world) {
    return v / (ruccl_u64)world;
}

template <class E>
__device__ __forceinline__ void ruccl_mean(typename E::Storage* __restrict__ data, ruccl_u64 n,
                                           unsigned int world) {
    RUCCL_FOR_EACH_INDEX(i, n) {
        data[i] = E::store(ruccl_scale(E::load(data[i]), world));
    }
}

#define RUCCL_MEAN_KERNEL(TYPE_NAME, E)                                                          \
    extern "C" __global__ void ruccl_mean_##TYPE_NAME(E::Storage* __restrict__ data, ruccl_u64 n, \
                                                      unsigned int world) {                      \
        ruccl_mean<E>(data, n, world);                                                           \
    }

RUCCL_MEAN_KERNEL(f32, RucclF32)
RUCCL_MEAN_KERNEL(f64, RucclF64)
RUCCL_MEAN_KERNEL(f16, RucclF16)
RUCCL_MEAN_KERNEL(bf16, RucclBF16)
RUCCL_MEAN_KERNEL(i32, RucclI32)
RUCCL_MEAN_KERNEL(i64, RucclI64)
RUCCL_MEAN_KERNEL(i8, RucclI8)
RUCCL_MEAN_KERNEL(u8, RucclU8)
RUCCL_MEAN_KERNEL(u32, RucclU32)
RUCCL_MEAN_KERNEL(u64, RucclU64)
