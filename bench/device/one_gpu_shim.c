/* A preload that makes one GPU look like ONE_GPU_SHIM_DEVICES GPUs (default 8) to a CUDA
 * runtime program, so that a program which gives rank i device i (nccl-tests' -g N and -t N
 * do, and refuse more ranks than devices) runs N ranks on the one GPU there is, unchanged.
 * Device d of the program is device d % (real count). Only the runtime calls that take or
 * count device ordinals are wrapped; everything else (the drop-in, the driver) sees the real
 * device. For bench/device/nccl_tests.sh; ranks sharing a GPU are never an N-GPU result.
 *
 *   gcc -O2 -shared -fPIC -o libonegpu.so bench/device/one_gpu_shim.c -ldl
 *   LD_PRELOAD=libonegpu.so:libtpcomm_nccl.so all_reduce_perf -g 4 ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t; /* cudaSuccess is 0 */

static void *next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "one_gpu_shim: %s not found behind the shim (is the CUDA runtime linked?)\n", name);
    abort();
  }
  return f;
}

static int real_count(void) {
  static int n = 0;
  if (n == 0) {
    cudaError_t (*f)(int *) = (cudaError_t (*)(int *))next("cudaGetDeviceCount");
    int c = 0;
    if (f(&c) != 0 || c < 1) return 1;
    n = c;
  }
  return n;
}

static int map(int d) { return d < 0 ? d : d % real_count(); }

cudaError_t cudaGetDeviceCount(int *count) {
  cudaError_t (*f)(int *) = (cudaError_t (*)(int *))next("cudaGetDeviceCount");
  cudaError_t e = f(count);
  if (e != 0) return e;
  const char *s = getenv("ONE_GPU_SHIM_DEVICES");
  int want = s ? atoi(s) : 8;
  if (want > *count) *count = want;
  return 0;
}

cudaError_t cudaSetDevice(int d) {
  cudaError_t (*f)(int) = (cudaError_t (*)(int))next("cudaSetDevice");
  return f(map(d));
}

cudaError_t cudaGetDeviceProperties_v2(void *prop, int d) {
  cudaError_t (*f)(void *, int) = (cudaError_t (*)(void *, int))next("cudaGetDeviceProperties_v2");
  return f(prop, map(d));
}

cudaError_t cudaGetDeviceProperties(void *prop, int d) {
  cudaError_t (*f)(void *, int) = (cudaError_t (*)(void *, int))next("cudaGetDeviceProperties");
  return f(prop, map(d));
}

cudaError_t cudaDeviceGetAttribute(int *v, int attr, int d) {
  cudaError_t (*f)(int *, int, int) = (cudaError_t (*)(int *, int, int))next("cudaDeviceGetAttribute");
  return f(v, attr, map(d));
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
  cudaError_t (*f)(char *, int, int) = (cudaError_t (*)(char *, int, int))next("cudaDeviceGetPCIBusId");
  return f(id, len, map(d));
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
  cudaError_t (*f)(int *, int, int) = (cudaError_t (*)(int *, int, int))next("cudaDeviceCanAccessPeer");
  return f(can, map(d), map(peer));
}
