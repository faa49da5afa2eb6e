"""torch.onnx exports of transformers (BERT, a MiniLM-sized BERT, a GPT-2 decoder step with its past, ViT,
an encoder of Whisper-tiny's sizes) and torchvision classifiers: each ``build()`` gives (module, example
inputs, input names, output names, dynamic axes {input: {axis: name}}) for ``write_torch``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


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


def _bert(**config) -> Callable:
    """BERT of ``config`` (BertConfig's defaults: bert-base, 12 layers, 768 wide, 12 heads)."""
    return lambda: _bert_build(config)


def _bert_build(config: dict):
    torch = _seeded()
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(**config)).eval()

    class Encoder(torch.nn.Module):  # by keyword: the forward's positional order changes between releases
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    ids = torch.randint(0, bert.config.vocab_size, (1, 128))
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


def write_torch(build: Callable, opset: int = 17) -> Callable[[Path, str], None]:
    """A writer of ``build()``'s module with the TorchScript exporter (``ts``, at ``opset``) or the dynamo
    exporter (``dynamo``), its dynamic axes symbolic."""

    def write(path: Path, exporter: str) -> None:
        import torch

        model, args, inputs, outputs, axes = build()
        with torch.no_grad():
            if exporter == "ts":
                torch.onnx.export(
                    model, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=axes,
                    opset_version=opset, dynamo=False,
                )  # fmt: skip
            else:
                shapes = _by_signature(
                    model, [{a: torch.export.Dim.DYNAMIC for a in axes.get(n, {})} or None for n in inputs]
                )
                program = torch.onnx.export(
                    model, args, input_names=inputs, output_names=outputs, dynamic_shapes=shapes, dynamo=True,
                    external_data=False,
                )  # fmt: skip
                program.save(str(path), external_data=False)

    return write


def _by_signature(model, shapes: list) -> tuple:
    """``shapes`` (one per flat input) grouped as ``model.forward``'s parameters: torch.export wants a
    ``*args`` parameter's shapes as one tuple (GPT-2's step takes its past that way)."""
    import inspect

    grouped: list = []
    for param in inspect.signature(model.forward).parameters.values():
        if len(grouped) == len(shapes):
            break
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return (*grouped, tuple(shapes[len(grouped) :]))
        grouped.append(shapes[len(grouped)])
    return tuple(grouped)


def gpt2_shapes(past: int) -> list[str]:
    shapes = ["input_ids=1x1", f"attention_mask=1x{past + 1}"]
    return shapes + [f"past.{i}.{kv}=1x12x{past}x64" for i in range(12) for kv in ("key", "value")]


BERT_SIZES = [
    ["input_ids=1x128", "attention_mask=1x128", "token_type_ids=1x128"],
    ["input_ids=2x37", "attention_mask=2x37", "token_type_ids=2x37"],
]
IMAGE_SIZES = [["input=1x3x224x224"], ["input=2x3x160x160"]]
