"""Default schedules for the CPU targets (``llvm``, ``arm``): no tuning, every kernel scheduled.

``tvm.compile`` on an LLVM target schedules nothing: each operator becomes a naive, single-threaded
loop nest, and a plain ``{"kind": "llvm"}`` target even generates SSE2 code only.  ``pipeline.prepare``
turns a Relax module into a legalized, fused module whose every PrimFunc carries a CPU schedule:

1. **Layout** (``layout``).  ``ConvertLayout`` moves convolutions (and with them the element-wise ops,
   pools, concatenations and reductions around them) to NHWC, so that the channel axis is the contiguous
   one for any channel count; the graph's NCHW inputs and outputs get one transpose each.
2. **Lowering with packed weights** (``lowering``, ``compute``).  ``LegalizeOps`` lowers float32
   ``conv2d`` (NHWC) and ``matmul`` with a 2-D right operand through this package's own TE computes,
   whose weights are *packed* into a blocked layout by a separate kernel: ``[OC / ob, KH, KW, IC / group,
   ob]`` for convolutions, ``[KH, KW, C]`` for depthwise ones, ``[N / nb, K, nb]`` for matrix products.
   ``FoldConstant`` then runs the packing once, at compile time, on constant weights.  Stride-1 3x3
   convolutions with a constant weight and static sizes become Winograd F(4x4, 3x3) instead
   (``winograd``; ``CPU_WINOGRAD=0`` keeps the direct kernel), their weight transformed at compile time.
3. **Fusion** (``pipeline``).  ``FuseOps``/``FuseTIR`` put bias, batch-norm, activation and residual
   epilogues into the kernel of the convolution or product they follow.
4. **Scheduling** (``schedule``), by the main block of each fused PrimFunc:

   - ``conv2d`` / ``dense`` (``tiled``): a register tile of ``wt`` output pixels (rows) x ``ob`` output
     channels (columns, one or two SIMD vectors) accumulates in a local buffer while the reduction loops
     (kernel rows, columns, input channels) run outside it; the tile's channel loop is vectorized and
     its pixel loop unrolled; batch x channel blocks x output rows run in parallel; the epilogue is
     computed on the tile right after its reduction (``reverse_compute_at``), before it leaves registers.
   - ``depthwise`` (``tiled``): the same with the channel block as the only reduction-free vector axis.
   - reductions (pools, means, softmax's max/sum; ``generic``): the contiguous output axis moves inside
     the reduction loops and is vectorized (NHWC pools vectorize over channels); outer axes parallel.
   - everything else (element-wise, broadcast, injective: transposes, concatenations, pads; ``generic``):
     producers inlined where TVM allows, then outer loops fused and parallel, the innermost loop
     vectorized.

   The build schedules without lowering each kernel first; only if it fails is every chosen schedule
   checked through TVM's TIR pipeline, and a rule that raises or does not lower dropped for the next
   one; the last resort is the unscheduled function, so a schedule never fails a compile.

   A static extent the register tile runs along that no tile within the register budget divides (197
   tokens; a 7- or 14-pixel row with AVX2's 6-row budget) is padded the same way as a symbolic one
   below (``simd.padded_rows``): a few rows computed past the end beat one-row tiles.

5. **Symbolic extents** (batch, height, width, sequence length unknown until execution; channels
   static) get the same rules: a register tile along a symbolic axis runs whole tiles past the end
   (``compute.padded``: clamped reads, then a crop), vector loops over a symbolic axis are partitioned
   into whole vectors and a scalar tail (``loops.vectorize_inner``) unless their body compares the index
   with a bound of its own (a concatenation, a pad along that axis: scalar, since TVM's partitioning of
   two bounds can overlap its loops, ``loops.partition_safe``), parallel loops fuse at most two
   symbolic loops (``loops.parallel``), and products of two run-time tensors are packed at run time and
   run under the dense rule (``Lowering._batch_matmul``).  docs/performance.md, section 4, has the
   measurements.

The vector width comes from the target (``simd``: AVX-512: 16 floats, AVX2: 8, NEON/SSE: 4); the ``llvm``
driver gives the target this machine's CPU so that LLVM can use it.

Modules, in the order a build uses them: ``simd`` (lanes, registers, block and tile sizes), ``layout``,
``compute`` (the TE computes and weight packing), ``lowering`` (the ``LegalizeOps`` overrides, with
``vmath``'s exp, sigmoid, erf and tanh, ``softmax``'s softmax and log_softmax and ``winograd``'s F(4x4, 3x3)
convolutions, whose schedule lives beside their compute), ``loops``
(loop-level steps the rules share), ``generic`` and ``tiled`` (the rules), ``schedule`` (a rule per
function), ``pipeline`` (``lower``, ``prepare``, ``build``), ``codegen`` (TIR lowering, LLVM code
generation and object emission split over one group of kernels per CPU, in threads;
``NNADAPTER_TVM_BUILD_THREADS``).
"""
