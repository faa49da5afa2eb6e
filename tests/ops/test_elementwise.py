"""ADD, SUB, MUL, DIV, MAX, MIN against numpy, with broadcasting and every fuse_code."""

import numpy as np
import pytest
from oputil import In, check_op, fuse, fuse_ref, rand

import nnadapter_tvm as nna

OP = nna.OperationType
REFS = {
    OP.ADD: np.add,
    OP.SUB: np.subtract,
    OP.MUL: np.multiply,
    OP.DIV: np.divide,
    OP.MAX: np.maximum,
    OP.MIN: np.minimum,
}
SHAPES = [((5,), (5,)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1, 3, 4, 5), (2, 3, 1, 1)), ((2, 1, 3, 1, 2), (3, 4, 1))]


@pytest.mark.parametrize("op", list(REFS), ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_binary_fuse_codes(op, code):
    a, b = rand(2, 3, 4, seed=1), rand(2, 3, 4, seed=2, low=0.5, high=3.0)
    # float32 arithmetic is exact-rounded on both sides; the tolerance only covers DIV's last ulp.
    check_op(op, [In(a), In(b), fuse(code)], fuse_ref(REFS[op](a, b), code), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(REFS), ids=lambda o: o.name)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_broadcasting(op, shapes):
    a, b = rand(*shapes[0], seed=3), rand(*shapes[1], seed=4, low=0.5, high=3.0)
    check_op(op, [In(a), In(b), fuse(0)], REFS[op](a, b), rtol=1e-6, atol=1e-6)
