"""The batch runner: what a QwenBatch Job runs (`qwen-fleet batch-run`). Standard library only."""
