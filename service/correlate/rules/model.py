"""A rule of the engine as data (the catalogue's entries)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One decision rule: `id` (written into answers), `precedence` (the order the engine applies
    them: lower first; within a family the first that holds decides), `claim` (what it says and
    why, one sentence or two), `inputs` (what it reads), `constants` (the tunable constants it
    owns, `NAME` in constants.py or `EngineConfig.field` / `SeqParams.field`), `switches` (the
    boolean fields that turn it, or a part of it, off for an ablation)."""

    id: str
    precedence: int
    claim: str
    inputs: tuple[str, ...]
    constants: tuple[str, ...]
    switches: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class Shared:
    """A number several rules use because they state one principle (constants.py's shared section):
    `name` in constants.py, `claim` (the principle, one sentence), `aliases` (the rules' own constants
    whose value it is: they stay nameable so a test or an ablation can vary one rule alone, but they
    add no number of their own)."""

    name: str
    claim: str
    aliases: tuple[str, ...]
