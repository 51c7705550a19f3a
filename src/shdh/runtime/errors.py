"""The project's own error types, in a module of their own so that the core (training,
hashers, plan) can raise them without importing the settings loader and its YAML parser."""


class ConfigError(ValueError):
    """A params or profile file is missing a field or holds a value of the wrong kind."""
