"""Code generation and compilation for targets: C for CPUs, Triton for NVIDIA GPUs."""

from .c_compiler import CCompiler, load_function
from .c_kernel import ArrayArg, CBuilder, CProblem, CRunner, ScalarArg

__all__ = ["ArrayArg", "CBuilder", "CCompiler", "CProblem", "CRunner", "ScalarArg", "load_function"]
