"""What aotplan/core/spmd.py reads from XLA's compiled HLO text (literal modules, no
XLA): the collectives a program over several devices runs per step and the bytes each
device puts into them, where XLA combined several into one (a tuple result) and in
the asynchronous form a GPU program uses."""

from aotplan.core import spmd

HLO = """HloModule sink
ENTRY %main {
  %psum.14 = f32[1,16,32]{2,1,0} all-reduce(%bitcast.25), channel_id=1, replica_groups={{0,1}}
  %combined = (f32[4,64]{1,0}, f32[4]{0}) all-reduce(%a, %b), channel_id=2, replica_groups={{0,1}}
  %gather = f32[4,10]{1,0} all-gather(%c), channel_id=3, dimensions={1}
  %gather-start = (f32[4,5]{1,0}, f32[4,10]{1,0}) all-gather-start(%c), dimensions={1}
  %gather-done = f32[4,10]{1,0} all-gather-done(%gather-start)
  %reduce-start = bf16[8]{0} all-reduce-start(%d)
  %reduce-done = bf16[8]{0} all-reduce-done(%reduce-start)
  %sum = f32[3]{0} add(%a, %b), metadata={op_name="all-reduce(x)"}
}
"""


def test_collectives_and_the_bytes_each_device_sends():
    count, moved = spmd.collectives_in_hlo(HLO, devices=2)
    assert count == 5  # (the -done halves and an op named after one are not collectives)
    # 2048 + (1024 + 16) combined + 160/2 gathered + 80 (the start's operand) + 16 bf16
    assert moved == 2048 + 1040 + 80 + 80 + 16


def test_a_program_without_collectives():
    assert spmd.collectives_in_hlo("ENTRY %main {\n  %x = f32[3]{0} add(%a, %b)\n}\n", devices=4) == (0, 0)
