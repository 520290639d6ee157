"""The shared core: the vocabulary every role (hook, agent, switch collector, server) speaks.

Nothing here imports a collector or the server; ``make lint`` (import-linter) keeps it so.
"""
