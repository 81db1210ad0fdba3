"""Who else is on the GPU, as a paste shows it: several servers started, several `LLM(...)`
engines built, or a trainer sharing the device with the engine it drives.

vLLM sizes its KV cache as a fraction of the whole GPU, so a second server, a second `LLM`
object in the same script, or a GRPO/RLHF trainer holding the same device is the classic
reason the next engine finds no memory. The commands and code people paste show it before any
number does: two `vllm serve` lines with different ports, `LLM(` twice, `accelerate launch`
with `use_vllm: true`, or `self.llm = LLM(` in grpo_trainer's frames.

Two commands pinned to disjoint GPUs (`CUDA_VISIBLE_DEVICES=0` and `=1`) do not share one,
and the same model on the same port pasted twice is one server tried twice (with other tuning
flags), not two servers.
"""

from __future__ import annotations

import re
from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.lazyre import lazy

# A server being started (a command, not a traceback frame: frames name files with slashes).
_SERVER_COMMANDS = ("vllm serve ", "vllm.entrypoints.openai.api_server",
                    "vllm.entrypoints.api_server", "sglang.launch_server",
                    "text-generation-launcher ")
_LLM = ("LLM(", "AsyncLLMEngine.from_engine_args", "LLMEngine.from_engine_args")
_TRAINERS = ("grpo_trainer", "GRPOTrainer", "ppo_trainer", "PPOTrainer", "accelerate launch",
             "deepspeed ", "colocate", "openrlhf", "verl.trainer")
# vLLM's (cumem) and SGLang's (torch_memory_saver) sleep-mode allocators: an engine that
# sleeps so something else can have its GPU memory between rollouts, a trainer driving it
_SLEEP_MODE = ("cumem_allocator", "torch_memory_saver")
# a trainer's settings that drive a vLLM engine of its own
# (verl's actor_rollout_ref is the hybrid engine: the actor and its rollout share the GPUs)
_TRAINER_VLLM = ("use_vllm", "vllm_gpu_memory_utilization", "vllm_mode", "rollout.name=vllm",
                 "actor_rollout_ref")
# whole settings only: a path such as `test_vllm_models/` names no trainer
_TRAINER_VLLM_SETTING = lazy(r"(?<![\w/])(?:use_vllm|vllm_gpu_memory_utilization|vllm_mode|"
                             r"rollout\.name=vllm|actor_rollout_ref)\b")
# RL frameworks and the words of their co-located rollout, as people write them ("within the
# framework of veRL", "the VLLM rollout worker is woken up"): read ignoring case, whole words
_TRAINER_WORDS = ("verl", "openrlhf", "grpo", "rlhf", "rollout", "sleep mode", "enable_sleep",
                  "woken up", "wake_up")
_TRAINER_SAID = lazy(r"\b(?:verl|openrlhf|grpo\w{0,10}|rlhf|(?:vllm|sglang) rollout|rollout "
                     r"(?:worker|engine|model)|sleep mode|enable_sleep|woken up|wake_up)\b",
                     re.IGNORECASE)
# A training run's own words, engine or not: RL algorithms, training scripts and a trainer's
# steps ("python train.py", "train_ppo.sh", "Train epoch [1/1]", compute_log_probs)
_TRAINING_WORDS = ("ppo", "rlvr", "dapo", "rloo", "train", "compute_log_probs",
                   "forward_backward", "loss.backward", "optimizer.step", "gradient",
                   "sharding manager", "micro_batch_size", "memory_saver", "memory saver")
# An RL recipe's name stands between underscores or dashes too ("maniskill_ppo_openvla"),
# and people write settings inside Chinese sentences (ASCII boundaries for both);
# gradient checkpointing, micro-batches, an FSDP sharding manager (the trainer handing its
# weights to the rollout engine) and torch_memory_saver (a rollout engine paused while the
# trainer runs) exist only in training.
_TRAINING_SAID = lazy(r"(?<![a-z0-9])(?:ppo|rlvr|dapo|rloo|gradient[_ ]checkpointing)(?![a-z0-9])|"
                      r"\b(?:train(?:_\w{1,20})?\.(?:py|sh)|train epoch|"
                      r"training (?:step|script|loop|run)|trainer\.train|compute_log_probs|"
                      r"forward_backward\w{0,10}|loss\.backward|optimizer\.step|"
                      r"sharding manager|micro_batch_size\w{0,40}|torch[_ ]memory[_ ]saver)\b",
                      re.IGNORECASE)
# A trainer still building its workers (verl's init_workers -> init_model): its OOM is a
# start-up one, not a step's
_TRAINER_STARTING = ("init_workers", ".init_model(")
_ENGINE_WORDS = ("vllm", "sglang")
_DEVICES = lazy(r"CUDA_VISIBLE_DEVICES=[\"']?(?P<ids>\d{1,2}(?:,\d{1,2}){0,15})")
_CODE_LLM = lazy(r"(?:^|[=\s(])LLM\(")
_MODEL = lazy(r"(?:\bserve\s{1,8}|--model(?:-path|-id|_path)?[= ]{1,4})[\"']?"
              r"(?P<model>[^\s\"'\\]{1,300})")
_PORT = lazy(r"--port[= ]{1,4}(?P<port>\d{2,5})")
_CHATTER = ("Received request", "prompt: ")


class TenantsExtractor:
    name: ClassVar[str] = "tenants"
    anchors: ClassVar[tuple[str, ...]] = (*_SERVER_COMMANDS, *_LLM, *_TRAINERS, *_TRAINER_VLLM,
                                          *_SLEEP_MODE, *_TRAINER_STARTING)
    folded_anchors: ClassVar[tuple[str, ...]] = (*_TRAINER_WORDS, *_TRAINING_WORDS,
                                                 *_ENGINE_WORDS)
    follow: ClassVar[int] = 16  # a command continued over lines with "\\"

    def __init__(self) -> None:
        # each server (model, port): the GPUs it is pinned to, if any
        self._servers: dict[tuple[str | None, str | None], frozenset[str] | None] = {}
        self._command: list[str] | None = None  # a command being read, continued with "\\"
        self._engines: set[str] = set()
        self._trainer = self._trainer_vllm = self._engine_named = self._training = False
        self._starting = False

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if any(c in text for c in _CHATTER):
            return
        if any(c in text for c in _SERVER_COMMANDS):
            self._end_command()
            self._command = [text]
        elif self._command is not None:
            self._command.append(text)
        if self._command is not None and not text.rstrip().endswith("\\"):
            self._end_command()
        if any(k in text for k in _LLM) and _CODE_LLM.search(text):
            self._engines.add(" ".join(text.split()))
        self._trainer = (self._trainer or any(k in text for k in _TRAINERS)
                         or _TRAINER_SAID.search(text) is not None)
        self._training = self._training or _TRAINING_SAID.search(text) is not None
        self._starting = self._starting or any(k in text for k in _TRAINER_STARTING)
        self._trainer_vllm = self._trainer_vllm or any(k in text for k in _SLEEP_MODE) or (
            any(k in text for k in _TRAINER_VLLM)
            and _TRAINER_VLLM_SETTING.search(text) is not None)
        if not self._engine_named:
            lowered = text.lower()
            self._engine_named = any(w in lowered for w in _ENGINE_WORDS)

    def _end_command(self) -> None:
        if self._command is None:
            return
        command, self._command = " ".join(self._command), None
        model, port, gpus = _MODEL.search(command), _PORT.search(command), _DEVICES.search(command)
        key = (model.group("model") if model else None, port.group("port") if port else None)
        self._servers[key] = frozenset(gpus.group("ids").split(",")) if gpus else None

    def finish(self, sink: FactSink) -> None:
        self._end_command()
        pinned = [gpus for gpus in self._servers.values() if gpus is not None]
        disjoint = len(pinned) == len(self._servers) and all(
            not (a & b) for i, a in enumerate(pinned) for b in pinned[i + 1:])
        servers = 1 if disjoint and self._servers else len(self._servers)
        engines = servers + len(self._engines)
        if engines:
            sink.set("engines_on_gpu", engines)
        if self._trainer_vllm or (self._trainer and (engines or self._engine_named
                                                     or sink.get("engine") in ("vllm", "sglang"))):
            sink.set("trainer_on_gpu", True)
        trainer = self._trainer or self._training or sink.get("trainer_on_gpu")
        if trainer and not self._starting:
            sink.set("training_run", True)
