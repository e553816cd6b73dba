"""XLA compile options for aotplan's kernels: the same when the compiler builds a plan
(its workspace figures and embedded executables) and when a host compiles the plan's
StableHLO.

CPU: XLA's CPU backend hands convolutions (and elementwise/reduce fusions) to YNNPACK
by default, and builds each YNNPACK fusion lazily on the executable's first run. On
the build machine (2-core AVX-512, jaxlib 0.10.2) keeping YNNPACK for dots only
(`LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`) made the ResNet-50 structure's first run
63-76 ms instead of 170-182 ms and its steady step 35 ms instead of 52 ms; DenseNet-121
32 vs 44 ms, UNet 91 vs 117 ms, BERT-4 the same (27 vs 26 ms). Outputs differ by
float rounding only (convolutions are summed in another order).

A jaxlib that does not know the option is compiled without it (once, then
remembered); a user who sets the option in XLA_FLAGS keeps theirs.
"""

import os

CPU = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}

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
