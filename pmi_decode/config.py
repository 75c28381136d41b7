"""YAML configs for the runnable scripts: defaults, then the file, then ``key=value`` overrides.

One loader so every script rejects a misspelt key the same way, naming the file and the keys it
knows, instead of silently running with a default.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml


def parse_value(text: str):
    """A YAML scalar; numbers such as 1e-4 (a string to YAML 1.1) become floats."""
    value = yaml.safe_load(text) if text != "" else ""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def apply_override(config: dict, assignment: str, known) -> None:
    """Set ``key=value`` in ``config``; dotted keys reach nested mappings."""
    if "=" not in assignment:
        raise ValueError(f"--set expects key=value, got {assignment!r}")
    key, value = assignment.split("=", 1)
    parts = key.strip().split(".")
    if parts[0] not in known:
        raise ValueError(f"unknown config key {parts[0]!r}; known keys: {', '.join(sorted(known))}")
    node = config
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = parse_value(value)


def load_config(defaults: dict, path=None, overrides=(), also=()) -> dict:
    """``defaults``, updated by the YAML file at ``path`` (if any), then by ``overrides``. ``also``:
    keys known without a default of the script's (a decoding script passes
    ``DecodeConfig.file_option_names()``, so every decoding option can be set, the library's
    default applying otherwise)."""
    config = copy.deepcopy(defaults)
    known = set(defaults) | set(also)
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from None
        except OSError as err:
            raise ValueError(f"{path}: cannot read the config ({err.strerror})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of config keys")
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown config keys {sorted(unknown)}; known: {sorted(known)}")
        config.update(data)
    for assignment in overrides:
        apply_override(config, assignment, known)
    return config


def run_script(main, argv=None) -> int:
    """Run a script's ``main(argv)`` as a command: an error in what the caller gave (a config, a
    file, a model name: ``ValueError``, ``OSError``, ``RuntimeError``; a missing optional package:
    ``ImportError``) is one line on stderr and
    exit status 1, as ``pmi-decode`` reports them, not a traceback; Ctrl-C says how to resume.
    ``PMI_DECODE_TRACEBACK=1`` shows the traceback."""
    import os
    import sys

    name = Path(sys.argv[0]).name
    try:
        result = main(argv)
    except (ValueError, OSError, RuntimeError, ImportError) as err:  # ImportError: an optional package
        if os.environ.get("PMI_DECODE_TRACEBACK") == "1":
            raise
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


def unknown_name_error(where: str, what: str, name: str, known) -> ValueError:
    """The error for a misspelt key or option: ``"{where}: unknown {what} 'x'"`` and the closest
    known name, or all of them when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {sorted(known)}"
    return ValueError(f"{where}: unknown {what} {name!r}{hint}")
