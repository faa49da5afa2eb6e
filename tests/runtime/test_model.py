"""Model building: validation against the spec's operand lists, ordering, constants, DOT."""

import numpy as np
from conftest import add_relu_ref
from oputil import expect_error

import nnadapter_tvm as nna

P, OP = nna.Precision, nna.OperationType


def f32(model, dims):
    return model.add_operand(nna.OperandType(P.FLOAT32, dims))


def const_i32(model, values):
    o = model.add_operand(nna.OperandType(P.INT32, [len(values)]))
    model.set_operand_value(o, np.asarray(values, "int32"))
    return o


def test_wrong_operand_count_names_operation():
    m = nna.Model()
    a, b, out = f32(m, [2]), f32(m, [2]), f32(m, [2])
    expect_error(lambda: m.add_operation(OP.ADD, [a, b], [out]), "ADD", "exactly 3 inputs", "fuse_code")
    expect_error(lambda: m.add_operation(OP.RELU, [a], [out, b]), "RELU", "outputs")


def test_wrong_precision_names_operand():
    m = nna.Model()
    a, out = f32(m, [2]), f32(m, [2])
    b = m.add_operand(nna.OperandType(P.INT32, [2]))
    code = const_i32(m, [0])
    expect_error(lambda: m.add_operation(OP.ADD, [a, b, code], [out]), "ADD input 1 'input1'", "INT32")
    bad_code = m.add_operand(nna.OperandType(P.FLOAT32, [1]))
    expect_error(lambda: m.add_operation(OP.ADD, [a, a, bad_code], [out]), "'fuse_code'", "expected one of INT32")


def test_variadic_concat_counts():
    m = nna.Model()
    xs = [f32(m, [2, 2]) for _ in range(3)]
    axis, out = const_i32(m, [0]), f32(m, [6, 2])
    m.add_operation(OP.CONCAT, [*xs, axis], [out])
    expect_error(lambda: m.add_operation(OP.CONCAT, [axis], [f32(m, [1])]), "CONCAT", "at least 2")


def test_value_of_wrong_byte_length():
    m = nna.Model()
    c = f32(m, [2, 3])
    err = expect_error(lambda: m.set_operand_value(c, np.zeros(5, "float32")), "operand #0", "20 bytes", "expected 24")
    assert "dimensions [2, 3]" in str(err)
    expect_error(lambda: m.set_operand_value(c, np.zeros(6, "int32")), "dtype int32", "expected float32")


def test_set_value_copy_and_reference():
    m = nna.Model()
    a, b = f32(m, [3]), f32(m, [3])
    src = np.array([1, 2, 3], "float32")
    m.set_operand_value(a, src, copy=True)
    m.set_operand_value(b, src, copy=False)
    src[0] = 42
    assert a.value()[0] == 1 and a.type.lifetime == nna.Lifetime.CONSTANT_COPY
    assert b.value()[0] == 42 and b.type.lifetime == nna.Lifetime.CONSTANT_REFERENCE
    assert m.get_operand_type(a).dimensions == [3]
    m.set_operand_value(f32(m, [2]), bytes(8))  # raw bytes are accepted too


def test_empty_constant_values_are_accepted():
    """A constant with a zero in its shape holds no bytes; numpy's empty arrays must still be accepted."""
    m = nna.Model()
    c = m.add_operand(nna.OperandType(P.FLOAT32, [2, 0, 3]))
    m.set_operand_value(c, np.zeros([2, 0, 3], "float32"))
    assert c.value().shape == (2, 0, 3)


def test_operand_used_but_never_defined():
    m = nna.Model()
    x, dangling, out = f32(m, [2]), f32(m, [2]), f32(m, [2])
    m.add_operation(OP.ADD, [x, dangling, const_i32(m, [0])], [out])
    m.identify_inputs_and_outputs([x], [out])
    expect_error(m.finish, "ADD (operation #0) input 1", "never defined")


def test_cycle_is_rejected():
    m = nna.Model()
    x, a, b = f32(m, [2]), f32(m, [2]), f32(m, [2])
    code = const_i32(m, [0])
    m.add_operation(OP.ADD, [x, b, code], [a])
    m.add_operation(OP.RELU, [a], [b])
    m.identify_inputs_and_outputs([x], [b])
    expect_error(m.finish, "cycle", "ADD (operation #0)", "RELU (operation #1)")


def test_operations_in_any_order_are_sorted(llvm_context):
    m = nna.Model()
    x, mid, out = f32(m, [2, 3]), f32(m, [2, 3]), f32(m, [2, 3])
    c = m.add_operand(nna.OperandType(P.FLOAT32, [3]))
    m.set_operand_value(c, np.array([1.0, -2.0, 0.5], "float32"))
    m.add_operation(OP.RELU, [mid], [out])  # consumer first
    m.add_operation(OP.ADD, [x, c, const_i32(m, [0])], [mid])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    assert [op.type for op in m.operations] == [OP.ADD, OP.RELU]
    compilation = nna.Compilation(m, llvm_context)
    compilation.finish()
    x_val = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    y = np.empty((2, 3), "float32")
    execution = nna.Execution(compilation)
    execution.set_input(0, x_val)
    execution.set_output(0, y)
    execution.compute()
    np.testing.assert_array_equal(y, add_relu_ref(x_val))


def test_output_produced_twice_and_finished_model_is_frozen():
    m = nna.Model()
    x, out = f32(m, [2]), f32(m, [2])
    m.add_operation(OP.RELU, [x], [out])
    expect_error(lambda: m.add_operation(OP.SIGMOID, [x], [out]), "already produced by RELU")
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    expect_error(lambda: m.add_operand(nna.OperandType(P.FLOAT32, [1])), "finished")


def test_foreign_operand_and_unknown_operation():
    m1, m2 = nna.Model(), nna.Model()
    a = f32(m1, [2])
    expect_error(lambda: m2.add_operation(OP.RELU, [a], [f32(m2, [2])]), "RELU input 0", "not an operand of this model")
    expect_error(lambda: m1.add_operation(999, [a], [f32(m1, [2])]), "unknown operation type 999")


def test_declared_output_shape_mismatch_names_operand(llvm_context):
    m = nna.Model()
    x, out = f32(m, [2, 3]), f32(m, [2, 4])
    m.add_operation(OP.RELU, [x], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    expect_error(lambda: nna.Compilation(m, llvm_context).finish(), "RELU (operation #0) output 0", "declared 4")


def test_dot_dump_lists_operations_and_operands():
    from conftest import build_add_relu

    dot = build_add_relu().to_dot()
    assert dot.startswith("digraph model {") and dot.rstrip().endswith("}")
    assert "ADD\\n#0" in dot and "o0 -> n0" in dot and "n0 -> o3" in dot
