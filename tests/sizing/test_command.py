"""Fix commands safe to paste: built from the server's own command line, every observed flag
kept, only the changed one changed, a length that leaves room for two requests, at most three
fixes, none that differ only in rounding, placeholders never first or behind a button."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.diagnose import diagnose
from bot.kb.loader import KB, load_kb
from bot.render.present import present
from bot.render.text import render
from bot.schema import Diagnosis, Evidence
from bot.sizing.command import parse_command
from bot.sizing.plan import round_value

ROOT = Path(__file__).resolve().parents[2]
ERROR = (
    "INFO 11-30 06:03:16 [gpu_worker.py:227] Available KV cache memory: 9.97 GiB\n"
    "ERROR 11-30 06:03:16 [core.py:586] ValueError: To serve at least one request with the "
    "model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (9.97 GiB). Based on the available memory, the estimated maximum "
    "model length is 77824. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.\n")
SERVE = ("$ vllm serve Qwen/Qwen2.5-32B-Instruct --tensor-parallel-size 2 --quantization fp8 "
         "--port 8001 --max-model-len 131072 --served-model-name qwen")


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb()


def run(kb: KB, text: str) -> Diagnosis:
    return diagnose(Evidence(text=text), kb)


def concurrency(d: Diagnosis, length: int) -> float:
    """Requests of `length` tokens the KV cache holds at once (the edge vLLM printed)."""
    assert d.sizing is not None and d.sizing.max_model_len_that_fits
    return d.sizing.max_model_len_that_fits / length


def length_of(command: str) -> int:
    m = re.search(r"--max-model-len (\d+)", command)
    assert m, command
    return int(m.group(1))


def test_the_shipped_example_s_first_fix_keeps_its_flags_and_leaves_headroom(kb: KB) -> None:
    d = run(kb, (ROOT / "examples" / "vllm-max-model-len.log").read_text())
    first = d.fixes[0]
    assert first.command == ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len "
                             "32768 --gpu-memory-utilization 0.9")
    assert first.change == "--max-model-len 1048576 -> 32768"
    assert concurrency(d, length_of(first.command)) >= 2
    assert "81,664 is the edge" in first.predicted and "(1.0x)" in first.predicted


def test_the_length_the_application_needs_is_set_when_it_fits(kb: KB) -> None:
    log = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
    d = run(kb, "Our application needs 65536 tokens of context.\n" + log)
    first = d.fixes[0]
    assert first.change == "--max-model-len 1048576 -> 65536"
    assert "the length your application needs" in first.title
    assert "1.2x concurrency at 65,536 tokens" in first.predicted


def test_a_need_larger_than_the_kv_cache_is_said_beside_the_shorter_length(kb: KB) -> None:
    log = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
    d = run(kb, "Our application needs 128k tokens of context.\n" + log)
    length = next(f for f in d.fixes if "--max-model-len" in f.flags)
    assert length.flags["--max-model-len"] == 32768  # the headroom rule, as without the need
    assert "Your application needs 131,072 tokens, more than the 81,664" in length.predicted


def test_a_server_configured_from_a_manifest_s_env_gets_the_fix_that_way(kb: KB) -> None:
    log = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
    manifest = '        env:\n          - name: MAX_MODEL_LEN\n            value: "1048576"\n'
    d = run(kb, log + manifest)
    first = d.fixes[0]
    assert first.env == ["- name: MAX_MODEL_LEN", '  value: "32768"']
    assert first.change == "--max-model-len 1048576 -> 32768"  # the flag form stays beside
    shown = render(d, full=True)
    assert "in the server's environment, as it was set:\n  - name: MAX_MODEL_LEN\n" in shown


def test_docker_run_s_environment_gets_the_fix_as_e_and_no_secret(kb: KB) -> None:
    log = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz0123"
    docker = (f"docker run --gpus all -e MAX_MODEL_LEN=1048576 -e HF_TOKEN={token} "
              "runpod/worker-v1-vllm:stable\n")
    d = run(kb, docker + log)
    assert d.fixes[0].env == ["-e MAX_MODEL_LEN=32768"]
    assert token not in str(d.fixes)


def test_no_environment_form_where_the_server_did_not_read_that_variable(kb: KB) -> None:
    log = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
    d = run(kb, "docker run --gpus all -e HF_HOME=/cache vllm/vllm-openai\n" + log)
    assert d.fixes[0].env is None


def test_a_pasted_command_line_keeps_tp_quantization_port_and_name(kb: KB) -> None:
    d = run(kb, SERVE + "\n" + ERROR)
    assert d.server_command == SERVE.removeprefix("$ ")
    first = d.fixes[0]
    for flag in ("--tensor-parallel-size 2", "--quantization fp8", "--port 8001",
                 "--served-model-name qwen"):
        assert flag in first.command
    assert first.command.startswith("vllm serve Qwen/Qwen2.5-32B-Instruct ")
    assert first.change == "--max-model-len 131072 -> 32768"
    assert concurrency(d, length_of(first.command)) >= 2
    # only the changed flag differs from what the server ran with
    assert parse_command(first.command).flags == [  # type: ignore[union-attr]
        ("--tensor-parallel-size", 2), ("--quantization", "fp8"), ("--port", 8001),
        ("--max-model-len", 32768), ("--served-model-name", "qwen")]


def test_a_continued_command_and_the_engine_s_echo_are_read(kb: KB) -> None:
    continued = ("vllm serve m --tensor-parallel-size 2 \\\n  --port 8001 \\\n"
                 "  --max-model-len 131072\n")
    assert run(kb, continued + ERROR).server_command == (
        "vllm serve m --tensor-parallel-size 2 --port 8001 --max-model-len 131072")
    echo = ("INFO 11-18 18:05:05 [cli_args.py:261] non-default args: {'model': 'm', "
            "'max_model_len': 131072, 'tensor_parallel_size': 2, 'port': 8001}\n")
    d = run(kb, echo + ERROR)
    assert d.fixes[0].command == ("vllm serve m --max-model-len 32768 --tensor-parallel-size "
                                  "2 --port 8001")


def test_secrets_on_the_command_line_are_not_kept(kb: KB) -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    d = run(kb, f"vllm serve m --api-key {token} --max-model-len 131072\n" + ERROR)
    assert d.server_command and token not in d.server_command
    assert all(token not in f.command for f in d.fixes)


def test_at_most_three_fixes_none_differing_only_in_rounding(kb: KB) -> None:
    for ex in kb.examples.values():
        for case in ex.match:
            d = run(kb, case.text)
            assert len(d.fixes) <= 3
            lengths = [tuple(sorted((k, v) for k, v in f.flags.items() if "len" not in k))
                       for f in d.fixes if any("len" in k for k in f.flags)]
            assert len(lengths) == len(set(lengths)), [f.command for f in d.fixes]


def test_placeholders_are_never_first_nor_behind_a_button(kb: KB) -> None:
    for ex in kb.examples.values():
        for case in ex.match:
            d = run(kb, case.text)
            p = present(d)
            first = next((s for s in p.first if s.key == "fix"), None)
            if first is not None:
                # what is to be pasted: the command, or the change to make
                shown = " ".join(line.plain for line in first.lines
                                 if line.kind == "command" or "restart" in line.plain)
                words = shown.split("#", 1)[0].split()  # a word to fill in: MODEL, AWQ_...
                assert not [w for w in words if re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", w)], shown
            chosen = {c.fix_id for c in p.choices}
            for f in d.fixes:
                if f.id in chosen:
                    assert not [x for x in f.placeholders if x != "MODEL"], f.command


def test_a_checkpoint_to_find_is_an_instruction(kb: KB) -> None:
    text = (kb.examples["kv-cache-no-blocks"].match[0].text)
    d = run(kb, text)
    awq = [f for f in d.fixes if "AWQ_CHECKPOINT_OF_THE_MODEL" in f.command]
    if awq:
        assert awq[0].instruction.startswith("Find a 4-bit build of")
        assert d.fixes[0] is not awq[0]


@pytest.mark.parametrize(("limit", "want"), [(40_832, 32_768), (38_912, 32_768),
                                             (50_000, 49_152), (1_500, 1_024), (1_000, 992),
                                             (16, 16)])
def test_round_values(limit: int, want: int) -> None:
    assert round_value(limit) == want


def test_a_manifest_s_args_list_is_kept_and_the_fix_shown_that_way_too(kb: KB) -> None:
    manifest = ("        args:\n            - --model\n            - Qwen/Qwen2.5-32B-Instruct\n"
                "            - --tensor-parallel-size\n            - \"2\"\n"
                "            - --max-model-len\n            - \"131072\"\n"
                "            - --port\n            - \"8001\"\n")
    for paste in (manifest, '        args: ["--model", "Qwen/Qwen2.5-32B-Instruct", '
                            '"--tensor-parallel-size", "2", "--max-model-len", "131072", '
                            '"--port", "8001"]\n'):
        d = run(kb, paste + ERROR)
        first = d.fixes[0]
        assert first.args == ["--model", "Qwen/Qwen2.5-32B-Instruct", "--tensor-parallel-size",
                              "2", "--max-model-len", "32768", "--port", "8001"]
        assert first.command == ("vllm serve --model Qwen/Qwen2.5-32B-Instruct "
                                 "--tensor-parallel-size 2 --max-model-len 32768 --port 8001")
        assert first.change == "--max-model-len 131072 -> 32768"


# Qwen3#67: eight A800s visible, a whole vLLM command with no TP size, the 72B model's load OOMs
UNSHARDED = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a "
    "total capacty of 79.33 GiB of which 351.81 MiB is free.\n"
    "8张A800的显存\n"
    "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m vllm.entrypoints.openai.api_server \\\n"
    "--model qwen/Qwen1.5-72B-Chat\n")


@pytest.mark.parametrize(("command", "tp"), [
    ("vllm serve Qwen/Qwen1.5-72B-Chat --port 8000", 1),
    ("python -m sglang.launch_server --model-path Qwen/Qwen1.5-72B-Chat", 1),
    ("vllm serve Qwen/Qwen1.5-72B-Chat -tp 4", 4),
    # lmdeploy#2442, quoted as inline code
    ("`CUDA_VISIBLE_DEVICES=0,1 lmdeploy serve api_server "
     "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4`", 1),
    # TGI shards over every visible GPU; a config file may set the size
    ("text-generation-launcher --model-id Qwen/Qwen1.5-72B-Chat", None),
    ("vllm serve Qwen/Qwen1.5-72B-Chat --config serve.yaml", None),
], ids=["vllm", "sglang", "tp-flag", "lmdeploy", "tgi", "config-file"])
def test_a_whole_command_without_a_tp_size_runs_on_one_gpu(kb: KB, command: str,
                                                           tp: int | None) -> None:
    d = run(kb, command + "\n")
    assert d.facts.tensor_parallel_size == tp
    assert d.facts.model is not None and d.facts.model.endswith(("Chat", "INT4"))


def test_weights_that_cannot_fit_an_unsharded_gpu_ran_out_while_loading(kb: KB) -> None:
    d = run(kb, UNSHARDED)
    assert d.facts.tensor_parallel_size == 1
    assert d.problems[0].id == "oom-loading-weights"
    assert d.causes[0].id == "tensor-parallel-too-small"
    # without the command, eight GPUs may have been sharded over: the phase stays open
    cut = UNSHARDED.split("CUDA_VISIBLE")[0]
    assert run(kb, cut).problems[0].id != "oom-loading-weights"
