"""Text as Slack sends it: mentions, links, entities, fences, verbs."""

from __future__ import annotations

import pytest

from bot.slack.parse import (
    HistoryQuery,
    ParseError,
    history_query,
    host_arg,
    parse,
    plain_text,
    size_query,
    split_fences,
)
from tests.slack.fakes import load

BOT = "U0BOT00001"


def test_the_fixture_mention_is_resolved_and_unescaped() -> None:
    text = load("app_mention_code_block.json")["event"]["text"]
    plain = plain_text(text, BOT)
    assert "<@" not in plain and "U0BOT00001" not in plain
    assert "dashboard (https://grafana.example.com/d/abc?a=1&b=2)" in plain
    assert "assert x < 0 && y > 1" in plain


def test_entities_are_decoded_once_and_only_slacks_three() -> None:
    assert plain_text("a &amp;lt; b &lt;pid&gt; &quot;q&quot;") == 'a &lt; b <pid> &quot;q&quot;'


def test_other_mentions_channels_and_specials_stay_readable() -> None:
    text = "<@U0BOT00001> ask <@U0BOB|bob> in <#C0INC|inc-api> <!here> <!subteam^S1|@oncall>"
    assert plain_text(text, BOT) == " ask @bob in #inc-api @here @oncall"


def test_fences_glued_to_text_and_unclosed() -> None:
    outside, blocks = split_fences("see```line one\nline two```and ```tail")
    assert outside == "see and"
    assert blocks == ["line one\nline two", "tail"]


def test_a_fenced_paste_is_diagnosed_and_words_outside_do_not_leak_in() -> None:
    req = parse("<@U0BOT00001> prod down ```ValueError: x &lt; y```", BOT)
    assert req.verb == "paste"
    assert req.paste == "ValueError: x < y"


def test_unfenced_text_is_the_paste() -> None:
    req = parse("<@U0BOT00001> torch.OutOfMemoryError: CUDA out of memory", BOT)
    assert req.verb == "paste" and req.paste.startswith("torch.OutOfMemoryError")


@pytest.mark.parametrize(("text", "verb", "args"), [
    ("<@U0BOT00001> check gpu-07", "check", ["gpu-07"]),
    ("<@U0BOT00001> History: 7d", "history", ["7d"]),
    ("<@U0BOT00001> help", "help", []),
    ("<@U0BOT00001>", "help", []),
    ("<@U0BOT00001> kb", "kb", []),
    ("<@U0BOT00001> resolve --max-model-len 32768", "resolve", ["--max-model-len", "32768"]),
])
def test_verbs(text: str, verb: str, args: list[str]) -> None:
    req = parse(text, BOT)
    assert (req.verb, req.args) == (verb, args)


def test_a_message_with_only_a_snippet_is_a_paste() -> None:
    assert parse("<@U0BOT00001>", BOT, has_files=True).verb == "paste"


@pytest.mark.parametrize(("args", "expected"), [
    (["gpu-07"], HistoryQuery(host="gpu-07")),
    (["7d"], HistoryQuery(since="7d")),
    (["kv-cache-no-blocks"], HistoryQuery(problem="kv-cache-no-blocks")),
    (["meta-llama/Llama-3.1-8B"], HistoryQuery(model="meta-llama/Llama-3.1-8B")),
    (["host", "gpu-07", "since", "24h", "max_model_len"],
     HistoryQuery(host="gpu-07", since="24h", search="max_model_len")),
    (["out", "of", "memory", "2w"], HistoryQuery(since="2w", search="out of memory")),
])
def test_history_queries(args: list[str], expected: HistoryQuery) -> None:
    assert history_query(args) == expected


@pytest.mark.parametrize("args", [["host"], ["host", "$(id)"], ["since", "yesterday"]])
def test_bad_history_queries_say_how(args: list[str]) -> None:
    with pytest.raises(ParseError):
        history_query(args)


def test_size_query_with_flags_counts_and_smart_dashes() -> None:
    words = ["meta-llama/Llama-3.1-8B", "on", "H100", "x2", "\u2014tp", "2",
             "--max-model-len=32768", "fp8"]
    q = size_query(words)
    assert (q.model, q.gpu, q.gpus, q.tp, q.max_model_len, q.kv_cache_dtype) == (
        "meta-llama/Llama-3.1-8B", "H100", 2, 2, 32768, "fp8")


@pytest.mark.parametrize("text", ["llama", "llama on", "on H100", "m on H100 --tp x",
                                  "m on H100 --bogus 1", "m on H100 --tp 0"])
def test_bad_size_queries_say_how(text: str) -> None:
    with pytest.raises(ParseError, match="usage"):
        size_query(text.split())


@pytest.mark.parametrize("args", [[], ["a", "b"], ["-oProxyCommand=x"], ["gpu1;id"], ["../x"]])
def test_check_takes_one_host_name(args: list[str]) -> None:
    with pytest.raises(ParseError):
        host_arg(args)
