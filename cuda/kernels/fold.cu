// ruccl-cuda kernels, part 2 of 3: fold, the local arithmetic of a combining step.
//
// ruccl_fold_<op>_<type>(dst, sources, k, n): for every i < n,
//
//     dst[i] = op(... op(op(x0[i], x1[i]), x2[i]) ..., x{k-1}[i]),   xj = sources.p[j]
//
// a left fold over k sources in the order given, 1 <= k <= RUCCL_FOLD_MAX, rounded to the
// storage type after every operation (exactly as the contract's reference folds, one pair at a
// time), so chaining launches — a later launch taking the earlier result as its x0 — gives the
// same bits as one long fold. The host passes the sources in the contract's order: the senders
// below the receiver ascending, the receiver's own elements at its own position, the senders
// above ascending. The receiver's own elements are `dst` itself: every thread reads all k values
// of its element before it writes dst[i], so that one alias is safe (hence no __restrict__ on
// dst). The other sources are received ranges in the receiver's scratch buffer; none overlaps
// dst. All pointers are in the receiving rank's context. Mean folds as sum (mean.cu scales once,
// at the end).

#define RUCCL_FOLD_MAX 16

// The source pointers, passed by value in the kernel's parameters (128 bytes): no pointer table
// in device memory, so a launch needs no upload and no allocation.
struct RucclSources {
    const void* p[RUCCL_FOLD_MAX];
};

template <class E, class Op>
__device__ __forceinline__ void ruccl_fold(typename E::Storage* dst, const RucclSources& sources,
                                           unsigned int k, ruccl_u64 n) {
    typedef typename E::Storage S;
    RUCCL_FOR_EACH_INDEX(i, n) {
        S acc = ((const S*)sources.p[0])[i];
        // Unrolled with constant indices, so every pointer is a parameter load, not local memory.
#pragma unroll
        for (unsigned int j = 1; j < RUCCL_FOLD_MAX; ++j) {
            if (j < k) {
                acc = E::store(Op::apply(E::load(acc), E::load(((const S*)sources.p[j])[i])));
            }
        }
        dst[i] = acc;
    }
}

#define RUCCL_FOLD_KERNEL(OP_NAME, OP, TYPE_NAME, E)                                            \
    extern "C" __global__ void ruccl_fold_##OP_NAME##_##TYPE_NAME(                              \
        E::Storage* dst, RucclSources sources, unsigned int k, ruccl_u64 n) {                   \
        ruccl_fold<E, OP>(dst, sources, k, n);                                                  \
    }

#define RUCCL_FOLD_KERNELS_FOR(TYPE_NAME, E)                                                    \
    RUCCL_FOLD_KERNEL(sum, RucclOpSum, TYPE_NAME, E)                                             \
    RUCCL_FOLD_KERNEL(prod, RucclOpProd, TYPE_NAME, E)                                           \
    RUCCL_FOLD_KERNEL(min, RucclOpMin, TYPE_NAME, E)                                             \
    RUCCL_FOLD_KERNEL(max, RucclOpMax, TYPE_NAME, E)

RUCCL_FOLD_KERNELS_FOR(f32, RucclF32)
RUCCL_FOLD_KERNELS_FOR(f64, RucclF64)
RUCCL_FOLD_KERNELS_FOR(f16, RucclF16)
RUCCL_FOLD_KERNELS_FOR(bf16, RucclBF16)
RUCCL_FOLD_KERNELS_FOR(i32, RucclI32)
RUCCL_FOLD_KERNELS_FOR(i64, RucclI64)
RUCCL_FOLD_KERNELS_FOR(i8, RucclI8)
RUCCL_FOLD_KERNELS_FOR(u8, RucclU8)
RUCCL_FOLD_KERNELS_FOR(u32, RucclU32)
RUCCL_FOLD_KERNELS_FOR(u64, RucclU64)
