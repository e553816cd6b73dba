"""Per-step work on constants in a compiled kernel: the transposes and copies whose
operand is one of the kernel's constant arguments (the constant pool), found in the
compiled program's HLO text.

A frozen plan should store each weight in the layout its kernel reads (the
`weight_layout` pass); where it does not, XLA relayouts the weight in every step (a
`transpose_copy_fusion` over the weight), which `count` finds: a parameter of the
entry computation that is a constant argument, followed through the ops that keep
its values (bitcast, reshape, convert, slice, copy, transpose) and into the fused
computations it is passed to.
"""

import re

_HEAD = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(.*->.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*.+?\s([a-z][a-z0-9\-]*)\((.*?)\)(.*)$")
_OPERAND = re.compile(r"%([^\s,()]+)")
_CALLS = re.compile(r"\bcalls=%?([^\s,}]+)")
MOVES = ("transpose", "copy", "pad")
# ops whose result holds its (first) operand's values, relaid or not
_KEEPS = {"bitcast", "reshape", "convert", "bitcast-convert", "slice", "copy", "transpose", "pad", "get-tuple-element"}


class _Instruction:
    __slots__ = ("root", "name", "op", "args", "operands", "callee")

    def __init__(self, m):
        self.root, self.name, self.op, self.args = bool(m.group(1)), m.group(2), m.group(3), m.group(4)
        self.operands = _OPERAND.findall(self.args)
        calls = _CALLS.search(m.group(5))
        self.callee = calls.group(1) if calls else None


def _computations(hlo_text):
    """-> ({name: [_Instruction]}, the entry computation's name)."""
    comps, entry, current = {}, None, None
    for line in hlo_text.splitlines():
        head = _HEAD.match(line)
        if head:
            current = comps.setdefault(head.group(2), [])
            entry = head.group(2) if head.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        if current is not None:
            m = _INSTRUCTION.match(line)
            if m:
                current.append(_Instruction(m))
    return comps, entry


def _walk(comps, name, constant_params, depth=0):
    """-> (moves of constants in computation `name`, whether its root holds a
    constant's values), where its parameters numbered in `constant_params` are
    constants."""
    held, moves, root_held = set(), 0, False
    for ins in comps.get(name, ()):
        if ins.op == "parameter":
            if ins.args.strip().isdigit() and int(ins.args) in constant_params:
                held.add(ins.name)
        elif ins.op == "fusion" and ins.callee and depth < 8:
            inner = {i for i, o in enumerate(ins.operands) if o in held}
            if inner:
                n, holds = _walk(comps, ins.callee, inner, depth + 1)
                moves += n
                if holds:
                    held.add(ins.name)
        elif ins.operands and ins.operands[0] in held:
            moves += ins.op in MOVES
            if ins.op in _KEEPS:
                held.add(ins.name)
        root_held = root_held or (ins.root and ins.name in held)
    return moves, root_held


def count(hlo_text, constant_params):
    """Transposes and copies of constants per step in a compiled program (its HLO text,
    `compiled.as_text()`), where the entry computation's parameters numbered in
    `constant_params` are constants."""
    comps, entry = _computations(hlo_text)
    return _walk(comps, entry, set(constant_params))[0] if entry else 0
