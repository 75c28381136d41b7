"""Studies built on the core: alpha/p sweeps, report tables and staged comparisons of decoders
(``pmi-decode sweep`` and the scripts in ``eval/`` run these)."""
