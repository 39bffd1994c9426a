"""The serving benchmark (``qwen-fleet bench-serving``): the seeds' tuning loop made a tool.

For each engine setting (``maxNumSeqs``, ``maxNumBatchedTokens``) a target serves the model with that setting
and vLLM's own client (``vllm bench serve``) measures it; the sweep raises the settings until the output
throughput stops rising, and a stated rule recommends one. Pure parts: ``sweep`` (which setting next, which
one to recommend), ``client`` (the client's command line and the result JSON it saves), ``table`` (the
report). The cluster target (``cluster``) patches a QwenInference and runs the client in a Job; the local
target (``bench/serving.py``) starts a CPU engine per setting. docs/bench-serving.md explains the loop.
"""
