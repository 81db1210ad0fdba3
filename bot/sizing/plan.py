"""The fix planner: matched problems + facts -> ranked causes and concrete, computed fixes.

Causes come from the matched problems' candidate lists and are ranked by the evidence: a cause
whose signal (a signature id) was seen is supported directly; otherwise its named check does the
arithmetic; when the evidence cannot tell, the KB's prior stands; a check that returns 0 means
the facts contradict the cause and it is dropped. Fixes are the ranked causes' templates, filled
from named values (facts, sizing and planner-computed numbers; never `eval`), and anything that
cannot work here (raising utilization while another process holds the memory, ...) is moved to
`withheld` with the reason, so nobody tries it anyway.
"""

from __future__ import annotations

import dataclasses
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, NamedTuple

from bot.kb.loader import KB
from bot.kb.match import SignatureHit
from bot.kb.schema import Cause, FixTemplate
from bot.schema import (
    GIB,
    CauseMatch,
    CauseRef,
    Facts,
    Fix,
    ProblemMatch,
    Sizing,
    SizingFigures,
    WithheldFix,
)
from bot.sizing.budget import (
    DEFAULT_UTIL,
    SAFE_MAX_UTIL,
    SAFE_MIN_UTIL,
    ModelLookup,
    compute_sizing,
    fmt_bytes,
    look_up_model,
    tp_sizes,
)
from bot.sizing.catalog import ResolvedModel
from bot.sizing.checks import CONDITIONS, foreign_processes_h
from bot.sizing.command import (
    MODEL_FLAGS,
    EnvSettings,
    ServerCommand,
    apply_flags,
    change_only,
    env_name,
    env_value,
    parse_command,
    parse_value,
    placeholders,
)
from bot.structs import struct

MAX_CAUSES = 3  # supported causes shown; the rest are named in one line
UNDECIDED_CAUSES = 2  # shown as possible when the evidence supports none
DECISIVE = 0.9  # a supported cause's score at which no second, possible one is named
CORROBORATION = 0.03  # per further support that holds
IMPLAUSIBLE = ("non_torch_implausible", "profile_implausible")
QUOTE_CHARS = 160
IMPLIED_CONFIDENCE = 0.6  # a problem the figures show with no line naming it
DEFAULT_ENGINE = "vllm"
MAX_FIXES = 3  # an on-call engineer reads three; the KB's others stay in its entries
# A suggested length leaves room for this many requests of that length at once: at the exact
# edge the server starts, holds one request, and preempts the rest.
HEADROOM = 2
LENGTH_FLAGS = ("--max-model-len", "--context-length", "--max-total-tokens")


@struct(slots=True, kw_only=True)
class Plan:
    """What the planner adds to a Diagnosis."""

    sizing: Sizing | None = None
    problems: list[ProblemMatch] = field(default_factory=list)  # as the facts place them
    causes: list[CauseMatch] = field(default_factory=list)
    more_causes: list[CauseRef] = field(default_factory=list)  # not ruled out, not shown above
    fixes: list[Fix] = field(default_factory=list)
    withheld: list[WithheldFix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # readings the facts set aside, and why


class Scored(NamedTuple):
    cause: Cause
    score: float
    why: str
    supported: bool  # the score came from evidence, not the KB's prior
    ruled_out: str | None = None  # the condition that contradicts it


def plan(kb: KB, problems: list[ProblemMatch], facts: Facts,
         model_config: dict[str, Any] | None = None,
         hits: Mapping[str, Sequence[SignatureHit]] | None = None, *,
         command: ServerCommand | None = None, env: EnvSettings | None = None) -> Plan:
    """Rank the causes by the evidence and turn the supported ones' fix templates into
    commands.

    Sizing is computed when a matched problem is about memory, or when nothing matched but the
    paste names a model and a GPU (a question such as "will qwen 72b fit on two h100s?"): an
    NCCL or tokenizer error gets no memory arithmetic forced onto it. `command`: the
    server's own command line, which the fixes are applied to.
    """
    hits = hits or {}
    asks = not problems and not hits and bool(facts.model and (facts.gpu_name or facts.gpus))
    problems, notes = screen(kb, problems, facts, hits)
    memory = any(kb.problems[p.id].memory_problem for p in problems if p.id in kb.problems)
    sized = facts
    if asks and (facts.gpu_count or 0) > 1 and facts.tensor_parallel_size is None:
        # "on two h100s": the question is about sharding over them
        sized = dataclasses.replace(facts, tensor_parallel_size=facts.gpu_count)
    # the model, looked up once, where the sizing or a TP size needs it
    lookup = (look_up_model(facts, model_config)
              if memory or asks or facts.gpu_count or facts.gpus else ModelLookup())
    sizing = compute_sizing(sized, lookup) if memory or asks else None
    problems = place(kb, problems, facts, sizing)
    ranked = rank_causes(kb, problems, facts, sizing, hits)
    if sizing is not None:
        # numbers that do not add up are said, whatever cause they end up supporting
        for name in IMPLAUSIBLE:
            why = CONDITIONS[name](facts, sizing)
            if why is not None and why not in sizing.notes:
                sizing.notes.append(why)
    live = [sc for sc in ranked if sc.ruled_out is None]
    shown = [sc for sc in live if sc.supported][:MAX_CAUSES]
    listed = [set(kb.problems[p.id].causes) if p.id in kb.problems else set() for p in problems]
    if shown and listed and listed[0] and all(
            sc.cause.id not in listed[0] and any(sc.cause.id in o for o in listed[1:])
            for sc in shown):
        # the evidence explains only a side finding (a fallback kernel's warning beside a KV
        # error): the top problem's likeliest causes still come first, as possible
        shown = [*[sc for sc in live if sc.cause.id in listed[0]][:UNDECIDED_CAUSES],
                 *shown][:MAX_CAUSES]
    if not shown:
        shown = live[:UNDECIDED_CAUSES]
    elif len(shown) == 1 and shown[0].score < DECISIVE and listed and listed[0]:
        # one cause the evidence only leans towards: the top problem's next likeliest is
        # named beside it, as possible, so the second hypothesis is not one click away
        shown += [sc for sc in live if sc.cause.id in listed[0] and sc not in shown][:1]
    values = template_values(facts, sizing, lookup.model)
    fixes: list[tuple[int, int, int, Fix]] = []
    withheld: list[WithheldFix] = []
    seen_ids: set[str] = set()
    seen_commands: set[str] = set()  # two causes' templates can render the same command
    engine = facts.engine or DEFAULT_ENGINE
    # Only the supported causes' fixes are proposed; a cause the facts contradict shows its
    # fixes as withheld (so "why not raise utilization?" is answered). When the evidence
    # decides nothing, one first step: the least disruptive fix of the likeliest cause.
    proposable = {sc.cause.id for sc in shown if sc.supported}
    undecided = not proposable
    for rank, sc in enumerate([*live, *(sc for sc in ranked if sc.ruled_out)]):
        for fx in sc.cause.fixes:
            if fx.engine not in (engine, "any") or fx.id in seen_ids:
                continue
            seen_ids.add(fx.id)
            fix = fill_fix(fx, sc.cause.id, values)
            if fix is None or fix.command in seen_commands:
                continue
            seen_commands.add(fix.command)
            reason = withhold_reason(fx, fix, facts, sizing)
            if reason is None and sc.ruled_out is not None:
                reason = f"ruled out by the facts: {sc.ruled_out}"
            if reason:
                withheld.append(WithheldFix(id=fix.id, title=fix.title, reason=reason))
            elif sc.cause.id in proposable or (undecided and rank == 0):
                fixes.append((fix.disruption, rank, len(fixes), fix))
    fixes.sort(key=lambda t: t[:3])
    finished = finish_fixes([t[3] for t in fixes], engine, facts, sizing, command, env)
    if undecided:
        finished = finished[:1]
    shown_ids = {sc.cause.id for sc in shown}
    return Plan(sizing=sizing, problems=problems, causes=[_match(sc) for sc in shown],
                more_causes=[CauseRef(id=sc.cause.id, title=sc.cause.title)
                             for sc in live if sc.cause.id not in shown_ids],
                fixes=finished, withheld=withheld, notes=notes)


def finish_fixes(fixes: list[Fix], engine: str, facts: Facts, sizing: Sizing | None,
                 command: ServerCommand | None, env: EnvSettings | None = None) -> list[Fix]:
    """The fixes as they are offered: lengths with headroom, each applied to the server's own
    command line, none that repeats another but for rounding, the ones a person must fill in
    last, at most MAX_FIXES."""
    out: list[Fix] = []
    seen: set[tuple[object, ...]] = set()
    for fix in fixes:
        fix = with_headroom(fix, sizing, facts.needed_max_model_len)
        if _changes_nothing(fix, engine, command):
            continue
        fix = in_environment(on_command(fix, engine, command, facts), env)
        # two fixes that set the same flags and differ only in a length's value are one fix
        key = tuple(sorted((f, None if f in LENGTH_FLAGS else str(v))
                           for f, v in fix.flags.items())) or (fix.command,)
        if key in seen:
            continue
        seen.add(key)
        out.append(fix)
    # stable: the planner's order otherwise. A length below what the person says the
    # application needs goes after the fixes that keep it (more memory for the KV cache).
    needed = facts.needed_max_model_len
    out.sort(key=lambda f: (bool(f.instruction), _below_need(f, needed)))
    return out[:MAX_FIXES]


def _below_need(fix: Fix, needed: int | None) -> bool:
    return needed is not None and any(isinstance(v := fix.flags.get(f), int) and v < needed
                                      for f in LENGTH_FLAGS)


def _changes_nothing(fix: Fix, engine: str, command: ServerCommand | None) -> bool:
    """A fix whose every flag the server's own command already sets to that value (an example
    `--tp-size 2` for a server started with `--tp-size 2`): restarting with it is no fix."""
    if command is None or command.engine != engine:
        return False
    template = parse_command(fix.command)
    if template is None:
        return False
    wanted = [(f, v) for f, v in template.flags if f not in MODEL_FLAGS]
    return bool(wanted) and all(command.has(f) and str(command.get(f)) == str(v)
                                for f, v in wanted)


def round_value(limit: int) -> int:
    """The largest config-friendly length <= limit: a power of two or 1.5 times one (16,384,
    24,576, 32,768, ...), a multiple of 16 below 1,024."""
    if limit < 1024:
        return max(limit // 16 * 16, 0)
    best = 1024
    power = 1024
    while power <= limit:
        best = max(best, power)
        if power * 3 // 2 <= limit:
            best = power * 3 // 2
        power *= 2
    return best


def _edges(sizing: Sizing | None) -> list[int]:
    """The token capacities the sizing worked out: as configured and after each knob."""
    if sizing is None:
        return []
    x = sizing.extra
    found = [sizing.max_model_len_that_fits, x.kv_cache_tokens, x.fp8_max_model_len,
             x.quantized_max_model_len, x.tp_max_model_len]
    return sorted({v for v in found if v})


def with_headroom(fix: Fix, sizing: Sizing | None, needed: int | None = None) -> Fix:
    """A length flag at (or just below) the KV cache's edge lowered to the largest round
    value that leaves HEADROOM requests of that length room at once; the edge said in words.
    A length that already leaves that room is kept. When the person said the length their
    application needs (`needed`) and it fits, that length is set instead, whatever room it
    leaves; when it does not fit, the fix says so, since lowering the length then trades away
    what the application needs."""
    flag = next((f for f in LENGTH_FLAGS if isinstance(fix.flags.get(f), int)), None)
    if flag is None:
        return fix
    value = fix.flags[flag]
    assert isinstance(value, int)
    capacity = next((e for e in _edges(sizing) if e >= value), None)
    if capacity is None:
        return fix
    if needed is not None and needed <= capacity:
        target, fits_need = needed, True
    elif capacity >= HEADROOM * value:
        return fix
    else:
        target, fits_need = round_value(capacity // HEADROOM), False
        if target < 16:
            return fix
    command = re.sub(rf"{re.escape(flag)}([ =]){value}\b", rf"{flag}\g<1>{target}",
                     fix.command)
    times = capacity / target
    room = (f"room for {int(times)} requests of that length at once" if times >= 2 else
            "one such request at a time: longer queues and preemption under load")
    predicted = (f"{times:.1f}x concurrency at {target:,} tokens: {room}. {capacity:,} is "
                 f"the edge: the server starts but holds one such request at a time (1.0x) "
                 f"and preempts the rest")
    title = fix.title
    if fits_need:
        title = (f"Set {flag} to {target:,}, the length your application needs "
                 f"({times:.1f}x concurrency at that length)")
    elif len(fix.flags) == 1:
        title = (f"Set {flag} to {target:,}, leaving room for {int(times)} full-length requests "
                 "(or to what your application needs)")
    if needed is not None and not fits_need:
        predicted += (f". Your application needs {needed:,} tokens, more than the "
                      f"{capacity:,} this KV cache holds: to keep that length, give the KV "
                      f"cache more memory instead (the other fixes)")
    return dataclasses.replace(fix, command=command, flags={**fix.flags, flag: target},
                               predicted=predicted, title=title)


def on_command(fix: Fix, engine: str, command: ServerCommand | None, facts: Facts) -> Fix:
    """The fix applied to the server's own command line when the evidence shows it and the
    fix restarts that server: every flag kept, only the fix's changed. The change alone is
    kept beside it ("--max-model-len 131072 -> 32768"; without the command line, from the
    settings the log showed)."""
    template = parse_command(fix.command)
    comment = fix.command.split("#", 1)[1].strip() if "#" in fix.command else ""
    if (fix.flags and template is not None and command is not None
            and command.engine == template.engine):
        current = {flag: getattr(facts, name) for flag, name in _FLAG_FACTS.items()
                   if flag in fix.flags}
        applied = apply_flags(command, template, dict(fix.flags), current)
        text = applied.command + (f"  # {comment}" if comment else "")
        if command.model:
            text = text.replace("of MODEL", f"of {command.model}")
        fix = dataclasses.replace(fix, command=text, change=applied.change, args=applied.args)
    elif fix.flags:
        fix = dataclasses.replace(fix, change=_change_from_facts(fix.flags, facts))
    elif template is not None and (env := _environment(fix.command)):
        # settings the server reads from its environment, on the line that starts it
        base = command.text() if command is not None and command.engine == template.engine \
            else None
        fix = dataclasses.replace(fix, change=f"set {env} in the server's environment",
                                  command=f"{env} {base}" if base else fix.command)
    elif template is not None and template.flags:  # an example value: the flags as written
        fix = dataclasses.replace(fix, change=change_only(
            {f: v for f, v in template.flags if f not in MODEL_FLAGS}))
    held = placeholders(fix.command)
    others = [p for p in held if p != "MODEL"]
    instruction = ""
    if others:
        model = command.model if command and command.model else "the model"
        instruction = (f"Find {comment.replace('MODEL', model)}, then serve it"
                       if comment.startswith(("a ", "an ")) else
                       f"{fix.title} (fill in {', '.join(others)})")
        if fix.flags:
            instruction += f" with {change_only(dict(fix.flags))}"
    elif held and not fix.change:
        instruction = f"{fix.title} ({', '.join(held)} in the command to fill in)"
    return dataclasses.replace(fix, placeholders=held, instruction=instruction)


def in_environment(fix: Fix, env: EnvSettings | None) -> Fix:
    """The fix also as the environment the server ran with, when the paste shows the server
    configured that way: a flag whose variable is set there (--max-model-len as
    MAX_MODEL_LEN), or a fix that is itself environment settings, written as that
    environment writes them (`-e`, a manifest's name/value pair, a compose item)."""
    if env is None:
        return fix
    settings = {env_name(f): env_value(v) for f, v in fix.flags.items()
                if f not in MODEL_FLAGS}
    if not any(name in env.values for name in settings):
        settings = dict(w.split("=", 1) for w in _environment(fix.command).split())
    if not settings:
        return fix
    return dataclasses.replace(fix, env=env.lines(settings))


_ENV_WORD = re.compile(r"^[A-Z][A-Z0-9_]{1,63}=\S{0,200}$")


def _environment(command: str) -> str:
    """The `NAME=value` words a command line starts with."""
    words = []
    for word in command.split():
        if not _ENV_WORD.match(word):
            break
        words.append(word)
    return " ".join(words)


# The flags whose current value the facts hold, to say a change as "old -> new".
_FLAG_FACTS = {"--max-model-len": "max_model_len", "--context-length": "max_model_len",
               "--gpu-memory-utilization": "gpu_memory_utilization",
               "--mem-fraction-static": "mem_fraction_static",
               "--tensor-parallel-size": "tensor_parallel_size",
               "--kv-cache-dtype": "kv_cache_dtype", "--max-num-seqs": "max_num_seqs",
               "--max-num-batched-tokens": "max_num_batched_tokens",
               "--max-total-tokens": "max_total_tokens", "--quantization": "quantization",
               "--dtype": "dtype"}


def _change_from_facts(flags: Mapping[str, object], facts: Facts) -> str:
    out = []
    for flag, value in flags.items():
        name = _FLAG_FACTS.get(flag)
        old = getattr(facts, name) if name else None
        if old is not None and value is not True and str(old) != str(value):
            out.append(f"{flag} {format_value(name or '', old)} -> {value}")
        else:
            out.append(change_only({flag: value}))  # type: ignore[dict-item]
    return "; ".join(out)


def screen(kb: KB, problems: list[ProblemMatch], facts: Facts,
           hits: Mapping[str, Sequence[SignatureHit]]) -> tuple[list[ProblemMatch], list[str]]:
    """The matched problems the facts allow, and the one the facts show although no line
    named it (knowledge/problems: `ruled_out_by`, `implied_by`), with a note for each
    reading set aside. A problem is implied only when the paste names no failure at all: a
    line that does always decides."""
    kept, notes = [], []
    for p in problems:
        prob = kb.problems.get(p.id)
        why = _first_holding(prob.ruled_out_by, facts) if prob else None
        if why is None:
            kept.append(p)
        elif prob is not None:
            notes.append(f"Set aside, {prob.title}: {why}")
    if problems or any(not kb.causes[c].memory for c in _named_causes(kb, hits)):
        return kept, notes
    for prob in kb.problems.values():
        why = _first_holding(prob.implied_by, facts)
        if why is not None:
            kept.append(ProblemMatch(
                id=prob.id, title=prob.title, confidence=IMPLIED_CONFIDENCE,
                evidence=[f"(shown by the log's figures: {why})"],
                summary=prob.short_answer.strip(), phase=prob.phase))
            break
    return kept, notes


def _first_holding(names: Sequence[str], facts: Facts) -> str | None:
    return next((why for name in names if (why := CONDITIONS[name](facts, None)) is not None),
                None)


def _named_causes(kb: KB, hits: Mapping[str, Sequence[SignatureHit]]) -> set[str]:
    """The causes whose own signatures matched (a line that names the cause outright)."""
    return {c.id for c in kb.causes.values() if any(sig.id in hits for sig in c.signatures)}


def place(kb: KB, problems: list[ProblemMatch], facts: Facts, sizing: Sizing | None
          ) -> list[ProblemMatch]:
    """Problems the paste could not place in a phase, or placed only by a person's words,
    given to the problem that claims them when the facts say so (knowledge/problems:
    `claims`): weights that cannot fit the GPU ran out while loading, whatever the sentence
    around a quoted OOM says."""
    out: list[ProblemMatch] = []
    for p in problems:
        taker = next((q for q in kb.problems.values() for c in q.claims
                      if c.problem == p.id and (p.phase is None or p.from_prose)
                      and CONDITIONS[c.when](facts, sizing) is not None), None)
        matched = next((o for o in problems if o.id == taker.id), p) if taker else p
        if taker is None or matched.confidence < p.confidence:
            out.append(p)
            continue
        # a taker the text names as strongly (further down) moves up here with its own lines:
        # where the words do not decide between the two, the facts do
        why = CONDITIONS[next(c.when for c in taker.claims if c.problem == p.id)](facts, sizing)
        out.append(dataclasses.replace(matched, id=taker.id, title=taker.title,
                                       summary=taker.short_answer.strip(),
                                       evidence=[*matched.evidence,
                                                 f"(placed by the facts: {why})"]))
    first: dict[str, ProblemMatch] = {}
    for p in out:
        first.setdefault(p.id, p)
    return list(first.values())


def _match(sc: Scored) -> CauseMatch:
    why = sc.why if sc.supported else "possible: the evidence does not decide it"
    return CauseMatch(id=sc.cause.id, title=sc.cause.title, confidence=round(sc.score, 3),
                      why=why, explanation=sc.cause.explanation, supported=sc.supported)


def rank_causes(kb: KB, problems: list[ProblemMatch], facts: Facts, sizing: Sizing | None,
                hits: Mapping[str, Sequence[SignatureHit]]) -> list[Scored]:
    """Every candidate cause scored, best first: the matched problems' candidates and the
    causes a signature of their own names. Supported causes rank by their evidence; the rest
    keep the order the problems list them in, most common first (the top problem's first),
    and the ruled-out ones come last."""
    order: list[str] = []
    for p in problems:
        prob = kb.problems.get(p.id)
        order += [cid for cid in (prob.causes if prob else []) if cid in kb.causes]
    order += [c.id for c in kb.causes.values() if any(sig.id in hits for sig in c.signatures)]
    order = list(dict.fromkeys(order))
    scored = [score_cause(kb.causes[cid], facts, sizing, hits) for cid in order]

    def key(t: tuple[int, Scored]) -> tuple[int, float, int]:
        at, sc = t
        if sc.supported:
            return (0, -sc.score, at)
        return (1 if sc.ruled_out is None else 2, 0.0, at)

    return [sc for _, sc in sorted(enumerate(scored), key=key)]


def score_cause(cause: Cause, facts: Facts, sizing: Sizing | None,
                hits: Mapping[str, Sequence[SignatureHit]]) -> Scored:
    """The strongest support that holds, a little more for each further one; 0 when a
    rules_out condition holds (unless the log names the cause outright); else the prior."""
    held: list[tuple[float, str]] = []
    for sup in cause.supports:
        if sup.signal is not None:
            if sup.signal in hits:
                held.append((sup.score, quote(shown(hits[sup.signal]))))
        elif (why := CONDITIONS[sup.when or ""](facts, sizing)) is not None:
            held.append((sup.score, why))
    named = False
    for sig in cause.signatures:
        if sig.id in hits:
            hit = shown(hits[sig.id])
            named = named or hit.kind in ("error", "warning")
            held.append((sig.weight, quote(hit)))
    if not named:
        for name in cause.rules_out:
            why = CONDITIONS[name](facts, sizing)
            if why is not None:
                return Scored(cause, 0.0, why, False, ruled_out=why)
    if not held:
        return Scored(cause, cause.prior, "", False)
    held.sort(key=lambda t: -t[0])
    score = min(0.99, held[0][0] + CORROBORATION * (len(held) - 1))
    whys: list[str] = []
    for _, why in held:
        if len(whys) < 2 and not any(why in w or w in why for w in whys):
            whys.append(why)
    return Scored(cause, score, "; ".join(whys), True)


def shown(seen: Sequence[SignatureHit]) -> SignatureHit:
    """The hit to quote: the latest log line over a person's sentence (torch's own advice
    after an error reads as prose, but the error line is the evidence)."""
    return next((h for h in reversed(seen) if h.kind != "prose"), seen[-1])


def quote(hit: SignatureHit) -> str:
    """A line as evidence: the log's words, or the user's."""
    line = hit.line
    if len(line) > QUOTE_CHARS:
        # the part of a long line around what matched
        start = max(0, min(hit.at - QUOTE_CHARS // 4, len(line) - QUOTE_CHARS))
        line = ("…" if start else "") + line[start:start + QUOTE_CHARS] + (
            "…" if start + QUOTE_CHARS < len(line) else "")
    text = " ".join(line.split())
    who = "you wrote" if hit.kind == "prose" else "the log says"
    return f'{who} "{text}" (line {hit.line_no})'


# -- template values -------------------------------------------------------------------------

@struct(slots=True, kw_only=True)
class Planned:
    """The values the planner works out for fix templates, one field per name that
    bot.kb.vocabulary.PLANNED_VALUES declares (and says the meaning of)."""

    model_or_placeholder: str = "MODEL"
    fit_max_model_len: int | None = None
    suggested_max_model_len: int | None = None
    suggested_gpu_memory_utilization: float | None = None
    utilization_fitting_free_memory: float | None = None
    suggested_tensor_parallel_size: int | None = None
    fp8_target_max_model_len: int | None = None
    kv_bytes_per_token_h: str | None = None
    kv_needed_at_fit_gib: float | None = None
    foreign_processes_h: str | None = None
    gpu_count_h: str | None = None
    utilization_effect_h: str | None = None


@struct(slots=True)
class TemplateValues:
    """What a fix template's `{name}` is filled with. The KB names values in data, so they are
    looked up by name here (the loader accepts only bot.kb.vocabulary's names); the most
    worked-out source wins: the planner's value, else the sizing's figure, else its number,
    else the fact. None: not known."""

    facts: Facts
    sizing: Sizing | None
    planned: Planned

    def value(self, name: str) -> object:
        sources: list[object] = [self.planned]
        if self.sizing is not None:
            sources += [self.sizing.extra, self.sizing]
        sources.append(self.facts)
        for source in sources:
            found = getattr(source, name, None)
            if found is not None and found != [] and not isinstance(found, SizingFigures):
                return found
        return None


def template_values(facts: Facts, sizing: Sizing | None,
                    model: ResolvedModel | None = None) -> TemplateValues:
    """The values a template may use; `model` is the diagnosis's model, already looked up."""
    figures = sizing.extra if sizing is not None else SizingFigures()
    count = facts.gpu_count or len(facts.gpus) or None
    p = Planned(
        model_or_placeholder=model_argument(facts.model, figures.model_id),
        foreign_processes_h=foreign_processes_h(facts),
        gpu_count_h=f"{count} GPU{'s' if count != 1 else ''}" if count else None,
        suggested_tensor_parallel_size=(figures.suggested_tensor_parallel_size
                                        or _valid_tp(facts, model, count)))
    values = TemplateValues(facts, sizing, p)
    if sizing is None:
        return values
    bpt = sizing.kv_bytes_per_token
    if bpt:
        p.kv_bytes_per_token_h = fmt_bytes(bpt)
    fit = sizing.max_model_len_that_fits
    if fit:
        p.fit_max_model_len = fit
        p.suggested_max_model_len = round_length(fit)
        block = sizing.block_size or 16
        if bpt:
            p.kv_needed_at_fit_gib = math.ceil(fit / block) * block * bpt / GIB
    fp8_fit = figures.fp8_max_model_len
    if fp8_fit:
        # keep the context the user asked for when fp8 makes it fit; never ask for more
        asked = facts.max_model_len
        p.fp8_target_max_model_len = min(asked, fp8_fit) if asked else fp8_fit
    _utilization_values(p, facts, sizing)
    return values


def model_argument(model: str | None, catalog_id: str | None) -> str:
    """What goes after `vllm serve`: the model as the server was given it, unless that is free
    text ("Llama 3 70B", from a chat message), then the catalog id, else MODEL."""
    if model and not any(c.isspace() for c in model):
        return model
    return catalog_id or "MODEL"


def _valid_tp(facts: Facts, model: ResolvedModel | None, gpus: int | None) -> int | None:
    """Without a memory what-if (e.g. TP does not divide the heads): the largest TP size the
    model accepts on the GPUs the host shows."""
    if not gpus:
        return None
    limit = gpus // (facts.pipeline_parallel_size or 1)
    if model is None:
        heads = facts.num_attention_heads  # the divisibility error names the head count
        fits = [tp for tp in range(1, limit + 1) if heads and heads % tp == 0]
        return fits[-1] if fits else None
    sizes = tp_sizes(model.spec, limit)
    return sizes[-1] if sizes else None


def round_length(fit: int) -> int:
    """A config-friendly length <= fit: a multiple of 1024 (or of 16 below 1024)."""
    step = 1024 if fit >= 1024 else 16
    return max(fit // step * step, min(fit, 16))


def _utilization_values(p: Planned, facts: Facts, s: Sizing) -> None:
    cur = s.extra.gpu_memory_utilization
    need = s.extra.utilization_needed
    total = s.extra.gpu_total_gib
    if need is not None:
        target = min(SAFE_MAX_UTIL, max(SAFE_MIN_UTIL, math.ceil(need * 100 - 1e-9) / 100))
    else:
        target = SAFE_MAX_UTIL  # the top of the safe range when the need is unknown
    if cur is None or target > cur:
        p.suggested_gpu_memory_utilization = target
        avail = s.kv_cache_available_gib
        # the effect with this host's numbers when they are known, else what the flag does
        text = f"the weights + KV budget grows to {target:g} x total GPU memory"
        if cur is not None and total and avail is not None:
            grown = avail + (target - cur) * total
            text = f"{grown:.2f} GiB of KV cache (from {avail:.2f} GiB)"
            if s.kv_cache_needed_gib is not None:
                fits = "fits" if grown >= s.kv_cache_needed_gib else "still does not fit"
                text += f"; one request needs {s.kv_cache_needed_gib:.2f} GiB and {fits}"
        p.utilization_effect_h = text
    free = facts.free_memory_gib if facts.free_memory_gib is not None else (
        s.extra.free_memory_gib)
    if free is not None and total:
        fitting = math.floor(free / total * 100) / 100 - 0.01
        # only a reduction: if the free memory already covers the request, nothing to fit
        if fitting > 0 and (cur is None or fitting < cur):
            p.utilization_fitting_free_memory = round(fitting, 2)


class _Value:
    """A template value that formats itself sensibly unless the template gives a spec."""

    def __init__(self, name: str, value: object) -> None:
        self.name, self.value = name, value

    def __format__(self, spec: str) -> str:
        if spec:
            return format(self.value, spec)
        return format_value(self.name, self.value)


def format_value(name: str, v: object) -> str:
    """Integers plain, GiB with 2 decimals, other floats short ('0.93', '1.3')."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if name.endswith("_gib"):
            return f"{v:.2f}"
        if v == int(v) and abs(v) >= 1:
            return str(int(v))
        return f"{v:.4g}"
    return str(v)


def _fill(template: str, values: TemplateValues) -> str | None:
    """The filled template, or None when a placeholder's value is unknown."""
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    known = {n: values.value(n) for n in names}
    if any(v is None for v in known.values()):
        return None
    return template.format_map({n: _Value(n, v) for n, v in known.items()})


def _flag_value(text: str) -> str | int | float | bool:
    if text == "":
        return True  # an on/off flag such as --enforce-eager
    return parse_value(text)


def fill_fix(fx: FixTemplate, cause_id: str, values: TemplateValues) -> Fix | None:
    """A Fix with every placeholder computed, else its fallback (computed=False), else None."""
    command = _fill(fx.command, values)
    flags: dict[str, str | int | float | bool | None] = {}
    computed = command is not None
    if command is None:
        if fx.fallback_command is None:
            return None
        command = _fill(fx.fallback_command, values)
        if command is None:
            return None
    else:
        for flag, tmpl in fx.flags.items():
            filled = _fill(tmpl, values)
            if filled is None:
                return None
            flags[flag] = _flag_value(filled)
    predicted = (_fill(fx.predicted, values) or "") if computed else ""
    return Fix(id=fx.id, title=fx.title, cause_id=cause_id, command=command, flags=flags,
               predicted=predicted, disruption=fx.disruption, computed=computed)


# Flags whose value can contradict the facts, and the conditions that guard them even when a
# KB entry forgets its `withhold_if` (a fix that cannot work is never proposed).
_GUARDS: dict[str, tuple[str, ...]] = {
    "--kv-cache-dtype": ("kv_cache_already_fp8",),
    "--quantization": ("already_quantized",),
    "--enforce-eager": ("already_eager",),
}
_RAISE_GUARDS = ("foreign_process_holds_memory", "weights_exceed_budget_at_safe_max",
                 "utilization_at_safe_max", "utilization_cannot_fit")
_UTIL_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static")


def withhold_reason(fx: FixTemplate, fix: Fix, facts: Facts, sizing: Sizing | None
                    ) -> str | None:
    names = list(fx.withhold_if)
    for flag, value in fix.flags.items():
        names += _GUARDS.get(flag, ())
        if flag in _UTIL_FLAGS and isinstance(value, (int, float)):
            if value > SAFE_MAX_UTIL:
                return (f"{flag} {value} is above the safe 0.90-0.95 range: too little "
                        "headroom for the CUDA context and transient allocations")
            current = facts.gpu_memory_utilization if flag == _UTIL_FLAGS[0] else (
                facts.mem_fraction_static)
            # unknown: the engine's default, so lowering to fit free memory is not a raise
            if value > (current if current is not None else DEFAULT_UTIL):
                names += _RAISE_GUARDS
        if flag == "--tensor-parallel-size" and isinstance(value, int) and value > (
                facts.tensor_parallel_size or 1):
            names.append("no_spare_gpus")
        if flag == "--max-model-len" and isinstance(value, int) and value <= 0:
            names.append("nothing_fits")
    for name in dict.fromkeys(names):
        fn = CONDITIONS.get(name)
        reason = fn(facts, sizing) if fn else None
        if reason:
            return reason
    return None
