"""Code generation: the Jinja environment and ``render(cfg) -> str`` (templates live in the
top-level ``templates/``). Imports only ``gemmgen.model``.
"""
