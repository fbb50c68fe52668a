"""/proc/cpuinfo texts of CPUs with and without native bfloat16, for the tests of the CPU
reader and of the precision rule."""

#: The first lines of this project's build machine's /proc/cpuinfo (a Zen 4 VM), two processors.
ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse2 fma avx avx2 avx512f avx512_bf16 avx512_vnni
bogomips\t: 4800.00

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: Some Other CPU
flags\t\t: fpu sse2
"""
#: A Zen 3 VM: AVX2 and FMA, no AVX-512 at all.
ZEN3 = "cpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t: fma avx2\n"
SAPPHIRE_RAPIDS = (
    "model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\ncpu family\t: 6\n"
    "model\t\t: 143\nflags\t: avx2 fma avx512f amx_bf16 amx_tile amx_int8 avx512_bf16\n"
)
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 sve\nCPU part\t: 0xd40\n"
