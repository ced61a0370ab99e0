// Marks functions that both the CPU engine and (when built) the CUDA engine compile, so that one element-wise
// definition of the math serves both.
#pragma once

#if defined(__CUDACC__)
#define BLOCKPS_HD __host__ __device__ __forceinline__
#else
#define BLOCKPS_HD inline
#endif
