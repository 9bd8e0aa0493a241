// The host shim: what kernel.cu's shared functions need of CUDA, for a
// plain C++ compiler (g++), so that the Go tests run the kernel's own
// parser, classifier and stages on the host (main.cc, gpu/hostkernel.go).
// Only the functions above wf_walk's end in kernel.cu build this way; the
// CUDA kernel itself is left out (WF_HOST).
#pragma once
#define WF_HOST 1
#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline __attribute__((always_inline))
#include <stdint.h>
