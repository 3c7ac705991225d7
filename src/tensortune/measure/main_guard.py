"""Say, before anything is measured, that a script starts tuning without the
`if __name__ == "__main__":` guard that spawned worker processes need.

A spawned process imports the script that started it to find what it runs; a script that
tunes at its top level would then tune again in every worker, which dies before running
anything. `unguarded_call()` finds the script's line that led to the current call and
tells whether it stands under the guard.

Example:
    >>> unguarded_call() is None  # not called from a script's top level
    True
"""

from __future__ import annotations

import ast
import sys


def _script() -> tuple[object, str, ast.Module] | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or getattr(main, "__name__", "") != "__main__":
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return main, path, ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _under_guard(tree: ast.Module, line: int) -> bool:
    return any(isinstance(node, ast.If) and _is_main_guard(node) and node.lineno <= line <= (node.end_lineno or 0)
               for node in tree.body)


def unguarded_call() -> str | None:
    """`FILE:LINE` of the script's top-level line that led here, if it is not under
    `if __name__ == "__main__":`; None when called otherwise (from a function, a module,
    an interactive session, or under the guard)."""
    script = _script()
    if script is None:
        return None
    main, path, tree = script
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            break
        frame = frame.f_back
    if frame is None or _under_guard(tree, frame.f_lineno):
        return None
    return f"{path}:{frame.f_lineno}"


def defined_under_guard(fn: object) -> str | None:
    """`FILE:LINE` of `fn`'s definition when the script defines it under the guard, where a
    worker importing the script cannot find it; None otherwise."""
    code = getattr(fn, "__code__", None)
    script = _script()
    if code is None or script is None or getattr(fn, "__module__", None) != "__main__":
        return None
    _, path, tree = script
    return f"{path}:{code.co_firstlineno}" if _under_guard(tree, code.co_firstlineno) else None


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def check_guarded(what: str, *sent: object) -> None:
    """Raise RuntimeError, in one line, when `what` is started unguarded from a script, or
    when a function `sent` to the workers is defined under the guard."""
    where = unguarded_call()
    if where is not None:
        raise RuntimeError(f"{where}: {what} runs candidates in spawned worker processes, which import this script; "
                           "put the code that tunes under `if __name__ == \"__main__\":`")
    for fn in sent:
        if (where := defined_under_guard(fn)) is not None:
            raise RuntimeError(f"{where}: {getattr(fn, '__name__', fn)} is defined under `if __name__ == "
                               "\"__main__\":`, which worker processes do not run when they import the script; "
                               "define it at the top level")
