"""Collecting evidence from GPU hosts: the inventory, SSH (paramiko), local NVML, and the fixed,
read-only command catalog. paramiko and pynvml are imported only when a host is contacted.

`bot.collect.runner.check_hosts` collects many hosts at once; which hosts may be asked for,
and what becomes of what they give, is `bot.flows.check_hosts`'s.
"""
