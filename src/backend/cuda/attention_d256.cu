// The tensor-core attention kernels for head_dim 256 (one file per head_dim, so builds run in parallel).
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/prefill_attention.cuh"

namespace tide::cuda::mma {

template void launch_prefill<256>(const PagedAttentionParams&, int64_t, cudaStream_t);
template void launch_decode<256>(const PagedAttentionParams&, int64_t, int64_t, float*, float*, const DecodePlan&,
                                 cudaStream_t);

}  // namespace tide::cuda::mma
