"""`inferbot kb validate` names the file and line of every kind of KB mistake."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.authoring.examples import run_examples
from bot.kb.loader import KB, load_kb
from bot.kb.yamlio import KBError

KB_YAML = """\
version: "t1"
changelog:
  - version: "t1"
    date: "2026-11-30"
    changes: ["test KB"]
"""

PROBLEM = """\
id: demo-problem
revision: 1
title: Demo
short_answer: Demo answer.
memory_problem: true
signatures:
  - id: demo-sig
    pattern: 'No available memory for the cache blocks'
causes: [demo-cause]
"""

CAUSE = """\
id: demo-cause
revision: 1
title: Demo cause
explanation: Because.
supports: [{signal: demo-sig, score: 0.9}]
"""

EXAMPLES = """\
problem: demo-problem
match:
  - source: https://github.com/vllm-project/vllm/issues/10439
    text: "ValueError: No available memory for the cache blocks. Try increasing"
near_miss:
  - source: https://github.com/vllm-project/vllm/issues/10517
    text: "INFO # GPU blocks: 1952, # CPU blocks: 2048"
"""


def make_kb(tmp_path: Path, problem: str = PROBLEM, cause: str = CAUSE,
            examples: str = EXAMPLES, extra: dict[str, str] | None = None) -> Path:
    root = tmp_path / "kb"
    files = {"kb.yaml": KB_YAML, "problems/demo-problem.yaml": problem,
             "causes/demo-cause.yaml": cause, "examples/demo-problem.yaml": examples,
             **(extra or {})}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def kb_of(root: Path) -> KB:
    """The KB in `root` alone."""
    return load_kb(roots=[root], use_cache=False)


def load_error(root: Path) -> KBError:
    with pytest.raises(KBError) as info:
        kb_of(root)
    return info.value


def test_valid_kb_loads_and_its_examples_pass(tmp_path: Path) -> None:
    kb = kb_of(make_kb(tmp_path))
    assert kb.version == "t1"
    assert all(r.ok for r in run_examples(kb))


def test_bad_regex_names_file_and_line(tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM.replace(
        "'No available memory for the cache blocks'", "'No available (memory'"))
    err = load_error(root)
    assert err.path.endswith("problems/demo-problem.yaml")
    assert err.line == 8  # the `pattern:` line
    assert "bad regex" in err.message


def test_unbounded_repeat_is_rejected_as_unsafe(tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM.replace(
        "'No available memory for the cache blocks'", r"'No available memory \d+ blocks'"))
    err = load_error(root)
    assert err.line == 8 and "unbounded repeat" in err.message


def test_unknown_key_names_the_key_line(tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM + "severity: high\n")
    err = load_error(root)
    assert err.line == 10
    assert "unknown key 'severity'" in err.message


def test_duplicate_id_names_both_places(tmp_path: Path) -> None:
    root = make_kb(tmp_path, extra={"problems/copy.yaml": PROBLEM.replace("demo-sig",
                                                                          "demo-sig-2")})
    err = load_error(root)
    assert err.path.endswith("problems/demo-problem.yaml") or err.path.endswith("copy.yaml")
    assert err.line == 1
    assert "duplicate problem id 'demo-problem'" in err.message


def test_higher_revision_in_a_site_folder_overrides(tmp_path: Path) -> None:
    shipped = make_kb(tmp_path)
    site = tmp_path / "site" / "problems"
    site.mkdir(parents=True)
    (site / "demo.yaml").write_text(PROBLEM.replace("revision: 1", "revision: 2")
                                    .replace("title: Demo", "title: Site demo"))
    kb = load_kb(roots=[shipped, tmp_path / "site"], use_cache=False)
    assert kb.problems["demo-problem"].title == "Site demo"


def test_example_that_does_not_match_names_its_line(tmp_path: Path) -> None:
    examples = EXAMPLES.replace('"ValueError: No available memory for the cache blocks. Try '
                                'increasing"', '"ValueError: something else entirely"')
    kb = kb_of(make_kb(tmp_path, examples=examples))
    bad = [r for r in run_examples(kb) if not r.ok]
    assert len(bad) == 1 and bad[0].kind == "match"
    assert bad[0].line == 3
    assert "does not match demo-problem" in bad[0].message()
    assert bad[0].message().startswith(str(bad[0].path) + ":3:")


def test_near_miss_that_matches_names_its_line(tmp_path: Path) -> None:
    examples = EXAMPLES.replace('"INFO # GPU blocks: 1952, # CPU blocks: 2048"',
                                '"No available memory for the cache blocks"')
    kb = kb_of(make_kb(tmp_path, examples=examples))
    bad = [r for r in run_examples(kb) if not r.ok]
    assert len(bad) == 1 and bad[0].kind == "near_miss"
    assert bad[0].line == 6
    assert "near-miss 0" in bad[0].message()


def test_unknown_cause_reference_is_an_error(tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM.replace("causes: [demo-cause]",
                                                     "causes: [no-such-cause]"))
    assert "unknown cause 'no-such-cause'" in load_error(root).message


def test_template_with_attribute_access_is_rejected(tmp_path: Path) -> None:
    cause = CAUSE + textwrap.dedent("""\
        fixes:
          - id: bad-fix
            title: Bad
            command: "vllm serve {model.__class__}"
        """)
    err = load_error(make_kb(tmp_path, cause=cause))
    assert err.line is not None and err.line >= 7
    assert "plain name" in err.message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    err = load_error(make_kb(tmp_path, problem=PROBLEM + "signatures: [unclosed\n"))
    assert err.line is not None and "invalid YAML" in err.message


@pytest.mark.slow
def test_kb_validate_command_names_file_and_line_of_a_site_entry(tmp_path: Path) -> None:
    """`inferbot kb validate` on the shipped KB plus a broken site folder (INFERBOT_KB_PATH)."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site" / "problems"
    site.mkdir(parents=True)
    bad = site / "broken.yaml"
    bad.write_text(PROBLEM.replace("demo-problem", "site-problem").replace("demo-sig", "site-sig")
                   .replace("'No available memory for the cache blocks'", "'(unclosed'")
                   .replace("causes: [demo-cause]", "causes: []"))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "INFERBOT_KB_PATH": str(tmp_path / "site"), "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "kb", "validate"], env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"{bad}:8: signatures.0.pattern: bad regex '(unclosed': "
                                "missing ), unterminated subpattern at position 0")


@pytest.mark.slow
def test_kb_validate_passes_on_the_shipped_kb() -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "INFERBOT_KB_PATH"}
    ok = subprocess.run([sys.executable, "-m", "bot.cli", "kb", "validate"],
                        env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                        timeout=120, check=False)
    assert ok.returncode == 0 and "examples pass" in ok.stdout


# --------------------------------------------------------------------------- what examples say


def test_an_example_may_say_what_the_answer_holds(tmp_path: Path) -> None:
    said = EXAMPLES.replace('    text: "ValueError: No available memory for the cache blocks.',
                            '    cause: demo-cause\n    facts: {gpu_blocks: 0}\n'
                            '    text: "INFO # GPU blocks: 0, # CPU blocks: 2048\\n'
                            'ValueError: No available memory for the cache blocks.')
    assert all(r.ok for r in run_examples(kb_of(make_kb(tmp_path, examples=said))))
    wrong = said.replace("facts: {gpu_blocks: 0}", "facts: {gpu_blocks: 7, max_model_len: 4096}")
    bad = [r for r in run_examples(kb_of(make_kb(tmp_path, examples=wrong))) if not r.ok]
    assert len(bad) == 1 and bad[0].kind == "match"
    assert bad[0].message().endswith(
        "is answered with gpu_blocks 0 (expected 7); max_model_len None (expected 4096)")


def test_what_an_example_says_must_be_known(tmp_path: Path) -> None:
    def said(field: str) -> str:
        return EXAMPLES.replace('    text: "ValueError: No available',
                                f'    {field}\n    text: "ValueError: No available')

    assert "unknown facts ['gpu_blockz']" in load_error(
        make_kb(tmp_path, examples=said("facts: {gpu_blockz: 0}"))).message
    assert "unknown cause 'no-such-cause'" in load_error(
        make_kb(tmp_path, examples=said("cause: no-such-cause"))).message
    assert "unknown phase 'lunch'" in load_error(
        make_kb(tmp_path, examples=said("phase: lunch"))).message
    near = EXAMPLES.replace('    text: "INFO # GPU blocks',
                            '    cause: demo-cause\n    text: "INFO # GPU blocks')
    assert "a near-miss cannot say what the answer holds" in load_error(
        make_kb(tmp_path, examples=near)).message


# --------------------------------------------------------------------------- ignore_case


@pytest.mark.parametrize(("change", "why"), [
    ("pattern: 'Straße voll'\n    ignore_case: true",
     "'ß' does not keep its letters when its case changes"),
    ("pattern: 'mémoire épuisée'\n    kind: prose\n    ignore_case: true",
     "'é' has a case, and a phrase signature folds ASCII letters only"),
    ("pattern: 'out of (?-i:Memory)'\n    ignore_case: true",
     "the pattern turns case-blindness off again"),
])
def test_a_case_blind_signature_that_cannot_be_is_refused(tmp_path: Path, change: str,
                                                          why: str) -> None:
    problem = PROBLEM.replace("pattern: 'No available memory for the cache blocks'", change)
    err = load_error(make_kb(tmp_path, problem=problem))
    assert why in err.message and err.line is not None


# --------------------------------------------------------------------------- coverage


def test_every_signature_is_exercised_both_ways_or_listed(tmp_path: Path) -> None:
    from bot.authoring.examples import coverage_errors

    two = PROBLEM.replace("causes: [demo-cause]", textwrap.dedent("""\
          - id: demo-sig-2
            pattern: 'KV cache is needed, which is larger than the available KV cache \\(\\d{1,4}'
        causes: [demo-cause]
        """))
    root = make_kb(tmp_path, problem=two)
    errors = [e.message for e in coverage_errors(kb_of(root), 1, 1)]
    assert errors == [
        "signature demo-sig-2: no must-match example of demo-problem in which it fires",
        "signature demo-sig: no near-miss of demo-problem that reaches it (holds one of its "
        "anchors)",
        "signature demo-sig-2: no near-miss of demo-problem that reaches it (holds one of its "
        "anchors)"]
    (root / "untested.yaml").write_text(textwrap.dedent("""\
        must_match: {demo-sig-2: no public paste yet}
        near_miss: {demo-sig: none yet, demo-sig-2: none yet, no-such-sig: none}
        """))
    errors = [e.message for e in coverage_errors(kb_of(root), 1, 1)]
    assert errors == ["near_miss: no signature 'no-such-sig'"]
    near = EXAMPLES + ('  - source: https://github.com/vllm-project/vllm/issues/2248\n'
                       '    text: "KV cache is needed, which is larger than the available KV '
                       'cache (unknown)"\n')
    root = make_kb(tmp_path / "again", problem=two, examples=near)
    (root / "untested.yaml").write_text(textwrap.dedent("""\
        must_match: {demo-sig-2: no public paste yet}
        near_miss: {demo-sig: none yet, demo-sig-2: none yet}
        """))
    errors = [e.message for e in coverage_errors(kb_of(root), 1, 1)]
    assert errors == ["near_miss: demo-sig-2 is exercised now; remove it from the list"]


PHRASES = KB_YAML + """\
phrases:
  cache_full:
    pattern: 'No available memory for the (?:cache|KV) blocks'
    anchors: ["No available memory"]
"""


def test_a_phrase_is_put_into_every_pattern_and_anchor_list_that_names_it(
        tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM.replace(
        "'No available memory for the cache blocks'",
        "'<<cache_full>>|cache is full'\n    anchors: [\"<<cache_full>>\", \"cache is full\"]"),
        extra={"kb.yaml": PHRASES})
    sig = kb_of(root).problems["demo-problem"].signatures[0]
    assert sig.pattern == "(?:No available memory for the (?:cache|KV) blocks)|cache is full"
    assert sig.anchors == ["No available memory", "cache is full"]


def test_an_unknown_phrase_names_the_signature_line(tmp_path: Path) -> None:
    root = make_kb(tmp_path, problem=PROBLEM.replace(
        "'No available memory for the cache blocks'", "'<<cache_ful>>'"),
        extra={"kb.yaml": PHRASES})
    err = load_error(root)
    assert err.line == 8
    assert "unknown phrase <<cache_ful>> (kb.yaml phrases: cache_full)" in err.message


def test_a_cached_kb_follows_an_edit_of_its_files(tmp_path: Path) -> None:
    """The cache is named by the files' sizes and times: a site's edit is read on the next
    start, and an unchanged KB comes from the cache, content hash and all."""
    shipped = make_kb(tmp_path)
    site = tmp_path / "site" / "problems"
    site.mkdir(parents=True)
    override = site / "demo.yaml"
    override.write_text(PROBLEM.replace("revision: 1", "revision: 2")
                        .replace("title: Demo", "title: Site demo"))
    first = load_kb(roots=[shipped, tmp_path / "site"])
    again = load_kb(roots=[shipped, tmp_path / "site"])
    assert again.problems["demo-problem"].title == "Site demo"
    assert again.content_hash == first.content_hash
    override.write_text(PROBLEM.replace("revision: 1", "revision: 2")
                        .replace("title: Demo", "title: Edited demo"))
    edited = load_kb(roots=[shipped, tmp_path / "site"])
    assert edited.problems["demo-problem"].title == "Edited demo"
    assert edited.content_hash != first.content_hash

