"""The answer as `--json` prints it: the Diagnosis (the contract, docs/contracts.md) with the
presentation's sections beside it, the same words the terminal and Slack show."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bot.render.present import History, Presentation, present
from bot.schema import AnswerLine, AnswerSection, Diagnosis, Presented, to_data


def presented(p: Presentation) -> Presented:
    return Presented(title=p.title, sections=[
        AnswerSection(key=s.key, title=s.title, first=s.first,
                      lines=[AnswerLine(text=line.plain, kind=line.kind) for line in s.lines])
        for s in p.sections])


def diagnosis_data(d: Diagnosis, history: History | None = None) -> dict[str, Any]:
    """The contract's object for `d`, its presented sections included."""
    return to_data(dataclasses.replace(d, presented=presented(present(d, history, host=d.host))))


def diagnosis_json(d: Diagnosis, history: History | None = None) -> str:
    return json.dumps(diagnosis_data(d, history), indent=2, ensure_ascii=False)
