"""Build, compile and run a one-operation model through the public API."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

import nnadapter_tvm as nna

P = nna.Precision
UNKNOWN = nna.UNKNOWN
# The plain (unquantized) precision of each numpy element type, by the type's name ("int8" -> INT8).
PRECISION = {
    "bool": P.BOOL8,
    "int8": P.INT8,
    "uint8": P.UINT8,
    "int16": P.INT16,
    "uint16": P.UINT16,
    "int32": P.INT32,
    "uint32": P.UINT32,
    "int64": P.INT64,
    "uint64": P.UINT64,
    "float16": P.FLOAT16,
    "float32": P.FLOAT32,
    "float64": P.FLOAT64,
}


@dataclasses.dataclass
class In:
    """A model input: fed at execution time. ``dims`` overrides the declared dimensions (e.g. UNKNOWN)."""

    value: np.ndarray
    precision: nna.Precision = P.FLOAT32
    dims: Sequence[int] | None = None
    scale: float | None = None
    zero_point: int | None = None


@dataclasses.dataclass
class Const:
    """A constant operand set with ``set_operand_value``; ``None`` value means an empty operand."""

    value: np.ndarray | None
    precision: nna.Precision = P.FLOAT32
    scale: float | Sequence[float] | None = None
    zero_point: int | None = None
    channel_dim: int | None = None


def i32(v) -> Const:
    return Const(np.asarray(v, "int32"), P.INT32)


def i64(v) -> Const:
    return Const(np.asarray(v, "int64"), P.INT64)


def f32(v) -> Const:
    return Const(np.asarray(v, "float32"), P.FLOAT32)


def b8(v) -> Const:
    return Const(np.asarray(v, "bool"), P.BOOL8)


def fuse(code) -> Const:
    return i32([int(code)])


@dataclasses.dataclass
class Out:
    precision: nna.Precision = P.FLOAT32
    dims: Sequence[int] | None = None  # None: declare the reference's shape
    scale: float | None = None
    zero_point: int | None = None


def build_model(op_type, inputs: Sequence, outputs: Sequence[Out], ref_shapes: Sequence[tuple]) -> nna.Model:
    model = nna.Model()
    operands, model_inputs = [], []
    for arg in inputs:
        if isinstance(arg, In):
            dims = list(arg.value.shape) if arg.dims is None else list(arg.dims)
            t = nna.OperandType(arg.precision, dims, scale=arg.scale, zero_point=arg.zero_point)
            operand = model.add_operand(t)
            model_inputs.append(operand)
        else:
            value = np.zeros([0], "int32") if arg.value is None else np.asarray(arg.value)
            t = nna.OperandType(
                arg.precision,
                list(value.shape),
                scale=arg.scale,
                zero_point=arg.zero_point,
                channel_dim=arg.channel_dim,
            )
            operand = model.add_operand(t)
            model.set_operand_value(operand, np.ascontiguousarray(value.astype(t.dtype)))
        operands.append(operand)
    outs = []
    for out, shape in zip(outputs, ref_shapes):
        dims = list(shape) if out.dims is None else list(out.dims)
        outs.append(model.add_operand(nna.OperandType(out.precision, dims, scale=out.scale, zero_point=out.zero_point)))
    model.add_operation(op_type, operands, outs)
    model.identify_inputs_and_outputs(model_inputs, outs)
    model.finish()
    return model


def run_model(
    model: nna.Model, feeds: Sequence[np.ndarray], device: str = "llvm", properties: str = ""
) -> list[np.ndarray]:
    context = nna.Context([nna.Device.acquire(device)], properties)
    compilation = nna.Compilation(model, context)
    compilation.finish()
    return execute(compilation, feeds)


def execute(compilation: nna.Compilation, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One execution of ``compilation`` on ``feeds``; outputs take the sizes the execution reports."""
    _, output_types = compilation.query_inputs_and_outputs()
    execution = nna.Execution(compilation)
    for i, feed in enumerate(feeds):
        execution.set_input(i, np.ascontiguousarray(feed))
    results: list[np.ndarray | None] = [None] * len(output_types)

    def make_access(i: int):
        def access(memory, operand_type: nna.OperandType):
            results[i] = np.empty(operand_type.dimensions, operand_type.dtype)
            return results[i]

        return access

    for i in range(len(output_types)):
        execution.set_output(i, None, make_access(i))
    execution.compute()
    return results


def run_op(op_type, inputs: Sequence, outputs: Sequence[Out], ref_shapes: Sequence[tuple]) -> list[np.ndarray]:
    model = build_model(op_type, inputs, outputs, ref_shapes)
    feeds = [arg.value for arg in inputs if isinstance(arg, In)]
    return run_model(model, feeds)


def check_op(
    op_type,
    inputs: Sequence,
    expected: Sequence[np.ndarray] | np.ndarray,
    outputs: Sequence[Out] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """Run ``op_type`` on ``inputs`` and compare each output with ``expected`` (shape, dtype, values)."""
    expected = [expected] if isinstance(expected, np.ndarray) else list(expected)
    outputs = list(outputs) if outputs is not None else [Out(_precision_of(e)) for e in expected]
    got = run_op(op_type, inputs, outputs, [e.shape for e in expected])
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"output {i}: shape {g.shape} != reference {e.shape}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != reference {e.dtype}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")
    return got


def _precision_of(array: np.ndarray) -> nna.Precision:
    return {
        "float32": P.FLOAT32,
        "float16": P.FLOAT16,
        "float64": P.FLOAT64,
        "int32": P.INT32,
        "int64": P.INT64,
        "int8": P.INT8,
        "int16": P.INT16,
        "uint8": P.UINT8,
        "bool": P.BOOL8,
    }[str(array.dtype)]


def fuse_ref(y: np.ndarray, code) -> np.ndarray:
    """The fused activations; RELU1 is [0, 1] as in Paddle-Lite's drivers (NNAPI uses [-1, 1])."""
    code = nna.FuseCode(code)
    if code == nna.FuseCode.RELU:
        return np.maximum(y, 0)
    if code == nna.FuseCode.RELU1:
        return np.clip(y, 0, 1)
    if code == nna.FuseCode.RELU6:
        return np.clip(y, 0, 6)
    return y


def conv2d_ref(x, w, b, pads, strides, dilations, group):
    """Direct grouped convolution in float64; ``pads`` in the spec's order [top, bottom, left, right]."""
    n, _, h, wd = x.shape
    c_out, c_per_group, kh, kw = w.shape
    top, bottom, left, right = pads
    (sh, sw), (dh, dw) = strides, dilations
    h_out = (h + top + bottom - (dh * (kh - 1) + 1)) // sh + 1
    w_out = (wd + left + right - (dw * (kw - 1) + 1)) // sw + 1
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (top, bottom), (left, right)))
    y = np.zeros((n, c_out, h_out, w_out))
    out_per_group = c_out // group
    for o in range(c_out):
        g = o // out_per_group
        xg = xp[:, g * c_per_group : (g + 1) * c_per_group]
        for i in range(kh):
            for j in range(kw):
                patch = xg[
                    :, :, i * dh : i * dh + sh * (h_out - 1) + 1 : sh, j * dw : j * dw + sw * (w_out - 1) + 1 : sw
                ]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j].astype("float64"))
    if b is not None:
        y += b.astype("float64")[None, :, None, None]
    return y.astype("float32")


def expect_error(fn, *fragments, code=nna.ResultCode.INVALID_PARAMETER) -> nna.NNAdapterError:
    """``fn()`` must raise NNAdapterError with ``code`` and a message holding every fragment."""
    import pytest

    with pytest.raises(nna.NNAdapterError) as err:
        fn()
    assert err.value.code == code, err.value
    for fragment in fragments:
        assert fragment in str(err.value), f"{fragment!r} not in {err.value}"
    return err.value


def rand(*shape, seed: int = 0, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype("float32")


# -- quantized operands -----------------------------------------------------------------
# The runtime's rule (docs/quantization.md): real = (q - zero_point) * scale on the way in;
# q = saturate(round_half_to_even(real / scale) + zero_point) on the way out.


def quantize(x: np.ndarray, scale, zero_point: int = 0, dtype: str = "int8", axis: int | None = None) -> np.ndarray:
    """The reference quantizer, written from the rule above (per channel when ``axis`` is given)."""
    scale = np.asarray(scale, "float32")
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
    info = np.iinfo(dtype)
    q = np.rint(x.astype("float32") / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale, zero_point: int = 0, axis: int | None = None) -> np.ndarray:
    scale = np.asarray(scale, "float32")
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
    return ((q.astype("float32") - zero_point) * scale).astype("float32")


def integer_operands(rng, weight_shape: tuple, in_scale: float, per_channel: bool, bias: str | None) -> tuple:
    """A random int8 weight (per layer, or per output channel along axis 0) and a bias for the tests of
    quantized products on integers: ``bias`` "int32" (the spec's scale, input_scale * weight_scale),
    "float32" (a real bias) or None.  Returns (q_weight, weight operand, bias operand, the scale from an
    integer sum to real values per output channel, the real bias per output channel)."""
    units = weight_shape[0]
    qw = rng.integers(-128, 128, weight_shape).astype("int8")
    w_scale = rng.uniform(0.002, 0.01, units).astype("float32") if per_channel else np.float32(0.004)
    if per_channel:
        w_op = Const(qw, P.QUANT_INT8_SYMM_PER_CHANNEL, scale=w_scale.tolist(), channel_dim=0)
    else:
        w_op = Const(qw, P.QUANT_INT8_SYMM_PER_LAYER, scale=float(w_scale))
    acc_scale = (np.float32(in_scale) * np.broadcast_to(w_scale, [units])).astype("float32")
    real_bias = np.zeros(units)
    if bias == "int32":
        qb = rng.integers(-5000, 5000, units).astype("int32")
        precision = P.QUANT_INT32_SYMM_PER_CHANNEL if per_channel else P.QUANT_INT32_SYMM_PER_LAYER
        scale = acc_scale.tolist() if per_channel else float(acc_scale[0])
        b_op = Const(qb, precision, scale=scale, channel_dim=0 if per_channel else None)
        real_bias = qb * acc_scale.astype("float64")
    elif bias == "float32":
        real_bias = rng.uniform(-1, 1, units).astype("float32")
        b_op = Const(real_bias)
    else:
        b_op = Const(None)
    return qw, w_op, b_op, acc_scale, real_bias


def q8_input(x: np.ndarray, scale: float) -> tuple[In, np.ndarray]:
    """A QUANT_INT8_SYMM_PER_LAYER model input for ``x`` and the real values it represents."""
    q = quantize(x, scale)
    return In(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=scale), dequantize(q, scale)


def q8_const(x: np.ndarray, scale: float) -> tuple[Const, np.ndarray]:
    q = quantize(x, scale)
    return Const(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=scale), dequantize(q, scale)


def check_quantized(op_type, inputs: Sequence, expected_real: np.ndarray, out_scale: float, lsb: int = 1) -> np.ndarray:
    """Run with a QUANT_INT8_SYMM_PER_LAYER output of ``out_scale`` and compare with the reference
    quantization of ``expected_real``: within ``lsb`` steps, since float32 evaluation order may
    move a value across a rounding boundary."""
    expected = quantize(expected_real, out_scale)
    (got,) = run_op(op_type, inputs, [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=out_scale)], [expected.shape])
    assert got.dtype == np.int8 and got.shape == expected.shape
    diff = np.abs(got.astype(np.int32) - expected.astype(np.int32))
    assert diff.max(initial=0) <= lsb, f"max difference {diff.max()} LSB > {lsb}\n{got}\n{expected}"
    return got
