"""Typed errors shared by every collector. Raise them with ``from`` so the cause is kept."""


class FabricscopeError(Exception):
    """Base class of every error fabricscope raises on purpose."""


class ConfigError(FabricscopeError):
    """A configuration file or argument is invalid; the message names the field."""


class CollectionError(FabricscopeError):
    """Fetching from a device or file failed (timeout, refused, permission)."""


class ParseError(FabricscopeError):
    """A device reply or file could not be understood."""
