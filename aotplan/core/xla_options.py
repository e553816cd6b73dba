"""XLA compile options for aotplan's kernels: the same when the compiler builds a plan
(its workspace figures and embedded executables) and when a host compiles the plan's
StableHLO.

CPU: XLA's CPU backend hands convolutions and dots (and elementwise/reduce fusions) to
YNNPACK by default, and builds each YNNPACK fusion lazily on the executable's first
run. aotplan hands it nothing (`xla_cpu_experimental_ynn_fusion_type` empty):
convolutions and dots are XLA's own (Eigen). Convolutions first (2-core AVX-512 build
machine, jaxlib 0.10.2): the ResNet-50 structure's first run 63-76 ms instead of
170-182 ms and its steady step 35 ms instead of 52 ms; DenseNet-121 32 vs 44 ms, UNet
91 vs 117 ms. Then dots (2-core AMD EPYC without AVX-512, issue 33): YNNPACK's dot reads
a weight passed as an argument (a plan's constants are its kernels' arguments) stored
(K, N) slowly wherever M > 1, repacking it in every call (GPT-2's LM head over 32
tokens 47-71 ms against Eigen's 28-36), and no one layout suits it at every M ((N, K) is
11x slower at M = 1); Eigen's dot with (K, N), the layout the weight_layout pass
stores, was within noise of the best of the four at every M measured, and whole
transformer models ran 1.43-1.61x onnxruntime's time against 1.58-1.70x for YNNPACK
with the layout chosen by M (docs/design.md, "Weight layout"). Outputs differ by float
rounding only (sums in another order).

XLA's CPU scheduler orders a kernel's instructions for concurrency by default; the
memory-optimized one (`CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED`) orders them for the
smallest peak of temp bytes. Measured on the same machine (scripts/bench_memory.py;
step time over 30 interleaved rounds): sink plans' workspace ResNet-50 23.7 -> 15.9
MiB and DenseNet-121 11.5 -> 7.5 MiB, fused UNet 39.5 -> 32.6 MiB (arena + workspace,
with its groups split and convolutions banded: compiler/pipeline.py), the rest
unchanged; step times 0.99-1.00x, fused UNet 1.04x; outputs bit-identical. With it a
banded convolution's bands can be copied out one at a time: the UNet's last decoder
convolution in 4 bands, 18.4 MiB of temp with the default order (it copied every
band's input first), 12.1 MiB with this one. The format calibration table's kernels
were re-timed with it rather than re-measured (compiler/calibration/cpu.json,
"retimed"; scripts/retime_calibration.py).

A jaxlib that does not know an option is compiled without our options (once, then
remembered); a user who sets an option in XLA_FLAGS keeps theirs.

A kernel's XLA compile releases the GIL, so the compiler (lowering a plan's launches)
and the executor (compiling a portable plan's kernels at load) run several at once on
a thread pool of `default_jobs()` threads; each compiles as it would alone.
"""

import os

CPU = {"xla_cpu_experimental_ynn_fusion_type": "",
       "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}

_rejected = set()  # platforms whose jaxlib refused our options


def for_platform(platform):
    """The options aotplan passes when compiling a kernel for `platform`."""
    if platform != "cpu" or platform in _rejected:
        return {}
    flags = os.environ.get("XLA_FLAGS", "")
    return {k: v for k, v in CPU.items() if k not in flags}


def compile(lowered, platform):
    """`lowered.compile()` with aotplan's options for `platform`."""
    opts = for_platform(platform)
    if opts:
        try:
            return lowered.compile(compiler_options=opts)
        except Exception as e:
            if not any(k in str(e) for k in opts):
                raise
            _rejected.add(platform)
    return lowered.compile()


def default_jobs():
    """XLA compiles to run at once: one per CPU this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))
