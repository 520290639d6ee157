"""Print the rule catalogue (Markdown) that docs/correlation-engine.md holds."""

from fabricscope.service.correlate.rules import catalogue_markdown

print(catalogue_markdown(), end="")
