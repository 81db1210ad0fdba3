"""Catalog data validates, and loose names resolve to the right entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.kb.yamlio import KBError
from bot.sizing.catalog import UnknownName, gpus, models, resolve_gpu, resolve_model


@pytest.mark.parametrize(("query", "model_id", "quant"), [
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("Llama 3.1 8B", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("LLAMA_3.1_8B_instruct", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("/data/models/Mistral-Large-Instruct-2407/", "mistralai/Mistral-Large-Instruct-2407", None),
    ("./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "fp8"),
    ("Llama 3 70B", "meta-llama/Meta-Llama-3-70B-Instruct", None),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "meta-llama/Llama-3.1-70B-Instruct",
     "awq"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-72B-Instruct", "gptq"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3", None),
    ("unsloth/DeepSeek-R1-BF16", "deepseek-ai/DeepSeek-V3", None),
])
def test_resolve_model(query: str, model_id: str, quant: str | None) -> None:
    r = resolve_model(query)
    assert (r.spec.id, r.quantization, r.origin) == (model_id, quant, "catalog")


def test_unknown_model_lists_close_matches() -> None:
    with pytest.raises(UnknownName, match=r"close: meta-llama/Llama-3\.2-1B") as exc:
        resolve_model("llama-3.2-1bb")
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_raw_config_dict_file_and_paste(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "max_position_embeddings": 131072,
           "quantization_config": {"quant_method": "awq"}}
    from_dict = resolve_model(cfg)
    assert from_dict.origin == "config" and from_dict.quantization == "awq"
    assert from_dict.spec.max_position_embeddings == 131072
    assert from_dict.spec.params is not None and 7.9e9 < from_dict.spec.params < 8.1e9
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    assert resolve_model(str(folder), read_files=True).spec == from_dict.spec
    assert resolve_model(str(folder / "config.json"), read_files=True).spec == from_dict.spec
    assert resolve_model(json.dumps(cfg)).spec == from_dict.spec
    # a path from chat text is a name, never a file the bot opens
    with pytest.raises(UnknownName):
        resolve_model(str(folder / "config.json"))


def test_config_missing_geometry_is_an_error() -> None:
    with pytest.raises(UnknownName, match="num_hidden_layers"):
        resolve_model({"model_type": "llama"})


@pytest.mark.parametrize(("name", "gpu_id"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
    ("A100", "a100-sxm-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA L40", "l40"), ("NVIDIA L4", "l4"), ("A10G", "a10g"),
    ("NVIDIA A10", "a10"), ("NVIDIA H200", "h200"), ("NVIDIA H20", "h20"),
    ("AMD Instinct MI300X", "mi300x"), ("NVIDIA B200", "b200"), ("Tesla T4", "t4"),
    ("NVIDIA RTX A6000", "rtx-a6000"), ("NVIDIA GeForce RTX 5090", "rtx-5090"),
])
def test_resolve_gpu(name: str, gpu_id: str) -> None:
    assert resolve_gpu(name).id == gpu_id


def test_h200_memory_is_what_nvidia_smi_prints() -> None:
    """A real nvidia-smi on driver 590.48.01 (tests/evidence/data/nvidia-smi): 143771MiB."""
    assert resolve_gpu("NVIDIA H200").memory_mib == 143771


def test_unknown_gpu() -> None:
    with pytest.raises(UnknownName, match="unknown GPU 'Voodoo 5'"):
        resolve_gpu("Voodoo 5")


def test_catalogs_validate_and_cover_the_issue_list() -> None:
    assert len(models()) >= 22
    ids = set(gpus())
    for needed in ("h100-sxm", "h100-pcie", "h200", "a100-sxm-40gb", "a100-sxm-80gb", "l40s",
                   "l4", "a10g", "rtx-4090", "v100-sxm2-32gb", "mi300x", "b200"):
        assert needed in ids


def test_bad_catalog_file_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "x.yaml").write_text(
        "id: x\nnum_hidden_layers: 2\nhidden_size: 8\nnum_attention_heads: 2\nlayers: 3\n")
    with pytest.raises(KBError, match=r"x\.yaml:5: .*unknown key 'layers'"):
        models(tmp_path)
    (tmp_path / "models" / "x.yaml").unlink()
    (tmp_path / "gpus.yaml").write_text(
        "gpus:\n  - id: g\n    name: G\n    memory_mib: -1\n    bandwidth_gbs: 1\n"
        "    bf16_tflops: 1\n    compute_capability: '8.0'\n")
    with pytest.raises(KBError, match=r"gpus\.yaml:4: .*memory_mib"):
        gpus(tmp_path)
