"""A train recipe for the recipe and CLI tests: the job writes a small report file.

No ``from __future__ import annotations`` here, on purpose: recipes with evaluated annotations
must load as well as those with string annotations.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from vlrl.config import Ge


class TextWriter:
    """Formats the report as lines of text."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """One item per line."""

        prefix: str = "- "
        """Text written before each item."""

        def build(self) -> "TextWriter":
            return TextWriter(self)

    def __init__(self, config: "TextWriter.Config") -> None:
        self.config = config

    def format(self, items: list[str]) -> str:
        return "".join(f"{self.config.prefix}{item}\n" for item in items)


class JsonWriter:
    """Formats the report as a JSON list."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """The items as one JSON array."""

        indent: Annotated[int, Ge(0)] | None = None
        """Spaces per indent level; None writes one line."""

        def build(self) -> "JsonWriter":
            return JsonWriter(self)

    def __init__(self, config: "JsonWriter.Config") -> None:
        self.config = config

    def format(self, items: list[str]) -> str:
        return json.dumps(items, indent=self.config.indent)


class ReportJob:
    """Writes the items, repeated, to a file."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """A one-step job that writes a report."""

        output: str
        """File the report is written to."""

        items: list[str] = field(default_factory=lambda: ["alpha", "beta"])
        """What the report lists."""

        repeat: Annotated[int, Ge(1)] = 1
        """Times the items are listed."""

        writer: TextWriter.Config | JsonWriter.Config = field(default_factory=TextWriter.Config)
        """How the report is formatted; --set writer=JsonWriter swaps it."""

        def build(self) -> "ReportJob":
            return ReportJob(self)

    def __init__(self, config: "ReportJob.Config") -> None:
        self.config = config
        self.writer = config.writer.build()

    def run(self) -> None:
        Path(self.config.output).write_text(self.writer.format(self.config.items * self.config.repeat))


@dataclass(kw_only=True, slots=True)
class Notes:
    """A config that builds nothing, for the CLI's error path."""

    text: str = ""
    """Free text."""


def recipe() -> ReportJob.Config:
    return ReportJob.Config(output="report.txt")


def json_report() -> ReportJob.Config:
    """A variant: the base recipe, written as indented JSON."""
    cfg = recipe()
    cfg.writer = JsonWriter.Config(indent=2)
    return cfg


def notes_only() -> Notes:
    return Notes(text="nothing to run")


def writer_only() -> TextWriter.Config:
    return TextWriter.Config()


def not_a_config() -> dict:
    return {"output": "report.txt"}
