"""Who else is on the GPU, as the paste shows it (bot/evidence/tenants.py)."""

from __future__ import annotations

import pytest

from bot.evidence import extract_facts

# (what the paste holds, engines_on_gpu, trainer_on_gpu)
CASES: list[tuple[str, str, int | None, bool | None]] = [
    ("two servers, two ports",
     "vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --gpu-memory-utilization 0.45\n"
     "vllm serve Qwen/Qwen2.5-1.5B-Instruct --port 8001 --gpu-memory-utilization 0.45\n",
     2, None),
    ("the same server tried twice with other tuning is one server",
     "vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --gpu-memory-utilization 0.9\n"
     "vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --gpu-memory-utilization 0.8\n",
     1, None),
    ("two servers pinned to different GPUs do not share one",
     "CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000\n"
     "CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen2.5-1.5B-Instruct --port 8001\n",
     1, None),
    ("a command continued over lines",
     "python -m vllm.entrypoints.openai.api_server \\\n  --model a/b \\\n  --port 8000\n"
     "python -m vllm.entrypoints.openai.api_server \\\n  --model c/d \\\n  --port 8001\n",
     2, None),
    ("two LLM(...) objects in one script",
     "llm_a = LLM(model=path_a, gpu_memory_utilization=0.4)\n"
     "llm_b = LLM(model=path_b, gpu_memory_utilization=0.4)\n",
     2, None),
    ("GRPO's trainer builds the engine it drives (trl#3128)",
     '[rank0]:   File "/opt/conda/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", '
     "line 404, in __init__\n[rank0]:     self.llm = LLM(\n",
     1, True),
    ("a trainer's own vLLM settings",
     "training_args = GRPOConfig(use_vllm=True, vllm_gpu_memory_utilization=0.7)\n",
     None, True),
    ("verl's hybrid engine",
     "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=vllm "
     "actor_rollout_ref.rollout.gpu_memory_utilization=0.6\n",
     None, True),
    ("vLLM's sleep-mode allocator failing: the engine shares its GPU (lmm-r1#42)",
     "Runtime Error: Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: 62\n",
     None, True),
    # a folder named after vLLM is not a trainer's setting (vllm#10569)
    ("a path that contains a setting's name",
     '[rank0]:   File "/home/dataset/test_vllm_models/test_llama.py", line 21, in <module>\n'
     "[rank0]:     llm = LLM(\n",
     1, None),
    ("a benchmark's request lines are not commands",
     "INFO 02-14 08:44:26 engine.py:275] Received request chatcmpl-1: prompt: 'vllm serve a "
     "--port 1', params: SamplingParams(n=1)\n",
     None, None),
]


@pytest.mark.parametrize(("text", "engines", "trainer"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tenants(text: str, engines: int | None, trainer: bool | None) -> None:
    facts = extract_facts(text)
    assert (facts.engines_on_gpu, facts.trainer_on_gpu) == (engines, trainer)


@pytest.mark.parametrize(("text", "training"), [
    # an RL run with no engine named: its OOM, unplaced, came in a training step
    ("I ran the recommended Training Script: `python train.py`, but encountered a memory "
     "overflow error", True),
    ('(ActorWorker(reference-0) pid=7034) File "/roll/pipeline/base_worker.py", line 230, in '
     "compute_log_probs", True),
    ("Train epoch [1/1]:  11%|\u2588         | 28/256 [01:16<05:31,  1.45s/it, pg=0.164", True),
    # the trainer still building its workers: a start-up OOM, not a step's (verl#3104)
    ('File "/verl/trainer/main_ppo.py", line 239, in run\n    trainer.init_workers()\n'
     "    self.actor_rollout_wg.init_model()", None),
    # a recipe's name between underscores, training-only settings (RLinf#285, Rex-Omni#124)
    ("bash run_embodiment.sh maniskill_ppo_openvla", True),
    ("如果打开设置中的gradient checkpointing配置，显存就不会爆掉", True),
    ("    micro_batch_size_per_device_for_update:  1", True),
    ("(WorkerDict pid=80859) After sync model weights in sharding manager: 37.92 GB / 47.53 GB.",
     True),
    # slime#651: torch_memory_saver pauses the rollout engine between training steps
    ("I encounter an out-of-memory (OOM) error caused by torch memory saver.", True),
    # words that only look like training
    ("the container restarted after the pretrained weights were cached", None),
    ("vllm serve --model happo-7b --max-model-len 8192", None),
    ("vllm serve Qwen/Qwen3-8B --max-model-len 8192", None),
])
def test_training_run(text: str, training: bool | None) -> None:
    assert extract_facts(text).training_run is training
