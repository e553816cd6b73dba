#!/usr/bin/env python3
"""Builds the public benchmark set of `scripts/bench_onnx.py --suite public`: ONNX
files exported from public packages, with RANDOM weights (nothing pretrained is
downloaded: torchvision's `weights=None`, transformers' `from_config` of configs built
here), batch 1, static shapes, into a cache folder that is not committed, plus a
manifest (manifest.json: name -> file, inputs, source package and version, `quick`).

It needs torch, torchvision, transformers, onnx and onnxscript, which the project's
own venv does not have (a separate venv keeps it clean; docs/onnx.md, "The public
benchmark set"):

    python3 -m venv ~/venv-public
    ~/venv-public/bin/pip install torch torchvision transformers onnx onnxscript
    ~/venv-public/bin/pip install --no-deps magika rapidocr-onnxruntime silero-vad   # optional: ONNX files in wheels
    ~/venv-public/bin/python scripts/build_public_models.py [--out DIR] [--quick] [--only resnet18,bert_l2_s32] [--force]

The set:
- torchvision classifiers, 1x3x224x224: resnet18, resnet50, mobilenet_v2,
  mobilenet_v3_small, efficientnet_b0, squeezenet1_1, shufflenet_v2_x1_0, densenet121,
  regnet_y_400mf, alexnet, vgg11; and detection backbones: the ResNet-50 + FPN of
  Faster R-CNN (`resnet_fpn_backbone`, 1x3x512x512, its five feature maps out) and
  SSDlite's MobileNetV3-Large feature extractor (1x3x320x320).
- transformers models at their public configs' shapes, random weights: bert_base_s128
  (BertConfig(): bert-base-uncased's shape, input_ids + attention_mask of 1x128, last
  hidden state out), gpt2_s64 (GPT2Config(): gpt2's 124M shape, 1x64 tokens, no KV
  cache, logits out), llama_l2_h256_s64 (a small Llama: 2 layers, hidden 256,
  intermediate 688, 8 heads, 4 KV heads, vocab 32000, 1x64 tokens, logits out),
  vit_base_p16_224 (ViTConfig(): vit-base-patch16-224, 1000 labels, logits out),
  whisper_tiny_encoder (WhisperConfig(): whisper-tiny's shape, the encoder alone on
  1x80x3000 log-mel features).
- the `--quick` subset (a CI-sized run): resnet18, mobilenet_v2, squeezenet1_1,
  bert_l2_s32 (BertConfig with 2 layers, 1x32 tokens), gpt2_l2_s32 (GPT2Config with 2
  layers, 1x32 tokens).
- ONNX files that installed wheels ship (site-packages searched for *.onnx over 100 kB,
  the onnx wheel's backend test data left out: the light set has those), copied as
  they are, with shapes fixed by WHEEL_MODELS below (symbolic dims: batch 1 and sizes
  the package uses); an input that picks a branch (silero-vad's `sr`) becomes an
  initializer of the value given there. Weights are the package's own.

The torchvision models' batchnorm statistics are calibrated on random images before
export (`calibrate_batchnorms`), so activations keep their scale through the network as
a trained one's do (the light set's tests/onnx_light.py does the same).

The torch exports use torch.onnx.export's dynamo exporter at opset --opset (18), with
the TorchScript exporter as the fallback where it fails; a model that fails both is
skipped with the reason printed, and the build goes on. Models already in the
manifest with their file present are kept unless --force.
"""

import argparse
import datetime
import gc
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback

DEFAULT_OUT = os.path.join(os.path.expanduser("~"), ".cache", "aotplan", "public-models")

IMAGE = ((1, 3, 224, 224),)
TORCHVISION = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1",
               "shufflenet_v2_x1_0", "densenet121", "regnet_y_400mf", "alexnet", "vgg11")
QUICK = ("resnet18", "mobilenet_v2", "squeezenet1_1", "bert_l2_s32", "gpt2_l2_s32")

# ONNX files shipped inside wheels: path suffix -> (name, {input: shape}, {input: frozen value}).
# Inputs not named keep their declared shape (an unnamed symbolic dimension is an error).
_SILERO = {"input": (1, 576), "state": (2, 1, 128)}
WHEEL_MODELS = {
    "magika/models/standard_v3_3/model.onnx": ("magika_v3_3", {"bytes": (1, 2048)}, {}),
    "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx": ("rapidocr_det_v4", {"x": (1, 3, 640, 640)}, {}),
    "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx": ("rapidocr_rec_v4", {"x": (1, 3, 48, 320)}, {}),
    "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx": ("rapidocr_cls_v2", {"x": (1, 3, 48, 192)}, {}),
    "silero_vad/data/silero_vad.onnx": ("silero_vad", _SILERO, {"sr": 16000}),
    "silero_vad/data/silero_vad_16k_op15.onnx": ("silero_vad_16k_op15", _SILERO, {"sr": 16000}),
    "silero_vad/data/silero_vad_half.onnx": ("silero_vad_half", _SILERO, {}),
    "silero_vad/data/silero_vad_op18_ifless.onnx": ("silero_vad_op18_ifless", _SILERO, {"sr": 16000}),
    "silero_vad/data/silero_vad_openvino_16k.onnx": ("silero_vad_openvino_16k", {}, {}),
    "silero_vad/data/silero_vad_16k_sequence.onnx": ("silero_vad_16k_sequence", {"input": (16, 576)}, {}),
}
# value ranges of integer inputs (default [0, 10)); "fill": every element that value
WHEEL_VALUES = {"magika_v3_3": {"bytes": {"low": 0, "high": 257}}}


def _version(dist):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------- torch models

def _wrap(model, pick):
    """`model` in an nn.Module whose output is pick(model's output): tensors, not a ModelOutput or a dict."""
    import torch

    class Wrapped(torch.nn.Module):  # a fixed signature (no *args), which torch.export prefers
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, y=None):
            return pick(self.inner(x) if y is None else self.inner(x, y))

    return Wrapped().eval()


def calibrate_batchnorms(module, shape, batches=4, batch=4):
    """Set every batchnorm's running mean and variance to the statistics of its input on
    random images (N(0, 1) pixels), as a trained network's are. Returns the module in eval
    mode. With torchvision's initialisation alone the statistics stay at mean 0, variance 1,
    and activations shrink layer by layer (mobilenet_v2's logits ~1e-9, SSDlite's last
    feature map ~1e-25): the benchmark then times arithmetic on tiny numbers and the
    outputs compare nothing. Stochastic depth and dropout also run in train mode, which
    only affects the statistics gathered."""
    import torch

    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the calibration batches
        module.train()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for _ in range(batches):
                module(torch.randn((batch,) + tuple(shape[1:]), generator=g))
    return module.eval()


def _torchvision(name):
    import torch
    import torchvision

    def build():
        m = calibrate_batchnorms(getattr(torchvision.models, name)(weights=None), IMAGE[0])
        return m, (torch.randn(*IMAGE[0]),), ["input"]

    return build, {"package": "torchvision", "call": f"torchvision.models.{name}(weights=None)"}


def _fpn_backbone():
    import torch
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    m = calibrate_batchnorms(resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=5),
                             (1, 3, 512, 512))
    wrapped = _wrap(m, lambda d: tuple(d.values()))
    return wrapped, (torch.randn(1, 3, 512, 512),), ["input"]


def _ssdlite_backbone():
    import torch
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    m = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=91)
    wrapped = _wrap(calibrate_batchnorms(m.backbone, (1, 3, 320, 320)), lambda d: tuple(d.values()))
    return wrapped, (torch.randn(1, 3, 320, 320),), ["input"]


def _tokens(batch_seq, vocab, mask=False):
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, batch_seq, generator=g)
    return (ids, torch.ones(batch_seq, dtype=torch.int64)) if mask else (ids,)


def _bert(layers, seq):
    def build():
        from transformers import BertConfig, BertModel

        cfg = BertConfig() if layers is None else BertConfig(num_hidden_layers=layers)
        m = BertModel(cfg).eval()
        return (_wrap(m, lambda o: o.last_hidden_state), _tokens((1, seq), cfg.vocab_size, mask=True),
                ["input_ids", "attention_mask"])

    cfg = "BertConfig()" if layers is None else f"BertConfig(num_hidden_layers={layers})"
    return build, {"package": "transformers", "call": f"BertModel({cfg}), input_ids+attention_mask 1x{seq}",
                   "values": {"input_ids": {"low": 0, "high": 30522}, "attention_mask": {"fill": 1}}}


def _gpt2(layers, seq):
    def build():
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(use_cache=False) if layers is None else GPT2Config(n_layer=layers, use_cache=False)
        m = GPT2LMHeadModel(cfg).eval()
        return _wrap(m, lambda o: o.logits), _tokens((1, seq), cfg.vocab_size), ["input_ids"]

    cfg = "GPT2Config(use_cache=False)" if layers is None else f"GPT2Config(n_layer={layers}, use_cache=False)"
    return build, {"package": "transformers", "call": f"GPT2LMHeadModel({cfg}), input_ids 1x{seq}, logits",
                   "values": {"input_ids": {"low": 0, "high": 50257}}}


LLAMA = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=2048, use_cache=False)


def _llama(seq):
    def build():
        from transformers import LlamaConfig, LlamaForCausalLM

        m = LlamaForCausalLM(LlamaConfig(**LLAMA)).eval()
        return _wrap(m, lambda o: o.logits), _tokens((1, seq), LLAMA["vocab_size"]), ["input_ids"]

    args = ", ".join(f"{k}={v}" for k, v in LLAMA.items())
    return build, {"package": "transformers", "call": f"LlamaForCausalLM(LlamaConfig({args})), input_ids 1x{seq}, logits",
                   "values": {"input_ids": {"low": 0, "high": LLAMA["vocab_size"]}}}


def _vit():
    def build():
        import torch
        from transformers import ViTConfig, ViTForImageClassification

        m = ViTForImageClassification(ViTConfig(num_labels=1000)).eval()
        return _wrap(m, lambda o: o.logits), (torch.randn(1, 3, 224, 224),), ["pixel_values"]

    return build, {"package": "transformers", "call": "ViTForImageClassification(ViTConfig(num_labels=1000)), 1x3x224x224"}


def _whisper_encoder():
    def build():
        import torch
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        m = WhisperEncoder(WhisperConfig()).eval()
        return _wrap(m, lambda o: o.last_hidden_state), (torch.randn(1, 80, 3000),), ["input_features"]

    return build, {"package": "transformers", "call": "WhisperEncoder(WhisperConfig()), input_features 1x80x3000"}


def torch_models():
    """name -> (build() -> (module, example args, input names), source info)."""
    out = {n: _torchvision(n) for n in TORCHVISION}
    out["fasterrcnn_resnet50_fpn_backbone"] = (_fpn_backbone, {
        "package": "torchvision", "call": "detection.backbone_utils.resnet_fpn_backbone('resnet50', weights=None), "
                                          "1x3x512x512, the five FPN maps"})
    out["ssdlite320_mobilenet_v3_backbone"] = (_ssdlite_backbone, {
        "package": "torchvision", "call": "detection.ssdlite320_mobilenet_v3_large(weights=None, "
                                          "weights_backbone=None).backbone, 1x3x320x320, its feature maps"})
    out["bert_base_s128"] = _bert(None, 128)
    out["gpt2_s64"] = _gpt2(None, 64)
    out["llama_l2_h256_s64"] = _llama(64)
    out["vit_base_p16_224"] = _vit()
    out["whisper_tiny_encoder"] = _whisper_encoder()
    out["bert_l2_s32"] = _bert(2, 32)
    out["gpt2_l2_s32"] = _gpt2(2, 32)
    return out


def _export(module, args, names, path, opset):
    """torch.onnx.export: the dynamo exporter first, then the TorchScript one. Returns the exporter used."""
    import torch

    errors = []
    for dynamo in (True, False):
        try:
            kw = dict(input_names=names, opset_version=opset, dynamo=dynamo)
            if dynamo:
                kw.update(external_data=False, optimize=True, verbose=False)
            with torch.no_grad():
                torch.onnx.export(module, args, path, **kw)
            return "dynamo" if dynamo else "torchscript", errors
        except Exception as e:  # noqa: BLE001 - any export failure: try the other exporter, then skip
            errors.append(f"{'dynamo' if dynamo else 'torchscript'}: {type(e).__name__}: {_one_line(e)}")
            if os.path.exists(path):
                os.remove(path)
    raise RuntimeError("; ".join(errors))


def _one_line(e, n=300):
    text = " ".join(str(e).split())
    return text[:n] + ("..." if len(text) > n else "")


# ---------------------------------------------------------------- wheels

def wheel_files():
    """(path suffix, absolute path) of every *.onnx over 100 kB in site-packages (onnx's test data aside)."""
    import site

    roots = [p for p in dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()]) if os.path.isdir(p)]
    out = []
    for root in roots:
        for p in sorted(glob.glob(os.path.join(root, "**", "*.onnx"), recursive=True)):
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if rel.startswith("onnx/backend/test/") or os.path.getsize(p) <= 100_000:
                continue
            out.append((rel, p))
    return out


def _dist_of(rel):
    from importlib import metadata

    top = rel.split("/")[0]
    dists = metadata.packages_distributions().get(top, [])
    return (dists[0], _version(dists[0])) if dists else (top, None)


def _fix_wheel_model(src, dst, shapes, frozen):
    """Copy `src` to `dst` with `frozen` inputs made initializers. Returns the input specs."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(src)
    g = m.graph
    inits = {t.name for t in g.initializer}
    for name, value in frozen.items():
        vi = next(i for i in g.input if i.name == name)
        dt = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        g.initializer.append(numpy_helper.from_array(np.full(shape, value, dt), name))
        g.input.remove(vi)
    specs = []
    for vi in g.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in vi.type.tensor_type.shape.dim]
        shape = tuple(shapes.get(vi.name, dims))
        if None in shape:
            raise RuntimeError(f"input {vi.name!r} has symbolic dims {dims}: name its shape in WHEEL_MODELS")
        specs.append({"name": vi.name, "shape": list(shape),
                      "dtype": str(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))})
    if frozen:
        onnx.save(m, dst)
    else:
        shutil.copyfile(src, dst)
    return specs, m


# ---------------------------------------------------------------- manifest

def _summary(model):
    import numpy as np

    ops = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "nodes": len(model.graph.node), "functions": len(model.functions), "params": params,
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def _torch_inputs(model, names, args, values):
    import numpy as np

    declared = {vi.name: vi for vi in model.graph.input}
    out = []
    for k, a in enumerate(args):
        name = names[k] if names[k] in declared else model.graph.input[k].name
        spec = {"name": name, "shape": list(a.shape), "dtype": str(np.dtype(str(a.dtype).replace("torch.", "")))}
        spec.update(values.get(names[k], {}))
        out.append(spec)
    return out


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"cache folder (default {DEFAULT_OUT})")
    ap.add_argument("--quick", action="store_true", help="build only the --quick subset")
    ap.add_argument("--only", default="", help="comma-separated model names to build")
    ap.add_argument("--no-wheels", action="store_true", help="leave out the ONNX files shipped in wheels")
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--force", action="store_true", help="rebuild models already in the manifest")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args()

    import onnx
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    os.makedirs(args.out, exist_ok=True)
    mpath = os.path.join(args.out, "manifest.json")
    manifest = {"models": {}, "skipped": {}}
    if os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
        manifest.setdefault("skipped", {})
    versions = {d: _version(d) for d in ("torch", "torchvision", "transformers", "onnx", "onnxscript")}
    manifest["builder"] = {"python": platform.python_version(), **versions, "opset": args.opset,
                           "script": "scripts/build_public_models.py"}

    tm = torch_models()
    wheels = [] if args.no_wheels else wheel_files()
    names = list(tm) + [WHEEL_MODELS.get(rel, (None,))[0] or re.sub(r"[^A-Za-z0-9]+", "_", rel[:-5]) for rel, _ in wheels]
    wanted = set(n for n in args.only.split(",") if n) or (set(QUICK) if args.quick else set(names))
    unknown = wanted - set(names)
    if unknown:
        sys.exit(f"unknown model(s): {', '.join(sorted(unknown))}; known: {', '.join(names)}")
    if args.list:
        for n in names:
            print(f"{n}{'  (quick)' if n in QUICK else ''}")
        return

    def have(name):
        e = manifest["models"].get(name)
        return not args.force and e is not None and os.path.exists(os.path.join(args.out, e["file"]))

    def save():
        manifest["updated"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        tmp = mpath + ".tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=False)
        os.replace(tmp, mpath)

    print(f"python {platform.python_version()}, " + ", ".join(f"{k} {v}" for k, v in versions.items())
          + f", opset {args.opset} -> {args.out}", flush=True)
    for name, (build, info) in tm.items():
        if name not in wanted:
            continue
        if have(name):
            print(f"{name:34s} kept (in the manifest)", flush=True)
            continue
        path = os.path.join(args.out, f"{name}.onnx")
        t0 = time.perf_counter()
        try:
            torch.manual_seed(0)
            module, example, input_names = build()
            with torch.no_grad():
                module(*example)  # a model that cannot run at all fails here, with its own message
            exporter, tried = _export(module, example, input_names, path, args.opset)
            model = onnx.load(path)
            entry = {"file": os.path.basename(path), "quick": name in QUICK,
                     "inputs": _torch_inputs(model, input_names, example, info.get("values", {})),
                     "outputs": [o.name for o in model.graph.output],
                     "source": {"package": info["package"], "version": _version(info["package"]), "call": info["call"],
                                "weights": "random (seed 0)" + (", batchnorm statistics calibrated on random images"
                                                                 if info["package"] == "torchvision" else "")},
                     "exporter": exporter + (f" (dynamo failed: {tried[0]})" if tried else ""),
                     "bytes": os.path.getsize(path), "sha256_16": _sha(path), "export_s": 0.0, **_summary(model)}
            entry["export_s"] = round(time.perf_counter() - t0, 1)
            manifest["models"][name] = entry
            manifest["skipped"].pop(name, None)
            print(f"{name:34s} {exporter:11s} opset {entry['opset']}, {entry['nodes']} nodes, "
                  f"{entry['params'] / 1e6:.1f}M params, {entry['bytes'] / 2**20:.1f} MiB, {entry['export_s']:.0f} s",
                  flush=True)
            del model
        except Exception as e:  # noqa: BLE001 - skip the model, say why, go on
            reason = f"{type(e).__name__}: {_one_line(e, 600)}"
            manifest["models"].pop(name, None)
            manifest["skipped"][name] = reason
            print(f"{name:34s} SKIPPED: {reason}", flush=True)
            if os.environ.get("BUILD_PUBLIC_TRACEBACK"):
                traceback.print_exc()
        module = example = None
        gc.collect()
        save()

    for rel, src in wheels:
        name, shapes, frozen = WHEEL_MODELS.get(rel, (re.sub(r"[^A-Za-z0-9]+", "_", rel[:-5]), {}, {}))
        if name not in wanted:
            continue
        if have(name):
            print(f"{name:34s} kept (in the manifest)", flush=True)
            continue
        dist, version = _dist_of(rel)
        path = os.path.join(args.out, f"{name}.onnx")
        try:
            specs, model = _fix_wheel_model(src, path, shapes, frozen)
            for s in specs:
                s.update(WHEEL_VALUES.get(name, {}).get(s["name"], {}))
            entry = {"file": os.path.basename(path), "quick": False, "inputs": specs,
                     "outputs": [o.name for o in model.graph.output],
                     "source": {"package": dist, "version": version, "call": f"the wheel's {rel}"
                                + (", " + ", ".join(f"input {k} frozen to {v}" for k, v in frozen.items()) if frozen else ""),
                                "weights": "the package's own"},
                     "exporter": "shipped", "bytes": os.path.getsize(path), "sha256_16": _sha(path), **_summary(model)}
            manifest["models"][name] = entry
            manifest["skipped"].pop(name, None)
            print(f"{name:34s} {'wheel':11s} {dist} {version}, opset {entry['opset']}, {entry['nodes']} nodes, "
                  f"{entry['bytes'] / 2**20:.1f} MiB", flush=True)
        except Exception as e:  # noqa: BLE001
            reason = f"{type(e).__name__}: {_one_line(e, 600)}"
            manifest["models"].pop(name, None)
            manifest["skipped"][name] = reason
            print(f"{name:34s} SKIPPED: {reason}", flush=True)
        save()
    print(f"manifest: {mpath} ({len(manifest['models'])} models, {len(manifest['skipped'])} skipped)")


if __name__ == "__main__":
    main()
