// Does the GPU's L2 serve reads of pinned host memory that the same GPU has
// just written? A probe for issue 20 (the host-path all-gather's step on a
// shared GPU), not part of the library. Build and run on the device:
//   nvcc -O2 -arch=sm_90 -o /tmp/sysmem_l2 bench/probe/sysmem_l2.cu && /tmp/sysmem_l2
// For each size: SM loads (16-byte, volatile, every SM) of a pinned, mapped
// host buffer (a) after the CPU wrote it, (b) right after a GPU kernel wrote
// it, and the GPU kernel's write rate; median of 9 runs each, in GB/s.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__global__ void read_sys(const uint4* p, size_t n, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

__global__ void write_sys(uint4* p, size_t n, unsigned salt) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((unsigned)i ^ salt, salt, (unsigned)i, ~salt);
    __threadfence_system();
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    printf("SMs %d, L2 %.1f MiB\n", sms, l2 / 1048576.0);
    const size_t max = 256ull << 20;
    void* host = nullptr;
    CK(cudaHostAlloc(&host, max, cudaHostAllocMapped | cudaHostAllocPortable));
    void* dev = nullptr;
    CK(cudaHostGetDevicePointer(&dev, host, 0));
    unsigned* sink = nullptr;
    CK(cudaMalloc(&sink, 4));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const int grid = sms * 2, block = 512;
    printf("| MiB | read after CPU write GB/s | read after GPU write GB/s | GPU write GB/s |\n|---|---|---|---|\n");
    for (size_t mib : {4, 8, 16, 24, 32, 48, 64, 128, 256}) {
        const size_t bytes = mib << 20, n = bytes / 16;
        std::vector<float> cold, warm, wr;
        for (int rep = 0; rep < 9; rep++) {
            memset(host, rep + 1, bytes);  // CPU write: nothing of it in the GPU's L2
            CK(cudaEventRecord(a));
            read_sys<<<grid, block>>>((const uint4*)dev, n, sink);
            CK(cudaGetLastError());
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a, b));
            cold.push_back(bytes / (ms * 1e6f));
            CK(cudaEventRecord(a));
            write_sys<<<grid, block>>>((uint4*)dev, n, rep);
            CK(cudaGetLastError());
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms, a, b));
            wr.push_back(bytes / (ms * 1e6f));
            CK(cudaEventRecord(a));
            read_sys<<<grid, block>>>((const uint4*)dev, n, sink);
            CK(cudaGetLastError());
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms, a, b));
            warm.push_back(bytes / (ms * 1e6f));
        }
        printf("| %zu | %.1f | %.1f | %.1f |\n", mib, median(cold), median(warm), median(wr));
    }
    CK(cudaFreeHost(host));
    return 0;
}
