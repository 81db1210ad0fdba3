"""inferbot: diagnose LLM-inference incidents from logs and GPU hosts."""

__version__ = "0.1.0"
