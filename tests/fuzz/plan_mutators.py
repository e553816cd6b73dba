"""Plan mutators: the fuzz corpus for the plan decoder and verifier (issue 6, "plans
as untrusted data"). Shared by tests/fuzz/test_plan_fuzz.py (a fixed, seeded CI run)
and scripts/fuzz_plans.py (longer runs).

A case is a mutated plan file. Checking it runs what an executor runs before it
touches XLA: `codec.decode_checked` (header, digest, signature, field types) and
`verify.verify` (ranges, references, lifetimes). Every case must end in one of

    refused    PlanError (or a subclass), with a message that matches `case.match`
    accepted   decoded and verified; allowed only where the mutation may be harmless:
               a byte-level case must then decode to exactly the seed plan (the
               digest covers the payload), a structural one must verify

and never in any other exception. `classify` says which, and why a case is bad.
This module runs the cases; the seeds and framing are plan_seeds.py's, each family
its own module (plan_byte_mutators, plan_struct_mutators, plan_targeted_mutators).

Families:
    bytes      byte-level mutations of real plan files (truncation, bit flips, byte
               overwrites, chunk duplication/deletion/swaps, prefix and header fields)
    struct     the payload decoded with msgpack, mutated as data (fields deleted,
               swapped, retyped, set to extreme values; lists emptied, duplicated,
               nested deeply), re-framed with a valid header and digest
    targeted   semantic breakage the verifier must name: offsets past the arena or
               misaligned, overlapping live tensors, a 2**60 arena, duplicate names,
               reads before writes, outputs never written, missing kernels/tensors
"""

import random
import re
import time


from aotplan.core import codec, verify
from aotplan.core.errors import PlanError
from plan_byte_mutators import byte_case
# (the names the CI run and scripts/fuzz_plans.py take from here)
from plan_seeds import (  # noqa: F401
    FAMILIES, K_NOFF, K_RETURNS, L_KERNEL, L_READS, L_WRITES, SIGN_KEY, T_DSHAPE, T_NAME, T_OFFSET, T_SHAPE, frame,
    load_payload, seeds,
)
from plan_struct_mutators import struct_case
from plan_targeted_mutators import TARGETED, targeted_case  # noqa: F401


__all__ = ["FAMILIES", "K_NOFF", "K_RETURNS", "L_KERNEL", "L_READS", "L_WRITES", "SIGN_KEY", "T_DSHAPE", "T_NAME",
           "T_OFFSET", "T_SHAPE", "TARGETED", "frame", "load_payload", "seeds", "targeted_case", "make_case", "check",
           "classify", "cases"]


# ---------------------------------------------------------------- running

def make_case(rng, seed, all_seeds, family):
    if family == "bytes":
        return byte_case(rng, seed, all_seeds)
    if family == "struct":
        return struct_case(rng, seed)
    return targeted_case(rng, seed)


def check(data, seed):
    """What an executor does to a plan file before XLA sees it."""
    plan, trusted = codec.decode_checked(data, seed.trust_key, seed.require_signature)
    verify.verify(plan)
    return plan, trusted


def classify(case, seed):
    """-> (outcome, detail): outcome "refused", "accepted", or "BAD ..." (a bug)."""
    t0 = time.perf_counter()
    try:
        plan, trusted = check(case.data, seed)
    except PlanError as e:
        msg = str(e)
        if case.match and not re.search(case.match, msg):
            return "BAD message", f"{msg!r} does not match {case.match!r}"
        if time.perf_counter() - t0 > 1.0:
            return "BAD slow", f"{time.perf_counter() - t0:.1f} s"
        return "refused", type(e).__name__
    except Exception as e:  # noqa: BLE001 -- the point: nothing but PlanError
        return f"BAD {type(e).__name__}", f"{type(e).__name__}: {str(e)[:300]}"
    if time.perf_counter() - t0 > 1.0:
        return "BAD slow", f"{time.perf_counter() - t0:.1f} s"
    if case.certain:
        return "BAD accepted", "a plan that must be refused decoded and verified"
    if case.family == "bytes" and (plan != seed.plan or trusted != bool(seed.trust_key)):
        return "BAD accepted", "a byte-level mutation decoded to a different plan"
    return "accepted", ""


def cases(seed_value, n, family, all_seeds):
    """`n` cases of one family from one integer seed; deterministic."""
    rng = random.Random(f"{family}:{seed_value}")
    for _ in range(n):
        seed = rng.choice(all_seeds)
        yield seed, make_case(rng, seed, all_seeds, family)

