"""Specs from what a Python user has at hand: a dict, YAML text, a path, or a Spec."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Union

from ._core import Spec

SpecSource = Union[Spec, Mapping[str, Any], str, "os.PathLike[str]"]


def spec(source: SpecSource) -> Spec:
    """Returns the validated Spec that `source` describes (configs/README.md has every field).

    - a ``Spec``: itself;
    - a dict, e.g. ``{"head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16", "causal": True}``:
      its JSON text (one key a line, in the dict's order) is read as YAML, which JSON is, so
      every rule and message is the YAML reader's; errors name ``<dict>:LINE:COLUMN``, line 2
      being the first key;
    - a ``str`` or ``os.PathLike`` naming a file (a one-line string ending in .yaml / .yml,
      or that is an existing file): the file;
    - any other ``str``: YAML text (errors name ``<string>:LINE:COLUMN``).

    Raises SpecError for an invalid spec (unknown keys included, with a "did you mean"),
    IoError for a file that cannot be read, TypeError for anything else.
    """
    if isinstance(source, Spec):
        return source
    if isinstance(source, Mapping):
        return Spec.from_yaml(json.dumps(dict(source), indent=2), "<dict>")
    if isinstance(source, os.PathLike):
        return Spec.from_file(os.fspath(source))
    if isinstance(source, str):
        one_line = "\n" not in source
        if one_line and (source.endswith((".yaml", ".yml")) or os.path.isfile(source)):
            return Spec.from_file(source)
        return Spec.from_yaml(source)
    raise TypeError(f"flashjit.spec: expected a Spec, dict, YAML text or path, got {type(source).__name__}")
