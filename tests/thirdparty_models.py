"""Tiny third-party models built from configs with random weights (no hub download): the
factories of the third-party zoo (tests/test_thirdparty_*.py) and of the ``mma-emu preview
--model thirdparty_models:llama`` test.  Each factory seeds torch, so two calls give the same
weights; ``inputs(name)`` gives matching example inputs."""
from __future__ import annotations

import importlib
import os
import sys
import types

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")



def _guard_torchvision() -> None:
    """Let ``import torchvision`` work where its C extension cannot load.

    transformers imports torchvision when it is installed, and ``import timm`` needs it
    (FrozenBatchNorm2d, its data transforms) though timm's models never call its C ops.
    PyPI's torchvision wheel is a CUDA build whose C extension cannot load beside a CPU
    torch; its import then dies in ``torchvision._meta_registrations`` (fake kernels for the
    C ops that did not load: "operator torchvision::nms does not exist").  This guard, for
    the tests only, imports torchvision without those registrations: its Python part works,
    its C ops (nms, roi_align, ...) stay unusable."""
    if "torchvision" in sys.modules:
        return
    try:
        importlib.import_module("torchvision")
    except ImportError:
        return                                  # not installed
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType(
            "torchvision._meta_registrations")
        importlib.import_module("torchvision")


_guard_torchvision()
VOCAB, SEQ, BATCH = 64, 8, 2
_LM = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
           pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=False)


def _build(cls_name: str, cfg_name: str, attn: str = "sdpa", **cfg):
    import transformers
    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**cfg)
    model = getattr(transformers, cls_name)._from_config(config, attn_implementation=attn)
    return model.eval()


def llama(attn: str = "sdpa"):
    return _build("LlamaForCausalLM", "LlamaConfig", attn, **_LM)


def qwen2(attn: str = "sdpa"):
    return _build("Qwen2ForCausalLM", "Qwen2Config", attn, **_LM)


def gpt2(attn: str = "sdpa"):
    return _build("GPT2LMHeadModel", "GPT2Config", attn, vocab_size=VOCAB, n_embd=32,
                  n_layer=2, n_head=4, n_positions=64, pad_token_id=0, eos_token_id=1,
                  bos_token_id=2)


def bert(attn: str = "sdpa"):
    return _build("BertForMaskedLM", "BertConfig", attn, vocab_size=VOCAB, hidden_size=32,
                  num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=64, pad_token_id=0)


def t5(attn: str = "sdpa"):
    return _build("T5ForConditionalGeneration", "T5Config", attn, vocab_size=VOCAB,
                  d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                  num_heads=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def mixtral(attn: str = "sdpa", experts: str = "grouped_mm"):
    cfg = dict(_LM, num_local_experts=4, num_experts_per_tok=2)
    import transformers
    torch.manual_seed(0)
    config = transformers.MixtralConfig(**cfg)
    model = transformers.MixtralForCausalLM._from_config(
        config, attn_implementation=attn, experts_implementation=experts)
    return model.eval()


def vit(attn: str = "sdpa"):
    return _build("ViTForImageClassification", "ViTConfig", attn, image_size=16,
                  patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=48, num_labels=5)


FACTORIES = {"llama": llama, "qwen2": qwen2, "gpt2": gpt2, "bert": bert, "t5": t5,
             "mixtral": mixtral, "vit": vit}


def inputs(name: str, batch: int = BATCH, seed: int = 1) -> dict:
    """Keyword inputs of a forward pass (labels included where the model computes a loss)."""
    g = torch.Generator().manual_seed(seed)
    if name == "vit":
        return dict(pixel_values=torch.randn(batch, 3, 16, 16, generator=g))
    ids = torch.randint(3, VOCAB, (batch, SEQ), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0                            # left padding in one row: a real mask
    if name == "t5":
        return dict(input_ids=ids, attention_mask=mask,
                    decoder_input_ids=torch.randint(3, VOCAB, (batch, 4), generator=g))
    return dict(input_ids=ids, attention_mask=mask)


def labels_for(name: str, kw: dict) -> dict:
    if name == "vit":
        return dict(labels=torch.tensor([1, 3])[: kw["pixel_values"].shape[0]])
    if name == "t5":
        return dict(labels=kw["decoder_input_ids"])
    return dict(labels=kw["input_ids"])


# ---------------------------------------------------------------- timm
TIMM = {"vit": ("vit_tiny_patch16_224", dict(img_size=32, patch_size=8, embed_dim=32,
                                             depth=2, num_heads=2)),
        "resnet": ("resnet18", {}),
        "convnext": ("convnext_atto", dict(depths=(1, 1, 1, 1)))}


def timm_model(name: str):
    import timm
    arch, kw = TIMM[name]
    torch.manual_seed(0)
    return timm.create_model(arch, pretrained=False, num_classes=5, **kw).eval()


def timm_input(batch: int = 2, seed: int = 1):
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- for mma-emu preview
def llama_for_preview():
    """``mma-emu preview --model thirdparty_models:llama_for_preview --input randint:64:2,8``"""
    return llama()
