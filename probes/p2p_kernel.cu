// CUDA C source of the two kernels the p2p probe embeds as PTX text (probes/p2p.py: _PTX).
//
// The probe runs on hosts without a CUDA toolkit, so it cannot compile anything: it hands PTX
// to the driver's JIT (cuModuleLoadDataEx).  Regenerate the embedded text with exactly
//
//     nvcc -ptx -arch=compute_75 -O3 probes/p2p_kernel.cu -o -
//
// then drop comments and blank lines and rewrite the header to `.version 6.0` / `.target sm_50`
// (tests/test_p2p_ptx.py does this and fails when the probe's copy is stale).  Why the rewrite:
// CUDA 13's nvcc cannot emit anything older than compute_75 / PTX ISA 9.0, and PTX 9.0 needs a
// CUDA 13 driver.  Nothing below uses an instruction newer than PTX 6.0 / sm_50 (checked with
// ptxas for sm_75..sm_120 in the test), and PTX 6.0 loads on every driver since CUDA 9.0 (R384).
//
// fp_spin: holds a stream until the host sets *flag (or timeout_ns passes), so copies are
//   enqueued behind it and launch overhead stays outside the timed region (as nvbandwidth does).
// fp_copy: grid-stride 16-byte copy with cache-global loads/stores, used to read a peer's
//   memory from the SMs of the destination GPU.  n counts 16-byte elements.

extern "C" __global__ void fp_spin(volatile unsigned int *flag, unsigned long long timeout_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*flag == 0u) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) break;
    }
}

extern "C" __global__ void fp_copy(uint4 *dst, const uint4 *src, unsigned long long n)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        uint4 v = __ldcg(src + i);
        __stcg(dst + i, v);
    }
}
