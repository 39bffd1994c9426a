"""Run under the vLLM venv: parse each argv with the real vLLM server parser of the pinned version and build the
engine's config from it (``create_engine_config``), the step where vLLM validates parallel layouts. The model is
a directory holding only a config.json of the right kind (dense or MoE), so nothing is downloaded.

stdin: JSON list of {"argv": [...], "headless": bool}. stdout: JSON list of the parallel config vLLM derived,
or {"error": "..."}.
"""

import contextlib
import io
import json
import os
import sys


def derive(parser, argv, headless):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
            validate_parsed_serve_args(args)
            config = AsyncEngineArgs.from_cli_args(args).create_engine_config(headless=headless)
        p = config.parallel_config
        return {"world_size": p.world_size, "data": p.data_parallel_size, "data_local": p.data_parallel_size_local,
                "data_rank": p.data_parallel_rank, "expert": p.enable_expert_parallel, "nnodes": p.nnodes,
                "node_rank": p.node_rank, "nnodes_within_dp": p.nnodes_within_dp,
                "master_addr": p.master_addr, "master_port": p.master_port,
                "data_address": p.data_parallel_master_ip, "backend": p.distributed_executor_backend}
    except SystemExit:
        return {"error": err.getvalue().strip().splitlines()[-1] if err.getvalue() else "exit"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main():
    # vLLM logs to stdout; the answer goes to the real stdout, everything else to stderr.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    json.dump([derive(parser, job["argv"], job["headless"]) for job in json.load(sys.stdin)], answer)
    answer.flush()


if __name__ == "__main__":
    main()
