#!/usr/bin/env python3
"""ONNX files as torch.onnx writes them today, for the benchmark and the profile: transformers (BERT, a
GPT-2 decoder step with its past, ViT, an encoder of Whisper-tiny's sizes) and torchvision CNNs, each
from the TorchScript exporter and from the dynamo exporter, with random weights from the libraries'
own configurations (nothing is downloaded from a model hub).

    python scripts/make_exports.py [--out DIR] [--models whisper_encoder,vit,...] [--exporters ts,dynamo]

It needs torch, torchvision, transformers, onnxscript (the dynamo exporter) and onnx, which the project
does not depend on: install them in an environment of their own (``pip install torch torchvision
transformers onnxscript onnx``) and run this script there; the files go to ``--out``
(``$NNADAPTER_TVM_EXPORTS`` or ``~/.cache/nnadapter-tvm/exports``), never into the repository. Each
file is ``<model>.<exporter>.onnx`` with its batch (and sequence, image size) axes symbolic, and a
``<model>.<exporter>.json`` beside it names two input sizes to measure it at (``sizes``: a list of
``--shape`` option lists for ``nnadapter-tvm bench`` / ``profile``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path


def _out_dir() -> Path:
    default = os.environ.get("NNADAPTER_TVM_EXPORTS") or Path.home() / ".cache" / "nnadapter-tvm" / "exports"
    return Path(default)


class Export:
    """One model to export: ``build()`` -> (module, example inputs, input names, output names, dynamic
    axes {input: {axis: name}}), and two sizes to measure it at (``--shape`` lists)."""

    def __init__(self, build: Callable, sizes: list[list[str]]):
        self.build = build
        self.sizes = sizes


def _seeded():
    import torch

    torch.manual_seed(0)
    return torch


def _torchvision(name: str, size: int) -> Callable:
    def build():
        torch = _seeded()
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, size, size)
        return model, (x,), ["input"], ["logits"], {"input": {0: "batch", 2: "height", 3: "width"}}

    return build


def _bert():
    torch = _seeded()
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig()).eval()  # bert-base: 12 layers, 768 wide, 12 heads

    class Encoder(torch.nn.Module):  # by keyword: the forward's positional order changes between releases
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    ids = torch.randint(0, 30522, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    types = torch.zeros(1, 128, dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    return Encoder().eval(), (ids, mask, types), inputs, ["last_hidden_state"], dict.fromkeys(inputs, axes)


class _GPT2Step:
    """GPT-2's one-token decoder step against a past of ``past`` tokens (key/value caches as inputs)."""

    @staticmethod
    def build():
        torch = _seeded()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config()  # gpt2: 12 layers, 768 wide, 12 heads
        lm = GPT2LMHeadModel(config).eval()
        layers, heads, head_dim = config.n_layer, config.n_head, config.n_embd // config.n_head

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lm = lm

            def forward(self, input_ids, attention_mask, *past):
                from transformers.cache_utils import DynamicCache

                cache = DynamicCache()
                for i in range(layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
                new = out.past_key_values
                flat = []
                for i in range(layers):
                    k, v = (new.layers[i].keys, new.layers[i].values) if hasattr(new, "layers") else new[i]
                    flat += [k, v]
                return (out.logits, *flat)

        past_len = 32
        ids = torch.randint(0, config.vocab_size, (1, 1))
        mask = torch.ones(1, past_len + 1, dtype=torch.int64)
        past = [torch.randn(1, heads, past_len, head_dim) for _ in range(2 * layers)]
        names = ["input_ids", "attention_mask"] + [f"past.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total"}}
        axes.update({n: {0: "batch", 2: "past"} for n in names[2:]})
        return Step().eval(), (ids, mask, *past), names, outputs, axes


def _vit():
    torch = _seeded()
    from transformers import ViTConfig, ViTModel

    model = ViTModel(ViTConfig(), add_pooling_layer=False).eval()  # vit-base/16 at 224
    x = torch.randn(1, 3, 224, 224)
    return model, (x,), ["pixel_values"], ["last_hidden_state"], {"pixel_values": {0: "batch"}}


def _whisper_encoder():
    torch = _seeded()
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    # whisper-tiny's sizes: 80 mel bins, 3000 frames (1500 after the stride-2 convolution), 4 layers,
    # 384 wide, 6 heads, 1536 in the MLP.
    config = WhisperConfig(
        d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, num_mel_bins=80
    )
    encoder = WhisperEncoder(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, features):
            return self.encoder(features).last_hidden_state

    x = torch.randn(1, 80, 3000)
    return Encoder().eval(), (x,), ["input_features"], ["last_hidden_state"], {"input_features": {0: "batch"}}


MODELS: dict[str, Export] = {
    "whisper_encoder": Export(_whisper_encoder, [["input_features=1x80x3000"], ["input_features=2x80x3000"]]),
    "vit": Export(_vit, [["pixel_values=1x3x224x224"], ["pixel_values=2x3x224x224"]]),
    "bert": Export(
        _bert,
        [
            ["input_ids=1x128", "attention_mask=1x128", "token_type_ids=1x128"],
            ["input_ids=2x37", "attention_mask=2x37", "token_type_ids=2x37"],
        ],
    ),
    "gpt2_step": Export(_GPT2Step.build, [["past=32"], ["past=100"]]),
    "resnet18": Export(_torchvision("resnet18", 224), [["input=1x3x224x224"], ["input=2x3x160x160"]]),
    "mobilenet_v3_large": Export(
        _torchvision("mobilenet_v3_large", 224), [["input=1x3x224x224"], ["input=2x3x160x160"]]
    ),
    "efficientnet_b0": Export(_torchvision("efficientnet_b0", 224), [["input=1x3x224x224"], ["input=2x3x160x160"]]),
    "convnext_tiny": Export(_torchvision("convnext_tiny", 224), [["input=1x3x224x224"], ["input=2x3x160x160"]]),
}


def export(name: str, exporter: str, out: Path) -> Path:
    import torch

    model, args, inputs, outputs, axes = MODELS[name].build()
    path = out / f"{name}.{exporter}.onnx"
    tmp = path.with_suffix(".onnx.part")
    with torch.no_grad():
        if exporter == "ts":
            torch.onnx.export(
                model, args, str(tmp), input_names=inputs, output_names=outputs, dynamic_axes=axes,
                opset_version=17, dynamo=False,
            )  # fmt: skip
        else:
            shapes = [{a: torch.export.Dim.DYNAMIC for a in axes.get(n, {})} or None for n in inputs]
            program = torch.onnx.export(
                model, args, input_names=inputs, output_names=outputs, dynamic_shapes=shapes, dynamo=True,
                external_data=False,
            )  # fmt: skip
            program.save(str(tmp), external_data=False)
    os.replace(tmp, path)
    sizes = MODELS[name].sizes
    if name == "gpt2_step":  # the past's length names the caches' third axis and the mask's second
        sizes = [_gpt2_shapes(int(s[0].split("=")[1]), inputs) for s in sizes]
    path.with_suffix(".json").write_text(json.dumps({"model": name, "exporter": exporter, "sizes": sizes}, indent=1))
    return path


def _gpt2_shapes(past: int, inputs: list[str]) -> list[str]:
    shapes = ["input_ids=1x1", f"attention_mask=1x{past + 1}"]
    return shapes + [f"{n}=1x12x{past}x64" for n in inputs[2:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=_out_dir(), help="where the files go (%(default)s)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (%(default)s)")
    parser.add_argument("--exporters", default="ts,dynamo", help="ts (TorchScript), dynamo, or both")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            start = time.perf_counter()
            try:
                path = export(name, exporter, args.out)
            except Exception as err:  # one model's exporter failure should not stop the others
                failed.append(f"{name}.{exporter}")
                print(f"{name}.{exporter}: failed: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
                continue
            print(f"{path} ({time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
