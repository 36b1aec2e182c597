"""Many requests decoded together: the engine (slots, a scheduler thread, one forward pass per
step), requests and their sampling parameters, the prefix and completion caches, and the metrics."""
from .engine import Engine, QueueFullError
from ..sampling.params import SamplingParams
from .request import Request

__all__ = ["Engine", "QueueFullError", "Request", "SamplingParams"]
