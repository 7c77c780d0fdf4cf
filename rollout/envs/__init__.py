"""Environments for multi-turn episodes: the public interface (``base``), the registry, the built-ins."""
