"""AutoMegaKernel: fuse chains of PyTorch ops into one autotuned Triton kernel."""

__version__ = "0.1.0"
