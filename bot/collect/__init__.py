"""Collecting evidence from GPU hosts: the inventory, SSH (paramiko), local NVML, and the fixed,
read-only command catalog. paramiko and pynvml are imported only when a host is contacted.

`check(host, kb=..., channel=...)` is the chat adapters' entry point; `inferbot check` uses
`bot.collect.runner.check_hosts` for many hosts at once.
"""

from __future__ import annotations

from bot.collect.runner import CollectFailed, check

__all__ = ["CollectFailed", "check"]
