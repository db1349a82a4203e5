"""The numerics: stability metrics, Fourier features and alignment, the downstream protocol, drift statistics."""
