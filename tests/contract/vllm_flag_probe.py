"""Run under the vLLM venv: how vLLM's own server parser resolves single extraArgs tokens.

stdin: a JSON list of argument lists (a token, with a value after it where the token needs one). stdout: a
JSON list, per argument list what argparse made of each argument string starting with "-" that it saw once
FlexibleArgumentParser had rewritten the list: a flag's ``dest``, ``"ambiguous"`` (argparse
exits), ``"unknown"`` (an unrecognized flag: argparse exits) or ``"positional"`` (taken as the ``model_tag``
positional, which the server ignores). Read from argparse's own ``_parse_optional``, the step that classifies
each argument string, so abbreviations are resolved exactly as the server would.
"""

import contextlib
import io
import json
import sys


def classify(result) -> str:
    if result is None:
        return "positional"
    if isinstance(result, list):  # Python >= 3.12.7 returns a list of candidates
        if len(result) > 1:
            return "ambiguous"
        result = result[0]
    action = result[0]
    return "unknown" if action is None else action.dest


def resolve(parser, argv: list[str]) -> list[str]:
    seen: list[str] = []
    original = parser._parse_optional

    def recording(arg_string):
        try:
            result = original(arg_string)
        except SystemExit:
            seen.append("ambiguous")
            raise
        if arg_string.startswith("-"):  # values ("8", "{...}") are classified as positionals too: skip them
            seen.append(classify(result))
        return result

    parser._parse_optional = recording
    try:
        # --help prints to stdout, errors go to stderr: neither belongs in the answer
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except (SystemExit, IndexError):  # IndexError: vLLM's rewrite of a dotted flag given no value
        pass
    finally:
        del parser._parse_optional
    return seen


def model_tag(parser, argv: list[str]):
    """With ``--model-tag``: what the server's parse leaves in the ``model_tag`` positional (which the server never
    reads), or the parser's error."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(["--model", "m", *argv]).model_tag
    except SystemExit:
        return {"error": err.getvalue().strip().splitlines()[-1]}


def main() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    probe = model_tag if "--model-tag" in sys.argv else resolve
    json.dump([probe(parser, argv) for argv in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
