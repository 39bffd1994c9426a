"""qwen-fleet: a Kubernetes operator that turns a QwenInference resource into a vLLM fleet."""

__version__ = "0.1.0"
