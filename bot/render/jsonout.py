"""The answer as `--json` prints it: the Diagnosis (the contract, docs/contracts.md) with the
presentation's sections beside it, the same words the terminal and Slack show."""

from __future__ import annotations

import dataclasses

from bot.render.present import History, Presentation, present
from bot.schema import AnswerLine, AnswerSection, Diagnosis, Presented, to_json


def presented(p: Presentation) -> Presented:
    return Presented(title=p.title, sections=[
        AnswerSection(key=s.key, title=s.title, first=s.first,
                      lines=[AnswerLine(text=line.plain, kind=line.kind) for line in s.lines])
        for s in p.sections])


def diagnosis_json(d: Diagnosis, history: History | None = None) -> str:
    shown = dataclasses.replace(d, presented=presented(present(d, history, host=d.host)))
    return to_json(shown, indent=2)
