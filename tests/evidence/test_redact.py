"""Secrets are hidden, names stay visible, ordinary log text is untouched, and redact is
idempotent and fast."""

from __future__ import annotations

import time

import pytest

from bot.evidence import extract_facts, redact
from bot.evidence.redact import MARK
from tests.canaries import CANARIES, canary_text, leaked

HF = "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"
SK = "sk-proj-" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef" * 3
SK_OLD = "sk-" + "T3BlbkFJ" * 6

REDACTED = [
    (f"HF_TOKEN={HF} vllm serve m", "HF_TOKEN=[REDACTED] vllm serve m"),
    (f"export HUGGING_FACE_HUB_TOKEN='{HF}'", "export HUGGING_FACE_HUB_TOKEN=[REDACTED]"),
    (f"token is {HF}, thanks", "token is [REDACTED], thanks"),
    (f"OPENAI_API_KEY={SK}", "OPENAI_API_KEY=[REDACTED]"),
    (f"client = OpenAI(base_url=url) # key {SK_OLD}",
     "client = OpenAI(base_url=url) # key [REDACTED]"),
    ("SLACK_BOT_TOKEN=xoxb-123456789012-abcdefghijkl", "SLACK_BOT_TOKEN=[REDACTED]"),
    ("token xoxp-123456789012-abcdefghijkl and xapp-1-A0123-456-abcdef",
     "token [REDACTED] and [REDACTED]"),
    ("vllm serve m --api-key s3cr3t-value --port 8000",
     "vllm serve m --api-key [REDACTED] --port 8000"),
    ("vllm serve m --api-key=s3cr3t-value", "vllm serve m --api-key=[REDACTED]"),
    ('--api-key "my secret"', "--api-key [REDACTED]"),
    ("args: Namespace(api_key=['abc123'], max_num_batched_tokens=8192)",
     "args: Namespace(api_key=[REDACTED], max_num_batched_tokens=8192)"),
    ("args: Namespace(model='m', api_key='abc123')",
     "args: Namespace(model='m', api_key=[REDACTED])"),
    ("non-default args: {'api_key': 'abc123'}", "non-default args: {'api_key': [REDACTED]}"),
    ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc'",
     "curl -H 'Authorization: Bearer [REDACTED]'"),
    ("headers={'authorization': 'bearer abcdefgh12345678'}",
     "headers={'authorization': 'bearer [REDACTED]'}"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"),
    ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=[REDACTED]"),
    ("id ASIAY34FZKBOKMUTVV7A used", "id [REDACTED] used"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "aws_secret_access_key = [REDACTED]"),
    ("DATABASE_URL=postgresql://inferbot:hunter2@db:5432/inferbot",
     "DATABASE_URL=postgresql://inferbot:[REDACTED]@db:5432/inferbot"),
    ("redis://default:p%40ss@cache:6379/0", "redis://default:[REDACTED]@cache:6379/0"),
    ("DB_PASSWORD=hunter2 PASSWORD=x", "DB_PASSWORD=[REDACTED] PASSWORD=[REDACTED]"),
    ("MY_SECRET=abc; NEXT=1", "MY_SECRET=[REDACTED]; NEXT=1"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n"
     "-----END OPENSSH PRIVATE KEY-----\nafter", "[REDACTED] (private key)\nafter"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\ntruncated paste",
     "[REDACTED] (private key)"),
]

UNTOUCHED = [
    "INFO Avg prompt throughput: 10.0 tokens/s, GPU KV cache usage: 86.1%, CPU KV cache: 0.0%",
    "args: Namespace(max_num_batched_tokens=8192, max_total_tokens=None, api_key=None)",
    "vllm serve m --max-num-batched-tokens 8192 --tokenizer org/tok --max-total-tokens 9000",
    "tokenizer_config: eos_token='</s>', bos_token='<s>', pad_token=None",
    "/opt/conda/lib/python3.10/site-packages/sk-learn-intelex-2023-1-1-py310-linux/x.py",
    "pip install scikit-learn sk-learn",
    "GET http://10.0.0.1:8000/v1/models HTTP/1.1 200 OK",
    "KV cache is needed, which is larger than the available KV cache memory (3.18 GiB).",
    "prompt_token_ids: [1, 2, 3], num_tokens=3, MAX_TOKENS=4096, hf_hub_cache=/root/.cache",
    "the bearer of bad news; token: ; key=None",
    "Traceback (most recent call last): KeyError: 'model'",
]


@pytest.mark.parametrize(("text", "expected"), REDACTED, ids=[t[:30] for t, _ in REDACTED])
def test_secret_is_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


@pytest.mark.parametrize("text", UNTOUCHED, ids=[t[:30] for t in UNTOUCHED])
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_redact_is_idempotent_on_everything() -> None:
    text = "\n".join([t for t, _ in REDACTED] + UNTOUCHED)
    once = redact(text)
    assert redact(once) == once
    for secret in (HF, SK, SK_OLD, "hunter2", "s3cr3t", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI"):
        assert secret not in once


def test_facts_never_contain_a_secret() -> None:
    text = "\n".join(t for t, _ in REDACTED) + (
        f"\nvllm serve {HF} --max-model-len 8192\nLLM(model='{SK}')\n"
        f"vllm serve https://u:hunter2@host/model\n")
    dumped = repr(extract_facts(text))
    for secret in (HF, SK, SK_OLD, "hunter2", "s3cr3t", "abc123", "AKIA", "wJalrXUtnFEMI", "xoxb"):
        assert secret not in dumped


@pytest.mark.slow
def test_large_text_is_fast() -> None:
    line = ("(APIServer pid=1) INFO 08-01 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 "
            "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, KEY=None\n")
    text = line * (4 * 1024 * 1024 // len(line)) + f"HF_TOKEN={HF}\n"
    start = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - start < 5
    assert HF not in out and out.count("[REDACTED]") == 1


def test_argv_list_form_as_docker_inspect_prints_it() -> None:
    argv = ('"Args": ["--model", "m", "--api-key", "plainsecret99", '
            '"--max-num-batched-tokens", "8192"]')
    out = redact(argv)
    assert "plainsecret99" not in out
    assert '"--max-num-batched-tokens", "8192"' in out
    assert redact(out) == out


@pytest.mark.parametrize("family", list(CANARIES))
def test_every_token_family_is_redacted(family: str) -> None:
    text, secret = CANARIES[family]
    out = redact(text)
    assert secret not in out and MARK in out
    assert redact(out) == out


def test_all_canaries_together_leave_nothing() -> None:
    assert leaked(redact(canary_text())) == []


@pytest.mark.parametrize("text", [
    "https://indieweb.org/images/3/35/2018-250-xoxo-indieweb-1.jpg",
    "xoxb-xxx and xoxp-1234567",
    "ghost_town github_patch glance-at gl-pat-test",
    "sk-learn-intelex-2023-1-1-py310-linux-x86-64-abcdefghijk",
    "eyJ header only, no payload",
    "Q~ in prose",
])
def test_near_misses_of_the_new_families_are_untouched(text: str) -> None:
    assert redact(text) == text


def test_a_git_hash_beside_an_access_key_id_is_kept() -> None:
    sha = "9c37922a4df0f5b3e1c7d9a2b4c6e8f0a1b3c5d7"
    out = redact(f"commit {sha} rotated AKIAZ7PQ2XR5LMN3TUVW")
    assert sha in out and "AKIAZ7PQ2XR5LMN3TUVW" not in out


def test_a_url_password_with_an_at_sign_is_hidden_whole() -> None:
    assert redact("redis://:p@ss@cache:6379/0") == "redis://:[REDACTED]@cache:6379/0"
    assert redact("postgresql://u:a@b@db/x") == "postgresql://u:[REDACTED]@db/x"
