"""The configuration model, the bottom stage: what a kernel is, before any code exists.

``config`` (ConfigBase, ConfigError, Family, Preset, layouts and epilogues), ``rules`` (the rule
tables' predicates), ``arch`` and ``dtypes`` (limits and types), ``families/`` (one subpackage
per kernel family and its registry), ``presets`` (every family's ladder), ``space`` (search
space, pruning and the cheap model), ``registers`` (register estimates) and ``suggest``
(nearest valid configurations). Imports nothing else of gemmgen.
"""
