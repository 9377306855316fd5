"""A GPT-style decode loop on hal: `Decoder(device, random_weights())`, `reset(prompt)`, `generate(k)`, checked
against the numpy `reference_generate` (see model.py, kernels.py and runner.py)."""

from examples.decode.model import Config, Reference, Weights, random_weights, reference_generate
from examples.decode.runner import Decoder

__all__ = ["Config", "Decoder", "Reference", "Weights", "random_weights", "reference_generate"]
