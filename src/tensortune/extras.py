"""Optional dependencies: a feature whose extra is not installed says, in one line, which
extra to install.

Example:
    >>> import sys
    >>> try:
    ...     with needs_extra("a plot"):
    ...         raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    ... except MissingExtra as exc:
    ...     print(exc)
    a plot needs matplotlib, which is not installed: pip install 'tensortune[plot]'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# top-level module -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    "torch": "torch",
    "triton": "triton",
    "matplotlib": "plot",
    "kernel_tuner": "peers",
    "optuna": "peers",
    "transformers": "test",
}


class MissingExtra(ModuleNotFoundError):
    """A feature was used whose optional dependency is not installed; the message names the extra."""


def hint(module: str, feature: str, extra: str | None = None) -> str:
    """The one line that says which extra installs `module`, which `feature` needs."""
    root = module.split(".")[0]
    extra = extra or EXTRA_OF.get(root)
    where = f"pip install 'tensortune[{extra}]'" if extra else f"pip install {root}"
    return f"{feature} needs {root}, which is not installed: {where}"


@contextlib.contextmanager
def needs_extra(feature: str, extra: str | None = None) -> Iterator[None]:
    """Turn a missing optional module, imported inside the block, into `MissingExtra`.

    `extra` names the extra to install (default: the one that provides the missing
    module). A missing module that no extra provides is left as it is (that is a bug,
    not a missing install)."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root not in EXTRA_OF:
            raise
        raise MissingExtra(hint(root, feature, extra), name=exc.name) from None
