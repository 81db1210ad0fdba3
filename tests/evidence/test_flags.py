"""Server settings from every place they are written down."""

from __future__ import annotations

from typing import Any

import pytest

from bot.evidence import extract_facts

CASES: list[tuple[str, dict[str, Any]]] = [
    ("vllm serve Qwen/Qwen3-8B --max-model-len 8192 --gpu-memory-utilization 0.95 -tp 2 "
     "--kv-cache-dtype fp8 --enforce-eager --max-num-seqs 64 --block-size 32",
     {"model": "Qwen/Qwen3-8B", "max_model_len": 8192, "gpu_memory_utilization": 0.95,
      "tensor_parallel_size": 2, "kv_cache_dtype": "fp8", "enforce_eager": True,
      "max_num_seqs": 64, "block_size": 32, "engine": "vllm"}),
    # cortecs/Llama-3.3-70B-Instruct-FP8-Dynamic discussion 1: a command ending a sentence
    ("With a single H100 vllm runs out of GPU memory when trying to use this with simply vllm "
     "serve cortecs/Llama-3.3-70B-Instruct-FP8-Dynamic.",
     {"model": "cortecs/Llama-3.3-70B-Instruct-FP8-Dynamic", "engine": "vllm"}),
    ("vllm serve m --max-model-len=4096 --max_num_batched_tokens=2048 --no-enable-chunked-prefill "
     "--cpu-offload-gb 10 --swap-space 8 --kv-cache-memory 8G -pp 2 -dp 4 --dtype bfloat16",
     {"max_model_len": 4096, "max_num_batched_tokens": 2048, "enable_chunked_prefill": False,
      "cpu_offload_gb": 10.0, "swap_space_gib": 8.0, "kv_cache_memory_bytes": 8 * 2**30,
      "pipeline_parallel_size": 2, "data_parallel_size": 4, "dtype": "bfloat16"}),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-0.5B-Instruct "
     "--gpu_memory_utilization 0.4 --quantization awq "
     "--api-key sk-abcdefghijklmnopqrstuvwxyz123456AB",
     {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu_memory_utilization": 0.4, "quantization": "awq"}),
    ("docker run --gpus all vllm/vllm-openai:v0.8.3 \\\n    --model meta-llama/Llama-3.1-8B \\\n"
     "    --max-model-len 16384 \\\n    --enable-chunked-prefill",
     {"model": "meta-llama/Llama-3.1-8B", "max_model_len": 16384, "enable_chunked_prefill": True,
      "engine_version": "0.8.3"}),
    ("INFO [api_server.py:1] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'model': "
     "'Qwen/Qwen3-8B', 'max_model_len': 131072, 'gpu_memory_utilization': 0.85, "
     "'enable_chunked_prefill': True, 'api_key': ['s3cret-value'], 'tensor_parallel_size': 2}",
     {"model": "Qwen/Qwen3-8B", "max_model_len": 131072, "gpu_memory_utilization": 0.85,
      "enable_chunked_prefill": True, "tensor_parallel_size": 2}),
    ("INFO non-default args: {'model': 'x/y', 'max_model_len': 4096, 'compilation_config': "
     "CompilationConfig(level=3), 'enforce_eager': True}",
     {"model": "x/y", "max_model_len": 4096, "enforce_eager": True}),
    ("INFO api_server.py:585] args: Namespace(subparser='serve', model_tag='m', host=None, "
     "api_key=None, model='meta-llama/Llama-3.1-8B', max_model_len=None, "
     "gpu_memory_utilization=0.9, tensor_parallel_size=4, quantization=None, enforce_eager=False, "
     "max_num_seqs=256, swap_space=4, cpu_offload_gb=0, kv_cache_dtype='auto')",
     {"model": "meta-llama/Llama-3.1-8B", "max_model_len": None, "gpu_memory_utilization": 0.9,
      "tensor_parallel_size": 4, "quantization": None, "enforce_eager": False,
      "max_num_seqs": 256, "swap_space_gib": 4.0, "cpu_offload_gb": 0.0,
      "kv_cache_dtype": "auto"}),
    ("INFO [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen3-8B', "
     "speculative_config=None, tokenizer='Qwen/Qwen3-8B', dtype=torch.bfloat16, "
     "max_seq_len=131072, download_dir=None, tensor_parallel_size=1, pipeline_parallel_size=1, "
     "data_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, seed=0",
     {"model": "Qwen/Qwen3-8B", "dtype": "bfloat16", "max_model_len": 131072,
      "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1,
      "quantization": None, "enforce_eager": False, "kv_cache_dtype": "auto"}),
    ('llm = LLM(model="TheBloke/Llama-2-70B-AWQ", quantization="awq", dtype="half", '
     "tensor_parallel_size=8, max_model_len=4096)",
     {"model": "TheBloke/Llama-2-70B-AWQ", "quantization": "awq", "dtype": "half",
      "tensor_parallel_size": 8, "max_model_len": 4096}),
    ('llm = LLM(\n    model="/models/google/gemma-4-31B-it",\n    tensor_parallel_size=2,\n'
     "    gpu_memory_utilization=0.8,\n)\nprint(tensor_parallel_size=7)",
     {"model": "/models/google/gemma-4-31B-it", "tensor_parallel_size": 2,
      "gpu_memory_utilization": 0.8}),
    # SGLang
    ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 "
     "--mem-fraction-static 0.85 --max-total-tokens 65536 --context-length 32768",
     {"model": "deepseek-ai/DeepSeek-V3", "tensor_parallel_size": 8, "mem_fraction_static": 0.85,
      "max_total_tokens": 65536, "max_model_len": 32768, "engine": "sglang"}),
    ("[2025-01-01] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B', "
     "mem_fraction_static=0.88, max_total_tokens=None, tp_size=2, dp_size=1, context_length=None)",
     {"model": "meta-llama/Llama-3.1-8B", "mem_fraction_static": 0.88, "tensor_parallel_size": 2,
      "data_parallel_size": 1, "max_total_tokens": None, "engine": "sglang"}),
    ("decode:\n  mem-fraction-static: 0.95\n  moe-runner-backend: \"flashinfer_trtllm\"\n"
     "  tensor-parallel-size: 4\n  max_model_len: 8192  # comment\n  model: \"org/model-x\"",
     {"mem_fraction_static": 0.95, "tensor_parallel_size": 4, "max_model_len": 8192,
      "model": "org/model-x"}),
    # TGI
    ("--model-id codellama/CodeLlama-34b-Instruct-hf --num-shard 2 --max-input-length 6800 "
     "--max-total-tokens 6900 --max-batch-prefill-tokens 7000 --trust-remote-code --quantize eetq",
     {"model": "codellama/CodeLlama-34b-Instruct-hf", "tensor_parallel_size": 2,
      "max_input_length": 6800, "max_total_tokens": 6900, "max_batch_prefill_tokens": 7000,
      "quantization": "eetq", "engine": "tgi"}),
    ('INFO text_generation_launcher: Args { model_id: "bigscience/bloom-560m", revision: None, '
     "num_shard: Some(2), quantize: Some(Bitsandbytes), max_input_length: 1024, "
     "max_total_tokens: 2048, max_batch_prefill_tokens: 4096, max_batch_total_tokens: None }",
     {"model": "bigscience/bloom-560m", "tensor_parallel_size": 2, "quantization": "bitsandbytes",
      "max_input_length": 1024, "max_total_tokens": 2048, "max_batch_prefill_tokens": 4096,
      "engine": "tgi"}),
    # the model as vLLM's positional argument, also on the next line of a `\` command that a
    # Slack paste ends without a newline
    ("vllm serve Qwen/Qwen2.5-72B-Instruct --max-model-len 8192",
     {"model": "Qwen/Qwen2.5-72B-Instruct", "max_model_len": 8192, "engine": "vllm"}),
    ("vllm serve \\\n  Qwen/Qwen2.5-72B-Instruct --max-model-len 8192 --tensor-parallel-size 2",
     {"model": "Qwen/Qwen2.5-72B-Instruct", "max_model_len": 8192, "tensor_parallel_size": 2}),
    # a script's constant named bare in the call; a closed call without a TP size runs TP 1
    ('MODEL_PATH = "/path/Qwen2-VL-72B-Instruct"\n\nllm = LLM(\n    model=MODEL_PATH,\n'
     '    limit_mm_per_prompt={"image": 10},\n)',
     {"model": "/path/Qwen2-VL-72B-Instruct", "tensor_parallel_size": 1}),
    ("llm = LLM(model=model_name, tensor_parallel_size=4)",
     {"model": None, "tensor_parallel_size": 4}),
    ('llm = LLM(model="Qwen/Qwen2-7B",', {"model": "Qwen/Qwen2-7B", "tensor_parallel_size": None}),
    # lmdeploy
    ("lmdeploy serve api_server llm_models/internlm2_5-7b-chat --server-port 23333 --tp 2 "
     "--cache-max-entry-count 0.2",
     {"model": "llm_models/internlm2_5-7b-chat", "tensor_parallel_size": 2,
      "cache_max_entry_count": 0.2, "engine": "lmdeploy"}),
    ("lmdeploy serve api_server /models/InternVL2-40B --session-len 8192",
     {"model": "/models/InternVL2-40B", "max_model_len": 8192}),
    # a command pasted inline in markdown, its closing backticks and a comma after it
    ("```python -m ochat.serving.openai_api_server --model openchat/openchat_3.5```, and it "
     "fails", {"model": "openchat/openchat_3.5"}),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:50] for c in CASES])
def test_settings(text: str, expected: dict[str, Any]) -> None:
    facts = extract_facts(text)
    for name, value in expected.items():
        assert getattr(facts, name) == value, name


def test_shell_variables_and_prose_are_not_values() -> None:
    facts = extract_facts('docker run vllm/vllm-openai:latest \\\n    --model "${MODEL_NAME}"\n'
                          "I think --max-model-len could help\n")
    assert facts.model is None
    assert facts.max_model_len is None


def test_prompts_in_request_logs_are_not_commands() -> None:
    text = ("INFO [logger.py:43] Received request chatcmpl-1: prompt: 'how do I run vllm serve m "
            "--max-model-len 100?', params: SamplingParams(n=1, max_tokens=16)\n")
    assert extract_facts(text).max_model_len is None


def test_secret_flags_never_become_facts() -> None:
    text = ("vllm serve org/m --api-key sk-proj-AbCdEfGh1234567890AbCdEfGh1234567890 "
            "--hf-token hf_abcdefghijklmnopqrstuvwxyzABCDEF123\n"
            "args: Namespace(model='org/m', api_key='topsecret-123', hf_token='hf_x')\n"
            "vllm serve https://user:hunter2pass@host/model --max-model-len 10")
    dumped = repr(extract_facts(text))
    for secret in ("sk-proj", "hf_abc", "topsecret", "hunter2pass"):
        assert secret not in dumped


def test_human_readable_integers_as_vllm_reads_them() -> None:
    facts = extract_facts("vllm serve Qwen/Qwen3-8B --max-model-len 32K "
                          "--max-num-batched-tokens 8k --max-num-seqs 256\n")
    assert (facts.max_model_len, facts.max_num_batched_tokens, facts.max_num_seqs) == (
        32768, 8000, 256)


def test_the_model_named_in_words_is_kept_beside_the_commands_local_path() -> None:
    """sglang-7006: 'to serve `Qwen3-32B-FP8`' above `--model-path mymodels`: the command's
    path is what a fix must repeat, the name is what the sizing can read."""
    facts = extract_facts("This is my command to launch `sglang` to serve `Qwen3-32B-FP8`:\n"
                          "python -m sglang.launch_server --model-path mymodels --tp-size 2\n")
    assert facts.model == "mymodels"
    assert facts.model_named == "Qwen3-32B-fp8"


def test_an_evaluation_harness_s_backend_is_not_the_model() -> None:
    """lm-evaluation-harness#1804: `--model vllm` names lm_eval's backend; the model is a
    shell variable in --model_args, so the one named in words is what can be sized."""
    facts = extract_facts("lm_eval --model vllm \\\n"
                          "    --model_args pretrained=$model_path,tensor_parallel_size=4\n"
                          "However, it loads the llama 65B model directly into one GPU\n")
    assert facts.model == "llama 65B"
    assert extract_facts("vllm serve vllm --port 8000").model is None
