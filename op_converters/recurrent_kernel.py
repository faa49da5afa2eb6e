"""The recurrence kernel of the recurrent layers (LSTM, GRU, RNN; their converters are in ``recurrent.py``).

One hand-written TIR kernel per layer, with a sequential loop over time (T symbolic: one compilation serves
every length), doing the small recurrent product ``h x R^T`` (R packed at compile time by ``pack_rows`` into
blocks of 128 gate rows, each streamed contiguously into 8 AVX-512 registers of accumulators), the peepholes
and the gate nonlinearities, and writing Y, Y_h (and Y_c).  Directions x batch tiles (1, 2 or 4 rows sharing
each weight load) are parallel tasks (a lone row can instead split each step over the threads,
``SPLIT_ONE_ROW``, off by default).  The kernel carries its own schedule and is marked ``tirx.is_scheduled``
(``SCHEDULED``) so the default CPU rules leave it.

Tanh and Sigmoid use a rational approximation (TVM's fast_tanh, max error ~1e-7), as onnxruntime's MLAS
kernels do, because LLVM scalarizes ``exp`` into libm calls.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx

from nnadapter_tvm.op_converters.float32 import F32, f32
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import RecurrentActivation as A
from nnadapter_tvm.types import RecurrentDirection

SCHEDULED = "tirx.is_scheduled"  # targets.base.SCHEDULED (not imported: converters do not import targets)
LANES = 16  # vector width of the inner loops (LLVM splits it into the target's registers)
# Gate outputs kept in registers across the recurrent product: 8 AVX-512 vectors (16 AVX2), enough
# independent FMA chains to hide their latency.
GATE_BLOCKS = (128, 64, 32, 16)
BATCH_TILE = 4  # batch rows that share each weight load (x 32 gates: 8 AVX-512 accumulators)
# Split a lone direction x batch row's steps over the threads (see recurrence_ir).  Off: on the
# 2-core machine measured, it was 5-12% slower than one thread per row (LSTM H=128 and H=512, B=1):
# the product is bound by the bandwidth both cores share, and a barrier waits for a descheduled
# thread.  Kept (and tested) for machines with per-core caches that hold R's halves.
SPLIT_ONE_ROW = False

# Per operation: its gate count.
GATES = {O.LSTM: 4, O.GRU: 3, O.RNN: 1}


def fast_tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """tanh as TVM's fast_tanh_float (Eigen's rational approximation on [-9, 9]); vectorizes."""
    x = tirx.max(f32(-9.0), tirx.min(f32(9.0), x))
    x2 = x * x
    p = x2 * f32(-2.76076847742355e-16) + f32(2.00018790482477e-13)
    for c in (-8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04):
        p = x2 * p + f32(c)
    p = x * (x2 * p + f32(4.89352455891786e-03))
    q = x2 * f32(1.19825839466702e-06) + f32(1.18534705686654e-04)
    q = x2 * q + f32(2.26843463243900e-03)
    q = x2 * q + f32(4.89352518554385e-03)
    return p / q


def activation(code: int, x: tirx.PrimExpr, alpha: float, beta: float) -> tirx.PrimExpr:
    """ONNX's recurrent activation ``code`` (a RecurrentActivation) of ``x``."""
    zero, one = f32(0.0), f32(1.0)
    if code == A.RELU:
        return tirx.max(x, zero)
    if code == A.TANH:
        return fast_tanh(x)
    if code == A.SIGMOID:
        return f32(0.5) * fast_tanh(f32(0.5) * x) + f32(0.5)  # the identity sigmoid(x) = (1 + tanh(x/2)) / 2
    if code == A.AFFINE:
        return f32(alpha) * x + f32(beta)
    if code == A.LEAKY_RELU:
        return tirx.Select(x >= zero, x, f32(alpha) * x)
    if code == A.THRESHOLDED_RELU:
        return tirx.Select(x > f32(alpha), x, zero)
    if code == A.SCALED_TANH:
        return f32(alpha) * fast_tanh(f32(beta) * x)
    if code == A.HARD_SIGMOID:
        return tirx.max(zero, tirx.min(one, f32(alpha) * x + f32(beta)))
    if code == A.ELU:
        return tirx.Select(x >= zero, x, f32(alpha) * (tirx.exp(x) - one))
    if code == A.SOFTSIGN:
        return x / (one + tirx.abs(x))
    if code == A.SOFTPLUS:
        return tirx.log(one + tirx.exp(x))
    raise ValueError(code)


def _chunks(n: int, size: int) -> list[tuple[int, int, int]]:
    """(start, count, width): ``count`` chunks of ``width`` from ``start`` covering [0, n)."""
    out = []
    if n // size:
        out.append((0, n // size, size))
    if n % size:
        out.append((n - n % size, 1, n % size))
    return out


def _vloop(T, n: int, body, lanes: int = LANES) -> None:
    """``body(j)`` for j in [0, n): vectorized chunks of ``lanes``, then the remainder."""
    for start, count, width in _chunks(n, lanes):
        with T.serial(0, count) as c, T.vectorized(0, width) as v:
            body(start + c * width + v)


class _Work:
    """How one step's work is spread: ``split`` (inside one direction x batch row, over the threads,
    with a barrier between phases) or not (one thread runs the whole row)."""

    def __init__(self, T, split: bool):
        self.T = T
        self.split = split

    def units(self, n: int, body) -> None:
        """``body(j)`` for j in [0, n), vectorized; split over the threads by chunks of LANES."""
        T = self.T
        if not self.split:
            _vloop(T, n, body)
            return
        full, tail = divmod(n, LANES)
        with T.attr(0, "pragma_parallel_barrier_when_finish", 1), T.parallel(0, full + (1 if tail else 0)) as c:
            if tail:
                with T.If(c < full):
                    with T.Then(), T.vectorized(0, LANES) as v:
                        body(c * LANES + v)
                    with T.Else(), T.vectorized(0, tail) as v:
                        body(full * LANES + v)
            else:
                with T.vectorized(0, LANES) as v:
                    body(c * LANES + v)

    def blocks(self, count: int, block: int, one) -> None:
        """``one(i, valid)`` per register block of a recurrent product, split over the threads."""
        T = self.T
        full, tail = divmod(count, block)
        if not self.split:
            if full:
                with T.serial(0, full) as i:
                    one(i, block)
            if tail:
                one(full, tail)
            return
        with T.attr(0, "pragma_parallel_barrier_when_finish", 1), T.parallel(0, full + (1 if tail else 0)) as i:
            if tail:
                with T.If(i < full):
                    with T.Then():
                        one(i, block)
                    with T.Else():
                        one(full, tail)
            else:
                one(i, block)


def recurrence_ir(ins, outs, *, op, hidden, num_dirs, direction, layout, acts, clip, flags):
    """The recurrence of one layer (see the module docstring).

    ``ins``: xw [T, B, D*G*H] (layout 0) or [B, T, D*G*H] (the input projection with the foldable
    biases), R packed per part of ``flags["parts"]`` ([D, blocks, H, block], see ``pack_rows``), then
    the optional inputs that are present, in ``flags`` order: seq [B], h0, c0 (layout's state
    shape), p [D, 3H], rbh [D, H] (GRU's recurrent h-gate bias, kept apart under
    linear_before_reset).  ``outs``: Y, Y_h (, Y_c); Y_h and Y_c hold the running state.

    Directions and batch rows are independent recurrences: each tile of rows is a parallel task that
    runs its steps alone.  A single row (B = 1, one direction: the streaming case) leaves all but one
    thread idle; with ``SPLIT_ONE_ROW`` its steps are split instead: one parallel region for the
    whole sequence, each thread takes some register blocks of the
    recurrent product and some hidden units of the gates, with a barrier between the phases (TVM's
    ``pragma_parallel_launch_point`` / ``pragma_parallel_barrier_when_finish``).
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    gh = GATES[op] * hidden
    h = hidden
    parts = flags["parts"]
    rest = iter(ins[1 + len(parts) :])
    seq, h0, c0, peep, rbh = (next(rest) if flags[k] else None for k in ("seq", "h0", "c0", "peephole", "rbh"))
    lbr, input_forget = flags["linear_before_reset"], flags["input_forget"]
    y, yh = outs[0], outs[1]
    yc = outs[2] if op == O.LSTM else None
    steps, batch = (y.shape[0], y.shape[2]) if layout == 0 else (y.shape[1], y.shape[0])
    per = len(acts) // num_dirs
    i32 = "int32"
    # Splitting one row's steps pays (two or four barriers a step) only with several blocks to share.
    can_split = (
        SPLIT_ONE_ROW and sum(-(-count // block) for _, count, block in parts) >= 2 * len(parts) and h >= 2 * LANES
    )

    def proxy(buf):
        return None if buf is None else T.buffer_proxy(buf)

    def row(work: _Work, d, b0, acc, tmp, tile: int = 1) -> None:
        """Every step of direction d for batch rows b0 .. b0 + tile - 1 (rows past the batch repeat
        its last row and write nothing).  A tile of rows shares each load of R in the recurrent
        product; its rows may sit at different time positions (their own lengths)."""
        length = T.buffer_proxy(T.alloc_buffer((tile,), i32, scope="local"))
        rows_ = [tirx.min(b0 + q, batch - 1) if tile > 1 else b0 for q in range(tile)]

        def state(j, q=0):
            return (d, rows_[q], j) if layout == 0 else (rows_[q], d, j)

        def y_at(t, j, q=0):
            return (t, d, rows_[q], j) if layout == 0 else (rows_[q], t, d, j)

        def act(k: int, x):
            """Activation k of this direction, its input clipped (ONNX's clip)."""
            if clip is not None:
                x = tirx.max(f32(-clip), tirx.min(f32(clip), x))
            code, alpha, beta = acts[k]
            first = activation(code, x, alpha, beta)
            if num_dirs == 1 or acts[k] == acts[per + k]:
                return first
            code, alpha, beta = acts[per + k]
            return tirx.Select(d == 0, first, activation(code, x, alpha, beta))

        def matvec(index: int, vector, initial) -> None:
            """acc[q, start:start+count] = initial(g, q) + sum over k < H of vector(k, q) * R[g, k] for
            each row q of the tile, for part ``index`` of R (see ``pack_rows``).

            A block of gate rows (per tile row) stays in registers (a local buffer LLVM promotes)
            while k runs: one FMA per weight and row, the packed weights read in one contiguous
            stream, each weight vector loaded once for the whole tile."""
            start, count, block = parts[index]
            weights = packed[index]
            sub = max(block // tile, LANES) if block % max(block // tile, LANES) == 0 else block

            def one(i, valid: int) -> None:
                for c in range(block // sub):
                    width = min(max(valid - c * sub, 0), sub)
                    if width == 0:
                        continue
                    base = start + i * block + c * sub
                    part = T.buffer_proxy(T.alloc_buffer((tile, sub), F32, scope="local"))
                    for q in range(tile):
                        if width < sub:
                            with T.vectorized(0, sub) as v:
                                part[q, v] = f32(0.0)
                        with T.vectorized(0, width) as v:
                            part[q, v] = initial(base + v, q)
                    with T.serial(0, h) as k:
                        for q in range(tile):
                            hk = vector(k, q)
                            with T.vectorized(0, sub) as v:
                                part[q, v] = part[q, v] + hk * weights[d, i, k, c * sub + v]
                    for q in range(tile):
                        with T.vectorized(0, width) as v:
                            acc[q, base + v] = part[q, v]

            work.blocks(count, block, one)

        for q in range(tile):
            if seq is not None:
                length[q] = tirx.max(tirx.min(seq[rows_[q]], steps.astype(i32)), tirx.const(0, i32))
            else:
                length[q] = steps.astype(i32)

        def init(j):
            for q in range(tile):
                yh[state(j, q)] = h0[state(j, q)] if h0 is not None else f32(0.0)
                if yc is not None:
                    yc[state(j, q)] = c0[state(j, q)] if c0 is not None else f32(0.0)

        work.units(h, init)

        def position(s, q):
            """The time position row q reads at step s (reverse: backwards within its own length)."""
            back = tirx.max(length[q] - 1 - s, 0)
            if direction == RecurrentDirection.FORWARD:
                return s
            if direction == RecurrentDirection.REVERSE:
                return back
            return tirx.Select(d == 0, s, back)

        def step(s) -> None:
            ts = [position(s, q) for q in range(tile)]

            def projected(g, q):
                r = (ts[q], rows_[q]) if layout == 0 else (rows_[q], ts[q])
                return xw[r[0], r[1], d * gh + g]

            def h_prev(k, q):
                return yh[state(k, q)]

            def each_row(update):
                """update(j, q) on the rows that take this step; zeros in Y for the others."""

                def body(j):
                    for q in range(tile):
                        if tile == 1:
                            update(j, q)
                            continue
                        with T.If(tirx.all(b0 + q < batch, s < length[q])):
                            with T.Then():
                                update(j, q)
                            with T.Else(), T.If(b0 + q < batch), T.Then():
                                y[y_at(s, j, q)] = f32(0.0)

                work.units(h, body)

            if op == O.RNN:
                matvec(0, h_prev, projected)

                def rnn(j, q):
                    yh[state(j, q)] = act(0, acc[q, j])
                    y[y_at(ts[q], j, q)] = yh[state(j, q)]

                each_row(rnn)
            elif op == O.LSTM:
                matvec(0, h_prev, projected)

                def lstm(j, q):
                    # acc holds the gates i, o, f, c; the peepholes p: i, o, f.
                    c_prev = yc[state(j, q)]
                    pi, po, pf = acc[q, j], acc[q, h + j], acc[q, 2 * h + j]
                    if peep is not None:
                        pi, pf = pi + peep[d, j] * c_prev, pf + peep[d, 2 * h + j] * c_prev
                    i = act(0, pi)
                    f = f32(1.0) - i if input_forget else act(0, pf)
                    yc[state(j, q)] = f * c_prev + i * act(1, acc[q, 3 * h + j])
                    c = yc[state(j, q)]  # read back: the expression is not duplicated
                    if peep is not None:
                        po = po + peep[d, h + j] * c
                    yh[state(j, q)] = act(0, po) * act(2, c)
                    y[y_at(ts[q], j, q)] = yh[state(j, q)]

                each_row(lstm)
            elif lbr:
                # The h gate's recurrent part, h Rh + Rbh, is kept apart: r multiplies it.
                def with_rbh(g, q):
                    bias = rbh[d, tirx.max(g - 2 * h, 0)] if rbh is not None else f32(0.0)
                    return tirx.Select(g < 2 * h, projected(g, q), bias)

                matvec(0, h_prev, with_rbh)

                def gru_lbr(j, q):
                    z = act(0, acc[q, j])
                    reset = act(0, acc[q, h + j])
                    cand = act(1, projected(2 * h + j, q) + reset * acc[q, 2 * h + j])
                    yh[state(j, q)] = (f32(1.0) - z) * cand + z * yh[state(j, q)]
                    y[y_at(ts[q], j, q)] = yh[state(j, q)]

                each_row(gru_lbr)
            else:
                matvec(0, h_prev, projected)  # z and r first: the h gate reads r * h_prev

                def reset(j):
                    for q in range(tile):
                        tmp[q, j] = act(0, acc[q, h + j]) * yh[state(j, q)]

                work.units(h, reset)
                matvec(1, lambda k, q: tmp[q, k], projected)

                def gru(j, q):
                    z = act(0, acc[q, j])
                    cand = act(1, acc[q, 2 * h + j])
                    yh[state(j, q)] = (f32(1.0) - z) * cand + z * yh[state(j, q)]
                    y[y_at(ts[q], j, q)] = yh[state(j, q)]

                each_row(gru)

        with T.serial(0, steps) as s:
            if tile > 1:
                step(s)  # each row checks its own length
            else:
                # One row: a step past its length is skipped whole (zeros in Y).
                with T.If(s < length[0]):
                    with T.Then():
                        step(s)
                    with T.Else():

                        def zero(j, s=s):
                            y[y_at(s, j)] = f32(0.0)

                        work.units(h, zero)

    with IRBuilder() as ib, T.serial(0, 1):
        xw, y, yh, yc = proxy(ins[0]), proxy(y), proxy(yh), proxy(yc)
        packed = [proxy(b) for b in ins[1 : 1 + len(parts)]]
        seq, h0, c0, peep, rbh = proxy(seq), proxy(h0), proxy(c0), proxy(peep), proxy(rbh)

        def per_row(tile: int) -> None:
            tiles = (batch + tile - 1) // tile
            with T.parallel(0, num_dirs * tiles) as dt:
                # The step's gate pre-activations; the slack lets a partial block store whole vectors.
                acc = T.buffer_proxy(T.alloc_buffer((tile, gh + GATE_BLOCKS[0]), F32))
                tmp = T.buffer_proxy(T.alloc_buffer((tile, h), F32))  # GRU: r * h_prev
                row(_Work(T, split=False), dt // tiles, dt % tiles * tile, acc, tmp, tile)

        def per_row_or_tile() -> None:
            # Tiles of rows share the weight loads; two tiles at least, so two threads have work.
            with T.If(batch >= 2 * BATCH_TILE):
                with T.Then():
                    per_row(BATCH_TILE)
                with T.Else(), T.If(batch >= 2):
                    with T.Then():
                        per_row(2)
                    with T.Else():
                        per_row(1)

        if not can_split:
            per_row_or_tile()
        else:
            with T.If(num_dirs * batch >= 2):
                with T.Then():
                    per_row_or_tile()
                with T.Else():
                    acc = T.buffer_proxy(T.alloc_buffer((1, gh + GATE_BLOCKS[0]), F32))  # shared by the threads
                    tmp = T.buffer_proxy(T.alloc_buffer((1, h), F32))
                    with T.attr(0, "pragma_parallel_launch_point", 1), T.serial(0, num_dirs * batch) as db:
                        row(_Work(T, split=True), db // batch, db % batch, acc, tmp)
    return ib.get()


def register_block(count: int) -> int:
    """The register block for ``count`` gate rows: the largest of GATE_BLOCKS that divides ``count``
    rounded up to 16 (a last, partial block is padded with zero weights)."""
    padded = -(-count // 16) * 16
    return next(b for b in GATE_BLOCKS if padded % b == 0)


def pack_rows(r: relax.Expr, start: int, count: int, num_dirs: int, hidden: int) -> relax.Expr:
    """Rows [start, start + count) of R [D, G*H, H] as [D, blocks, H, block]: each block of gate rows
    transposed so that the kernel streams it contiguously; rows padded with zeros to whole blocks.
    Constant R folds to a constant at compile time."""
    block = register_block(count)
    blocks = -(-count // block)
    rows = relax.op.strided_slice(r, axes=[1], begin=[start], end=[start + count])
    if blocks * block != count:
        zeros = relax.const(np.zeros([num_dirs, blocks * block - count, hidden], F32))
        rows = relax.op.concat([rows, zeros], axis=1)
    rows = relax.op.reshape(rows, [num_dirs, blocks, block, hidden])
    return relax.op.permute_dims(rows, [0, 1, 3, 2])
