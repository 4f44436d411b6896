"""The error of a setting the project cannot use, in a module of its own so
that the modules below the settings (the engines' profiles, AWS signing)
raise it without importing the settings that read them."""

from __future__ import annotations


class SettingsError(ValueError):
    """An environment variable holds a value the project cannot use."""
