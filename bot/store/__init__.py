"""The incident store: every diagnosis remembered, grouped and searchable.

The public API is re-exported here lazily (PEP 562 `__getattr__`), so `import bot.store` costs
nothing and SQLAlchemy is imported only when a function that needs it is first used; the
`inferbot diagnose` start-up path stays light and the answer is printed before the database
is touched.

    from bot.store import record, history, resolve, feedback, record_command, upgrade
    from bot.store import prepare  # `inferbot serve`, before it listens
    from bot.store import claim_event_key, thread_incident, incident_origin  # Slack's lookups
    from bot.store import incident_view  # an answer shown again (Details, "This fixed it")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.store.db import SchemaTooNew as SchemaTooNew
    from bot.store.db import StoreUnavailable as StoreUnavailable
    from bot.store.db import database_problem as database_problem
    from bot.store.repository import FIX_FAILED as FIX_FAILED
    from bot.store.repository import REPEAT as REPEAT
    from bot.store.repository import WRONG as WRONG
    from bot.store.repository import IncidentOrigin as IncidentOrigin
    from bot.store.repository import IncidentView as IncidentView
    from bot.store.repository import claim_event_key as claim_event_key
    from bot.store.repository import (
        drain as drain,
    )
    from bot.store.repository import (
        feedback as feedback,
    )
    from bot.store.repository import (
        get_group as get_group,
    )
    from bot.store.repository import (
        history as history,
    )
    from bot.store.repository import incident_origin as incident_origin
    from bot.store.repository import incident_view as incident_view
    from bot.store.repository import (
        open_store as open_store,
    )
    from bot.store.repository import prepare as prepare
    from bot.store.repository import (
        record as record,
    )
    from bot.store.repository import (
        record_command as record_command,
    )
    from bot.store.repository import (
        record_commands as record_commands,
    )
    from bot.store.repository import (
        resolve as resolve,
    )
    from bot.store.repository import set_permalink as set_permalink
    from bot.store.repository import thread_incident as thread_incident
    from bot.store.repository import (
        upgrade as upgrade,
    )
    from bot.store.views import (
        GroupInfo as GroupInfo,
    )
    from bot.store.views import (
        HistoryRow as HistoryRow,
    )
    from bot.store.views import (
        RecordResult as RecordResult,
    )
    from bot.store.views import (
        format_history_json as format_history_json,
    )
    from bot.store.views import (
        format_history_text as format_history_text,
    )
    from bot.store.views import (
        parse_ref as parse_ref,
    )
    from bot.store.views import (
        parse_since as parse_since,
    )

_EXPORTS = {
    "record": "bot.store.repository",
    "record_command": "bot.store.repository",
    "record_commands": "bot.store.repository",
    "history": "bot.store.repository",
    "resolve": "bot.store.repository",
    "feedback": "bot.store.repository",
    "get_group": "bot.store.repository",
    "upgrade": "bot.store.repository",
    "drain": "bot.store.repository",
    "open_store": "bot.store.repository",
    "prepare": "bot.store.repository",
    "StoreUnavailable": "bot.store.db",
    "database_problem": "bot.store.db",
    "claim_event_key": "bot.store.repository",
    "thread_incident": "bot.store.repository",
    "incident_origin": "bot.store.repository",
    "IncidentOrigin": "bot.store.repository",
    "incident_view": "bot.store.repository",
    "REPEAT": "bot.store.repository",
    "FIX_FAILED": "bot.store.repository",
    "WRONG": "bot.store.repository",
    "set_permalink": "bot.store.repository",
    "IncidentView": "bot.store.repository",
    "SchemaTooNew": "bot.store.db",
    "RecordResult": "bot.store.views",
    "HistoryRow": "bot.store.views",
    "GroupInfo": "bot.store.views",
    "format_history_text": "bot.store.views",
    "format_history_json": "bot.store.views",
    "parse_since": "bot.store.views",
    "parse_ref": "bot.store.views",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bot.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
