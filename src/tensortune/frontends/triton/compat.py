"""What `triton.autotune` users and tools read from an autotuner, in Triton's own forms.

- `triton_key(...)`: the key of `kernel.cache` (the key arguments' values, then the dtype
  text of every argument that has one), as Triton computes it;
- `configs_timings(...)`: {triton.Config: [median, p20, p80] milliseconds}, `inf` for a
  configuration that failed, as Triton's `configs_timings`;
- `report(...)`: `TRITON_PRINT_AUTOTUNING` and the `knobs.autotuning.listener` hook for tools;
- `AutotunerError`: Triton's exception type for an autotuner that cannot go on.

Example:
    >>> triton_key(["n"], {"x": None, "n": 8}, ())
    (8,)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from triton.runtime.errors import AutotunerError
except ImportError:  # an older Triton: an error of the same name and message
    class AutotunerError(RuntimeError):  # type: ignore[no-redef]
        def __init__(self, error_message: str | None = None) -> None:
            self.error_message = error_message

        def __str__(self) -> str:
            return f"Autotuner error: {self.error_message or ''}"

NO_CONFIGS_LEFT = ("No valid autotuner configs after pruning. `early_config_prune` should return at "
                   "least one config.")


def triton_key(keys: Sequence[str], named: Mapping[str, Any], arg_names: Iterable[str]) -> tuple[Any, ...]:
    """`triton.autotune`'s cache key: key values, then `str(dtype)` of the arguments that have one."""
    names = set(arg_names) or set(named)
    values = {k: v for k, v in named.items() if k in names}
    key = [values[k] for k in keys if k in values]
    key += [str(v.dtype) for v in values.values() if hasattr(v, "dtype")]
    return tuple(key)


def timings_ms(times: Sequence[float]) -> list[float]:
    """A result's times (seconds) as do_bench's [median, p20, p80] milliseconds."""
    ordered = sorted(times)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return [at(0.5), at(0.2), at(0.8)]


def configs_timings(results: Iterable[Any], triton_config: Any, returned: Mapping[Any, Any] | None = None
                    ) -> dict[Any, Any]:
    """{triton.Config: timings} of measured results (the latest per configuration)."""
    out: dict[Any, Any] = {}
    for r in results:
        if r.extra.get("final"):
            continue
        tc = triton_config(r.config)
        if returned and r.config in returned:
            out[tc] = returned[r.config]
        else:
            out[tc] = timings_ms(r.times) if r.ok and r.times else [math.inf] * 3
    return out


def _knob(name: str) -> Any:
    try:
        from triton import knobs
    except ImportError:
        return None
    return getattr(getattr(knobs, "autotuning", None), name, None)


def verbose() -> bool:
    """TRITON_PRINT_AUTOTUNING (knobs.autotuning.print)."""
    return bool(_knob("print"))


def report(kernel: Any, key: tuple[Any, ...], best: Any, timings: Mapping[Any, Any], seconds: float | None,
           cache_hit: bool) -> None:
    """Print (TRITON_PRINT_AUTOTUNING) and tell the autotuning listener, as Triton does."""
    if verbose() and not cache_hit:
        print(f"Triton autotuning for function {kernel.short_name},\nwith key as {key},\n"
              f"finished after {seconds or 0.0:.2f}s,\nbest config selected: {best};")
    listener = _knob("listener")
    if listener is not None:
        listener(fn=jit_function(kernel.fn), key=key, best_config=best, configs_timings=dict(timings),
                 duration=None if cache_hit else seconds, cache_hit=cache_hit)


def jit_function(fn: Any) -> Any:
    """The `@triton.jit` function under any wrappers (heuristics, ...)."""
    seen = 0
    while type(fn).__name__ not in ("JITFunction", "InterpretedFunction") and hasattr(fn, "fn") and seen < 16:
        fn = fn.fn
        seen += 1
    return fn
