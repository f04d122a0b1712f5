// ruccl-cuda kernels, part 2 of 3: combine, the reduce-scatter step's local arithmetic.
//
// ruccl_combine_<op>_<type>(dst, src, n): dst[i] = op(dst[i], src[i]) for i < n. `dst` is the
// receiving rank's own elements (its output buffer at the received range), `src` the range that
// arrived in its scratch buffer. Both are in the receiving rank's context; they never overlap.
// Mean combines as sum (the scaling is mean.cu's, once, at the end).

template <class E, class Op>
__device__ __forceinline__ void ruccl_combine(typename E::Storage* __restrict__ dst,
                                              const typename E::Storage* __restrict__ src,
                                              ruccl_u64 n) {
    RUCCL_FOR_EACH_INDEX(i, n) {
        dst[i] = E::store(Op::apply(E::load(dst[i]), E::load(src[i])));
    }
}

#define RUCCL_COMBINE_KERNEL(OP_NAME, OP, TYPE_NAME, E)                                         \
    extern "C" __global__ void ruccl_combine_##OP_NAME##_##TYPE_NAME(                           \
        E::Storage* __restrict__ dst, const E::Storage* __restrict__ src, ruccl_u64 n) {        \
        ruccl_combine<E, OP>(dst, src, n);                                                       \
    }

#define RUCCL_COMBINE_KERNELS_FOR(TYPE_NAME, E)                                                 \
    RUCCL_COMBINE_KERNEL(sum, RucclOpSum, TYPE_NAME, E)                                          \
    RUCCL_COMBINE_KERNEL(prod, RucclOpProd, TYPE_NAME, E)                                        \
    RUCCL_COMBINE_KERNEL(min, RucclOpMin, TYPE_NAME, E)                                          \
    RUCCL_COMBINE_KERNEL(max, RucclOpMax, TYPE_NAME, E)

RUCCL_COMBINE_KERNELS_FOR(f32, RucclF32)
RUCCL_COMBINE_KERNELS_FOR(f64, RucclF64)
RUCCL_COMBINE_KERNELS_FOR(f16, RucclF16)
RUCCL_COMBINE_KERNELS_FOR(bf16, RucclBF16)
RUCCL_COMBINE_KERNELS_FOR(i32, RucclI32)
RUCCL_COMBINE_KERNELS_FOR(i64, RucclI64)
