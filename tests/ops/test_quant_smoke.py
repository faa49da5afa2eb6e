"""Quantized ADD end to end: int8 in, dequantize-compute-requantize inside the module, int8 out."""

import numpy as np
from oputil import check_quantized, fuse, q8_input, rand


def test_add_q8():
    import nnadapter_tvm as nna

    a, a_real = q8_input(rand(2, 3, 4, seed=1), 0.02)
    b, b_real = q8_input(rand(2, 3, 4, seed=2), 0.03)
    check_quantized(nna.OperationType.ADD, [a, b, fuse(0)], a_real + b_real, out_scale=0.05)


def test_add_q8_saturates():
    import nnadapter_tvm as nna

    a, a_real = q8_input(np.full((4,), 2.0, "float32"), 0.02)
    got = check_quantized(nna.OperationType.ADD, [a, a, fuse(0)], a_real + a_real, out_scale=0.01)
    assert (got == 127).all()
