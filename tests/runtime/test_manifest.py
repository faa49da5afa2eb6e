"""The typed records in the cache containers: the ``.nnc`` manifest (runtime/cache.py) and the ONNX
frontend's ``.nnp`` plan entry (session/index.py)."""

import json

import numpy as np
import pytest
from conftest import add_relu_ref, build_add_relu

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache

TOKEN = "0123456789abcdefABCDEF0123456789"
X = np.array([[0.5, 1.0, -1.0], [-3.0, 4.0, 0.25]], "float32")


def _compiled(ctx: nna.Context, **kw) -> nna.Compilation:
    c = nna.Compilation(build_add_relu(), ctx, **kw)
    c.finish()
    return c


def test_manifest_reads_back_what_compile_wrote(llvm_context):
    c = _compiled(llvm_context, cache_token=TOKEN)
    meta = cache.unpack(c.serialize(), "buffer").meta
    manifest = cache.Manifest.from_json(meta, "buffer")
    # The record says what the compilation holds ...
    assert manifest.token == TOKEN  # recorded even without a cache directory: a renamed copy is caught
    assert manifest.model_inputs == c._model_inputs and manifest.model_outputs == c._model_outputs
    assert [t.to_dict() for t in manifest.input_types] == [t.to_dict() for t in c.input_types]
    (sub,) = manifest.subgraphs
    assert (
        sub.device == "llvm"
        and sub.blob == 0
        and sub.target == str(c._steps[0].driver.tvm_target(llvm_context.properties))
    )
    assert sub.properties == {"TVM_OPT_LEVEL": 3}
    assert manifest.library == cache.library_versions()
    # ... and writes back exactly the JSON it was read from (the container adds only its own two keys).
    written = {k: v for k, v in meta.items() if k not in ("format_version", "blob_lengths")}
    assert json.dumps(manifest.to_json(), sort_keys=True) == json.dumps(written, sort_keys=True)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.pop("input_types"),
        lambda m: m["subgraphs"][0].pop("device"),
        lambda m: m["subgraphs"][0].update(inputs="x"),
        lambda m: m.update(model_outputs=[None]),
        lambda m: m.update(library="1.0"),
    ],
    ids=["no-input-types", "no-device", "inputs-not-indices", "output-not-index", "library-not-a-mapping"],
)
def test_malformed_manifest_is_a_cache_error_naming_the_source(add_relu_compilation, edit):
    meta = cache.unpack(add_relu_compilation.serialize(), "buffer").meta
    edit(meta)
    with pytest.raises(cache.CacheError, match=r"] src\.nnc: malformed metadata"):
        cache.Manifest.from_json(meta, "src.nnc")


def test_manifest_naming_a_missing_blob_is_refused_then_recompiled(llvm_context, add_relu_compilation):
    container = cache.unpack(add_relu_compilation.serialize(), "buffer")
    container.meta["subgraphs"][0]["blob"] = 5
    data = cache.pack(container.meta, [bytes(b) for b in container.blobs])
    with pytest.raises(cache.CacheError, match="no blob 5"):
        nna.Compilation(None, llvm_context, cache_buffer=data).finish()
    c = nna.Compilation(build_add_relu(), llvm_context, cache_buffer=data)
    c.finish()
    assert not c.loaded_from_cache
    y = np.empty(X.shape, "float32")
    e = nna.Execution(c)
    e.set_input(0, X)
    e.set_output(0, y)
    e.compute()
    np.testing.assert_array_equal(y, add_relu_ref(X))


def test_manifest_of_another_token_is_refused(tmp_path, llvm_context):
    _compiled(llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    other = "A" * 32
    (tmp_path / f"{TOKEN}.nnc").rename(tmp_path / f"{other}.nnc")
    with pytest.raises(cache.CacheError, match=f"holds the model of token {TOKEN}, not {other}"):
        nna.Compilation(None, llvm_context, cache_token=other, cache_dir=tmp_path).finish()


def test_plan_entry_round_trips_and_refuses_another_version():
    from nnadapter_tvm.session import index

    entry = index.Entry(TOKEN, [index.Port("x", np.dtype("float32"), (None, 3), ("batch", None))], ["y", "z"])
    meta = cache.unpack(cache.pack(entry.to_json(), []), "entry").meta
    assert index.Entry.from_json(meta) == entry
    meta["plan_version"] = -1
    with pytest.raises(nna.NNAdapterError, match="another plan version"):
        index.Entry.from_json(meta)
