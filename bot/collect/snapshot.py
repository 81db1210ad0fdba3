"""A host's snapshot: everything collected, and how it becomes the core's Evidence.

The snapshot keeps what was read (redacted), what could not be read (one line each) and every
command's result for the audit trail. `evidence()` hands the core the host's numbers as Facts
(which win over numbers read from text) and the text the knowledge base matches: the nvidia-smi
output or failure, NVML failures written as nvidia-smi prints them, the server's command line
and its recent logs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.collect.execute import CommandResult
from bot.collect.gpu import GpuReading
from bot.collect.server import Proc, Server, belongs, flags_to_facts
from bot.schema import Evidence, Facts, GpuProcess


class Snapshot(BaseModel):
    """One host, collected: what was read, what was not (and why), every command run."""

    model_config = ConfigDict(extra="forbid")

    host: str
    method: Literal["ssh", "local"]
    gpu: GpuReading | None = None
    server: Server | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    engine_version: str | None = None
    table: str = ""  # nvidia-smi as printed, or its failure text
    logs: str = ""
    logs_source: str = ""
    model_config_json: dict[str, Any] | None = None
    unread: list[str] = Field(default_factory=list)  # what could not be read, and why
    commands: list[CommandResult] = Field(default_factory=list)
    error: str | None = None  # the host could not be collected at all (one line)
    duration_s: float = 0.0

    def classify(self, procs: dict[int, Proc]) -> None:
        """GPU processes, each marked as the server's or foreign (by the process tree and the
        container, not by name), with its container and, where the GPU did not say, its name."""
        if self.gpu is None or self.gpu.processes is None:
            return
        index = {g.uuid: g.index for g in self.gpu.physical if g.uuid}
        for gp in self.gpu.processes:
            p = procs.get(gp.pid) if gp.pid is not None else None
            self.processes.append(dataclasses.replace(
                gp, gpu_index=gp.gpu_index if gp.gpu_index is not None
                else index.get(gp.gpu_uuid or ""),
                name=gp.name or (p.args.split()[0] if p and p.args else None),
                container=p.container[:12] if p and p.container else None,
                is_server=belongs(self.server, procs, gp.pid)))

    def facts(self) -> Facts:
        """The host's numbers. Free memory is left to the log: the host's free memory now is
        not what the server saw when it started."""
        values: dict[str, Any] = {}
        if self.server is not None:
            values.update(flags_to_facts(self.server))
        if self.engine_version:
            values.setdefault("engine_version", self.engine_version)
        g = self.gpu
        if g is not None:
            values.update(driver_version=g.driver_version, cuda_version=g.cuda_version,
                          gpus=g.gpus, gpu_count=len(g.physical) or None)
            limit = g.limiting()
            if limit is not None:
                values.update(gpu_name=limit.name, gpu_total_gib=_gib(limit.total_mib),
                              gpu_used_gib=_gib(limit.used_mib))
        if self.processes:
            values["processes"] = self.processes
        if g is not None and g.processes is not None:
            foreign = [p.used_mib or 0.0 for p in self.processes if not p.is_server]
            values["foreign_processes_gib"] = round(sum(foreign) / 1024, 2)
        return Facts(**{k: v for k, v in values.items() if v is not None})

    def text(self) -> str:
        """What the knowledge base reads: GPU state or its failure, the command line, logs."""
        parts = []
        if self.gpu is not None and self.gpu.lines:
            parts.append("\n".join(self.gpu.lines))
        if self.table:
            parts.append(f"$ nvidia-smi\n{self.table.rstrip()}")
        if self.server is not None and self.server.argv:
            parts.append(f"# server command line ({self.server.argv_source})\n"
                         + " ".join(self.server.argv))
        if self.logs:
            parts.append(f"# logs ({self.logs_source})\n{self.logs.rstrip()}")
        return "\n\n".join(parts) + "\n"

    def evidence(self) -> Evidence:
        notes = [f"could not read: {u}" for u in self.unread]
        if self.error:
            notes.insert(0, self.error)
        return Evidence(source="collector", host=self.host, text=self.text(),
                        collected=self.facts(), model_config_json=self.model_config_json,
                        notes=notes)

    def read_model_config(self, result: CommandResult) -> None:
        if not result.ok:
            self.unread.append(f"the model's config.json: {why(result)}")
            return
        try:
            value = json.loads(result.output)
        except ValueError:
            self.unread.append("the model's config.json: not valid JSON")
            return
        if isinstance(value, dict):
            self.model_config_json = value


def _gib(mib: float | None) -> float | None:
    return round(mib / 1024, 2) if mib is not None else None


def why(result: CommandResult) -> str:
    """One line: why a command did not give what was asked."""
    if result.error:
        return result.error
    first = next((ln for ln in result.output.splitlines() if ln.strip()), "")
    return f"{result.id} exited {result.rc}" + (f": {first[:200]}" if first else "")


