"""GPU state as the collector reads it: from nvidia-smi output or from NVML, in one shape.

nvidia-smi output is parsed by the evidence layer (bot.evidence.nvidia_smi), the same
parser that reads a pasted nvidia-smi, so a host and a paste can never disagree about a
number. The collector only labels each output with the command that produced it: the extractor
reads header-less CSV when it sees the `--query-...=fields` command line before it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.collect import catalog
from bot.schema import GpuInfo, GpuProcess


class GpuReading(BaseModel):
    """What one GPU source read. `processes` None: the process list could not be read;
    `lines` are failure texts for the knowledge base (as nvidia-smi prints them)."""

    model_config = ConfigDict(extra="forbid")

    source: str
    gpus: list[GpuInfo] = Field(default_factory=list)
    processes: list[GpuProcess] | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    lines: list[str] = Field(default_factory=list)
    unread: list[str] = Field(default_factory=list)

    @property
    def physical(self) -> list[GpuInfo]:
        return [g for g in self.gpus if g.mig_instance is None]

    def limiting(self) -> GpuInfo | None:
        """The smallest physical GPU: the one that limits a server sharded over them all."""
        sized = [g for g in self.physical if g.total_mib is not None]
        return min(sized, key=lambda g: g.total_mib or 0.0) if sized else None


def from_nvidia_smi(query: str | None, apps: str | None, table: str | None) -> GpuReading:
    """The three catalog outputs (None: that command failed), read by the evidence extractor."""
    from bot.evidence import extract_facts

    parts = []
    if query is not None:
        parts.append(_labelled(catalog.gpu_query(), query))
    if apps is not None:
        parts.append(_labelled(catalog.gpu_apps(), apps))
    if table is not None:
        parts.append(f"$ nvidia-smi\n{table.rstrip()}")
    facts = extract_facts("\n\n".join(parts) + "\n")
    # A process appears twice when both the CSV (with its GPU's uuid) and the table list it;
    # the CSV rows are the complete ones, the table's are the fallback.
    procs = ([p for p in facts.processes if p.gpu_uuid] if apps is not None
             else facts.processes if table is not None else None)
    return GpuReading(source="nvidia-smi", gpus=facts.gpus, processes=procs,
                      driver_version=facts.driver_version, cuda_version=facts.cuda_version)


def _labelled(cmd: catalog.Command, csv: str, rows: int = 30) -> str:
    """Header-less CSV with its command line before every `rows` rows: the extractor reads
    only a bounded number of lines after the line that names the columns. nvidia-smi's
    WARNING lines (rc 14, infoROM) are not rows; the table still shows them."""
    lines = [ln for ln in csv.rstrip().splitlines() if not ln.startswith("WARNING:")]
    return "\n".join(f"$ {cmd.display}\n" + "\n".join(lines[i:i + rows])
                     for i in range(0, max(len(lines), 1), rows))
