"""What users write: plain callables, Triton kernels, tensor expressions."""
